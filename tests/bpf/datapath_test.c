// SPDX-License-Identifier: GPL-2.0
/* Programs and maps exercised by tests/test_datapath_*.py. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

/* Constants the tests rewrite with BpfObject.set_rodata(). */
volatile const __u32 verdict = XDP_PASS;
volatile const __u8 mark = 0xab;
volatile const __u64 wide = 0;
volatile const unsigned char mac[6] = {};

/* Per-CPU counters: [0] runs of xdp_verdict, [1] runs of xdp_mark, [2] tc runs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* ingress_ifindex -> frames seen by xdp_mark */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} by_ifindex SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} percpu_table SEC(".maps");

/* An LPM trie: a map type without batch ops, to exercise the keys() fallback. */
struct ipv4_prefix {
	__u32 prefixlen;
	__u8 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ipv4_prefix);
	__type(value, __u32);
} prefixes SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *counter = bpf_map_lookup_elem(&counters, &slot);

	if (counter)
		*counter += 1;
}

SEC("xdp")
int xdp_verdict(struct xdp_md *ctx)
{
	count(0);
	return verdict;
}

/* Writes `mark` into the first byte, copies `mac` to bytes 6..11 (source MAC),
 * counts the frame per ingress ifindex, and returns `verdict`. */
SEC("xdp")
int xdp_mark(struct xdp_md *ctx)
{
	unsigned char *data = (void *)(long)ctx->data;
	unsigned char *data_end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex;
	__u64 one = 1, *seen;

	count(1);
	if (data + 12 > data_end)
		return XDP_ABORTED;
	data[0] = mark;
	for (int i = 0; i < 6; i++)
		data[6 + i] = mac[i];
	seen = bpf_map_lookup_elem(&by_ifindex, &ifindex);
	if (seen)
		__sync_fetch_and_add(seen, 1);
	else
		bpf_map_update_elem(&by_ifindex, &ifindex, &one, BPF_NOEXIST);
	return verdict;
}

SEC("tc")
int tc_count(struct __sk_buff *skb)
{
	count(2);
	return TC_ACT_OK;
}

SEC("tc")
int tc_other(struct __sk_buff *skb)
{
	count(3);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
