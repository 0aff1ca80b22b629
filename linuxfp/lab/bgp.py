"""A routing-daemon lab: BIRD 2 feeds the router line's DUT over a real BGP
session, so the DUT's routes come from a daemon the way they do in
production, and can be withdrawn and re-announced by the thousand.

Built on the paper's router line (`RouterTopology`, ``src — dut — sink``):
the *sink* is the BGP peer.  BIRD runs in the sink (AS 64497) and announces
`prefixes` routes over eBGP to BIRD in the DUT (AS 64496), between the
addresses of the dut–sink link (198.18.2.1 ↔ 198.18.2.254).  The DUT's
BIRD exports everything it learns into the DUT's kernel FIB (``proto bird``,
next hop 198.18.2.1), so traffic to an announced prefix is forwarded to the
sink, where the router line captures it, and traffic to a withdrawn one
meets "no route" in the DUT.  (ASNs are the documentation ones, RFC 5398.)

Announced prefixes (`announced_prefixes`) are /32s, then /31s, /30s, ...
inside 198.19.32.0–198.19.255.255 (three blocks, up to 114 685 prefixes):
the line's own subnets (198.18.1.0/24, 198.18.2.0/24, the lazy prefix
198.18.200.0/24 and the source pool 198.18.64.0/18) are all outside, and so
are the router's static /24s as long as it has at most 32 of them
(198.19.0.0–198.19.31.0).

On the peer the prefixes sit in BIRD static protocols: ``stable`` (the first
`stable` prefixes, never touched) and ``flap0``, ``flap1``, ... (the rest,
`slice_size` each).  Withdrawing a slice is ``birdc disable flapN`` on the
peer's control socket, re-announcing it ``birdc enable flapN``; every step
waits until the DUT's kernel FIB holds exactly the announced set.

Each BIRD gets its own configuration, log and control socket in a temporary
directory outside the work tree (``bird -f -s SOCK -c CONF -P PIDFILE``); the
daemons are owned by the `Lab` as well, so they die with it on failures,
SIGINT/SIGTERM and interpreter exit, and the directory is removed on close
(or at exit).

    with Lab() as lab:
        router = RouterTopology(prefixes=1)(lab)
        with BgpFeed(lab, router, prefixes=100_000, stable=1000) as bgp:
            bgp.wait_installed()
            gone = bgp.withdraw(5000)          # returns once the DUT's FIB lacks them
            bgp.reannounce(gone)               # ... and once it holds them again
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Self

from .netns import Lab, LabError, Namespace, _stop
from .topology import Router, RouterTopology

DUT_ASN = 64496   # RFC 5398 documentation ASNs
PEER_ASN = 64497
RTPROT_BIRD = 12  # the kernel's protocol number for routes BIRD installs
PREFIX_BLOCKS = (
    IPv4Network("198.19.32.0/19"),
    IPv4Network("198.19.64.0/18"),
    IPv4Network("198.19.128.0/17"),
)
# Longest first, so small counts are all host routes.
_LENGTHS = tuple(range(32, min(block.prefixlen for block in PREFIX_BLOCKS) - 1, -1))
MAX_PREFIXES = sum(
    block.num_addresses >> (32 - length)
    for length in _LENGTHS
    for block in PREFIX_BLOCKS
    if length >= block.prefixlen
)
_LOG_CLASSES = "{ info, remote, warning, error, auth, fatal, bug }"


def announced_prefixes(count: int) -> tuple[IPv4Network, ...]:
    """The first `count` prefixes a `BgpFeed` announces, in announcement order."""
    if not 0 <= count <= MAX_PREFIXES:
        raise ValueError(f"a BGP lab announces 0..{MAX_PREFIXES} prefixes, not {count}")
    prefixes: list[IPv4Network] = []
    for length in _LENGTHS:
        for block in PREFIX_BLOCKS:
            if length < block.prefixlen:
                continue
            step = 1 << (32 - length)
            start = int(block.network_address)
            for base in range(start, start + block.num_addresses, step):
                if len(prefixes) == count:
                    return tuple(prefixes)
                prefixes.append(IPv4Network((base, length)))
    return tuple(prefixes)


def fib_key(prefix: IPv4Network) -> str:
    """A prefix as ``ip route show`` prints it (host routes without ``/32``)."""
    return str(prefix.network_address) if prefix.prefixlen == 32 else str(prefix)


def _scratch_directory() -> Path:
    """A fresh directory for configs, sockets and logs, never inside the checkout."""
    checkout = Path(__file__).resolve().parents[2]
    parent = Path(tempfile.gettempdir()).resolve()
    if parent == checkout or checkout in parent.parents:
        parent = Path("/tmp")
    return Path(tempfile.mkdtemp(prefix="linuxfp-bgp-", dir=parent))


class BgpFeed:
    """BIRD in the router line's sink announcing `prefixes` routes to BIRD in its DUT.

    A context manager: entering starts both daemons (peer first, it is
    passive) and returns once both control sockets answer; leaving stops
    them and removes the scratch directory.  It does not wait for the routes:
    call `wait_installed`.
    """

    def __init__(self, lab: Lab, router: Router, prefixes: int, *, stable: int = 0,
                 slice_size: int = 1000, timeout: float = 60.0) -> None:
        if not 0 <= stable <= prefixes:
            raise ValueError("stable must be between 0 and the number of prefixes")
        if slice_size < 1:
            raise ValueError("slice_size must be positive")
        _check_disjoint(router)
        self.lab, self.router, self.timeout = lab, router, timeout
        self.prefixes = announced_prefixes(prefixes)
        self.stable = self.prefixes[:stable]
        rest = self.prefixes[stable:]
        self.slices: tuple[tuple[IPv4Network, ...], ...] = tuple(
            rest[i:i + slice_size] for i in range(0, len(rest), slice_size))
        self.slice_size = slice_size
        self.dut_ip = RouterTopology.DUT_RIGHT_IP
        self.peer_ip = RouterTopology.SINK_IP
        self.withdrawn: set[int] = set()   # slice numbers currently disabled on the peer
        self._cursor = 0
        self._slice_of = {p: n for n, members in enumerate(self.slices) for p in members}
        self.directory: Path | None = None
        self._processes: list[subprocess.Popen] = []
        self._cleanup: weakref.finalize | None = None

    # --- lifecycle ----------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def dut(self) -> Namespace:
        return self.router.dut

    @property
    def peer(self) -> Namespace:
        return self.router.sink

    def socket(self, role: str) -> Path:
        """The control socket of the ``"peer"`` or ``"dut"`` BIRD."""
        assert self.directory is not None, "BgpFeed not started"
        return self.directory / f"{role}.ctl"

    def log(self, role: str) -> str:
        """What that BIRD logged so far (protocol state changes, errors)."""
        if self.directory is None:
            return ""
        text = ""
        for name in (f"{role}.log", f"{role}.out"):
            with contextlib.suppress(OSError):
                text += (self.directory / name).read_text(errors="replace")
        return text

    def start(self) -> None:
        if shutil.which("bird") is None or shutil.which("birdc") is None:
            raise LabError("bird/birdc not found: install BIRD 2 (apt-get install bird2, "
                           "or scripts/install-deps.sh)")
        self.directory = _scratch_directory()
        # Removed by close(), by the lab's close (also on SIGINT/SIGTERM), or at exit.
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.directory), True)
        self.lab.on_close(self._cleanup)
        self._write("peer", self._peer_config())
        self._write("dut", self._dut_config())
        self._start_bird("peer", self.peer)     # passive: waits for the DUT to connect
        self._start_bird("dut", self.dut)

    def close(self) -> None:
        """Stop both daemons and remove the scratch directory. Idempotent."""
        processes, self._processes = self._processes, []
        for proc in processes:
            _stop(proc)
        if self._cleanup is not None:
            self._cleanup()

    def _write(self, role: str, text: str) -> None:
        assert self.directory is not None
        (self.directory / f"{role}.conf").write_text(text)

    def _start_bird(self, role: str, ns: Namespace) -> None:
        assert self.directory is not None
        argv = ["bird", "-f", "-s", str(self.socket(role)), "-c", str(self.directory / f"{role}.conf"),
                "-P", str(self.directory / f"{role}.pid")]
        with open(self.directory / f"{role}.out", "w") as out:
            proc = self.lab.popen(ns, argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self._processes.append(proc)
        deadline = time.monotonic() + self.timeout
        while True:
            if proc.poll() is not None:
                raise LabError(f"bird ({role}, {ns.name}) exited with {proc.returncode}:\n{self.log(role)}")
            done = subprocess.run(["birdc", "-s", str(self.socket(role)), "show", "status"],
                                  capture_output=True, text=True, check=False)
            if done.returncode == 0 and "Daemon is up and running" in done.stdout:
                return
            if time.monotonic() > deadline:
                raise LabError(f"bird ({role}, {ns.name}) did not come up:\n{done.stdout}{done.stderr}"
                               f"\n{self.log(role)}")
            time.sleep(0.05)

    # --- configuration ------------------------------------------------------

    def _dut_config(self) -> str:
        assert self.directory is not None
        return f"""\
