/* The context layer every node module is written against.
 *
 * A pipeline is rendered for one hook (XDP or TC); LFP_HOOK_XDP / LFP_HOOK_TC
 * is the only compile-time switch, because it changes the program type. Nodes
 * see a `struct lfp_pkt` and return an lfp_rc; only this file knows how a
 * verdict, a redirect or a packet length looks at each hook.
 */
#ifndef LFP_COMMON_H
#define LFP_COMMON_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "counters.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#include "lease.h"
#include "netns.h"

#if defined(LFP_HOOK_XDP) == defined(LFP_HOOK_TC)
#error "define exactly one of LFP_HOOK_XDP, LFP_HOOK_TC"
#endif

/* Which nodes a pipeline has: the template defines LFP_NODE_<NAME> for
 * every registered node; a source built otherwise (a benchmark's) has none
 * of those one node reads for another. */
#ifndef LFP_NODE_CONNTRACK
#define LFP_NODE_CONNTRACK 0
#endif
#ifndef LFP_NODE_NAT_OUT
#define LFP_NODE_NAT_OUT 0
#endif

#ifdef LFP_HOOK_XDP
typedef struct xdp_md lfp_ctx_t;
#else
typedef struct __sk_buff lfp_ctx_t;
#endif

/* What a node tells the pipeline. */
enum lfp_rc {
	LFP_NEXT = 0,     /* hand the packet to the next node */
	LFP_PASS,         /* give it to the kernel (already counted) */
	LFP_REDIRECT,     /* transmit where lfp_arm_redirect() aimed it */
	LFP_DROP,         /* drop it exactly as Linux would */
};

/* What the deciding node (routing or bridging) leaves for transmit,
 * which alone rewrites and sends: nodes in between (filters) see the
 * decision, e.g. the egress interface iptables' -o matches. */
struct lfp_fwd {
	__u32 egress;           /* ifindex; 0: nothing decided */
	union {                 /* next hop (gateway or destination) */
		__be32 nexthop;         /* IPv4 */
		__be32 nexthop6[4];     /* IPv6, with LFP_FWD_DEC_HOP_LIMIT */
	};
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u8 flags;             /* LFP_FWD_* */
	__u8 priority;          /* with LFP_FWD_SET_PRIORITY */
	/* The device a routed packet leaves through when its egress is a
	 * bridge (the FDB's port: bridge_tx.h); 0: the egress itself. */
	__u32 port;
};
#define LFP_FWD_DEC_TTL       (1u << 0)   /* IPv4 forwarding: TTL - 1 */
#define LFP_FWD_SET_PRIORITY  (1u << 1)   /* set the packet's priority */
#define LFP_FWD_BRIDGED       (1u << 2)   /* bridged: sent as it came, no next hop, no rewrite */
#define LFP_FWD_NF_IPV4       (1u << 3)   /* bridged IPv4 that br_netfilter shows iptables (bridge_filter.h) */
#define LFP_FWD_DEC_HOP_LIMIT (1u << 4)   /* IPv6 forwarding: hop limit - 1, next hop in nexthop6 */
#define LFP_FWD_NF_IPV6       (1u << 5)   /* bridged IPv6 that br_netfilter shows ip6tables (bridge_filter.h) */

/* A count that holds only if the packet leaves through the fast path: a
 * node after the one counting may still hand it to the kernel, which then
 * counts it itself (iptables' rule counters). The pipeline's exit after its
 * nodes (lfp_leave() in templates/pipeline.c.j2) adds the packet to
 * pkt->tally when it is sent or dropped (a drop after the counting node
 * happens after it in Linux too), never when it goes to the kernel. Only
 * pipelines with a node whose header defines LFP_TALLIES (filter.h) carry
 * any of it: the others compile exactly as without it. */
struct lfp_tally {
	__u64 packets;
	__u64 bytes;
};

/* What conntrack said of the packet (conntrack.h: looked up once, at
 * PREROUTING where the conntrack node is, and again where its refresh was
 * left owed) and what its connection's NAT
 * does to it, as Linux applies it: the destination at PREROUTING — written
 * into the packet there with the header checksum, so routing and FORWARD
 * see it as Linux shows it them (ct_prerouting.h) — and the source at
 * POSTROUTING. Transmit writes the rest after its last decision
 * (nat_rewrite.h); a packet handed to the kernel before that gets its bytes
 * back first (lfp_leave()). */
#define LFP_NAT_SRC (1u << 0)   /* the source becomes saddr:sport at POSTROUTING */
#define LFP_NAT_DST (1u << 1)   /* the destination changes at PREROUTING (other_daddr, other_dport) */
/* ... and the NAT the connection carries in either direction (its status'
 * IPS_SRC_NAT, IPS_DST_NAT: --ctstate SNAT, DNAT). Shifted down by
 * LFP_CT_NAT_SHIFT, LFP_NAT_DST and these are the filter's ctnat field. */
#define LFP_CT_SNAT (1u << 2)
#define LFP_CT_DNAT (1u << 3)
#define LFP_CT_NAT_SHIFT 1
/* In lfp_ct.answer: the connection was taken, its refresh not yet done
 * (a chain before conntrack decides first: conntrack.h). Without it a
 * connection taken was refreshed — or, where that chain decides first,
 * needs no refresh: it has the timeout the refresh would write. */
#define LFP_CT_OWED 0x80

