/* Filter node: the filter table's FORWARD chains of iptables and ip6tables
 * (nft and legacy backends at once) with Linux's exact verdict, at a cost
 * that does not grow with the rule count.
 *
 * The controller compiles the rules into a recursive flow classifier
 * (linuxfp/graph/filtering/classifier.py, whose classify() is this file in
 * Python): each header field maps to a class (source, destination,
 * protocol+port or ICMP type/code, TCP flags, and the connection's NAT for
 * --ctstate SNAT/DNAT by longest-prefix match; ingress and egress by
 * ifindex), pairs of classes map to the class of their
 * combination, and the last class to the verdict Linux's chains reach for
 * every packet of that class: accept, drop, "the kernel" (a rule with an
 * effect or a match the fast path does not reproduce), or, where the kernel
 * tracks connections, dropped before conntrack (by raw's PREROUTING).
 *
 * Every key starts with the classifier's generation, and lfp_flt_cfg,
 * written after all entries of a new generation and before the old ones are
 * erased, says which generation is current: a packet sees one classifier,
 * old or new, never a mixture (it checks the generation is still current
 * once it has read everything). A field class or verdict it needs and does
 * not find means the tables are being rewritten: the kernel decides.
 * iptables' rules and ip6tables' make a classifier each, side by side in
 * the same tables (a generation names its family; the addresses have a
 * table per family): lfp_flt_cfg holds the current one per family, or
 * LFP_FLT_OPEN when that family's FORWARD chains let everything through.
 * The node evaluates FORWARD for routed packets; bridge_filter.h asks the
 * same classifier (lfp_flt_forward) about bridged frames br_netfilter shows
 * iptables.
 * Declared to the controller by linuxfp/graph/nodes/iptables_filter.py.
 */
#ifndef LFP_FILTER_H
#define LFP_FILTER_H

#include <linux/tcp.h>
#include <linux/udp.h>

#include "common.h"
#include "conntrack.h"
#include "parse.h"

/* Its verdicts count per rule on the way out (pkt->tally, common.h). */
#define LFP_TALLIES 1

#define LFP_COUNTERS_FILTER(X)                                                            \
	X(FILTER_DROPPED,         filter, drop, "dropped by a netfilter rule or policy on the forwarded path (FORWARD, raw/mangle PREROUTING, nft)") \
	X(FILTER_KERNEL,          filter, pass, "a netfilter rule the fast path does not reproduce (linuxfp graph names it)") \
	X(FILTER_L4_SHORT,        filter, pass, "transport header not complete (iptables would drop it)") \
	X(FILTER_UNCONFIGURED,    filter, pass, "filter tables not written yet")            \
	X(FILTER_STALE,           filter, pass, "filter tables being rewritten")            \
	X(FILTER_CT_NEW,          filter, pass, "connection tracking on: no entry yet (the kernel creates it)") \
	X(FILTER_CT_ERROR,        filter, pass, "connection tracking on: the conntrack lookup failed") \
	X(FILTER_CT_STATE,        filter, pass, "connection tracking on: entry not established, NATed, or otherwise changed by this packet") \
	X(FILTER_CT_TCP,          filter, pass, "connection tracking on: TCP (its window tracking stays with the kernel)") \
	X(FILTER_CT_PROTO,        filter, pass, "connection tracking on: neither UDP nor TCP")  \
	X(FILTER_CT_INVALID,      filter, pass, "connection tracking on: conntrack could call it invalid (length, checksum)")

/* Verdicts, as in linuxfp/graph/filtering/program.py. */
#define LFP_FLT_ACCEPT 0
#define LFP_FLT_DROP   1
#define LFP_FLT_KERNEL 2
/* dropped by a chain before conntrack's priority (raw) where connections
 * are tracked: conntrack never sees the packet, nor refreshes its entry */
#define LFP_FLT_DROP_EARLY 3

/* The fields a classifier looks up. */
#define LFP_FLT_SRC (1u << 0)
#define LFP_FLT_DST (1u << 1)
#define LFP_FLT_L4S (1u << 2)
#define LFP_FLT_L4D (1u << 3)
#define LFP_FLT_IIF (1u << 4)
#define LFP_FLT_OIF (1u << 5)
#define LFP_FLT_TCPF (1u << 6)
#define LFP_FLT_CTNAT (1u << 9)     /* the connection's NAT, in the flow's l4d[LFP_FLT_CTNAT_BYTE] */
/* ... as LFP_FLT_CTNAT_BITS bits (common.h's, shifted down): whether this
 * packet's destination was translated at PREROUTING (a prerouting chain
 * ahead of destination NAT saw it as it came), and the entry's SNAT and
 * DNAT status (linuxfp/graph/filtering/predicates.py, CTNAT_*) */
