"""The differential harness: does the DUT behave the same with and without
an accelerator?

`run_differential` builds a *fresh* topology per system (kernel alone, then
kernel + accelerator) so that neighbour tables, rate limiters, peer caches
and counters start identical.  For each step (a named configuration change
applied in the DUT, as an operator would) it lets the system settle, injects
the same frames at the topology's injection point, records every frame
received at every interface outside the DUT, and finally compares the two
systems per step, per interface, per flow, byte for byte.

The only normalisation is the IP ID (and the header checksum covering it) of
IPv4 packets sourced from a DUT address — see `dissect.normalise_ip_id`.
Forwarded frames are compared exactly.
"""

from __future__ import annotations

import contextlib
import difflib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from .counters import ip6_forw_datagrams, ip_forw_datagrams
from .dissect import (
    describe_flow,
    differing_offsets,
    flow_key,
    hexdump,
    is_mld_report,
    normalise_ip_id,
    summary,
)
from .netns import Lab, LabError
from .packet_io import Capture, inject, settle
from .topology import Topology

T = TypeVar("T", bound=Topology)
Accelerate = Callable[[T], contextlib.AbstractContextManager[Any]]
FrameSource = Sequence[bytes] | Callable[[T, int], Sequence[bytes]]

NORMALISATION = (
    "IP ID and IPv4 header checksum zeroed in packets whose IPv4 source is a DUT "
    "address (the kernel draws locally generated IDs from a per-namespace random key); "
    "MLDv2 reports left out (sent on the kernel's timers as groups are joined); "
    "all other bytes, and every forwarded frame, compared exactly"
)


@dataclass(frozen=True)
class Step(Generic[T]):
    """A named configuration change; `apply` runs iproute2/sysctl in the topology."""

    name: str
    apply: Callable[[T], object]


def as_step(step: Step[T] | Callable[[T], object]) -> Step[T]:
    return step if isinstance(step, Step) else Step(getattr(step, "__name__", repr(step)), step)


class _KernelOnly:
    def settled(self) -> None:
        """Nothing to wait for: the kernel applies configuration synchronously."""


@contextlib.contextmanager
def no_accelerator(topology: Topology) -> Iterator[_KernelOnly]:
    """The reference system: Linux alone."""
    yield _KernelOnly()


@dataclass(frozen=True)
class InterfaceFrames:
    interface: str  # Interface.label, e.g. "sink:to-dut"
    frames: tuple[bytes, ...]


@dataclass(frozen=True)
class StepObservation:
    """What one system emitted during one step."""

    step: str
    injected: tuple[bytes, ...]
    received: tuple[InterfaceFrames, ...]
    forwarded_by_kernel: int  # growth of the DUT's Ip ForwDatagrams (+ Ip6OutForwDatagrams) during the step
    normalised: int  # frames whose IP ID/checksum were zeroed

    def at(self, interface: str) -> tuple[bytes, ...]:
        for entry in self.received:
            if entry.interface == interface:
                return entry.frames
        return ()

    @property
    def delivered(self) -> int:
        """Frames received anywhere during the step."""
        return sum(len(entry.frames) for entry in self.received)


@dataclass(frozen=True)
class Difference:
    step: str
    interface: str
    flow: str
    kind: str  # "changed", "missing" (only without accelerator), "extra" (only with it)
    kernel: bytes | None
    accelerated: bytes | None

    def describe(self) -> str:
        head = f"[{self.step}] {self.interface}  flow {self.flow}: {self.kind}"
        lines = [head]
        if self.kernel is not None and self.accelerated is not None:
            offsets = differing_offsets(self.kernel, self.accelerated)
            lines += [f"  kernel:      {summary(self.kernel)}", hexdump(self.kernel, offsets)]
            lines += [f"  accelerated: {summary(self.accelerated)}", hexdump(self.accelerated, offsets)]
        elif self.kernel is not None:
            lines += [f"  kernel only: {summary(self.kernel)}", hexdump(self.kernel)]
        elif self.accelerated is not None:
            lines += [f"  accelerated only: {summary(self.accelerated)}", hexdump(self.accelerated)]
        return "\n".join(lines)


