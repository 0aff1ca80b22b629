/* A connection's NAT written into its packet (struct lfp_ct), byte for
 * byte as Linux writes it: nf_nat_ipv4_manip_pkt() on UDP, destination
 * first (PREROUTING), source after (POSTROUTING).
 *
 * The conntrack node (ct_prerouting.h) writes the new destination address
 * and port at PREROUTING, and the header checksum with them (the router
 * checks it), so routing and FORWARD read the packet as Linux has it there;
 * it leaves the UDP checksum, whose update at TC also changes the skb's
 * checksum state: transmit finishes both manipulations after its last
 * decision (lfp_nat_write()), and a packet handed to the kernel before that
 * gets its destination and header checksum back, byte for byte
 * (lfp_nat_undo(), from lfp_leave()). The header checksum changes in
 * Linux's order (destination, TTL, source); the UDP checksum with each
 * manipulation in Linux's order, each ending as __udp_manip_pkt() ends (0
 * becomes 0xffff), and only where Linux changes it: a checksum that is 0
 * (none) and not partial stays. */
#ifndef LFP_NAT_REWRITE_H
#define LFP_NAT_REWRITE_H

#include <stddef.h>
#include <linux/udp.h>

#include "common.h"
#include "parse.h"

#define LFP_NAT_IP_CHECK (sizeof(struct ethhdr) + offsetof(struct iphdr, check))
#define LFP_NAT_UDP_CHECK (sizeof(struct ethhdr) + sizeof(struct iphdr) + offsetof(struct udphdr, check))

/* The UDP header after a 20-byte IPv4 header (the only kind conntrack.h
 * takes), in the linear part. */
static __always_inline struct udphdr *lfp_nat_udp(struct lfp_pkt *pkt)
{
	struct udphdr *udp = pkt->data + sizeof(struct ethhdr) + sizeof(struct iphdr);

	if ((void *)(udp + 1) > pkt->data_end)
		return NULL;
	return udp;
}

/* One manipulation: the source (`src`) or destination address and port
 * become `addr`:`port`, from `addr_was`:`port_was` (`header`: the IPv4
 * header's part too, not written yet). 0, or < 0 when the packet could not
 * be written (Linux drops it then). */
static __always_inline int lfp_nat_manip(struct lfp_pkt *pkt, int src, __be32 addr_was, __be32 addr,
					 __be16 port_was, __be16 port, int header)
{
	struct udphdr *udp = lfp_nat_udp(pkt);
	struct iphdr *ip;

	if (!udp)
		return -1;
	if (udp->check || lfp_l4_csum_partial(pkt)) {
		if (lfp_l4_csum_replace(pkt, LFP_NAT_UDP_CHECK, addr_was, addr, 1, sizeof(addr)) ||
		    lfp_l4_csum_replace(pkt, LFP_NAT_UDP_CHECK, port_was, port, 0, sizeof(port)))
			return -1;
		udp = lfp_nat_udp(pkt);
		if (!udp)
			return -1;
		if (!udp->check)
			udp->check = 0xffff;    /* CSUM_MANGLED_0 */
	}
	if (src)
		udp->source = port;
	else
		udp->dest = port;
	if (!header)
		return 0;
	if (lfp_l3_csum_replace(pkt, LFP_NAT_IP_CHECK, addr_was, addr))
		return -1;
	ip = lfp_ipv4(pkt);
	if (!ip)
		return -1;
	if (src)
		ip->saddr = addr;
	else
		ip->daddr = addr;
	return 0;
}

/* Both manipulations, once every decision is taken. 0, or < 0 when the
 * packet could not be written. */
static __always_inline int lfp_nat_write(struct lfp_pkt *pkt)
{
	__u8 manip = pkt->ct.manip;
	struct udphdr *udp;
	struct iphdr *ip;
	__be32 addr;
	__be16 port;

	pkt->ct.manip = 0;     /* written: nothing to undo */
	if (manip & LFP_NAT_DST) {
		ip = lfp_ipv4(pkt);
		udp = lfp_nat_udp(pkt);
		if (!ip || !udp)
			return -1;
		addr = ip->daddr;
		port = udp->dest;
		if (lfp_nat_manip(pkt, 0, pkt->ct.other_daddr, addr, pkt->ct.other_dport, port, 0))
			return -1;
	}
	if (manip & LFP_NAT_SRC) {
		ip = lfp_ipv4(pkt);
		udp = lfp_nat_udp(pkt);
		if (!ip || !udp)
			return -1;
		addr = ip->saddr;
		port = udp->source;
		if (lfp_nat_manip(pkt, 1, addr, pkt->ct.saddr, port, pkt->ct.sport, 1))
			return -1;
	}
	return 0;
}

/* The packet as it came, for the kernel: what PREROUTING's rewrite
 * changed (nothing else was written yet). */
static __always_inline void lfp_nat_undo(struct lfp_pkt *pkt)
{
	struct udphdr *udp;
	struct iphdr *ip;

	if (!(pkt->ct.manip & LFP_NAT_DST))
		return;
	pkt->ct.manip = 0;
	ip = lfp_ipv4(pkt);
	udp = lfp_nat_udp(pkt);
	/* (both were in the linear part when written, and nothing shrinks it) */
	if (!ip || !udp)
		return;
	ip->daddr = pkt->ct.other_daddr;
	ip->check = pkt->ct.check_was;
	udp->dest = pkt->ct.other_dport;
}

/* PREROUTING's rewrite: the destination becomes pkt->ct's, the header
 * checksum following (csum_replace4(), as nf_nat_ipv4_manip_pkt() does),
 * the UDP checksum left for lfp_nat_write(); pkt->ct keeps the destination
 * it replaced. 0, or < 0 when the packet could not be written (nothing of
 * it changed then). */
static __always_inline int lfp_nat_rewrite_destination(struct lfp_pkt *pkt)
{
	struct udphdr *udp;
	struct iphdr *ip;
	__be32 daddr;
	__be16 dport;

	ip = lfp_ipv4(pkt);
	if (!ip)
		return -1;
	pkt->ct.check_was = ip->check;
	if (lfp_l3_csum_replace(pkt, LFP_NAT_IP_CHECK, ip->daddr, pkt->ct.other_daddr))
		return -1;
	ip = lfp_ipv4(pkt);
	udp = lfp_nat_udp(pkt);
	if (!ip || !udp) {
		/* cannot happen: both were read before; the checksum back */
		if (ip)
			ip->check = pkt->ct.check_was;
		return -1;
	}
	daddr = ip->daddr;
	dport = udp->dest;
	ip->daddr = pkt->ct.other_daddr;
	udp->dest = pkt->ct.other_dport;
	pkt->ct.other_daddr = daddr;
	pkt->ct.other_dport = dport;
	return 0;
}

#endif /* LFP_NAT_REWRITE_H */