#define LFP_FLT_CTNAT_BITS 3
/* Not a field: the kernel tracks connections, so only packets of an
 * established, un-NATed connection are taken (conntrack.h), but for what a
 * chain before conntrack drops ... */
#define LFP_FLT_CT  (1u << 7)
/* ... and of an established connection with NAT too: the kernel translates
 * them (an IPv4 nat table). The conntrack node (ct_prerouting.h) takes them
 * then; a classifier without the bit passes one it took under a generation
 * before. */
#define LFP_FLT_NAT (1u << 8)
/* ... and a chain before conntrack's priority may drop a packet (its
 * verdict LFP_FLT_DROP_EARLY): the conntrack node leaves the connection's
 * refresh owed, where it would change the entry, for after that verdict
 * (conntrack.h). */
#define LFP_FLT_CT_LATE (1u << 10)

/* Longest-prefix match of one field. value: an IPv4 address as on the
 * wire, or {protocol, port in network order} / {1 or 58, 0, ICMP type or
 * code}, or the TCP flags byte, padded. */
struct lfp_flt_lpm_key {
	__u32 prefixlen;        /* 32 (the generation) + the prefix's length */
	__u32 gen;
	__u8 value[4];
};

/* ... of an IPv6 address. */
struct lfp_flt_lpm6_key {
	__u32 prefixlen;        /* 32 (the generation) + the prefix's length */
	__u32 gen;
	__u8 value[16];
};

struct lfp_flt_if_key {
	__u32 gen;
	__u32 ifindex;
};

struct lfp_flt_if_classes {
	__u32 in;               /* class as -i */
	__u32 out;              /* class as -o */
};

/* Phase 2: nodes 1..5, 7 and 8 combine two classes; node 6 (left: the last
 * class) holds the verdict | (deciding rule + 1) << 2. */
struct lfp_flt_pair_key {
	__u32 gen;
	__u32 node;
	__u32 left;
	__u32 right;
};

#define LFP_FLT_LPM_MAP(name, key_type)                           \
	struct {                                                  \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);              \
		__uint(max_entries, 262144);                      \
		__uint(map_flags, BPF_F_NO_PREALLOC);             \
		__type(key, key_type);                            \
		__type(value, __u32);                             \
	} name SEC(".maps")

LFP_FLT_LPM_MAP(lfp_flt_src, struct lfp_flt_lpm_key);
LFP_FLT_LPM_MAP(lfp_flt_dst, struct lfp_flt_lpm_key);
LFP_FLT_LPM_MAP(lfp_flt_src6, struct lfp_flt_lpm6_key);
LFP_FLT_LPM_MAP(lfp_flt_dst6, struct lfp_flt_lpm6_key);
LFP_FLT_LPM_MAP(lfp_flt_l4s, struct lfp_flt_lpm_key);
LFP_FLT_LPM_MAP(lfp_flt_l4d, struct lfp_flt_lpm_key);
LFP_FLT_LPM_MAP(lfp_flt_tcpflags, struct lfp_flt_lpm_key);
/* (LFP_FLT_CTNAT_BITS bits: LFP_NAT_DST, LFP_CT_SNAT, LFP_CT_DNAT shifted down, left-aligned in value[0]) */
LFP_FLT_LPM_MAP(lfp_flt_ctnat, struct lfp_flt_lpm_key);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lfp_flt_if_key);
	__type(value, struct lfp_flt_if_classes);
} lfp_flt_ifs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2097152);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lfp_flt_pair_key);
	__type(value, __u32);
} lfp_flt_comb SEC(".maps");

