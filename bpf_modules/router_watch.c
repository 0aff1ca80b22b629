/* The router node's kernel-side watch: the neighbour generation
 * (neigh_watch.h), bumped synchronously as the kernel changes a neighbour
 * entry of this namespace, so that the FIB-answer cache (fib_cache.h) never
 * serves a next-hop MAC or a neighbour's validity the kernel no longer has.
 * The kernel versions routes, rules, addresses, links and forwarding
 * sysctls itself (fib_seq, rt_genid) but not its neighbours.
 *
 * A cached answer is stamped with the generation read before its lookup, so
 * every change must bump it after it is visible; what bpf_fib_lookup()
 * reads of a neighbour is whether it is NUD_VALID and its address:
 * - neigh_update_done: after __neigh_update() (ARP, `ip neigh`, deletion);
 * - neigh_timer_handler: after the timer's transition (PROBE -> FAILED);
 * - neigh_cleanup_and_release: after an entry is unlinked (garbage
 *   collection, flush).
 * Not traced, because they change no answer that is cached:
 * __neigh_event_send() (NONE/FAILED -> INCOMPLETE, STALE -> DELAY: valid
 * stays valid, invalid stays invalid) and creation (a NUD_NONE entry reads
 * as no entry to the lookup itself; a nexthop group's choice and
 * fib_multipath_use_neigh tell it from an absent one, and nothing is cached
 * under either: fib_cache.h). Every bump makes every cached answer a miss
 * once.
 *
 * Loaded by the controller with every node's watch (controller/companion.py);
 * declared by linuxfp/graph/nodes/router.py.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "neigh_watch.h"
#include "netns.h"

struct net_device {
	lfp_possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct neighbour {
	struct net_device *dev;
	__u8 nud_state;
} __attribute__((preserve_access_index));

/* NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY */
#define LFP_NUD_VALID 0xde

static __always_inline void lfp_bump(struct net_device *dev)
{
	struct lfp_neigh_watch *watch;

	if (BPF_CORE_READ(dev, nd_net.net, net_cookie) != lfp_netns_cookie)
		return;
	watch = lfp_neigh_watch_of();
	if (watch)
		__sync_fetch_and_add(&watch->generation, 1);
}

/* Tracepoints whose first argument is the neighbour. */
static __always_inline int lfp_neighbour_changed(struct bpf_raw_tracepoint_args *ctx)
{
	struct neighbour *n = (void *)ctx->args[0];

	lfp_bump(BPF_CORE_READ(n, dev));
	return 0;
}

/* neigh_update_done(n, err): after __neigh_update() */
SEC("raw_tp/neigh_update_done")
int lfp_neigh_update_done(struct bpf_raw_tracepoint_args *ctx)
{
	return lfp_neighbour_changed(ctx);
}

/* neigh_timer_handler(n, state): after the timer's transition. The timer
 * never makes an entry valid nor changes its address: only an entry it
 * leaves invalid (PROBE -> FAILED) can change an answer. */
SEC("raw_tp/neigh_timer_handler")
int lfp_neigh_timer(struct bpf_raw_tracepoint_args *ctx)
{
	struct neighbour *n = (void *)ctx->args[0];

	if (BPF_CORE_READ(n, nud_state) & LFP_NUD_VALID)
		return 0;
	return lfp_neighbour_changed(ctx);
}

/* neigh_cleanup_and_release(n, rc): unlinked (garbage collected, flushed) */
SEC("raw_tp/neigh_cleanup_and_release")
int lfp_neigh_released(struct bpf_raw_tracepoint_args *ctx)
{
	return lfp_neighbour_changed(ctx);
}

/* Run by the controller once every tracepoint above is attached, and
 * before it detaches them: the cache may be used only in between, and each
 * edge invalidates what was cached before it. A start moves the generation
 * to the boot clock at least, past any value it held before, even if the
 * map was zeroed meanwhile (controller/companion.py does that when a watch
 * cannot be attached). */
SEC("syscall")
int lfp_watch_start(void *ctx)
{
	struct lfp_neigh_watch *watch = lfp_neigh_watch_of();
	__u64 now = bpf_ktime_get_boot_ns();

	if (watch) {
		if (__sync_fetch_and_add(&watch->generation, 1) + 1 < now)
			watch->generation = now;
		watch->armed = 1;
	}
	return 0;
}

SEC("syscall")
int lfp_watch_stop(void *ctx)
{
	struct lfp_neigh_watch *watch = lfp_neigh_watch_of();

	if (watch) {
		watch->armed = 0;
		__sync_fetch_and_add(&watch->generation, 1);
	}
	return 0;
}

char _license[] SEC("license") = "GPL";
