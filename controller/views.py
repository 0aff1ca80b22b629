"""What `linuxfp status` and `linuxfp stats` show, read from pins and /run
(so they work whether or not a controller is running)."""
from __future__ import annotations

import os
import struct
import threading

from linuxfp import datapath as dp
from linuxfp.synth import counters

from . import lease, runtime_files
from .installer import link_runs_here, origins_path
from .namespace import NamespaceLayout, netns_cookie
from .version import version


def status(layout: NamespaceLayout) -> dict:
    saved = runtime_files.load_installed(layout)
    pid = runtime_files.running_controller(layout)
    origins = runtime_files.load_json(origins_path(layout)) or {}
    hook_notes = (runtime_files.load_json(layout.hooks_file) or {}) if pid else {}
    interfaces = []
    here = netns_cookie() == layout.cookie      # (benches read a namespace's status from outside it)
    for p in saved.pipelines if saved else ():
        entry = {"ifname": p.ifname, "ifindex": p.ifindex, "hook": p.hook, "mode": p.mode,
                 "shape": p.shape, "prog_id": p.prog_id, "link_id": p.link_id,
                 "state": "error" if p.error else "active", "origin": _origin(origins, p)}
        if hook_notes.get(str(p.ifindex)) and p.hook == "tc":
            entry["hook_reason"] = hook_notes[str(p.ifindex)]
        if p.error:
            entry["error"] = p.error
        else:
            # pinned (--keep), or held by the running controller's fd
            path = layout.link_pin(p.ifindex, p.hook)
            try:
                link = dp.Link.from_pinned(path) if os.path.exists(path) else dp.Link.from_id(p.link_id)
            except dp.BpfError:
                entry["state"] = "missing"
            else:
                try:
                    info = dp.link_info(link.fd)
                    # (a device moved away keeps its link: asked where ifindexes are ours)
                    if (not link_runs_here(link, p) if here else info.get("ifindex") != p.ifindex):
                        entry["state"] = "missing"
                    entry["prog_id"] = info.get("prog_id", p.prog_id)
                except dp.BpfError as e:
                    entry["state"] = f"unreadable: {e}"
                finally:
                    link.close()
        interfaces.append(entry)
    return {"version": version(), "namespace": layout.name, "controller_pid": pid, "interfaces": interfaces,
            "kernel_path": runtime_files.load_json(layout.kernel_path_file) or [],
            "lease": lease_state(layout), "windows": runtime_files.load_json(layout.windows_file) if pid else None}


def _origin(origins: dict, pipeline) -> str | None:
    """Where the installed object came from: "precompiled" (shipped in the
    package), "cache" or "compiled"; None when not recorded (an error, or
    a datapath installed by a version that did not record it)."""
    record = origins.get(str(pipeline.ifindex))
    if pipeline.error or not isinstance(record, dict) or record.get("digest") != pipeline.digest:
        return None
    return record.get("origin")


def lease_state(layout: NamespaceLayout) -> dict | None:
    """The pinned lease: whether the datapath may act."""
    path = layout.shared_map_pin(lease.LEASE_MAP)
    if not os.path.exists(path):
        return None
    m = dp.Map.from_pinned(path)
    try:
        state = lease.read(m)
    finally:
        m.close()
    sent = 0
    sent_path = layout.shared_map_pin(lease.SENT_MAP)
    if os.path.exists(sent_path):
        sent_map = dp.Map.from_pinned(sent_path)
        try:
            sent = lease.read_sent(sent_map)
        finally:
            sent_map.close()
    generations = _generations(layout)
    return {"held": state.held, "watched_changes": state.changes_started + state.sysctl_writes + sent,
            "sysctl_writes": state.sysctl_writes, "acknowledged": state.watch_acked,
            "addresses": _current(state.addr_genid, generations and generations.addr_genid),
            "nf_tables": _current(state.nft_seq, generations and generations.nft_seq)}


def _current(taken_in: int | None, now: int | None) -> str:
    """"current" while the kernel's generation is the one the lease holds
    (the datapath acts), "changed" when not (it passes), "unguarded", or
    "unknown" where it cannot be read."""
    if taken_in is None:
        return "unguarded"
    if now is None:
        return "unknown"
    return "current" if now == taken_in else "changed"


# pin path -> the program opened from it, the last one only: waits poll the
# lease every 0.5 ms (and the metrics server's threads read it concurrently)
_generation_readers: dict[str, dp.Program] = {}
_readers_lock = threading.Lock()


