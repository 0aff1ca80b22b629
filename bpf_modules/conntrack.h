/* The kernel's connection tracking, read and kept as the kernel keeps it.
 *
 * While the kernel tracks connections, conntrack looks every forwarded packet
 * up at PREROUTING, may change the entry's state, and refreshes its timeout.
 * A fast path that bypasses it must leave the entry exactly as that packet
 * would have left it, so it takes only packets whose only effect on the
 * entry is the timeout refresh, and does that refresh itself:
 *
 * - UDP, of an entry that is CONFIRMED, SEEN_REPLY and ASSURED and past its
 *   stream stamp (udp_packet() then only refreshes the timeout to the
 *   namespace's "stream" timeout: nothing else of the entry changes);
 * - no sequence adjustment, helper, expectation, fixed timeout, offload,
 *   NAT clash, or dying entry (each changes what the kernel does), no
 *   accounting, helper or timeout-policy extension, and a reply tuple that
 *   is the original reversed (IPVS translates without NAT bits) — or, for
 *   the conntrack node (ct_prerouting.h, IPv4), that is the original as the entry's NAT
 *   bits translate it: the packet then leaves with the addresses and ports
 *   nf_nat_manip_pkt() gives it (struct lfp_ct);
 * - a datagram conntrack calls valid (udp_error(): a length that fits and a
 *   checksum that verifies, over the whole IP payload as nf_ip_checksum()
 *   sums it — unless the skb says it was verified or is the sender's to
 *   fill, which nf_ip_checksum() takes as valid).
 * The answer is kept in the packet's context (pkt->ct.answer): conntrack looks
 * a packet up once, at PREROUTING, and after the conntrack node's NAT
 * rewrite there a second lookup would find nothing (where the refresh is
 * left owed, nothing is rewritten: lfp_ct_take looks again).
 * The refresh writes the entry's timeout only when it would change (at most
 * once per jiffy per entry, like __nf_ct_refresh_acct() itself), so a
 * steady flow does not write a shared cache line per packet. It is owed
 * only once conntrack would have seen the packet: where a chain before
 * conntrack's priority (raw) may drop it, the filter node looks the
 * connection up after that chain's verdict (lfp_ct_take), and the
 * conntrack node, which must look it up before routing, leaves the refresh
 * owed (LFP_CT_OWED) for the filter to settle by a second lookup — only
 * where it would change the entry: at most about once per jiffy for a
 * steady flow, whose other packets find the timeout it would write already
 * there (every packet of a flow slower than that). The entry is read as
 * conntrack would find it at that moment, and conntrack would leave it as
 * it is whether the chain drops the packet or not.
 *
 * The same for IPv6 (its conntrack keeps entries as IPv4's does; the
 * packets that get here carry no extension header: router.h, bridge.h).
 *
 * TCP is not taken: conntrack's window tracking advances with every segment
 * it sees, BPF cannot advance it, and a later segment judged against a
 * stale window is INVALID where Linux alone would accept it.
 * What differs from Linux alone: conntrack retries delivering events it
 * missed (a full netlink listener) on every packet it sees; fast-pathed
 * packets do not give it that chance.
 */
#ifndef LFP_CONNTRACK_H
#define LFP_CONNTRACK_H

#include <linux/udp.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <bpf/bpf_core_read.h>

#include "common.h"
#include "parse.h"

/* The fields read, relocated against the running kernel's BTF (CO-RE). */
struct nf_udp_net___lfp {
	unsigned int timeouts[2];       /* UDP_CT_UNREPLIED, UDP_CT_REPLIED; jiffies */
} __attribute__((preserve_access_index));

struct nf_ip_net___lfp {
	struct nf_udp_net___lfp udp;
} __attribute__((preserve_access_index));

struct netns_ct___lfp {
	struct nf_ip_net___lfp nf_ct_proto;
} __attribute__((preserve_access_index));

struct net___lfp {
	struct netns_ct___lfp ct;
} __attribute__((preserve_access_index));

struct nf_conntrack_tuple___lfp {
	struct {
		union {
			__be32 ip;
			__u32 all[4];   /* an IPv6 address; an IPv4 entry's zeroes after ip */
		} u3;
		union {
			__be16 all;
		} u;
	} src, dst;
} __attribute__((preserve_access_index));

