/* Whether this namespace's datapath may act at all: the controller's lease
 * (it is alive and current) and the kernel-side watch of the tables that
 * change without a netlink event (they have not changed since it looked).
 * Included by every pipeline and by watch.c. */
#ifndef LFP_LEASE_H
#define LFP_LEASE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "counters.h"

/* Written by the controller (controller/lease.py mirrors the layout).
 * expires_ns: the controller's event loop moves it forward
 * (CLOCK_MONOTONIC_COARSE) while it knows the namespace's state is current. A
 * controller that died, was stopped or whose loop is stuck stops renewing,
 * and within one lease every packet goes to the kernel: the datapath never
 * outlives the knowledge that keeps it exact. The coarse clock is a load of
 * the timekeeper's last tick, far cheaper than reading a clocksource; its
 * tick granularity is nothing against a lease of a second. A fresh map reads
 * 0: no lease until the controller grants one.
 * watch_acked: the lfp_watch.changes_started the controller last read the
 * watched tables after. */
struct lfp_lease {
	__u64 expires_ns;
	__u64 watch_acked;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lfp_lease);
} lfp_lease SEC(".maps");

/* Written by watch.c, synchronously with the system call that changes a
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

	if (!lease || !watch || bpf_ktime_get_coarse_ns() >= lease->expires_ns)
		return LFP_CNT_LEASE_EXPIRED;
	if (watch->changes_started != lease->watch_acked)
		return LFP_CNT_WATCHED_TABLE_CHANGED;
	return LFP_LEASE_OK;
}

#endif
