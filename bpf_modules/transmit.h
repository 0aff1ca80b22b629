/* Transmit node: sends what the deciding node (router.h, bridge.h) left in pkt->fwd,
 * once every node in between (filters) let the packet through. It alone
 * rewrites the packet, so nothing before it ever hands the kernel a modified
 * one. Declared to the controller by linuxfp/graph/nodes/transmit.py.
 */
#ifndef LFP_TRANSMIT_H
#define LFP_TRANSMIT_H

#include "common.h"
#include "parse.h"
#include "hint.h"
#include "nat_rewrite.h"

#define LFP_COUNTERS_TRANSMIT(X)                                                          \
	X(FORWARDED,              transmit, fast, "forwarded by the fast path")             \
	X(NO_DECISION,            transmit, pass, "no node decided where the packet goes")  \
	X(NEIGH_UNCONFIRMED,      transmit, pass, "neighbour state unknown to the fast path") \
	X(NEIGH_STALE,            transmit, pass, "first packet to a STALE neighbour (Linux starts probing)") \
	X(EGRESS_UNSUPPORTED,     transmit, pass, "egress cannot take a redirect from this hook, or does not forward") \
	X(TX_TOO_LONG,            transmit, pass, "longer than an encapsulating egress sends without Linux learning a path MTU") \
	X(INTO_PEER,              transmit, fast, "forwarded straight into a veth peer's namespace (redirect_peer)") \
	X(ENCAPSULATED,           transmit, fast, "encapsulated as its VXLAN egress would and sent out of the underlay") \
	X(ENCAP_UNWRITABLE,       transmit, drop, "no room to encapsulate (Linux drops it too)")

/* Neighbour state of next hops, as far as it changes what Linux does with a
 * packet. bpf_fib_lookup() accepts any valid entry, but the first packet
 * Linux sends to a STALE entry also starts reachability probing (STALE ->
 * DELAY, silently). So a STALE entry lets exactly one packet through to the
 * kernel and is then marked PROBING, in which Linux sends as usual. The
 * controller writes the states from neighbour events and flags every entry
 * that is not CONFIRMED in lfp_neigh_hint; only flagged next hops are looked
 * up, and a flagged one without an entry goes to the kernel. */
enum lfp_neigh_state {
	LFP_NEIGH_CONFIRMED = 1,  /* REACHABLE, PERMANENT, NOARP */
	LFP_NEIGH_STALE = 2,      /* the next packet must go through the kernel */
	LFP_NEIGH_PROBING = 3,    /* DELAY/PROBE: the kernel is probing */
};

struct lfp_neigh_key {
	__u32 ifindex;
	__be32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lfp_neigh_key);
	__type(value, __u8);
} lfp_neigh SEC(".maps");

/* IPv6 next hops (NDP keeps the same states). */
struct lfp_neigh6_key {
	__u32 ifindex;
	__be32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lfp_neigh6_key);
	__type(value, __u8);
} lfp_neigh6 SEC(".maps");

/* Next hops that may be in lfp_neigh or lfp_neigh6 with a state other than
 * CONFIRMED, by lfp_neigh_fold(). */
LFP_HINT_MAP(lfp_neigh_hint);

static __always_inline __u32 lfp_neigh_fold(const struct lfp_fwd *fwd)
{
	if (fwd->flags & LFP_FWD_DEC_HOP_LIMIT)
		return fwd->egress ^ fwd->nexthop6[0] ^ fwd->nexthop6[1] ^ fwd->nexthop6[2] ^ fwd->nexthop6[3];
	return fwd->egress ^ fwd->nexthop;
}

/* The next hop's entry: NULL when it has none (CONFIRMED, if the hint was clear). */
static __always_inline __u8 *lfp_neigh_state(const struct lfp_fwd *fwd)
{
	if (fwd->flags & LFP_FWD_DEC_HOP_LIMIT) {
		struct lfp_neigh6_key key = { .ifindex = fwd->egress };

		__builtin_memcpy(key.addr, fwd->nexthop6, sizeof(key.addr));
		return bpf_map_lookup_elem(&lfp_neigh6, &key);
	} else {
		struct lfp_neigh_key key = { .ifindex = fwd->egress, .addr = fwd->nexthop };

		return bpf_map_lookup_elem(&lfp_neigh, &key);
	}
}

/* Veths whose peer, in another namespace, receives what they send exactly
 * as the peer redirect delivers it: indexed by ifindex, all zeros for the
 * others. Only what veth_xmit() does is skipped — the egress has no qdisc
 * work, tc egress filters or nf_tables egress chain, and the peer no XDP or
 * GRO (its NAPI path) —
 * and the peer must take the frame as PACKET_HOST, which the redirect makes
 * it, so only frames to the peer's own MAC go this way. The controller
 * keeps the peer's facts from its namespace's link events
 * (linuxfp/graph/nodes/transmit.py). */
struct lfp_peer {
	__u8 mac[ETH_ALEN];
	__u16 pad;
	__u32 mtu;             /* 0: not a peer to deliver into */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct lfp_peer);
} lfp_peers SEC(".maps");

/* Deliver the frame sent to `egress` with destination `dmac` straight into
 * the peer when Linux would hand it over unchanged (see lfp_peers). */