@dataclass(frozen=True)
class DiffReport:
    kernel: tuple[StepObservation, ...]
    accelerated: tuple[StepObservation, ...]
    differences: tuple[Difference, ...]
    normalisation: str
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.differences

    def step_index(self, name: str) -> int:
        """The position of the step named `name` (observations and a
        controller's per-step readings are in step order)."""
        return next(i for i, observed in enumerate(self.kernel) if observed.step == name)

    def render(self, max_differences: int = 40) -> str:
        normalised = sum(o.normalised for o in self.kernel + self.accelerated)
        lines = [
            f"differential: {len(self.kernel)} steps, {len(self.differences)} differences, {self.seconds:.1f}s",
            f"normalised {normalised} frames: {self.normalisation}",
        ]
        for k, a in zip(self.kernel, self.accelerated):
            counts = ", ".join(
                f"{entry.interface} {len(entry.frames)}/{len(a.at(entry.interface))}" for entry in k.received
            )
            lines.append(
                f"  step {k.step!r}: frames kernel/accelerated {counts}; "
                f"kernel forwarded {k.forwarded_by_kernel}/{a.forwarded_by_kernel}"
            )
        lines += [d.describe() for d in self.differences[:max_differences]]
        if len(self.differences) > max_differences:
            lines.append(f"... and {len(self.differences) - max_differences} more differences")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def run_differential(
    topology_factory: Callable[[Lab], T],
    steps: Sequence[Step[T] | Callable[[T], object]],
    accelerate: Accelerate[T],
    frames: FrameSource[T] | None = None,
    *,
    settle: float = 0.1,
    step_wait: float = 0.5,
    prefix: str = "lfp",
) -> DiffReport:
    """Compare Linux alone with Linux + `accelerate` over `steps`.

    `accelerate(topology)` returns a context manager entered once the
    topology is built; if the object it yields has ``settled()``, that is
    called after attaching and after every step and must return once the
    accelerator has caught up; otherwise the harness sleeps `step_wait`.
    `frames` is a list of frames, or ``frames(topology, step_index)``;
    default `standard.standard_frames`.  `settle` is the quiet time that ends
    a capture.
    """
    if frames is None:
        from .standard import standard_frames

        # Router-specific: other topologies must pass their own frames.
        frames = cast(FrameSource[T], standard_frames)
    plan = tuple(as_step(s) for s in steps)
    names = [s.name for s in plan]
    if len(set(names)) != len(names):
        raise ValueError(f"step names must be unique: {names}")
    started = time.monotonic()
    kernel = _kernel_reference(topology_factory, plan, frames, settle, step_wait, prefix)
    accelerated = _observe(topology_factory, plan, accelerate, frames, settle, step_wait, prefix)
    for k, a in zip(kernel, accelerated):
        if k.injected != a.injected:
            raise LabError(
                f"step {k.step!r}: the two systems were sent different frames; frame builders "
                "must depend only on the topology's deterministic attributes (MACs, addresses)"
            )
    return DiffReport(
        kernel=kernel,
        accelerated=accelerated,
        differences=compare(kernel, accelerated),
        normalisation=NORMALISATION,
        seconds=time.monotonic() - started,
    )


# Linux alone observed on a fresh topology depends only on the topology, the
# steps, the frames and the waits: cases that differ in nothing but the
# accelerator (its hook, say) share one such observation instead of
# repeating it. Only hashable plans are shared — steps or frames built anew
# per call (closures collecting what each system did) never are.
_kernel_references: dict[tuple, tuple[StepObservation, ...]] = {}


def _kernel_reference(factory, plan, frames, quiet: float, step_wait: float, prefix: str):
    key = (factory, plan, frames, quiet, step_wait, prefix)
    try:
        known = _kernel_references.get(key)
    except TypeError:       # unhashable: nothing to share
        return _observe(factory, plan, no_accelerator, frames, quiet, step_wait, prefix)
    if known is None:
        known = _kernel_references[key] = _observe(factory, plan, no_accelerator, frames, quiet, step_wait, prefix)
    return known


