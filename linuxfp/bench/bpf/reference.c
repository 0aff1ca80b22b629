/* Reference forwarder: the plain bpf_fib_lookup XDP router a user would write
 * by hand — parse Ethernet/IPv4 (or IPv6), ask the kernel FIB, decrement TTL, rewrite
 * MACs, redirect through a devmap; everything else to the kernel. */

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} ref_egress SEC(".maps");

static __always_inline void ref_decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

/* The same for IPv6: hop limit instead of TTL, no checksum. */
static __always_inline int ref_forward6(struct xdp_md *ctx, struct ethhdr *eth)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	struct bpf_fib_lookup fib = {};
	long rc;

	if ((void *)(ip6 + 1) > data_end || ip6->hop_limit <= 1)
		return XDP_PASS;
	fib.family = AF_INET6;
	fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, sizeof(fib.ipv6_src));
	__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, sizeof(fib.ipv6_dst));
	fib.ifindex = ctx->ingress_ifindex;

	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;

	ip6->hop_limit--;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect_map(&ref_egress, fib.ifindex, XDP_PASS);
}

SEC("xdp")
int bench_reference(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	long rc;

	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return ref_forward6(ctx, eth);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (ip->ttl <= 1)
		return XDP_PASS;

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = ctx->ingress_ifindex;

	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;

	ref_decrease_ttl(ip);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect_map(&ref_egress, fib.ifindex, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
