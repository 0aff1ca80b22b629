/* CPU accounting from raw tracepoints (fentry/kprobes are refused under
 * lockdown; raw tracepoints are not).
 *
 * Per CPU, the time since the previous event is charged to whatever that
 * event ends: a napi_poll event ends a poll of a named device (DUT ingress,
 * sink, or another device), a sched_switch ends a stretch of the previous
 * task (the idle task, or anything else). The DUT's capacity is then its
 * frames divided by its charged time, independent of what else shares the
 * CPU. */
#include <bpf/bpf_core_read.h>

#define BENCH_IFNAMSIZ 16

/* Only the fields read here; CO-RE relocates them against the running
 * kernel's BTF, so no kernel headers are needed. */
struct net_device {
	char name[BENCH_IFNAMSIZ];
} __attribute__((preserve_access_index));

struct napi_struct {
	struct net_device *dev;
} __attribute__((preserve_access_index));

enum acct_role {
	ROLE_DUT = 0,     /* polls of the DUT's ingress device */
	ROLE_SINK,        /* polls of the sink's device */
	ROLE_NAPI_OTHER,  /* polls of any other device */
	ROLE_IDLE,        /* the idle task */
	ROLE_TASK,        /* any task outside a poll */
	ROLE_MAX,
};

/* Arrays have a power-of-two size so a mask bounds every index for the verifier. */
#define ROLE_SLOTS 8

struct acct_cpu {
	__u64 last_ts;
	__u64 in_role;          /* role + 1 of the work in progress, 0 if unknown */
	__u64 ns[ROLE_SLOTS];
	__u64 frames[ROLE_SLOTS];
	__u64 polls[ROLE_SLOTS];
	__u64 full_polls[ROLE_SLOTS];
	__u64 polls_after_full[ROLE_SLOTS];
	__u64 last_was_full[ROLE_SLOTS];
	__u64 post_ns[ROLE_SLOTS];   /* part of ns spent after a poll returned */
	__u64 switches;
};

struct dev_name {
	char name[BENCH_IFNAMSIZ];
};

/* device name -> role; names are unique per benchmark run, across namespaces */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, struct dev_name);
	__type(value, __u32);
} acct_roles SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct acct_cpu);
} acct_state SEC(".maps");

static __always_inline struct acct_cpu *acct_this_cpu(void)
{
	__u32 key = 0;

	return bpf_map_lookup_elem(&acct_state, &key);
}

static __always_inline void acct_charge(struct acct_cpu *st, __u32 role, __u64 now)
{
	if (st->last_ts && now > st->last_ts)
		st->ns[role & (ROLE_SLOTS - 1)] += now - st->last_ts;
	st->last_ts = now;
}

/* Outside any known work: the idle task's time or some task's. */
static __always_inline __u32 acct_context_role(struct acct_cpu *st)
{
	if (st->in_role)
		return (__u32)(st->in_role - 1);
	return (__u32)bpf_get_current_pid_tgid() == 0 ? ROLE_IDLE : ROLE_TASK;
}

/* End of a stretch that is not a poll: charge it to the context's role. */
static __always_inline void acct_boundary(struct acct_cpu *st, __u64 now)
{
	__u32 role = acct_context_role(st);

	if (st->in_role && st->last_ts && now > st->last_ts)
		st->post_ns[role & (ROLE_SLOTS - 1)] += now - st->last_ts;
	acct_charge(st, role, now);
	st->in_role = 0;
}

/* The tracepoint fires when a poll returns: the time since the previous
 * boundary was that poll's. What follows until the next boundary (the GRO
 * flush after a full-budget poll, local_bh_enable) is still its work. */
SEC("raw_tp/napi_poll")
int bench_napi_poll(struct bpf_raw_tracepoint_args *ctx)
{
	struct napi_struct *napi = (void *)ctx->args[0];
	int work = (int)ctx->args[1];
	int budget = (int)ctx->args[2];
	struct net_device *dev = NULL;
	struct dev_name key = {};
	struct acct_cpu *st;
	__u32 role = ROLE_NAPI_OTHER;
	__u32 *known;
	__u64 now = bpf_ktime_get_ns();

	st = acct_this_cpu();
	if (!st)
		return 0;
	if (bpf_core_read(&dev, sizeof(dev), &napi->dev) == 0 && dev &&
	    bpf_core_read(key.name, sizeof(key.name), &dev->name) == 0) {
		known = bpf_map_lookup_elem(&acct_roles, &key);
		if (known && *known < ROLE_MAX)
			role = *known;
	}
	acct_charge(st, role, now);
	st->in_role = role + 1;
	role &= ROLE_SLOTS - 1;
	if (work > 0)
		st->frames[role] += work;
	st->polls[role] += 1;
	if (st->last_was_full[role])
		st->polls_after_full[role] += 1;
	st->last_was_full[role] = work >= budget && budget > 0;
	if (st->last_was_full[role])
		st->full_polls[role] += 1;
	return 0;
}

/* A softirq starts: whatever ran before it is finished (the DUT's post-poll
 * work); the softirq's own polls are charged by their napi_poll events. */
SEC("raw_tp/softirq_entry")
int bench_softirq_entry(struct bpf_raw_tracepoint_args *ctx)
{
	struct acct_cpu *st = acct_this_cpu();

	if (!st)
		return 0;
	acct_boundary(st, bpf_ktime_get_ns());
	return 0;
}

SEC("raw_tp/softirq_exit")
int bench_softirq_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct acct_cpu *st = acct_this_cpu();

	if (!st)
		return 0;
	acct_boundary(st, bpf_ktime_get_ns());
	return 0;
}

SEC("raw_tp/sched_switch")
int bench_sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
	struct acct_cpu *st = acct_this_cpu();

	if (!st)
		return 0;
	acct_boundary(st, bpf_ktime_get_ns());
	st->switches += 1;
	return 0;
}

char _license[] SEC("license") = "GPL";
