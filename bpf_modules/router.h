/* Router node: IPv4 forwarding decided by the kernel's own FIB.
 *
 * bpf_fib_lookup() consults Linux's routes, policy rules, multipath and
 * neighbours live, so route and neighbour changes need no datapath work; its
 * answers are served again from a per-CPU cache only while the kernel's own
 * generation counters, and the watch's neighbour generation, prove nothing
 * they depend on has changed (fib_cache.h, router_watch.c). What
 * the lookup does not cover is checked here, in the order ip_rcv(),
 * ip_route_input_slow() and ip_forward() check it; anything this node cannot
 * reproduce exactly goes to the kernel with its reason counted. The node only
 * decides: it leaves egress, next hop and MACs in pkt->fwd, and transmit
 * (transmit.h) rewrites and sends once the nodes in between agree.
 * Declared to the controller by linuxfp/graph/nodes/router.py.
 */
#ifndef LFP_ROUTER_H
#define LFP_ROUTER_H

#include "common.h"
#include "parse.h"
#include "hint.h"
#include "fib_cache.h"

#define LFP_COUNTERS_ROUTER(X)                                                            \
	X(NOT_IPV4,               router, pass, "not IPv4")                                 \
	X(NOT_FOR_US,             router, pass, "destination MAC is not the ingress device's") \
	X(IP_BAD_HEADER,          router, pass, "IPv4 version/IHL/total length invalid")    \
	X(IP_OPTIONS,             router, pass, "IPv4 header has options")                  \
	X(IP_LENGTH_MISMATCH,     router, pass, "frame length differs from IPv4 total length") \
	X(IP_BAD_CHECKSUM,        router, pass, "IPv4 header checksum invalid")             \
	X(IP_FRAGMENT,            router, pass, "IPv4 fragment")                            \
	X(TTL_EXPIRED,            router, pass, "TTL <= 1")                                 \
	X(MARTIAN,                router, pass, "martian source or destination")            \
	X(LOCAL_SOURCE,           router, pass, "source is a local address")                \
	X(ICMP_ERROR,             router, pass, "ICMP error (multipath hashes its inner header)") \
	X(INGRESS_UNKNOWN,        router, pass, "ingress interface not prepared")           \
	X(INGRESS_FWD_DISABLED,   router, pass, "forwarding disabled on ingress")          \
	X(RP_FILTER,              router, pass, "rp_filter active on ingress")              \
	X(FIB_BLACKHOLE,          router, pass, "route is blackhole")                       \
	X(FIB_UNREACHABLE,        router, pass, "route is unreachable")                     \
	X(FIB_PROHIBIT,           router, pass, "route is prohibit")                        \
	X(FIB_NOT_FORWARDED,      router, pass, "destination local, broadcast or multicast") \
	X(FIB_FWD_DISABLED,       router, pass, "FIB: forwarding disabled")                 \
	X(FIB_LWT,                router, pass, "route needs encapsulation")                \
	X(FIB_NO_NEIGH,           router, pass, "no neighbour entry for next hop")          \
	X(FIB_FRAG_NEEDED,        router, pass, "larger than egress MTU")                   \
	X(ROUTE_MTU,              router, pass, "longer than a route MTU metric")           \
	X(FIB_OTHER,              router, pass, "FIB lookup failed otherwise")              \
	X(MARKED,                 router, pass, "packet carries a mark (fwmark rules)")     \
	X(SOURCE_CHECK,           router, pass, "source would fail Linux's source validation") \
	X(HAIRPIN,                router, pass, "egress is the ingress interface")          \
	X(FIB_CACHE_HIT,          router, event, "FIB answer served from the cache (fib_cache.h)") \
	X(FIB_CACHE_MISS,         router, event, "FIB looked up: no valid cached answer")    \
	X(FIB_CACHE_OFF,          router, event, "FIB looked up: nothing may be cached (ip_forward_use_pmtu or fib_multipath_use_neigh set, no neighbour watch, or the controller says so: linuxfp graph)")

