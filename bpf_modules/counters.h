/* Counter ids: the pipeline's own reasons here, every node's in its header.
 *
 * Each list is an X-macro, X(id, node, kind, description), kind one of fast
 * (handled in the fast path), pass (to the kernel), drop (dropped as Linux
 * would) — the verdicts, one per packet — or event (something that happened
 * on the way, counted beside the verdict, e.g. a FIB cache hit). linuxfp/synth/counters.py parses these lines from this file and
 * from every registered node's header, in registration order, and the
 * rendered pipeline defines LFP_COUNTERS(X) as all of them: ids are the same
 * in every shape, and a reason added to a header shows up in `linuxfp stats`
 * without touching Python.
 */
#ifndef LFP_COUNTERS_H
#define LFP_COUNTERS_H

#define LFP_COUNTERS_PIPELINE(X)                                                          \
	X(PIPELINE_END,           pipeline, pass, "no node took the packet")                \
	X(LEASE_EXPIRED,          pipeline, pass, "no live controller holds the lease (gone, stopped or stuck)") \
	X(WATCHED_TABLE_CHANGED,  pipeline, pass, "netfilter changed (legacy iptables, a sysctl, an ipset; nf_tables' notification came); the controller has not applied it yet") \
	X(ADDRESSES_CHANGED,      pipeline, pass, "an IPv4 address was added or removed; the controller has not read the addresses since") \
	X(NFT_CHANGED,            pipeline, pass, "an nf_tables commit (iptables-nft, nft) moved the kernel's nf_tables generation; the controller has not read netfilter since") \
	X(PARSE_SHORT,            pipeline, pass, "frame shorter than its headers")         \
	X(VLAN_TAGGED,            pipeline, pass, "VLAN-tagged frame")                        \
	X(TCX_OTHERS,             pipeline, pass, "tcx programs of another tool run on this ingress (or on the bridge a frame is handed up to): the controller has not read them yet, or they are another namespace's LinuxFP's (a device moved in); briefly also while a hook is switched") \
	X(NF_INGRESS,             pipeline, pass, "nf_tables hooks run on this ingress (or on the bridge a frame is handed up to): a netdev or inet ingress chain is bound to the device")

/* Programs that are not pipelines (controller.c) know only the pipeline's. */
#ifndef LFP_COUNTERS
#define LFP_COUNTERS(X) LFP_COUNTERS_PIPELINE(X)
#endif

#define LFP_COUNTER_ENUM(id, node, kind, desc) LFP_CNT_##id,
enum lfp_counter {
	LFP_COUNTERS(LFP_COUNTER_ENUM)
	LFP_CNT_MAX
};
#undef LFP_COUNTER_ENUM

#endif
