/* Bridge node: known unicast across a Linux bridge, with the kernel's FDB
 * as the truth.
 *
 * The controller mirrors each bridge's forwarding database (dynamic and
 * static entries; never the bridge's own addresses) into lfp_fdb and each
 * port's state and flags into lfp_br_ports. A frame is bridged here only
 * when Linux would send it to exactly one port: its source is known on the
 * port it arrived on (so the kernel would learn nothing), its destination
 * is known behind another port in forwarding state, and nothing between
 * (br_netfilter, isolation, the egress MTU) would change or stop it.
 * Anything else goes to the kernel, which learns, floods and delivers
 * locally as always; the controller sees the entries it learns and the
 * next frames take the fast path.
 *
 * Ageing stays true: the kernel refreshes an entry only when it sees a
 * frame from that source, and frames bridged here are invisible to it. So
 * one frame per source entry and refresh interval (a fraction of the ageing
 * time) goes to the kernel, which bridges it the same way and refreshes the
 * entry itself; a source that goes silent ages out on time. The stamp is
 * the only shared write, once per entry and interval.
 *
 * Order stays true: a frame handed to the kernel may still wait in its
 * receive batch when the next frame of the same flow would be bridged here.
 * So for LFP_BR_SETTLE_NS after an entry's stamp (its refresh frame, or its
 * first use after the controller wrote it: stamp 0) frames to and from it
 * go to the kernel too. And a known source arriving on another port makes
 * the kernel move the entry: the node forgets it at once, so no later frame
 * of the batch goes to the old port (bridge_watch.c forgets entries as the
 * kernel changes them, for changes the datapath does not see).
 *
 * A frame to the bridge's own MAC goes up to IP on the bridge device: the
 * node sets pkt->l3_ifindex to the bridge and the routing nodes after it
 * take over, as br_pass_frame_up() hands it to ip_rcv(). Routed packets
 * whose egress is a bridge find their port in bridge_tx.h.
 *
 * The node only decides: it leaves the egress port in pkt->fwd with
 * LFP_FWD_BRIDGED, and transmit sends the frame unchanged (the pipeline
 * skips the IP nodes for bridged frames). IPv4 that br_netfilter would
 * show iptables carries LFP_FWD_NF_IPV4 (IPv6 for ip6tables:
 * LFP_FWD_NF_IPV6) for the bridge-filter stage (bridge_filter.h), or goes
 * to the kernel where the pipeline has none.
 * Declared to the controller by linuxfp/graph/nodes/bridge.py.
 */
#ifndef LFP_BRIDGE_H
#define LFP_BRIDGE_H

#include "common.h"
#include "parse.h"
#include "bridge_fdb.h"

#define LFP_COUNTERS_BRIDGE(X)                                                            \
	X(BR_PORT_UNKNOWN,        bridge, pass, "ingress is not a bridge port the fast path knows") \
	X(BR_PORT_NOT_FORWARDING, bridge, pass, "ingress port not in forwarding state (Linux learns or drops)") \
	X(BR_GROUP_DEST,          bridge, pass, "broadcast, multicast or link-local destination (the kernel floods)") \
	X(BR_BAD_SOURCE,          bridge, pass, "multicast or zero source MAC (Linux drops)") \
	X(BR_SOURCE_UNKNOWN,      bridge, pass, "source MAC unknown, local or behind another port (the kernel learns)") \
	X(BR_DEST_UNKNOWN,        bridge, pass, "destination MAC unknown or the bridge's own (flood or local delivery)") \
	X(BR_SAME_PORT,           bridge, pass, "destination is behind the ingress port")   \
	X(BR_EGRESS_BLOCKED,      bridge, pass, "egress port not forwarding, or isolated from the ingress") \
	X(BR_TOO_LONG,            bridge, pass, "longer than the egress MTU")               \
	X(BR_NETFILTER,           bridge, pass, "br_netfilter would run iptables, ip6tables or arptables rules") \
	X(BR_NF_INVALID,          bridge, pass, "br_netfilter would drop or trim it (header, checksum, padding, options)") \
	X(BR_NF_FRAGMENT,         bridge, pass, "IP fragment: br_netfilter's defrag may reassemble it")  \
	X(BR_AGEING_REFRESH,      bridge, pass, "one frame per source entry and interval: the kernel refreshes it") \
	X(BR_SETTLING,            bridge, pass, "entry just written or refreshed: the kernel's frames go first") \
	X(BR_SOURCE_MOVED,        bridge, pass, "source MAC arrived on another port: the kernel moves it") \
	X(BR_LOCAL,               bridge, pass, "to the bridge's own MAC, which the fast path does not hand up to IP here")