#ifndef AF_INET
#define AF_INET 2
#endif
#define LFP_IP_MF 0x2000
#define LFP_IP_OFFSET 0x1fff

/* Addresses that Linux refuses as a forwarded packet's source (its own
 * addresses): kept by the controller from the local routing table. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __be32);
	__type(value, __u8);
} lfp_local_src SEC(".maps");

/* Local sources that may be in lfp_local_src (hint.h). */
LFP_HINT_MAP(lfp_local_hint);

static __always_inline int lfp_source_is_local(__be32 saddr)
{
	if (!lfp_hint_set(lfp_hint_of(&lfp_local_hint), saddr))
		return 0;
	return bpf_map_lookup_elem(&lfp_local_src, &saddr) != NULL;
}

static __always_inline int lfp_ipv4_is_multicast(__be32 a) { return (a & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000); }
static __always_inline int lfp_ipv4_is_lbcast(__be32 a) { return a == bpf_htonl(0xffffffff); }
static __always_inline int lfp_ipv4_is_zeronet(__be32 a) { return (a & bpf_htonl(0xff000000)) == 0; }
static __always_inline int lfp_ipv4_is_loopback(__be32 a) { return (a & bpf_htonl(0xff000000)) == bpf_htonl(0x7f000000); }

static __always_inline int lfp_icmp_is_error(__u8 type)
{
	/* unreachable, source quench, redirect, time exceeded, parameter problem */
	return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
}

static __always_inline enum lfp_counter lfp_fib_reason(long rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_BLACKHOLE:    return LFP_CNT_FIB_BLACKHOLE;
	case BPF_FIB_LKUP_RET_UNREACHABLE:  return LFP_CNT_FIB_UNREACHABLE;
	case BPF_FIB_LKUP_RET_PROHIBIT:     return LFP_CNT_FIB_PROHIBIT;
	case BPF_FIB_LKUP_RET_NOT_FWDED:    return LFP_CNT_FIB_NOT_FORWARDED;
	case BPF_FIB_LKUP_RET_FWD_DISABLED: return LFP_CNT_FIB_FWD_DISABLED;
	case BPF_FIB_LKUP_RET_UNSUPP_LWT:   return LFP_CNT_FIB_LWT;
	case BPF_FIB_LKUP_RET_NO_NEIGH:     return LFP_CNT_FIB_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:  return LFP_CNT_FIB_FRAG_NEEDED;
	default:                            return LFP_CNT_FIB_OTHER;
	}
}

/* The part of __fib_validate_source() that matters with rp_filter off: the
 * route back to the source, looked up as arriving on the egress interface,
 * must be unicast. Any answer that is not clearly unicast goes to the kernel. */
static __always_inline int lfp_source_routable(struct lfp_pkt *pkt, const struct iphdr *ip,
					       const struct bpf_fib_lookup *fwd, __u32 egress)
{
	struct bpf_fib_lookup rev = {};
	long rc;

	rev.family = AF_INET;
	rev.tos = ip->tos;
	rev.l4_protocol = ip->protocol;
	rev.ipv4_src = ip->daddr;
	rev.ipv4_dst = ip->saddr;
	rev.sport = fwd->dport;      /* __fib_validate_source swaps the ports */
	rev.dport = fwd->sport;
	rev.ifindex = egress;
	rev.tot_len = sizeof(*ip);   /* a validation, no MTU: no length check on the skb either */
	rc = bpf_fib_lookup(pkt->ctx, &rev, sizeof(rev), BPF_FIB_LOOKUP_SKIP_NEIGH);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_BLACKHOLE ||
	       rc == BPF_FIB_LKUP_RET_UNREACHABLE || rc == BPF_FIB_LKUP_RET_PROHIBIT;
}

/* rt_tos2priority(): ip_tos2prio[IPTOS_TOS(tos) >> 1], whose 16 entries are
 * 0, 2, 6, 4 in runs of four: the Gray code of TOS bits 3-4, doubled. (A
 * lookup table put a constant in .rodata.cst16 whose BTF the kernel rejects,
 * and the whole object lost its BTF.) */
