/* The bridge node's FDB mirror (lfp_fdb): declared once for the pipelines
 * (bridge.h) and for the kernel-side watch that invalidates its entries
 * (bridge_watch.c). Layout mirrored in linuxfp/graph/nodes/bridge.py. */
#ifndef LFP_BRIDGE_FDB_H
#define LFP_BRIDGE_FDB_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifndef ETH_ALEN
#define ETH_ALEN 6
#endif

struct lfp_fdb_key {
	__u32 bridge;
	__u16 vlan;             /* 0: no VLAN filtering */
	__u8 mac[ETH_ALEN];
};

#define LFP_FDB_STICKY (1u << 0)     /* the kernel never moves it */
#define LFP_FDB_NO_AGEING (1u << 1)  /* static or externally learnt: never ages, needs no refresh */
#define LFP_FDB_HAND_UP (1u << 2)    /* the bridge's own address (its local entry): up to IP on the bridge */

struct lfp_fdb_entry {
	__u32 port;             /* egress ifindex */
	__u32 flags;            /* LFP_FDB_* */
	/* Written by the datapath (the controller writes 0): when one of this
	 * entry's frames last went to the kernel (bridge.h). */
	__u64 refreshed_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, struct lfp_fdb_key);
	__type(value, struct lfp_fdb_entry);
} lfp_fdb SEC(".maps");

#endif