struct lfp_ct {
	/* The destination not in the packet: the one PREROUTING gives it until
	 * written there, then the one it replaced (nat_rewrite.h). */
	__be32 other_daddr;
	__be32 saddr;
	__u32 masq_ifindex;     /* MASQUERADE's device: the only egress Linux keeps the connection on; 0: any */
	__be16 other_dport;
	__be16 sport;
	__u16 check_was;        /* the IPv4 header checksum before PREROUTING's rewrite */
	__u8 manip;             /* LFP_NAT_*, LFP_CT_* */
	__u8 answer;            /* conntrack.h's answer for this packet + 1 (| LFP_CT_OWED); 0: not looked up yet */
};

struct lfp_pkt {
	lfp_ctx_t *ctx;
	void *data;
	void *data_end;
	__u32 len;              /* whole frame, including non-linear parts */
	__u32 ingress_ifindex;
	/* The device IP sees the packet arrive on: the ingress itself, or the
	 * bridge a bridge port handed it up to (bridge.h). */
	__u32 l3_ifindex;
	__u16 l3_proto;         /* network byte order */
	struct lfp_fwd fwd;
	void *counters;         /* this interface's counter array (lfp_pkt_init) */
	void *dev;              /* the kernel's struct net_device of the ingress (lfp_pkt_init) */
	void *net;              /* its struct net */
	struct lfp_tally *tally;        /* NULL: nothing to count on the way out */
	__u32 tally_len;                /* the length it counts (e.g. IP's, as netfilter sees it) */
	struct lfp_ct ct;
};

/* Per-interface facts, shared by every pipeline of the namespace and kept
 * current by the controller (sysctl and link changes are map updates, never
 * reloads). Layout mirrored in linuxfp/graph/interfaces.py. */
#define LFP_IF_FORWARDING      (1u << 0)  /* conf/DEV/forwarding */
#define LFP_IF_RP_FILTER       (1u << 1)  /* effective rp_filter != 0 */
#define LFP_IF_XDP_TX          (1u << 2)  /* can take XDP frames (the devmaps hold only such) */
#define LFP_IF_TC_TX           (1u << 3)  /* routed IPv4 or bridged frames may leave here */
#define LFP_IF_ROUTED_TX       (1u << 4)  /* a routed packet may be redirected here (up, supported, not enslaved) */
/* bit 5 (once route_localnet) is free */
#define LFP_IF_SRC_FULL_CHECK  (1u << 6)  /* Linux would run __fib_validate_source */
#define LFP_IF_SET_PRIORITY    (1u << 7)  /* ip_forward_update_priority=1 */
#define LFP_IF_BRIDGE_TX       (1u << 8)  /* a bridge port in forwarding state (bridged frames) */
#define LFP_IF_IPV6            (1u << 9)  /* IPv6 arriving here may be routed by the fast path */
#define LFP_IF_IPV6_TX         (1u << 10) /* routed IPv6 may leave here (up, IPv6 on, takes no redirects) */
#define LFP_IF_ENCAP_TX        (1u << 11) /* a tunnel's outer packet the fast path builds may leave here */

struct lfp_iface {
	__u32 flags;
	__u32 mtu;
	__u8 mac[ETH_ALEN];
	/* Longest IPv4 packet the fast path may forward from this ingress, 0 for
	 * no cap: ip_forward() honours route MTU metrics that bpf_fib_lookup()
	 * ignores unless they are locked. */
	__u16 fwd_len_cap;
	/* Longest IPv4 packet the fast path may send out of this egress
	 * without asking more, 0 for no cap: an encapsulating device (VXLAN),
	 * whose outer packet could meet a smaller path MTU — Linux then lowers
	 * the inner route's path MTU as it sends, which a redirected packet,
	 * carrying no route, would not. A longer packet asks its remote's
	 * outer route (transmit.h, lfp_vteps). Only egresses a TC redirect
	 * alone reaches carry one. */
	__u16 tx_len_cap;
	/* Longest IPv6 packet the fast path may forward from this ingress, 0
	 * for no cap: the output path after ip6_forward() fragments by route
	 * MTU metrics that bpf_fib_lookup() ignores unless they are locked. */
	__u16 fwd_len_cap6;
};

/* An array indexed by ifindex: its lookup is inlined, where a hash lookup
 * costs as much as the rest of the router. An interface without facts reads
 * as all zeros: no flags, so every packet involving it goes to the kernel.
 * The controller sizes it at load time to cover the namespace's ifindexes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct lfp_iface);
} lfp_ifaces SEC(".maps");

/* Each interface's counters: a per-CPU array of its own, pinned as
 * if<N>_counters, where `linuxfp stats` reads it.
 *
 * At TC one loaded program serves every interface of its shape (a new
 * interface costs an attach, not a load): it reads the ingress from the
 * context and finds the counters through lfp_counters by ifindex, whose
 * entry the controller fills before attaching (sized like lfp_ifaces).
 *
 * At XDP the program is bound to its device (the driver's VLAN kfunc), so
 * it is loaded per interface anyway: the ingress is a load-time constant and
 * the counters the program's own map, the interface's array reused at load;
 * a packet pays no lookup for either. */
#ifdef LFP_HOOK_XDP
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LFP_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lfp_if_counters SEC(".maps");

volatile const __u32 lfp_ingress_ifindex = 0;
#else
struct lfp_counter_array {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LFP_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 256);
	__type(key, __u32);
	__array(values, struct lfp_counter_array);
} lfp_counters SEC(".maps");
#endif

