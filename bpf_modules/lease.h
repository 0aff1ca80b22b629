/* Whether this namespace's datapath may act at all: the controller's lease
 * (it is alive and current) and the kernel-side watch of the tables that
 * change without a netlink event (they have not changed since it looked).
 * Included by every pipeline and by controller.c. */
#ifndef LFP_LEASE_H
#define LFP_LEASE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "counters.h"

/* Written by the controller through lfp_lease_renew (controller.c): held
 * stays 1 while the controller's event loop keeps renewing the lease, which
 * it does only while it knows the namespace's state is current. Each renewal
 * re-arms a timer that clears held one term later, so a controller that
 * died, was stopped or whose loop is stuck lets it lapse, and from then on
 * every packet goes to the kernel: the datapath never outlives the knowledge
 * that keeps it exact. The kernel keeps time, so a packet reads one word
 * instead of a clock. A fresh map reads 0: no lease until the controller
 * grants one.
 * watch_acked: the lfp_watch.changes_started the controller last re-read the
 * watched tables after. Layout mirrored in controller/lease.py. */
struct lfp_lease {
	__u64 watch_acked;
	__u32 held;
	__u32 pad;
	struct bpf_timer lapse;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lfp_lease);
} lfp_lease SEC(".maps");

/* Written by controller.c, synchronously with the system call that changes a
 * watched table (legacy iptables: no event, so the controller could only
 * poll it). changes_started moves before the change is made: from then on
 * the datapath passes until the controller has re-read the table;
 * changes_done and changer_tgid let it see that no change is in flight.
 * Layout mirrored in controller/watch.py. */
struct lfp_watch {
	__u64 changes_started;
	__u64 changes_done;
	__u32 changer_tgid;     /* the process of the latest change */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lfp_watch);
} lfp_watch SEC(".maps");

/* Returned by lfp_lease_check() when the datapath may act. */
#define LFP_LEASE_OK LFP_CNT_MAX

/* LFP_LEASE_OK, or the reason the kernel must take the packet. */
static __always_inline enum lfp_counter lfp_lease_check(void)
{
	__u32 key = 0;
	struct lfp_lease *lease = bpf_map_lookup_elem(&lfp_lease, &key);
	struct lfp_watch *watch = bpf_map_lookup_elem(&lfp_watch, &key);

	if (!lease || !watch || !lease->held)
		return LFP_CNT_LEASE_EXPIRED;
	if (watch->changes_started != lease->watch_acked)
		return LFP_CNT_WATCHED_TABLE_CHANGED;
	return LFP_LEASE_OK;
}

#endif