struct nf_conntrack_tuple_hash___lfp {
	struct nf_conntrack_tuple___lfp tuple;
} __attribute__((preserve_access_index));

#define LFP_CT_EXT_SLOTS 9              /* extension ids this view has room for */

struct nf_ct_ext___lfp {
	__u8 offset[LFP_CT_EXT_SLOTS];  /* per extension id: 0 when absent */
} __attribute__((preserve_access_index));

enum nf_ct_ext_id___lfp {
	NF_CT_EXT_HELPER___lfp,
	NF_CT_EXT_ACCT___lfp,
	NF_CT_EXT_TIMEOUT___lfp,
	NF_CT_EXT_NAT___lfp,
};

struct nf_conn_nat___lfp {
	int masq_index;                 /* MASQUERADE's device, 0: none */
} __attribute__((preserve_access_index));

struct nf_conn___lfp {
	__u32 timeout;                  /* jiffies (32 bits) at which it expires */
	struct nf_conntrack_tuple_hash___lfp tuplehash[2];
	unsigned long status;           /* IPS_* */
	struct nf_ct_ext___lfp *ext;
	struct {
		struct net___lfp *net;
	} ct_net;
	union {
		struct {
			unsigned long stream_ts;
		} udp;
	} proto;
} __attribute__((preserve_access_index));

#define LFP_UDP_CT_REPLIED 1

#define LFP_CT_NAT_BITS ((1ul << IPS_SRC_NAT_BIT) | (1ul << IPS_DST_NAT_BIT))

/* Every bit must be set... */
#define LFP_CT_NEED ((1ul << IPS_CONFIRMED_BIT) | (1ul << IPS_SEEN_REPLY_BIT) | (1ul << IPS_ASSURED_BIT))
/* ...and none of these. */
#define LFP_CT_AVOID ((1ul << IPS_EXPECTED_BIT) | (1ul << IPS_SRC_NAT_BIT) | (1ul << IPS_DST_NAT_BIT) | \
		      (1ul << IPS_SEQ_ADJUST_BIT) | (1ul << IPS_DYING_BIT) | (1ul << IPS_FIXED_TIMEOUT_BIT) | \
		      (1ul << IPS_TEMPLATE_BIT) | (1ul << IPS_UNTRACKED_BIT) | (1ul << IPS_HELPER_BIT) | \
		      (1ul << IPS_OFFLOAD_BIT) | (1ul << IPS_HW_OFFLOAD_BIT) | (1ul << 12 /* IPS_NAT_CLASH */))

extern unsigned int CONFIG_HZ __kconfig;

enum lfp_ct_result {
	LFP_CT_TAKEN = 0,       /* established, refreshed: the fast path may go on */
	LFP_CT_NONE,            /* no entry: a new connection */
	LFP_CT_ERROR,           /* the lookup itself failed */
	LFP_CT_STATE,           /* an entry the fast path does not take */
	LFP_CT_TCP,
	LFP_CT_PROTO,           /* neither UDP nor TCP */
	LFP_CT_INVALID,         /* conntrack would call the datagram invalid, or it could not be checked */
};

static __always_inline __u16 lfp_csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Whether the one's complement sum of the `len` (< 4 KiB + 20) bytes after
 * a 20-byte IPv4 header, with `seed`, is 0xffff (a checksum that verifies).
 * (An IPv6 packet's sum starts there too: its header's last 20 bytes are
 * pseudo-header, lfp_ct_udp_valid().) A global function, so the verifier
 * checks its many paths once, not once per path of its caller. */
__attribute__((noinline)) int lfp_csum_verifies(lfp_ctx_t *ctx, __u32 len, __u32 seed)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	void *p;
	__s64 r = seed;

	if (len > 4095 + sizeof(struct ipv6hdr) - sizeof(struct iphdr))
		return 0;
	p = data + sizeof(struct ethhdr) + sizeof(struct iphdr);
	for (int i = 0; i < 8; i++) {
		if (len < 512)
			break;
		if (p + 512 > data_end)
			return 0;
		r = bpf_csum_diff(NULL, 0, p, 512, (__u32)r);
		if (r < 0)
			return 0;
		p += 512;
		len -= 512;
	}
