// SPDX-License-Identifier: GPL-2.0
/* A program the verifier must reject: it reads the packet without a bounds
 * check. tests/test_datapath_objects.py expects the error to quote the C line
 * marked below. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_unchecked(struct xdp_md *ctx)
{
	unsigned char *data = (void *)(long)ctx->data;

	return data[12] == 0x08 ? XDP_PASS : XDP_DROP; /* UNCHECKED-READ */
}

char LICENSE[] SEC("license") = "GPL";
