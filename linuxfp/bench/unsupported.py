"""Scenarios whose datapath nodes do not exist yet: they say so and write a
result with "supported": false instead of a number that would mean nothing."""
from __future__ import annotations

from .machine import machine
from .options import Options
from .results import timestamp

REASONS = {
    "bridge": "needs the bridge node: bridge ports stay on the kernel path until it exists",
}


def make(name: str):
    def run(options: Options) -> dict:
        return {
            "scenario": name,
            "supported": False,
            "reason": REASONS[name],
            "quick": options.quick,
            "timestamp": timestamp(),
            "machine": machine(),
            "method": {},
            "systems": {},
            "ratios": {},
        }

    return run


def summary_line(result: dict) -> str:
    return f"{result['scenario']}: not yet supported: {result['reason']}"


def markdown(result: dict) -> str:
    return f"# {result['scenario']} benchmark\n\nNot yet supported: {result['reason']}.\n"
