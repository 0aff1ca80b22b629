/* Sending a packet routed into a VXLAN device: whether the outer route has
 * room for a long one (lfp_tunnel_path_fits), and — where the controller
 * found that the kernel's output path leaves the device's outer packets as
 * they are — building those outer headers exactly as the device's transmit
 * builds them (vxlan_xmit_one(), udp_tunnel_xmit_skb(), iptunnel_xmit()) and
 * sending the result straight out of the underlay (lfp_vxlan_plan,
 * lfp_vxlan_encapsulate). Part of the transmit node: included by
 * transmit.h after the neighbour states it reads; its map is declared to
 * the controller by linuxfp/graph/nodes/transmit.py.
 */
#ifndef LFP_VXLAN_TX_H
#define LFP_VXLAN_TX_H

#include <stddef.h>
#include <linux/udp.h>

#include "common.h"
#include "conntrack.h"
#include "hint.h"
#include "parse.h"

/* The remote VTEP each MAC of a VXLAN egress is encapsulated to. For the
 * packets longer than the egress's tx_len_cap: Linux holds the
 * encapsulated packet to the outer route's MTU and, past it, lowers the
 * inner route's path MTU as it sends (skb_tunnel_check_pmtu()), which a
 * redirected packet, carrying no route, would not do. So such a packet is
 * sent only when the outer route, asked as the device's transmit asks it,
 * has room. The controller writes an entry only where the two lookups
 * cannot part (graph/nodes/transmit.py, tunnel_paths); a MAC without one
 * goes to the kernel. With LFP_VTEP_ENCAP, the rest says how the device
 * would encapsulate to it. */
struct lfp_vtep_key {
	__u32 ifindex;
	__u8 mac[ETH_ALEN];
	__u16 pad;
};

#define LFP_VTEP_ENCAP    (1u << 0)  /* the fast path may encapsulate itself */
#define LFP_VTEP_TRACKED  (1u << 1)  /* the kernel tracks connections: the outer one must exist */
#define LFP_VTEP_UDP_CSUM (1u << 2)  /* the device sums its outer UDP (udpcsum) */
#define LFP_VTEP_NAT_HOOKS (1u << 3) /* nat's hooks are registered: they have bound the outer connection */

struct lfp_vtep {
	__be32 remote;
	__be32 local;          /* the device's source address, 0 for none */
	__u32 oif;             /* the entry's own underlay (`via`), 0 for none */
	__u16 overhead;        /* what the encapsulation adds to the inner IP packet */
	__u16 max_len;         /* longest inner IP packet under every route's MTU metric */
	__be32 vni;            /* the VXLAN header's second word: the VNI, shifted left by 8 */
	__u16 port_min;        /* udp_flow_src_port()'s range: [port_min, port_max) */
	__u16 port_max;
	__be16 port;           /* the destination port */
	__u8 ttl;              /* the outer TTL */
	__u8 flags;            /* LFP_VTEP_* */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct lfp_vtep_key);
	__type(value, struct lfp_vtep);
} lfp_vteps SEC(".maps");

static __always_inline struct lfp_vtep *lfp_vtep_of(__u32 egress, const __u8 *dmac)
{
	struct lfp_vtep_key key = { .ifindex = egress };

	__builtin_memcpy(key.mac, dmac, ETH_ALEN);
	return bpf_map_lookup_elem(&lfp_vteps, &key);
}

/* The outer route to the remote, asked as the device's transmit asks it,
 * for an inner IP packet of `inner` bytes: out of the entry's underlay,
 * or with none (its `dev` names the default remote's only) — a lookup
 * with none takes the egress as its input interface, which needs IPv4
 * forwarding on (the controller writes no entry where it is off). */
static __always_inline long lfp_vtep_route(struct lfp_pkt *pkt, const struct lfp_vtep *vtep, __u32 egress,
					   __u32 inner, struct bpf_fib_lookup *fib, __u32 flags)
{
	fib->family = AF_INET;
	fib->l4_protocol = IPPROTO_UDP;
	fib->dport = vtep->port;
	fib->ipv4_src = vtep->local;
	fib->ipv4_dst = vtep->remote;
	fib->tot_len = inner + vtep->overhead;
	fib->ifindex = vtep->oif ? vtep->oif : egress;
	return bpf_fib_lookup(pkt->ctx, fib, sizeof(*fib), flags | (vtep->oif ? BPF_FIB_LOOKUP_OUTPUT : 0));
}

/* Whether the packet, to `dmac` out of the VXLAN device `egress`, fits the
 * outer route's MTU once encapsulated (never a GSO packet: each segment
 * would need the check). The inner length is taken from the frame, which
 * is never shorter than its IP packet. */
