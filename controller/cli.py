"""The `linuxfp` command line."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

from .lab_cli import add_lab_parser
from .preflight import PreflightError, check_runtime
from .shapes_cli import add_parser as add_shapes_parser
from .version import version

EXIT_USAGE = 2


def _print(data: dict, as_json: bool, text) -> None:
    if as_json:
        print(json.dumps(data, indent=None if not sys.stdout.isatty() else 2))
    else:
        print(text(data))


def cmd_run(args) -> int:
    from .daemon import Controller, RunOptions

    from .runtime_files import AlreadyRunning

    if args.metrics is not None:
        from .metrics import require_client

        require_client()     # before anything is attached
    check_runtime(need_compiler=_needs_compiler())
    controller = Controller(RunOptions(hook=args.hook, keep=args.keep, netlink_rcvbuf=args.netlink_rcvbuf,
                                       metrics=args.metrics))
    try:
        return controller.run()
    except AlreadyRunning as e:
        print(f"linuxfp run: {e}", file=sys.stderr)
        return 1


def _needs_compiler() -> bool:
    """Without clang, `run` still works when objects for every shape are
    shipped from these sources (asked only then: it renders every shape)."""
    from linuxfp.synth import ToolMissing
    from linuxfp.synth.compile import find_clang
    from linuxfp.synth.precompile import shipped_set_current

    try:
        find_clang()
        return True
    except ToolMissing:
        return not shipped_set_current()


def cmd_graph(args) -> int:
    from linuxfp.graph import build_graph, to_dot, to_text
    from linuxfp.state import read_snapshot, tcx

    from .daemon import current_layout
    from .lease import namespace_lease_ids

    # tcx programs are ours by the lease map they use, as for the controller
    # (where the pins cannot be read, e.g. unprivileged: by name)
    try:
        tcx.own_lease_maps(namespace_lease_ids(current_layout()))
    except Exception:  # noqa: BLE001 - a refinement; the name rule stands without it
        pass
    graph = build_graph(read_snapshot(), args.hook)
    if args.png:
        _draw_png(to_dot(graph), args.png)
        _print({"png": os.path.abspath(args.png)}, args.json, lambda data: f"graph drawn into {data['png']}")
    elif args.dot:
        print(to_dot(graph))
    elif args.json:
        print(json.dumps(graph.to_dict()))
    else:
        print(to_text(graph))
    return 0


def _draw_png(dot: str, path: str) -> None:
    """Render Graphviz `dot` text into a PNG file with the dot program."""
    import shutil
    import subprocess

    program = shutil.which("dot")
    if program is None:
        raise PreflightError("drawing the graph needs Graphviz: apt-get install graphviz")
    done = subprocess.run([program, "-Tpng", "-o", path], input=dot, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PreflightError(f"dot could not draw {path}: {done.stderr.strip()}")


def cmd_status(args) -> int:
    from .daemon import current_layout
    from .views import namespaces_text, stats, status, status_text, with_stats

    check_runtime(need_compiler=False)
    if args.all:
        from linuxfp.datapath import bpffs_root

        from .reclaim import describe, pinned_namespaces

        rows = [describe(layout).to_dict() for layout in pinned_namespaces(bpffs_root())]
        _print({"namespaces": rows}, args.json, namespaces_text)
        return 0
    data = status(current_layout())
    if args.check:
        # For readiness probes and health checks: the exit status says it.
        lease = data.get("lease") or {}
        problem = ("no controller runs in this namespace" if not data["controller_pid"]
                   else "the datapath is not acting on current state (lease not held)" if not lease.get("held")
                   else "an address changed: the controller has not read it yet" if lease.get("addresses") == "changed"
                   else "nf_tables changed: the controller has not read it yet" if lease.get("nf_tables") == "changed"
                   else None)
        print(problem or f"ready: controller pid {data['controller_pid']}, lease held")
        return 1 if problem else 0
    if args.stats:
        data = with_stats(data, stats(current_layout(), nodes=False), detail=args.stats > 1)
    _print(data, args.json, status_text)
    return 0


def cmd_stats(args) -> int:
    from .daemon import current_layout
    from .views import stats, stats_text

    if args.prometheus:
        from .metrics import exposition, require_client

        require_client()
        check_runtime(need_compiler=False)
        sys.stdout.write(exposition(current_layout()))
        return 0
    check_runtime(need_compiler=False)
    _print(stats(current_layout()), args.json, stats_text)
    return 0


def cmd_systemd(args) -> int:
    from .systemd import install, next_steps

    written = install(args.prefix)
    for unit in written:
        print(f"{unit.action} {unit.path}")
    print(next_steps(args.prefix))
    return 0


def cmd_detach(args) -> int:
    from . import runtime_files
    from .daemon import current_layout
    from .installer import Installer

    check_runtime(need_compiler=False)
    layout = current_layout()
    if args.stale:
        from .reclaim import reclaim_stale

        gone = reclaim_stale(layout.bpffs)
        if args.json:
            print(json.dumps({"reclaimed": [g.to_dict() for g in gone]}))
        else:
            for g in gone:
                print(f"reclaimed {g.namespace}: {g.links} link(s), none serving an interface; no controller")
            print(f"{len(gone)} stale namespace(s) reclaimed")
        return 0
    pid = runtime_files.running_controller(layout)     # only a lock holder counts
    if pid == -1:
        # (never a guess: its own number names another process here)
        print("linuxfp detach: a controller this process cannot name (another pid namespace's, e.g. a "
              "container's) serves this namespace; stop it where it runs", file=sys.stderr)
        return 1
    if pid:
        os.kill(pid, signal.SIGTERM)                # it detaches everything itself
        deadline = time.monotonic() + 10
        # (the lock alone: naming the holder may scan /proc)
        while runtime_files.lock_held(layout) and time.monotonic() < deadline:
            time.sleep(0.05)
        if runtime_files.lock_held(layout):
            print(f"linuxfp detach: controller {pid} did not stop within 10 s", file=sys.stderr)
            return 1
    # Held while removing, so that neither a controller starting nor another
    # process's reclaim works on the same pins meanwhile.
    lock = runtime_files.ReclaimLock.take(layout, wait=1.0)
    if lock is None:
        print("linuxfp detach: another process holds this namespace's lock (a controller starting, "
              "another detach or a reclaim); run `linuxfp detach` again", file=sys.stderr)
        return 1
    try:
        saved = runtime_files.load_installed(layout)
        if not os.path.isdir(layout.pin_dir) and not (saved and saved.pipelines):
            runtime_files.remove_run_dir(layout)
            print(f"stopped controller {pid}; nothing left attached" if pid else "nothing attached")
            return 0
        from .reconcile import InstalledState

        removed = Installer(layout).remove_all(saved or InstalledState())
        runtime_files.remove_run_dir(layout)
    finally:
        os.close(lock)
    print(f"detached {removed} program(s)" + (f" left by controller {pid}" if pid else ""))
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    check_runtime()
    return run_demo(args.scenario, quick=args.quick, as_json=args.json)


def cmd_bench(args) -> int:
    from linuxfp.bench.cli import run_bench

    check_runtime()
    return run_bench(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="linuxfp",
        description="Accelerate this network namespace's Linux forwarding with a synthesized eBPF datapath.")
    parser.add_argument("-j", "--json", action="store_true", help="JSON output (like ip -j)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument("--version", action="version", version=f"linuxfp {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name, func, help_):
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("-j", "--json", action="store_true", default=argparse.SUPPRESS, help="JSON output")
        p.set_defaults(func=func)
        return p

    p = add("run", cmd_run, "run the controller in this network namespace until SIGINT/SIGTERM")
    p.add_argument("--hook", choices=("auto", "xdp", "tc"), default="auto",
                   help="where to attach: XDP, TC, or XDP where the device supports it (default); "
                        "XDP is always native (generic XDP cannot see VLAN tags the NIC or veth "
                        "peer moved out of the frame)")
    p.add_argument("--netlink-rcvbuf", type=int, default=None, metavar="BYTES",
                   help="receive buffer of the event sockets (default 32 MiB); a small one makes bursts "
                        "overrun it, which costs a full re-read, never exactness (fault testing)")
    p.add_argument("--keep", action="store_true",
                   help="on exit leave the datapath pinned and running; the next run adopts it")
    p.add_argument("--metrics", type=_metrics_address, default=None, metavar="ADDR:PORT",
                   help="serve Prometheus metrics at http://ADDR:PORT/metrics, in this network namespace "
                        "(e.g. 127.0.0.1:9469; docs/operations.md)")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="log lines on stderr: text, or one JSON object per line (for log collectors "
                        "that parse JSON, e.g. Kubernetes')")
    p = add("graph", cmd_graph, "print the packet-processing graph for the current configuration")
    p.add_argument("--hook", choices=("auto", "xdp", "tc"), default="auto")
    p.add_argument("--dot", action="store_true", help="Graphviz dot output")
    p.add_argument("--png", metavar="FILE", default=None,
                   help="draw the graph into FILE with Graphviz (Debian package graphviz)")
    p = add("status", cmd_status, "per interface: hook, mode, shape, program id")
    p.add_argument("--all", action="store_true",
                   help="every namespace with pins: its controller, the links still serving, whether stale")
    p.add_argument("--check", action="store_true",
                   help="exit 0 only while a controller runs here and holds the lease (readiness probes)")
    p.add_argument("-s", "--stats", action="count", default=0,
                   help="with each interface's packet counts (like ip -s); twice: with the reasons")
    p = add("stats", cmd_stats, "fast-path and pass-to-kernel counters, response times")
    p.add_argument("--prometheus", action="store_true",
                   help="Prometheus text format instead (for node_exporter's textfile collector)")
    p = add("detach", cmd_detach, "remove everything LinuxFP attached or pinned in this namespace")
    p.add_argument("--stale", action="store_true",
                   help="instead: remove the pins of every namespace with no controller and no interface served "
                        "(e.g. deleted namespaces)")
    p = add("demo", cmd_demo, "build a throw-away topology and show it accelerated")
    p.add_argument("scenario", choices=("router", "gateway", "bridge", "flannel"), nargs="?", default="router")
    p.add_argument("--quick", action="store_true", help="shorter measurement")
    p = add("bench", cmd_bench, "benchmark scenarios: Linux and LinuxFP side by side")
    p.add_argument("scenario")
    p.add_argument("--quick", action="store_true", help="short run that only proves the harness works")
    p.add_argument("--out", default=None, help="results directory (default bench/results)")
    p.add_argument("--repetitions", type=int, default=None)
    add_lab_parser(add)
    add_shapes_parser(add)
    p = add("systemd", cmd_systemd, "install the systemd units (docs/operations.md)")
    p.add_argument("action", choices=("install",),
                   help="install: write linuxfp.service and linuxfp@.service (idempotent) and say what to run next")
    p.add_argument("--prefix", default=None, metavar="DIR",
                   help="write the units into DIR instead of /etc/systemd/system")
    return parser


def _metrics_address(text: str) -> tuple[str, int]:
    from .metrics_server import parse_address

    try:
        return parse_address(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .logs import configure

    configure(logging.WARNING - 10 * min(args.verbose, 2) if args.command != "run"
              else logging.INFO - 10 * min(args.verbose, 1), getattr(args, "log_format", "text"))
    try:
        if args.command not in ("graph", "systemd", "shapes") and os.geteuid() != 0:
            # Before any heavy import: the one line a user needs.
            raise PreflightError("must run as root (needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)")
        return args.func(args)
    except PreflightError as e:
        print(f"linuxfp: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        from linuxfp.datapath import DependencyError

        from .metrics import MetricsUnavailable
        from .systemd import InstallError

        if isinstance(e, (DependencyError, MetricsUnavailable, InstallError)):
            print(f"linuxfp: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
