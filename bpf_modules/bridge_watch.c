/* The bridge node's kernel-side watch: it closes the window between the
 * kernel changing its FDB and the controller's mirror learning of it.
 *
 * The bridge fires these raw tracepoints synchronously, in the code that
 * changes an FDB entry: br_fdb_add and fdb_delete before the change,
 * br_fdb_update and br_fdb_external_learn_add right after it (and before
 * the netlink notification). Each program deletes the mirror's entry for
 * that (bridge, VLAN, MAC) at once: frames to or from that MAC go to the
 * kernel until the controller has applied the notification and written the
 * entry again (the node's `refreshed` names it). Only this namespace's
 * bridges count (the bridge device's netns cookie).
 *
 * Loaded by the controller with every node's watch (controller/companion.py)
 * against the namespace's lfp_fdb; declared by linuxfp/graph/nodes/bridge.py.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "bridge_fdb.h"
#include "netns.h"

/* The few kernel fields read, relocated against the running kernel's BTF. */
struct net_device {
	int ifindex;
	lfp_possible_net_t nd_net;
	void *rx_handler_data;
} __attribute__((preserve_access_index));

struct net_bridge {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct net_bridge_port {
	struct net_bridge *br;
} __attribute__((preserve_access_index));

struct mac_addr {
	unsigned char addr[ETH_ALEN];
};

struct net_bridge_fdb_key {
	struct mac_addr addr;
	__u16 vlan_id;
} __attribute__((preserve_access_index));

struct net_bridge_fdb_entry {
	struct net_bridge_fdb_key key;
} __attribute__((preserve_access_index));

static __always_inline int lfp_in_namespace(struct net_device *dev)
{
	return BPF_CORE_READ(dev, nd_net.net, net_cookie) == lfp_netns_cookie;
}

static __always_inline void lfp_forget(struct net_device *bridge, const void *mac, __u16 vlan)
{
	struct lfp_fdb_key key = {};

	key.bridge = BPF_CORE_READ(bridge, ifindex);
	key.vlan = vlan;
	if (bpf_probe_read_kernel(key.mac, ETH_ALEN, mac))
		return;
	bpf_map_delete_elem(&lfp_fdb, &key);
}

/* Tracepoints whose arguments start (br, port, addr, vid). */
static __always_inline int lfp_forget_learnt(struct bpf_raw_tracepoint_args *ctx)
{
	struct net_bridge *br = (void *)ctx->args[0];
	struct net_device *dev = BPF_CORE_READ(br, dev);

	if (lfp_in_namespace(dev))
		lfp_forget(dev, (const void *)ctx->args[2], (__u16)ctx->args[3]);
	return 0;
}

/* br_fdb_update(br, source, addr, vid, flags): learnt, moved or re-activated */
SEC("raw_tp/br_fdb_update")
int lfp_fdb_updated(struct bpf_raw_tracepoint_args *ctx)
{
	return lfp_forget_learnt(ctx);
}

/* br_fdb_external_learn_add(br, p, addr, vid) */
SEC("raw_tp/br_fdb_external_learn_add")
int lfp_fdb_learnt_externally(struct bpf_raw_tracepoint_args *ctx)
{
	return lfp_forget_learnt(ctx);
}

/* fdb_delete(br, f): aged out, flushed, deleted by a user */
SEC("raw_tp/fdb_delete")
int lfp_fdb_deleted(struct bpf_raw_tracepoint_args *ctx)
{
	struct net_bridge *br = (void *)ctx->args[0];
	struct net_bridge_fdb_entry *f = (void *)ctx->args[1];
	struct net_device *dev = BPF_CORE_READ(br, dev);

	if (lfp_in_namespace(dev))
		lfp_forget(dev, &f->key.addr.addr, BPF_CORE_READ(f, key.vlan_id));
	return 0;
}

/* br_fdb_add(ndm, dev, addr, vid, nlh_flags): `bridge fdb add/replace`. dev
 * is a port (its bridge is rx_handler_data->br) or the bridge itself: the
 * entry is forgotten under both readings (a key that does not exist costs a
 * failed delete). */
SEC("raw_tp/br_fdb_add")
int lfp_fdb_added(struct bpf_raw_tracepoint_args *ctx)
{
	struct net_device *dev = (void *)ctx->args[1];
	const void *mac = (const void *)ctx->args[2];
	__u16 vlan = (__u16)ctx->args[3];
	struct net_bridge_port *port;
	struct net_device *bridge;

	if (!lfp_in_namespace(dev))
		return 0;
	lfp_forget(dev, mac, vlan);
	port = BPF_CORE_READ(dev, rx_handler_data);
	if (!port)
		return 0;
	bridge = BPF_CORE_READ(port, br, dev);
	if (bridge)
		lfp_forget(bridge, mac, vlan);
	return 0;
}

char _license[] SEC("license") = "GPL";