static __always_inline int lfp_tunnel_path_fits(struct lfp_pkt *pkt, __u32 egress, const __u8 *dmac)
{
	struct bpf_fib_lookup fib = {};
	struct lfp_vtep *vtep;
	__u32 inner;
	long rc;

	if (lfp_is_gso(pkt) || pkt->len < sizeof(struct ethhdr))
		return 0;
	vtep = lfp_vtep_of(egress, dmac);
	inner = pkt->len - sizeof(struct ethhdr);
	if (!vtep || inner > vtep->max_len)
		return 0;
	rc = lfp_vtep_route(pkt, vtep, egress, inner, &fib, BPF_FIB_LOOKUP_SKIP_NEIGH);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH;
}

/* What the device puts in front of the inner frame (an IPv4 underlay). */
struct lfp_vxlan_headers {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	__be32 vx_flags;
	__be32 vx_vni;
	struct ethhdr inner;
} __attribute__((packed));

#define LFP_VXLAN_ADDED (sizeof(struct lfp_vxlan_headers) - sizeof(struct ethhdr))
#define LFP_VXLAN_FLAG_VNI 0x08000000          /* VXLAN_HF_VNI: the VNI field is valid */
/* from the outer UDP header to the inner IP header, in 16-bit words */
#define LFP_VXLAN_UDP_WORDS ((sizeof(struct udphdr) + 8 + sizeof(struct ethhdr)) / 2)

/* What the outer packet's egress must be: one a redirect may use, with
 * nothing on its transmit path that reads the skb beyond its bytes (the
 * fast path's is not the kernel's own: no route, the ingress's queue). */
#define LFP_VXLAN_UNDERLAY (LFP_IF_TC_TX | LFP_IF_ENCAP_TX)

/* What lfp_vxlan_plan found, for lfp_vxlan_encapsulate to write. */
struct lfp_vxlan_plan {
	struct lfp_vtep *vtep;
	__u8 dmac[ETH_ALEN];            /* the outer next hop's, and the underlay's */
	__u8 smac[ETH_ALEN];
	__u32 underlay;                 /* the outer packet's egress */
	__be16 sport;
	__u16 csum_field;               /* the inner transport checksum's offset in its header */
};

/* Whether the fast path sends the packet, routed to `pkt->fwd.dmac` out of
 * the VXLAN device `egress`, encapsulated itself: the MAC's remote allows
 * it (LFP_VTEP_ENCAP), and the device's transmit would build what
 * lfp_vxlan_encapsulate builds from `plan` and send it out of
 * `plan->underlay`. 0: the device encapsulates (a redirect into it, as
 * before), which is always exact. Taken only:
 * - at TC (LFP_HOOK_ENCAPSULATES), never a GSO packet or one already a
 *   tunnel's, an IPv4 packet without options or padding (of a connection
 *   the conntrack node translates, only one that carries a flow hash);
 * - whose transport checksum the sender left to fill (CHECKSUM_PARTIAL, a
 *   socket's on a veth): the device sums its outer UDP over it as that
 *   checksum will read (lco_csum()) and leaves the skb as it is; any other
 *   packet it gives an outer checksum to fill, which no program can ask of
 *   an skb;
 * - with a flow hash: the device's source port is drawn from the skb's
 *   (udp_flow_src_port(); without one it hashes the MACs);
 * - when the outer route, asked as the device asks (lfp_vtep_route), has
 *   room, leaves through another device the outer packet may leave by
 *   (LFP_VXLAN_UNDERLAY), toward a next hop whose neighbour entry is
 *   usable as it is (a STALE one: the kernel's transmit starts probing);
 * - and, where connections are tracked, when the outer connection exists
 *   and the packet would only refresh it (lfp_ct_take_sent): its first
 *   packet is the kernel's, which creates it. */
