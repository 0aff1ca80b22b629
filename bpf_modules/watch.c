/* The kernel-side watch of the tables that change without a netlink event.
 *
 * Legacy iptables (x_tables) replaces a whole table with one
 * setsockopt(SOL_IP, IPT_SO_SET_REPLACE); nothing announces it. Raw
 * tracepoints on syscall entry and exit (they load under lockdown, where
 * kprobes and fentry do not) count such calls made in the controller's
 * network namespace: the entry before the kernel changes anything, so the
 * datapath, which compares lfp_watch.changes_started with what the
 * controller acknowledged, hands packets to the kernel from that moment
 * until the controller has re-read the table. One program per controller;
 * closing its links (the controller exits) stops the watch, and the lease
 * then runs out. */
#include <bpf/bpf_core_read.h>

#include "lease.h"

#define NR_SETSOCKOPT 54        /* x86_64 */
#define SOL_IP 0
#define IPT_SO_SET_REPLACE 64

/* Only the fields read here; CO-RE relocates them against the running
 * kernel's BTF. */
struct net {
	__u64 net_cookie;
} __attribute__((preserve_access_index));

struct nsproxy {
	struct net *net_ns;
} __attribute__((preserve_access_index));

struct task_struct {
	struct nsproxy *nsproxy;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long dx;
	unsigned long si;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

/* The watched namespace (SO_NETNS_COOKIE: never reused). */
volatile const __u64 lfp_netns_cookie = 0;

static __always_inline int lfp_replaces_xt_table(struct pt_regs *regs, long id)
{
	if (id != NR_SETSOCKOPT)
		return 0;
	if (BPF_CORE_READ(regs, si) != SOL_IP || BPF_CORE_READ(regs, dx) != IPT_SO_SET_REPLACE)
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return BPF_CORE_READ(task, nsproxy, net_ns, net_cookie) == lfp_netns_cookie;
}

static __always_inline void lfp_count_change(int done)
{
	__u32 key = 0;
	struct lfp_watch *watch = bpf_map_lookup_elem(&lfp_watch, &key);

	if (!watch)
		return;
	if (done)
		__sync_fetch_and_add(&watch->changes_done, 1);
	else
		__sync_fetch_and_add(&watch->changes_started, 1);
}

/* sys_enter(struct pt_regs *regs, long id) */
SEC("raw_tracepoint/sys_enter")
int lfp_watch_enter(struct bpf_raw_tracepoint_args *ctx)
{
	if (lfp_replaces_xt_table((struct pt_regs *)ctx->args[0], (long)ctx->args[1]))
		lfp_count_change(0);
	return 0;
}

/* sys_exit(struct pt_regs *regs, long ret): the arguments are still in regs. */
SEC("raw_tracepoint/sys_exit")
int lfp_watch_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];

	if (lfp_replaces_xt_table(regs, (long)BPF_CORE_READ(regs, orig_ax)))
		lfp_count_change(1);
	return 0;
}

char _license[] SEC("license") = "GPL";