static __always_inline void lfp_count(struct lfp_pkt *pkt, enum lfp_counter id)
{
	__u32 key = id;
	__u64 *value = bpf_map_lookup_elem(pkt->counters, &key);

	if (value)
		*value += 1;
}

/* The single way out to the kernel: every pass records why. */
static __always_inline enum lfp_rc lfp_pass(struct lfp_pkt *pkt, enum lfp_counter reason)
{
	lfp_count(pkt, reason);
	return LFP_PASS;
}

/* The single way to drop: only where Linux would drop the packet too, and
 * never silently. */
static __always_inline enum lfp_rc lfp_drop(struct lfp_pkt *pkt, enum lfp_counter reason)
{
	lfp_count(pkt, reason);
	return LFP_DROP;
}

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* The kernel's view of the packet, read through the context (CO-RE): the
 * device it arrived on, that device's namespace and its tcx programs. */
struct bpf_mprog_fp___lfp {
	void *prog;             /* struct bpf_prog */
} __attribute__((preserve_access_index));

struct bpf_mprog_entry___lfp {          /* a direction's tcx programs, NULL-terminated */
	struct bpf_mprog_fp___lfp fp_items[2];
} __attribute__((preserve_access_index));

struct net_device___lfp {
	struct {
		void *net;              /* struct net */
	} nd_net;
	struct bpf_mprog_entry___lfp *tcx_ingress;   /* kernel 6.6 on */
	void *nf_hooks_ingress;                      /* CONFIG_NETFILTER_INGRESS */
} __attribute__((preserve_access_index));

#ifdef LFP_HOOK_TC
struct sk_buff___lfp {
	__u8 ip_summed:2;
	__u8 l4_hash:1;
	__u8 sw_hash:1;
	__u8 encapsulation:1;
	struct net_device___lfp *dev;
	unsigned char *head;
	unsigned char *data;
	__u16 csum_start;       /* CHECKSUM_PARTIAL: from head */
	__u16 csum_offset;
} __attribute__((preserve_access_index));
#else
struct xdp_rxq_info___lfp {
	struct net_device___lfp *dev;
} __attribute__((preserve_access_index));

struct xdp_buff___lfp {
	struct xdp_rxq_info___lfp *rxq;
} __attribute__((preserve_access_index));
#endif

/* The struct net_device the packet arrived on (a node reads the fields it
 * needs through its own preserve_access_index view of it). */
static __always_inline void *lfp_kern_dev_of(lfp_ctx_t *ctx)
{
#ifdef LFP_HOOK_TC
	struct sk_buff___lfp *skb = bpf_cast_to_kern_ctx(ctx);

	return skb->dev;
#else
	struct xdp_buff___lfp *xdp = bpf_cast_to_kern_ctx(ctx);

	return xdp->rxq->dev;
#endif
}

static __always_inline void *lfp_kern_dev(struct lfp_pkt *pkt)
{
	return pkt->dev;
}

/* The struct net of the namespace the packet is in (read once, at
 * lfp_pkt_init, which checks it is this pipeline's). */
static __always_inline void *lfp_kern_net(struct lfp_pkt *pkt)
{
	return pkt->net;
}

/* Whether `net` (of the packet's device) is the namespace this pipeline serves.
 * A device keeps its XDP and tcx programs when it moves to another
 * namespace (`ip link set DEV netns NS`; container runtimes move one end of
 * a veth so), where this namespace's tables mean nothing: an ifindex names
 * another device there, and a devmap entry still points at a device here.
 * Until the controller sees the move and detaches, the kernel takes every
 * packet there. A few cache-hot loads and no helper call
 * (bpf_get_netns_cookie at TC reads the socket's namespace, and a forwarded
 * packet has no socket). */
static __always_inline int lfp_is_this_namespace(struct net *net)
{
	return net->net_cookie == lfp_netns_cookie;
}

/* 0, or -1 for a packet that is not this pipeline's (passed uncounted): its
 * device is in another namespace, or at TC an interface the controller has
 * not registered (it fills lfp_counters before attaching); neither has
 * counters this pipeline could find. */
static __always_inline int lfp_pkt_init(struct lfp_pkt *pkt, lfp_ctx_t *ctx)
{
	struct net_device___lfp *dev = lfp_kern_dev_of(ctx);

	pkt->dev = dev;
	pkt->net = dev->nd_net.net;
	if (!lfp_is_this_namespace(pkt->net))
		return -1;
	pkt->ctx = ctx;
	pkt->data = (void *)(long)ctx->data;
	pkt->data_end = (void *)(long)ctx->data_end;
#ifdef LFP_HOOK_XDP
	pkt->ingress_ifindex = lfp_ingress_ifindex;
	pkt->len = pkt->data_end - pkt->data;
	pkt->counters = &lfp_if_counters;
#else
	pkt->ingress_ifindex = ctx->ifindex;
	pkt->len = ctx->len;
	pkt->counters = bpf_map_lookup_elem(&lfp_counters, &pkt->ingress_ifindex);
#endif
	pkt->l3_ifindex = pkt->ingress_ifindex;
	pkt->l3_proto = 0;
	__builtin_memset(&pkt->fwd, 0, sizeof(pkt->fwd));
	pkt->ct.manip = 0;
	pkt->ct.answer = 0;
	return pkt->counters ? 0 : -1;
}

/* Every pointer into the packet must be derived again after a helper that
 * may move its data. */
