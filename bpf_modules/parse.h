/* Bounds-checked header access shared by node modules. */
#ifndef LFP_PARSE_H
#define LFP_PARSE_H

#include "common.h"
#include <linux/ipv6.h>

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#ifndef ETH_P_IPV6
#define ETH_P_IPV6 0x86DD
#endif
#define LFP_NEXTHDR_ICMPV6 58

static __always_inline struct ethhdr *lfp_eth(struct lfp_pkt *pkt)
{
	struct ethhdr *eth = pkt->data;

	if ((void *)(eth + 1) > pkt->data_end)
		return NULL;
	return eth;
}

/* Fills l3_proto (the network header follows the Ethernet header).
 * VLAN-tagged frames are reported as such rather than parsed: the router
 * only acts on untagged frames of its own interface. */
static __always_inline enum lfp_rc lfp_parse_l2(struct lfp_pkt *pkt)
{
	struct ethhdr *eth = lfp_eth(pkt);

	if (!eth)
		return lfp_pass(pkt, LFP_CNT_PARSE_SHORT);
	if (eth->h_proto == bpf_htons(ETH_P_8021Q) || eth->h_proto == bpf_htons(ETH_P_8021AD) ||
	    lfp_has_offloaded_vlan(pkt))
		return lfp_pass(pkt, LFP_CNT_VLAN_TAGGED);
	pkt->l3_proto = eth->h_proto;
	return LFP_NEXT;
}

static __always_inline struct iphdr *lfp_ipv4(struct lfp_pkt *pkt)
{
	struct iphdr *ip = pkt->data + sizeof(struct ethhdr);

	if ((void *)(ip + 1) > pkt->data_end)
		return NULL;
	return ip;
}

static __always_inline struct ipv6hdr *lfp_ipv6(struct lfp_pkt *pkt)
{
	struct ipv6hdr *ip6 = pkt->data + sizeof(struct ethhdr);

	if ((void *)(ip6 + 1) > pkt->data_end)
		return NULL;
	return ip6;
}

/* RFC 1071 sum over a 20-byte header; 0 when the stored checksum is right. */
static __always_inline __u16 lfp_ipv4_csum_check(const struct iphdr *ip)
{
	const __u16 *word = (const __u16 *)ip;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
		sum += word[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

#endif
