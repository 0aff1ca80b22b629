/* Bridge transmit node: a routed packet whose egress is a Linux bridge
 * leaves through the port the bridge's FDB names, as br_dev_xmit() sends it.
 *
 * A bridge device cannot take a redirect that would do its work (an XDP
 * redirect into it is refused, a TC one would run br_dev_xmit() on an skb
 * the fast path already rewrote, and its queue), so the routing decision's
 * egress stays the bridge (iptables' -o sees it) and this node adds the port
 * in pkt->fwd.port; transmit rewrites the packet and sends it there. What
 * br_dev_xmit() would do otherwise goes to the kernel: a destination the
 * mirror does not know (flooded), a port not forwarding, a frame too long
 * for the port. A routed packet is locally originated for the bridge, so
 * neither hairpin nor isolation applies, and the kernel learns nothing
 * from it.
 * Declared to the controller by linuxfp/graph/nodes/bridge_tx.py; it reads
 * the bridge node's FDB mirror and ports (bridge.h).
 */
#ifndef LFP_BRIDGE_TX_H
#define LFP_BRIDGE_TX_H

#include "common.h"
#include "bridge.h"

#define LFP_COUNTERS_BRIDGE_TX(X)                                                         \
	X(BRTX_DEVICE,            bridge_tx, pass, "egress bridge not reproduced (down, queued, tc filters, an nf_tables egress chain, or blocked)") \
	X(BRTX_DEST_UNKNOWN,      bridge_tx, pass, "next hop's MAC not in the FDB mirror (the bridge floods)") \
	X(BRTX_SETTLING,          bridge_tx, pass, "next hop's FDB entry just written or refreshed: the kernel's frames go first") \
	X(BRTX_PORT_BLOCKED,      bridge_tx, pass, "FDB port not forwarding") \
	X(BRTX_TOO_LONG,          bridge_tx, pass, "longer than the FDB port's MTU")

/* struct lfp_br_dev.flags, as in linuxfp/graph/nodes/bridge_tx.py */
#define LFP_BRD_BRIDGE (1u << 0)   /* a bridge device */
#define LFP_BRD_SENDS  (1u << 1)   /* ... whose transmit the node reproduces */

/* Per device, indexed by ifindex; all zeros: not a bridge. */
struct lfp_br_dev {
	__u32 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct lfp_br_dev);
} lfp_br_devs SEC(".maps");

static __always_inline enum lfp_rc bridge_tx_node(struct lfp_pkt *pkt)
{
	struct lfp_fdb_entry *dst;
	struct lfp_br_dev *dev;
	struct lfp_br_port *out;
	struct lfp_fdb_key key;

	dev = bpf_map_lookup_elem(&lfp_br_devs, &pkt->fwd.egress);
	if (!dev || !(dev->flags & LFP_BRD_BRIDGE))
		return LFP_NEXT;                /* not a bridge: transmit sends to the egress */
	if (!(dev->flags & LFP_BRD_SENDS))
		return lfp_pass(pkt, LFP_CNT_BRTX_DEVICE);
	if (lfp_mac_is_group(pkt->fwd.dmac))
		return lfp_pass(pkt, LFP_CNT_BRTX_DEST_UNKNOWN);
	key.bridge = pkt->fwd.egress;
	key.vlan = 0;
	__builtin_memcpy(key.mac, pkt->fwd.dmac, ETH_ALEN);
	dst = bpf_map_lookup_elem(&lfp_fdb, &key);
	if (!dst)
		return lfp_pass(pkt, LFP_CNT_BRTX_DEST_UNKNOWN);
	if (!lfp_br_dest_settled(dst, bpf_ktime_get_coarse_ns()))
		return lfp_pass(pkt, LFP_CNT_BRTX_SETTLING);
	out = bpf_map_lookup_elem(&lfp_br_ports, &dst->port);
	if (!out || out->bridge != pkt->fwd.egress || !(out->flags & LFP_BRP_FORWARDING))
		return lfp_pass(pkt, LFP_CNT_BRTX_PORT_BLOCKED);
	/* is_skb_forwardable() on the port; a GSO packet passes whatever its size */
	if (!lfp_is_gso(pkt) && pkt->len > out->mtu + sizeof(struct ethhdr))
		return lfp_pass(pkt, LFP_CNT_BRTX_TOO_LONG);
	pkt->fwd.port = dst->port;
	return LFP_NEXT;
}

#endif