static __always_inline void lfp_reload(struct lfp_pkt *pkt)
{
	pkt->data = (void *)(long)pkt->ctx->data;
	pkt->data_end = (void *)(long)pkt->ctx->data_end;
}

/* Whether the first `len` bytes of the frame are in pkt->data..data_end.
 * An skb may hold them partly in fragments: they are pulled into the linear
 * part, which changes no byte of the packet (but moves it: every pointer
 * into it must be derived again). XDP sees all of a single-buffer frame. */
static __always_inline int lfp_linear(struct lfp_pkt *pkt, __u32 len)
{
	if (pkt->data + len <= pkt->data_end)
		return 1;
#ifdef LFP_HOOK_TC
	if (len > pkt->len)
		return 0;
	/* (the pointers again even when it fails: nodes after may read the
	 * packet, which has not changed) */
	if (bpf_skb_pull_data(pkt->ctx, len)) {
		lfp_reload(pkt);
		return 0;
	}
	lfp_reload(pkt);
	return pkt->data + len <= pkt->data_end;
#else
	return 0;
#endif
}

/* The kernel's connection tracking table (nf_conntrack kfuncs), in the
 * namespace of the ingress device; bpf_modules/conntrack.h reads entries. */
struct nf_conn {                /* opaque here: a definition, so libbpf can match the kfuncs' types */
	int opaque;
};
struct bpf_ct_opts {            /* the kfuncs' options, in their first (12-byte) layout: every */
	__s32 netns_id;         /* kernel since 6.0 takes it, and looks up the default zone */
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u8 reserved[2];
};
#ifdef LFP_HOOK_XDP
extern struct nf_conn *bpf_xdp_ct_lookup(struct xdp_md *ctx, struct bpf_sock_tuple *tuple, __u32 tuple__sz,
					 struct bpf_ct_opts *opts, __u32 opts__sz) __ksym;
#else
extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *ctx, struct bpf_sock_tuple *tuple, __u32 tuple__sz,
					 struct bpf_ct_opts *opts, __u32 opts__sz) __ksym;
#endif
extern void bpf_ct_release(struct nf_conn *ct) __ksym;
extern int bpf_ct_change_timeout(struct nf_conn *ct, __u32 timeout) __ksym;

static __always_inline struct nf_conn *lfp_ct_lookup(struct lfp_pkt *pkt, struct bpf_sock_tuple *tuple,
						     __u32 size, struct bpf_ct_opts *opts)
{
#ifdef LFP_HOOK_XDP
	return bpf_xdp_ct_lookup(pkt->ctx, tuple, size, opts, sizeof(*opts));
#else
	return bpf_skb_ct_lookup(pkt->ctx, tuple, size, opts, sizeof(*opts));
#endif
}

/* The skb's checksum state (skb->ip_summed); XDP has no skb yet: what a
 * frame from the wire has, CHECKSUM_NONE. */
#define LFP_CHECKSUM_NONE 0
#define LFP_CHECKSUM_UNNECESSARY 1
#define LFP_CHECKSUM_PARTIAL 3

static __always_inline __u8 lfp_ip_summed(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	struct sk_buff___lfp *skb = bpf_cast_to_kern_ctx(pkt->ctx);

	return BPF_CORE_READ_BITFIELD(skb, ip_summed);
#else
	(void)pkt;
	return LFP_CHECKSUM_NONE;
#endif
}

/* Whether the kernel takes the packet's transport checksum as verified
 * without summing it: nf_ip_checksum() does for CHECKSUM_UNNECESSARY and
 * CHECKSUM_PARTIAL (sent by a local socket, e.g. a container's, whose
 * checksum field holds only the pseudo-header's sum). TC reads the skb's
 * ip_summed; XDP cannot know it, so it sums. */
static __always_inline int lfp_l4_csum_taken_as_verified(struct lfp_pkt *pkt)
{
	__u8 summed = lfp_ip_summed(pkt);

	return summed == LFP_CHECKSUM_UNNECESSARY || summed == LFP_CHECKSUM_PARTIAL;
}

/* Whether the skb carries a hash of its L4 flow (the NIC's RSS hash, a
 * local socket's txhash), which fib_multipath_hash_policy=1 uses instead
 * of hashing the headers. XDP: no skb yet (the controller keeps XDP off
 * where that matters: router.py). */
static __always_inline int lfp_has_l4_hash(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	struct sk_buff___lfp *skb = bpf_cast_to_kern_ctx(pkt->ctx);

	return BPF_CORE_READ_BITFIELD(skb, l4_hash);
#else
	(void)pkt;
	return 0;
#endif
}

/* Whether the skb is a tunnel's (its inner headers follow the outer ones). */
static __always_inline int lfp_is_encapsulated(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	struct sk_buff___lfp *skb = bpf_cast_to_kern_ctx(pkt->ctx);

	return BPF_CORE_READ_BITFIELD(skb, encapsulation);
#else
	(void)pkt;
	return 0;
#endif
}

/* Where a CHECKSUM_PARTIAL skb's transport checksum, which the sender left
 * to be filled, covers from: an offset into the frame (skb->csum_start),
 * with the field's own offset from there in *field; -1 when the packet is
 * not CHECKSUM_PARTIAL (at XDP: never). */
static __always_inline int lfp_csum_partial_from(struct lfp_pkt *pkt, __u16 *field)
{
#ifdef LFP_HOOK_TC
	struct sk_buff___lfp *skb = bpf_cast_to_kern_ctx(pkt->ctx);

	if (BPF_CORE_READ_BITFIELD(skb, ip_summed) != LFP_CHECKSUM_PARTIAL)
		return -1;
	*field = skb->csum_offset;
	return (int)skb->csum_start - (int)(skb->data - skb->head);
#else
	(void)pkt;
	(void)field;
	return -1;
#endif
}

