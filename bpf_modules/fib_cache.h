/* The router's cache of FIB answers: what bpf_fib_lookup() answered for a
 * packet, kept per CPU and served again while the kernel's state that the
 * answer came from is provably unchanged. Part of the router node
 * (router.h); docs/datapath.md "FIB-answer cache" has the proof.
 *
 * An answer is stamped with generations read *before* its lookup, and
 * served only while every one of them still reads the same:
 * - net->ipv4.rt_genid: the kernel's own validity stamp for its cached
 *   routes (rt_cache_flush()), bumped after a change is visible by route
 *   changes that touch an alias a lookup ever reached (FA_S_ACCESSED: an
 *   alias no lookup reached changes no answer), by rule, nexthop, address,
 *   link state, MTU, MAC and forwarding-sysctl changes;
 * - net->ipv4.fib_seq: every change of the first alias of a prefix;
 * - net->nexthop.seq: every nexthop object added, replaced or removed (a
 *   group member's replacement flushes nothing);
 * - the neighbour generation (neigh_watch.h), bumped by the router's watch
 *   as a neighbour changes: the kernel does not version its neighbours;
 * - what selects among answers without being versioned: the multipath
 *   hash policy, its fields and its seed (sysctls).
 * The key holds every input the lookup can depend on: ingress, source,
 * destination, TOS, and — where policy rules exist or the multipath hash
 * reads them — protocol and ports. A lookup's MTU check depends on the
 * length: an entry serves packets up to the longest length the kernel has
 * answered success for.
 * Nothing is cached, and every packet is looked up as before, where the
 * answer can change with no generation: ip_forward_use_pmtu=1 (learned path
 * MTUs expire and appear), fib_multipath_use_neigh=1 (a neighbour entry's
 * mere creation changes the choice), the neighbour watch not attached, or
 * what the controller says (lfp_fib_policy: routes through nexthop objects,
 * whose resilient groups move buckets by timer; ignore_routes_with_linkdown).
 *
 * Per CPU and direct-mapped: a packet writes only its own CPU's slots, and
 * a collision costs one lookup. An entry keeps its stamp as an epoch
 * (lfp_fib_epochs): 56 bytes where the whole stamp made 80.
 *
 * A slot is a line of memory a packet of a new key finds cold: profiled
 * under traffic where every packet is a new (source, destination), the
 * load of its slot was the program's costliest instruction (a cache miss,
 * ~70 ns on an AMD host), paid on top of the lookup and never repaid. So a
 * run of LFP_FIB_STORM_MISSES misses in a row on a CPU (no hit between: a
 * scan, a flood of new flows, more keys than slots, or lookups that never
 * give a cacheable answer; a slot holding the key's answer for shorter
 * packets is no miss) makes that CPU probe only one packet in 32,
 * picked at random; the others are looked up as if nothing could be
 * cached, and the first hit ends the storm. Which packets are served from
 * the cache changes, never what they are served: a bypassed packet gets
 * the lookup's own answer. (A mix whose working set the cache holds rarely
 * starts one: at a 30 % hit rate, independent misses make such a run once
 * in ~10^10 packets.)
 */
#ifndef LFP_FIB_CACHE_H
#define LFP_FIB_CACHE_H

#include "common.h"
#include "neigh_watch.h"

#ifndef LFP_FIB_CACHE_SLOTS
#define LFP_FIB_CACHE_SLOTS 16384       /* a power of two; 56 bytes each, per CPU */
#endif
#define LFP_FIB_STORM_MISSES 64         /* misses in a row that start a storm */
#define LFP_FIB_STORM_SAMPLE_BITS 5     /* one packet in 2^5 probes during one */

/* The fields read, relocated against the running kernel's BTF. */
struct netns_ipv4___lfp_fib {
	struct {
		int counter;
	} rt_genid;
	unsigned int fib_seq;
	_Bool fib_has_custom_rules;
	__u8 sysctl_ip_fwd_use_pmtu;
	__u8 sysctl_fib_multipath_hash_policy;
	__u8 sysctl_fib_multipath_use_neigh;
	__u32 sysctl_fib_multipath_hash_fields;
	struct {
		__u32 user_seed;
		__u32 mp_seed;
	} sysctl_fib_multipath_hash_seed;
} __attribute__((preserve_access_index));

