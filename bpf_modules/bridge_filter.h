/* Bridge-filter node: what br_netfilter makes iptables do to a bridged IPv4
 * frame (ip6tables to an IPv6 one), with Linux's verdict — the chains the
 * filter node evaluates (raw's PREROUTING, the kernel's connection tracking
 * after it, mangle's PREROUTING, native nft chains, the filter table's
 * FORWARD chains of both backends), which see the bridge as the
 * packet's -i (setup_pre_routing(), br_nf_forward_ip()) and, from FORWARD
 * on, its -o — never its ports — evaluated
 * by the filter node's classifier of that family (filter.h): forwarded as
 * bridged, dropped, or handed to the kernel.
 *
 * It looks only at frames the bridge node marked LFP_FWD_NF_IPV4 (their
 * bridge calls iptables, iptables could act on them, br_validate_ipv4()
 * would let the header through unchanged, and they are not fragments) or
 * LFP_FWD_NF_IPV6 (the same for ip6tables, whose FORWARD chains and IPv6
 * connection tracking are all of it that could act on them).
 * What else br_netfilter runs for them is kept out of the way by the filter
 * scope (linuxfp/graph/filtering/scope.py): raw's and mangle's PREROUTING
 * chains are classified as hooks before FORWARD (their other chains and
 * security rules keep the whole namespace on the kernel path), and nat chains see only a
 * connection's first packet, which conntrack.h leaves to the kernel. Rules
 * with physdev matches (the ports br_netfilter remembers) are ones the
 * classifier does not reproduce: the packets that reach them go to the
 * kernel.
 * Declared to the controller by linuxfp/graph/nodes/bridge_filter.py.
 */
#ifndef LFP_BRIDGE_FILTER_H
#define LFP_BRIDGE_FILTER_H

#include "common.h"
#include "filter.h"
#include "parse.h"

#define LFP_COUNTERS_BRIDGE_FILTER(X)                                                     \
	X(BRF_MARKED,             bridge_filter, pass, "carries a mark, which iptables rules would see")

static __always_inline enum lfp_rc bridge_filter_node(struct lfp_pkt *pkt)
{
	if (!(pkt->fwd.flags & (LFP_FWD_NF_IPV4 | LFP_FWD_NF_IPV6)))
		return LFP_NEXT;
	/* The classifier takes the mark to be 0, as nothing before FORWARD
	 * sets one; a frame that arrives marked (TC sees it) is the kernel's. */
	if (lfp_has_mark(pkt))
		return lfp_pass(pkt, LFP_CNT_BRF_MARKED);
	/* The bridge node set l3_ifindex to the bridge. */
	return lfp_flt_forward(pkt, pkt->l3_ifindex, pkt->l3_ifindex);
}

#endif
