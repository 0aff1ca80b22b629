"""Obstacles: configuration that makes Linux do something to a packet that
no chosen node reproduces. An ingress with an obstacle that none of its
nodes `covers` stays on the kernel path. Pure."""
from __future__ import annotations

from dataclasses import dataclass

from .filtering.scope import evaluated_scope6, filter_scope, ingress_chain, netfilter_reason
from .interfaces import ARPHRD_ETHER


@dataclass(frozen=True)
class Obstacle:
    name: str        # what a node names in `covers`
    reason: str      # shown by `linuxfp graph`


def namespace_obstacles(snapshot) -> tuple[Obstacle, ...]:
    """Obstacles every ingress of the namespace meets."""
    found = []
    nf = snapshot.netfilter
    scope = filter_scope(nf) if nf.active else None
    if scope is not None and scope.uncovered:
        found.append(Obstacle("netfilter", netfilter_reason(scope.uncovered)))
    # (ip6tables-legacy's tables alone leave `active` false: asked apart)
    scopes = [s for s in (scope, evaluated_scope6(nf)) if s is not None and s.filters_forward]
    if scopes:
        what = list(dict.fromkeys(r.tool for s in scopes for r in s.forward))    # (an inet table: both families')
        what += [f"{'IPv6' if s is not scope else 'IPv4'} connection tracking" for s in scopes if s.stateful]
        found.append(Obstacle("iptables_filter", "netfilter rules on the forwarded path (" + ", ".join(what) + ")"))
    if snapshot.xfrm.active:
        found.append(Obstacle("xfrm", "IPsec (xfrm) policies present: ip_forward would check or transform packets"))
    policy = snapshot.sysctls.multipath_hash_policy
    if policy not in (0, 1) and any(len(r.nexthops) > 1 or r.nh_id for r in snapshot.routes):
        found.append(Obstacle("multipath_hash", f"fib_multipath_hash_policy={policy} hashes fields "
                                                "bpf_fib_lookup does not see, and multipath routes exist"))
    return tuple(found)


def ingress_obstacles(link, snapshot) -> tuple[Obstacle, ...]:
    """Obstacles of one ingress interface."""
    found = []
    nft_ingress = ingress_chain(snapshot, link.name)
    if nft_ingress is not None:
        found.append(Obstacle("nft_ingress", f"netfilter: {nft_ingress}"))
    if link.link_type != ARPHRD_ETHER:
        found.append(Obstacle("not_ethernet", "not an Ethernet interface"))
    if link.tc_ingress:
        found.append(Obstacle("tc_ingress", "an ingress/clsact qdisc is present: its tc filters would be bypassed"))
    if link.tcx_others_ingress:
        found.append(Obstacle("tcx_ingress", "tcx programs of another tool run on this ingress: they would be "
                                             "bypassed"))
    return tuple(found)