/* The current classifier of a family (index 0: IPv4, 1: IPv6): its
 * generation, whose low bits are the fields it looks up (LFP_FLT_*), so one
 * load reads both. 0: none yet; LFP_FLT_OPEN: the family's FORWARD chains
 * let every packet through (no generation is below 0x1000). epoch: drawn
 * afresh by the controller for each classifier it builds and each patch of
 * one — an ipset member added or removed is written into the current
 * generation's LPM entries in place (no other entry changes:
 * classifier.py's patch_classifier), and a verdict cached under an earlier
 * epoch (those found while the entries were being written included) is not
 * used once the new one is written. (A reader that sees the new epoch sees
 * the entries written before it on x86's ordering; a weakly ordered CPU
 * could pair them otherwise, where only the watch's pass-everything window,
 * which covers every patch of an ipset change, keeps it exact.) */
struct lfp_flt_cfg {
	__u32 gen;
	__u32 epoch;
};
#define LFP_FLT_USED_MASK 0x7ffu
#define LFP_FLT_OPEN 1u

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct lfp_flt_cfg);
} lfp_flt_cfg SEC(".maps");

/* The class a field's LPM map gives `key`; 0 when it has none. */
static __always_inline int lfp_flt_class(void *map, const void *key, __u32 *cls)
{
	__u32 *hit = bpf_map_lookup_elem(map, key);

	if (!hit)
		return 0;
	*cls = *hit;
	return 1;
}

static __always_inline int lfp_flt_lpm(void *map, __u32 gen, const __u8 *value, __u32 *cls)
{
	struct lfp_flt_lpm_key key = { .prefixlen = 32 + 32, .gen = gen };

	__builtin_memcpy(key.value, value, sizeof(key.value));
	return lfp_flt_class(map, &key, cls);
}

static __always_inline int lfp_flt_lpm6(void *map, __u32 gen, const __be32 *value, __u32 *cls)
{
	struct lfp_flt_lpm6_key key = { .prefixlen = 32 + 128, .gen = gen };

	__builtin_memcpy(key.value, value, sizeof(key.value));
	return lfp_flt_class(map, &key, cls);
}

/* The right class of a left class's default pair (classifier.py's ANY_RIGHT). */
#define LFP_FLT_ANY_RIGHT 0xffffffffu

/* The class of two classes: looked up when both sides are used, otherwise
 * the used side's class passes through (the classifier built it so). A
 * pair not stored is the left class's default (its pair with
 * LFP_FLT_ANY_RIGHT: where most of its pairs join to one class, only the
 * others are stored, a source blocklist's class once, not once per
 * destination), else class 0, the empty set (a pair that shares no rule's
 * box). Left class 0 — the root of a field, or the empty set — has no
 * default: traffic no rule names misses with one lookup. */
static __always_inline __u32 lfp_flt_join(__u32 gen, __u32 node, int left_used, __u32 left,
					  int right_used, __u32 right)
{
	struct lfp_flt_pair_key key = { .gen = gen, .node = node, .left = left, .right = right };
	__u32 *hit;

	if (!left_used || !right_used)
		return left_used ? left : right_used ? right : 0;
	hit = bpf_map_lookup_elem(&lfp_flt_comb, &key);
	if (hit || !left)
		return hit ? *hit : 0;
	key.right = LFP_FLT_ANY_RIGHT;
	hit = bpf_map_lookup_elem(&lfp_flt_comb, &key);
	return hit ? *hit : 0;
}

/* Where the flow's l4s holds TCP's flags byte, and its l4d the
 * connection's NAT (their prefixes are 24 bits). */
#define LFP_FLT_FLAGS_BYTE 3
#define LFP_FLT_CTNAT_BYTE 3

/* Protocol and the transport fields iptables' tcp/udp/icmp matches (and
 * ip6tables' tcp/udp/icmp6) read, TCP's flags in l4s[LFP_FLT_FLAGS_BYTE];
 * 0 when the transport header is not all there (their match would drop the
 * packet: the kernel decides). */
