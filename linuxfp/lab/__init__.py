"""Throw-away network-namespace labs: topologies, frame injection and
capture, and the differential harness (Linux alone vs Linux + accelerator).

    from linuxfp.lab import Lab, RouterTopology, run_differential, standard_steps
"""

from .counters import ip_forw_datagrams, snmp
from .differential import (
    Difference,
    DiffReport,
    Step,
    StepObservation,
    no_accelerator,
    run_differential,
)
from .netns import Lab, LabError, Namespace, entered
from .packet_io import Capture, CapturedFrame, inject, settle
from .probe import ping
from .standard import standard_frames, standard_steps
from .standard6 import standard6_frames, standard6_steps
from .topology import (
    Interface,
    LinkSpec,
    Router,
    RouterTopology,
    Topology,
    TopologySpec,
    build,
)

__all__ = [
    "Capture",
    "CapturedFrame",
    "DiffReport",
    "Difference",
    "Interface",
    "Lab",
    "LabError",
    "LinkSpec",
    "Namespace",
    "Router",
    "RouterTopology",
    "Step",
    "StepObservation",
    "Topology",
    "TopologySpec",
    "build",
    "entered",
    "inject",
    "ip_forw_datagrams",
    "no_accelerator",
    "ping",
    "run_differential",
    "settle",
    "snmp",
    "standard6_frames",
    "standard6_steps",
    "standard_frames",
    "standard_steps",
]
