/* NAT-out node: nat POSTROUTING's check on an established connection.
 *
 * A connection MASQUERADE translated is bound to the device it left by
 * (nf_conn_nat.masq_index): routed out of another one in its original
 * direction, Linux drops the packet and forgets the connection
 * (nf_nat_oif_changed()), so the fast path hands it over. The source
 * translation itself is written by transmit (nat_rewrite.h), after the
 * last decision. Placed with the conntrack node (linuxfp/graph/nodes/nat_out.py).
 */
#ifndef LFP_NAT_OUT_H
#define LFP_NAT_OUT_H

#include "common.h"

#define LFP_COUNTERS_NAT_OUT(X)                                                           \
	X(NAT_MASQ_ELSEWHERE,     nat_out, pass, "a MASQUERADEd connection routed out of another device than its own (Linux drops it and forgets the connection)")

static __always_inline enum lfp_rc nat_out_node(struct lfp_pkt *pkt)
{
	if ((pkt->ct.manip & LFP_NAT_SRC) && pkt->ct.masq_ifindex && pkt->ct.masq_ifindex != pkt->fwd.egress)
		return lfp_pass(pkt, LFP_CNT_NAT_MASQ_ELSEWHERE);
	return LFP_NEXT;
}

#endif /* LFP_NAT_OUT_H */
