/* The generation of the namespace's neighbour tables, which the kernel does
 * not version: bumped by the router node's watch (router_watch.c) as the
 * kernel changes any neighbour entry, read by the FIB-answer cache
 * (fib_cache.h), whose cached next-hop MACs it invalidates.
 * Layout mirrored nowhere: only BPF programs read and write it. */
#ifndef LFP_NEIGH_WATCH_H
#define LFP_NEIGH_WATCH_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct lfp_neigh_watch {
	__u64 generation;
	/* Non-zero while the watch is attached (set by its start program once
	 * every tracepoint is, cleared by its stop program): without it a
	 * neighbour change would go unseen, so nothing may be cached. */
	__u64 armed;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lfp_neigh_watch);
} lfp_neigh_watch SEC(".maps");

static __always_inline struct lfp_neigh_watch *lfp_neigh_watch_of(void)
{
	__u32 key = 0;

	return bpf_map_lookup_elem(&lfp_neigh_watch, &key);
}

#endif
