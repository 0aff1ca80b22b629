/* Conntrack node: what Linux's connection tracking and NAT do at
 * PREROUTING, while connection tracking of the packet's family is on (the
 * filter generation's LFP_FLT_CT).
 *
 * TCP goes to the kernel here: conntrack follows each segment's sequence
 * and window numbers, state no program may update (filter.h, conntrack.h).
 * Reaching that verdict after the router's lookup and the FORWARD stage's
 * own checks costs 300 to 600 ns per segment and acknowledgement; this node
 * gives it before the routing decision, for all TCP that is not bridged
 * (what the router would have passed for another reason too: its count is
 * this node's then). IPv6's next header is TCP only without extension
 * headers, which the router passes anyway.
 *
 * IPv4 UDP is looked up here, once (conntrack.h keeps the answer in the
 * context for the filter node's FORWARD verdict, which looks it up a second
 * time where a chain before conntrack decides first and the refresh would
 * change the entry, below), and an established
 * connection with NAT (SNAT, MASQUERADE, DNAT — a gateway's, a Kubernetes
 * service's) is translated as Linux translates it, from the entry alone: no
 * nat rule is consulted after a connection's first packet
 * (nf_nat_inet_fn()). The destination changes here, before the routing
 * decision — the reply of a MASQUERADEd connection, addressed to the router
 * itself, is routed to the client behind it — and the source at
 * POSTROUTING (nat_out.h checks MASQUERADE's device there). This node
 * writes the new destination address and port, so the router and the
 * filter see the packet as Linux shows it them; transmit writes the rest
 * after its last decision (nat_rewrite.h), and a packet handed to the
 * kernel on the way is restored first (lfp_leave()). Connections with NAT
 * are taken only while the classifier carries LFP_FLT_NAT too: an IPv4 nat
 * table registered (without one the kernel translates nothing, whatever an
 * entry says). The NAT they carry is left for the filter's --ctstate SNAT
 * and DNAT (LFP_CT_SNAT, LFP_CT_DNAT).
 * Where a chain before conntrack's priority (raw) may drop the packet
 * (LFP_FLT_CT_LATE), the connection is looked up here without its refresh,
 * which the filter node settles after that chain's verdict where it would
 * change the entry (conntrack.h), and a packet whose destination it would
 * translate goes to the kernel.
 * Everything conntrack.h does not take goes on unchanged: the filter node
 * passes it with its own reason.
 *
 * Exact because handing a packet to the kernel always is, and with the
 * built-in nodes it takes nothing from the fast path: every exit of the IP
 * path crosses FORWARD, where TCP would be passed anyway (bridged frames
 * skip this stage: the bridge node keeps its own per-frame bookkeeping, and
 * the bridge-filter node passes their TCP, and their connections with NAT,
 * as before). A node of its own (LINUXFP_NODES) with an IP exit before
 * FORWARD would lose TCP here to the kernel: still exact, no longer free —
 * and must not forward or drop a packet this node left owed its refresh
 * (LFP_CT_OWED), which only the filter settles.
 * Placed only with the filter node (linuxfp/graph/nodes/conntrack.py); the
 * generation's bits are read per packet, so a ruleset that turns connection
 * tracking off lets TCP through to the nodes after it at once.
 */
#ifndef LFP_CT_PREROUTING_H
#define LFP_CT_PREROUTING_H

#include "common.h"
#include "conntrack.h"
#include "filter.h"
#include "nat_rewrite.h"
#include "parse.h"
#include "router.h"

#define LFP_COUNTERS_CONNTRACK(X)                                                         \
	X(CT_TCP_TRACKED,         conntrack, pass, "connection tracking on: TCP, before routing (its window tracking stays with the kernel)") \
	X(NAT_UNWRITABLE,         conntrack, drop, "a translated packet could not be written (Linux drops it too)") \
	X(CT_TRANSLATED_BEFORE_RAW, conntrack, pass, "connection tracking on: a chain before conntrack (raw) meets this packet's destination untranslated") \
	X(CT_REFRESH_OWED,        conntrack, event, "a connection's refresh left owed to the filter (a chain before conntrack decides first, and the refresh would change the entry)")