/* struct lfp_br_port.flags, as in linuxfp/graph/nodes/bridge.py */
#define LFP_BRP_FORWARDING    (1u << 0)  /* port state forwarding */
#define LFP_BRP_ISOLATED      (1u << 1)  /* isolated port */
#define LFP_BRP_NF_IPV4       (1u << 2)  /* br_netfilter validates IPv4 (bridge-nf-call-iptables) */
#define LFP_BRP_NF_IPV4_RULES (1u << 3)  /* ... and iptables rules exist: the bridge filter decides */
#define LFP_BRP_NF_IPV6       (1u << 4)  /* br_netfilter validates IPv6 (bridge-nf-call-ip6tables) */
#define LFP_BRP_NF_IPV6_RULES (1u << 5)  /* ... and ip6tables FORWARD rules or IPv6 conntrack: the bridge filter decides */
#define LFP_BRP_NF_ARP_RULES  (1u << 6)  /* bridge-nf-call-arptables with arptables present */
#define LFP_BRP_LEARNING      (1u << 7)  /* the port learns: a known source arriving here moves */
#define LFP_BRP_NF_ARP        (1u << 8)  /* bridge-nf-call-arptables: ARP shorter than its header is dropped */
#define LFP_BRP_HAND_UP       (1u << 9)  /* frames to the bridge's MAC continue into IP on the bridge device */
#define LFP_BRP_NF_IPV6_KERNEL (1u << 10) /* ip6tables could do more than FORWARD to them: the kernel decides */

/* How long frames to and from an entry keep going to the kernel after it
 * was (re)written or one of its frames was handed to the kernel: a frame the
 * kernel still holds (GRO's list, a NAPI batch) must not be overtaken by a
 * later frame of the same flow sent from here. Two ticks of the coarse
 * clock at HZ=250. */
#define LFP_BR_SETTLE_NS (8ull * 1000 * 1000)

#ifndef ETH_P_ARP
#define ETH_P_ARP 0x0806
#endif
#ifndef ETH_P_PPP_DISC
#define ETH_P_PPP_DISC 0x8863
#endif
#ifndef ETH_P_PPP_SES
#define ETH_P_PPP_SES 0x8864
#endif

/* Per port, indexed by ifindex; all zeros: not a port the fast path knows. */
struct lfp_br_port {
	__u32 bridge;           /* the bridge's ifindex */
	__u32 flags;            /* LFP_BRP_* */
	__u32 mtu;              /* the port's MTU: longest payload it sends */
	__u32 refresh_ms;       /* ageing refresh interval of its bridge */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct lfp_br_port);
} lfp_br_ports SEC(".maps");

static __always_inline int lfp_mac_is_group(const __u8 *mac)
{
	return mac[0] & 1;
}

/* Whether frames to and from an FDB entry may take the fast path now (see
 * "Order stays true" above): not within LFP_BR_SETTLE_NS of its stamp, and
 * its first use after the controller wrote it stamps it and goes to the
 * kernel. */
static __always_inline int lfp_br_dest_settled(struct lfp_fdb_entry *dst, __u64 now)
{
	if (!dst->refreshed_ns) {
		dst->refreshed_ns = now;     /* once per write */
		return 0;
	}
	return now - dst->refreshed_ns >= LFP_BR_SETTLE_NS;
}

