"""Builds and caches the Go programs of the Flannel lab: flanneld and the
`flannel` CNI meta-plugin (neither is packaged in Debian 12).

The binaries live outside the work tree, in ``$LINUXFP_LAB_CACHE`` or
``/var/cache/linuxfp-lab``, in a directory named after the versions, with a
stamp written last: a later lab finds them there and runs no Go at all.

Why the build is not a plain ``go install``:
- ``go install github.com/flannel-io/flannel@v0.28.4`` fails: the Go module
  proxy refuses one of its dependency versions
  (tencentcloud-sdk-go/tencentcloud/common v1.3.79, HTTP 403).  The same
  module source, fetched with ``go mod download`` and built in a writable
  copy whose go.mod requires v1.3.103 instead, builds fine.
- flannel v0.28.4 needs Go >= 1.25 and Debian 12's golang-go is 1.19.  A go
  on PATH that is new enough is used as is; otherwise Debian's go downloads
  a toolchain from the module proxy (module ``golang.org/toolchain``) and
  that toolchain builds.

The first build takes a few minutes (cgo on), so it reports progress.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FLANNEL_MODULE = "github.com/flannel-io/flannel"
FLANNEL_VERSION = "v0.28.4"
# The version flannel v0.28.4 asks for is refused by the proxy (HTTP 403).
REFUSED_DEPENDENCY = "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
REPLACEMENT_VERSION = "v1.3.103"
CNI_FLANNEL_PACKAGE = "github.com/containernetworking/plugins/plugins/meta/flannel"
CNI_FLANNEL_VERSION = "v0.9.1"
MIN_GO = (1, 25)
BOOTSTRAP_TOOLCHAIN = "v0.0.1-go1.25.5.linux-amd64"
DEFAULT_CACHE = Path("/var/cache/linuxfp-lab")
BUILD_TIMEOUT_S = 1800   # per go command: a cold build on 2 slow vCPUs, downloads included
HEARTBEAT_S = 30         # a progress line this often while go runs

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """The Go build failed; the message names the step and carries go's output."""


@dataclass(frozen=True)
class FlannelBinaries:
    """The cached programs: ``flanneld`` and the CNI plugin named ``flannel``."""

    directory: Path

    @property
    def flanneld(self) -> Path:
        return self.directory / "flanneld"

    @property
    def cni_flannel(self) -> Path:
        return self.directory / "flannel"

    @property
    def stamp(self) -> Path:
        return self.directory / "STAMP.json"


@dataclass(frozen=True)
class GoToolchain:
    go: Path
    version: tuple[int, int]