static __always_inline int lfp_flt_l4(struct lfp_pkt *pkt, int family6, __u8 *l4s, __u8 *l4d)
{
	__u32 l3_len = family6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	__u32 need = sizeof(struct ethhdr) + l3_len;
	__u8 proto, icmp_proto = family6 ? LFP_NEXTHDR_ICMPV6 : IPPROTO_ICMP;
	void *l4;

	/* The router and the bridge let only 20-byte IPv4 headers and IPv6
	 * headers without extension headers (ipv6_find_hdr() walks: hop-by-hop,
	 * routing, fragment, authentication, destination options) through: the
	 * protocol is the one iptables' and ip6tables' -p see. */
	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6)
			return 0;
		proto = ip6->nexthdr;
	} else {
		struct iphdr *ip = lfp_ipv4(pkt);

		if (!ip)
			return 0;
		proto = ip->protocol;
	}
	l4s[0] = proto;
	l4d[0] = proto;
	if (proto == IPPROTO_TCP)
		need += sizeof(struct tcphdr);
	else if (proto == IPPROTO_UDP || proto == icmp_proto)
		need += 8;
	else
		return 1;
	if (!lfp_linear(pkt, need))
		return 0;
	l4 = pkt->data + sizeof(struct ethhdr) + l3_len;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > pkt->data_end || tcp->doff < 5)
			return 0;
		__builtin_memcpy(&l4s[1], &tcp->source, 2);
		__builtin_memcpy(&l4d[1], &tcp->dest, 2);
		l4s[LFP_FLT_FLAGS_BYTE] = ((__u8 *)tcp)[13];
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > pkt->data_end)
			return 0;
		__builtin_memcpy(&l4s[1], &udp->source, 2);
		__builtin_memcpy(&l4d[1], &udp->dest, 2);
	} else {
		__u8 *icmp = l4;

		if ((void *)(icmp + 8) > pkt->data_end)
			return 0;
		l4s[2] = icmp[0];       /* type */
		l4d[2] = icmp[1];       /* code */
	}
	return 1;
}

/* The fields every rule can see, under one generation: the key of a
 * verdict. Ports, flags and NAT the classifier does not use are 0; an IPv4 flow has no
 * words past its addresses (LFP_FLT_WORDS4), and a cache slot's copy of one
 * may keep an earlier IPv6 flow's there: never compared. */
struct lfp_flt_flow {
	__u32 gen;
	__u8 l4s[4];            /* protocol, port (ICMP type), TCP flags: l4s' LPM prefixes end before them */
	__u8 l4d[4];            /* protocol, port (ICMP code), the connection's NAT (ctnat) */
	__u32 iif;
	__u32 oif;
	union {
		struct {
			__be32 saddr;
			__be32 daddr;
		} v4;
		struct {
			__be32 saddr[4];
			__be32 daddr[4];
		} v6;
	};
};
/* Its words an IPv4 flow uses; the generation tells the families apart, so
 * comparing these is comparing the whole key (an IPv4 flow's slot may keep
 * an earlier IPv6 flow's address words after them: never compared). */
#define LFP_FLT_WORDS4 7
_Static_assert(__builtin_offsetof(struct lfp_flt_flow, v4.daddr) == (LFP_FLT_WORDS4 - 1) * 4,
	       "LFP_FLT_WORDS4 covers an IPv4 flow");

/* The verdict of a flow's classification, remembered per CPU in a
 * direct-mapped cache (a slot per hash of the flow; a collision replaces
 * it): a steady flow costs one inlined lookup and a compare instead of the
 * classifier's lookups, and only the CPU's own memory is written.
 * Exact: a slot holds the whole key, generation included, and is written
 * only once that generation was still current after the classification;
 * the next generation never matches it. */
#define LFP_FLT_CACHE_SLOTS 4096

struct lfp_flt_cached {
	/* What the fast path decided for this flow since it took the slot, not
	 * yet in lfp_flt_hits: the slot is written by its own CPU alone, so a
	 * steady flow's count costs two adds to memory it just read. */
	struct lfp_tally tally;
	__u32 verdict;          /* LFP_FLT_* | (rule + 1) << 2 */
	__u32 cls;              /* the flow's last class (the verdict's key) */
	__u32 epoch;            /* lfp_flt_cfg's when the verdict was found */
	/* last: an IPv4 flow's hit reads the slot's first 56 bytes only */
	struct lfp_flt_flow flow;
};

/* The fast path's decisions per classifier generation and class, moved
 * here from a cache slot when another flow takes it. `linuxfp stats` adds
 * both up and gives each class's packets to the rules Linux would have
 * counted for it (classifier.py's `counted`): what iptables -L -v misses.
 * LRU: every ruleset change makes a generation, and the pairs of earlier
 * ones, no longer flushed to, are the first to go once 16 384 pairs have
 * had traffic (a current pair that has not been flushed to for longest
 * could go too: its count is then low, never high). */
