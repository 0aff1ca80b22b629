/* Whether this namespace's datapath may act at all: the controller's lease
 * (it is alive and current) and the kernel-side watch of the tables that
 * change without a netlink event (they have not changed since it looked).
 * Included by every pipeline and by controller.c. */
#ifndef LFP_LEASE_H
#define LFP_LEASE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "counters.h"

/* One entry, shared by every pipeline of the namespace; written only by the
 * controller's own programs (controller.c), so each writer owns its fields.
 *
 * held: lfp_lease_renew sets it each time the controller's event loop
 * renews the lease, which it does only while it knows the namespace's state
 * is current, and re-arms `lapse`, a timer that clears it one term later. A
 * controller that died, was stopped or whose loop is stuck lets it lapse, and
 * from then on every packet goes to the kernel: the datapath never outlives
 * the knowledge that keeps it exact. The kernel keeps time, so a packet
 * reads one word instead of a clock. A fresh map reads 0: no lease until the
 * controller grants one.
 *
 * changes_started / changes_done / changer_tgid: the watch of the tables
 * that change without an event (legacy iptables), bumped by the cgroup
 * setsockopt program synchronously with the system call, changes_started
 * before the kernel changes anything. sysctl_writes: the writes to this
 * namespace's net/ sysctls begun so far, bumped by the cgroup sysctl program
 * before the kernel stores the value (many, e.g. accept_local or
 * bridge-nf-call-iptables, send no event). watch_acked: the changes_started
 * plus sysctl_writes (plus lfp_nfnl_sent, below) the controller last re-read
 * the tables after (written with each renewal). Until they are equal again,
 * the kernel decides.
 *
 * addr_genid / addr_guarded: the kernel's IPv4 address generation
 * (net->ipv4.dev_addr_genid, which every address added or removed moves, in
 * the changing system call, right after its netlink message is queued) that
 * the controller read before it last took in the addresses; while it is
 * guarded and the kernel's reads otherwise, the addresses the datapath holds
 * (local sources, addrtype) may be stale, and the kernel decides. Unguarded
 * only for tests that load a pipeline without a controller.
 *
 * nft_seq / nft_guarded: the same for nf_tables (iptables-nft's rules and
 * the nft tool's tables): its generation (net->nft.base_seq, which every
 * commit moves inside the committing system call, before the new rules take
 * effect) that the controller read before it last read netfilter; while it
 * is guarded and the kernel's reads otherwise, the rules the datapath holds
 * may be stale, and the kernel decides (counted as nft_changed). Unguarded
 * where struct net holds no nft.base_seq (no nf_tables, or before 6.17).
 *
 * Layout mirrored in controller/lease.py. */
struct lfp_lease {
	__u64 changes_started;
	__u64 changes_done;
	__u64 watch_acked;
	__u64 sysctl_writes;
	__u32 held;
	__u32 changer_tgid;     /* the process of the latest change, as the controller's pid
				 * namespace numbers it (0: one it cannot see) */
	__u32 addr_genid;
	__u32 addr_guarded;
	__u32 nft_seq;
	__u32 nft_guarded;
	struct bpf_timer lapse;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lfp_lease);
} lfp_lease SEC(".maps");

/* Entry 0: netfilter netlink messages sent in the namespace by processes
 * other than the controller, counted by the filter node's watch
 * (filter_watch.c) as each sending call returns: ipset commands change sets
 * with no event. Each counts as a change both started and done, so it adds
 * to changes_started; a tracing program cannot write lfp_lease itself (a
 * map holding a timer is not for tracing programs). Entry 1: non-zero while
 * rules match ipsets (the controller arms the watch; unarmed, it counts
 * nothing, so other netfilter netlink traffic — NFQUEUE verdicts,
 * conntrack tools — costs nothing). Layout mirrored in controller/lease.py. */
#define LFP_NFNL_SENT 0
#define LFP_NFNL_ARMED 1
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} lfp_nfnl_sent SEC(".maps");

/* Returned by lfp_lease_check() when the datapath may act. */
#define LFP_LEASE_OK LFP_CNT_MAX

/* The fields read, relocated against the running kernel's BTF
 * (`nft.base_seq`: only where struct net holds it — nf_tables built in or
 * loaded, and 6.17 on, before which it lived in nf_tables' own per-net data
 * and the nf_tables generation stays unguarded). */
struct net___lfp_lease {
	struct {
		struct {
			int counter;
		} dev_addr_genid;
	} ipv4;
	struct {
		unsigned int base_seq;
	} nft;
} __attribute__((preserve_access_index));

/* LFP_LEASE_OK, or the reason the kernel must take the packet arriving in
 * `net` (the namespace the pipeline serves). */
static __always_inline enum lfp_counter lfp_lease_check(struct net___lfp_lease *net)
{
	__u32 key = 0;
	struct lfp_lease *lease = bpf_map_lookup_elem(&lfp_lease, &key);
	__u32 sent_key = LFP_NFNL_SENT;
	__u64 *sent = bpf_map_lookup_elem(&lfp_nfnl_sent, &sent_key);

	if (!lease || !lease->held || !sent)
		return LFP_CNT_LEASE_EXPIRED;
	if (lease->changes_started + lease->sysctl_writes + *sent != lease->watch_acked)
		return LFP_CNT_WATCHED_TABLE_CHANGED;
	if (lease->addr_guarded && (__u32)net->ipv4.dev_addr_genid.counter != lease->addr_genid)
		return LFP_CNT_ADDRESSES_CHANGED;
	if (bpf_core_field_exists(net->nft.base_seq) && lease->nft_guarded && net->nft.base_seq != lease->nft_seq)
		return LFP_CNT_NFT_CHANGED;
	return LFP_LEASE_OK;
}

#endif
