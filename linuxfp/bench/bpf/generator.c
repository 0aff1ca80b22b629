/* Live-frames traffic generator: run with BPF_PROG_TEST_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES on the source veth; XDP_TX pushes each frame
 * into the peer (the DUT's ingress ring).
 *
 * The kernel recycles the frame pages, and the DUT rewrites MACs, TTL and
 * checksum in place, so every header byte is written again on each run. */

volatile const __u8 gen_dst_mac[ETH_ALEN];
volatile const __u8 gen_src_mac[ETH_ALEN];
volatile const __u32 gen_src_ip;        /* network byte order */
volatile const __u32 gen_dst_first;     /* host order: first destination */
volatile const __u32 gen_dst_stride;    /* host order: between prefixes */
volatile const __u32 gen_dst_count = 1; /* prefixes cycled through */
volatile const __u8 gen_ttl = 64;
volatile const __u16 gen_dst_port = 9;  /* discard */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gen_sent SEC(".maps");

/* The traffic (linuxfp/bench/generator.py, TRAFFIC):
 * 0: steady flows, one per prefix;
 * 1: every frame a new 5-tuple (the source port counts through 64 512
 *    values), for workloads no flow cache helps;
 * 2: GEN_HOSTS destinations in each prefix, one flow each;
 * 3: every frame a new (source, destination): GEN_SOURCES sources from
 *    gen_src_pool times the GEN_HOSTS destinations of each prefix, in a
 *    cycle far longer than any per-destination cache holds. */
#define GEN_HOSTS 200
#define GEN_SOURCES 4096
volatile const __u32 gen_src_pool;      /* host order: first of GEN_SOURCES sources */

/* IPv6 frames instead (bench router6): the source, and the first
 * destination whose second word counts the prefix (2001:db8:100:i::/64)
 * and whose last word the host; the pool counts in the source's last word. */
volatile const __u8 gen_ipv6;
volatile const __u32 gen_src6[4];       /* network byte order */
volatile const __u32 gen_dst6[4];       /* network byte order */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} gen_new_tuples SEC(".maps");

SEC("xdp")
int bench_generator(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)(ip + 1);
	__u32 key = 0, index, count = gen_dst_count, *traffic, mode, host = 0;
	__be32 saddr = gen_src_ip;
	__u16 sport;
	__u64 *sent, round;

	if ((void *)(udp + 1) > data_end)
		return XDP_ABORTED;
	sent = bpf_map_lookup_elem(&gen_sent, &key);
	if (!sent)
		return XDP_ABORTED;
	index = count ? (__u32)(*sent % count) : 0;
	round = count ? *sent / count : 0;
	traffic = bpf_map_lookup_elem(&gen_new_tuples, &key);
	mode = traffic ? *traffic : 0;
	sport = mode == 1 ? (__u16)(1024 + *sent % 64512) : (__u16)(1024 + (index & 0x3ff));
	if (mode == 2 || mode == 3)
		host = (__u32)(round % GEN_HOSTS);
	if (mode == 3)
		saddr = bpf_htonl(gen_src_pool + (__u32)(round / GEN_HOSTS % GEN_SOURCES));
	*sent += 1;

	bench_copy_mac(eth->h_dest, gen_dst_mac);
	bench_copy_mac(eth->h_source, gen_src_mac);
	if (gen_ipv6) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct udphdr *udp6 = (void *)(ip6 + 1);
		__u32 pool = mode == 3 ? (__u32)(round / GEN_HOSTS % GEN_SOURCES) : 0;

		if ((void *)(udp6 + 1) > data_end)
			return XDP_ABORTED;
		eth->h_proto = bpf_htons(ETH_P_IPV6);
		*(__be32 *)ip6 = bpf_htonl(0x60000000);
		ip6->payload_len = bpf_htons((__u16)(data_end - (void *)udp6));
		ip6->nexthdr = IPPROTO_UDP;
		ip6->hop_limit = gen_ttl;
		ip6->saddr.in6_u.u6_addr32[0] = gen_src6[0];
		ip6->saddr.in6_u.u6_addr32[1] = gen_src6[1];
		ip6->saddr.in6_u.u6_addr32[2] = gen_src6[2];
		ip6->saddr.in6_u.u6_addr32[3] = bpf_htonl(bpf_ntohl(gen_src6[3]) + pool);
		ip6->daddr.in6_u.u6_addr32[0] = gen_dst6[0];
		ip6->daddr.in6_u.u6_addr32[1] = bpf_htonl(bpf_ntohl(gen_dst6[1]) + index);
		ip6->daddr.in6_u.u6_addr32[2] = gen_dst6[2];
		ip6->daddr.in6_u.u6_addr32[3] = bpf_htonl(bpf_ntohl(gen_dst6[3]) + host);
		/* (no UDP checksum: forwarding reads none, the sink neither) */
		udp6->source = bpf_htons(sport);
		udp6->dest = bpf_htons(gen_dst_port);
		udp6->len = ip6->payload_len;
		udp6->check = 0;
		return XDP_TX;
	}
	eth->h_proto = bpf_htons(ETH_P_IP);

	ip->version = 4;
	ip->ihl = 5;
	ip->tos = 0;
	ip->tot_len = bpf_htons((__u16)(data_end - (void *)ip));
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = gen_ttl;
	ip->protocol = IPPROTO_UDP;
	ip->saddr = saddr;
	ip->daddr = bpf_htonl(gen_dst_first + index * gen_dst_stride + host);
	ip->check = 0;
	ip->check = bench_ipv4_csum(ip);

	udp->source = bpf_htons(sport);
	udp->dest = bpf_htons(gen_dst_port);
	udp->len = bpf_htons((__u16)(data_end - (void *)udp));
	udp->check = 0;
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
