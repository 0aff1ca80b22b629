/* The breakdown ladder: from the upper bound to LinuxFP's router one step
 * of the real datapath at a time, at XDP or at TC (LFP_HOOK_*), so the cost of each step is the
 * difference between two neighbouring rungs measured in the same run.
 *
 * Every rung calls the datapath's own functions (router.h, fib_cache.h,
 * transmit.h: the loader puts them in front of this file, with the
 * pipeline's counter ids) and runs against the maps a running controller
 * keeps for the namespace, on the controller's own link
 * (linuxfp/bench/breakdown.py): a rung costs what that step costs in the
 * router, and the ladder follows the router as it changes. LADDER (1..9)
 * selects how many rungs are climbed:
 *   1 rewrite MACs, redirect (XDP: through the controller's devmap; TC:
 *     bpf_redirect()): the upper bound
 *   2 + the pipeline's start (its namespace check, the ingress's counters)
 *       and parse (Ethernet with its VLAN checks, IPv4), TTL check and
 *       decrement (rung 1 already reads the context)
 *   3 + the lease check (lease.h, with the address generation), no tcx
 *       program of another tool on the ingress (common.h)
 *   4 + the device IP sees (lfp_ifaces): addressed to this host, no mark
 *   5 + IPv4 header validation (lengths, checksum, fragments) and martians
 *   6 + forwarding switches, local source (prefilter, then hash), route MTU cap
 *   7 + the FIB cache's probe: the kernel's generations through
 *       bpf_cast_to_kern_ctx(), the per-CPU epoch (and the storm's
 *       check), the slot
 *   8 + the answer served from the cache, probe included (looked up and
 *       kept on a miss, the probe skipped during a storm of misses:
 *       lfp_fib_answer()) in place of rung 1's constants, hits counted
 *   9 + transmit (neighbour state, TTL, rewrite, redirect, counted) in place
 *       of the rungs' own rewrite
 * The real pipeline then adds what no rung has: the VLAN metadata kfunc
 * (XDP), ports and ICMP checks, the multipath L4-hash check, GSO, hairpin
 * and source checks, priority. Rungs 7-9 need the cache on: where the
 * probe refuses they count fib_cache_off (or fib_cache_storm), as the
 * router does, and hand the packet to the kernel (the bench then refuses
 * the measurement). */
#ifndef LADDER
#error "LADDER must be defined"
#endif

volatile const __u8 ladder_dst_mac[ETH_ALEN];  /* the sink's MAC */
volatile const __u8 ladder_src_mac[ETH_ALEN];  /* the DUT egress MAC */
volatile const __u32 ladder_egress = 0;        /* egress ifindex */

/* (a volatile const copied with memcpy loses the volatile, and clang folds
 * its zero initial value: byte loads keep it) */
static __always_inline void ladder_copy_mac(__u8 *dst, const volatile __u8 *src)
{
#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		dst[i] = src[i];
}

#ifdef LFP_HOOK_XDP
#define LADDER_SECTION "xdp"
#else
#define LADDER_SECTION "tc"
#endif

static __always_inline int ladder_redirect(__u32 egress)
{
#ifdef LFP_HOOK_XDP
	return bpf_redirect_map(&lfp_tx_ports, egress, XDP_PASS);
#else
	return bpf_redirect(egress, 0);
#endif
}

#define LADDER_PASS lfp_verdict(&pkt, LFP_PASS)

/* Bound to the controller's lease map (breakdown.py; the low rungs read
 * none): on the controller's link it uses the map that makes a program
 * LinuxFP's own, not a tcx program of another tool (linuxfp/state/tcx.py). */
SEC(LADDER_SECTION)
int lfp_ladder(lfp_ctx_t *ctx)
{
	struct lfp_pkt pkt;
	struct ethhdr *eth;
	__u32 egress = ladder_egress;

#if LADDER >= 2
	if (lfp_pkt_init(&pkt, ctx))    /* with the interface's counters, as the pipeline starts */
		return LADDER_PASS;
#else
	pkt.ctx = ctx;
	pkt.data = (void *)(long)ctx->data;
	pkt.data_end = (void *)(long)ctx->data_end;
#endif
	eth = lfp_eth(&pkt);
	if (!eth)
		return LADDER_PASS;
#if LADDER >= 2
	struct iphdr *ip;

#if LADDER >= 3
	if (lfp_lease_check(lfp_kern_net(&pkt)) != LFP_LEASE_OK || lfp_tcx_others_on_ingress(&pkt))
		return LADDER_PASS;
#endif
	if (lfp_parse_l2(&pkt) != LFP_NEXT || pkt.l3_proto != bpf_htons(ETH_P_IP))
		return LADDER_PASS;
	eth = lfp_eth(&pkt);
	ip = lfp_ipv4(&pkt);
	if (!eth || !ip)
		return LADDER_PASS;
#if LADDER >= 4
	struct lfp_iface *in;

	if (lfp_l3_ingress_refusal(&pkt, eth, &in) != LFP_CNT_MAX)
		return LADDER_PASS;
#endif
#if LADDER >= 5
	if (lfp_ipv4_header_refusal(&pkt, ip) != LFP_CNT_MAX)
		return LADDER_PASS;
#endif
#if LADDER >= 6
	if (lfp_ipv4_forward_refusal(in, ip, bpf_ntohs(ip->tot_len)) != LFP_CNT_MAX)
		return LADDER_PASS;
#endif
	if (ip->ttl <= 1)
		return LADDER_PASS;
#if LADDER >= 7
	struct bpf_fib_lookup fib = {};
	struct lfp_fib_probe probe;

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = pkt.l3_ifindex;
#if LADDER == 7
	if (!lfp_fib_probe_init(&pkt, &fib, &probe)) {
		lfp_count(&pkt, lfp_fib_unserved_reason(0, probe.storm));      /* as lfp_fib_answer() counts it */
		return LADDER_PASS;
	}
#endif
#endif
#if LADDER >= 8
	struct lfp_fib_entry *cached;

	if (lfp_fib_answer(&pkt, &fib, &probe, &cached) != LFP_CNT_MAX)
		return LADDER_PASS;
	pkt.fwd.egress = fib.ifindex;
	pkt.fwd.nexthop = fib.ipv4_dst;
	__builtin_memcpy(pkt.fwd.dmac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(pkt.fwd.smac, fib.smac, ETH_ALEN);
#endif
#if LADDER >= 9
	pkt.fwd.flags = LFP_FWD_DEC_TTL;
	return lfp_verdict(&pkt, transmit_node(&pkt));
#else
	lfp_ipv4_decrease_ttl(ip);
#endif
#endif /* LADDER >= 2 */
#if LADDER >= 8
	__builtin_memcpy(eth->h_dest, pkt.fwd.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, pkt.fwd.smac, ETH_ALEN);
	egress = pkt.fwd.egress;
#else
	ladder_copy_mac(eth->h_dest, ladder_dst_mac);
	ladder_copy_mac(eth->h_source, ladder_src_mac);
#endif
	return ladder_redirect(egress);
}

char _license[] SEC("license") = "GPL";
