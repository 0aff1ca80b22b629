"""Snapshot → Graph: per ingress, the registered nodes that apply, where
they can reproduce Linux exactly, and the tables they own. Pure: reads only
the snapshot (and remembers the pipelines, each node's tables and notes
while the fields they read are the same objects, so an event recomputes
only what reads what it changed: a neighbour event, transmit's tables)."""
from __future__ import annotations

from linuxfp.state.model import link_order

from .interfaces import ARPHRD_ETHER, MAX_IFACE_SLOTS, forward_length_cap6, iface_facts, interface_tables
from .model import Graph, Pipeline, Skipped
from .nodes import Node, Stage, in_stage_order, registered
from .nodes.router import forward_length_cap, needs_full_source_check
from .obstacles import ingress_obstacles, namespace_obstacles
from .remember import forget_stale, remembered, remembered_each
from .shape import Shape

XDP_ACT_BASIC = 1 << 0
HOOK_CHOICES = ("auto", "xdp", "tc")


def build_graph(snapshot, hook: str = "auto", *, tidy: bool = True) -> Graph:
    """Per ingress interface, the pipeline Linux's configuration calls for.
    tidy=False leaves dropping what `snapshot` made stale (forget_stale: a
    scan of everything remembered, kept alive meanwhile but never served
    stale) to the caller: the controller does it once idle, outside the
    response time."""
    if hook not in HOOK_CHOICES:
        raise ValueError(f"unknown hook {hook!r} (expected one of {', '.join(HOOK_CHOICES)})")
    nodes = registered()
    facts = remembered("graph.facts", snapshot, _facts)
    pipelines, skipped = remembered("graph.pipelines", snapshot, _pipelines, hook, nodes)
    tables = remembered("graph.interface_tables", snapshot, _interface_tables)
    for node in nodes:
        tables += remembered(f"{node.name}.tables", snapshot, _tables_of, node)
    notes = tuple((node.name, lines) for node in nodes
                  if (lines := remembered(f"{node.name}.notes", snapshot, _notes_of, node)))
    if tidy:
        forget_stale(snapshot)
    return Graph(pipelines, skipped, facts, tables, notes)


def _pipelines(snapshot, hook: str, nodes: tuple[Node, ...]) -> tuple[tuple[Pipeline, ...], tuple[Skipped, ...]]:
    """Per ingress, its pipeline or why it has none (each remembered on its
    own: a new interface costs its own decision, not every interface's)."""
    pipelines, skipped = [], []
    for decided in remembered_each("graph.pipeline", snapshot, _pipeline, snapshot.links, hook, nodes,
                                   in_stage_order(nodes), key=link_order):
        (pipelines if isinstance(decided, Pipeline) else skipped).append(decided)
    return tuple(pipelines), tuple(skipped)


def _pipeline(snapshot, link, hook: str, nodes: tuple[Node, ...], ordered: tuple[Node, ...]) -> Pipeline | Skipped:
    """`link`'s pipeline, or why it has none (`ordered`: `nodes` in stage order)."""
    if link.index >= MAX_IFACE_SLOTS:
        # no facts, no counters: a program there could only pass, uncounted
        return Skipped(link.index, link.name, f"ifindex {link.index} is beyond the fast path's "
                                              f"interface arrays (below {MAX_IFACE_SLOTS})")
    chosen = tuple(n for n in ordered if n.applies(snapshot, link))
    needs = {n.name: n.needs(snapshot, link) for n in chosen}
    chosen = _needed(chosen, needs)
    shared = remembered("graph.namespace_obstacles", snapshot, namespace_obstacles, by_answer=True)
    chosen, reason = _covered(snapshot, link, nodes, chosen, needs, shared)
    hook_chosen, note = None, ""
    if reason is None:
        hook_chosen, reason, note = _choose_hook(link, hook, snapshot, chosen)
    if reason:
        return Skipped(link.index, link.name, reason)
    return Pipeline(link.index, link.name, _shape(hook_chosen, tuple(n.name for n in chosen)), hook_note=note)


def _facts(snapshot):
    # By answer: these read every route, and an address's local route comes
    # and goes with each `ip addr add/del` without changing them — the facts
    # are then reused, not worked out again for every interface.
    full_check = remembered("graph.full_source_check", snapshot, needs_full_source_check, by_answer=True)
    cap = remembered("graph.forward_length_cap", snapshot, forward_length_cap, by_answer=True)
    cap6 = remembered("graph.forward_length_cap6", snapshot, forward_length_cap6, by_answer=True)
    # Each interface's remembered on its own, as its pipeline is: the item
    # is the link with its sysctls (another device's coming changes the
    # snapshot's sysctls, not this device's).
    # (one dict for all: Sysctls.for_ifindex's bisect per link costs more)
    confs = {conf.ifindex: conf for conf in snapshot.sysctls.interfaces}     # (one per device)
    return tuple(remembered_each("graph.iface_facts", snapshot, _iface_facts,
                                 ((link, confs.get(link.index)) for link in snapshot.links
                                  if link.link_type == ARPHRD_ETHER),
                                 full_check, cap, cap6, key=_link_order_of))


def _link_order_of(item) -> int:
    return link_order(item[0])


def _iface_facts(snapshot, item, full_check: bool, cap: int, cap6: int):
    link, conf = item
    return iface_facts(link, conf, snapshot, full_check, cap, cap6)


