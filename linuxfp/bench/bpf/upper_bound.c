/* Upper bound: the least an XDP forwarder can do on this path — rewrite both
 * MACs and redirect through a devmap. No parsing beyond the Ethernet header,
 * no lookup, no TTL. */

volatile const __u8 ub_dst_mac[ETH_ALEN];   /* the sink's MAC */
volatile const __u8 ub_src_mac[ETH_ALEN];   /* the DUT egress MAC */

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ub_egress SEC(".maps");

SEC("xdp")
int bench_upper_bound(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	bench_copy_mac(eth->h_dest, ub_dst_mac);
	bench_copy_mac(eth->h_source, ub_src_mac);
	return bpf_redirect_map(&ub_egress, 0, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