# LinuxFP BGP lab: the DUT learns routes over eBGP and exports them into its kernel FIB.
log "{self.directory / 'dut.log'}" {_LOG_CLASSES};
router id {self.dut_ip};
protocol device {{ scan time 10; }}
protocol kernel {{
    scan time 60;
    netlink rx buffer {1 << 26};   # the echo of 100k route installs overran the default 1 MB
    ipv4 {{ import none; export all; }};
}}
protocol bgp peer {{
    local {self.dut_ip} as {DUT_ASN};
    neighbor {self.peer_ip} as {PEER_ASN};
    connect delay time 1;
    connect retry time 1;
    error wait time 1, 4;
    ipv4 {{ import all; export none; }};
}}
"""

    def _peer_config(self) -> str:
        assert self.directory is not None
        lines = [
            "# LinuxFP BGP lab: the peer announces static prefixes over eBGP; nothing goes to its kernel.",
            f'log "{self.directory / "peer.log"}" {_LOG_CLASSES};',
            f"router id {self.peer_ip};",
            "protocol device { scan time 10; }",
        ]
        groups = ([("stable", self.stable)] if self.stable else [])
        groups += [(f"flap{n}", members) for n, members in enumerate(self.slices)]
        for name, members in groups:
            lines.append(f"protocol static {name} {{")
            lines.append("    ipv4;")
            lines.extend(f"    route {p} blackhole;" for p in members)
            lines.append("}")
        lines.append(f"""\
