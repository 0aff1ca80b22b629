"""The node registry: every node is one C header in bpf_modules/ (or beside
its module) plus one Python module here declaring it.

A node declares where it sits (`stage`), whether it applies to an ingress and
whether it can be exact there (`applies`, `blocker`, `hook_blocker`), the maps
it owns with their desired contents (`tables`), and through its header its
counters (LFP_COUNTERS_<NAME>). The graph composes pipelines from the
registry, synth renders them, the controller syncs every table generically:
adding a node touches no other node and no controller code
(docs/architecture.md, "How to add a node").

LINUXFP_NODES=/path/a.py:/path/b.py registers nodes that live outside the
tree: each module calls `register()`.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Iterable

from ..tables import Table


class Stage(IntEnum):
    """Where a node sits on the path a packet takes through Linux; the
    pipeline chains its nodes in this order."""

    BRIDGE = 10           # bridge forwarding decision (br_handle_frame)
    BRIDGE_FILTER = 20    # br_netfilter: FORWARD with the bridge as device (decides what the bridge marks LFP_FWD_NF_IPV4 / _IPV6)
    PREROUTING = 30       # raw/mangle/nat PREROUTING, conntrack lookup
    LOCAL_IN = 40         # INPUT of the outer packet: decapsulation
    ROUTE = 50            # the routing decision
    FORWARD = 60          # filter FORWARD (the egress is known here)
    POSTROUTING = 70      # mangle/nat POSTROUTING
    BRIDGE_TX = 75        # a bridge egress's transmit (br_dev_xmit): the FDB picks the port
    TRANSMIT = 80         # rewrite and send what was decided

    @property
    def is_ip(self) -> bool:
        """Whether packets reach this stage only through IP: a frame the
        bridge stage forwards skips it."""
        return Stage.PREROUTING <= self < Stage.TRANSMIT


class Node:
    """Base of every node declaration. Pure: reads only the snapshot. The
    graph remembers what `tables` and `notes` (and the answers its build
    asks for per interface) return while the snapshot fields they read are
    the same objects: they get a view of the snapshot that records those
    reads (graph/remember.py), with a Snapshot's fields, methods and
    properties — not a Snapshot to test with isinstance, replace or hash.
    A per-interface answer that needs the whole namespace's asks it by
    answer and another link through link_at (graph/remember.py), so that
    one new device does not redo every interface's decision."""

    name: str = ""
    stage: Stage = Stage.FORWARD
    header: Path = Path()
    # Whether it fills pkt->fwd: an ingress without a deciding node stays on
    # the kernel path, with the deciding nodes' blockers as the reason.
    decides: bool = False
    # Obstacles (linuxfp/graph/obstacles.py) this node reproduces exactly,
    # e.g. "netfilter" for a filter node.
    covers: frozenset[str] = frozenset()
    # A C file of raw tracepoint programs (SEC("raw_tp/NAME")) the controller
    # loads against the namespace's maps and attaches for its lifetime: the
    # kernel's synchronous signal where a node's tables would otherwise lag
    # behind netlink (e.g. invalidating a mirrored entry as the kernel
    # changes it). Includes resolve in bpf_modules/; rodata lfp_netns_cookie
    # is set to the namespace's cookie. Optional SEC("syscall") programs
    # lfp_watch_start and lfp_watch_stop run once all its tracepoints are
    # attached and before they are detached.
    watch: Path | None = None
    # Maps holding state only the node's programs and watch write (e.g. a
    # cache, a generation): one per namespace, shared by every object that
    # declares them, never synced or read back by the controller, which
    # only zeroes the ones not per CPU when the node's watch is not attached.
    state_maps: tuple[str, ...] = ()

    def applies(self, snapshot, link) -> bool:
        """Whether packets arriving on `link` pass through this node."""
        return True

    def blocker(self, snapshot, link) -> str | None:
        """For a deciding node that does not apply: why (shown by `linuxfp graph`)."""
        return None

    def needs(self, snapshot, link) -> tuple[str, ...]:
        """Nodes of which at least one must be in the pipeline on `link` for
        this one to see any packet (empty: none needed). The router on a
        bridge port sees only what the bridge hands up; FORWARD only what
        was routed."""
        return ()

    def hook_blocker(self, snapshot, link, hook: str) -> str | None:
        """Why this node cannot be exact at `hook` on `link` (None: it can)."""
        return None

    def prefers_tc(self, snapshot, link) -> str | None:
        """Why `--hook auto` should choose TC on `link` even where XDP could
        be exact: attaching XDP there would change something a user sees."""
        return None

    def tables(self, snapshot) -> tuple[Table, ...]:
        """The maps this node owns and what they must hold."""
        return ()

    def notes(self, snapshot) -> tuple[str, ...]:
        """What the node makes of the configuration, for `linuxfp graph`
        (e.g. the rules it evaluates and those it leaves to the kernel)."""
        return ()

    def publish(self, snapshot) -> dict | None:
        """What `stats` needs to make sense of the node's counts, as JSON
        (the filter: the rules of its classifier generation), published by
        the controller in its run directory whenever it changes: `linuxfp
        stats` then reads no kernel state of its own. Return the same object
        while nothing changed (the controller writes only a new one)."""
        return None

    def stats(self, maps, published) -> dict | None:
        """What the node counted beyond its reasons, for `linuxfp stats`
        (the filter: packets per iptables rule). `maps(name)` opens one of
        the namespace's pinned maps (None if absent); `published` is what
        `publish` gave the controller (None if nothing was). None: nothing
        to add. Reads only."""
        return None

    def stats_lines(self, detail: dict) -> list[str]:
        """`stats`'s result as text lines."""
        return []

    def upkeep(self, maps, snapshot, memory: dict) -> None:
        """The node's periodic work on the kernel's side, run by the
        controller when idle, every few seconds and once as it stops (the
        filter gives iptables-legacy's counters the packets the fast path
        decided). `maps(name)` opens one of the namespace's pinned maps
        (None if absent); `memory` is the node's own JSON-able dict, which
        the controller keeps as long as the datapath (across --keep
        restarts). An exception is logged, never fatal."""

    def stats_series(self, detail: dict) -> list["Series"]:
        """`stats`'s result as Prometheus counters (controller/metrics.py
        adds the netns label and groups them by name)."""
        return []

    def refreshed(self, table: str, messages) -> frozenset[bytes]:
        """Keys of `table` to rewrite even if unchanged, because a netlink
        message announced them and the datapath writes these entries too."""
        return frozenset()

    def __repr__(self) -> str:
        return f"<node {self.name} stage={self.stage.name}>"


