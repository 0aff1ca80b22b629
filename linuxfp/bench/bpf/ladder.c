/* The breakdown ladder: from the upper bound to a LinuxFP-like router one
 * feature at a time, so the cost of each feature is the difference between
 * two neighbouring rungs measured in the same run. LADDER (1..9) selects how
 * many rungs are climbed:
 *   1 rewrite MACs, devmap redirect (the upper bound)
 *   2 + parse Ethernet/IPv4, TTL check and decrement
 *   3 + bpf_fib_lookup, MACs from its answer (the reference forwarder)
 *   4 + bpf_redirect(ifindex) instead of the devmap
 *   5 + per-interface facts from a hash map (ingress MAC/flags, egress flags)
 *   6 + local-source lookup in a hash map
 *   7 + IPv4 header validation (checksum, lengths, fragments, martians)
 *   8 + a per-CPU counter per forwarded packet
 *   9 + L4 ports in the FIB lookup (multipath hash input)
 *  10 + next-hop neighbour state from a hash map keyed by (ifindex, address) */
#ifndef LADDER
#error "LADDER must be defined"
#endif

volatile const __u8 ladder_dst_mac[ETH_ALEN];  /* rung 1-2: the sink's MAC */
volatile const __u8 ladder_src_mac[ETH_ALEN];  /* rung 1-2: the DUT egress MAC */
volatile const __u32 ladder_egress = 0;        /* rung 1-2: egress ifindex */

struct ladder_iface {
	__u32 flags;
	__u32 mtu;
	__u8 mac[ETH_ALEN];
	__u8 pad[2];
};

#define LADDER_IF_FORWARDING (1u << 0)
#define LADDER_IF_XDP_TX     (1u << 2)

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} ladder_devmap SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct ladder_iface);
} ladder_ifaces SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __be32);
	__type(value, __u8);
} ladder_local_src SEC(".maps");

struct ladder_neigh_key {
	__u32 ifindex;
	__be32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ladder_neigh_key);
	__type(value, __u8);
} ladder_neigh SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} ladder_counters SEC(".maps");

static __always_inline int ladder_mac_equal(const __u8 *a, const __u8 *b)
{
	return ((const __u16 *)a)[0] == ((const __u16 *)b)[0] &&
	       ((const __u16 *)a)[1] == ((const __u16 *)b)[1] &&
	       ((const __u16 *)a)[2] == ((const __u16 *)b)[2];
}

SEC("xdp")
int bench_ladder(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 egress = ladder_egress;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
#if LADDER >= 2
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
#if LADDER >= 5
	__u32 ingress = ctx->ingress_ifindex;
	struct ladder_iface *in = bpf_map_lookup_elem(&ladder_ifaces, &ingress), *out;

	if (!in || !ladder_mac_equal(eth->h_dest, in->mac) || !(in->flags & LADDER_IF_FORWARDING))
		return XDP_PASS;
#endif
#if LADDER >= 7
	__u16 tot_len = bpf_ntohs(ip->tot_len);

	if (ip->version != 4 || ip->ihl != 5 || tot_len < sizeof(*ip) ||
	    data_end - data != sizeof(*eth) + tot_len || bench_ipv4_csum(ip) ||
	    (ip->frag_off & bpf_htons(0x3fff)))
		return XDP_PASS;
	if ((ip->daddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000) || ip->daddr == 0xffffffff ||
	    (ip->saddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000) ||
	    (ip->saddr & bpf_htonl(0xff000000)) == 0 || (ip->daddr & bpf_htonl(0xff000000)) == 0 ||
	    (ip->saddr & bpf_htonl(0xff000000)) == bpf_htonl(0x7f000000) ||
	    (ip->daddr & bpf_htonl(0xff000000)) == bpf_htonl(0x7f000000))
		return XDP_PASS;
#endif
	if (ip->ttl <= 1)
		return XDP_PASS;
#if LADDER >= 6
	if (bpf_map_lookup_elem(&ladder_local_src, &ip->saddr))
		return XDP_PASS;
#endif
#if LADDER >= 3
	struct bpf_fib_lookup fib = {};
	long rc;

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = ctx->ingress_ifindex;
#if LADDER >= 9
	if (ip->protocol == IPPROTO_UDP || ip->protocol == IPPROTO_TCP) {
		__be16 *ports = (void *)(ip + 1);

		if ((void *)(ports + 2) > data_end)
			return XDP_PASS;
		fib.sport = ports[0];
		fib.dport = ports[1];
	}
#endif
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	egress = fib.ifindex;
#if LADDER >= 10
	struct ladder_neigh_key neigh = { .ifindex = fib.ifindex, .addr = fib.ipv4_dst };
	__u8 *neigh_state = bpf_map_lookup_elem(&ladder_neigh, &neigh);

	if (!neigh_state || *neigh_state != 1)
		return XDP_PASS;
#endif
#if LADDER >= 5
	if (egress == ingress)
		return XDP_PASS;
	out = bpf_map_lookup_elem(&ladder_ifaces, &egress);
	if (!out || !(out->flags & LADDER_IF_XDP_TX) || !(out->flags & LADDER_IF_FORWARDING))
		return XDP_PASS;
#endif
#endif
	{
		__u32 check = ip->check;

		check += bpf_htons(0x0100);
		ip->check = (__u16)(check + (check >= 0xffff));
		ip->ttl--;
	}
#endif
#if LADDER >= 3
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
#else
	bench_copy_mac(eth->h_dest, ladder_dst_mac);
	bench_copy_mac(eth->h_source, ladder_src_mac);
#endif
#if LADDER >= 8
	bench_count(&ladder_counters, 7);
#endif
#if LADDER >= 4
	return bpf_redirect(egress, 0);
#else
	return bpf_redirect_map(&ladder_devmap, egress, XDP_PASS);
#endif
}

char _license[] SEC("license") = "GPL";