struct lfp_flt_hit_key {
	__u32 gen;
	__u32 cls;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct lfp_flt_hit_key);
	__type(value, struct lfp_tally);
} lfp_flt_hits SEC(".maps");

/* The slot's count into lfp_flt_hits before another flow takes it. */
static __always_inline void lfp_flt_flush(struct lfp_flt_cached *cached)
{
	struct lfp_flt_hit_key key = { .gen = cached->flow.gen, .cls = cached->cls };
	struct lfp_tally *hits;

	if (!cached->tally.packets)
		return;
	hits = bpf_map_lookup_elem(&lfp_flt_hits, &key);
	if (hits) {
		hits->packets += cached->tally.packets;
		hits->bytes += cached->tally.bytes;
	} else {
		/* (BPF_ANY: another CPU may have made the entry meanwhile; this
		 * CPU's copy in it is still zero, so nothing is overwritten) */
		bpf_map_update_elem(&lfp_flt_hits, &key, &cached->tally, BPF_ANY);
	}
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LFP_FLT_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct lfp_flt_cached);
} lfp_flt_cache SEC(".maps");

/* A hash of the flow's first LFP_FLT_WORDS4 words, an IPv6 flow's
 * addresses folded into them (an IPv4 flow costs what it did before IPv6). */
static __always_inline __u32 lfp_flt_slot(const struct lfp_flt_flow *flow, int family6)
{
	const __u32 *word = (const __u32 *)flow;
	__u32 h = 0x9e3779b9, s = flow->v4.saddr, d = flow->v4.daddr;

	if (family6) {
		s = flow->v6.saddr[0] ^ flow->v6.saddr[1] ^ flow->v6.saddr[2] ^ flow->v6.saddr[3];
		d = flow->v6.daddr[0] ^ flow->v6.daddr[1] ^ flow->v6.daddr[2] ^ flow->v6.daddr[3];
	}
#define LFP_FLT_MIX(w) do { h ^= (w); h *= 0x85ebca6b; h ^= h >> 15; } while (0)
#pragma unroll
	for (int i = 0; i < LFP_FLT_WORDS4 - 2; i++)
		LFP_FLT_MIX(word[i]);
	LFP_FLT_MIX(s);
	LFP_FLT_MIX(d);
#undef LFP_FLT_MIX
	return h & (LFP_FLT_CACHE_SLOTS - 1);
}

static __always_inline int lfp_flt_same(const struct lfp_flt_flow *a, const struct lfp_flt_flow *b, int family6)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	__u32 diff = 0;

#pragma unroll
	for (int i = 0; i < LFP_FLT_WORDS4; i++)
		diff |= x[i] ^ y[i];
	if (family6) {
#pragma unroll
		for (int i = LFP_FLT_WORDS4; i < (int)(sizeof(*a) / 4); i++)
			diff |= x[i] ^ y[i];
	}
	return diff == 0;
}

#define LFP_FLT_UNSURE 0xffffffffu

/* The classifier: the verdict word for `flow`, or LFP_FLT_UNSURE when an
 * entry it needs is missing or the generation changed meanwhile. */
