/* Who did it, as the controller sees processes: its own pid namespace (a
 * container's is not the root one), given at load by the companion
 * (controller/companion.py). Included by the kernel-side watches that must
 * skip the controller's own changes (filter_watch.c) or name the thread that
 * makes one (controller.c). */
#ifndef LFP_PIDNS_H
#define LFP_PIDNS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

volatile const __u32 lfp_controller_tgid = 0;
volatile const __u64 lfp_pidns_dev = 0;
volatile const __u64 lfp_pidns_ino = 0;

static __always_inline int lfp_is_controller(void)
{
	struct bpf_pidns_info ids = {};

	if (bpf_get_ns_current_pid_tgid(lfp_pidns_dev, lfp_pidns_ino, &ids, sizeof(ids)))
		return 0;     /* another pid namespace: not the controller */
	return ids.tgid == lfp_controller_tgid;
}

/* The few kernel fields read, relocated against the running kernel's BTF. */
struct ns_common___lfp {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct pid_namespace___lfp {
	struct ns_common___lfp ns;
} __attribute__((preserve_access_index));

struct upid___lfp {
	int nr;
	struct pid_namespace___lfp *ns;
} __attribute__((preserve_access_index));

struct pid___lfp {
	unsigned int level;
	struct upid___lfp numbers[0];
} __attribute__((preserve_access_index));

struct task_struct___lfp {
	struct pid___lfp *thread_pid;
	struct task_struct___lfp *group_leader;
} __attribute__((preserve_access_index));

#define LFP_PIDNS_LEVELS 33      /* the kernel's MAX_PID_NS_LEVEL (32) + the root */

/* A task's id in the controller's pid namespace, 0 where it has none (a
 * task of an outer namespace, or of another branch). bpf_get_ns_current_pid_tgid
 * answers only for threads whose own namespace is the controller's; a task of
 * a nested one (a container's, under a controller on the host) is numbered
 * there too, one level up its struct pid. */
static __always_inline __u32 lfp_id_seen_by_controller(struct task_struct___lfp *task)
{
	struct pid___lfp *pid = BPF_CORE_READ(task, thread_pid);
	unsigned int level = BPF_CORE_READ(pid, level);
	unsigned long numbers = (unsigned long)pid + bpf_core_field_offset(struct pid___lfp, numbers);
	struct upid___lfp *upid;

	for (__u32 i = 0; i < LFP_PIDNS_LEVELS && i <= level; i++) {
		upid = (void *)(numbers + i * bpf_core_type_size(struct upid___lfp));
		if (BPF_CORE_READ(upid, ns, ns.inum) == lfp_pidns_ino)
			return BPF_CORE_READ(upid, nr);
	}
	return 0;
}

/* The current thread's id, as the controller numbers threads. */
static __always_inline __u32 lfp_tid_seen_by_controller(void)
{
	return lfp_id_seen_by_controller((void *)bpf_get_current_task());
}

/* The current process's id (its thread group leader's), as the controller
 * numbers processes: bpf_get_current_pid_tgid()'s is the root namespace's,
 * which names another process, or none, in a container's /proc. */
static __always_inline __u32 lfp_tgid_seen_by_controller(void)
{
	struct task_struct___lfp *task = (void *)bpf_get_current_task();

	return lfp_id_seen_by_controller(BPF_CORE_READ(task, group_leader));
}

#endif