def _generations(layout: NamespaceLayout) -> lease.Generations | None:
    """The kernel's generations, read through the controller's pinned
    lfp_read_generations from this thread's namespace; None where they
    cannot be read."""
    path = layout.generations_pin
    with _readers_lock:
        program = _generation_readers.pop(path, None)
    try:
        if program is None:
            program = dp.Program.from_pinned(path)
        generations = lease.read_generations(program)
    except (lease.GenerationsUnknown, dp.BpfError, OSError, struct.error):
        if program is not None:
            program.close()
        return None
    with _readers_lock:
        for other in list(_generation_readers):      # one kept: a waiter watches one namespace
            _generation_readers.pop(other).close()
        if _generation_readers.setdefault(path, program) is not program:
            program.close()
    return generations


def lease_acts(state: dict | None) -> bool:
    """Whether the datapath may act on what `lease_state` read: the lease
    held, every watched change re-read, the addresses and nf_tables current."""
    return bool(state) and state["held"] and state["watched_changes"] == state["acknowledged"] \
        and state["addresses"] != "changed" and state.get("nf_tables") != "changed"


def read_counters(layout: NamespaceLayout, ifindex: int) -> dict[str, int] | None:
    path = layout.counters_pin(ifindex)
    if not os.path.exists(path):
        return None
    m = dp.Map.from_pinned(path)
    try:
        by_id = {struct.unpack("<I", key)[0]: sum(struct.unpack("<Q", v[:8])[0] for v in values)
                 for key, values in m.items_percpu()}      # one dump, not a lookup per counter
    finally:
        m.close()
    return {c.name: by_id.get(c.id, 0) for c in counters()}


def stats(layout: NamespaceLayout, nodes: bool = True) -> dict:
    """Packet counts per interface, node and reason; with `nodes`, what
    each node counted beyond them (node_stats: the filter's per rule)."""
    saved = runtime_files.load_installed(layout)
    table = {c.name: c for c in counters()}
    interfaces = []
    for p in saved.pipelines if saved else ():
        values = read_counters(layout, p.ifindex)
        if values is None:
            continue
        nodes: dict[str, dict] = {}
        for name, value in values.items():
            c = table[name]
            node = nodes.setdefault(c.node, {"fast_path": 0, "dropped": 0, "fast": {}, "passed": {}, "drops": {},
                                             "events": {}})
            if c.kind == "event":
                if value:
                    node["events"][name] = value    # beside the verdicts: e.g. FIB cache hits
            elif c.kind == "fast":
                node["fast_path"] += value
                if value:
                    node["fast"][name] = value      # how: forwarded, into a peer, ...
            elif c.kind == "drop":
                node["dropped"] += value
                if value:
                    node["drops"][name] = value
            elif value:
                node["passed"][name] = value
        interfaces.append({
            "ifname": p.ifname, "ifindex": p.ifindex, "hook": p.hook,
            "fast_path": sum(n["fast_path"] for n in nodes.values()),
            "passed_to_kernel": sum(sum(n["passed"].values()) for n in nodes.values()),
            "dropped": sum(n["dropped"] for n in nodes.values()),
            "nodes": nodes,
        })
    return {"namespace": layout.name, "interfaces": interfaces,
            "response_time": runtime_files.load_json(layout.response_file),
            "nodes": node_stats(layout) if interfaces and nodes else {}}


def node_stats(layout: NamespaceLayout, published: dict | None = None) -> dict:
    """What each node counted beyond its reasons (Node.stats): e.g. the
    filter's packets per iptables rule. Reads the pinned maps and what the
    controller published for them (Node.publish; `published` when the
    controller itself asks) — never the kernel's configuration, whose
    netfilter reads the filter's watch would take for a change."""
    from linuxfp.graph.nodes import registered

    opened: dict[str, dp.Map | None] = {}

    def maps(name: str):
        if name not in opened:
            path = layout.shared_map_pin(name)
            opened[name] = dp.Map.from_pinned(path) if os.path.exists(path) else None
        return opened[name]

    if published is None:
        published = runtime_files.load_json(layout.published_file) or {}
    out = {}
    try:
        for node in registered():
            try:
                detail = node.stats(maps, published.get(node.name))
            except Exception as exc:     # one node's reading never hides the counters
                detail = {"error": f"{type(exc).__name__}: {exc}"}
            if detail:
                out[node.name] = detail
        return out
    finally:
        for m in opened.values():
            if m is not None:
                m.close()