static __always_inline __u32 lfp_flt_classify(const struct lfp_flt_cfg *cfg, __u32 used, int family6,
					       const struct lfp_flt_flow *flow, __u32 epoch, __u32 *cls)
{
	__u32 gen = flow->gen;
	__u32 src = 0, dst = 0, sport = 0, dport = 0, flags = 0, iif = 0, oif = 0, nat = 0;
	__u32 addrs, l4, headers, last, *rule;
	struct lfp_flt_pair_key verdict_key = {};

	/* Each pair is joined as soon as both sides are known, so few classes
	 * are live across the lookups (the stack is TC's limit). */
	if (family6) {
		if ((used & LFP_FLT_SRC) && !lfp_flt_lpm6(&lfp_flt_src6, gen, flow->v6.saddr, &src))
			return LFP_FLT_UNSURE;
		if ((used & LFP_FLT_DST) && !lfp_flt_lpm6(&lfp_flt_dst6, gen, flow->v6.daddr, &dst))
			return LFP_FLT_UNSURE;
	} else {
		if ((used & LFP_FLT_SRC) && !lfp_flt_lpm(&lfp_flt_src, gen, (const __u8 *)&flow->v4.saddr, &src))
			return LFP_FLT_UNSURE;
		if ((used & LFP_FLT_DST) && !lfp_flt_lpm(&lfp_flt_dst, gen, (const __u8 *)&flow->v4.daddr, &dst))
			return LFP_FLT_UNSURE;
	}
	addrs = lfp_flt_join(gen, 1, used & LFP_FLT_SRC, src, used & LFP_FLT_DST, dst);
	if ((used & LFP_FLT_L4S) && !lfp_flt_lpm(&lfp_flt_l4s, gen, flow->l4s, &sport))
		return LFP_FLT_UNSURE;
	if ((used & LFP_FLT_L4D) && !lfp_flt_lpm(&lfp_flt_l4d, gen, flow->l4d, &dport))
		return LFP_FLT_UNSURE;
	l4 = lfp_flt_join(gen, 2, used & LFP_FLT_L4S, sport, used & LFP_FLT_L4D, dport);
	if (used & LFP_FLT_TCPF) {
		struct lfp_flt_lpm_key key = { .prefixlen = 32 + 8, .gen = gen };

		key.value[0] = flow->l4s[LFP_FLT_FLAGS_BYTE];
		if (!lfp_flt_class(&lfp_flt_tcpflags, &key, &flags))
			return LFP_FLT_UNSURE;
		l4 = lfp_flt_join(gen, 7, used & (LFP_FLT_L4S | LFP_FLT_L4D), l4, 1, flags);
	}
	if (used & LFP_FLT_CTNAT) {
		struct lfp_flt_lpm_key key = { .prefixlen = 32 + LFP_FLT_CTNAT_BITS, .gen = gen };

		key.value[0] = flow->l4d[LFP_FLT_CTNAT_BYTE] << (8 - LFP_FLT_CTNAT_BITS);
		if (!lfp_flt_class(&lfp_flt_ctnat, &key, &nat))
			return LFP_FLT_UNSURE;
		l4 = lfp_flt_join(gen, 8, used & (LFP_FLT_L4S | LFP_FLT_L4D | LFP_FLT_TCPF), l4, 1, nat);
	}
	headers = lfp_flt_join(gen, 4, used & (LFP_FLT_SRC | LFP_FLT_DST), addrs,
			       used & (LFP_FLT_L4S | LFP_FLT_L4D | LFP_FLT_TCPF | LFP_FLT_CTNAT), l4);
	if (used & (LFP_FLT_IIF | LFP_FLT_OIF)) {
		struct lfp_flt_if_key key = { .gen = gen, .ifindex = flow->iif };
		struct lfp_flt_if_classes *in, *out;

		in = bpf_map_lookup_elem(&lfp_flt_ifs, &key);
		key.ifindex = flow->oif;
		out = bpf_map_lookup_elem(&lfp_flt_ifs, &key);
		if (!in || !out)
			return LFP_FLT_UNSURE;     /* an interface newer than the classifier */
		iif = in->in;
		oif = out->out;
	}
	last = lfp_flt_join(gen, 5, used & (LFP_FLT_SRC | LFP_FLT_DST | LFP_FLT_L4S | LFP_FLT_L4D | LFP_FLT_TCPF |
					    LFP_FLT_CTNAT),
			    headers, used & (LFP_FLT_IIF | LFP_FLT_OIF),
			    lfp_flt_join(gen, 3, used & LFP_FLT_IIF, iif, used & LFP_FLT_OIF, oif));

	verdict_key.gen = gen;
	verdict_key.node = 6;
	verdict_key.left = last;
	*cls = last;
	rule = bpf_map_lookup_elem(&lfp_flt_comb, &verdict_key);
	/* A missing pair reads as the empty set, which is only true while the
	 * generation's entries are all there: the old one's are erased only
	 * after lfp_flt_cfg names the next, so a packet that still sees its
	 * generation there now read nothing erased. The same for an epoch: one
	 * whose entries were being written while it was read is not cached. */
	if (!rule || *(volatile const __u32 *)&cfg->gen != gen || *(volatile const __u32 *)&cfg->epoch != epoch)
		return LFP_FLT_UNSURE;
	return *rule;
}

/* The packet's connection, where the kernel tracks connections: next when
 * it is established and the fast path may take it (refreshed, a refresh
 * the conntrack node left owed included: conntrack.h), else the kernel's,
 * for the reason. */
