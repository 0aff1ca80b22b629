"""Graph → text, JSON-ready dict, or Graphviz dot for `linuxfp graph`."""
from __future__ import annotations

from .model import Graph, flag_names


def to_text(graph: Graph) -> str:
    lines = []
    for p in graph.pipelines:
        lines.append(f"{p.ifname} (ifindex {p.ifindex}) [{p.hook}]: " + " -> ".join(("parse", *p.nodes, "egress")))
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
    out = ["digraph linuxfp {", "  rankdir=LR;", '  kernel [shape=box, label="Linux kernel path"];']
    for p in graph.pipelines:
        prev = f'"{p.ifname}"'
        out.append(f'  {prev} [shape=ellipse, label="{p.ifname}\\n{p.hook}"];')
        for node in p.nodes:
            name = f'"{p.ifname}.{node}"'
            out.append(f'  {name} [shape=box, label="{node}"];')
            out.append(f"  {prev} -> {name};")
            out.append(f'  {name} -> kernel [style=dashed, label="pass"];')
            prev = name
        out.append(f'  {prev} -> "egress" [label="redirect"];')
    for s in graph.skipped:
        out.append(f'  "{s.ifname}" [shape=ellipse, style=dotted];')
        out.append(f'  "{s.ifname}" -> kernel [style=dotted];')
    out.append("}")
    return "\n".join(out)
