/* Every counter a pipeline keeps, in one X-macro list.
 *
 * This list is the single source of truth for counter ids: the C side builds
 * its enum from it and the Python side (linuxfp/synth/counters.py) parses the
 * X(...) lines, so a reason added here shows up in `linuxfp stats` without
 * touching Python. Columns: id, node, kind (fast|pass|drop), description.
 */
#ifndef LFP_COUNTERS_H
#define LFP_COUNTERS_H

#define LFP_COUNTERS(X)                                                                   \
	X(ROUTER_FORWARDED,       router, fast, "forwarded by the fast path")               \
	X(PIPELINE_END,           pipeline, pass, "no node took the packet")                \
	X(LEASE_EXPIRED,          pipeline, pass, "no live controller holds the lease (gone, stopped or stuck)") \
	X(WATCHED_TABLE_CHANGED,  pipeline, pass, "legacy iptables changed; the controller has not re-read it yet") \
	X(PARSE_SHORT,            pipeline, pass, "frame shorter than its headers")         \
	X(VLAN_TAGGED,            pipeline, pass, "VLAN-tagged frame")                      \
	X(NOT_IPV4,               router, pass, "not IPv4")                                 \
	X(NOT_FOR_US,             router, pass, "destination MAC is not the ingress device's") \
	X(IP_BAD_HEADER,          router, pass, "IPv4 version/IHL/total length invalid")    \
	X(IP_OPTIONS,             router, pass, "IPv4 header has options")                  \
	X(IP_LENGTH_MISMATCH,     router, pass, "frame length differs from IPv4 total length") \
	X(IP_BAD_CHECKSUM,        router, pass, "IPv4 header checksum invalid")             \
	X(IP_FRAGMENT,            router, pass, "IPv4 fragment")                            \
	X(TTL_EXPIRED,            router, pass, "TTL <= 1")                                 \
	X(MARTIAN,                router, pass, "martian source or destination")            \
	X(LOCAL_SOURCE,           router, pass, "source is a local address")                \
	X(ICMP_ERROR,             router, pass, "ICMP error (multipath hashes its inner header)") \
	X(INGRESS_UNKNOWN,        router, pass, "ingress interface not prepared")           \
	X(INGRESS_FWD_DISABLED,   router, pass, "forwarding disabled on ingress")          \
	X(RP_FILTER,              router, pass, "rp_filter active on ingress")              \
	X(FIB_BLACKHOLE,          router, pass, "route is blackhole")                       \
	X(FIB_UNREACHABLE,        router, pass, "route is unreachable")                     \
	X(FIB_PROHIBIT,           router, pass, "route is prohibit")                        \
	X(FIB_NOT_FORWARDED,      router, pass, "destination local, broadcast or multicast") \
	X(FIB_FWD_DISABLED,       router, pass, "FIB: forwarding disabled")                 \
	X(FIB_LWT,                router, pass, "route needs encapsulation")                \
	X(FIB_NO_NEIGH,           router, pass, "no neighbour entry for next hop")          \
	X(FIB_FRAG_NEEDED,        router, pass, "larger than egress MTU")                   \
	X(ROUTE_MTU,              router, pass, "longer than a route MTU metric")           \
	X(FIB_OTHER,              router, pass, "FIB lookup failed otherwise")              \
	X(NEIGH_UNCONFIRMED,      router, pass, "neighbour state unknown to the fast path")  \
	X(NEIGH_STALE,            router, pass, "first packet to a STALE neighbour (Linux starts probing)") \
	X(MARKED,                 router, pass, "packet carries a mark (fwmark rules)")     \
	X(SOURCE_CHECK,           router, pass, "source would fail Linux's source validation") \
	X(HAIRPIN,                router, pass, "egress is the ingress interface")          \
	X(EGRESS_UNSUPPORTED,     router, pass, "egress cannot take a redirect from this hook, or does not forward") \
	X(REDIRECT_FAILED,        router, pass, "redirect refused")

#define LFP_COUNTER_ENUM(id, node, kind, desc) LFP_CNT_##id,
enum lfp_counter {
	LFP_COUNTERS(LFP_COUNTER_ENUM)
	LFP_CNT_MAX
};
#undef LFP_COUNTER_ENUM

#endif
