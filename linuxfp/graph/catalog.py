"""Every pipeline shape build_graph can produce for a set of nodes, derived
from the node declarations alone (stage, `decides`, `applies`, `needs`) and
the hooks: the set `linuxfp shapes build` precompiles. Pure.

It may hold a shape no configuration produces (it over-approximates where a
declaration depends on the configuration), never miss one the rules below
allow: a missing shape would make a node without clang fail to accelerate.
"""
from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from linuxfp.state.model import ARPHRD_ETHER, BridgePort, Link, NetfilterState, Snapshot, Sysctls

from .nodes import Node, in_stage_order, registered
from .shape import HOOKS, Shape

# The ingresses whose pipelines differ in what a node needs (Node.needs
# reads the link): an interface that routes, and a port of a bridge.
_ROUTED = Link(index=2, name="eth0", kind="", master=None, mtu=1500, up=True, oper_up=True, operstate=6,
               mac="02:00:00:00:00:02", link_type=ARPHRD_ETHER, flags=0, qdisc="noqueue", xdp_prog_id=0,
               xdp_mode=0, xdp_features=0)
_BRIDGE_PORT = replace(_ROUTED, index=3, name="port0", master=1, slave_kind="bridge", bridge_port=BridgePort())
_EMPTY = Snapshot(links=(), addresses=(), routes=(), rules=(), neighbours=(), sysctls=Sysctls(ip_forward=True),
                  netfilter=NetfilterState(active=False), netns_inode=0)


def builtin_nodes() -> tuple[Node, ...]:
    """The nodes in this package (not those LINUXFP_NODES adds)."""
    return tuple(n for n in registered() if type(n).__module__.startswith(f"{Node.__module__}."))


def possible_shapes(nodes: tuple[Node, ...] | None = None, hooks: tuple[str, ...] = HOOKS) -> tuple[Shape, ...]:
    """Every installable (not testable) shape of `nodes` (default: the
    built-in ones), sorted. A node set is possible when, as build_graph
    composes pipelines:
    - it holds a deciding node (without one the ingress stays with the kernel);
    - it holds every node that applies everywhere and needs nothing, and
      every node that applies everywhere whose needs it meets on every
      ingress (build_graph drops such a node only where they are unmet);
    - each node's needs can be met by the set on some ingress.
    Whether a hook is possible depends on the configuration: both are."""
    nodes = builtin_nodes() if nodes is None else nodes
    everywhere = frozenset(n.name for n in nodes if _everywhere(n))
    needs = {n.name: _possible_needs(n) for n in nodes}
    # (a node whose needs could not be asked without a configuration is
    # assumed to need nothing: only an over-approximation may rest on that)
    follows = [n.name for n in nodes if type(n).applies is Node.applies and n.name not in everywhere
               and _needs_known(n)]
    shapes = []
    for size in range(1, len(nodes) + 1):
        for chosen in combinations(in_stage_order(nodes), size):
            names = frozenset(n.name for n in chosen)
            if (any(n.decides for n in chosen) and everywhere <= names
                    and all(any(not need or names & need for need in needs[n.name]) for n in chosen)
                    and not any(name not in names and all(not need or names & need for need in needs[name])
                                for name in follows)):
                shapes += [Shape(hook, tuple(n.name for n in chosen)) for hook in hooks]
    return tuple(sorted(shapes))


def _everywhere(node: Node) -> bool:
    """Whether build_graph puts `node` on every pipeline: it declares
    neither where it applies nor what it needs."""
    return type(node).applies is Node.applies and type(node).needs is Node.needs


def _needs_known(node: Node) -> bool:
    """Whether `node`'s needs can be asked on every kind of ingress without
    a configuration."""
    try:
        for link in (_ROUTED, _BRIDGE_PORT):
            node.needs(_EMPTY, link)
    except Exception:
        return False
    return True


def _possible_needs(node: Node) -> tuple[frozenset[str], ...]:
    """What `node` needs on each kind of ingress; needing nothing (an empty
    set) where its declaration cannot be asked without a configuration."""
    found = []
    for link in (_ROUTED, _BRIDGE_PORT):
        try:
            found.append(frozenset(node.needs(_EMPTY, link)))
        except Exception:     # reads what the probe lacks: assume the weakest need
            found.append(frozenset())
    return tuple(found)
