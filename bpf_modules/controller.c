/* The programs the controller runs itself, never on packets: the lease
 * renewal and the watch of legacy iptables, the one table that changes
 * without any event. Loaded once per `linuxfp run`, against the namespace's
 * shared lfp_lease (lease.h).
 *
 * Lease: the controller's event loop runs lfp_lease_renew (BPF_PROG_TEST_RUN)
 * every 200 ms; it sets held and re-arms a timer that clears it one term
 * later. It reads the kernel's generations through lfp_read_generations.
 *
 * Watch: iptables-legacy (libiptc) replaces a whole table with one
 * setsockopt(SOL_IP, IPT_SO_SET_REPLACE) and then, once the replace is done,
 * adds the old counters with setsockopt(SOL_IP, IPT_SO_SET_ADD_COUNTERS). A
 * cgroup setsockopt program at the cgroup root sees both before the kernel
 * acts on them, and only setsockopt calls pay for it (a raw tracepoint on
 * every system call measured +120 ns per call here, host-wide). The replace
 * bumps lfp_lease.changes_started before the kernel changes anything: from
 * then on the datapath, which compares it with what the controller
 * acknowledged, hands packets to the kernel until the controller has re-read
 * the table; the counters call bumps changes_done, so the controller knows no
 * replace is still in flight (a replace that fails is followed by no
 * counters call: its process exits, which the controller checks).
 * ip6tables-legacy and arptables-legacy replace their tables the same way
 * (at SOL_IPV6, and with ARPT_SO_* at SOL_IP). Only calls made in the
 * watched namespace count. Closing the program's link
 * (the controller exits) stops the watch, and the lease then runs out.
 *
 * Sysctls: many that the graph depends on send no event when written
 * (accept_local, route_localnet, send_redirects, accept_redirects,
 * bridge-nf-call-iptables, ...). A cgroup sysctl program at the cgroup root
 * runs in the writing system call before the kernel stores the value; for a
 * net/ sysctl of the watched namespace it records the writing thread and
 * bumps lfp_lease.sysctl_writes, and the datapath passes from then on. There
 * is no hook once the value is stored, so the controller re-reads only after
 * each recorded thread has left that write (controller/watch.py, through
 * /proc/TID/syscall). */
#include <bpf/bpf_core_read.h>

#include "lease.h"
#include "netns.h"       /* lfp_netns_cookie: the watched namespace */
#include "pidns.h"       /* the writer, as the controller numbers threads */
#include "doorbell.h"    /* rung for every change counted */

#define SOL_IP 0
#define SOL_IPV6 41
#define IPT_SO_SET_REPLACE 64          /* also IP6T_SO_SET_REPLACE at SOL_IPV6 */
#define IPT_SO_SET_ADD_COUNTERS 65
#define ARPT_SO_SET_REPLACE 96         /* arptables-legacy, at SOL_IP */
#define ARPT_SO_SET_ADD_COUNTERS 97

#define CLOCK_MONOTONIC 1

/* BPF_PROG_TEST_RUN's context for lfp_lease_renew (controller/lease.py);
 * a term of 0 revokes the lease at once. */
struct lfp_renewal {
	__u64 watch_acked;
	__u64 term_ns;
	__u32 addr_genid;       /* lfp_lease's, as lfp_read_generations read it */
	__u32 addr_guarded;
	__u32 nft_seq;          /* likewise */
	__u32 nft_guarded;
};

/* BPF_PROG_TEST_RUN's context for lfp_read_generations, filled in. */
struct lfp_generations {
	__u32 addr_genid;
	__u32 nft_seq;
	__u32 nft_known;        /* 0: no nft.base_seq in struct net (no nf_tables, or before 6.17) */
};

static int lfp_lease_lapse(void *map, __u32 *key, struct lfp_lease *lease)
{
	(void)map;
	(void)key;
	lease->held = 0;
	return 0;
}

SEC("syscall")
int lfp_lease_renew(struct lfp_renewal *renewal)
{
	__u32 key = 0;
	struct lfp_lease *lease = bpf_map_lookup_elem(&lfp_lease, &key);

	if (!lease)
		return 1;
	if (!renewal->term_ns) {
		lease->held = 0;
		bpf_timer_cancel(&lease->lapse);
		return 0;
	}
	bpf_timer_init(&lease->lapse, &lfp_lease, CLOCK_MONOTONIC);   /* -EBUSY once armed before */
	bpf_timer_set_callback(&lease->lapse, lfp_lease_lapse);
	/* No lease without a timer that ends it. */
	if (bpf_timer_start(&lease->lapse, renewal->term_ns, 0)) {
		lease->held = 0;
		return 2;
	}
	lease->watch_acked = renewal->watch_acked;
	lease->addr_genid = renewal->addr_genid;
	lease->addr_guarded = renewal->addr_guarded;
	lease->nft_seq = renewal->nft_seq;
	lease->nft_guarded = renewal->nft_guarded;
	lease->held = 1;
	return 0;
}

struct nsproxy___lfp_net {
	struct net *net_ns;
} __attribute__((preserve_access_index));

struct task_struct___lfp_net {
	struct nsproxy___lfp_net *nsproxy;
} __attribute__((preserve_access_index));

/* The kernel's generations the controller reads *before* it takes in what
 * they version (controller/lease.py), from the calling thread's namespace:
 * 0, or 1 where that is not the watched namespace (or the task is exiting). */