/* The skb's flow hash as the stack's own transmit reads it (skb_get_hash():
 * the one it carries, else the flow dissector's, which is then kept); 0
 * when there is none, and at XDP (no skb yet). */
static __always_inline __u32 lfp_flow_hash(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	return bpf_get_hash_recalc(pkt->ctx);
#else
	(void)pkt;
	return 0;
#endif
}

/* Whether the skb carries a flow hash already (a socket's, the NIC's, or
 * one computed before), which skb_get_hash() returns as it is rather than
 * computing one from the headers as they are then. XDP: no skb yet. */
static __always_inline int lfp_has_flow_hash(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	struct sk_buff___lfp *skb = bpf_cast_to_kern_ctx(pkt->ctx);

	return BPF_CORE_READ_BITFIELD(skb, l4_hash) || BPF_CORE_READ_BITFIELD(skb, sw_hash);
#else
	(void)pkt;
	return 0;
#endif
}

/* A tunnel's transmit leaves the outer packet only an L4 hash
 * (skb_clear_hash_if_not_l4() in iptunnel_xmit()). */
static __always_inline void lfp_clear_hash_unless_l4(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	struct sk_buff___lfp *skb = bpf_cast_to_kern_ctx(pkt->ctx);

	if (!BPF_CORE_READ_BITFIELD(skb, l4_hash))
		bpf_set_hash_invalid(pkt->ctx);
#else
	(void)pkt;
#endif
}

/* Whether this hook can put a tunnel's headers in front of a packet and
 * send it as the tunnel device would (vxlan_tx.h): TC, whose skb carries
 * the hash, checksum state and offload marks that transmit reads and
 * keeps. A constant, like LFP_HOOK_ENTERS_PEERS. */
#ifdef LFP_HOOK_TC
#define LFP_HOOK_ENCAPSULATES 1
#else
#define LFP_HOOK_ENCAPSULATES 0
#endif

/* `len` bytes of room right after the Ethernet header, for a tunnel's
 * headers (bpf_skb_adjust_room() with the encapsulation `flags`, which
 * mark the skb as a tunnel's the way the tunnel's transmit marks it); 0,
 * or < 0 when there is no room (memory) or at XDP. Packet pointers are
 * derived again. */
static __always_inline long lfp_room_after_mac(struct lfp_pkt *pkt, __u32 len, __u64 flags)
{
#ifdef LFP_HOOK_TC
	long err = bpf_skb_adjust_room(pkt->ctx, len, BPF_ADJ_ROOM_MAC, flags);

	lfp_reload(pkt);
	pkt->len = pkt->ctx->len;
	return err;
#else
	(void)pkt;
	(void)len;
	(void)flags;
	return -1;
#endif
}

/* A 32-bit word of the network header changed from `from` to `to`: an
 * skb whose checksum covers the packet (CHECKSUM_COMPLETE) must follow, or
 * the receiver's verification fails (ip6_forward() would drop the
 * checksum: skb_forward_csum()). XDP builds the skb afterwards. */
static __always_inline void lfp_csum_changed(struct lfp_pkt *pkt, __be32 from, __be32 to)
{
#ifdef LFP_HOOK_TC
	bpf_csum_update(pkt->ctx, bpf_csum_diff(&from, sizeof(from), &to, sizeof(to), 0));
#else
	(void)pkt;
	(void)from;
	(void)to;
#endif
}

/* The kernel's one's complement sums (include/net/checksum.h), on values as
 * they lie in memory: csum_add(), csum_fold() and csum_replace4(), whose
 * results (which of the two zeroes, say) a byte-exact rewrite must share. */
static __always_inline __u32 lfp_kcsum_add(__u32 csum, __u32 addend)
{
	__u32 res = csum + addend;

	return res + (res < addend);
}

static __always_inline __u16 lfp_kcsum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

static __always_inline __u16 lfp_kcsum_replace4(__u16 check, __u32 from, __u32 to)
{
	return lfp_kcsum_fold(lfp_kcsum_add(lfp_kcsum_add(~(__u32)check, ~from), to));
}

/* Whether the transport checksum is the sender's to fill (CHECKSUM_PARTIAL:
 * it holds only the pseudo-header's sum). XDP: never — such a datagram does
 * not verify there, and conntrack.h hands it to the kernel. */
static __always_inline int lfp_l4_csum_partial(struct lfp_pkt *pkt)
{
	return lfp_ip_summed(pkt) == LFP_CHECKSUM_PARTIAL;
}

/* Four bytes the IPv4 header checksum at `check_off` covers changed from
 * `from` to `to`: the checksum follows as csum_replace4() has it. 0, or < 0
 * when the packet could not be written. */
static __always_inline int lfp_l3_csum_replace(struct lfp_pkt *pkt, __u32 check_off, __be32 from, __be32 to)
{
#ifdef LFP_HOOK_TC
	int err = bpf_l3_csum_replace(pkt->ctx, check_off, from, to, sizeof(to));

	lfp_reload(pkt);
	return err;
#else
	__u16 *check = pkt->data + check_off;

	if ((void *)(check + 1) > pkt->data_end)
		return -1;
	*check = lfp_kcsum_replace4(*check, from, to);
	return 0;
#endif
}