static __always_inline int lfp_mac_is_zero(const __u8 *mac)
{
	return !(((const __u16 *)mac)[0] | ((const __u16 *)mac)[1] | ((const __u16 *)mac)[2]);
}

/* What br_validate_ipv4() would do to the frame: 0 when it lets it through
 * unchanged (no options: Linux does not parse them here either, but passing
 * them costs nothing). */
static __always_inline int lfp_br_ipv4_unchanged(struct lfp_pkt *pkt)
{
	struct iphdr *ip = lfp_ipv4(pkt);

	if (!ip || ip->version != 4 || ip->ihl != 5)
		return 0;
	if (lfp_ipv4_csum_check(ip))
		return 0;
	/* shorter: dropped; longer: the padding is trimmed */
	return pkt->len == sizeof(struct ethhdr) + bpf_ntohs(ip->tot_len) && bpf_ntohs(ip->tot_len) >= sizeof(*ip);
}

static __always_inline int lfp_br_ipv4_fragment(struct lfp_pkt *pkt)
{
	struct iphdr *ip = lfp_ipv4(pkt);

	return !ip || (ip->frag_off & bpf_htons(0x3fff /* MF and the offset */));
}

/* br_validate_ipv6(): version, payload length (the padding is trimmed), and
 * hop-by-hop options, which it parses. */
static __always_inline int lfp_br_ipv6_unchanged(struct lfp_pkt *pkt)
{
	__u8 *ip6 = pkt->data + sizeof(struct ethhdr);
	__u16 payload;

	if ((void *)(ip6 + 40) > pkt->data_end)
		return 0;
	if ((ip6[0] >> 4) != 6 || ip6[6] == 0 /* NEXTHDR_HOP */)
		return 0;
	payload = ((__u16)ip6[4] << 8) | ip6[5];
	return payload && pkt->len == sizeof(struct ethhdr) + 40 + payload;
}

#define LFP_BR_NEXTHDR_ROUTING  43
#define LFP_BR_NEXTHDR_FRAGMENT 44
#define LFP_BR_NEXTHDR_AUTH     51
#define LFP_BR_NEXTHDR_DEST     60

/* An IPv6 fragment, or headers a fragment header may follow (what the
 * defrag hook walks to find it: find_prev_fhdr(); hop-by-hop never gets
 * here): reassembled at PREROUTING whenever anything turned IPv6 defrag on.
 * ip6tables rules that do keep the namespace on the kernel path; a hook no
 * table shows (Open vSwitch's conntrack) would not: the kernel's, whatever
 * the rules, as for IPv4. */
static __always_inline int lfp_br_ipv6_fragment(struct lfp_pkt *pkt)
{
	__u8 *ip6 = pkt->data + sizeof(struct ethhdr);

	if ((void *)(ip6 + 40) > pkt->data_end)
		return 1;
	return ip6[6] == LFP_BR_NEXTHDR_FRAGMENT || ip6[6] == LFP_BR_NEXTHDR_ROUTING ||
	       ip6[6] == LFP_BR_NEXTHDR_AUTH || ip6[6] == LFP_BR_NEXTHDR_DEST;
}

/* Whether something would run on the bridge's own receive path that the
 * nodes after this one do not reproduce, as br_pass_frame_up() reaches it:
 * tcx programs there (another tool's: the controller attaches none to a
 * bridge). A tcx attachment sends no event; the controller's poll clears
 * LFP_BRP_HAND_UP for it, this closes the window until then. Unsure (the
 * bridge's types unknown, the port not what it was) reads as yes. */
static __always_inline int lfp_br_up_path_busy(struct lfp_pkt *pkt)
{
	void *bridge = lfp_kern_bridge_of_port(pkt);

	return !bridge || lfp_tcx_on_ingress_of(bridge);
}

/* A frame iptables (ip6tables) would see, as coming in on the bridge and
 * leaving through it: marked `nf_flag` for the bridge-filter stage, which
 * decides; 0 when this pipeline has none (the kernel's, then). */