SEC("syscall")
int lfp_read_generations(struct lfp_generations *gens)
{
	struct task_struct___lfp_net *task = (void *)bpf_get_current_task_btf();
	struct nsproxy___lfp_net *nsproxy = BPF_CORE_READ(task, nsproxy);
	struct net *net;

	if (!nsproxy)
		return 1;
	net = BPF_CORE_READ(nsproxy, net_ns);
	if (!net || BPF_CORE_READ(net, net_cookie) != lfp_netns_cookie)
		return 1;
	gens->addr_genid = BPF_CORE_READ((struct net___lfp_lease *)net, ipv4.dev_addr_genid.counter);
	gens->nft_known = bpf_core_field_exists(((struct net___lfp_lease *)net)->nft.base_seq);
	if (gens->nft_known)
		gens->nft_seq = BPF_CORE_READ((struct net___lfp_lease *)net, nft.base_seq);
	return 0;
}

SEC("cgroup/setsockopt")
int lfp_watch_setsockopt(struct bpf_sockopt *ctx)
{
	__u32 key = 0;
	struct lfp_lease *lease;

	int replace, counters;

	/* iptables (IPv4), ip6tables and arptables: the last two matter to
	 * bridged frames through br_netfilter. */
	if (ctx->level == SOL_IP || ctx->level == SOL_IPV6) {
		replace = ctx->optname == IPT_SO_SET_REPLACE ||
			  (ctx->level == SOL_IP && ctx->optname == ARPT_SO_SET_REPLACE);
		counters = ctx->optname == IPT_SO_SET_ADD_COUNTERS ||
			   (ctx->level == SOL_IP && ctx->optname == ARPT_SO_SET_ADD_COUNTERS);
	} else {
		return 1;
	}
	if (!replace && !counters)
		return 1;
	if (bpf_get_netns_cookie(ctx) != lfp_netns_cookie)
		return 1;
	/* The controller's own counters (what the fast path decided, given to
	 * iptables-legacy: linuxfp/state/xt_counters.py) end no replace:
	 * counted, they would make one in flight look done. */
	if (counters && lfp_is_controller())
		return 1;
	lease = bpf_map_lookup_elem(&lfp_lease, &key);
	if (!lease)
		return 1;
	if (replace) {
		lease->changer_tgid = lfp_tgid_seen_by_controller();
		__sync_fetch_and_add(&lease->changes_started, 1);
	} else {
		__sync_fetch_and_add(&lease->changes_done, 1);
	}
	lfp_ring_doorbell();
	return 1;   /* never interfere: the kernel handles the option as always */
}

/* The threads that wrote a watched sysctl, as the controller's pid namespace
 * numbers them (0: a thread it cannot see), and the writes each began: the
 * controller re-reads once every thread whose count moved has left its
 * write. LRU (approximate, per CPU): an entry evicted or not made leaves its
 * writes unnamed, which the controller finds by adding the counts up and
 * takes as in progress. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} lfp_sysctl_writers SEC(".maps");

/* The views of the kernel's sysctl context this program reads. A net/
 * sysctl's header belongs to the set of the namespace it was opened in
 * (register_net_sysctl: &net->sysctls), which may not be the writer's own
 * now (setns after open): the table's namespace is the one that changes. */
struct ctl_table_set___lfp {
	int unused;
} __attribute__((preserve_access_index));

struct net___sysctls {
	struct ctl_table_set___lfp sysctls;
} __attribute__((preserve_access_index));

struct ctl_table_header___lfp {
	struct ctl_table_set___lfp *set;
} __attribute__((preserve_access_index));

struct bpf_sysctl_kern___lfp {
	struct ctl_table_header___lfp *head;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *) __ksym;

static __always_inline __u64 lfp_sysctl_netns_cookie(struct bpf_sysctl *ctx)
{
	struct bpf_sysctl_kern___lfp *kern = bpf_cast_to_kern_ctx(ctx);
	struct ctl_table_set___lfp *set = BPF_CORE_READ(kern, head, set);
	struct net *net = (void *)((char *)set - bpf_core_field_offset(struct net___sysctls, sysctls));

	return BPF_CORE_READ(net, net_cookie);
}

SEC("cgroup/sysctl")
int lfp_watch_sysctl(struct bpf_sysctl *ctx)
{
	char top[5] = {};        /* "net/": -E2BIG leaves it truncated, terminated */
	__u32 key = 0, tid;
	__u64 one = 1, *writes;
	struct lfp_lease *lease;

	if (!ctx->write)
		return 1;
	bpf_sysctl_get_name(ctx, top, sizeof(top), 0);
	if (top[0] != 'n' || top[1] != 'e' || top[2] != 't' || top[3] != '/')
		return 1;
	if (lfp_sysctl_netns_cookie(ctx) != lfp_netns_cookie)
		return 1;
	lease = bpf_map_lookup_elem(&lfp_lease, &key);
	if (!lease)
		return 1;
	/* the writer first: a controller that sees the count sees who */
	tid = lfp_tid_seen_by_controller();
	writes = bpf_map_lookup_elem(&lfp_sysctl_writers, &tid);
	if (writes)
		__sync_fetch_and_add(writes, 1);
	else
		bpf_map_update_elem(&lfp_sysctl_writers, &tid, &one, BPF_NOEXIST);
	/* x86 orders these two adds; where the plain add is unordered (arm64),
	 * a count seen before its thread is an unnamed write: in progress. */
	__sync_fetch_and_add(&lease->sysctl_writes, 1);
	lfp_ring_doorbell();
	return 1;   /* never interfere: the write goes ahead as always */
}

char _license[] SEC("license") = "GPL";