/* inet_proto_csum_replace4() (`size` 4) or _replace2() (`size` 2, the
 * values widened as it widens them) on the transport checksum at
 * `check_off`; `pseudo`: the bytes are the pseudo-header's too (an address).
 * TC runs the kernel's own function, which follows the skb's checksum state
 * (a partial checksum takes only pseudo-header changes, a complete one keeps
 * skb->csum true); XDP has no skb yet, and Linux's would not be partial
 * (lfp_l4_csum_partial()): csum_replace4(). 0, or < 0 when the packet could
 * not be written. */
static __always_inline int lfp_l4_csum_replace(struct lfp_pkt *pkt, __u32 check_off, __u32 from, __u32 to,
					       int pseudo, int size)
{
#ifdef LFP_HOOK_TC
	int err = bpf_l4_csum_replace(pkt->ctx, check_off, from, to, (pseudo ? BPF_F_PSEUDO_HDR : 0) | size);

	lfp_reload(pkt);
	return err;
#else
	__u16 *check = pkt->data + check_off;

	(void)pseudo;
	(void)size;
	if ((void *)(check + 1) > pkt->data_end)
		return -1;
	*check = lfp_kcsum_replace4(*check, from, to);
	return 0;
#endif
}

#if defined(LFP_HOOK_XDP) && defined(LFP_XDP_VLAN_KFUNC)
/* Only device-bound programs may call it; see Shape.device_bound. */
extern int bpf_xdp_metadata_rx_vlan_tag(const struct xdp_md *ctx, __be16 *vlan_proto,
					__u16 *vlan_tci) __ksym;
#endif

/* A VLAN tag the NIC or the veth peer moved out of the frame must not be
 * mistaken for an untagged frame: Linux would hand it to a VLAN device or
 * drop it as PACKET_OTHERHOST. */
static __always_inline int lfp_has_offloaded_vlan(struct lfp_pkt *pkt)
{
#if defined(LFP_HOOK_TC)
	return pkt->ctx->vlan_present;
#elif defined(LFP_XDP_VLAN_KFUNC)
	__be16 proto = 0;
	__u16 tci = 0;

	/* -ENODATA: no tag; any other answer, including an error, means unsure. */
	return bpf_xdp_metadata_rx_vlan_tag(pkt->ctx, &proto, &tci) != -61;
#else
	/* Test builds only (BPF_PROG_TEST_RUN refuses device-bound programs). */
	(void)pkt;
	return 0;
#endif
}

#ifdef LFP_XDP_VLAN_KFUNC
/* Never set. It guards dead code, see lfp_realloc_headroom(). */
volatile const __u32 lfp_never = 0;
#endif

/* Device-bound programs only: LFP_HEADROOM_INSNS instructions the verifier
 * proves dead and removes before its rewrites, so the kernel's first
 * allocation of the program already has room for everything they add (synth
 * sizes it to the program: linuxfp/synth/headroom.py). A device-bound
 * program the verifier has to move to larger pages leaves the kernel a
 * dangling pointer that oopses when the device is deleted
 * (linuxfp/datapath/hazards.py says how, and checks every load). Called off
 * the fast path. */
#ifndef LFP_HEADROOM_INSNS
#define LFP_HEADROOM_INSNS 512
#endif
#define LFP_STRINGIFY_(x) #x
#define LFP_STRINGIFY(x) LFP_STRINGIFY_(x)
static __always_inline void lfp_realloc_headroom(void)
{
#ifdef LFP_XDP_VLAN_KFUNC
	if (lfp_never)
		asm volatile(".rept " LFP_STRINGIFY(LFP_HEADROOM_INSNS) "\n\tr0 = 0\n\t.endr" ::: "r0");
#endif
}

/* Whether Linux would treat the frame as addressed to this host
 * (PACKET_HOST): TC knows it from eth_type_trans(), XDP compares the MAC. */
static __always_inline int lfp_for_this_host(struct lfp_pkt *pkt, const __u8 *dst, const __u8 *own)
{
#ifdef LFP_HOOK_TC
	(void)dst;
	(void)own;
	return pkt->ctx->pkt_type == 0;   /* PACKET_HOST */
#else
	(void)pkt;
	return ((const __u16 *)dst)[0] == ((const __u16 *)own)[0] &&
	       ((const __u16 *)dst)[1] == ((const __u16 *)own)[1] &&
	       ((const __u16 *)dst)[2] == ((const __u16 *)own)[2];
#endif
}

/* Only skbs can be GSO super-packets (XDP sees single frames). */
static __always_inline int lfp_is_gso(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	return pkt->ctx->gso_size != 0;
#else
	(void)pkt;
	return 0;
#endif
}

/* Whether each segment of a GSO packet fits the egress MTU, as
 * skb_gso_validate_network_len() decides for ip_forward(). */
static __always_inline int lfp_segments_fit(struct lfp_pkt *pkt, __u32 egress)
{
#ifdef LFP_HOOK_TC
	__u32 mtu_len = 0;

	/* Without BPF_MTU_CHK_SEGS a GSO packet always "fits". */
	return bpf_check_mtu(pkt->ctx, egress, &mtu_len, 0, BPF_MTU_CHK_SEGS) == 0;
#else
	(void)pkt;
	(void)egress;
	return 0;
#endif
}

/* A packet mark steers policy routing (fwmark rules); XDP runs before any
 * mark exists, TC may see one set by an earlier program. */