static __always_inline int lfp_br_to_filter(struct lfp_pkt *pkt, const struct lfp_br_port *in, __u32 nf_flag)
{
	if (!LFP_STAGE_BRIDGE_FILTER)
		return 0;
	pkt->fwd.flags |= nf_flag;
	pkt->l3_ifindex = in->bridge;
	return 1;
}

static __always_inline enum lfp_rc bridge_node(struct lfp_pkt *pkt)
{
	struct lfp_fdb_entry *src, *dst;
	struct lfp_br_port *in, *out;
	struct lfp_fdb_key key;
	struct ethhdr *eth;
	__u32 egress;
	__u64 now;

	eth = lfp_eth(pkt);
	if (!eth)
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	in = bpf_map_lookup_elem(&lfp_br_ports, &pkt->ingress_ifindex);
	if (!in || !in->bridge)
		return lfp_pass(pkt, LFP_CNT_BR_PORT_UNKNOWN);
	if (!(in->flags & LFP_BRP_FORWARDING))
		return lfp_pass(pkt, LFP_CNT_BR_PORT_NOT_FORWARDING);
	if (lfp_mac_is_group(eth->h_dest))
		return lfp_pass(pkt, LFP_CNT_BR_GROUP_DEST);
	if (lfp_mac_is_group(eth->h_source) || lfp_mac_is_zero(eth->h_source))
		return lfp_pass(pkt, LFP_CNT_BR_BAD_SOURCE);

	key.bridge = in->bridge;
	key.vlan = 0;
	__builtin_memcpy(key.mac, eth->h_source, ETH_ALEN);
	src = bpf_map_lookup_elem(&lfp_fdb, &key);
	if (!src)
		return lfp_pass(pkt, LFP_CNT_BR_SOURCE_UNKNOWN);
	if (src->port != pkt->ingress_ifindex) {
		if ((in->flags & LFP_BRP_LEARNING) && !(src->flags & LFP_FDB_STICKY))
			bpf_map_delete_elem(&lfp_fdb, &key);
		return lfp_pass(pkt, LFP_CNT_BR_SOURCE_MOVED);
	}
	now = bpf_ktime_get_coarse_ns();
	if (!src->refreshed_ns ||
	    (!(src->flags & LFP_FDB_NO_AGEING) && now - src->refreshed_ns >= (__u64)in->refresh_ms * 1000000)) {
		/* the frame Linux bridges like this one refreshes the entry */
		src->refreshed_ns = now;
		return lfp_pass(pkt, LFP_CNT_BR_AGEING_REFRESH);
	}
	if (now - src->refreshed_ns < LFP_BR_SETTLE_NS)
		return lfp_pass(pkt, LFP_CNT_BR_SETTLING);
	__builtin_memcpy(key.mac, eth->h_dest, ETH_ALEN);
	dst = bpf_map_lookup_elem(&lfp_fdb, &key);
	if (!dst)
		return lfp_pass(pkt, LFP_CNT_BR_DEST_UNKNOWN);
	if (!lfp_br_dest_settled(dst, now))
		return lfp_pass(pkt, LFP_CNT_BR_SETTLING);
	/* To the bridge's own address (its local FDB entry, mirrored only for
	 * the device's MAC, which br_handle_frame() makes PACKET_HOST):
	 * br_pass_frame_up() hands it to IP on the bridge device, which the
	 * nodes after this one (routing, FORWARD) reproduce with the bridge as
	 * the ingress. */
	if (dst->flags & LFP_FDB_HAND_UP) {
		if (!(in->flags & LFP_BRP_HAND_UP))
			return lfp_pass(pkt, LFP_CNT_BR_LOCAL);
		if (lfp_br_up_path_busy(pkt))
			return lfp_pass(pkt, LFP_CNT_TCX_OTHERS);
		if (lfp_nf_hooks_on_ingress_of(lfp_kern_bridge_of_port(pkt)))
			return lfp_pass(pkt, LFP_CNT_NF_INGRESS);
		pkt->l3_ifindex = in->bridge;
		return LFP_NEXT;
	}
	egress = dst->port;
	/* Hairpin mode would send it back; without it Linux drops it. */
	if (egress == pkt->ingress_ifindex)
		return lfp_pass(pkt, LFP_CNT_BR_SAME_PORT);
	out = bpf_map_lookup_elem(&lfp_br_ports, &egress);
	if (!out || out->bridge != in->bridge || !(out->flags & LFP_BRP_FORWARDING) ||
	    (in->flags & out->flags & LFP_BRP_ISOLATED))
		return lfp_pass(pkt, LFP_CNT_BR_EGRESS_BLOCKED);
	/* Linux forwards a GSO packet whatever its size (is_skb_forwardable). */
	if (!lfp_is_gso(pkt) && pkt->len > out->mtu + sizeof(struct ethhdr))
		return lfp_pass(pkt, LFP_CNT_BR_TOO_LONG);

	/* br_netfilter, on with the bridge-nf-call-* switches */
	if (pkt->l3_proto == bpf_htons(ETH_P_IP) && (in->flags & LFP_BRP_NF_IPV4)) {
		if (!lfp_br_ipv4_unchanged(pkt))
			return lfp_pass(pkt, LFP_CNT_BR_NF_INVALID);
		/* Reassembled at PREROUTING whenever anything turned IPv4 defrag
		 * on (conntrack, -m socket, TPROXY), and refragmented on the way
		 * out: the kernel's, whatever the rules. */
		if (lfp_br_ipv4_fragment(pkt))
			return lfp_pass(pkt, LFP_CNT_BR_NF_FRAGMENT);
		if ((in->flags & LFP_BRP_NF_IPV4_RULES) && !lfp_br_to_filter(pkt, in, LFP_FWD_NF_IPV4))
			return lfp_pass(pkt, LFP_CNT_BR_NETFILTER);
	} else if (pkt->l3_proto == bpf_htons(ETH_P_IPV6) && (in->flags & LFP_BRP_NF_IPV6)) {
		if (in->flags & LFP_BRP_NF_IPV6_KERNEL)
			return lfp_pass(pkt, LFP_CNT_BR_NETFILTER);
		if (!lfp_br_ipv6_unchanged(pkt))
			return lfp_pass(pkt, LFP_CNT_BR_NF_INVALID);
		if (lfp_br_ipv6_fragment(pkt))
			return lfp_pass(pkt, LFP_CNT_BR_NF_FRAGMENT);
		/* Neither hop-by-hop options nor a header a fragment header may
		 * follow: the next header is the protocol ip6tables' -p sees. */
		if ((in->flags & LFP_BRP_NF_IPV6_RULES) && !lfp_br_to_filter(pkt, in, LFP_FWD_NF_IPV6))
			return lfp_pass(pkt, LFP_CNT_BR_NETFILTER);
	} else if (pkt->l3_proto == bpf_htons(ETH_P_ARP) && (in->flags & LFP_BRP_NF_ARP)) {
		if (in->flags & LFP_BRP_NF_ARP_RULES)
			return lfp_pass(pkt, LFP_CNT_BR_NETFILTER);
		if (pkt->len < sizeof(struct ethhdr) + 8)       /* br_nf_forward_arp: no arphdr */
			return lfp_pass(pkt, LFP_CNT_BR_NF_INVALID);
	} else if ((pkt->l3_proto == bpf_htons(ETH_P_PPP_SES) || pkt->l3_proto == bpf_htons(ETH_P_PPP_DISC)) &&
		   (in->flags & (LFP_BRP_NF_IPV4 | LFP_BRP_NF_IPV6))) {
		/* bridge-nf-filter-pppoe-tagged would hand the IP inside to iptables */
		return lfp_pass(pkt, LFP_CNT_BR_NETFILTER);
	}

	pkt->fwd.egress = egress;
	pkt->fwd.flags |= LFP_FWD_BRIDGED;
	return LFP_NEXT;
}

#endif