/* Whether ip_rcv() hands the IPv4 packet to PREROUTING as it is, where
 * conntrack sees it (the router's own checks of what ip_rcv() takes: this
 * node is only ever placed with it): a packet Linux drops before must not
 * refresh a connection. The router passes the rest, each for its reason
 * (a GSO packet too, here: its segments are the kernel's to translate). */
static __always_inline int lfp_ct_reaches_prerouting(struct lfp_pkt *pkt, struct iphdr *ip)
{
	struct ethhdr *eth = lfp_eth(pkt);
	struct lfp_iface *in;

	if (!eth || lfp_is_gso(pkt))
		return 0;
	return lfp_l3_ingress_refusal(pkt, eth, &in) == LFP_CNT_MAX && lfp_ipv4_rcv_refusal(pkt, ip) == LFP_CNT_MAX;
}

/* An IPv4 UDP datagram: looked up, and an established connection with NAT
 * given its destination as PREROUTING leaves it. `late`: a chain before
 * conntrack's priority may drop the packet (LFP_FLT_CT_LATE): the
 * connection's refresh, where it would change the entry, is left owed to
 * the filter node, which settles it after that chain's verdict
 * (conntrack.h), and a packet whose destination
 * would be translated goes to the kernel as it came — that chain sees it
 * so, and the filter node, after routing, could only see it translated. */
static __always_inline enum lfp_rc lfp_ct_translate(struct lfp_pkt *pkt, struct iphdr *ip, int late)
{
	if (!lfp_ct_reaches_prerouting(pkt, ip))
		return LFP_NEXT;
	if (lfp_ct_take_nat(pkt, !late) != LFP_CT_TAKEN)
		return LFP_NEXT;
	if (!(pkt->ct.manip & LFP_NAT_DST)) {
		/* (counted where the filter settles it: one translated here goes to the kernel) */
		if (lfp_ct_owed(pkt))
			lfp_count(pkt, LFP_CNT_CT_REFRESH_OWED);
		return LFP_NEXT;
	}
	if (late) {
		pkt->ct.manip = 0;      /* nothing written: nothing to undo */
		return lfp_pass(pkt, LFP_CNT_CT_TRANSLATED_BEFORE_RAW);
	}
	if (lfp_nat_rewrite_destination(pkt)) {
		pkt->ct.manip = 0;
		return lfp_drop(pkt, LFP_CNT_NAT_UNWRITABLE);
	}
	return LFP_NEXT;
}

static __always_inline enum lfp_rc conntrack_node(struct lfp_pkt *pkt)
{
	__u32 family6 = pkt->l3_proto == bpf_htons(ETH_P_IPV6);
	struct iphdr *ip = NULL;
	struct lfp_flt_cfg *cfg;
	__u32 gen;
	__u8 proto;

	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6)
			return LFP_NEXT;
		proto = ip6->nexthdr;
	} else {
		if (pkt->l3_proto != bpf_htons(ETH_P_IP))
			return LFP_NEXT;
		ip = lfp_ipv4(pkt);
		if (!ip)
			return LFP_NEXT;
		proto = ip->protocol;
	}
	if (proto != IPPROTO_TCP && (proto != IPPROTO_UDP || family6))
		return LFP_NEXT;
	cfg = bpf_map_lookup_elem(&lfp_flt_cfg, &family6);
	if (!cfg)
		return LFP_NEXT;
	gen = *(volatile const __u32 *)&cfg->gen;
	if (gen == LFP_FLT_OPEN || !(gen & LFP_FLT_CT))
		return LFP_NEXT;
	if (proto == IPPROTO_TCP)
		return lfp_pass(pkt, LFP_CNT_CT_TCP_TRACKED);
	if ((gen & LFP_FLT_NAT) && ip)
		return lfp_ct_translate(pkt, ip, gen & LFP_FLT_CT_LATE);
	return LFP_NEXT;
}

#endif /* LFP_CT_PREROUTING_H */