def _interface_tables(snapshot):
    return interface_tables(remembered("graph.facts", snapshot, _facts))


def _tables_of(snapshot, node: Node):
    return node.tables(snapshot)


def _notes_of(snapshot, node: Node):
    return node.notes(snapshot)


_shapes: dict[tuple[str, tuple[str, ...]], Shape] = {}


def _shape(hook: str, names: tuple[str, ...]) -> Shape:
    """The Shape for `hook` and `names`, made (and its names checked) once:
    every interface of a namespace asks for one of a few."""
    shape = _shapes.get((hook, names))
    if shape is None:
        shape = _shapes[(hook, names)] = Shape(hook, names)
    return shape


def _needed(chosen: tuple[Node, ...], needs: dict[str, tuple[str, ...]]) -> tuple[Node, ...]:
    """`chosen` without the nodes none of whose needed nodes (`needs`, per
    node: Node.needs on this interface) is in it."""
    while True:
        names = {n.name for n in chosen}
        kept = tuple(n for n in chosen if not needs[n.name] or names.intersection(needs[n.name]))
        if len(kept) == len(chosen):
            return kept
        chosen = kept


def _covered(snapshot, link, nodes: tuple[Node, ...], chosen: tuple[Node, ...], needs,
             shared) -> tuple[tuple[Node, ...], str | None]:
    """The pipeline without the deciding nodes whose decisions would meet an
    obstacle no node covers (a decision is covered by its node and by the
    nodes after it that do not decide, e.g. FORWARD after routing), and why
    the ingress stays on the kernel path when no deciding node is left."""
    obstacles = shared + ingress_obstacles(link, snapshot)
    deciders = [n for n in chosen if n.decides]
    if not deciders:
        covered = frozenset().union(*(n.covers for n in chosen))
        uncovered = next((o for o in shared if o.name not in covered), None)
        if uncovered is not None:
            return chosen, _uncovered(snapshot, link, nodes, uncovered)
        reasons = [n.blocker(snapshot, link) for n in nodes if n.decides]
        return chosen, next((r for r in reasons if r), "no node decides for this interface")
    first_uncovered = None
    for decider in deciders:
        # what the nodes after it cover (not the IP stages for a bridging
        # decision: the frames it bridges skip them)
        after = [n for n in chosen if not n.decides and n.stage > decider.stage
                 and not (decider.stage < Stage.PREROUTING and n.stage.is_ip)]
        covered = decider.covers.union(*(n.covers for n in after))
        uncovered = next((o for o in obstacles if o.name not in covered), None)
        if uncovered is not None:
            chosen = tuple(n for n in chosen if n is not decider)
            first_uncovered = first_uncovered or uncovered
    chosen = _needed(chosen, needs)
    if not any(n.decides for n in chosen):
        return chosen, _uncovered(snapshot, link, nodes, first_uncovered)
    return chosen, None


def _uncovered(snapshot, link, nodes: tuple[Node, ...], obstacle) -> str:
    """An obstacle's reason, with why the nodes that could cover it do not."""
    why = [n.blocker(snapshot, link) for n in nodes if obstacle.name in n.covers]
    why = list(dict.fromkeys(w for w in why if w))     # (nodes sharing a limit say it once)
    return f"{obstacle.reason}: {'; '.join(why)}" if why else obstacle.reason


def _xdp_blocker(link, snapshot, chosen: tuple[Node, ...]) -> str | None:
    """Why XDP could not reproduce Linux on this ingress (None: it can)."""
    if not link.xdp_features & XDP_ACT_BASIC:
        return "the device has no native XDP"
    if not link.xdp_sees_vlan_tags:
        return "the driver cannot report offloaded VLAN tags to XDP (rx-metadata vlan-tag)"
    return next((r for r in (n.hook_blocker(snapshot, link, "xdp") for n in chosen) if r), None)


def _choose_hook(link, requested: str, snapshot, chosen) -> tuple[str, str | None, str]:
    """The hook for this ingress, or why the requested one cannot be used;
    and, when `auto` took TC, why (XDP could not be exact here, or would
    change what a user sees)."""
    if requested == "tc":
        blocker = next((r for r in (n.hook_blocker(snapshot, link, "tc") for n in chosen) if r), None)
        return "tc", (f"tc: {blocker}" if blocker else None), ""
    blocker = _xdp_blocker(link, snapshot, chosen)
    if requested == "xdp":
        return "xdp", (f"xdp: {blocker}; use --hook tc or auto" if blocker else None), ""
    preferred = None if blocker else next((r for r in (n.prefers_tc(snapshot, link) for n in chosen) if r), None)
    if blocker or preferred:
        tc_blocker = next((r for r in (n.hook_blocker(snapshot, link, "tc") for n in chosen) if r), None)
        if tc_blocker:
            return "tc", f"xdp: {blocker or preferred}; tc: {tc_blocker}", ""
        return "tc", None, blocker or preferred or ""
    return "xdp", None, ""


def refreshed(graph: Graph, messages) -> dict[str, frozenset[bytes]]:
    """Per table, the keys its owner wants rewritten because of `messages`
    (a node's `refreshed`), even where the desired entry did not change."""
    owners = {n.name: n for n in registered()}
    out = {}
    for table in graph.tables:
        owner = owners.get(table.owner)
        keys = owner.refreshed(table.name, messages) if owner is not None else frozenset()
        if keys:
            out[table.name] = keys
    return out