struct netns_nexthop___lfp_fib {
	unsigned int seq;
} __attribute__((preserve_access_index));

struct rt6_statistics___lfp_fib {
	__u32 fib_discarded_routes;
} __attribute__((preserve_access_index));

struct netns_ipv6___lfp_fib {
	struct rt6_statistics___lfp_fib *rt6_stats;
	struct {
		int counter;
	} fib6_sernum;
	_Bool fib6_has_custom_rules;
} __attribute__((preserve_access_index));

struct net___lfp_fib {
	struct netns_ipv4___lfp_fib ipv4;
	struct netns_ipv6___lfp_fib ipv6;
	struct netns_nexthop___lfp_fib nexthop;
} __attribute__((preserve_access_index));

/* One stamp for both families; where they differ, the field says which
 * generation it holds. */
struct lfp_fib_stamp {
	__u64 neigh_gen;
	__u32 rt_genid;         /* IPv6 too: device events (MAC, MTU, link) */
	__u32 fib_seq;          /* IPv4: net->ipv4.fib_seq; IPv6: fib6_sernum */
	__u32 nh_seq;           /* nexthop objects: replaced or removed */
	__u32 selectors;        /* multipath policy, custom rules */
	__u32 mp_seed;
	__u32 family_seq;       /* IPv4: multipath hash fields; IPv6: routes deleted */
};

/* The controller's word on what the datapath cannot see (router.py,
 * fib_policy): each family's cache is off while it holds its bit. */
#define LFP_FIB_POLICY_OFF  (1u << 0)
#define LFP_FIB6_POLICY_OFF (1u << 1)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} lfp_fib_policy SEC(".maps");

struct lfp_fib_key {
	__u32 ifindex;
	__be32 saddr;
	__be32 daddr;
	__be16 sport;           /* ports and protocol only where rules or the */
	__be16 dport;           /* multipath hash can read them; else 0 */
	__u8 tos;
	__u8 proto;
	__u16 pad;
};

#define LFP_FIB_VALID   (1u << 0)
#define LFP_FIB_SRC_OK  (1u << 1)  /* the reverse lookup of the source passed */

struct lfp_fib_entry {
	__u64 epoch;            /* lfp_fib_epochs': the stamp it was looked up under */
	struct lfp_fib_key key;
	__u32 egress;
	__be32 nexthop;
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u16 max_len;          /* longest tot_len answered success (0: GSO only) */
	__u8 flags;
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LFP_FIB_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct lfp_fib_entry);
} lfp_fib_cache SEC(".maps");

struct lfp_fib_epoch;

/* What a lookup needs to be cached: its key, its stamp and its slot (NULL:
 * nothing probed; `storm`: because of a storm of misses), and the CPU's
 * epoch record, which counts the misses. */
struct lfp_fib_probe {
	struct lfp_fib_key key;
	struct lfp_fib_stamp stamp;
	__u64 epoch;
	struct lfp_fib_entry *slot;
	struct lfp_fib_epoch *record;
	int storm;
};

/* Per CPU and family, the stamp last seen and its epoch: an entry holds the
 * epoch, 8 bytes, where it would hold the 32-byte stamp, and the packet
 * compares the stamp it reads with this one hot line. Every packet reads
 * the generations and moves the epoch when they moved, before any entry
 * is trusted, so an entry of an older epoch is never served. A fresh (or
 * zeroed) record starts from the boot clock: no entry stored under an
 * earlier record can match. An epoch means something only against the
 * record that issued it: the cache maps and this one are created and
 * dropped together (the router's state_maps, one layout digest). */
struct lfp_fib_epoch {
	struct lfp_fib_stamp stamp;
	__u64 epoch;
	__u32 misses;           /* in a row, up to LFP_FIB_STORM_MISSES */
	__u32 storm_draw;       /* the storms' random draws (an LCG's state) */
};

#define LFP_FIB_EPOCH_IPV4 0
#define LFP_FIB_EPOCH_IPV6 1

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct lfp_fib_epoch);
} lfp_fib_epochs SEC(".maps");