static __always_inline int lfp_vxlan_plan(struct lfp_pkt *pkt, __u32 egress, struct lfp_vxlan_plan *plan)
{
	/* (one after the other: the stack has little room to spare) */
	union {
		struct bpf_fib_lookup fib;
		struct bpf_sock_tuple tuple;
	} ask;
	struct bpf_fib_lookup *fib = &ask.fib;
	struct lfp_iface *underlay, *out;
	struct lfp_vtep *vtep;
	struct iphdr *ip;
	__u32 hash, inner;
	int from;
	long rc;

	/* (a connection the conntrack node translates, on an skb without a
	 * hash: the device would draw the source port from the translated
	 * packet's, which is not computed before the rewrite — nor may it be,
	 * the skb keeping it) */
	if (!LFP_HOOK_ENCAPSULATES || !(pkt->fwd.flags & LFP_FWD_DEC_TTL) || pkt->fwd.port ||
	    (pkt->ct.manip && !lfp_has_flow_hash(pkt)))
		return 0;
	/* (only an encapsulating egress has a cap: every other routed packet
	 * is spared the lookup of its MAC) */
	out = bpf_map_lookup_elem(&lfp_ifaces, &egress);
	if (!out || !out->tx_len_cap)
		return 0;
	vtep = lfp_vtep_of(egress, pkt->fwd.dmac);
	if (!vtep || !(vtep->flags & LFP_VTEP_ENCAP) || lfp_is_gso(pkt) || lfp_is_encapsulated(pkt))
		return 0;
	ip = lfp_ipv4(pkt);
	if (!ip || ip->ihl != 5 || pkt->len != sizeof(struct ethhdr) + bpf_ntohs(ip->tot_len))
		return 0;
	inner = pkt->len - sizeof(struct ethhdr);
	from = lfp_csum_partial_from(pkt, &plan->csum_field);
	if (inner > vtep->max_len || from != sizeof(struct ethhdr) + sizeof(struct iphdr) ||
	    !((ip->protocol == IPPROTO_UDP && plan->csum_field == offsetof(struct udphdr, check)) ||
	      (ip->protocol == IPPROTO_TCP && plan->csum_field == 16 /* offsetof(struct tcphdr, check) */)))
		return 0;
	/* (the checksum field, which the outer checksum reads, in the linear part) */
	if ((void *)(ip + 1) + plan->csum_field + sizeof(__u16) > pkt->data_end)
		return 0;
	hash = lfp_flow_hash(pkt);
	if (!hash)
		return 0;
	/* udp_flow_src_port(): only the upper half counts, folded in */
	hash ^= hash << 16;
	plan->sport = bpf_htons((__u16)((((__u64)hash * (__u32)(vtep->port_max - vtep->port_min)) >> 32) +
					vtep->port_min));

	__builtin_memset(&ask, 0, sizeof(ask));
	fib->sport = plan->sport;
	rc = lfp_vtep_route(pkt, vtep, egress, inner, fib, 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || fib->ifindex == egress)
		return 0;
	underlay = bpf_map_lookup_elem(&lfp_ifaces, &fib->ifindex);
	if (!underlay || (underlay->flags & LFP_VXLAN_UNDERLAY) != LFP_VXLAN_UNDERLAY)
		return 0;
	/* the outer next hop (the lookup left it in ipv4_dst), as transmit_node
	 * asks of a routed packet's: a STALE one takes this packet through the
	 * device, whose transmit starts probing it, and then the fast path's */
	if (lfp_hint_set(lfp_hint_of(&lfp_neigh_hint), fib->ifindex ^ fib->ipv4_dst)) {
		struct lfp_neigh_key key = { .ifindex = fib->ifindex, .addr = fib->ipv4_dst };
		__u8 *state = bpf_map_lookup_elem(&lfp_neigh, &key);

		if (!state)
			return 0;
		if (*state == LFP_NEIGH_STALE) {
			*state = LFP_NEIGH_PROBING;
			return 0;
		}
	}
	plan->vtep = vtep;
	__builtin_memcpy(plan->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(plan->smac, fib->smac, ETH_ALEN);
	plan->underlay = fib->ifindex;
	if (!(vtep->flags & LFP_VTEP_TRACKED))
		return 1;
	__builtin_memset(&ask, 0, sizeof(ask));
	ask.tuple.ipv4.saddr = vtep->local;
	ask.tuple.ipv4.daddr = vtep->remote;
	ask.tuple.ipv4.sport = plan->sport;
	ask.tuple.ipv4.dport = vtep->port;
	return lfp_ct_take_sent(pkt, &ask.tuple, vtep->flags & LFP_VTEP_NAT_HOOKS ?
				(1ul << IPS_SRC_NAT_DONE_BIT) | (1ul << IPS_DST_NAT_DONE_BIT) : 0) == LFP_CT_TAKEN;
}

/* Put the device's headers in front of the packet, rewritten as it leaves
 * the device (transmit_node), and send it out of the underlay, as
 * vxlan_xmit_one(), udp_tunnel_xmit_skb() and iptunnel_xmit() would: the
 * outer TOS the inner ECN (ip_tunnel_ecn_encap() with TOS 0: CE as
 * ECT(0)), no DF, an ID of its own (Linux draws it per packet from a keyed
 * hash of the addresses: any value is as good), the outer UDP checksum as
 * udp_set_csum() sums it for a CHECKSUM_PARTIAL skb (the inner checksum's
 * complement, its pseudo-header sum, stands for everything after it:
 * lco_csum()), the skb marked as a tunnel's with the inner headers where
 * they are (iptunnel_handle_offloads()) and only an L4 hash kept. 0, or < 0
 * when the packet could not be grown (Linux drops it too:
 * vxlan_build_skb()). */
static __always_inline int lfp_vxlan_encapsulate(struct lfp_pkt *pkt, struct lfp_vxlan_plan *plan)
{
	struct lfp_vtep *vtep = plan->vtep;
	struct lfp_vxlan_headers *hdr;
	const __u16 *words, *field;
	__u16 inner_len;
	__u8 inner_tos;
	__u32 sum;

	{
		struct iphdr *ip = lfp_ipv4(pkt);

		if (!ip)
			return -1;
		inner_tos = ip->tos & 3;
		inner_len = bpf_ntohs(ip->tot_len);
	}
	if (lfp_room_after_mac(pkt, LFP_VXLAN_ADDED,
			       BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
			       BPF_F_ADJ_ROOM_ENCAP_L2_ETH | BPF_F_ADJ_ROOM_ENCAP_L2(sizeof(struct ethhdr))))
		return -1;
	hdr = pkt->data;
	/* (the inner IP header, the checksum's sum runs over, follows) */
	if ((void *)(hdr + 1) + sizeof(struct iphdr) > pkt->data_end)
		return -1;
	__builtin_memcpy(hdr->eth.h_dest, plan->dmac, ETH_ALEN);
	__builtin_memcpy(hdr->eth.h_source, plan->smac, ETH_ALEN);
	hdr->eth.h_proto = bpf_htons(ETH_P_IP);
	hdr->ip.version = 4;
	hdr->ip.ihl = 5;
	hdr->ip.tos = inner_tos == 3 ? 2 : inner_tos;
	hdr->ip.tot_len = bpf_htons(inner_len + LFP_VXLAN_ADDED);
	hdr->ip.id = (__be16)bpf_get_prandom_u32();
	hdr->ip.frag_off = 0;
	hdr->ip.ttl = vtep->ttl;
	hdr->ip.protocol = IPPROTO_UDP;
	hdr->ip.check = 0;
	hdr->ip.saddr = vtep->local;
	hdr->ip.daddr = vtep->remote;
	hdr->udp.source = plan->sport;
	hdr->udp.dest = vtep->port;
	hdr->udp.len = bpf_htons(inner_len + LFP_VXLAN_ADDED - sizeof(struct iphdr));
	hdr->udp.check = 0;
	hdr->vx_flags = bpf_htonl(LFP_VXLAN_FLAG_VNI);
	hdr->vx_vni = vtep->vni;
	__builtin_memcpy(hdr->inner.h_dest, pkt->fwd.dmac, ETH_ALEN);
	__builtin_memcpy(hdr->inner.h_source, pkt->fwd.smac, ETH_ALEN);
	hdr->inner.h_proto = bpf_htons(ETH_P_IP);
	words = (void *)hdr + offsetof(struct lfp_vxlan_headers, ip);
	sum = 0;
#pragma unroll
	for (int i = 0; i < sizeof(struct iphdr) / 2; i++)
		sum = lfp_kcsum_add(sum, words[i]);
	hdr->ip.check = lfp_kcsum_fold(sum);
	if (vtep->flags & LFP_VTEP_UDP_CSUM) {
		field = (const __u16 *)((void *)(hdr + 1) + sizeof(struct iphdr) + (plan->csum_field & 0x1f));
		if ((void *)(field + 1) > pkt->data_end)
			return -1;
		sum = lfp_kcsum_add(~(__u32)*field & 0xffff, hdr->ip.saddr);
		sum = lfp_kcsum_add(sum, hdr->ip.daddr);
		sum = lfp_kcsum_add(sum, (__u32)hdr->udp.len + bpf_htons(IPPROTO_UDP));
		/* the outer UDP header, VXLAN header, inner Ethernet and IP headers */
		words = (void *)hdr + offsetof(struct lfp_vxlan_headers, udp);
#pragma unroll
		for (int i = 0; i < LFP_VXLAN_UDP_WORDS + sizeof(struct iphdr) / 2; i++)
			sum = lfp_kcsum_add(sum, words[i]);
		hdr->udp.check = lfp_kcsum_fold(sum) ?: 0xffff;   /* CSUM_MANGLED_0 */
	}
	lfp_clear_hash_unless_l4(pkt);
	return lfp_arm_redirect_to(pkt, plan->underlay, LFP_VXLAN_UNDERLAY) ? 0 : -1;
}

#endif
