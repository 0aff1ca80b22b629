/* Conntrack-TCP node: TCP goes to the kernel before any routing work while
 * connection tracking of its family (IPv4, IPv6) is on.
 *
 * With connection tracking on (the filter generation's LFP_FLT_CT), the
 * filter node hands every TCP packet to the kernel: conntrack follows each
 * segment's sequence and window numbers, state no program may update
 * (filter.h, conntrack.h). Reaching that verdict after the router's lookup
 * and the FORWARD stage's own checks costs 300 to 600 ns per segment and
 * acknowledgement; this node gives it where Linux's conntrack runs
 * (PREROUTING), before the routing decision, for all TCP that is not
 * bridged (what the router would have passed for another reason too: its
 * count is this node's then). IPv6's next header is TCP only without
 * extension headers, which the router passes anyway.
 *
 * Exact because handing a packet to the kernel always is, and with the
 * built-in nodes it takes nothing from the fast path: every exit of the IP
 * path crosses FORWARD, where this packet would be passed anyway (bridged
 * frames skip this stage: the bridge node keeps its own per-frame
 * bookkeeping, and the bridge-filter node passes their TCP as before). A
 * node of its own (LINUXFP_NODES) with an IP exit before FORWARD would
 * lose TCP here to the kernel: still exact, no longer free.
 * Placed only with the filter node (linuxfp/graph/nodes/conntrack_tcp.py);
 * the generation's bit is read per packet, so a ruleset that turns
 * connection tracking off lets TCP through to the nodes after it at once.
 */
#ifndef LFP_CONNTRACK_TCP_H
#define LFP_CONNTRACK_TCP_H

#include "common.h"
#include "filter.h"
#include "parse.h"

#define LFP_COUNTERS_CONNTRACK_TCP(X)                                                     \
	X(CT_TCP_TRACKED,         conntrack_tcp, pass, "connection tracking on: TCP, before routing (its window tracking stays with the kernel)")

static __always_inline enum lfp_rc conntrack_tcp_node(struct lfp_pkt *pkt)
{
	__u32 family6 = pkt->l3_proto == bpf_htons(ETH_P_IPV6);
	struct lfp_flt_cfg *cfg;

	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6 || ip6->nexthdr != IPPROTO_TCP)
			return LFP_NEXT;
	} else {
		struct iphdr *ip;

		if (pkt->l3_proto != bpf_htons(ETH_P_IP))
			return LFP_NEXT;
		ip = lfp_ipv4(pkt);
		if (!ip || ip->protocol != IPPROTO_TCP)
			return LFP_NEXT;
	}
	cfg = bpf_map_lookup_elem(&lfp_flt_cfg, &family6);
	if (!cfg || !(*(volatile const __u32 *)&cfg->gen & LFP_FLT_CT))
		return LFP_NEXT;
	return lfp_pass(pkt, LFP_CNT_CT_TCP_TRACKED);
}

#endif /* LFP_CONNTRACK_TCP_H */