static __always_inline __u8 lfp_tos2priority(__u8 tos)
{
	__u8 run = (tos & 0x18) >> 3;

	return (run ^ (run >> 1)) << 1;
}

static __always_inline enum lfp_rc router_node(struct lfp_pkt *pkt)
{
	struct bpf_fib_lookup fib = {};
	struct lfp_fib_entry *cached = NULL;
	struct lfp_fib_probe probe;
	struct lfp_iface *in;
	struct ethhdr *eth;
	struct iphdr *ip;
	__u16 tot_len;
	long rc;

	if (pkt->l3_proto != bpf_htons(ETH_P_IP))
		return lfp_pass(pkt, LFP_CNT_NOT_IPV4);
	eth = lfp_eth(pkt);
	ip = lfp_ipv4(pkt);
	if (!eth || !ip)
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);

	/* The device IP sees: a bridge port's frames arrive on the bridge. */
	in = bpf_map_lookup_elem(&lfp_ifaces, &pkt->l3_ifindex);
	if (!in)
		return lfp_pass(pkt, LFP_CNT_INGRESS_UNKNOWN);
	/* ip_rcv() drops PACKET_OTHERHOST; group addresses are never routed here.
	 * A frame a bridge handed up was addressed to the bridge (bridge.h): its
	 * port's own pkt_type does not say so. */
	if (pkt->l3_ifindex == pkt->ingress_ifindex && !lfp_for_this_host(pkt, eth->h_dest, in->mac))
		return lfp_pass(pkt, LFP_CNT_NOT_FOR_US);
	if (lfp_has_mark(pkt))
		return lfp_pass(pkt, LFP_CNT_MARKED);

	if (ip->version != 4 || ip->ihl < 5)
		return lfp_pass(pkt, LFP_CNT_IP_BAD_HEADER);
	if (ip->ihl != 5)
		return lfp_pass(pkt, LFP_CNT_IP_OPTIONS);
	tot_len = bpf_ntohs(ip->tot_len);
	if (tot_len < sizeof(*ip))
		return lfp_pass(pkt, LFP_CNT_IP_BAD_HEADER);
	/* Linux trims link-layer padding before forwarding; we would not.
	 * (A GSO super-packet's header describes its first segment.) */
	if (pkt->len != sizeof(*eth) + tot_len && !lfp_is_gso(pkt))
		return lfp_pass(pkt, LFP_CNT_IP_LENGTH_MISMATCH);
	if (lfp_ipv4_csum_check(ip))
		return lfp_pass(pkt, LFP_CNT_IP_BAD_CHECKSUM);
	if (ip->frag_off & bpf_htons(LFP_IP_MF | LFP_IP_OFFSET))
		return lfp_pass(pkt, LFP_CNT_IP_FRAGMENT);

	if (lfp_ipv4_is_multicast(ip->daddr) || lfp_ipv4_is_lbcast(ip->daddr))
		return lfp_pass(pkt, LFP_CNT_FIB_NOT_FORWARDED);
	if (lfp_ipv4_is_multicast(ip->saddr) || lfp_ipv4_is_lbcast(ip->saddr) ||
	    lfp_ipv4_is_zeronet(ip->saddr) || lfp_ipv4_is_zeronet(ip->daddr) ||
	    lfp_ipv4_is_loopback(ip->saddr) || lfp_ipv4_is_loopback(ip->daddr))
		return lfp_pass(pkt, LFP_CNT_MARTIAN);

	if (!(in->flags & LFP_IF_FORWARDING))
		return lfp_pass(pkt, LFP_CNT_INGRESS_FWD_DISABLED);
	if (in->flags & LFP_IF_RP_FILTER)
		return lfp_pass(pkt, LFP_CNT_RP_FILTER);
	if (ip->ttl <= 1)
		return lfp_pass(pkt, LFP_CNT_TTL_EXPIRED);
	if (lfp_source_is_local(ip->saddr))
		return lfp_pass(pkt, LFP_CNT_LOCAL_SOURCE);
	if (in->fwd_len_cap && tot_len > in->fwd_len_cap)
		return lfp_pass(pkt, LFP_CNT_ROUTE_MTU);

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = tot_len;
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = pkt->l3_ifindex;
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		/* Ports feed the multipath hash when fib_multipath_hash_policy=1. */
		__be16 *ports = (void *)(ip + 1);

		if ((void *)(ports + 2) > pkt->data_end)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
		fib.sport = ports[0];
		fib.dport = ports[1];
	} else if (ip->protocol == IPPROTO_ICMP) {
		__u8 *icmp_type = (void *)(ip + 1);

		if ((void *)(icmp_type + 1) > pkt->data_end)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
		if (lfp_icmp_is_error(*icmp_type))
			return lfp_pass(pkt, LFP_CNT_ICMP_ERROR);
	}

	if (lfp_is_gso(pkt)) {
		/* A GSO super-packet (TSO from a local peer, GRO): Linux forwards it
		 * if every segment fits (skb_gso_validate_network_len), checked
		 * below against the egress; a route MTU metric is not seen there. */
		if (in->fwd_len_cap)
			return lfp_pass(pkt, LFP_CNT_ROUTE_MTU);
		fib.tot_len = 0;
	}

	if (lfp_fib_probe_init(pkt, &fib, &probe))
		cached = lfp_fib_cached(&probe, fib.tot_len);
	else
		probe.slot = NULL;
	if (cached) {
		lfp_count(LFP_CNT_FIB_CACHE_HIT);
		fib.ifindex = cached->egress;
		fib.ipv4_dst = cached->nexthop;
		__builtin_memcpy(fib.dmac, cached->dmac, ETH_ALEN);
		__builtin_memcpy(fib.smac, cached->smac, ETH_ALEN);
	} else {
		__u16 looked_up_len = fib.tot_len;     /* the lookup may overwrite it */

		lfp_count(probe.slot ? LFP_CNT_FIB_CACHE_MISS : LFP_CNT_FIB_CACHE_OFF);
		rc = bpf_fib_lookup(pkt->ctx, &fib, sizeof(fib), 0);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return lfp_pass(pkt, lfp_fib_reason(rc));
		if (probe.slot) {
			lfp_fib_remember(&probe, &fib, looked_up_len);
			cached = probe.slot;
		}
	}
	if (lfp_is_gso(pkt) && !lfp_segments_fit(pkt, fib.ifindex))
		return lfp_pass(pkt, LFP_CNT_FIB_FRAG_NEEDED);
	/* Linux would also send an ICMP redirect when routing back out. */
	if (fib.ifindex == pkt->l3_ifindex)
		return lfp_pass(pkt, LFP_CNT_HAIRPIN);
	if ((in->flags & LFP_IF_SRC_FULL_CHECK) && !(cached && (cached->flags & LFP_FIB_SRC_OK))) {
		if (!lfp_source_routable(pkt, ip, &fib, fib.ifindex))
			return lfp_pass(pkt, LFP_CNT_SOURCE_CHECK);
		/* the reverse lookup reads the same FIB: the stamp covers it */
		if (cached)
			cached->flags |= LFP_FIB_SRC_OK;
	}

	/* The lookup left the next hop (gateway or destination) in ipv4_dst and
	 * found a valid kernel neighbour entry; transmit checks its state. */
	pkt->fwd.egress = fib.ifindex;
	pkt->fwd.nexthop = fib.ipv4_dst;
	__builtin_memcpy(pkt->fwd.dmac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(pkt->fwd.smac, fib.smac, ETH_ALEN);
	pkt->fwd.flags = LFP_FWD_DEC_TTL;
	if (in->flags & LFP_IF_SET_PRIORITY) {
		/* ip_forward() sets it (ip_forward_update_priority=1) */
		pkt->fwd.flags |= LFP_FWD_SET_PRIORITY;
		pkt->fwd.priority = lfp_tos2priority(ip->tos);
	}
	return LFP_NEXT;
}

#endif
