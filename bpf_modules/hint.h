/* 256-bit prefilters in front of hash maps: a clear bit proves a lookup would
 * find nothing of interest, sparing it for almost every packet. The
 * controller widens a hint (old | new) before it writes the entries it stands
 * for and narrows it once they are written (linuxfp/graph/tables.py, whose
 * hint_bit() is this fold in Python). */
#ifndef LFP_HINT_H
#define LFP_HINT_H

#include <linux/types.h>

struct lfp_hint {
	__u64 bits[4];
};

static __always_inline __u32 lfp_hint_bit(__u32 v)
{
	v ^= v >> 16;
	v ^= v >> 8;
	return v & 0xff;
}

/* Whether `v` may have an entry; no hint at all means unsure, so look. */
static __always_inline int lfp_hint_set(const struct lfp_hint *hint, __u32 v)
{
	__u32 bit = lfp_hint_bit(v);

	return !hint || (hint->bits[(bit >> 6) & 3] & (1ULL << (bit & 63)));
}

/* A one-entry array holding a hint: its lookup is inlined. */
#define LFP_HINT_MAP(name)                              \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_ARRAY);       \
		__uint(max_entries, 1);                 \
		__type(key, __u32);                     \
		__type(value, struct lfp_hint);         \
	} name SEC(".maps")

static __always_inline const struct lfp_hint *lfp_hint_of(void *map)
{
	__u32 key = 0;

	return bpf_map_lookup_elem(map, &key);
}

#endif