def with_stats(status_data: dict, stats_data: dict, detail: bool = False) -> dict:
    """`status_data` with each interface's packet counts from `stats_data`
    (`status -s`); with `detail`, per node and reason too (`-s -s`)."""
    counted = {i["ifindex"]: i for i in stats_data["interfaces"]}
    interfaces = []
    for entry in status_data["interfaces"]:
        found = counted.get(entry["ifindex"])
        if found is not None:
            keys = ("fast_path", "passed_to_kernel", "dropped") + (("nodes",) if detail else ())
            entry = {**entry, "stats": {k: found[k] for k in keys}}
        interfaces.append(entry)
    return {**status_data, "interfaces": interfaces}


def _running(pid: int | None) -> str:
    if not pid:
        return "not running"
    return f"running (pid {pid})" if pid > 0 else "running (in a pid namespace this one cannot see)"


def status_text(data: dict) -> str:
    lines = [f"namespace {data['namespace']}: controller {_running(data['controller_pid'])}"]
    held = data.get("lease")
    if held is not None:
        lines.append("  lease: " + ("held" if held["held"] else "lapsed: every packet goes to the kernel")
                     + ("; an address changed: the controller has not read it yet" if held["addresses"] == "changed"
                        else "")
                     + ("; nf_tables changed: the controller has not read it yet"
                        if held.get("nf_tables") == "changed" else ""))
    if not data["interfaces"]:
        lines.append("  nothing attached")
    for i in data["interfaces"]:
        line = (f"  {i['ifname']:<16} {i['hook']:<4} {i['mode'] or '-':<8} {i['shape']:<14} prog {i['prog_id']}  "
                f"{i['state']}" + (f" ({i['origin']})" if i.get("origin") else ""))
        if i.get("stats"):
            line += "\n" + "\n".join(_stats_lines(i["stats"], indent="    "))
        if i.get("hook_reason"):
            line += f"\n    tc rather than xdp: {i['hook_reason']}"
        if i.get("error"):
            line += f"\n    {i['error'].splitlines()[0] if i['error'] else ''}"
        lines.append(line)
    if data.get("windows"):
        lines.append("  windows (how stale the fast path can be about each source):")
        lines += [f"    {source:<62} {bound}" for source, bound in data["windows"].items()]
    return "\n".join(lines)


def _stats_lines(counted: dict, indent: str = "") -> list[str]:
    """Packet counts of one interface: the totals, then (when `counted` has
    its nodes) each drop, pass and event by node and reason."""
    descriptions = {c.name: c.description for c in counters()}
    lines = [f"{indent}fast path {counted['fast_path']}, passed to kernel {counted['passed_to_kernel']}, "
             f"dropped {counted.get('dropped', 0)}"]
    for node, n in sorted(counted.get("nodes", {}).items()):
        for reason, value in sorted(n.get("drops", {}).items(), key=lambda kv: -kv[1]):
            lines.append(f"{indent}    {node:<8} drop {reason:<22} {value:>12}  {descriptions.get(reason, '')}")
        for reason, value in sorted(n["passed"].items(), key=lambda kv: -kv[1]):
            lines.append(f"{indent}    {node:<8} pass {reason:<22} {value:>12}  {descriptions.get(reason, '')}")
        for event, value in sorted(n.get("events", {}).items()):
            lines.append(f"{indent}    {node:<8} seen {event:<22} {value:>12}  {descriptions.get(event, '')}")
    return lines


def stats_text(data: dict) -> str:
    lines = []
    for i in data["interfaces"]:
        first, *rest = _stats_lines(i)
        lines.append(f"{i['ifname']} [{i['hook']}]: {first}")
        lines += rest
    if data.get("nodes"):
        from linuxfp.graph.nodes import node_named

        for name, detail in data["nodes"].items():
            lines += node_named(name).stats_lines(detail)
    rt = data.get("response_time")
    if rt and rt.get("all", {}).get("n"):
        a = rt["all"]
        lines.append(f"response time: n={a['n']} p50={a['p50_ms']:.3f} ms p99={a['p99_ms']:.3f} ms max={a['max_ms']:.3f} ms")
    if not lines:
        lines.append("nothing attached")
    return "\n".join(lines)


def namespaces_text(data: dict) -> str:
    rows = data["namespaces"]
    if not rows:
        return "no namespace has LinuxFP pins"
    lines = []
    for n in rows:
        pid = n["controller_pid"]
        controller = ("controller ?" if pid < 0 else f"controller {pid}") if pid else "no controller"
        lines.append(f"{n['namespace']:<24} {controller:<18} links {n['serving']}/{n['links']} serving"
                     + ("  STALE (linuxfp detach --stale removes it)" if n["stale"] else ""))
    return "\n".join(lines)
