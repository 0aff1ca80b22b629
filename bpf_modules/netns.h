/* What a program needs to tell whether a kernel object belongs to the
 * namespace it serves: the namespace's cookie, set by the controller at load
 * (SO_NETNS_COOKIE: never reused), and the one field of struct net it
 * compares, relocated against the running kernel's BTF. Included by every
 * pipeline (common.h: a device moved to another namespace keeps its
 * programs), by the nodes' kernel-side watches (a raw tracepoint fires for
 * every namespace) and by controller.c (a cgroup's sockets may be in any). */
#ifndef LFP_NETNS_H
#define LFP_NETNS_H

#include <linux/types.h>

volatile const __u64 lfp_netns_cookie = 0;

struct net {
	__u64 net_cookie;
} __attribute__((preserve_access_index));

/* possible_net_t: a struct net pointer under CONFIG_NET_NS */
typedef struct {
	struct net *net;
} lfp_possible_net_t;

#endif
