/* Shared by the benchmark's own programs (not by LinuxFP's datapath).
 * The loader pastes this file in front of each program, so every program is
 * one self-contained translation unit for linuxfp.synth.compile_source. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#ifndef ETH_P_IPV6
#define ETH_P_IPV6 0x86DD
#endif

/* Copying from a `volatile const` with memcpy drops the volatile and lets
 * clang fold the (zero) initial value into the code; byte loads keep it. */
static __always_inline void bench_copy_mac(__u8 *dst, const volatile __u8 *src)
{
#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		dst[i] = src[i];
}

static __always_inline __u16 bench_ipv4_csum(const struct iphdr *ip)
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

static __always_inline void bench_count(void *map, __u32 index)
{
	__u64 *value = bpf_map_lookup_elem(map, &index);

	if (value)
		*value += 1;
}
