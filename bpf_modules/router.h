/* Router node: IPv4 and IPv6 forwarding decided by the kernel's own FIB.
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
	X(NOT_IPV4,               router, pass, "neither IPv4 nor IPv6")                    \
	X(NOT_FOR_US,             router, pass, "destination MAC is not the ingress device's") \
	X(IP_BAD_HEADER,          router, pass, "IPv4 version/IHL/total length invalid")    \
	X(IP_OPTIONS,             router, pass, "IPv4 header has options")                  \
	X(IP_LENGTH_MISMATCH,     router, pass, "frame length differs from IPv4 total length") \
	X(IP_BAD_CHECKSUM,        router, pass, "IPv4 header checksum invalid")             \
	X(IP_FRAGMENT,            router, pass, "IPv4 fragment")                            \
	X(TTL_EXPIRED,            router, pass, "TTL or hop limit <= 1")                    \
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
	X(FIB_CACHE_OFF,          router, event, "FIB looked up: nothing may be cached (ip_forward_use_pmtu or fib_multipath_use_neigh set, no neighbour watch, or the controller says so: linuxfp graph)") \
	X(FIB_CACHE_STORM,        router, event, "FIB looked up: cache not probed, a storm of misses on this CPU (fib_cache.h)") \
	X(IPV6_OFF,               router, pass, "IPv6 not routed by the fast path here (linuxfp graph says why)") \
	X(IPV6_DISABLED,          router, pass, "IPv6 disabled on ingress (disable_ipv6)")  \
	X(IPV6_PROXY_NDP,         router, pass, "proxy_ndp on: the kernel may answer for the destination") \
	X(IPV6_NEXT_HEADER,       router, pass, "IPv6 extension header, a protocol other than TCP, UDP, ICMPv6, or neighbour discovery") \
	X(IPV6_EGRESS,            router, pass, "egress not fit for routed IPv6 (IPv6 off there, or it takes redirects)") \
	X(L4_HASH,                router, pass, "fib_multipath_hash_policy=1 would hash the skb's own L4 hash") \
	X(IPV6_GSO_UNKNOWN,       router, pass, "IPv6 GSO packet of a kind whose segment length is not read")

#define LFP_IPV6_FLOWINFO_MASK 0x0fffffff   /* traffic class and flow label */
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

/* Local addresses that may be in lfp_local_src (hint.h). */
LFP_HINT_MAP(lfp_local_hint);

static __always_inline int lfp_address_is_local(__be32 addr)
{
	if (!lfp_hint_set(lfp_hint_of(&lfp_local_hint), addr))
		return 0;
	return bpf_map_lookup_elem(&lfp_local_src, &addr) != NULL;
}

static __always_inline int lfp_ipv4_is_multicast(__be32 a) { return (a & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000); }
static __always_inline int lfp_ipv4_is_lbcast(__be32 a) { return a == bpf_htonl(0xffffffff); }
static __always_inline int lfp_ipv4_is_zeronet(__be32 a) { return (a & bpf_htonl(0xff000000)) == 0; }
static __always_inline int lfp_ipv4_is_loopback(__be32 a) { return (a & bpf_htonl(0xff000000)) == bpf_htonl(0x7f000000); }

/* What the flow dissector reads as "ports" (proto_ports_offset()): the
 * multipath hash (fib_multipath_hash_policy=1) and port-matching policy
 * rules see them, so the lookup must get them too. -1: none. */
static __always_inline int lfp_l4_ports_offset(__u8 proto)
{
	switch (proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_DCCP:
	case IPPROTO_ESP:       /* the SPI */
	case IPPROTO_SCTP:
	case IPPROTO_UDPLITE:
		return 0;
	case IPPROTO_AH:        /* the SPI */
		return 4;
	default:
		return -1;
	}
}

/* Fills the lookup's ports from the transport header at `l4`; 0 when the
 * frame is too short to hold them. */
static __always_inline int lfp_fib_ports(struct lfp_pkt *pkt, struct bpf_fib_lookup *fib, void *l4, __u8 proto)
{
	int offset = lfp_l4_ports_offset(proto);
	__be16 *ports;

	if (offset < 0)
		return 1;
	ports = l4 + offset;
	if ((void *)(ports + 2) > pkt->data_end)
		return 0;
	fib->sport = ports[0];
	fib->dport = ports[1];
	return 1;
}

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

