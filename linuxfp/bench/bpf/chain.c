/* Chained no-op functions (paper Fig. 10): CHAIN_N stages, each doing the
 * same minimal work, then the upper bound's MAC rewrite + devmap redirect.
 * CHAIN_TAIL selects how stages are chained: 0 = inline calls in one
 * program, 1 = one program per stage joined by bpf_tail_call.
 *
 * A stage re-checks the Ethernet header and compares its EtherType with a
 * load-time constant, so it cannot be compiled away; inline stages may still
 * be merged by the compiler, which is exactly what inlining buys. */
#ifndef CHAIN_N
#error "CHAIN_N must be defined"
#endif
#ifndef CHAIN_TAIL
#define CHAIN_TAIL 0
#endif

volatile const __u8 chain_dst_mac[ETH_ALEN];
volatile const __u8 chain_src_mac[ETH_ALEN];
volatile const __u16 chain_never_proto = 0xffff;

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} chain_egress SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u32);
} chain_stages SEC(".maps");

/* 0: continue; anything else: the verdict to return now. */
static __always_inline int chain_noop(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == chain_never_proto)
		return XDP_DROP;
	return 0;
}

static __always_inline int chain_forward(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	bench_copy_mac(eth->h_dest, chain_dst_mac);
	bench_copy_mac(eth->h_source, chain_src_mac);
	return bpf_redirect_map(&chain_egress, 0, XDP_PASS);
}

#if CHAIN_TAIL == 0

SEC("xdp")
int chain_entry(struct xdp_md *ctx)
{
	int rc;

#pragma unroll
	for (int i = 0; i < CHAIN_N; i++) {
		rc = chain_noop(ctx);
		if (rc)
			return rc;
	}
	return chain_forward(ctx);
}

#else

/* Slot i of chain_stages holds stage i; slot CHAIN_N holds the forwarder.
 * The loader fills the slots; the entry program is stage 0. */
#define CHAIN_STAGE(i)                                          \
	SEC("xdp")                                              \
	int chain_stage_##i(struct xdp_md *ctx)                 \
	{                                                       \
		int rc = chain_noop(ctx);                       \
		if (rc)                                         \
			return rc;                              \
		bpf_tail_call(ctx, &chain_stages, (i) + 1);     \
		return XDP_ABORTED;                             \
	}

CHAIN_STAGE(0)
CHAIN_STAGE(1)
CHAIN_STAGE(2)
CHAIN_STAGE(3)
CHAIN_STAGE(4)
CHAIN_STAGE(5)
CHAIN_STAGE(6)
CHAIN_STAGE(7)
CHAIN_STAGE(8)
CHAIN_STAGE(9)
CHAIN_STAGE(10)
CHAIN_STAGE(11)

SEC("xdp")
int chain_last(struct xdp_md *ctx)
{
	return chain_forward(ctx);
}

#endif

char _license[] SEC("license") = "GPL";