def _observe(
    factory: Callable[[Lab], T],
    plan: tuple[Step[T], ...],
    accelerate: Accelerate[T],
    frames: FrameSource[T],
    quiet: float,
    step_wait: float,
    prefix: str,
) -> tuple[StepObservation, ...]:
    observations = []
    with Lab(prefix) as lab:
        topology = factory(lab)
        with accelerate(topology) as handle:

            def settle_system() -> None:
                topology.wait_links_settled()
                hook = getattr(handle, "settled", None)
                if callable(hook):
                    hook()
                else:
                    time.sleep(step_wait)

            settle_system()
            for index, step in enumerate(plan):
                step.apply(topology)
                settle_system()
                burst = tuple(frames(topology, index) if callable(frames) else frames)
                observations.append(observe_step(topology, step.name, burst, quiet))
    return tuple(observations)


def observe_step(topology: Topology, name: str, burst: tuple[bytes, ...], quiet: float) -> StepObservation:
    """Inject `burst` and record what every capture point receives until quiet."""
    before = ip_forw_datagrams(topology.dut) + ip6_forw_datagrams(topology.dut)
    captures: list[Capture] = []
    try:
        for point in topology.capture_points:
            captures.append(Capture(topology.ns(point.host), point.name, point.label))
        source = topology.inject_point
        inject(topology.ns(source.host), source.name, burst)
        settle(captures, quiet=quiet)
        recorded = [(c.label, c.stop()) for c in captures]
    finally:
        for capture in captures:
            capture.close()
    forwarded = ip_forw_datagrams(topology.dut) + ip6_forw_datagrams(topology.dut) - before
    dut_addresses = topology.dut_ipv4_addresses()
    received, normalised = [], 0
    for label, captured in recorded:
        cleaned = [normalise_ip_id(f.data, dut_addresses) for f in captured if not is_mld_report(f.data)]
        normalised += sum(changed for _, changed in cleaned)
        received.append(InterfaceFrames(label, tuple(data for data, _ in cleaned)))
    return StepObservation(name, burst, tuple(received), forwarded, normalised)


def _by_flow(frames: Sequence[bytes]) -> dict[tuple, list[bytes]]:
    flows: dict[tuple, list[bytes]] = {}
    for frame in frames:
        flows.setdefault(flow_key(frame), []).append(frame)
    return flows


def compare(
    kernel: Sequence[StepObservation], accelerated: Sequence[StepObservation]
) -> tuple[Difference, ...]:
    """Per step, per interface, per flow: the frames that do not match, in order."""
    differences: list[Difference] = []
    for k, a in zip(kernel, accelerated, strict=True):
        interfaces = [e.interface for e in k.received]
        interfaces += [e.interface for e in a.received if e.interface not in interfaces]
        for interface in interfaces:
            k_flows, a_flows = _by_flow(k.at(interface)), _by_flow(a.at(interface))
            for key in [*k_flows, *(f for f in a_flows if f not in k_flows)]:
                expected, got = k_flows.get(key, []), a_flows.get(key, [])
                if expected != got:
                    differences += _sequence_differences(k.step, interface, describe_flow(key), expected, got)
    return tuple(differences)


def _sequence_differences(
    step: str, interface: str, flow: str, expected: list[bytes], got: list[bytes]
) -> list[Difference]:
    found = []
    matcher = difflib.SequenceMatcher(a=expected, b=got, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        olds, news = expected[i1:i2], got[j1:j2]
        for index in range(max(len(olds), len(news))):
            old = olds[index] if index < len(olds) else None
            new = news[index] if index < len(news) else None
            kind = "changed" if old is not None and new is not None else "missing" if new is None else "extra"
            found.append(Difference(step, interface, flow, kind, old, new))
    return found
