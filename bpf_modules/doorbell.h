/* The controller's doorbell: a record per watched change wakes its event
 * loop, which polls this map's fd with its netlink sockets, to look at
 * once instead of at its next idle timeout (controller/watch.py; the records
 * themselves are discarded). One per namespace, pinned with its shared maps
 * (controller/lease.py NAMESPACE_MAPS), rung by the controller's cgroup
 * programs (controller.c) and by the nodes' kernel-side watches that count
 * changes without an event (filter_watch.c: ipsets). A full ring drops the
 * record, not the wake-up: the loop is already due. */
#ifndef LFP_DOORBELL_H
#define LFP_DOORBELL_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} lfp_watch_doorbell SEC(".maps");

static __always_inline void lfp_ring_doorbell(void)
{
	__u8 ring = 1;

	bpf_ringbuf_output(&lfp_watch_doorbell, &ring, sizeof(ring), 0);
}

#endif