static __always_inline enum lfp_counter lfp_transmit_into_peer(struct lfp_pkt *pkt, __u32 egress,
								const __u8 *dmac)
{
	struct lfp_peer *peer;

	if (!LFP_HOOK_ENTERS_PEERS)
		return LFP_CNT_FORWARDED;
	peer = bpf_map_lookup_elem(&lfp_peers, &egress);
	if (!peer || !peer->mtu || !lfp_mac_equal(peer->mac, dmac))
		return LFP_CNT_FORWARDED;
	/* __dev_forward_skb() checks the peer's MTU, the redirect does not */
	if (!lfp_is_gso(pkt) && pkt->len > peer->mtu + sizeof(struct ethhdr))
		return LFP_CNT_FORWARDED;
	return lfp_upgrade_to_peer(pkt, egress) ? LFP_CNT_INTO_PEER : LFP_CNT_FORWARDED;
}

/* (after the neighbour states, which its outer next hops are asked about) */
#include "vxlan_tx.h"

static __always_inline void lfp_ipv4_decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

static __always_inline enum lfp_rc transmit_node(struct lfp_pkt *pkt)
{
	struct lfp_vxlan_plan plan;
	__u8 *neigh_state = NULL;
	struct ipv6hdr *ip6 = NULL;
	int encapsulate;
	struct iphdr *ip = NULL;
	struct ethhdr *eth;
	__u32 out;             /* the device it leaves: a bridge's port, if it names one */

	if (!pkt->fwd.egress)
		return lfp_pass(pkt, LFP_CNT_NO_DECISION);
	out = pkt->fwd.port ? pkt->fwd.port : pkt->fwd.egress;
	/* A bridged frame leaves as it came: no next hop, nothing rewritten. */
	if (pkt->fwd.flags & LFP_FWD_BRIDGED) {
		if (!lfp_arm_bridged_redirect(pkt, pkt->fwd.egress))
			return lfp_pass(pkt, LFP_CNT_EGRESS_UNSUPPORTED);
		eth = lfp_eth(pkt);
		lfp_count(pkt, eth ? lfp_transmit_into_peer(pkt, pkt->fwd.egress, eth->h_dest) : LFP_CNT_FORWARDED);
		return LFP_REDIRECT;
	}
	if (lfp_hint_set(lfp_hint_of(&lfp_neigh_hint), lfp_neigh_fold(&pkt->fwd))) {
		neigh_state = lfp_neigh_state(&pkt->fwd);
		if (!neigh_state)
			return lfp_pass(pkt, LFP_CNT_NEIGH_UNCONFIRMED);
	}
	/* Only a packet Linux will really send starts its probing: every node
	 * that could make the kernel drop it has let it through. */
	if (neigh_state && *neigh_state == LFP_NEIGH_STALE) {
		*neigh_state = LFP_NEIGH_PROBING;
		return lfp_pass(pkt, LFP_CNT_NEIGH_STALE);
	}
	/* (a bridge keeps the routed packet's route for its port: a VXLAN port
	 * would lower that route's path MTU just the same) */
	if (lfp_tx_too_long(pkt, out) && !lfp_tunnel_path_fits(pkt, out, pkt->fwd.dmac))
		return lfp_pass(pkt, LFP_CNT_TX_TOO_LONG);
	/* Into a VXLAN device, encapsulated by the fast path itself where it
	 * builds what the device would; else into the device. */
	encapsulate = lfp_vxlan_plan(pkt, out, &plan);
	/* Last decision before the rewrite: a pass after it would hand the
	 * kernel a modified packet. */
	eth = lfp_eth(pkt);
	if (!eth)
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	if (pkt->fwd.flags & LFP_FWD_DEC_TTL) {
		ip = lfp_ipv4(pkt);
		if (!ip)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	} else if (pkt->fwd.flags & LFP_FWD_DEC_HOP_LIMIT) {
		ip6 = lfp_ipv6(pkt);
		if (!ip6)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	}
	/* Out of a bridge egress through the port its FDB names (bridge_tx.h). */
	if (pkt->fwd.port ? !lfp_arm_bridged_redirect(pkt, out) :
	    ip6 ? !lfp_arm_redirect6(pkt, pkt->fwd.egress) : !lfp_arm_redirect(pkt, pkt->fwd.egress))
		return lfp_pass(pkt, LFP_CNT_EGRESS_UNSUPPORTED);

	if (pkt->fwd.flags & LFP_FWD_SET_PRIORITY)
		lfp_set_priority(pkt, pkt->fwd.priority);
	if (ip)
		lfp_ipv4_decrease_ttl(ip);
	if (ip6) {
		/* no header checksum in IPv6; the skb's own sum at TC follows
		 * (the aligned word holding payload length, next header, hop limit) */
		__be32 *word = (__be32 *)ip6 + 1;
		__be32 before = *word;

		ip6->hop_limit--;
		lfp_csum_changed(pkt, before, *word);
	}
	__builtin_memcpy(eth->h_dest, pkt->fwd.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, pkt->fwd.smac, ETH_ALEN);
	/* The connection's NAT (ct_prerouting.h), after the TTL as in Linux
	 * (nat_rewrite.h). A packet that cannot be written is dropped, as
	 * nf_nat_manip_pkt() drops it. */
	if (LFP_NODE_CONNTRACK && pkt->ct.manip && lfp_nat_write(pkt))
		return lfp_drop(pkt, LFP_CNT_NAT_UNWRITABLE);
	if (encapsulate) {
		if (lfp_vxlan_encapsulate(pkt, &plan))
			return lfp_drop(pkt, LFP_CNT_ENCAP_UNWRITABLE);
		lfp_count(pkt, LFP_CNT_ENCAPSULATED);
		return LFP_REDIRECT;
	}
	lfp_count(pkt, lfp_transmit_into_peer(pkt, out, pkt->fwd.dmac));
	return LFP_REDIRECT;
}

#endif