static __always_inline enum lfp_rc lfp_flt_established(struct lfp_pkt *pkt)
{
	switch (lfp_ct_take(pkt)) {
	case LFP_CT_TAKEN:
		return LFP_NEXT;
	case LFP_CT_NONE:
		return lfp_pass(pkt, LFP_CNT_FILTER_CT_NEW);
	case LFP_CT_ERROR:
		return lfp_pass(pkt, LFP_CNT_FILTER_CT_ERROR);
	case LFP_CT_TCP:
		return lfp_pass(pkt, LFP_CNT_FILTER_CT_TCP);
	case LFP_CT_PROTO:
		return lfp_pass(pkt, LFP_CNT_FILTER_CT_PROTO);
	case LFP_CT_INVALID:
		return lfp_pass(pkt, LFP_CNT_FILTER_CT_INVALID);
	default:
		return lfp_pass(pkt, LFP_CNT_FILTER_CT_STATE);
	}
}

/* Netfilter's verdict for the forwarded packet (iptables' FORWARD, raw and
 * mangle PREROUTING, native nft chains; an IPv6 packet: ip6tables'), seen
 * coming in on `iif` and leaving through `oif` (-i / -o): next, drop, or
 * the kernel. */
static __always_inline enum lfp_rc lfp_flt_forward(struct lfp_pkt *pkt, __u32 iif, __u32 oif)
{
	/* (not zeroed first: every word read is written below — words 0-6 for
	 * IPv4, all 13 for IPv6) */
	struct lfp_flt_flow flow;
	struct lfp_flt_cached *cached;
	struct lfp_flt_cfg *cfg;
	__u32 slot, verdict, used, epoch, cls = 0;
	__u32 family6 = pkt->l3_proto == bpf_htons(ETH_P_IPV6);
	__u32 l3_len;
	int owed;

	cfg = bpf_map_lookup_elem(&lfp_flt_cfg, &family6);
	if (!cfg)
		return lfp_pass(pkt, LFP_CNT_FILTER_UNCONFIGURED);
	flow.gen = *(volatile const __u32 *)&cfg->gen;
	if (!flow.gen)
		return lfp_pass(pkt, LFP_CNT_FILTER_UNCONFIGURED);
	/* A connection the conntrack node translated, or left owed its
	 * refresh, under a generation before one that does not classify such
	 * connections (or, owed, one that would not settle it: the kernel
	 * refreshes it then). */
	owed = lfp_ct_owed(pkt);
	if (LFP_NODE_CONNTRACK && (pkt->ct.manip || owed) &&
	    (flow.gen == LFP_FLT_OPEN || !(flow.gen & LFP_FLT_NAT) ||
	     (owed && (flow.gen & (LFP_FLT_CT | LFP_FLT_CT_LATE)) != (LFP_FLT_CT | LFP_FLT_CT_LATE))))
		return lfp_pass(pkt, LFP_CNT_FILTER_CT_STATE);
	if (flow.gen == LFP_FLT_OPEN)
		return LFP_NEXT;
	epoch = *(volatile const __u32 *)&cfg->epoch;
	used = flow.gen & LFP_FLT_USED_MASK;
	*(__u32 *)flow.l4s = 0;
	*(__u32 *)flow.l4d = 0;
	if ((used & (LFP_FLT_L4S | LFP_FLT_L4D | LFP_FLT_TCPF)) && !lfp_flt_l4(pkt, family6, flow.l4s, flow.l4d))
		return lfp_pass(pkt, LFP_CNT_FILTER_L4_SHORT);
	/* unlooked-at flags must not tell one flow's packets apart in the cache */
	if (!(used & LFP_FLT_TCPF))
		flow.l4s[LFP_FLT_FLAGS_BYTE] = 0;
	/* (only a connection the conntrack node took carries NAT) */
	if (used & LFP_FLT_CTNAT)
		flow.l4d[LFP_FLT_CTNAT_BYTE] = (pkt->ct.manip >> LFP_CT_NAT_SHIFT) & ((1u << LFP_FLT_CTNAT_BITS) - 1);
	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
		__builtin_memcpy(flow.v6.saddr, &ip6->saddr, sizeof(flow.v6.saddr));
		__builtin_memcpy(flow.v6.daddr, &ip6->daddr, sizeof(flow.v6.daddr));
		/* (0 in a GRO packet beyond 64 KiB, IPv6 BIG TCP at TC: its
		 * length is the skb's) */
		l3_len = ip6->payload_len ? bpf_ntohs(ip6->payload_len) + sizeof(*ip6)
					  : pkt->len - sizeof(struct ethhdr);
	} else {
		struct iphdr *ip = lfp_ipv4(pkt);

		if (!ip)
			return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
		flow.v4.saddr = ip->saddr;
		flow.v4.daddr = ip->daddr;
		/* (0 in a GRO packet beyond 64 KiB, IPv4 BIG TCP: its length is the skb's) */
		l3_len = ip->tot_len ? bpf_ntohs(ip->tot_len) : pkt->len - sizeof(struct ethhdr);
	}
	flow.iif = iif;
	flow.oif = oif;

	slot = lfp_flt_slot(&flow, family6);
	cached = bpf_map_lookup_elem(&lfp_flt_cache, &slot);
	if (!cached)
		return lfp_pass(pkt, LFP_CNT_FILTER_STALE);     /* cannot happen: slot < LFP_FLT_CACHE_SLOTS */
	if (lfp_flt_same(&cached->flow, &flow, family6) && cached->epoch == epoch) {
		verdict = cached->verdict;
	} else {
		verdict = lfp_flt_classify(cfg, used, family6, &flow, epoch, &cls);
		if (verdict == LFP_FLT_UNSURE)
			return lfp_pass(pkt, LFP_CNT_FILTER_STALE);
		lfp_flt_flush(cached);
		/* the count first: a reader never sees the new flow's key with
		 * the old flow's count */
		cached->tally.packets = 0;
		cached->tally.bytes = 0;
		if (family6) {
			cached->flow = flow;
		} else {
			const __u32 *from = (const __u32 *)&flow;
			__u32 *to = (__u32 *)&cached->flow;

#pragma unroll
			for (int i = 0; i < LFP_FLT_WORDS4; i++)
				to[i] = from[i];
		}
		cached->verdict = verdict;
		cached->cls = cls;
		cached->epoch = epoch;
	}
	/* counted as iptables counts it (skb->len at FORWARD: the IP packet),
	 * once the packet leaves through the fast path (lfp_leave) */
	pkt->tally = &cached->tally;
	pkt->tally_len = l3_len;
	verdict &= 3;
	/* (conntrack never sees it: nothing looked up, nothing refreshed) */
	if (verdict == LFP_FLT_DROP_EARLY)
		return lfp_drop(pkt, LFP_CNT_FILTER_DROPPED);
	if (verdict == LFP_FLT_KERNEL)
		return lfp_pass(pkt, LFP_CNT_FILTER_KERNEL);
	/* Where the kernel tracks connections, the classifier's verdicts are
	 * those for an established connection's packet: conntrack has seen the
	 * packet before FORWARD, and refreshed its entry, whether the rules
	 * accept or drop it — the fast path takes the packet only if its
	 * connection is established and the refresh all conntrack does. (A
	 * packet of another is classified first all the same: one place for
	 * the lookup keeps the verifier's work within bounds, and a drop
	 * before conntrack must come before it.) */
	if (used & LFP_FLT_CT) {
		enum lfp_rc rc = lfp_flt_established(pkt);

		if (rc != LFP_NEXT)
			return rc;
	}
	return verdict == LFP_FLT_ACCEPT ? LFP_NEXT : lfp_drop(pkt, LFP_CNT_FILTER_DROPPED);
}

static __always_inline enum lfp_rc filter_node(struct lfp_pkt *pkt)
{
	if (!pkt->fwd.egress)   /* nothing forwarded: not FORWARD's business */
		return lfp_ct_owed(pkt) ? lfp_pass(pkt, LFP_CNT_FILTER_CT_STATE) : LFP_NEXT;
	/* Routed IPv6 gets here only where nothing of ip6tables but its FORWARD
	 * chains could touch it (LFP_IF_IPV6: graph/interfaces.py). */
	if (pkt->l3_proto != bpf_htons(ETH_P_IP) && pkt->l3_proto != bpf_htons(ETH_P_IPV6))
		return LFP_NEXT;
	/* -i: a bridge port's routed packets come in on the bridge */
	return lfp_flt_forward(pkt, pkt->l3_ifindex, pkt->fwd.egress);
}

#endif
