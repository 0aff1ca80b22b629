"""`linuxfp lab flannel up|down`: the Flannel lab from the command line.

`up` leaves the lab running after it returns (its state is in
/run/linuxfp-lab/flannel-<name>.json); `down` removes it, from that file,
whichever process built it.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys


def add_lab_parser(add) -> None:
    """Register `lab` with cli.py's `add(name, func, help)`."""
    p = add("lab", cmd_lab, "throw-away labs of real components (flannel: Kubernetes nodes' networking)")
    p.add_argument("kind", choices=("flannel",))
    p.add_argument("action", choices=("up", "down"))
    p.add_argument("--nodes", type=_at_least(2), default=2, metavar="N", help="node namespaces (default 2)")
    p.add_argument("--pods-per-node", type=_at_least(0), default=2, metavar="M", help="pods per node (default 2)")
    p.add_argument("--name", default=None,
                   help="lab name (default random for up; for down: the only lab running)")
    p.add_argument("--vxlan-port", type=_port, default=8472, metavar="PORT",
                   help="flanneld's VXLAN UDP port (default 8472, flannel's)")
    p.add_argument("--gbp", action="store_true", help="VXLAN Group Policy extension (flannel's GBP option)")
    p.add_argument("--learning", action="store_true",
                   help="flannel.1 learns remote MACs (flannel's Learning option; default nolearning)")


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be a UDP port, 1..65535")
    return value


def _at_least(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}")
        return value

    return parse


def _progress(message: str) -> None:
    print(f"flannel lab: {message}", file=sys.stderr, flush=True)


def _sigterm_interrupts(signum, frame) -> None:
    raise KeyboardInterrupt


def cmd_lab(args) -> int:
    from linuxfp.lab.flannel import FlannelLab, FlannelLabError, FlannelLabSpec, summary_text
    from linuxfp.lab.flannel_build import BuildError
    from linuxfp.lab.flannel_state import lab_names

    try:
        if args.action == "up":
            # SIGTERM during bring-up removes the half-built lab, as Ctrl-C does.
            signal.signal(signal.SIGTERM, _sigterm_interrupts)
            spec = FlannelLabSpec(nodes=args.nodes, pods_per_node=args.pods_per_node, name=args.name,
                                  vxlan_port=args.vxlan_port, gbp=args.gbp, learning=args.learning)
            lab = FlannelLab.up(spec, progress=_progress)
            lab.detach()
            data = lab.summary()
            print(json.dumps(data) if args.json else summary_text(data))
            return 0
        name = args.name
        if name is None:
            names = lab_names()
            if len(names) != 1:
                print("linuxfp lab flannel down: " + ("no Flannel lab is running" if not names else
                      f"several labs are running ({', '.join(names)}): say which with --name"),
                      file=sys.stderr)
                return 1 if not names else 2
            name = names[0]
        problems = FlannelLab.attach(name, progress=_progress).down()
        for problem in problems:
            print(f"linuxfp lab flannel down: {problem}", file=sys.stderr)
        if args.json:
            print(json.dumps({"removed": name, "problems": problems}))
        else:
            print(f"removed Flannel lab {name}")
        return 1 if problems else 0
    except (FlannelLabError, BuildError, ValueError) as e:
        print(f"linuxfp lab flannel {args.action}: {e}", file=sys.stderr)
        return 1