/* Why a packet's answer is looked up rather than served: its slot held
 * none (`probed`), a storm of misses skipped the probe, or nothing may be
 * cached. */
static __always_inline enum lfp_counter lfp_fib_unserved_reason(int probed, int storm)
{
	return probed ? LFP_CNT_FIB_CACHE_MISS : storm ? LFP_CNT_FIB_CACHE_STORM : LFP_CNT_FIB_CACHE_OFF;
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

/* fib_multipath_hash_policy=1, read live: Linux then hashes an skb's L4
 * hash where it has one (fib_multipath_hash(), rt6_multipath_hash()),
 * which bpf_fib_lookup() does not see. */
static __always_inline int lfp_multipath_hashes_l4(struct lfp_pkt *pkt)
{
	struct net___lfp_fib *net = lfp_kern_net(pkt);

	return bpf_core_field_exists(net->ipv4.sysctl_fib_multipath_hash_policy) &&
	       net->ipv4.sysctl_fib_multipath_hash_policy == 1;
}

/* --- IPv6 ------------------------------------------------------------------
 * ipv6_rcv(), ip6_route_input() and ip6_forward(), in their order. The
 * switches Linux reads there are read live from the kernel (CO-RE), so a
 * sysctl write applies to the next packet as it does in Linux: the ingress's
 * disable_ipv6 (or, for a packet a bridge handed up, the bridge's), and the
 * namespace's all/forwarding, all/proxy_ndp and multipath hash policy. What Linux keeps only per route (PMTU exceptions, redirects)
 * is left to bpf_fib_lookup(), or kept off by the controller (LFP_IF_IPV6,
 * LFP_IF_IPV6_TX: linuxfp/graph/nodes/router.py). */
struct ipv6_devconf___lfp {
	int disable_ipv6;
	int forwarding;
	int proxy_ndp;
} __attribute__((preserve_access_index));

struct inet6_dev___lfp {
	struct ipv6_devconf___lfp cnf;
} __attribute__((preserve_access_index));

struct netns_sysctl_ipv6___lfp {
	__u8 multipath_hash_policy;
} __attribute__((preserve_access_index));

struct netns_ipv6___lfp {
	struct netns_sysctl_ipv6___lfp sysctl;
	struct ipv6_devconf___lfp *devconf_all;
} __attribute__((preserve_access_index));

struct net___lfp_ip6 {
	struct netns_ipv6___lfp ipv6;
} __attribute__((preserve_access_index));

struct net_device___lfp_ip6 {
	struct inet6_dev___lfp *ip6_ptr;
	struct {
		struct net___lfp_ip6 *net;
	} nd_net;
} __attribute__((preserve_access_index));

struct net_device___lfp_ifindex {
	int ifindex;
} __attribute__((preserve_access_index));

/* Why the device IP sees the packet arrive on refuses to route it: the
 * ingress itself, or the bridge a port handed it up to (bridge.h), reached
 * through the port (lfp_kern_bridge_of_port: read with probes). IPv6 off
 * there (disable_ipv6: ipv6_rcv() drops), or its forwarding off, which
 * bpf_fib_lookup() checks first and a cached answer must check too.
 * LFP_CNT_MAX: neither. */
static __always_inline enum lfp_counter lfp_ipv6_l3_refusal(struct lfp_pkt *pkt, struct net_device___lfp_ip6 *dev)
{
	struct inet6_dev___lfp *idev;
	struct net_device___lfp_ip6 *bridge;

	if (pkt->l3_ifindex == pkt->ingress_ifindex) {
		idev = dev->ip6_ptr;
		if (!idev || idev->cnf.disable_ipv6)
			return LFP_CNT_IPV6_DISABLED;
		return idev->cnf.forwarding ? LFP_CNT_MAX : LFP_CNT_FIB_FWD_DISABLED;
	}
	/* unsure of the bridge: off */
	bridge = lfp_kern_bridge_of_port(pkt);
	if (!bridge || BPF_CORE_READ((struct net_device___lfp_ifindex *)bridge, ifindex) != (int)pkt->l3_ifindex)
		return LFP_CNT_IPV6_DISABLED;
	idev = BPF_CORE_READ(bridge, ip6_ptr);
	if (!idev || BPF_CORE_READ(idev, cnf.disable_ipv6))
		return LFP_CNT_IPV6_DISABLED;
	return BPF_CORE_READ(idev, cnf.forwarding) ? LFP_CNT_MAX : LFP_CNT_FIB_FWD_DISABLED;
}

/* LFP_CNT_MAX, or why ipv6_rcv() / ip6_forward() would not forward from
 * the device the packet arrived on. */
static __always_inline enum lfp_counter lfp_ipv6_ingress_refusal(struct lfp_pkt *pkt)
{
	struct net_device___lfp_ip6 *dev = lfp_kern_dev(pkt);
	struct net___lfp_ip6 *net = lfp_kern_net(pkt);
	struct ipv6_devconf___lfp *all;
	enum lfp_counter refusal;

	/* (a kernel without IPv6 has neither field) */
	if (!bpf_core_field_exists(dev->ip6_ptr) || !bpf_core_field_exists(net->ipv6))
		return LFP_CNT_IPV6_DISABLED;
	refusal = lfp_ipv6_l3_refusal(pkt, dev);
	if (refusal != LFP_CNT_MAX)
		return refusal;
	all = net->ipv6.devconf_all;
	if (!all)
		return LFP_CNT_IPV6_DISABLED;
	/* any hash policy but 0 reads what the lookup does not see (1: the
	 * skb's L4 hash); the controller says so too, but polls the sysctl */
	if (net->ipv6.sysctl.multipath_hash_policy)
		return LFP_CNT_IPV6_OFF;
	/* Linux also forwards from a device with force_forwarding, but then
	 * looks routes up as a host does (RT6_LOOKUP_F_REACHABLE), which the
	 * lookup does not; it checks the device's own forwarding besides. */
	if (!all->forwarding)
		return LFP_CNT_INGRESS_FWD_DISABLED;
	if (all->proxy_ndp)
		return LFP_CNT_IPV6_PROXY_NDP;
	return LFP_CNT_MAX;
}

static __always_inline int lfp_ipv6_is_multicast(const __be32 *a)
{
	return (a[0] & bpf_htonl(0xff000000)) == bpf_htonl(0xff000000);
}

/* Addresses ip6_forward() refuses or treats apart, and the ones this node
 * leaves to the kernel rather than reason about: ::/96 (unspecified,
 * loopback, IPv4-compatible), ::ffff:0:0/96 (IPv4-mapped), link-local
 * fe80::/10 and site-local fec0::/10. */
static __always_inline int lfp_ipv6_is_special(const __be32 *a)
{
	__be32 scope = a[0] & bpf_htonl(0xffc00000);

	if (scope == bpf_htonl(0xfe800000) || scope == bpf_htonl(0xfec00000))
		return 1;
	return a[0] == 0 && a[1] == 0 && (a[2] == 0 || a[2] == bpf_htonl(0x0000ffff));
}

/* The network length of a GSO packet's segments: 40 + the TCP header
 * (with its options) or the UDP header + gso_size; 0 when unknown. */
static __always_inline __u32 lfp_ipv6_gso_segment_len(struct lfp_pkt *pkt, struct ipv6hdr *ip6)
{
#ifdef LFP_HOOK_TC
	__u32 l4 = 0;

	/* a tunnel's GSO packet: its segments carry inner headers besides */
	if (lfp_is_encapsulated(pkt))
		return 0;

	if (ip6->nexthdr == IPPROTO_TCP) {
		__u8 *doff = (__u8 *)(ip6 + 1) + 12;

		if ((void *)(doff + 1) > pkt->data_end)
			return 0;
		l4 = (*doff >> 4) * 4;
	} else if (ip6->nexthdr == IPPROTO_UDP) {
		l4 = 8;
	}
	if (!l4)
		return 0;
	return sizeof(*ip6) + l4 + pkt->ctx->gso_size;
#else
	(void)pkt;
	(void)ip6;
	return 0;
#endif
}

static __always_inline enum lfp_rc lfp_route_ipv6(struct lfp_pkt *pkt, struct lfp_iface *in)
{
	struct bpf_fib_lookup fib = {};
	struct lfp_fib6_entry *cached = NULL;
	struct lfp_fib6_probe probe;
	struct lfp_iface *out;
	enum lfp_counter refusal;
	struct ipv6hdr *ip6;
	__u16 payload_len;
	long rc;

	if (!(in->flags & LFP_IF_IPV6))
		return lfp_pass(pkt, LFP_CNT_IPV6_OFF);
	ip6 = lfp_ipv6(pkt);
	if (!ip6)
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	refusal = lfp_ipv6_ingress_refusal(pkt);
	if (refusal != LFP_CNT_MAX)
		return lfp_pass(pkt, refusal);
	if (ip6->version != 6)
		return lfp_pass(pkt, LFP_CNT_IP_BAD_HEADER);
	payload_len = bpf_ntohs(ip6->payload_len);
	/* Linux trims link-layer padding; a jumbogram (length 0) carries a
	 * hop-by-hop option. (A GSO super-packet's header describes its first
	 * segment.) */
	if (pkt->len != sizeof(struct ethhdr) + sizeof(*ip6) + payload_len && !lfp_is_gso(pkt))
		return lfp_pass(pkt, LFP_CNT_IP_LENGTH_MISMATCH);
	/* the lookup's length is 16 bits: a packet past 65535 bytes (a device
	 * MTU that large) is measured by the kernel */
	if (sizeof(*ip6) + payload_len > 0xffff)
		return lfp_pass(pkt, LFP_CNT_FIB_FRAG_NEEDED);
	if (lfp_ipv6_is_multicast(ip6->daddr.in6_u.u6_addr32))
		return lfp_pass(pkt, LFP_CNT_FIB_NOT_FORWARDED);
	if (lfp_ipv6_is_multicast(ip6->saddr.in6_u.u6_addr32) || lfp_ipv6_is_special(ip6->saddr.in6_u.u6_addr32) ||
	    lfp_ipv6_is_special(ip6->daddr.in6_u.u6_addr32))
		return lfp_pass(pkt, LFP_CNT_MARTIAN);
	if (ip6->hop_limit <= 1)
		return lfp_pass(pkt, LFP_CNT_TTL_EXPIRED);
	if (in->fwd_len_cap6 && (lfp_is_gso(pkt) || sizeof(*ip6) + payload_len > in->fwd_len_cap6))
		return lfp_pass(pkt, LFP_CNT_ROUTE_MTU);

	/* Extension headers (hop-by-hop options, routing, fragments, ...) and
	 * protocols whose "ports" this node does not read go to the kernel. */
	if (ip6->nexthdr == LFP_NEXTHDR_ICMPV6) {
		__u8 *icmp_type = (void *)(ip6 + 1);

		if ((void *)(icmp_type + 1) > pkt->data_end)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
		/* errors (types below 128): the multipath hash reads their inner
		 * header; neighbour discovery (133-137): a bridge egress may
		 * answer it itself (neigh_suppress) */
		if (*icmp_type < 128)
			return lfp_pass(pkt, LFP_CNT_ICMP_ERROR);
		if (*icmp_type >= 133 && *icmp_type <= 137)
			return lfp_pass(pkt, LFP_CNT_IPV6_NEXT_HEADER);
	} else if (ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_UDP) {
		if (!lfp_fib_ports(pkt, &fib, ip6 + 1, ip6->nexthdr))
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	} else {
		return lfp_pass(pkt, LFP_CNT_IPV6_NEXT_HEADER);
	}

	/* ip6_route_input(): the flow's label and traffic class (rules match
	 * DSCP, the multipath hash reads the label), protocol, ports. */
	fib.family = AF_INET6;
	fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(LFP_IPV6_FLOWINFO_MASK);
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = sizeof(*ip6) + payload_len;
	if (lfp_is_gso(pkt)) {
		/* ip6_forward() checks each segment against the egress's IPv6 MTU
		 * (and the output path against a learned path MTU): the lookup
		 * checks the longest segment's length the same way. */
		__u32 segment = lfp_ipv6_gso_segment_len(pkt, ip6);

		if (!segment)
			return lfp_pass(pkt, LFP_CNT_IPV6_GSO_UNKNOWN);
		fib.tot_len = segment;
	}
	__builtin_memcpy(fib.ipv6_src, ip6->saddr.in6_u.u6_addr32, sizeof(fib.ipv6_src));
	__builtin_memcpy(fib.ipv6_dst, ip6->daddr.in6_u.u6_addr32, sizeof(fib.ipv6_dst));
	fib.ifindex = pkt->l3_ifindex;
	if (lfp_fib6_probe_init(pkt, &fib, &probe))
		cached = lfp_fib6_cached(&probe, fib.tot_len);
	else
		probe.slot = NULL;
	if (cached) {
		lfp_count(pkt, LFP_CNT_FIB_CACHE_HIT);
		fib.ifindex = cached->egress;
		__builtin_memcpy(fib.ipv6_dst, cached->nexthop, sizeof(fib.ipv6_dst));
		__builtin_memcpy(fib.dmac, cached->dmac, ETH_ALEN);
		__builtin_memcpy(fib.smac, cached->smac, ETH_ALEN);
	} else {
		__u16 looked_up_len = fib.tot_len;     /* the lookup may overwrite it */

		lfp_count(pkt, lfp_fib_unserved_reason(probe.slot != NULL, probe.storm));
		rc = bpf_fib_lookup(pkt->ctx, &fib, sizeof(fib), 0);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS)
			return lfp_pass(pkt, lfp_fib_reason(rc));
		if (probe.slot)
			lfp_fib6_remember(&probe, &fib, looked_up_len);
	}
	/* ip6_forward(): a GSO packet goes if its segments fit (ip6_pkt_too_big) */
	if (lfp_is_gso(pkt) && !lfp_segments_fit(pkt, fib.ifindex))
		return lfp_pass(pkt, LFP_CNT_FIB_FRAG_NEEDED);
	/* Linux would also send a redirect when routing back out. */
	if (fib.ifindex == pkt->l3_ifindex)
		return lfp_pass(pkt, LFP_CNT_HAIRPIN);
	out = bpf_map_lookup_elem(&lfp_ifaces, &fib.ifindex);
	if (!out || !(out->flags & LFP_IF_IPV6_TX))
		return lfp_pass(pkt, LFP_CNT_IPV6_EGRESS);

	pkt->fwd.egress = fib.ifindex;
	__builtin_memcpy(pkt->fwd.nexthop6, fib.ipv6_dst, sizeof(pkt->fwd.nexthop6));
	__builtin_memcpy(pkt->fwd.dmac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(pkt->fwd.smac, fib.smac, ETH_ALEN);
	/* (ip6_forward() leaves the packet's priority as it is) */
	pkt->fwd.flags = LFP_FWD_DEC_HOP_LIMIT;
	return LFP_NEXT;
}

/* LFP_CNT_MAX, or why ip_rcv() would not take the packet from the device
 * IP sees (`*in`, its facts): not prepared, not addressed to this host, or
 * marked (fwmark rules, which XDP cannot see). */
static __always_inline enum lfp_counter lfp_l3_ingress_refusal(struct lfp_pkt *pkt, struct ethhdr *eth,
								struct lfp_iface **in)
{
	/* The device IP sees: a bridge port's frames arrive on the bridge. */
	*in = bpf_map_lookup_elem(&lfp_ifaces, &pkt->l3_ifindex);
	if (!*in)
		return LFP_CNT_INGRESS_UNKNOWN;
	/* ip_rcv() and ipv6_rcv() drop PACKET_OTHERHOST; group addresses are
	 * never routed here. A frame a bridge handed up was addressed to the
	 * bridge (bridge.h): its port's own pkt_type does not say so. */
	if (pkt->l3_ifindex == pkt->ingress_ifindex && !lfp_for_this_host(pkt, eth->h_dest, (*in)->mac))
		return LFP_CNT_NOT_FOR_US;
	if (lfp_has_mark(pkt))
		return LFP_CNT_MARKED;
	return LFP_CNT_MAX;
}

/* LFP_CNT_MAX, or why ip_rcv() would not hand this IPv4 header to
 * PREROUTING as it is (or why the fast path does not take it there: options,
 * link-layer padding, a fragment, which conntrack would see reassembled). */
static __always_inline enum lfp_counter lfp_ipv4_rcv_refusal(struct lfp_pkt *pkt, struct iphdr *ip)
{
	__u16 tot_len;

	if (ip->version != 4 || ip->ihl < 5)
		return LFP_CNT_IP_BAD_HEADER;
	if (ip->ihl != 5)
		return LFP_CNT_IP_OPTIONS;
	tot_len = bpf_ntohs(ip->tot_len);
	if (tot_len < sizeof(*ip))
		return LFP_CNT_IP_BAD_HEADER;
	/* Linux trims link-layer padding before forwarding; we would not.
	 * (A GSO super-packet's header describes its first segment.) */
	if (pkt->len != sizeof(struct ethhdr) + tot_len && !lfp_is_gso(pkt))
		return LFP_CNT_IP_LENGTH_MISMATCH;
	if (lfp_ipv4_csum_check(ip))
		return LFP_CNT_IP_BAD_CHECKSUM;
	if (ip->frag_off & bpf_htons(LFP_IP_MF | LFP_IP_OFFSET))
		return LFP_CNT_IP_FRAGMENT;
	return LFP_CNT_MAX;
}

/* LFP_CNT_MAX, or why ip_rcv() and ip_route_input_slow() would not route
 * this IPv4 header as it is. */
static __always_inline enum lfp_counter lfp_ipv4_header_refusal(struct lfp_pkt *pkt, struct iphdr *ip)
{
	enum lfp_counter refusal = lfp_ipv4_rcv_refusal(pkt, ip);

	if (refusal != LFP_CNT_MAX)
		return refusal;
	if (lfp_ipv4_is_multicast(ip->daddr) || lfp_ipv4_is_lbcast(ip->daddr))
		return LFP_CNT_FIB_NOT_FORWARDED;
	if (lfp_ipv4_is_multicast(ip->saddr) || lfp_ipv4_is_lbcast(ip->saddr) ||
	    lfp_ipv4_is_zeronet(ip->saddr) || lfp_ipv4_is_zeronet(ip->daddr) ||
	    lfp_ipv4_is_loopback(ip->saddr) || lfp_ipv4_is_loopback(ip->daddr))
		return LFP_CNT_MARTIAN;
	return LFP_CNT_MAX;
}

/* LFP_CNT_MAX, or why ip_forward() would not forward a valid IPv4 packet
 * of `tot_len` bytes from `in`, before any lookup: forwarding off, rp_filter
 * (left to the kernel), TTL, a local source, a route MTU metric. */
static __always_inline enum lfp_counter lfp_ipv4_forward_refusal(struct lfp_iface *in, struct iphdr *ip, __u16 tot_len)
{
	if (!(in->flags & LFP_IF_FORWARDING))
		return LFP_CNT_INGRESS_FWD_DISABLED;
	if (in->flags & LFP_IF_RP_FILTER)
		return LFP_CNT_RP_FILTER;
	if (ip->ttl <= 1)
		return LFP_CNT_TTL_EXPIRED;
	if (lfp_address_is_local(ip->saddr))
		return LFP_CNT_LOCAL_SOURCE;
	if (in->fwd_len_cap && tot_len > in->fwd_len_cap)
		return LFP_CNT_ROUTE_MTU;
	return LFP_CNT_MAX;
}

/* The FIB's IPv4 answer for `fib`, filled in place: served from the cache
 * while valid, else looked up (and kept where it may be). LFP_CNT_MAX, or
 * why the lookup refuses. `*cached`: the entry that holds the answer, NULL
 * when nothing may be cached (`probe`: its key and epoch). */
static __always_inline enum lfp_counter lfp_fib_answer(struct lfp_pkt *pkt, struct bpf_fib_lookup *fib,
						       struct lfp_fib_probe *probe, struct lfp_fib_entry **cached)
{
	__u16 looked_up_len = fib->tot_len;     /* the lookup may overwrite it */
	long rc;

	*cached = NULL;
	if (lfp_fib_probe_init(pkt, fib, probe))
		*cached = lfp_fib_cached(probe, fib->tot_len);
	else
		probe->slot = NULL;
	if (*cached) {
		lfp_count(pkt, LFP_CNT_FIB_CACHE_HIT);
		fib->ifindex = (*cached)->egress;
		fib->ipv4_dst = (*cached)->nexthop;
		__builtin_memcpy(fib->dmac, (*cached)->dmac, ETH_ALEN);
		__builtin_memcpy(fib->smac, (*cached)->smac, ETH_ALEN);
		return LFP_CNT_MAX;
	}
	lfp_count(pkt, lfp_fib_unserved_reason(probe->slot != NULL, probe->storm));
	rc = bpf_fib_lookup(pkt->ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return lfp_fib_reason(rc);
	/* a route via an IPv6 gateway (RFC 5549) answers in IPv6 */
	if (fib->family != AF_INET)
		return LFP_CNT_FIB_OTHER;
	if (probe->slot) {
		lfp_fib_remember(probe, fib, looked_up_len);
		*cached = probe->slot;
	}
	return LFP_CNT_MAX;
}

static __always_inline enum lfp_rc router_node(struct lfp_pkt *pkt)
{
	struct bpf_fib_lookup fib = {};
	struct lfp_fib_entry *cached;
	struct lfp_fib_probe probe;
	enum lfp_counter refusal;
	struct lfp_iface *in;
	struct ethhdr *eth;
	struct iphdr *ip;
	__u16 tot_len;

	if (pkt->l3_proto != bpf_htons(ETH_P_IP) && pkt->l3_proto != bpf_htons(ETH_P_IPV6))
		return lfp_pass(pkt, LFP_CNT_NOT_IPV4);
	eth = lfp_eth(pkt);
	if (!eth)
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	refusal = lfp_l3_ingress_refusal(pkt, eth, &in);
	if (refusal != LFP_CNT_MAX)
		return lfp_pass(pkt, refusal);
	if (pkt->l3_proto == bpf_htons(ETH_P_IPV6))
		return lfp_route_ipv6(pkt, in);
	ip = lfp_ipv4(pkt);
	if (!ip)
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	refusal = lfp_ipv4_header_refusal(pkt, ip);
	if (refusal != LFP_CNT_MAX)
		return lfp_pass(pkt, refusal);
	/* Addressed to one of this host's own addresses (the local table's,
	 * the set the source check reads): Linux delivers it or, with unusual
	 * policy rules, routes it anyway — the kernel's to decide either way,
	 * and the FIB lookup that would tell costs more than a VXLAN outer
	 * packet's or a node's own traffic's whole trip here otherwise. */
	if (lfp_address_is_local(ip->daddr))
		return lfp_pass(pkt, LFP_CNT_FIB_NOT_FORWARDED);
	tot_len = bpf_ntohs(ip->tot_len);
	refusal = lfp_ipv4_forward_refusal(in, ip, tot_len);
	if (refusal != LFP_CNT_MAX)
		return lfp_pass(pkt, refusal);

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = tot_len;
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = pkt->l3_ifindex;
	if (!lfp_fib_ports(pkt, &fib, ip + 1, ip->protocol))
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	if (ip->protocol == IPPROTO_ICMP) {
		__u8 *icmp_type = (void *)(ip + 1);

		if ((void *)(icmp_type + 1) > pkt->data_end)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
		if (lfp_icmp_is_error(*icmp_type))
			return lfp_pass(pkt, LFP_CNT_ICMP_ERROR);
	}

	/* (a frame a bridge hands up may get its hash there: RPS on the bridge) */
	if ((lfp_has_l4_hash(pkt) || pkt->l3_ifindex != pkt->ingress_ifindex) && lfp_multipath_hashes_l4(pkt))
		return lfp_pass(pkt, LFP_CNT_L4_HASH);

	if (lfp_is_gso(pkt)) {
		/* A GSO super-packet (TSO from a local peer, GRO): Linux forwards it
		 * if every segment fits (skb_gso_validate_network_len), checked
		 * below against the egress; a route MTU metric is not seen there. */
		if (in->fwd_len_cap)
			return lfp_pass(pkt, LFP_CNT_ROUTE_MTU);
		fib.tot_len = 0;
	}

	refusal = lfp_fib_answer(pkt, &fib, &probe, &cached);
	if (refusal != LFP_CNT_MAX)
		return lfp_pass(pkt, refusal);
	if (lfp_is_gso(pkt) && !lfp_segments_fit(pkt, fib.ifindex))
		return lfp_pass(pkt, LFP_CNT_FIB_FRAG_NEEDED);
	/* Linux would also send an ICMP redirect when routing back out. */
	if (fib.ifindex == pkt->l3_ifindex)
		return lfp_pass(pkt, LFP_CNT_HAIRPIN);
	if ((in->flags & LFP_IF_SRC_FULL_CHECK) && !(cached && (cached->flags & LFP_FIB_SRC_OK))) {
		if (!lfp_source_routable(pkt, ip, &fib, fib.ifindex))
			return lfp_pass(pkt, LFP_CNT_SOURCE_CHECK);
		/* the reverse lookup reads the same FIB: the stamp covers it
		 * (the slot still this key's and epoch's: a run nested on this
		 * CPU, as a test run can be, may have replaced it) */
		if (cached && cached->epoch == probe.epoch && lfp_fib_same_key(&cached->key, &probe.key))
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
