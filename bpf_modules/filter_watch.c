/* The filter node's kernel-side watch: ipset changes come with no event at
 * all, so any netfilter netlink message counts as one.
 *
 * `ipset add/del/flush/swap/restore` (and nft, conntrack, ...) send their
 * commands over NETLINK_NETFILTER; the kernel runs a command inside the
 * sending system call, and sock_send_length fires as that call returns,
 * before the sender sees the answer. This program then counts a change that
 * began and ended (lfp_nfnl_sent, which the datapath adds to lfp_lease's
 * changes_started, lease.h): the
 * datapath hands every packet to the kernel until the controller has read
 * its ipsets again. The window left is the rest of the sending call after
 * the kernel applied the command: microseconds for one `ipset add`, one
 * buffer of commands for `ipset restore`. The controller's own reads are not
 * counted (lfp_controller_tgid, in the controller's pid namespace); only
 * sockets of the watched namespace count, and only while the controller has
 * armed the watch (rules match ipsets).
 *
 * Loaded by the controller with every node's watch (controller/companion.py);
 * declared by linuxfp/graph/nodes/iptables_filter.py. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "lease.h"
#include "netns.h"
#include "pidns.h"     /* lfp_is_controller */
#include "doorbell.h"  /* the controller reads the sets again at once */

#define AF_NETLINK 16
#define NETLINK_NETFILTER 12

/* The few kernel fields read, relocated against the running kernel's BTF. */
struct sock_common {
	unsigned short skc_family;
	lfp_possible_net_t skc_net;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

/* sock_send_length(sk, ret, flags): every sendmsg, once it returns. */
SEC("raw_tp/sock_send_length")
int lfp_netfilter_message_sent(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (void *)ctx->args[0];
	__u32 key = LFP_NFNL_ARMED;
	__u64 *slot;

	/* Disarmed (no rule matches an ipset: most hosts, most of the time),
	 * every sendmsg of the host costs one inlined array read here, before
	 * anything of the socket is read. */
	slot = bpf_map_lookup_elem(&lfp_nfnl_sent, &key);
	if (!slot || !*slot)
		return 0;
	if (!sk || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_NETLINK ||
	    BPF_CORE_READ(sk, sk_protocol) != NETLINK_NETFILTER)
		return 0;
	if (BPF_CORE_READ(sk, __sk_common.skc_net.net, net_cookie) != lfp_netns_cookie || lfp_is_controller())
		return 0;
	key = LFP_NFNL_SENT;
	slot = bpf_map_lookup_elem(&lfp_nfnl_sent, &key);
	if (slot)
		__sync_fetch_and_add(slot, 1);
	lfp_ring_doorbell();
	return 0;
}

char _license[] SEC("license") = "GPL";
