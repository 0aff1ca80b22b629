"""What a Flannel lab consists of, and its run file.

Everything the lab creates is recorded here *before* it is created
(namespaces, processes, directories), and the record is written to
``/run/linuxfp-lab/flannel-<name>.json`` after every step: a
``linuxfp lab flannel down`` in another process, or after a crash of the
one that ran ``up``, finds everything from that file alone.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

RUN_DIR = Path("/run/linuxfp-lab")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}$")


def run_file(name: str) -> Path:
    return RUN_DIR / f"flannel-{name}.json"


def lab_names() -> list[str]:
    """Names of the labs that have a run file."""
    if not RUN_DIR.is_dir():
        return []
    return sorted(p.name[len("flannel-"):-len(".json")] for p in RUN_DIR.glob("flannel-*.json"))


@dataclass
class Daemon:
    """A process started by the lab; `marker` is a string its command line
    contains (a path in the lab directory), so a recycled pid is never killed."""

    name: str
    namespace: str
    log: str
    marker: str
    pid: int | None = None


@dataclass
class Node:
    name: str
    namespace: str
    underlay_ip: str           # on the node's eth0, 192.0.2.0/24
    directory: str             # subnet file, flanneld log, CNI data
    flanneld: Daemon
    subnet: str | None = None  # FLANNEL_SUBNET once flanneld has a lease, e.g. 198.18.57.1/24
    mtu: int | None = None     # FLANNEL_MTU

    @property
    def subnet_file(self) -> str:
        return f"{self.directory}/subnet.env"

    @property
    def cni_data_dir(self) -> str:
        """The flannel plugin's dataDir (its saved delegate configurations)."""
        return f"{self.directory}/cni"

    @property
    def ipam_data_dir(self) -> str:
        """host-local's dataDir: this node's address leases, not /var/lib/cni."""
        return f"{self.directory}/ipam"


@dataclass
class Pod:
    name: str
    node: str
    namespace: str
    container_id: str
    ip: str | None = None          # without the prefix length
    mac: str | None = None         # the pod's eth0
    host_veth: str | None = None   # the node-side end on cni0


@dataclass
class ServicePort:
    protocol: str       # tcp | udp
    port: int           # on the ClusterIP
    target_port: int    # on the endpoint pod


@dataclass
class Service:
    """A ClusterIP service as kube-proxy programs it (one endpoint)."""

    name: str
    cluster_ip: str
    ports: list[ServicePort]
    endpoint_pod: str
    endpoint_ip: str


@dataclass
class LabState:
    name: str
    directory: str                 # temporary; removed at teardown
    network: str                   # the pod network, 198.18.0.0/16
    underlay_namespace: str | None  # the switch namespace with more than two nodes
    etcd: Daemon
    etcd_endpoint: str
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    service: Service | None = None
    # Every namespace in creation order (adopted before it is created).
    namespaces: list[str] = field(default_factory=list)
    backend: dict = field(default_factory=dict)   # flanneld's "Backend" config (vxlan, VNI, port, ...)

    @property
    def run_file(self) -> Path:
        return run_file(self.name)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in lab {self.name}")

    def pod(self, name: str) -> Pod:
        for pod in self.pods:
            if pod.name == name:
                return pod
        raise KeyError(f"no pod {name!r} in lab {self.name}")

    def to_dict(self) -> dict:
        data = asdict(self)
        data["run_file"] = str(self.run_file)
        for node, raw in zip(self.nodes, data["nodes"]):
            raw["subnet_file"] = node.subnet_file
        return data

    @classmethod
    def from_dict(cls, data: dict) -> LabState:
        service = data.get("service")
        return cls(
            name=data["name"],
            directory=data["directory"],
            network=data["network"],
            underlay_namespace=data.get("underlay_namespace"),
            etcd=Daemon(**data["etcd"]),
            etcd_endpoint=data["etcd_endpoint"],
            nodes=[Node(**{k: v for k, v in n.items() if k not in ("flanneld", "subnet_file")},
                        flanneld=Daemon(**n["flanneld"])) for n in data.get("nodes", [])],
            pods=[Pod(**p) for p in data.get("pods", [])],
            service=None if service is None else Service(
                **{k: v for k, v in service.items() if k != "ports"},
                ports=[ServicePort(**p) for p in service["ports"]]),
            namespaces=list(data.get("namespaces", [])),
            backend=dict(data.get("backend", {})),
        )

    def save(self) -> None:
        """Write the run file atomically (a reader never sees half of it)."""
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        partial = self.run_file.with_suffix(".json.tmp")
        partial.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        os.replace(partial, self.run_file)

    @classmethod
    def load(cls, name: str) -> LabState:
        return cls.from_dict(json.loads(run_file(name).read_text()))