static __always_inline int lfp_has_mark(struct lfp_pkt *pkt)
{
#ifdef LFP_HOOK_TC
	return pkt->ctx->mark != 0;
#else
	(void)pkt;
	return 0;
#endif
}

/* The packet's priority (skb->priority), which the egress qdisc of a TC
 * redirect sees; XDP redirects bypass the qdisc, so there is nothing to set. */
static __always_inline void lfp_set_priority(struct lfp_pkt *pkt, __u32 priority)
{
#ifdef LFP_HOOK_TC
	pkt->ctx->priority = priority;
#else
	(void)pkt;
	(void)priority;
#endif
}

#ifdef LFP_HOOK_XDP
/* Egresses an XDP redirect of routed IPv4 may use, indexed by ifindex: the
 * controller puts an interface here only when it can take XDP frames and
 * forwards (the facts XDP_TX | TC_TX | FORWARDING). A devmap also lets the
 * kernel skip the per-packet ifindex lookup bpf_redirect() needs. Sized
 * like lfp_ifaces. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} lfp_tx_ports SEC(".maps");

/* The same for routed IPv6 (facts XDP_TX | ROUTED_TX | IPV6_TX): neither IPv4's
 * forwarding nor its redirects decide whether IPv6 may leave, so an
 * IPv6-only router (ip_forward=0) has its egresses here. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} lfp_tx6_ports SEC(".maps");

/* The bridge ports a bridged frame may leave through at XDP (facts XDP_TX |
 * BRIDGE_TX): kept apart from lfp_tx_ports so that a route never leads to
 * one. Sized like lfp_ifaces. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} lfp_br_tx_ports SEC(".maps");
#endif

/* Arm the redirect to `egress` before the packet is rewritten: 0 when this
 * hook cannot send there, and the packet must go to the kernel unchanged.
 * The egress must have the facts `need` (a constant: at XDP it picks the
 * devmap that holds exactly such egresses). */
static __always_inline int lfp_arm_redirect_to(struct lfp_pkt *pkt, __u32 egress, __u32 need)
{
#ifdef LFP_HOOK_XDP
	if (need & LFP_IF_BRIDGE_TX)
		return bpf_redirect_map(&lfp_br_tx_ports, egress, XDP_PASS) == XDP_REDIRECT;
	if (need & LFP_IF_IPV6_TX)
		return bpf_redirect_map(&lfp_tx6_ports, egress, XDP_PASS) == XDP_REDIRECT;
	return bpf_redirect_map(&lfp_tx_ports, egress, XDP_PASS) == XDP_REDIRECT;
#else
	struct lfp_iface *out = bpf_map_lookup_elem(&lfp_ifaces, &egress);

	if (!out || (out->flags & need) != need)
		return 0;
	return bpf_redirect(egress, 0) == TC_ACT_REDIRECT;
#endif
}

static __always_inline int lfp_mac_equal(const __u8 *a, const __u8 *b)
{
	const __u16 *x = (const __u16 *)a, *y = (const __u16 *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]));
}

/* Whether this hook can hand a packet straight to a veth's peer in its
 * namespace (bpf_redirect_peer: TC ingress only); a constant, so nodes test
 * it without #ifdef and XDP builds drop the code behind it. */
#ifdef LFP_HOOK_TC
#define LFP_HOOK_ENTERS_PEERS 1
#else
#define LFP_HOOK_ENTERS_PEERS 0
#endif

/* Turn the redirect armed to the veth `egress` into delivery straight into
 * its peer's receive path, as veth_xmit() would deliver it (the caller has
 * checked the peer takes it like that): skb_scrub_packet() across
 * namespaces clears the mark and __dev_forward_skb() the priority, which
 * the peer redirect would keep. 0 when this hook cannot; the redirect armed
 * before stays. */
static __always_inline int lfp_upgrade_to_peer(struct lfp_pkt *pkt, __u32 egress)
{
#ifdef LFP_HOOK_TC
	pkt->ctx->mark = 0;
	pkt->ctx->priority = 0;
	return bpf_redirect_peer(egress, 0) == TC_ACT_REDIRECT;
#else
	(void)pkt;
	(void)egress;
	return 0;
#endif
}

/* Whether the packet is longer than the fast path may send out of `egress`
 * without asking the outer route (lfp_iface.tx_len_cap; a GSO packet is,
 * where there is a cap). No XDP redirect target has a cap, so XDP builds
 * drop the check, and the outer route's with it. */
static __always_inline int lfp_tx_too_long(struct lfp_pkt *pkt, __u32 egress)
{
#ifdef LFP_HOOK_TC
	struct lfp_iface *out = bpf_map_lookup_elem(&lfp_ifaces, &egress);

	return out && out->tx_len_cap && (lfp_is_gso(pkt) || pkt->len > out->tx_len_cap + sizeof(struct ethhdr));
#else
	(void)pkt;
	(void)egress;
	return 0;
#endif
}

/* A routed IPv4 packet: the egress forwards. */
static __always_inline int lfp_arm_redirect(struct lfp_pkt *pkt, __u32 egress)
{
	return lfp_arm_redirect_to(pkt, egress, LFP_IF_TC_TX | LFP_IF_FORWARDING);
}

/* A routed IPv6 packet: the egress sends IPv6 (IPv4's switches do not
 * matter to it). */
static __always_inline int lfp_arm_redirect6(struct lfp_pkt *pkt, __u32 egress)
{
	return lfp_arm_redirect_to(pkt, egress, LFP_IF_ROUTED_TX | LFP_IF_IPV6_TX);
}

