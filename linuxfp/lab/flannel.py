"""The Flannel lab: Kubernetes worker nodes' networking from the real
components, without a Kubernetes control plane.

    node1 (netns)                                 node2 (netns)
    etcd 127.0.0.1 / 192.0.2.1:2379
    flanneld --iface eth0 --ip-masq               flanneld ...
    flannel.1 (VXLAN VNI 1, port 8472)            flannel.1
    cni0 ── vethX ── pod (netns, eth0)            cni0 ── ... pods
    eth0 192.0.2.1/24 ────── veth underlay ────── eth0 192.0.2.2/24

- etcd (Debian's etcd-server) runs in the first node's namespace and
  listens only on that namespace's loopback and its underlay address; its
  data directory is in the lab's temporary directory.
- flanneld v0.28.4 (built and cached by `flannel_build`) runs in each node
  namespace in etcd mode with the vxlan backend and writes its own subnet
  file; it programs flannel.1, routes, neighbour and FDB entries and its
  iptables rules exactly as on a real node.
- A pod is a network namespace attached by the `flannel` CNI meta-plugin
  run in the node namespace (it delegates to Debian's bridge and
  host-local), with per-node data directories in the lab directory.
- Every node gets kube-proxy's and kubelet's iptables rules
  (`flannel_kubeproxy`) with one ClusterIP service (198.51.100.10, port 80
  over TCP and UDP, to port 8080 of the last node's first pod), and
  br_netfilter's bridge-nf-call-iptables on, as kubelet setups have.
- More than two nodes share a bridge in an extra "underlay" namespace.

Addresses: underlay 192.0.2.0/24, pods 198.18.0.0/16, services
198.51.100.0/24.  Nothing touches the host's own namespace.

Everything the lab creates is recorded in its run file before it is created
(`flannel_state`), so teardown — on exit of the ``with`` block, on an
exception or Ctrl-C during bring-up, at interpreter exit, or from another
process with ``linuxfp lab flannel down`` — removes all of it.

    with FlannelLab.up(FlannelLabSpec(nodes=2, pods_per_node=2)) as lab:
        a, b = lab.pods_on("node1")
        lab.namespace(a.name).run(["ping", "-c1", b.ip])
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from .flannel_build import FlannelBinaries, cached_binaries, ensure_binaries
from .flannel_kubeproxy import ruleset
from .flannel_state import NAME_PATTERN, Daemon, LabState, Node, Pod, Service, ServicePort, run_file
from .netns import Lab, LabError, Namespace

NETWORK = "198.18.0.0/16"
UNDERLAY_PREFIX = "192.0.2"
VNI = 1
VXLAN_PORT = 8472
NETWORK_CONFIG = {"Network": NETWORK, "SubnetLen": 24}     # and the spec's "Backend"
ETCD_PREFIX = "/coreos.com/network"
ETCD_CLIENT_PORT = 2379
SERVICE_NAME = "echo"
SERVICE_IP = "198.51.100.10"
SERVICE_PORTS = (ServicePort("tcp", 80, 8080), ServicePort("udp", 80, 8080))
CNI_PLUGIN_DIR = Path("/usr/lib/cni")
CNI_NETWORK_NAME = "cbr0"
BRIDGE = "cni0"
VXLAN_DEVICE = f"flannel.{VNI}"
NAMESPACE_PREFIX = "lfpfl"
MAX_NODES = 250

# What the lab runs, and the Debian package that provides it.
REQUIRED_PROGRAMS = {
    "etcd": "etcd-server",
    "etcdctl": "etcd-client",
    "ip": "iproute2",
    "bridge": "iproute2",
    "iptables-restore": "iptables",
    "nsenter": "util-linux",
}
REQUIRED_CNI_PLUGINS = ("bridge", "host-local", "loopback")

Progress = Callable[[str], None]


class FlannelLabError(LabError):
    """The lab could not be built or removed; says which component and where its log is."""


@dataclass(frozen=True)
class FlannelLabSpec:
    nodes: int = 2
    pods_per_node: int = 2
    name: str | None = None        # default: random; namespaces are lfpfl-<name>-...
    timeout_s: float = 60.0        # per readiness wait (etcd, each flanneld, VXLAN peers)
    # flanneld's vxlan backend options (its network config's "Backend")
    vxlan_port: int = VXLAN_PORT
    gbp: bool = False              # VXLAN Group Policy: the packet mark rides in the header
    learning: bool = False         # flannel.1 learns remote MACs (flanneld's default: nolearning)

    def backend(self) -> dict:
        return {"Type": "vxlan", "VNI": VNI, "Port": self.vxlan_port, "GBP": self.gbp, "Learning": self.learning}


def _quiet(message: str) -> None:
    pass


def _stderr(message: str) -> None:
    print(f"flannel lab: {message}", file=sys.stderr, flush=True)


def check_dependencies() -> None:
    """Fail early, naming the Debian package, if a program the lab runs is missing."""
    missing = sorted({pkg for prog, pkg in REQUIRED_PROGRAMS.items() if shutil.which(prog) is None})
    missing += sorted({"containernetworking-plugins" for plugin in REQUIRED_CNI_PLUGINS
                       if not os.access(CNI_PLUGIN_DIR / plugin, os.X_OK)})
    if missing:
        raise FlannelLabError(f"the Flannel lab needs: apt-get install {' '.join(missing)} "
                              "(or run scripts/install-deps.sh)")


def log_tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty log)"


class FlannelLab:
    """A running Flannel lab.  `up` builds one; `attach` finds one by name
    (from its run file); `down` removes it; as a context manager it is
    removed on exit, on SIGINT/SIGTERM and at interpreter exit."""

    def __init__(self, state: LabState, binaries: FlannelBinaries, progress: Progress = _quiet) -> None:
        self.state = state
        self.binaries = binaries
        self.progress = progress
        self._children: dict[int, subprocess.Popen] = {}
        self._guard: Lab | None = None
        self._down = False

    # --- life cycle -----------------------------------------------------------

    @classmethod
    def up(cls, spec: FlannelLabSpec = FlannelLabSpec(), progress: Progress = _quiet) -> FlannelLab:
        """Build a lab; anything half-built is removed if this fails or is interrupted."""
        if not 2 <= spec.nodes <= MAX_NODES:
            raise ValueError(f"a Flannel lab has 2..{MAX_NODES} nodes, not {spec.nodes}")
        if spec.pods_per_node < 0:
            raise ValueError("pods_per_node must be >= 0")
        name = spec.name or secrets.token_hex(3)
        if not NAME_PATTERN.match(name):
            raise ValueError(f"lab name {name!r}: 1-16 characters of a-z, 0-9 and '-'")
        check_dependencies()
        binaries = ensure_binaries(progress)
        if run_file(name).exists():
            raise FlannelLabError(f"a Flannel lab named {name} exists ({run_file(name)}); "
                                  f"remove it first: linuxfp lab flannel down --name {name}")
        directory = _scratch_directory(name)
        first = f"{NAMESPACE_PREFIX}-{name}-node1"
        state = LabState(
            name=name, directory=str(directory), network=NETWORK,
            underlay_namespace=f"{NAMESPACE_PREFIX}-{name}-underlay" if spec.nodes > 2 else None,
            etcd=Daemon("etcd", first, str(directory / "etcd.log"), marker=str(directory / "etcd")),
            etcd_endpoint=f"http://{UNDERLAY_PREFIX}.1:{ETCD_CLIENT_PORT}",
            backend=spec.backend(),
        )
        lab = cls(state, binaries, progress)
        lab._guard_until_down()
        try:
            state.save()
            lab._build(spec)
        except BaseException:
            progress("bring-up failed; removing what was built")
            lab.down()
            raise
        return lab

    @classmethod
    def attach(cls, name: str, progress: Progress = _quiet) -> FlannelLab:
        """The lab `name` left running by another process (e.g. ``linuxfp lab flannel up``)."""
        try:
            state = LabState.load(name)
        except FileNotFoundError:
            raise FlannelLabError(f"no Flannel lab named {name} ({run_file(name)} does not exist)") from None
        return cls(state, cached_binaries(), progress)

    def detach(self) -> None:
        """Leave the lab running when this process exits (``linuxfp lab flannel up``)."""
        if self._guard is not None:
            guard, self._guard = self._guard, None
            guard.close()      # its callback sees _guard gone and does nothing

    def __enter__(self) -> Self:
        self._guard_until_down()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.down()

    def _guard_until_down(self) -> None:
        """Reuse the netns labs' safety net (SIGINT/SIGTERM, interpreter exit)."""
        if self._guard is None and not self._down:
            guard = Lab(prefix=NAMESPACE_PREFIX)
            guard.on_close(lambda: self._guard is guard and self.down())
            self._guard = guard

    def down(self) -> list[str]:
        """Remove everything; idempotent.  Returns what could not be done cleanly
        (the namespaces, processes, directories and run file are gone regardless)."""
        state = self.state
        problems: list[str] = []
        for pod in reversed(state.pods):
            if Path(f"/run/netns/{pod.namespace}").exists() and Path(f"/run/netns/{self._node_of(pod)}").exists():
                with contextlib.suppress(FlannelLabError):
                    self._cni("DEL", state.node(pod.node), pod)
        for node in state.nodes:
            problems += self._stop(node.flanneld)
        problems += self._stop(state.etcd)
        for name in reversed(state.namespaces):
            Namespace(name).delete()
            if Namespace(name).exists():
                problems.append(f"namespace {name} could not be deleted")
        shutil.rmtree(state.directory, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            state.run_file.unlink()
        self._down = True
        if self._guard is not None:
            guard, self._guard = self._guard, None
            guard.close()
        return problems

    # --- queries -------------------------------------------------------------

    def namespace(self, node_or_pod: str) -> Namespace:
        """The network namespace of a node ("node1") or pod ("node1-pod1")."""
        for node in self.state.nodes:
            if node.name == node_or_pod:
                return Namespace(node.namespace)
        return Namespace(self.state.pod(node_or_pod).namespace)

    def pods_on(self, node: str) -> list[Pod]:
        return [pod for pod in self.state.pods if pod.node == node]

    def summary(self) -> dict:
        return self.state.to_dict()

    @property
    def vxlan_port(self) -> int:
        """The UDP port of the outer VXLAN packets."""
        return int(self.state.backend.get("Port") or VXLAN_PORT)

    # --- the control plane failing and coming back ----------------------------

    def stop_etcd(self) -> None:
        """Stop etcd (SIGTERM): flanneld loses its store, nothing it programmed changes."""
        self._stopped(self._stop(self.state.etcd))

    def stop_flanneld(self, node: str | None = None) -> None:
        """Stop flanneld on `node`, or on every node: what it programmed stays."""
        self._stopped([problem for each in self.state.nodes if node is None or each.name == node
                       for problem in self._stop(each.flanneld)])

    def start_control_plane(self, timeout: float = 60.0) -> None:
        """Start etcd and every flanneld that is not running (etcd keeps its
        data directory, flanneld its lease) and wait until each restarted
        flanneld has written its subnet file again and handled every other
        node's lease (what it programmed before stayed: it programs the same
        routes, neighbour and FDB entries again)."""
        state = self.state
        if not self._running(state.etcd):
            self.progress(f"starting etcd in {state.etcd.namespace} again")
            self._start_etcd()
        restarted = [node for node in state.nodes if not self._running(node.flanneld)]
        logged = {}
        for node in restarted:
            self.progress(f"starting flanneld on {node.name} again")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(node.subnet_file)      # so that the wait below sees the new one
            logged[node.name] = _size(node.flanneld.log)
            self._start_flanneld(node)
        for node in restarted:
            self._wait_subnet(node, timeout)
            others = len(state.nodes) - 1
            self._wait(node.flanneld, f"flanneld on {node.name} to handle the other nodes' leases", timeout,
                       lambda node=node: _log_since(node.flanneld.log, logged[node.name])
                       .count(LEASE_HANDLED) >= others)
        self._wait_vxlan_peers(timeout)

    def _running(self, daemon: Daemon) -> bool:
        return daemon.pid is not None and _runs(daemon.pid, daemon.marker)

    def _stopped(self, problems: list[str]) -> None:
        if problems:
            raise FlannelLabError("; ".join(problems))
        self.state.save()

    # --- pods ----------------------------------------------------------------

    def add_pod(self, node_name: str, name: str | None = None) -> Pod:
        """Create a pod namespace on `node_name` and attach it with CNI ADD."""
        node = self.state.node(node_name)
        if name is None:
            taken = {p.name for p in self.state.pods}
            name = next(f"{node.name}-pod{i}" for i in range(1, 10_000) if f"{node.name}-pod{i}" not in taken)
        pod = Pod(name=name, node=node.name, namespace=f"{NAMESPACE_PREFIX}-{self.state.name}-{name}",
                  container_id=f"linuxfp-{self.state.name}-{name}")
        self.state.pods.append(pod)
        self._new_namespace(pod.namespace)
        result = self._cni("ADD", node, pod)
        self._read_cni_result(pod, result)
        self.state.save()
        return pod

    def delete_pod(self, name: str) -> None:
        """CNI DEL, then remove the pod's namespace (as a container runtime does)."""
        pod = self.state.pod(name)
        self._cni("DEL", self.state.node(pod.node), pod)
        Namespace(pod.namespace).delete()
        self.state.pods.remove(pod)
        self.state.namespaces.remove(pod.namespace)
        self.state.save()

    # --- bring-up ------------------------------------------------------------

    def _build(self, spec: FlannelLabSpec) -> None:
        state = self.state
        for index in range(1, spec.nodes + 1):
            directory = Path(state.directory) / f"node{index}"
            directory.mkdir()
            state.nodes.append(Node(
                name=f"node{index}", namespace=f"{NAMESPACE_PREFIX}-{state.name}-node{index}",
                underlay_ip=f"{UNDERLAY_PREFIX}.{index}", directory=str(directory),
                flanneld=Daemon("flanneld", f"{NAMESPACE_PREFIX}-{state.name}-node{index}",
                                str(directory / "flanneld.log"), marker=str(directory / "subnet.env"))))
        self.progress(f"lab {state.name}: {spec.nodes} node namespaces, underlay {UNDERLAY_PREFIX}.0/24")
        self._build_underlay()
        self.progress(f"starting etcd in {state.etcd.namespace}")
        self._start_etcd()
        self.progress("starting flanneld on every node")
        # (one at a time: flanneld picks a free subnet at random and exits
        # when another node took it between its read and its write — etcd's
        # "subnet already exists" — as two started at once sometimes do)
        for node in state.nodes:
            self._start_flanneld(node)
            self._wait_subnet(node, spec.timeout_s)
        self._wait_vxlan_peers(spec.timeout_s)
        self.progress(f"attaching {spec.pods_per_node} pod(s) per node with the flannel CNI plugin")
        for node in state.nodes:
            for _ in range(spec.pods_per_node):
                self.add_pod(node.name)
        self._install_kube_proxy()
        state.save()

    def _check_not_removed(self) -> None:
        """A signal's handler may have removed the lab while it was being built."""
        if self._down:
            raise FlannelLabError(f"lab {self.state.name} was removed while it was being built (interrupted)")

    def _new_namespace(self, name: str) -> Namespace:
        self._check_not_removed()
        # Adopt before creating, so teardown finds it even if creation is interrupted.
        self.state.namespaces.append(name)
        self.state.save()
        return Namespace.create(name)

    def _build_underlay(self) -> None:
        state = self.state
        if state.underlay_namespace:
            switch = self._new_namespace(state.underlay_namespace)
            switch.run(["ip", "link", "add", "br0", "type", "bridge"])
            switch.run(["ip", "link", "set", "br0", "up"])
        for node in state.nodes:
            self._new_namespace(node.namespace)
        if state.underlay_namespace:
            for node in state.nodes:
                _ip(state.underlay_namespace, "link", "add", node.name, "type", "veth",
                    "peer", "name", "eth0", "netns", node.namespace)
                _ip(state.underlay_namespace, "link", "set", node.name, "master", "br0", "up")
        else:
            first, second = state.nodes
            _ip(first.namespace, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
                "netns", second.namespace)
        for node in state.nodes:
            _ip(node.namespace, "addr", "add", f"{node.underlay_ip}/24", "dev", "eth0")
            _ip(node.namespace, "link", "set", "eth0", "up")
            ns = Namespace(node.namespace)
            ns.sysctl("net.ipv4.ip_forward", 1)
            # What kubelet setups require (br_netfilter is per namespace on this kernel).
            with contextlib.suppress(OSError):
                ns.sysctl("net.bridge.bridge-nf-call-iptables", 1)

    def _start_daemon(self, daemon: Daemon, argv: list[str]) -> None:
        self._check_not_removed()
        with open(daemon.log, "ab") as log:
            proc = subprocess.Popen(["ip", "netns", "exec", daemon.namespace, *argv], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        daemon.pid = proc.pid      # ip netns exec execs the daemon: same pid
        self._children[proc.pid] = proc
        self.state.save()

    def _start_etcd(self) -> None:
        etcd, first = self.state.etcd, self.state.nodes[0]
        name = f"{NAMESPACE_PREFIX}-{self.state.name}"
        clients = f"http://127.0.0.1:{ETCD_CLIENT_PORT},http://{first.underlay_ip}:{ETCD_CLIENT_PORT}"
        peer = "http://127.0.0.1:2380"
        self._start_daemon(etcd, [
            "etcd", "--name", name, "--data-dir", etcd.marker,
            "--listen-client-urls", clients, "--advertise-client-urls", self.state.etcd_endpoint,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{name}={peer}", "--initial-cluster-state", "new",
            "--logger", "zap", "--log-outputs", "stderr",
        ])
        self._wait(etcd, "etcd to answer its health check", 20.0, self._etcd_healthy)
        # (a run file from before the options were kept: flannel's defaults)
        config = json.dumps({**NETWORK_CONFIG, "Backend": self.state.backend or FlannelLabSpec().backend()})
        done = Namespace(first.namespace).run(self._etcdctl("put", f"{ETCD_PREFIX}/config", config), check=False)
        if done.returncode != 0:
            raise self._failure(etcd, f"could not store flannel's network config: {done.stderr.strip()}")

    def _etcdctl(self, *args: str) -> list[str]:
        return ["env", "ETCDCTL_API=3", "etcdctl", "--dial-timeout=1s", "--command-timeout=2s",
                f"--endpoints=http://127.0.0.1:{ETCD_CLIENT_PORT}", *args]

    def _etcd_healthy(self) -> bool:
        done = Namespace(self.state.nodes[0].namespace).run(self._etcdctl("endpoint", "health"), check=False)
        return done.returncode == 0

    def _start_flanneld(self, node: Node) -> None:
        self._start_daemon(node.flanneld, [
            str(self.binaries.flanneld),
            f"--etcd-endpoints={self.state.etcd_endpoint}", f"--etcd-prefix={ETCD_PREFIX}",
            "--iface=eth0", "--ip-masq", f"--subnet-file={node.subnet_file}",
        ])

    def _wait_subnet(self, node: Node, timeout: float) -> None:
        def leased() -> bool:
            env = _read_env(node.subnet_file)
            if "FLANNEL_SUBNET" not in env:
                return False
            node.subnet, node.mtu = env["FLANNEL_SUBNET"], int(env.get("FLANNEL_MTU", "0")) or None
            return True

        self._wait(node.flanneld, f"flanneld on {node.name} to write {node.subnet_file}", timeout, leased)
        self.progress(f"{node.name}: subnet {node.subnet}, MTU {node.mtu}")
        self.state.save()

    def _wait_vxlan_peers(self, timeout: float) -> None:
        """flannel.1 on every node has FDB and neighbour entries for every other node."""
        for node in self.state.nodes:
            others = [n for n in self.state.nodes if n is not node]

            def programmed(node: Node = node, others: list[Node] = others) -> bool:
                fdb = _json(node.namespace, ["bridge", "-j", "fdb", "show", "dev", VXLAN_DEVICE])
                neigh = _json(node.namespace, ["ip", "-j", "neigh", "show", "dev", VXLAN_DEVICE])
                if fdb is None or neigh is None:
                    return False
                remote_vteps = {entry.get("dst") for entry in fdb}
                gateways = {entry.get("dst") for entry in neigh}
                return all(o.underlay_ip in remote_vteps and _network_address(o.subnet) in gateways
                           for o in others)

            self._wait(node.flanneld, f"flanneld on {node.name} to program {VXLAN_DEVICE} for the other nodes",
                       timeout, programmed)

    def _install_kube_proxy(self) -> None:
        last = self.state.nodes[-1]
        endpoints = self.pods_on(last.name)
        if not endpoints:
            return
        self.state.service = Service(name=SERVICE_NAME, cluster_ip=SERVICE_IP, ports=list(SERVICE_PORTS),
                                     endpoint_pod=endpoints[0].name, endpoint_ip=endpoints[0].ip or "")
        rules = ruleset(self.state.service, NETWORK)
        for node in self.state.nodes:
            Namespace(node.namespace).run(["iptables-restore", "--noflush"], input=rules)

    def _wait(self, daemon: Daemon, what: str, timeout: float, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + timeout
        proc = self._children.get(daemon.pid or -1)
        while not ready():
            self._check_not_removed()
            if proc is not None and proc.poll() is not None:
                raise self._failure(daemon, f"{daemon.name} exited (status {proc.returncode}) "
                                            f"while waiting for {what}")
            if time.monotonic() > deadline:
                raise self._failure(daemon, f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.1)

    def _failure(self, daemon: Daemon, message: str) -> FlannelLabError:
        return FlannelLabError(f"{message}; {daemon.name} log {daemon.log} ends:\n{log_tail(daemon.log)}")

    # --- CNI -----------------------------------------------------------------

    def _cni_config(self, node: Node) -> dict:
        return {
            "cniVersion": "0.3.1", "name": CNI_NETWORK_NAME, "type": "flannel",
            "subnetFile": node.subnet_file, "dataDir": node.cni_data_dir,
            # host-local's leases per node, in the lab directory (not /var/lib/cni).
            "ipam": {"type": "host-local", "dataDir": node.ipam_data_dir},
            "delegate": {"bridge": BRIDGE, "hairpinMode": True, "isDefaultGateway": True},
        }

    def _cni(self, command: str, node: Node, pod: Pod) -> dict:
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command, "CNI_CONTAINERID": pod.container_id,
            "CNI_NETNS": f"/run/netns/{pod.namespace}", "CNI_IFNAME": "eth0",
            "CNI_PATH": f"{self.binaries.directory}:{CNI_PLUGIN_DIR}",
        }
        argv = ["nsenter", f"--net=/run/netns/{node.namespace}", "--", str(self.binaries.cni_flannel)]
        try:
            done = subprocess.run(argv, input=json.dumps(self._cni_config(node)), env=env,
                                  capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FlannelLabError(f"CNI {command} of {pod.name} on {node.name}: {exc}") from exc
        if done.returncode != 0:
            raise FlannelLabError(f"CNI {command} of {pod.name} on {node.name} failed (exit {done.returncode}): "
                                  f"{(done.stdout + done.stderr).strip()}")
        return json.loads(done.stdout) if done.stdout.strip() else {}

    @staticmethod
    def _read_cni_result(pod: Pod, result: dict) -> None:
        interfaces = result.get("interfaces", [])
        for ip in result.get("ips", []):
            pod.ip = ip["address"].split("/")[0]
            index = ip.get("interface")
            if index is not None and index < len(interfaces):
                pod.mac = interfaces[index].get("mac")
        for interface in interfaces:
            if not interface.get("sandbox") and interface.get("name") != BRIDGE:
                pod.host_veth = interface.get("name")

    def _node_of(self, pod: Pod) -> str:
        return self.state.node(pod.node).namespace

    # --- teardown ------------------------------------------------------------

    def _stop(self, daemon: Daemon) -> list[str]:
        """SIGTERM, then SIGKILL after 5 s; reaped if it is our child.  Only a
        process whose command line still names the lab directory is signalled."""
        if daemon.pid is None or not _runs(daemon.pid, daemon.marker):
            self._reap(daemon.pid)
            return []
        for signum, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(daemon.pid, signum)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                self._reap(daemon.pid)
                if not _runs(daemon.pid, daemon.marker):
                    return []
                time.sleep(0.05)
        return [f"{daemon.name} (pid {daemon.pid}) did not exit after SIGKILL"]

    def _reap(self, pid: int | None) -> None:
        proc = self._children.get(pid or -1)
        if proc is not None and proc.poll() is not None:
            self._children.pop(proc.pid, None)


# --- helpers -------------------------------------------------------------------

def _ip(namespace: str, *args: str) -> None:
    done = subprocess.run(["ip", "-n", namespace, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise FlannelLabError(f"ip -n {namespace} {' '.join(args)}: {done.stderr.strip()}")


def _json(namespace: str, argv: list[str]) -> list | None:
    done = Namespace(namespace).run(argv, check=False)
    if done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout or "[]")
    except ValueError:
        return None


# what flanneld (pkg/backend/vxlan/vxlan_network.go) logs as it programs a remote lease
LEASE_HANDLED = "Received Subnet Event with VxLan"


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _log_since(path: str, offset: int) -> str:
    try:
        with open(path, errors="replace") as log:
            log.seek(offset)
            return log.read()
    except OSError:
        return ""


def _read_env(path: str) -> dict[str, str]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _network_address(subnet: str | None) -> str | None:
    """198.18.57.1/24 -> 198.18.57.0: the remote VTEP's address flanneld puts in the neighbour table."""
    if not subnet:
        return None
    return str(ipaddress.ip_interface(subnet).network.network_address)


def _runs(pid: int, marker: str) -> bool:
    """Is `pid` alive (not a zombie) and still the process whose command line names `marker`?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and marker in cmdline


def _scratch_directory(name: str) -> Path:
    """The lab's temporary directory, never inside the checkout."""
    checkout = Path(__file__).resolve().parents[2]
    parent = Path(tempfile.gettempdir()).resolve()
    if parent == checkout or checkout in parent.parents:
        parent = Path("/tmp")
    return Path(tempfile.mkdtemp(prefix=f"linuxfp-flannel-{name}-", dir=parent))


def summary_text(data: dict) -> str:
    """What `linuxfp lab flannel up` prints."""
    backend = data.get("backend") or {}
    options = "".join(f", {name}" for name in ("GBP", "Learning") if backend.get(name))
    lines = [f"Flannel lab {data['name']}: pod network {data['network']}, "
             f"VXLAN VNI {backend.get('VNI', VNI)} port {backend.get('Port', VXLAN_PORT)}{options}",
             f"  etcd {data['etcd_endpoint']} in {data['etcd']['namespace']} (pid {data['etcd']['pid']})"]
    for node in data["nodes"]:
        lines.append(f"  {node['name']}: netns {node['namespace']}, eth0 {node['underlay_ip']}, "
                     f"subnet {node['subnet']}, MTU {node['mtu']}, flanneld pid {node['flanneld']['pid']}")
        for pod in data["pods"]:
            if pod["node"] == node["name"]:
                lines.append(f"    {pod['name']}: netns {pod['namespace']}, eth0 {pod['ip']}, "
                             f"host side {pod['host_veth']} on {BRIDGE}")
    service = data.get("service")
    if service:
        ports = ", ".join(f"{p['port']}/{p['protocol']}" for p in service["ports"])
        lines.append(f"  service {service['name']}: {service['cluster_ip']} ({ports}) -> "
                     f"{service['endpoint_pod']} {service['endpoint_ip']}:{service['ports'][0]['target_port']}")
    lines.append(f"  logs and data: {data['directory']}; run file {data['run_file']}")
    lines.append(f"  remove with: linuxfp lab flannel down --name {data['name']}")
    return "\n".join(lines)