def _stderr_progress(message: str) -> None:
    print(f"flannel build: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    return Path(os.environ.get("LINUXFP_LAB_CACHE") or DEFAULT_CACHE)


def _stamp_content() -> dict[str, str]:
    return {
        "flannel": FLANNEL_VERSION,
        "replaced": f"{REFUSED_DEPENDENCY}@{REPLACEMENT_VERSION}",
        "cni-flannel": CNI_FLANNEL_VERSION,
    }


def cached_binaries() -> FlannelBinaries:
    """Where this version's binaries are (or will be) cached."""
    name = f"flannel-{FLANNEL_VERSION}-cni-{CNI_FLANNEL_VERSION}"
    return FlannelBinaries(cache_root() / name)


def _is_complete(binaries: FlannelBinaries) -> bool:
    try:
        stamp = json.loads(binaries.stamp.read_text())
    except (OSError, ValueError):
        return False
    return (stamp == _stamp_content()
            and os.access(binaries.flanneld, os.X_OK)
            and os.access(binaries.cni_flannel, os.X_OK))


def ensure_binaries(progress: Progress = _stderr_progress) -> FlannelBinaries:
    """The cached binaries, built first if they are not there yet.

    Concurrent callers wait on a lock instead of building twice; the build
    goes to a scratch directory renamed into place, so a half-done build is
    never taken for a finished one.
    """
    binaries = cached_binaries()
    if _is_complete(binaries):
        return binaries
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(binaries):
            return binaries
        started = time.monotonic()
        progress(f"building flanneld {FLANNEL_VERSION} and the flannel CNI plugin {CNI_FLANNEL_VERSION} "
                 f"into {binaries.directory} (first use only; takes a few minutes)")
        with tempfile.TemporaryDirectory(prefix=".build-", dir=root) as scratch:
            work = Path(scratch)
            go = find_go(work, progress)
            output = work / "out"
            output.mkdir()
            _build_flanneld(go, work, output, progress)
            _build_cni_flannel(go, work, output, progress)
            (output / "STAMP.json").write_text(json.dumps(_stamp_content(), indent=2) + "\n")
            shutil.rmtree(binaries.directory, ignore_errors=True)
            output.rename(binaries.directory)
        progress(f"done in {time.monotonic() - started:.0f} s")
    return binaries


# --- Go ----------------------------------------------------------------------

def _go_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    # Exactly the go chosen here, never one go fetches by itself; modules
    # from the proxy only (the internet here reaches nothing else).
    env["GOTOOLCHAIN"] = "local"
    env.setdefault("GOPROXY", "https://proxy.golang.org")
    env["GOFLAGS"] = "-buildvcs=false"
    env["CGO_ENABLED"] = "1"
    env.pop("GOBIN", None)
    env["GOWORK"] = "off"
    env.setdefault("HOME", str(work))
    return env


def _go(go: Path, args: list[str], work: Path, cwd: Path, step: str,
        extra_env: dict[str, str] | None = None, progress: Progress = _stderr_progress) -> str:
    env = _go_env(work) | (extra_env or {})
    # Own process group, so an interrupted build takes go's compilers with it.
    proc = subprocess.Popen([str(go), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    started = time.monotonic()
    try:
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - started
                if elapsed > BUILD_TIMEOUT_S:
                    raise
                progress(f"... still {step} ({elapsed:.0f} s)")
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise BuildError(f"{step}: go {' '.join(args)} did not finish within {BUILD_TIMEOUT_S} s") from exc
        raise
    if proc.returncode != 0:
        tail = "\n".join((stderr or stdout).strip().splitlines()[-25:])
        raise BuildError(f"{step} failed: {go} {' '.join(args)} (exit {proc.returncode})\n{tail}")
    return stdout


def _go_version(go: Path) -> tuple[int, int] | None:
    try:
        done = subprocess.run([str(go), "env", "GOVERSION"], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, GOTOOLCHAIN="local"), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.match(r"go(\d+)\.(\d+)", done.stdout.strip())
    return (int(match[1]), int(match[2])) if done.returncode == 0 and match else None


def _candidate_gos() -> list[Path]:
    if forced := os.environ.get("LINUXFP_LAB_GO"):
        # Exactly this go (e.g. Debian's, to exercise the bootstrap).
        return [Path(forced)]
    found = [shutil.which("go"), "/usr/local/go/bin/go", "/usr/lib/go/bin/go", "/usr/bin/go"]
    seen: list[Path] = []
    for path in found:
        if path and os.access(path, os.X_OK) and Path(path).resolve() not in [p.resolve() for p in seen]:
            seen.append(Path(path))
    return seen


def find_go(work: Path, progress: Progress = _stderr_progress) -> GoToolchain:
    """A go >= 1.25: one already installed, else one bootstrapped by Debian's go."""
    old: GoToolchain | None = None
    for go in _candidate_gos():
        version = _go_version(go)
        if version is None:
            continue
        if version >= MIN_GO:
            progress(f"using {go} (go{version[0]}.{version[1]})")
            return GoToolchain(go, version)
        old = old or GoToolchain(go, version)
    if old is None:
        raise BuildError("no go found: install Debian's golang-go (apt-get install golang-go); "
                         "the lab uses it to fetch a Go >= 1.25 toolchain")
    return bootstrap_toolchain(old, work, progress)


def bootstrap_toolchain(old: GoToolchain, work: Path, progress: Progress = _stderr_progress) -> GoToolchain:
    """Fetch Go 1.25 as the module golang.org/toolchain with an older go; cached next to the binaries."""
    target = cache_root() / f"go-{BOOTSTRAP_TOOLCHAIN}"
    go = target / "bin" / "go"
    if (version := _go_version(go)) is not None and version >= MIN_GO:
        progress(f"using the bootstrapped {go}")
        return GoToolchain(go, version)
    progress(f"go{old.version[0]}.{old.version[1]} ({old.go}) is older than 1.25: "
             f"downloading golang.org/toolchain@{BOOTSTRAP_TOOLCHAIN} from the module proxy")
    out = _go(old.go, ["mod", "download", "-json", f"golang.org/toolchain@{BOOTSTRAP_TOOLCHAIN}"],
              work, work, "downloading the Go toolchain", progress=progress)
    source = Path(json.loads(out)["Dir"])
    staging = Path(tempfile.mkdtemp(prefix=".go-", dir=cache_root()))
    try:
        shutil.copytree(source, staging / "go", symlinks=True)
        # Module zips carry no file modes: make the toolchain's programs executable again.
        for program in [*(staging / "go" / "bin").iterdir(), *(staging / "go" / "pkg" / "tool").glob("*/*")]:
            program.chmod(program.stat().st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        shutil.rmtree(target, ignore_errors=True)
        (staging / "go").rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    version = _go_version(go)
    if version is None or version < MIN_GO:
        raise BuildError(f"the downloaded toolchain {go} does not run or is too old ({version})")
    return GoToolchain(go, version)


# --- the two programs --------------------------------------------------------

def _build_flanneld(go: GoToolchain, work: Path, output: Path, progress: Progress) -> None:
    progress(f"fetching the {FLANNEL_MODULE}@{FLANNEL_VERSION} source")
    out = _go(go.go, ["mod", "download", "-json", f"{FLANNEL_MODULE}@{FLANNEL_VERSION}"],
              work, work, "downloading the flannel source", progress=progress)
    source = work / "flannel"
    shutil.copytree(json.loads(out)["Dir"], source, symlinks=True)
    for path in [source, *source.rglob("*")]:      # the module cache is read-only
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    _go(go.go, ["mod", "edit", f"-require={REFUSED_DEPENDENCY}@{REPLACEMENT_VERSION}"],
        work, source, "replacing the refused dependency version")
    progress("downloading flannel's dependencies and compiling flanneld (cgo; the longest step)")
    # -mod=mod: go.sum lacks the replacement's checksums; go adds them.
    ldflags = f"-s -w -X {FLANNEL_MODULE}/pkg/version.Version={FLANNEL_VERSION}"
    _go(go.go, ["build", "-mod=mod", "-ldflags", ldflags, "-o", str(output / "flanneld"), "."],
        work, source, "compiling flanneld", progress=progress)


def _build_cni_flannel(go: GoToolchain, work: Path, output: Path, progress: Progress) -> None:
    progress(f"building the flannel CNI plugin {CNI_FLANNEL_PACKAGE}@{CNI_FLANNEL_VERSION}")
    _go(go.go, ["install", f"{CNI_FLANNEL_PACKAGE}@{CNI_FLANNEL_VERSION}"], work, work,
        "building the flannel CNI plugin", {"GOBIN": str(output)}, progress)


def main() -> int:
    with contextlib.suppress(KeyboardInterrupt):
        binaries = ensure_binaries()
        print(binaries.directory)
        return 0
    return 130


if __name__ == "__main__":
    sys.exit(main())