static __always_inline int lfp_fib_same_stamp(const struct lfp_fib_stamp *a, const struct lfp_fib_stamp *b)
{
	return a->neigh_gen == b->neigh_gen && a->rt_genid == b->rt_genid && a->fib_seq == b->fib_seq &&
	       a->nh_seq == b->nh_seq && a->selectors == b->selectors && a->mp_seed == b->mp_seed &&
	       a->family_seq == b->family_seq;
}

/* This CPU's record of the family, its epoch moved to the stamp just read
 * (never 0); NULL when the map is missing. */
static __always_inline struct lfp_fib_epoch *lfp_fib_epoch_now(__u32 family, const struct lfp_fib_stamp *now)
{
	struct lfp_fib_epoch *e = bpf_map_lookup_elem(&lfp_fib_epochs, &family);

	if (!e)
		return NULL;
	if (!e->epoch || !lfp_fib_same_stamp(&e->stamp, now)) {
		e->stamp = *now;
		e->epoch = e->epoch ? e->epoch + 1 : bpf_ktime_get_boot_ns();
	}
	return e;
}

/* Whether this packet skips the probe: a storm of misses is on and the
 * draw (an LCG's top bits, Numerical Recipes' constants) did not pick it.
 * At random, not every 32nd: a fixed stride aliases with traffic that
 * cycles through its keys in turn (over 10 000 keys, every 32nd packet
 * would probe only keys never stored, for a cycle of them or more). */
static __always_inline int lfp_fib_storm_skips(struct lfp_fib_epoch *e)
{
	if (e->misses < LFP_FIB_STORM_MISSES)
		return 0;
	e->storm_draw = e->storm_draw * 1664525u + 1013904223u;
	return (e->storm_draw >> (32 - LFP_FIB_STORM_SAMPLE_BITS)) != 0;
}

/* Counts a probe's outcome toward (or out of) a storm; a hit writes only
 * where a run of misses was counted. */
static __always_inline void lfp_fib_storm_note(struct lfp_fib_epoch *e, int hit)
{
	if (hit) {
		if (e->misses)
			e->misses = 0;
	} else if (e->misses < LFP_FIB_STORM_MISSES) {
		e->misses++;
	}
}

/* A probe's (either family's) CPU record and the epoch of its `stamp`; 0
 * when no slot may be probed (`*storm`: because of a storm of misses). */
static __always_inline int lfp_fib_probe_epoch(__u32 family, const struct lfp_fib_stamp *stamp, __u64 *epoch,
					       struct lfp_fib_epoch **record, int *storm)
{
	*record = lfp_fib_epoch_now(family, stamp);
	if (!*record)
		return 0;
	*epoch = (*record)->epoch;
	*storm = lfp_fib_storm_skips(*record);
	return !*storm;
}

