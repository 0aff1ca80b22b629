"""Graph → text, JSON-ready dict, or Graphviz dot for `linuxfp graph`."""
from __future__ import annotations

from .model import Graph, flag_names


def to_text(graph: Graph) -> str:
    lines = []
    for p in graph.pipelines:
        lines.append(f"{p.ifname} (ifindex {p.ifindex}) [{p.hook}]: " + " -> ".join(("parse", *p.nodes, "egress")))
        paths = p.paths()
        if len(paths) > 1:
            width = max(len(via) for via, _ in paths)
            lines += [f"  {via + ':':<{width + 1}} " + " -> ".join(("parse", *nodes, "egress")) for via, nodes in paths]
        if p.hook_note:
            lines.append(f"  tc rather than xdp: {p.hook_note}")
    for s in graph.skipped:
        lines.append(f"{s.ifname} (ifindex {s.ifindex}): kernel path — {s.reason}")
    for node, notes in graph.notes:
        lines.append(f"{node}:")
        lines += [f"  {line}" for line in notes]
    if graph.ifaces:
        lines.append("interface facts:")
        for f in graph.ifaces:
            lines.append(f"  ifindex {f.ifindex}: mtu {f.mtu} {','.join(flag_names(f.flags)) or '-'}")
    if graph.tables:
        lines.append("tables:")
        for t in graph.tables:
            lines.append(f"  {t.name} ({t.owner}): {len(t.entries)} entries — {t.describe}")
    return "\n".join(lines)


def to_dot(graph: Graph) -> str:
    """Each ingress with its hook (and why TC) and its nodes as the DAG of
    the paths through them (a bridge's forwarded frames and the frames it
    hands up to IP branch), each node able to pass to the kernel; the
    ingresses left on the kernel path, with their reason on the edge."""
    out = ["digraph linuxfp {", "  rankdir=LR;", '  node [fontname="sans"]; edge [fontname="sans", fontsize=10];',
           '  kernel [shape=box, style=filled, fillcolor=lightgrey, label="Linux kernel path"];']
    for p in graph.pipelines:
        ingress = _quote(p.ifname)
        hook = p.hook + (f"\n(tc: {_wrap(p.hook_note)})" if p.hook_note else "")
        out.append(f"  {ingress} [shape=ellipse, label={_quote(p.ifname, hook)}];")
        for node in p.nodes:
            name = _quote(f"{p.ifname}.{node}")
            out.append(f"  {name} [shape=box, label={_quote(node)}];")
            out.append(f'  {name} -> kernel [style=dashed, label="pass"];')
        # the DAG: each path's edges once; where the paths part, each edge
        # labelled with what takes it
        paths = p.paths()
        shared = len(_common_prefix([nodes for _, nodes in paths]))
        drawn: set[tuple[str, str]] = set()
        for via, nodes in paths:
            prev = ingress
            for position, node in enumerate(nodes):
                name = _quote(f"{p.ifname}.{node}")
                if (prev, name) not in drawn:
                    taken = via if len(paths) > 1 and position == shared else ""
                    out.append(f"  {prev} -> {name}" + (f" [label={_quote(taken)}]" if taken else "") + ";")
                    drawn.add((prev, name))
                prev = name
            if (prev, '"egress"') not in drawn:
                out.append(f'  {prev} -> "egress" [label="redirect"];')
                drawn.add((prev, '"egress"'))
    for s in graph.skipped:
        out.append(f"  {_quote(s.ifname)} [shape=ellipse, style=dotted];")
        out.append(f"  {_quote(s.ifname)} -> kernel [style=dotted, label={_quote(_wrap(s.reason))}];")
    out.append("}")
    return "\n".join(out)


def _common_prefix(sequences: list[tuple[str, ...]]) -> tuple[str, ...]:
    prefix = sequences[0]
    for other in sequences[1:]:
        n = 0
        while n < min(len(prefix), len(other)) and prefix[n] == other[n]:
            n += 1
        prefix = prefix[:n]
    return prefix


def _quote(*lines: str) -> str:
    """A dot string of `lines` (and of the line breaks inside them), escaped."""
    text = "\n".join(lines).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\n", "\\n") + '"'


def _wrap(text: str, width: int = 48) -> str:
    """`text` cut to lines of about `width` characters (dot does not wrap)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) if text else text