protocol bgp dut {{
    local {self.peer_ip} as {PEER_ASN};
    neighbor {self.dut_ip} as {DUT_ASN};
    passive on;
    ipv4 {{ import none; export all; }};
}}""")
        return "\n".join(lines) + "\n"

    # --- control ------------------------------------------------------------

    def birdc(self, role: str, *command: str) -> str:
        """Run one birdc command against the ``"peer"`` or ``"dut"`` BIRD; returns its output."""
        done = subprocess.run(["birdc", "-s", str(self.socket(role)), *command],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0 or "syntax error" in done.stdout.lower():
            raise LabError(f"birdc {' '.join(command)} ({role}) failed (exit {done.returncode}):\n"
                           f"{done.stdout}{done.stderr}")
        return done.stdout

    def dut_routes(self) -> set[str]:
        """The DUT's kernel routes installed by BIRD, as `fib_key` strings."""
        listing = self.dut.run(["ip", "-4", "route", "show", "table", "main", "proto", str(RTPROT_BIRD)]).stdout
        return {line.split(None, 1)[0] for line in listing.splitlines() if line and not line[0].isspace()}

    def announced(self) -> tuple[IPv4Network, ...]:
        """The prefixes the peer announces right now."""
        return self.stable + tuple(p for n, members in enumerate(self.slices) if n not in self.withdrawn
                                   for p in members)

    def wait_installed(self, timeout: float | None = None) -> float:
        """Wait until the DUT's FIB holds exactly what the peer announces; returns the seconds waited."""
        return self._wait_for({fib_key(p) for p in self.announced()}, timeout)

    def _wait_for(self, expected: set[str], timeout: float | None) -> float:
        started = time.monotonic()
        deadline = started + (self.timeout if timeout is None else timeout)
        while True:
            routes = self.dut_routes()
            if routes == expected:
                return time.monotonic() - started
            if time.monotonic() > deadline:
                missing, extra = expected - routes, routes - expected
                raise LabError(
                    f"the DUT's FIB did not converge within {deadline - started:.0f}s: "
                    f"{len(routes)} BIRD routes, {len(missing)} missing (e.g. {sorted(missing)[:3]}), "
                    f"{len(extra)} unexpected (e.g. {sorted(extra)[:3]})\n"
                    f"peer:\n{self._protocols('peer')}\ndut:\n{self._protocols('dut')}\n"
                    f"dut log:\n{self.log('dut')[-2000:]}")
            time.sleep(0.05)

    def _protocols(self, role: str) -> str:
        try:
            return self.birdc(role, "show", "protocols")
        except LabError as exc:
            return str(exc)

    def _pick(self, count: int) -> list[int]:
        """Slices announced now that together hold at least `count` prefixes, round robin."""
        chosen: list[int] = []
        held = 0
        if count <= 0:
            return chosen
        for offset in range(len(self.slices)):
            if held >= count:
                break
            n = (self._cursor + offset) % len(self.slices)
            if n not in self.withdrawn:
                chosen.append(n)
                held += len(self.slices[n])
        if held < count:
            raise LabError(f"cannot withdraw {count} prefixes: only {held} are announced outside 'stable'")
        self._cursor = (chosen[-1] + 1) % len(self.slices)
        return chosen

    def withdraw(self, count: int, timeout: float | None = None) -> tuple[IPv4Network, ...]:
        """Withdraw at least `count` prefixes (whole slices, taken round robin) on the peer;
        returns them once the DUT's FIB no longer holds any of them."""
        chosen = self._pick(count)
        for n in chosen:
            self.birdc("peer", "disable", f"flap{n}")
            self.withdrawn.add(n)
        self.wait_installed(timeout)
        return tuple(p for n in chosen for p in self.slices[n])

    def reannounce(self, prefixes: Iterable[IPv4Network], timeout: float | None = None) -> None:
        """Announce withdrawn prefixes again (by slice); returns once the DUT's FIB holds them."""
        slices = sorted({self._slice_of[p] for p in prefixes})
        for n in slices:
            if n in self.withdrawn:
                self.birdc("peer", "enable", f"flap{n}")
                self.withdrawn.discard(n)
        self.wait_installed(timeout)

    def flap(self, count: int, timeout: float | None = None) -> tuple[IPv4Network, ...]:
        """Withdraw `count` prefixes (rounded up to whole slices), then re-announce them,
        waiting for the DUT's FIB after each step; returns the flapped prefixes."""
        gone = self.withdraw(count, timeout)
        self.reannounce(gone, timeout)
        return gone


def _check_disjoint(router: Router) -> None:
    """The announced blocks must not overlap anything the router line routes or owns."""
    own: list[IPv4Network] = [*router.prefixes, router.source_pool, router.lazy_prefix]
    own += [address.network for interface in router.interfaces for address in interface.addresses]
    for block in PREFIX_BLOCKS:
        for network in own:
            if block.overlaps(network):
                raise LabError(f"the BGP lab's block {block} overlaps the router line's {network}: "
                               "use RouterTopology(prefixes<=32)")


def addresses_in(prefixes: Sequence[IPv4Network], count: int) -> list[IPv4Address]:
    """`count` destinations spread evenly over `prefixes`, one per chosen prefix."""
    if not prefixes:
        return []
    step = max(1, len(prefixes) // count)
    return [prefixes[i].network_address for i in range(0, len(prefixes), step)][:count]


__all__ = [
    "DUT_ASN",
    "MAX_PREFIXES",
    "PEER_ASN",
    "PREFIX_BLOCKS",
    "BgpFeed",
    "addresses_in",
    "announced_prefixes",
    "fib_key",
]
