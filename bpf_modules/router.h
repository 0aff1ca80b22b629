/* Router node: IPv4 forwarding decided by the kernel's own FIB.
 *
 * bpf_fib_lookup() consults Linux's routes, policy rules, multipath and
 * neighbours live, so route and neighbour changes need no datapath work. What
 * the lookup does not cover is checked here, in the order ip_rcv(),
 * ip_route_input_slow() and ip_forward() check it; anything this node cannot
 * reproduce exactly goes to the kernel with its reason counted.
 */
#ifndef LFP_ROUTER_H
#define LFP_ROUTER_H

#include "common.h"
#include "parse.h"

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

/* 256-bit prefilters: a clear bit proves a hash lookup would find nothing
 * of interest, sparing it for almost every packet. The controller sets a bit
 * only after writing the entry it stands for, and clears it only after the
 * entry no longer needs attention. */
struct lfp_hint {
	__u64 bits[4];
};

/* Same fold as controller/shared_maps.py hint_bit(). */
static __always_inline __u32 lfp_hint_bit(__u32 v)
{
	v ^= v >> 16;
	v ^= v >> 8;
	return v & 0xff;
}

static __always_inline int lfp_hint_set(struct lfp_hint *hint, __u32 v)
{
	__u32 bit = lfp_hint_bit(v);

	/* no hint map entry: unsure, so look it up */
	return !hint || (hint->bits[(bit >> 6) & 3] & (1ULL << (bit & 63)));
}

/* Index 0: local sources (lfp_local_src); 1: next hops that are not
 * confirmed (lfp_neigh entries other than CONFIRMED). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct lfp_hint);
} lfp_hints SEC(".maps");

static __always_inline int lfp_source_is_local(__be32 saddr)
{
	__u32 key = 0;

	if (!lfp_hint_set(bpf_map_lookup_elem(&lfp_hints, &key), saddr))
		return 0;
	return bpf_map_lookup_elem(&lfp_local_src, &saddr) != NULL;
}

/* Neighbour state of next hops, as far as it changes what Linux does with a
 * packet. bpf_fib_lookup() accepts any valid entry, but the first packet
 * Linux sends to a STALE entry also starts reachability probing (STALE ->
 * DELAY, silently). So a STALE entry lets exactly one packet through to the
 * kernel and is then marked PROBING, in which Linux sends as usual. The
 * controller writes the states from neighbour events and flags every entry
 * that is not CONFIRMED in lfp_hints[1]; only flagged next hops are looked
 * up, and a flagged one without an entry goes to the kernel. */
enum lfp_neigh_state {
	LFP_NEIGH_CONFIRMED = 1,  /* REACHABLE, PERMANENT, NOARP */
	LFP_NEIGH_STALE = 2,      /* the next packet must go through the kernel */
	LFP_NEIGH_PROBING = 3,    /* DELAY/PROBE: the kernel is probing */
};

struct lfp_neigh_key {
	__u32 ifindex;
	__be32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lfp_neigh_key);
	__type(value, __u8);
} lfp_neigh SEC(".maps");

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
	rc = bpf_fib_lookup(pkt->ctx, &rev, sizeof(rev), BPF_FIB_LOOKUP_SKIP_NEIGH);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_BLACKHOLE ||
	       rc == BPF_FIB_LKUP_RET_UNREACHABLE || rc == BPF_FIB_LKUP_RET_PROHIBIT;
}

static __always_inline void lfp_ipv4_decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

static __always_inline enum lfp_rc router_node(struct lfp_pkt *pkt)
{
	struct bpf_fib_lookup fib = {};
	struct lfp_neigh_key neigh;
	__u8 *neigh_state;
	__u32 hint_key;
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

	in = bpf_map_lookup_elem(&lfp_ifaces, &pkt->ingress_ifindex);
	if (!in)
		return lfp_pass(pkt, LFP_CNT_INGRESS_UNKNOWN);
	/* ip_rcv() drops PACKET_OTHERHOST; group addresses are never routed here. */
	if (!lfp_for_this_host(pkt, eth->h_dest, in->mac))
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
	fib.ifindex = pkt->ingress_ifindex;
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

	rc = bpf_fib_lookup(pkt->ctx, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return lfp_pass(pkt, lfp_fib_reason(rc));
	if (lfp_is_gso(pkt) && !lfp_segments_fit(pkt, fib.ifindex))
		return lfp_pass(pkt, LFP_CNT_FIB_FRAG_NEEDED);
	/* The lookup left the next hop (gateway or destination) in ipv4_dst and
	 * found a valid kernel neighbour entry. Only an entry the controller
	 * knows as not confirmed needs a closer look. */
	neigh.ifindex = fib.ifindex;
	neigh.addr = fib.ipv4_dst;
	hint_key = 1;
	neigh_state = NULL;
	if (lfp_hint_set(bpf_map_lookup_elem(&lfp_hints, &hint_key), neigh.ifindex ^ neigh.addr)) {
		neigh_state = bpf_map_lookup_elem(&lfp_neigh, &neigh);
		if (!neigh_state)
			return lfp_pass(pkt, LFP_CNT_NEIGH_UNCONFIRMED);
	}
	/* Linux would also send an ICMP redirect when routing back out. */
	if (fib.ifindex == pkt->ingress_ifindex)
		return lfp_pass(pkt, LFP_CNT_HAIRPIN);

	if ((in->flags & LFP_IF_SRC_FULL_CHECK) && !lfp_source_routable(pkt, ip, &fib, fib.ifindex))
		return lfp_pass(pkt, LFP_CNT_SOURCE_CHECK);
	/* Only a packet Linux will really send starts its probing: every check
	 * that could make the kernel drop it has been made above. */
	if (neigh_state && *neigh_state == LFP_NEIGH_STALE) {
		*neigh_state = LFP_NEIGH_PROBING;
		return lfp_pass(pkt, LFP_CNT_NEIGH_STALE);
	}
	/* Last decision before the rewrite: a pass after it would hand the
	 * kernel a modified packet. */
	if (!lfp_arm_redirect(pkt, fib.ifindex))
		return lfp_pass(pkt, LFP_CNT_EGRESS_UNSUPPORTED);

	if (in->flags & LFP_IF_SET_PRIORITY)
		lfp_set_forward_priority(pkt, ip->tos);
	lfp_ipv4_decrease_ttl(ip);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	lfp_count(LFP_CNT_ROUTER_FORWARDED);
	return LFP_REDIRECT;
}

#endif
