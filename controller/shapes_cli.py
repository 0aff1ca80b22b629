"""`linuxfp shapes build|list`: the precompiled objects shipped in the
package (docs/operations.md, "Precompiled datapaths"). Also runnable as
`python3 -m controller.shapes_cli build` (the Makefile's `shapes` step)."""
from __future__ import annotations

import argparse
import json
import sys

HELP = "the precompiled pipeline objects shipped in the package: build them, or list them"


def add_parser(add) -> argparse.ArgumentParser:
    """Declare the subcommand with cli.py's `add(name, func, help)`."""
    p = add("shapes", cmd_shapes, HELP)
    p.add_argument("action", choices=("build", "list"),
                   help="build: compile every shape the graph can produce (and the controller's own "
                        "programs) into the package, keeping what is up to date; list: what is shipped")
    return p


def cmd_shapes(args) -> int:
    from linuxfp.synth import CompileError, ToolMissing
    from linuxfp.synth.precompile import ExternalNodes, build_shipped, inventory
    from linuxfp.synth.shipped import shipped_dir

    as_json = getattr(args, "json", False)
    try:
        if args.action == "build":
            result = build_shipped()
            if not as_json:
                print(f"shapes: {len(result.built)} built, {len(result.kept)} up to date"
                      + (f", {len(result.removed)} removed" if result.removed else "")
                      + f" in {result.seconds:.1f} s", file=sys.stderr)
        listed = inventory()
    except (ToolMissing, CompileError, ExternalNodes) as e:
        print(f"linuxfp: {e}", file=sys.stderr)
        return 1
    data = listing(listed, str(shipped_dir()))
    if as_json:
        print(json.dumps(data))
    else:
        print(listing_text(data, entries=args.action == "list"))
    return 0 if not data["missing"] and not data["stale"] else (1 if args.action == "build" else 0)


def listing(listed, directory: str) -> dict:
    shapes = [o for o in listed if o.kind == "shape"]
    current = [o for o in listed if o.state == "current"]
    return {
        "directory": directory,
        "shapes": len(shapes),
        "shipped_shapes": sum(o.state == "current" for o in shapes),
        "objects": len(current),
        "total_bytes": sum(o.size for o in current),
        "stale": [o.name for o in listed if o.state == "stale"],
        "missing": [o.name for o in listed if o.state == "missing"],
        "entries": [{"kind": o.kind, "name": o.name, "hook": o.hook, "state": o.state, "size": o.size}
                    for o in listed],
    }


def listing_text(data: dict, entries: bool = True) -> str:
    lines = [f"{e['name']:<48} {e['kind']:<8} {e['size'] / 1024:>8.1f} KiB  {e['state']}"
             for e in data["entries"] if entries]
    lines.append(f"{data['shipped_shapes']}/{data['shapes']} shapes shipped; {data['objects']} objects, "
                 f"{data['total_bytes'] / 1024:.0f} KiB in {data['directory']}")
    if data["stale"] or data["missing"]:
        lines.append("not all current: `linuxfp shapes build` (needs clang) brings them up to date; "
                     "until then those shapes are compiled where they run")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="linuxfp", description=HELP)
    parser.add_argument("-j", "--json", action="store_true", help="JSON output")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_):
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("-j", "--json", action="store_true", default=argparse.SUPPRESS, help="JSON output")
        p.set_defaults(func=func)
        return p

    add_parser(add)
    args = parser.parse_args(["shapes", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
