/* Sink: verifies and counts every benchmark frame, then drops it.
 * Anything that is not benchmark traffic (ARP, ...) goes to the kernel. */

volatile const __u8 sink_own_mac[ETH_ALEN];   /* expected destination */
volatile const __u8 sink_peer_mac[ETH_ALEN];  /* the DUT's egress: expected source */
volatile const __u8 sink_sent_ttl = 64;
volatile const __u16 sink_dst_port = 9;
volatile const __u16 sink_probe_port = 7;  /* response-time probes */
volatile const __u16 sink_echo_port = 7007; /* latency: reflected to the sender */

enum sink_counter {
	SINK_FRAMES = 0,     /* benchmark frames seen */
	SINK_GOOD,           /* MACs and checksum right, TTL decremented once */
	SINK_TTL_UNCHANGED,  /* MACs and checksum right, TTL untouched */
	SINK_BAD_MAC,
	SINK_BAD_CSUM,
	SINK_BAD_TTL,
	SINK_OTHER,          /* not benchmark traffic: passed */
	SINK_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SINK_MAX);
	__type(key, __u32);
	__type(value, __u64);
} sink_counters SEC(".maps");

/* Probes (UDP to sink_probe_port) are recorded per destination address and
 * destination MAC, so "traffic obeys the new configuration" can be timed:
 * a route appearing (first arrival), disappearing (last arrival), or a
 * neighbour changing (first arrival with the new MAC). */
struct probe_key {
	__be32 daddr;
	__u8 dmac[ETH_ALEN];
	__u16 pad;
};

struct probe_seen {
	__u64 first_ns;   /* CLOCK_MONOTONIC, like time.monotonic_ns() */
	__u64 last_ns;
	__u64 count;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct probe_key);
	__type(value, struct probe_seen);
} sink_probes SEC(".maps");

static __always_inline void record_probe(const struct ethhdr *eth, const struct iphdr *ip)
{
	struct probe_key key = {};
	struct probe_seen fresh = {}, *seen;
	__u64 now = bpf_ktime_get_ns();

	key.daddr = ip->daddr;
	__builtin_memcpy(key.dmac, eth->h_dest, ETH_ALEN);
	seen = bpf_map_lookup_elem(&sink_probes, &key);
	if (seen) {
		seen->last_ns = now;
		__sync_fetch_and_add(&seen->count, 1);
		return;
	}
	fresh.first_ns = now;
	fresh.last_ns = now;
	fresh.count = 1;
	bpf_map_update_elem(&sink_probes, &key, &fresh, BPF_NOEXIST);
}

/* The latency scenario's server: the request goes back out the way it
 * came with addresses and ports swapped (the IP checksum stays valid), so the
 * round trip crosses the DUT twice and the server adds almost nothing.
 * A redirect to the receiving device rather than XDP_TX: veth only wakes
 * the peer's NAPI after XDP_TX when the peer runs XDP itself, and under
 * Linux alone the DUT's egress has only GRO. */
static __always_inline int reflect(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *ip,
				   struct udphdr *udp)
{
	__u8 mac[ETH_ALEN];
	__be32 addr;
	__be16 port;

	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	/* The sender's checksum may be a partial one left for offload (it was
	 * never computed on the veth path); IPv4 UDP may carry none. */
	udp->check = 0;
	return bpf_redirect(ctx->ingress_ifindex, 0);
}

static __always_inline int mac_is(const __u8 *mac, const volatile __u8 *want)
{
	int same = 1;

#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		same &= mac[i] == want[i];
	return same;
}

/* Benchmark frames over IPv6 (bench router6): UDP to sink_dst_port. */
static __always_inline int count_ipv6(struct xdp_md *ctx, struct ethhdr *eth)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip6 + 1);

	if ((void *)(udp + 1) > data_end || ip6->nexthdr != IPPROTO_UDP || udp->dest != bpf_htons(sink_dst_port)) {
		bench_count(&sink_counters, SINK_OTHER);
		return XDP_PASS;
	}
	bench_count(&sink_counters, SINK_FRAMES);
	if (!mac_is(eth->h_dest, sink_own_mac) || !mac_is(eth->h_source, sink_peer_mac))
		bench_count(&sink_counters, SINK_BAD_MAC);
	else if (ip6->hop_limit == (__u8)(sink_sent_ttl - 1))
		bench_count(&sink_counters, SINK_GOOD);
	else if (ip6->hop_limit == sink_sent_ttl)
		bench_count(&sink_counters, SINK_TTL_UNCHANGED);
	else
		bench_count(&sink_counters, SINK_BAD_TTL);
	return XDP_DROP;
}

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)(ip + 1);

	if ((void *)(eth + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IPV6))
		return count_ipv6(ctx, eth);
	if ((void *)(udp + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP) &&
	    ip->ihl == 5 && ip->protocol == IPPROTO_UDP && udp->dest == bpf_htons(sink_probe_port)) {
		record_probe(eth, ip);
		return XDP_DROP;
	}
	if ((void *)(udp + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP) &&
	    ip->ihl == 5 && ip->protocol == IPPROTO_UDP && udp->dest == bpf_htons(sink_echo_port))
		return reflect(ctx, eth, ip, udp);
	if ((void *)(udp + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->ihl != 5 || ip->protocol != IPPROTO_UDP || udp->dest != bpf_htons(sink_dst_port)) {
		bench_count(&sink_counters, SINK_OTHER);
		return XDP_PASS;
	}
	bench_count(&sink_counters, SINK_FRAMES);
	if (!mac_is(eth->h_dest, sink_own_mac) || !mac_is(eth->h_source, sink_peer_mac))
		bench_count(&sink_counters, SINK_BAD_MAC);
	else if (bench_ipv4_csum(ip))
		bench_count(&sink_counters, SINK_BAD_CSUM);
	else if (ip->ttl == (__u8)(sink_sent_ttl - 1))
		bench_count(&sink_counters, SINK_GOOD);
	else if (ip->ttl == sink_sent_ttl)
		bench_count(&sink_counters, SINK_TTL_UNCHANGED);
	else
		bench_count(&sink_counters, SINK_BAD_TTL);
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
