/* Example node (tests only; not a Linux behaviour): it sits between route
 * and transmit, where the egress is decided but nothing is rewritten yet,
 * and looks the egress up in a map its Python module fills from interface
 * aliases ("lfp-guard:drop" / "lfp-guard:pass"). It shows what a real
 * filter node does: drop, pass to the kernel, or let through. Declared by
 * egress_guard.py beside it; see docs/architecture.md, "How to add a node".
 */
#ifndef LFP_EGRESS_GUARD_H
#define LFP_EGRESS_GUARD_H

#include "common.h"

#define LFP_COUNTERS_EGRESS_GUARD(X)                                                      \
	X(GUARD_DROPPED,          egress_guard, drop, "egress guarded: dropped")            \
	X(GUARD_PASSED,           egress_guard, pass, "egress guarded: left to the kernel")

#define LFP_GUARD_DROP 1
#define LFP_GUARD_PASS 2

/* egress ifindex -> LFP_GUARD_* */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} lfp_guarded SEC(".maps");

static __always_inline enum lfp_rc egress_guard_node(struct lfp_pkt *pkt)
{
	__u8 *verdict = bpf_map_lookup_elem(&lfp_guarded, &pkt->fwd.egress);

	if (!verdict)
		return LFP_NEXT;
	if (*verdict == LFP_GUARD_DROP)
		return lfp_drop(pkt, LFP_CNT_GUARD_DROPPED);
	return lfp_pass(pkt, LFP_CNT_GUARD_PASSED);
}

#endif