#define LFP_CSUM_CHUNK(size)                                                  \
	if (len & (size)) {                                                   \
		if (p + (size) > data_end)                                    \
			return 0;                                             \
		r = bpf_csum_diff(NULL, 0, p, (size), (__u32)r);              \
		if (r < 0)                                                    \
			return 0;                                             \
		p += (size);                                                  \
	}
	LFP_CSUM_CHUNK(256)
	LFP_CSUM_CHUNK(128)
	LFP_CSUM_CHUNK(64)
	LFP_CSUM_CHUNK(32)
	LFP_CSUM_CHUNK(16)
	LFP_CSUM_CHUNK(8)
	LFP_CSUM_CHUNK(4)
#undef LFP_CSUM_CHUNK
	/* 1 to 3 bytes left: 16-bit words as they lie in memory, the last
	 * padded with a zero byte (what csum_partial() sums). */
	if (len & 3) {
		__u8 *b = p;
		__u32 tail;

		if ((void *)(b + 3) <= data_end && (len & 3) == 3)
			tail = *(__u16 *)b + (__u32)b[2];
		else if ((void *)(b + 2) <= data_end && (len & 3) == 2)
			tail = *(__u16 *)b;
		else if ((void *)(b + 1) <= data_end && (len & 3) == 1)
			tail = b[0];
		else
			return 0;
		r = (__u32)r + (__u64)tail;
	}
	return lfp_csum_fold(r) == 0xffff;
}

/* The 16-bit halves of `words` 32-bit words, summed (a pseudo-header's
 * addresses, as they lie in memory). */
static __always_inline __u64 lfp_sum_words(const __u32 *w, int words)
{
	__u64 sum = 0;

#pragma unroll
	for (int i = 0; i < words; i++)
		sum += (w[i] & 0xffff) + (w[i] >> 16);
	return sum;
}

/* udp_error() at PREROUTING: the UDP length fits the IP payload, and the
 * checksum (unless 0) verifies over the whole payload with the IPv4 or
 * IPv6 pseudo-header (nf_ip_checksum(), nf_ip6_checksum()). */
static __always_inline int lfp_ct_udp_valid(struct lfp_pkt *pkt, int family6)
{
	const __u32 l4_off = sizeof(struct ethhdr) + (family6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	struct udphdr *udp;
	__u32 payload, udp_len;
	__u64 sum;

	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6)
			return 0;
		payload = bpf_ntohs(ip6->payload_len);
	} else {
		struct iphdr *ip = lfp_ipv4(pkt);

		if (!ip)
			return 0;
		payload = bpf_ntohs(ip->tot_len);
		if (payload < sizeof(struct iphdr))
			return 0;
		payload -= sizeof(struct iphdr);
	}
	if (payload < sizeof(struct udphdr) || payload > 4095 || !lfp_linear(pkt, l4_off + payload))
		return 0;
	udp = pkt->data + l4_off;
	if ((void *)(udp + 1) > pkt->data_end)
		return 0;
	udp_len = bpf_ntohs(udp->len);
	if (udp_len < sizeof(*udp) || udp_len > payload)
		return 0;
	if (!udp->check || lfp_l4_csum_taken_as_verified(pkt))
		return 1;
	sum = bpf_htons(IPPROTO_UDP) + bpf_htons((__u16)payload);
	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6)
			return 0;
		/* The sum runs from where an IPv4 payload would start (one
		 * verifier-friendly offset): over the source address's last word
		 * and the destination address, then the payload; the seed adds
		 * the source's first three words. */
		sum += lfp_sum_words(ip6->saddr.in6_u.u6_addr32, 3);
		payload += sizeof(struct ipv6hdr) - sizeof(struct iphdr);
	} else {
		struct iphdr *ip = lfp_ipv4(pkt);

		if (!ip)
			return 0;
		sum += lfp_sum_words(&ip->saddr, 1) + lfp_sum_words(&ip->daddr, 1);
	}
	return lfp_csum_verifies(pkt->ctx, payload, lfp_csum_fold(sum));
}

