/* Pushes VLAN 5 onto every frame leaving a device, as tx-vlan offload does:
 * bpf_skb_vlan_push() puts the tag in skb metadata, not in the frame. Tests use
 * it because this kernel has no 8021q devices and no act_vlan. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

SEC("tc")
int push_vlan5(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(ETH_P_IP))
		bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), 5);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