@dataclass(frozen=True)
class Series:
    """One sample of a node's metric: its name (without the linuxfp_
    prefix), help text, labels, value, and whether it is a counter (only
    grows while `epoch` stays the same: a reading lower than one before is
    a transient one) or a gauge."""
    name: str
    help: str
    labels: tuple[tuple[str, str], ...]
    value: float
    kind: str = "counter"
    epoch: str = ""          # e.g. the ruleset generation the count belongs to


_REGISTRY: list[Node] = []
_loaded_external = False


def register(node: Node) -> Node:
    """Add a node (once per name); returns it, so a module can say
    `NODE = register(MyNode())`."""
    if not node.name or not node.name.isidentifier():
        raise ValueError(f"node name {node.name!r} is not a C identifier")
    for known in _REGISTRY:
        if known.name == node.name:
            if type(known) is type(node):
                return known
            raise ValueError(f"a node named {node.name!r} is registered already")
    if not node.header.is_file():
        raise ValueError(f"node {node.name!r}: header {node.header} not found")
    _REGISTRY.append(node)
    return node


def _load_external() -> None:
    global _loaded_external
    if _loaded_external:
        return
    _loaded_external = True
    for path in filter(None, os.environ.get("LINUXFP_NODES", "").split(":")):
        spec = importlib.util.spec_from_file_location(f"linuxfp_node_{Path(path).stem}", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"LINUXFP_NODES: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


# The built-in nodes' modules, in the order that numbers their counters:
# the same in every process (the controller's, `linuxfp stats`', a test's),
# whichever of them a process happened to import first.
_BUILTIN_MODULES = ("router", "transmit", "iptables_filter", "bridge", "bridge_filter", "bridge_tx", "conntrack",
                    "nat_out")


def registered() -> tuple[Node, ...]:
    """Every node: the built-in ones in _BUILTIN_MODULES' order, then those
    LINUXFP_NODES adds, in registration order (the order of their
    counters)."""
    global _registered
    if _registered is None or len(_registered) != len(_REGISTRY):
        # Imported here, not at the top: each built-in imports this package
        # (and registers itself).
        for module in _BUILTIN_MODULES:
            importlib.import_module(f"{__name__}.{module}")
        _load_external()
        rank = {f"{__name__}.{module}": i for i, module in enumerate(_BUILTIN_MODULES)}
        _registered = tuple(sorted(_REGISTRY, key=lambda n: rank.get(type(n).__module__, len(rank))))
    return _registered


_registered: tuple[Node, ...] | None = None   # asked for per event batch: kept


def node_named(name: str) -> Node:
    for node in registered():
        if node.name == name:
            return node
    raise ValueError(f"unknown node {name!r} (registered: {', '.join(n.name for n in registered())})")


def in_stage_order(nodes: Iterable[Node]) -> tuple[Node, ...]:
    return tuple(sorted(nodes, key=lambda n: n.stage))


def paths_through(nodes: tuple[Node, ...]) -> tuple[tuple[str, tuple[Node, ...]], ...]:
    """The paths a packet can take through a pipeline (its nodes in stage
    order), each with what sends it there: behind a node that decides
    before IP (a bridge), the frames it forwards skip the IP stages (the
    compiled pipeline skips them: templates/pipeline.c.j2), and the frames
    it hands up to IP skip the stages that only act on what it forwarded
    (br_netfilter's FORWARD); a second path only where a node decides on
    it. Otherwise one path, unnamed."""
    first = next((i for i, n in enumerate(nodes) if n.decides and n.stage < Stage.PREROUTING), None)
    if first is None:
        return (("", nodes),)
    head, tail = nodes[: first + 1], nodes[first + 1:]
    paths = [(f"forwarded by {nodes[first].name}", head + tuple(n for n in tail if not n.stage.is_ip))]
    handed_up = tuple(n for n in tail if n.stage >= Stage.PREROUTING)
    if any(n.decides for n in handed_up):
        paths.append(("handed up to IP", head + handed_up))
    return tuple(paths)


__all__ = ["Node", "Stage", "register", "registered", "node_named", "in_stage_order", "paths_through"]


def state_maps() -> frozenset[str]:
    """Every registered node's state maps (Node.state_maps)."""
    return frozenset(name for node in registered() for name in node.state_maps)
