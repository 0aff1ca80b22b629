/* The programs the controller runs itself, never on packets: the lease
 * renewal and the watch of legacy iptables, the one table that changes
 * without any event. Loaded once per `linuxfp run`, against the namespace's
 * shared lfp_lease (lease.h).
 *
 * Lease: the controller's event loop runs lfp_lease_renew (BPF_PROG_TEST_RUN)
 * every 200 ms; it sets held and re-arms a timer that clears it one term
 * later.
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
 * (the controller exits) stops the watch, and the lease then runs out. */
#include "lease.h"
#include "netns.h"       /* lfp_netns_cookie: the watched namespace */

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
	lease->held = 1;
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
	lease = bpf_map_lookup_elem(&lfp_lease, &key);
	if (!lease)
		return 1;
	if (replace) {
		lease->changer_tgid = bpf_get_current_pid_tgid() >> 32;
		__sync_fetch_and_add(&lease->changes_started, 1);
	} else {
		__sync_fetch_and_add(&lease->changes_done, 1);
	}
	return 1;   /* never interfere: the kernel handles the option as always */
}

char _license[] SEC("license") = "GPL";