/* A bridged frame: the egress is a bridge port that may send. */
static __always_inline int lfp_arm_bridged_redirect(struct lfp_pkt *pkt, __u32 egress)
{
	return lfp_arm_redirect_to(pkt, egress, LFP_IF_TC_TX | LFP_IF_BRIDGE_TX);
}

/* Whether tcx programs of another tool run on the ingress, which this
 * pipeline would go around: at XDP any (tcx runs after XDP), at TC any but
 * this one (the controller attaches it alone). A tcx attachment sends no
 * event: the controller finds it by polling and then leaves the ingress to
 * the kernel; until then every packet goes there from here (no window). */
static __always_inline int lfp_tcx_others_on_ingress(struct lfp_pkt *pkt)
{
	struct net_device___lfp *dev = lfp_kern_dev(pkt);
	struct bpf_mprog_entry___lfp *entry;

	if (!bpf_core_field_exists(dev->tcx_ingress))
		return 0;       /* no tcx in this kernel */
	entry = dev->tcx_ingress;
	if (!entry)
		return 0;
#ifdef LFP_HOOK_XDP
	return entry->fp_items[0].prog != NULL;
#else
	return entry->fp_items[1].prog != NULL;
#endif
}

/* The bridge device of the bridge port the packet arrived on, through the
 * port's rx_handler_data (untyped: read with probes), which must still be
 * this port's; NULL when unsure (the bridge's types unknown, the port not
 * what it was). */
struct net_device___lfp_port {
	void *rx_handler_data;  /* a bridge port's: its struct net_bridge_port */
} __attribute__((preserve_access_index));

struct net_bridge___lfp {
	void *dev;              /* struct net_device */
} __attribute__((preserve_access_index));

struct net_bridge_port___lfp {
	struct net_bridge___lfp *br;
	void *dev;
} __attribute__((preserve_access_index));

static __always_inline void *lfp_kern_bridge_of_port(struct lfp_pkt *pkt)
{
	struct net_device___lfp_port *dev = lfp_kern_dev(pkt);
	struct net_bridge_port___lfp *port;

	/* (where the bridge is a module its types may be unknown; a constant,
	 * so the verifier drops what follows) */
	if (!bpf_core_type_exists(struct net_bridge_port___lfp))
		return NULL;
	port = BPF_CORE_READ(dev, rx_handler_data);
	if (!port || BPF_CORE_READ(port, dev) != (void *)dev)
		return NULL;
	return BPF_CORE_READ(port, br, dev);
}

/* Whether netfilter hooks run at the ingress of `dev` (an nf_tables netdev
 * or inet ingress chain, after tc): the kernel's to run. The controller
 * keeps an ingress whose chain does something on the kernel path; this
 * closes the window until it has read a change no nf_tables event
 * announces (a device renamed into a name a chain binds, 6.16 on), and
 * leaves the rest to the kernel too (a chain that does nothing). */
static __always_inline int lfp_nf_hooks_on_ingress_of(const void *dev)
{
	if (!bpf_core_field_exists(((struct net_device___lfp *)0)->nf_hooks_ingress))
		return 0;       /* no netfilter ingress hooks in this kernel */
	return BPF_CORE_READ((struct net_device___lfp *)dev, nf_hooks_ingress) != NULL;
}

/* The same for the device the packet arrived on, a pointer the verifier
 * knows (the context's): a direct load, not a probe-read call per packet. */
static __always_inline int lfp_nf_hooks_on_ingress(struct lfp_pkt *pkt)
{
	struct net_device___lfp *dev = lfp_kern_dev(pkt);

	if (!bpf_core_field_exists(dev->nf_hooks_ingress))
		return 0;       /* no netfilter ingress hooks in this kernel */
	return dev->nf_hooks_ingress != NULL;
}

/* Whether tcx programs run at the ingress of `dev`, a device reached by
 * probe reads (untyped) that the controller never attaches to. */
static __always_inline int lfp_tcx_on_ingress_of(const void *dev)
{
	struct bpf_mprog_entry___lfp *entry;

	if (!bpf_core_field_exists(((struct net_device___lfp *)0)->tcx_ingress))
		return 0;       /* no tcx in this kernel */
	entry = BPF_CORE_READ((struct net_device___lfp *)dev, tcx_ingress);
	return entry && BPF_CORE_READ(entry, fp_items[0].prog) != NULL;
}

/* A packet passed is the kernel's as if this pipeline were not there: at TC
 * that includes whatever tcx programs follow ours on the device (another
 * tool's attached since, or another namespace's controller after a move):
 * TC_ACT_UNSPEC is tcx's "next program" (and cls_bpf's "next filter"),
 * where TC_ACT_OK would end the chain. */
static __always_inline int lfp_verdict(struct lfp_pkt *pkt, enum lfp_rc rc)
{
	(void)pkt;
#ifdef LFP_HOOK_XDP
	switch (rc) {
	case LFP_REDIRECT:
		return XDP_REDIRECT;    /* armed by lfp_arm_redirect() */
	case LFP_DROP:
		return XDP_DROP;
	default:
		return XDP_PASS;
	}
#else
	switch (rc) {
	case LFP_REDIRECT:
		return TC_ACT_REDIRECT;
	case LFP_DROP:
		return TC_ACT_SHOT;
	default:
		return TC_ACT_UNSPEC;
	}
#endif
}


#endif
