"""`linuxfp bench SCENARIO [--quick] [--out DIR] [--repetitions N]`."""
from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import results, unsupported
from .options import Options


@dataclass(frozen=True)
class Scenario:
    run: Callable[[Options], dict]
    summary_line: Callable[[dict], str]
    markdown: Callable[[dict], str]
    plot: Callable | None


def _module_scenario(module_name: str) -> Callable[[], Scenario]:
    def load() -> Scenario:
        module = importlib.import_module(f"linuxfp.bench.{module_name}")
        return Scenario(module.run, module.summary_line, module.markdown, getattr(module, "plot", None))

    return load


def _unsupported_scenario(name: str) -> Callable[[], Scenario]:
    return lambda: Scenario(unsupported.make(name), unsupported.summary_line, unsupported.markdown, None)


# In the order; each loads lazily so `bench router` never imports the others.
SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "router": _module_scenario("router"),
    "router6": _module_scenario("router6"),
    "gateway": _module_scenario("gateway"),
    "gateway6": _module_scenario("gateway6"),
    "rules": _module_scenario("rules"),
    "bridge": _module_scenario("bridge"),
    "latency": _module_scenario("latency"),
    "response": _module_scenario("response"),
    "chain": _module_scenario("chain"),
    "hooks": _module_scenario("hooks"),
    "scale": _module_scenario("scale"),
    "breakdown": _module_scenario("breakdown"),
    "watch": _module_scenario("watch"),
    "flannel": _module_scenario("flannel"),
}


def run_bench(args) -> int:
    name = args.scenario
    if name not in SCENARIOS:
        print(f"linuxfp bench: unknown scenario {name!r} (choose from {', '.join(SCENARIOS)})", file=sys.stderr)
        return 2
    if args.repetitions is not None and args.repetitions < 1:
        print("linuxfp bench: --repetitions must be at least 1", file=sys.stderr)
        return 2
    scenario = SCENARIOS[name]()
    options = Options(quick=bool(args.quick), repetitions=args.repetitions,
                      lab_prefix=getattr(args, "lab_prefix", None) or Options.lab_prefix)
    out_dir = Path(args.out) if args.out else results.DEFAULT_OUT_DIR
    started = time.monotonic()
    result = scenario.run(options)
    result["duration_s"] = round(time.monotonic() - started, 1)
    if not result.get("supported", True):
        print(f"linuxfp bench {name}: not yet supported: {result['reason']}", file=sys.stderr)
    result["summary"] = scenario.summary_line(result)
    written = results.write(result, out_dir, scenario.markdown(result), scenario.plot)
    if getattr(args, "json", False):
        print(json.dumps(result))
    else:
        print(result["summary"])
        print(f"results: {written['json']}", file=sys.stderr)
    return 0
