/* Someone else's tcx program that drops everything (a firewall, say),
 * attached in tests at an interface's ingress or egress. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int foreign_drop(struct __sk_buff *skb)
{
	return TC_ACT_SHOT;
}

/* The same, named as LinuxFP names its programs: it is still not ours. */
SEC("tc")
int lfp_impostor(struct __sk_buff *skb)
{
	return TC_ACT_SHOT;
}

char _license[] SEC("license") = "GPL";