/* Whether the entry's reply tuple is its original one reversed: what NAT
 * changes sets SRC_NAT/DST_NAT, but IPVS (net.ipv4.vs.conntrack=1) alters
 * the reply tuple without them, and rewrites replies at FORWARD. */
static __always_inline int lfp_ct_untranslated(struct nf_conn___lfp *conn, int family6)
{
	struct nf_conntrack_tuple___lfp *orig = &conn->tuplehash[0].tuple, *reply = &conn->tuplehash[1].tuple;
	int same = orig->src.u3.ip == reply->dst.u3.ip && orig->dst.u3.ip == reply->src.u3.ip &&
		   orig->src.u.all == reply->dst.u.all && orig->dst.u.all == reply->src.u.all;

	if (family6) {
#pragma unroll
		for (int i = 1; i < 4; i++)
			same = same && orig->src.u3.all[i] == reply->dst.u3.all[i] &&
			       orig->dst.u3.all[i] == reply->src.u3.all[i];
	}
	return same;
}

/* Where each of the entry's extensions lies (0: absent), read with direct
 * loads (the verifier guards them), not a probe-read helper call per
 * packet; 0 when the entry has none. */
static __always_inline struct nf_ct_ext___lfp *lfp_ct_ext_offsets(struct nf_conn___lfp *conn,
								   __u8 offset[LFP_CT_EXT_SLOTS])
{
	struct nf_ct_ext___lfp *ext = conn->ext;

	if (!ext)
		return NULL;
#pragma unroll
	for (int i = 0; i < LFP_CT_EXT_SLOTS; i++)
		offset[i] = ext->offset[i];
	return ext;
}

/* Whether the entry carries an extension that makes conntrack do more per
 * packet than a timeout refresh: accounting (nf_conntrack_acct, connbytes),
 * a helper (attached with or without IPS_HELPER, e.g. by ctnetlink), or a
 * timeout policy of its own. */
static __always_inline int lfp_ct_extended(struct nf_conn___lfp *conn)
{
	__u8 offset[LFP_CT_EXT_SLOTS];
	__u32 acct = bpf_core_enum_value(enum nf_ct_ext_id___lfp, NF_CT_EXT_ACCT___lfp);
	__u32 helper = bpf_core_enum_value(enum nf_ct_ext_id___lfp, NF_CT_EXT_HELPER___lfp);
	__u32 timeout = bpf_core_enum_value(enum nf_ct_ext_id___lfp, NF_CT_EXT_TIMEOUT___lfp);

	if (!lfp_ct_ext_offsets(conn, offset))
		return 0;
	if (acct >= LFP_CT_EXT_SLOTS || helper >= LFP_CT_EXT_SLOTS)
		return 1;
	if (offset[acct] || offset[helper])
		return 1;
	/* Without CONFIG_NF_CONNTRACK_TIMEOUT there is no such extension. */
	if (bpf_core_enum_value_exists(enum nf_ct_ext_id___lfp, NF_CT_EXT_TIMEOUT___lfp))
		return timeout >= LFP_CT_EXT_SLOTS || offset[timeout];
	return 0;
}

/* The device MASQUERADE bound the connection to (nf_conn_nat.masq_index),
 * 0 for none, into *masq: in the NAT extension, where the entry's
 * extension header places it (a variable place: one probe read). */
static __always_inline void lfp_ct_masq_ifindex(struct nf_conn___lfp *conn, __u32 *masq)
{
	__u32 nat = bpf_core_enum_value(enum nf_ct_ext_id___lfp, NF_CT_EXT_NAT___lfp);
	__u8 offset[LFP_CT_EXT_SLOTS];
	struct nf_ct_ext___lfp *ext;

	*masq = 0;
	/* (without CONFIG_NF_NAT_MASQUERADE there is no such field, nor a
	 * connection MASQUERADE bound) */
	if (!bpf_core_enum_value_exists(enum nf_ct_ext_id___lfp, NF_CT_EXT_NAT___lfp) || nat >= LFP_CT_EXT_SLOTS ||
	    !bpf_core_field_exists(struct nf_conn_nat___lfp, masq_index))
		return;
	ext = lfp_ct_ext_offsets(conn, offset);
	if (!ext || !offset[nat])
		return;
	if (bpf_probe_read_kernel(masq, sizeof(*masq), (void *)ext + offset[nat] +
				  bpf_core_field_offset(struct nf_conn_nat___lfp, masq_index)) || (int)*masq < 0)
		*masq = 0;
}