/* murmur3's finaliser: every bit of the fold reaches the slot's bits */
static __always_inline __u32 lfp_fib_mix(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 lfp_fib_slot(const struct lfp_fib_key *key)
{
	const __u32 *w = (const void *)key;
	__u32 h = w[0] * 0x9e3779b1u;

	/* murmur3's finaliser over a multiplicative fold: every key bit reaches
	 * the slot (the last octet of the addresses included) */
	h = (h ^ w[1]) * 0x85ebca6bu;
	h = (h ^ w[2]) * 0xc2b2ae35u;
	h = (h ^ w[3]) * 0x27d4eb2fu;
	h ^= w[4];
	return lfp_fib_mix(h) & (LFP_FIB_CACHE_SLOTS - 1);
}

/* The namespace, if the family's answers may be cached at all: the watch
 * armed, the controller not against it (`off`: the family's policy bit). */
static __always_inline struct net___lfp_fib *lfp_fib_cacheable(struct lfp_pkt *pkt, __u32 off,
								struct lfp_neigh_watch **watch)
{
	__u32 key = 0, *said = bpf_map_lookup_elem(&lfp_fib_policy, &key);

	*watch = lfp_neigh_watch_of();
	if (!*watch || !(*watch)->armed || !said || (*said & off))
		return NULL;
	return lfp_kern_net(pkt);
}

/* Reads the generations and builds the key; 0 when nothing may be cached
 * (then the lookup is done as if there were no cache). */
static __always_inline int lfp_fib_probe_init(struct lfp_pkt *pkt, const struct bpf_fib_lookup *fib,
					      struct lfp_fib_probe *probe)
{
	struct lfp_neigh_watch *watch;
	struct net___lfp_fib *net = lfp_fib_cacheable(pkt, LFP_FIB_POLICY_OFF, &watch);
	__u32 policy = 0, custom_rules = 0, slot;

	probe->storm = 0;
	if (!net)
		return 0;
	if (net->ipv4.sysctl_ip_fwd_use_pmtu)
		return 0;
	probe->stamp.neigh_gen = watch->generation;
	probe->stamp.rt_genid = net->ipv4.rt_genid.counter;
	probe->stamp.fib_seq = net->ipv4.fib_seq;
	probe->stamp.nh_seq = bpf_core_field_exists(net->nexthop.seq) ? net->nexthop.seq : 0;
	if (bpf_core_field_exists(net->ipv4.fib_has_custom_rules))
		custom_rules = net->ipv4.fib_has_custom_rules;
	probe->stamp.mp_seed = 0;
	probe->stamp.family_seq = 0;
	if (bpf_core_field_exists(net->ipv4.sysctl_fib_multipath_hash_policy)) {
		/* with use_neigh, a next hop's neighbour entry merely being
		 * created (NUD_NONE) changes the choice: no generation covers it */
		if (net->ipv4.sysctl_fib_multipath_use_neigh)
			return 0;
		policy = net->ipv4.sysctl_fib_multipath_hash_policy;
		probe->stamp.family_seq = net->ipv4.sysctl_fib_multipath_hash_fields;
	}
	if (bpf_core_field_exists(net->ipv4.sysctl_fib_multipath_hash_seed))
		probe->stamp.mp_seed = net->ipv4.sysctl_fib_multipath_hash_seed.mp_seed;
	probe->stamp.selectors = policy | custom_rules << 16;
	if (!lfp_fib_probe_epoch(LFP_FIB_EPOCH_IPV4, &probe->stamp, &probe->epoch, &probe->record, &probe->storm))
		return 0;

	probe->key.ifindex = fib->ifindex;
	probe->key.saddr = fib->ipv4_src;
	probe->key.daddr = fib->ipv4_dst;
	probe->key.tos = fib->tos;
	probe->key.pad = 0;
	if (custom_rules || policy) {
		probe->key.proto = fib->l4_protocol;
		probe->key.sport = fib->sport;
		probe->key.dport = fib->dport;
	} else {
		probe->key.proto = 0;
		probe->key.sport = 0;
		probe->key.dport = 0;
	}
	slot = lfp_fib_slot(&probe->key);
	probe->slot = bpf_map_lookup_elem(&lfp_fib_cache, &slot);
	return probe->slot != NULL;
}

static __always_inline int lfp_fib_same_key(const struct lfp_fib_key *a, const struct lfp_fib_key *b)
{
	const __u32 *x = (const void *)a, *y = (const void *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

/* The cached answer for a packet whose lookup would carry `tot_len`, or
 * NULL. The storm counts whether the slot held the key's answer at all: a
 * packet too long for it (IPv6 past 1280 bytes, always) found its flow
 * there, and the probe pays for that flow's shorter packets. */
static __always_inline struct lfp_fib_entry *lfp_fib_cached(const struct lfp_fib_probe *probe, __u16 tot_len)
{
	struct lfp_fib_entry *e = probe->slot;
	int held = (e->flags & LFP_FIB_VALID) && lfp_fib_same_key(&e->key, &probe->key) && e->epoch == probe->epoch;

	lfp_fib_storm_note(probe->record, held);
	return held && tot_len <= e->max_len ? e : NULL;
}

/* Keeps the successful answer of a lookup made with `tot_len`. */
static __always_inline void lfp_fib_remember(struct lfp_fib_probe *probe, const struct bpf_fib_lookup *fib,
					     __u16 tot_len)
{
	struct lfp_fib_entry *e = probe->slot;

	/* the same answer proven again for a longer packet (any other answer
	 * replaces the entry) */
	if ((e->flags & LFP_FIB_VALID) && lfp_fib_same_key(&e->key, &probe->key) &&
	    e->epoch == probe->epoch && e->egress == fib->ifindex &&
	    e->nexthop == fib->ipv4_dst && lfp_mac_equal(e->dmac, fib->dmac) && lfp_mac_equal(e->smac, fib->smac)) {
		if (tot_len > e->max_len)
			e->max_len = tot_len;
		return;
	}
	e->key = probe->key;
	e->epoch = probe->epoch;
	e->egress = fib->ifindex;
	e->nexthop = fib->ipv4_dst;
	__builtin_memcpy(e->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(e->smac, fib->smac, ETH_ALEN);
	e->max_len = tot_len;
	e->flags = LFP_FIB_VALID;
}

/* --- IPv6 ------------------------------------------------------------------
 * The same discipline, with IPv6's generations: net->ipv6.fib6_sernum, which
 * every route added or replaced moves (fib6_add()), and rule changes and
 * nexthop deaths (fib6_flush_trees(), fib6_update_sernum()); the count of
 * routes deleted (rt6_stats->fib_discarded_routes), because a deletion moves
 * no sernum (a socket's cached route learns of it from its own unlinked
 * node); net->ipv4.rt_genid, which device events move (MAC, MTU, carrier,
 * up and down), and which IPv6 does not version; the neighbour generation.
 * Only the hash policy 0 reaches here (router.h), whose inputs are all in
 * the key: addresses, flow label, protocol; and the seed.
 * Length: IPv6 keeps learned path MTUs as route exceptions whose MTU can be
 * lowered in place without a generation, but never below 1280 (the kernel's
 * minimum, and ip6_forward() never refuses a shorter packet), so an entry
 * serves packets up to 1280 bytes at most, longer ones are looked up.
 * What the datapath cannot see (routes that expire, nexthop objects,
 * ignore_routes_with_linkdown): the controller's LFP_FIB6_POLICY_OFF. */
#ifndef LFP_FIB6_CACHE_SLOTS
#define LFP_FIB6_CACHE_SLOTS 4096       /* a power of two; 96 bytes each, per CPU */
#endif
#define LFP_FIB6_CACHE_MAX_LEN 1280     /* IPV6_MIN_MTU */

struct lfp_fib6_key {
	__u32 ifindex;
	__be32 saddr[4];
	__be32 daddr[4];
	__be32 flowinfo;        /* traffic class and flow label */
	__be16 sport;           /* ports only where rules can read them; else 0 */
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct lfp_fib6_entry {
	__u64 epoch;
	struct lfp_fib6_key key;
	__be32 nexthop[4];
	__u32 egress;
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u16 max_len;          /* longest length answered success, at most 1280 */
	__u8 flags;
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LFP_FIB6_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct lfp_fib6_entry);
} lfp_fib6_cache SEC(".maps");

struct lfp_fib6_probe {
	struct lfp_fib6_key key;
	struct lfp_fib_stamp stamp;
	__u64 epoch;
	struct lfp_fib6_entry *slot;
	struct lfp_fib_epoch *record;
	int storm;
};

#define LFP_FIB6_KEY_WORDS (sizeof(struct lfp_fib6_key) / 4)

static __always_inline __u32 lfp_fib6_slot(const struct lfp_fib6_key *key)
{
	const __u32 *w = (const void *)key;
	__u32 h = w[0] * 0x9e3779b1u;

#pragma unroll
	for (int i = 1; i < LFP_FIB6_KEY_WORDS; i++)
		h = (h ^ w[i]) * (i & 1 ? 0x85ebca6bu : 0xc2b2ae35u);
	return lfp_fib_mix(h) & (LFP_FIB6_CACHE_SLOTS - 1);
}

/* As lfp_fib_probe_init(), for an IPv6 lookup. */
static __always_inline int lfp_fib6_probe_init(struct lfp_pkt *pkt, const struct bpf_fib_lookup *fib,
					       struct lfp_fib6_probe *probe)
{
	struct lfp_neigh_watch *watch;
	struct net___lfp_fib *net = lfp_fib_cacheable(pkt, LFP_FIB6_POLICY_OFF, &watch);
	struct rt6_statistics___lfp_fib *stats;
	__u32 custom_rules = 0, slot;

	probe->storm = 0;
	if (!net)
		return 0;
	if (!bpf_core_field_exists(net->ipv6.fib6_sernum) || !bpf_core_field_exists(net->ipv6.rt6_stats))
		return 0;
	stats = net->ipv6.rt6_stats;
	if (!stats)
		return 0;
	probe->stamp.neigh_gen = watch->generation;
	probe->stamp.rt_genid = net->ipv4.rt_genid.counter;
	probe->stamp.fib_seq = net->ipv6.fib6_sernum.counter;
	probe->stamp.family_seq = stats->fib_discarded_routes;
	probe->stamp.nh_seq = bpf_core_field_exists(net->nexthop.seq) ? net->nexthop.seq : 0;
	if (bpf_core_field_exists(net->ipv6.fib6_has_custom_rules))
		custom_rules = net->ipv6.fib6_has_custom_rules;
	probe->stamp.selectors = custom_rules << 16;
	probe->stamp.mp_seed = 0;
	if (bpf_core_field_exists(net->ipv4.sysctl_fib_multipath_hash_seed))
		probe->stamp.mp_seed = net->ipv4.sysctl_fib_multipath_hash_seed.mp_seed;
	if (!lfp_fib_probe_epoch(LFP_FIB_EPOCH_IPV6, &probe->stamp, &probe->epoch, &probe->record, &probe->storm))
		return 0;

	probe->key.ifindex = fib->ifindex;
	__builtin_memcpy(probe->key.saddr, fib->ipv6_src, sizeof(probe->key.saddr));
	__builtin_memcpy(probe->key.daddr, fib->ipv6_dst, sizeof(probe->key.daddr));
	probe->key.flowinfo = fib->flowinfo;
	probe->key.proto = fib->l4_protocol;
	probe->key.pad[0] = probe->key.pad[1] = probe->key.pad[2] = 0;
	probe->key.sport = custom_rules ? fib->sport : 0;
	probe->key.dport = custom_rules ? fib->dport : 0;
	slot = lfp_fib6_slot(&probe->key);
	probe->slot = bpf_map_lookup_elem(&lfp_fib6_cache, &slot);
	return probe->slot != NULL;
}

static __always_inline int lfp_fib6_same_key(const struct lfp_fib6_key *a, const struct lfp_fib6_key *b)
{
	const __u64 *x = (const void *)a, *y = (const void *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4] && x[5] == y[5];
}

static __always_inline struct lfp_fib6_entry *lfp_fib6_cached(const struct lfp_fib6_probe *probe, __u16 tot_len)
{
	struct lfp_fib6_entry *e = probe->slot;
	int held = (e->flags & LFP_FIB_VALID) && lfp_fib6_same_key(&e->key, &probe->key) && e->epoch == probe->epoch;

	lfp_fib_storm_note(probe->record, held);
	return held && tot_len <= e->max_len ? e : NULL;
}

static __always_inline void lfp_fib6_remember(struct lfp_fib6_probe *probe, const struct bpf_fib_lookup *fib,
					      __u16 tot_len)
{
	struct lfp_fib6_entry *e = probe->slot;

	if (tot_len > LFP_FIB6_CACHE_MAX_LEN)
		tot_len = LFP_FIB6_CACHE_MAX_LEN;
	if ((e->flags & LFP_FIB_VALID) && lfp_fib6_same_key(&e->key, &probe->key) &&
	    e->epoch == probe->epoch && e->egress == fib->ifindex &&
	    e->nexthop[0] == fib->ipv6_dst[0] && e->nexthop[1] == fib->ipv6_dst[1] &&
	    e->nexthop[2] == fib->ipv6_dst[2] && e->nexthop[3] == fib->ipv6_dst[3] && lfp_mac_equal(e->dmac, fib->dmac) &&
	    lfp_mac_equal(e->smac, fib->smac)) {
		if (tot_len > e->max_len)
			e->max_len = tot_len;
		return;
	}
	e->key = probe->key;
	e->epoch = probe->epoch;
	e->egress = fib->ifindex;
	__builtin_memcpy(e->nexthop, fib->ipv6_dst, sizeof(e->nexthop));
	__builtin_memcpy(e->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(e->smac, fib->smac, ETH_ALEN);
	e->max_len = tot_len;
	e->flags = LFP_FIB_VALID;
}

#endif
