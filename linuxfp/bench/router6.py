"""`linuxfp bench router6`: the virtual router forwarding IPv6 (issue 11).

The router line of `bench router`, dual stack: 50 prefixes 2001:db8:100:i::/64
routed via the sink, and the generator sending IPv6 UDP. Linux, LinuxFP (XDP
and TC), the upper bound (MAC rewrite and redirect: no parsing, any family)
and the reference forwarder (its IPv6 branch: the plain bpf_fib_lookup
forwarder) measured in the same run, at 78 B (the smallest IPv6/UDP frame
with a 12-byte payload) and 1518 B."""
from __future__ import annotations

from pathlib import Path

from . import router, throughput
from .generator import FrameSpec
from .options import Options
from .results import timestamp
from .router import SYSTEM_NAMES

FRAME_SIZES = (78, 1518)
PREFIXES = 50
# The targets, as (ratio, minimum).
TARGETS = {"linuxfp-xdp/linux": 2.0, "linuxfp-xdp/upper-bound": 0.70, "linuxfp-tc/linux": 1.5}
HEADLINE = ("linuxfp-xdp/linux", "linuxfp-xdp/upper-bound", "linuxfp-xdp/reference", "linuxfp-tc/linux")


def run(options: Options) -> dict:
    started = timestamp()
    # (a quick run, which only proves the harness, measures the small frames)
    sizes = FRAME_SIZES[:1] if options.quick else FRAME_SIZES
    steady = router.plan(options, sizes)
    with throughput.rig(PREFIXES, lab_prefix=options.lab_prefix, ipv6=True) as rig:
        throughput.progress(f"router6: {len(SYSTEM_NAMES)} systems x {len(sizes)} frame sizes "
                            f"x {steady.repetitions} repetitions")
        raw = throughput.run(rig, steady)
        method = throughput.method(steady, rig.placement, PREFIXES)
        method["sample_frame_78"] = rig.generator.sample_frame(FrameSpec(78)).hex()
    return router.result("router6", options, started, method, raw, sizes, TARGETS)


def summary_line(result: dict) -> str:
    parts = []
    for size, data in result["frame_sizes"].items():
        shown = ", ".join(f"{key} {data['ratios'][key]:.2f}" for key in HEADLINE if key in data["ratios"])
        parts.append(f"{size} B: {shown or 'no valid ratios'}")
    errors = f"; errors: {', '.join(result['errors'])}" if result["errors"] else ""
    return "router6 " + " | ".join(parts) + errors


def markdown(result: dict) -> str:
    return router.markdown(result)


def plot(result: dict, path: Path, plt) -> None:
    router.plot(result, path, plt)