/* What the entry's NAT does to this IPv4 packet (nf_nat_packet()), into
 * pkt->ct: in the direction the packet takes, it ends as the other
 * direction's tuple inverted; at PREROUTING its destination changes if the
 * entry's status says so for that direction, at POSTROUTING its source. A
 * side the status leaves alone must already be what the other tuple says,
 * or the reply tuple was altered by something else (IPVS): 0 then.
 * MASQUERADE binds a connection to its device (nf_nat_oif_changed()) where
 * it translated the source; one that found the source already right, and
 * bound the connection all the same, had a packet whose source is the
 * router's own address, which the router hands to the kernel anyway. */
static __always_inline int lfp_ct_nat_of(struct lfp_pkt *pkt, struct nf_conn___lfp *conn, unsigned long status,
					 const struct bpf_sock_tuple *tuple)
{
	struct nf_conntrack_tuple___lfp *orig = &conn->tuplehash[0].tuple, *other;
	unsigned long src_bit = 1ul << IPS_SRC_NAT_BIT, dst_bit = 1ul << IPS_DST_NAT_BIT;
	int reply;

	if (orig->src.u3.ip == tuple->ipv4.saddr && orig->dst.u3.ip == tuple->ipv4.daddr &&
	    orig->src.u.all == tuple->ipv4.sport && orig->dst.u.all == tuple->ipv4.dport) {
		reply = 0;
		other = &conn->tuplehash[1].tuple;
	} else {
		reply = 1;
		other = orig;
		src_bit = 1ul << IPS_DST_NAT_BIT;
		dst_bit = 1ul << IPS_SRC_NAT_BIT;
	}
	pkt->ct.manip = (status & (1ul << IPS_SRC_NAT_BIT) ? LFP_CT_SNAT : 0) |
			(status & (1ul << IPS_DST_NAT_BIT) ? LFP_CT_DNAT : 0);
	pkt->ct.masq_ifindex = 0;
	if (status & src_bit) {
		pkt->ct.manip |= LFP_NAT_SRC;
		pkt->ct.saddr = other->dst.u3.ip;
		pkt->ct.sport = other->dst.u.all;
		if (!reply) {
			lfp_ct_masq_ifindex(conn, &pkt->ct.masq_ifindex);
			/* (only where a node checks it at POSTROUTING: nat_out.h) */
			if (pkt->ct.masq_ifindex && !LFP_NODE_NAT_OUT)
				return 0;
		}
	} else if (other->dst.u3.ip != tuple->ipv4.saddr || other->dst.u.all != tuple->ipv4.sport) {
		return 0;
	}
	if (status & dst_bit) {
		pkt->ct.manip |= LFP_NAT_DST;
		pkt->ct.other_daddr = other->src.u3.ip;
		pkt->ct.other_dport = other->src.u.all;
	} else if (other->src.u3.ip != tuple->ipv4.daddr || other->src.u.all != tuple->ipv4.dport) {
		return 0;
	}
	return 1;
}

/* Looks the packet's connection up and, when the fast path may take it,
 * refreshes its timeout as conntrack would. `nat`: an IPv4 entry with NAT
 * may be taken too, its translation left in pkt->ct. `want` (>= 0): a
 * lookup before this one took the packet (found it valid) with this NAT
 * (pkt->ct.manip), which the entry must still give it before it is
 * refreshed. `owed` (NULL: refresh now): the refresh is not done but
 * *owed set if it would change the entry — a timeout it already has (a
 * packet of the connection refreshed it this jiffy) is what conntrack
 * leaves whether it sees this packet or not, and nothing is owed. */
static __always_inline enum lfp_ct_result lfp_ct_take_uncached(struct lfp_pkt *pkt, int nat, int *owed, int want)
{
	int family6 = pkt->l3_proto == bpf_htons(ETH_P_IPV6);
	const __u32 l4_off = sizeof(struct ethhdr) + (family6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	struct bpf_ct_opts opts = { .netns_id = -1, .l4proto = IPPROTO_UDP };
	unsigned long avoid = LFP_CT_AVOID;
	struct bpf_sock_tuple tuple = {};
	struct nf_conn___lfp *conn;
	struct nf_conn *ct;
	struct udphdr *udp;
	unsigned long status;
	__u64 now;
	__u32 extra, expires, tuple_size;
	__u8 proto;

	/* (no extension header here: the next header is the protocol) */
	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6)
			return LFP_CT_INVALID;
		proto = ip6->nexthdr;
	} else {
		struct iphdr *ip = lfp_ipv4(pkt);

		if (!ip)
			return LFP_CT_INVALID;
		proto = ip->protocol;
	}
	if (proto == IPPROTO_TCP)
		return LFP_CT_TCP;
	if (proto != IPPROTO_UDP)
		return LFP_CT_PROTO;
	if (want < 0 && !lfp_ct_udp_valid(pkt, family6))
		return LFP_CT_INVALID;
	udp = pkt->data + l4_off;
	if ((void *)(udp + 1) > pkt->data_end)
		return LFP_CT_INVALID;
	if (family6) {
		struct ipv6hdr *ip6 = lfp_ipv6(pkt);

		if (!ip6)
			return LFP_CT_INVALID;
		__builtin_memcpy(tuple.ipv6.saddr, &ip6->saddr, sizeof(tuple.ipv6.saddr));
		__builtin_memcpy(tuple.ipv6.daddr, &ip6->daddr, sizeof(tuple.ipv6.daddr));
		tuple.ipv6.sport = udp->source;
		tuple.ipv6.dport = udp->dest;
		tuple_size = sizeof(tuple.ipv6);
	} else {
		struct iphdr *ip = lfp_ipv4(pkt);

		if (!ip)
			return LFP_CT_INVALID;
		tuple.ipv4.saddr = ip->saddr;
		tuple.ipv4.daddr = ip->daddr;
		tuple.ipv4.sport = udp->source;
		tuple.ipv4.dport = udp->dest;
		tuple_size = sizeof(tuple.ipv4);
	}

	ct = lfp_ct_lookup(pkt, &tuple, tuple_size, &opts);
	if (!ct)
		return opts.error == -2 /* -ENOENT */ ? LFP_CT_NONE : LFP_CT_ERROR;
	conn = (void *)ct;
	status = conn->status;
	now = bpf_jiffies64();
	if (nat && !family6)
		avoid &= ~LFP_CT_NAT_BITS;
	if ((status & LFP_CT_NEED) != LFP_CT_NEED || (status & avoid) ||
	    (long)(conn->proto.udp.stream_ts - now) >= 0 || !CONFIG_HZ || lfp_ct_extended(conn))
		goto state;
	if (nat && !family6 && (status & LFP_CT_NAT_BITS)) {
		if (!lfp_ct_nat_of(pkt, conn, status, &tuple))
			goto state;
	} else if (!lfp_ct_untranslated(conn, family6)) {
		goto state;
	}
	if (want >= 0 && pkt->ct.manip != want)
		goto state;
	extra = conn->ct_net.net->ct.nf_ct_proto.udp.timeouts[LFP_UDP_CT_REPLIED];
	expires = (__u32)now + extra;
	if (conn->timeout != expires) {
		if (owed)
			*owed = 1;
		else
			bpf_ct_change_timeout(ct, (__u32)((__u64)extra * 1000 / CONFIG_HZ));
	}
	bpf_ct_release(ct);
	return LFP_CT_TAKEN;
state:
	pkt->ct.manip = 0;
	bpf_ct_release(ct);
	return LFP_CT_STATE;
}

#define LFP_UDP_CT_UNREPLIED 0

/* The connection of a UDP packet the host sends (a tunnel's outer packet,
 * `tuple` its addresses and ports), looked up and refreshed as conntrack
 * at OUTPUT would: taken only when that refresh is all the packet does to
 * it — the tuple the entry's original direction, a confirmed entry that
 * has never seen a reply (udp_packet() then refreshes it to the
 * namespace's "unreplied" timeout, nothing else), none of LFP_CT_AVOID's
 * bits (no NAT: nat's hooks translate such a packet by the entry's
 * binding), every bit of `need` (where nat's hooks are registered, both
 * NAT_DONE bits: an entry without them runs the nat chains again for each
 * packet), no extension, and a reply tuple that is the original reversed.
 * LFP_CT_NONE when there is no entry. */
static __always_inline enum lfp_ct_result lfp_ct_take_sent(struct lfp_pkt *pkt, struct bpf_sock_tuple *tuple,
							    unsigned long need)
{
	struct bpf_ct_opts opts = { .netns_id = -1, .l4proto = IPPROTO_UDP };
	struct nf_conn___lfp *conn;
	struct nf_conn *ct;
	unsigned long status;
	__u32 extra, expires;
	__u64 now;

	ct = lfp_ct_lookup(pkt, tuple, sizeof(tuple->ipv4), &opts);
	if (!ct)
		return opts.error == -2 /* -ENOENT */ ? LFP_CT_NONE : LFP_CT_ERROR;
	conn = (void *)ct;
	status = conn->status;
	need |= 1ul << IPS_CONFIRMED_BIT;
	if (opts.dir != 0 /* IP_CT_DIR_ORIGINAL */ || (status & need) != need ||
	    (status & ((1ul << IPS_SEEN_REPLY_BIT) | LFP_CT_AVOID)) || !CONFIG_HZ || lfp_ct_extended(conn) ||
	    !lfp_ct_untranslated(conn, 0)) {
		bpf_ct_release(ct);
		return LFP_CT_STATE;
	}
	now = bpf_jiffies64();
	extra = conn->ct_net.net->ct.nf_ct_proto.udp.timeouts[LFP_UDP_CT_UNREPLIED];
	expires = (__u32)now + extra;
	/* (at most once per jiffy: the timeout already there otherwise) */
	if (conn->timeout != expires)
		bpf_ct_change_timeout(ct, (__u32)((__u64)extra * 1000 / CONFIG_HZ));
	bpf_ct_release(ct);
	return LFP_CT_TAKEN;
}

/* Whether the conntrack node took the packet's connection and left its
 * refresh owed (only that node does). */
static __always_inline int lfp_ct_owed(struct lfp_pkt *pkt)
{
	return LFP_NODE_CONNTRACK && (pkt->ct.answer & LFP_CT_OWED);
}

/* Conntrack's answer for the packet, looked up (and its connection
 * refreshed) the first time it is asked for: one the conntrack node took
 * may carry NAT (pkt->ct.manip). One it took with the refresh still owed
 * is looked up again, refreshing, and taken only if it still translates
 * the packet as it did (the entry may have changed in between) — a lookup
 * of the packet as it came, which it still is (the conntrack node passes
 * one whose destination it would translate: ct_prerouting.h), already
 * found valid. */
static __always_inline enum lfp_ct_result lfp_ct_take(struct lfp_pkt *pkt)
{
	__u8 answer = pkt->ct.answer, manip = pkt->ct.manip;
	int owed = lfp_ct_owed(pkt);
	enum lfp_ct_result result;

	if (answer && !owed)
		return answer - 1;
	pkt->ct.manip = 0;
	result = lfp_ct_take_uncached(pkt, owed, NULL, owed ? manip : -1);
	pkt->ct.answer = result + 1;
	return result;
}

/* The same for the conntrack node: an IPv4 entry with NAT may be taken;
 * without `refresh`, a connection taken is owed its refresh if the
 * refresh would change it. */
static __always_inline enum lfp_ct_result lfp_ct_take_nat(struct lfp_pkt *pkt, int refresh)
{
	int owed = 0;
	enum lfp_ct_result result = lfp_ct_take_uncached(pkt, 1, refresh ? NULL : &owed, -1);

	pkt->ct.answer = (result + 1) | (result == LFP_CT_TAKEN && owed ? LFP_CT_OWED : 0);
	return result;
}

#endif
