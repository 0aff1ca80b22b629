"""The precompiled objects (`linuxfp shapes build`): every catalog shape is
shipped, keyed by its sources so a stale object is never used, and a node
without clang or a cache builds, loads and runs shipped shapes.

The set is built here into a temporary directory, from the on-disk cache
(warm after `make shapes`; cold it compiles the catalog once)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from controller import shapes_cli
from linuxfp import datapath as dp
from linuxfp.graph.catalog import possible_shapes
from linuxfp.graph.shape import Shape
from linuxfp.resources import modules_dir
from linuxfp import synth
from linuxfp.synth import compile as compile_module
from linuxfp.synth import shipped
from linuxfp.synth.precompile import build_shipped, inventory

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("shapes")
    build_shipped(directory)
    return directory


@pytest.fixture
def no_compiler(monkeypatch, tmp_path, shipped_dir):
    """As on a node without clang: no compiler, an empty cache."""
    def missing():
        raise synth.ToolMissing("clang not found: install the Debian package 'clang' (scripts/install-deps.sh)")

    monkeypatch.setattr(compile_module, "find_clang", missing)
    monkeypatch.setenv("LINUXFP_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv(shipped.DIR_ENV, str(shipped_dir))


def section_names(elf: bytes) -> set[str]:
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    names_at = struct.unpack_from("<Q", elf, shoff + shstrndx * shentsize + 0x18)[0]
    names = set()
    for index in range(shnum):
        name_at, = struct.unpack_from("<I", elf, shoff + index * shentsize)
        names.add(elf[names_at + name_at:elf.index(b"\0", names_at + name_at)].decode())
    return names


def test_every_catalog_shape_is_shipped_and_a_rebuild_keeps_them(shipped_dir):
    manifest = shipped.read_manifest(shipped_dir)
    shapes = {o.name for o in manifest.objects if o.kind == shipped.SHAPE}
    assert shapes == {str(s) for s in possible_shapes()}
    assert {o.name for o in manifest.objects if o.kind == shipped.PROGRAM} >= {"controller.c", "bridge_watch.c"}
    assert all(o.state == "current" for o in inventory(shipped_dir))
    assert manifest.total_bytes == sum((shipped_dir / o.file).stat().st_size for o in manifest.objects)
    again = build_shipped(shipped_dir)
    assert again.built == () and again.removed == () and again.manifest == manifest
    # a file no entry names goes; a damaged object is built again
    (shipped_dir / "xdp-gone.o").write_bytes(b"old")
    damaged = next(o for o in manifest.objects if o.kind == shipped.SHAPE)
    (shipped_dir / damaged.file).write_bytes(b"damaged")
    repaired = build_shipped(shipped_dir)
    assert repaired.built == (damaged.name,) and repaired.removed == ("xdp-gone.o",)
    assert repaired.manifest == manifest


def test_list_states_the_set_and_its_size(shipped_dir, monkeypatch, capsys):
    monkeypatch.setenv(shipped.DIR_ENV, str(shipped_dir))
    assert shapes_cli.main(["-j", "list"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["shapes"] == data["shipped_shapes"] == len(possible_shapes())
    assert data["total_bytes"] == shipped.read_manifest(shipped_dir).total_bytes > 0
    assert not data["stale"] and not data["missing"]
    assert shapes_cli.main(["list"]) == 0
    assert f"{len(possible_shapes())}/{len(possible_shapes())} shapes shipped" in capsys.readouterr().out


def test_shipped_objects_are_co_re_and_final(shipped_dir):
    """Nothing ties an object to the kernel it was built on: no kernel
    version section, BTF for CO-RE relocations and kfuncs resolved against
    the running kernel's vmlinux BTF at load. A device-bound shape ships
    the object build() returns after its headroom pass."""
    manifest = shipped.read_manifest(shipped_dir)
    for entry in manifest.objects:
        data = shipped.object_bytes(entry, shipped_dir)
        sections = section_names(data)
        assert "version" not in sections and {".BTF", ".BTF.ext", "license"} <= sections, entry.name
    for shape in (Shape("xdp", ("router", "transmit")), Shape("xdp", ("bridge", "router", "filter", "bridge_tx", "transmit"))):
        entry = manifest.entry(shipped.SHAPE, synth.shape_key(shape))
        assert shipped.object_bytes(entry, shipped_dir) == synth.compile_shape(shape).data


def test_every_shipped_tc_shape_passes_the_verifier(shipped_dir):
    """Each TC pipeline loads as it ships: its stack stays within the
    verifier's 512 bytes, which the transmit node's VXLAN planning nearly
    fills beside the conntrack and filter nodes (its first version
    overflowed four shapes, which only a lab test using one showed). XDP
    shapes load bound to a device (the test below loads one)."""
    manifest = shipped.read_manifest(shipped_dir)
    tc = [entry for entry in manifest.objects if entry.kind == shipped.SHAPE and entry.hook == "tc"]
    assert len(tc) >= 10, [e.name for e in manifest.objects]
    for entry in tc:
        with dp.BpfObject.open(shipped.object_bytes(entry, shipped_dir), name="verified") as obj:
            obj.load()


def test_without_clang_shipped_shapes_and_programs_are_used(no_compiler, monkeypatch):
    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    for shape in possible_shapes():
        got = synth.build(shape)
        assert got.origin == synth.PRECOMPILED and got.cached and got.data.startswith(b"\x7fELF"), shape
    assert synth.build_controller_programs().origin == synth.PRECOMPILED
    # a shape not shipped (test builds are never) still needs the compiler, and says so
    with pytest.raises(synth.ToolMissing, match="install the Debian package 'clang'"):
        synth.build(Shape("tc", ("router", "transmit"), testable=True))


def test_an_object_from_other_sources_is_never_used(no_compiler, monkeypatch, tmp_path):
    modules = tmp_path / "bpf_modules"
    shutil.copytree(modules_dir(), modules)
    with open(modules / "common.h", "a") as f:
        f.write("/* changed */\n")
    monkeypatch.setenv("LINUXFP_MODULES_DIR", str(modules))
    with pytest.raises(synth.ToolMissing):
        synth.build(Shape("tc", ("router", "transmit")))
    with pytest.raises(synth.ToolMissing):
        synth.build_controller_programs()


@pytest.mark.netns
def test_without_clang_a_shipped_device_bound_shape_loads(no_compiler, lab):
    from linuxfp.lab.netns import entered

    ns = lab.namespace("pre")
    ns.run(["ip", "link", "add", "a0", "type", "veth", "peer", "name", "b0"])
    ns.run(["ip", "link", "set", "a0", "up"])
    shape = Shape("xdp", ("router", "filter", "transmit"))
    compiled = synth.build(shape)
    assert compiled.origin == synth.PRECOMPILED
    with entered(ns):
        ifindex = int(ns.run(["cat", "/sys/class/net/a0/ifindex"]).stdout)
        with dp.BpfObject.open(compiled.data, name="precompiled") as obj:
            obj.set_rodata({"lfp_ingress_ifindex": ifindex})
            obj.bind_to_device(shape.entry, ifindex)
            obj.load()
            assert obj.program(shape.entry).id > 0


def _path_without_clang() -> str:
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not list(Path(d).glob("clang*")))


@pytest.mark.netns
def test_linuxfp_run_without_clang_reaches_ready_on_shipped_objects(router_topology, tmp_path):
    from controller.launcher import ControllerProcess, linuxfp_cli

    r = router_topology
    # Shipped as `make shapes` ships them: by a fresh interpreter, whose
    # render state no earlier test in this process can have touched.
    shipped_dir = tmp_path / "shapes"
    subprocess.run([sys.executable, "-m", "controller.shapes_cli", "build"], check=True, capture_output=True,
                   env={**os.environ, shipped.DIR_ENV: str(shipped_dir), "PYTHONPATH": str(REPO)})
    env = {"PATH": _path_without_clang(), "LINUXFP_CACHE_DIR": str(tmp_path / "empty-cache"),
           shipped.DIR_ENV: str(shipped_dir)}
    assert shutil.which("clang", path=env["PATH"]) is None
    with ControllerProcess(r.dut.name, env=env) as c:
        status = json.loads(linuxfp_cli(r.dut.name, "-j", "status").stdout)
        ethernet = [i for i in status["interfaces"] if i["ifname"] != "lo"]
        assert ethernet and all(i["state"] == "active" and i["origin"] == "precompiled" for i in ethernet), \
            (status, c.stderr())
        assert status["lease"]["held"]      # renewed by controller.c, shipped too
        assert "precompiled" in c.stderr()
    assert not any((tmp_path / "empty-cache").glob("*.o"))


def test_status_shows_the_origin_only_of_the_object_still_installed():
    from controller.reconcile import InstalledPipeline
    from controller.views import _origin, status_text

    origins = {"2": {"digest": "d2", "origin": "precompiled"}, "3": {"digest": "old", "origin": "compiled"}}
    assert _origin(origins, InstalledPipeline(2, "left", "xdp", "xdp:router+transmit", "d2")) == "precompiled"
    assert _origin(origins, InstalledPipeline(3, "right", "xdp", "xdp:router+transmit", "d3")) is None
    assert _origin(origins, InstalledPipeline(4, "other", "tc", "tc:router+transmit", "d4")) is None
    row = {"ifname": "left", "hook": "xdp", "mode": "native", "shape": "xdp:router+transmit", "prog_id": 7,
           "state": "active", "origin": "precompiled"}
    text = status_text({"namespace": "ns-1", "controller_pid": 1, "interfaces": [row]})
    assert "active (precompiled)" in text


def test_the_origins_file_keeps_every_interface_across_plans(tmp_path):
    """Read once, then each plan's interfaces added or replaced: a later
    plan must not lose an earlier one's (nor a previous controller's)."""
    import json
    from types import SimpleNamespace

    from controller.installer import Installer

    path = tmp_path / "origins.json"
    path.write_text(json.dumps({"2": {"digest": "d2", "origin": "precompiled"}}))     # before a restart
    installer = SimpleNamespace(layout=SimpleNamespace(origins_file=str(path)), _recorded_origins=None,
                                _origins={"3": {"digest": "d3", "origin": "cache"}})
    Installer._record_origins(installer, {2, 3})
    installer._origins = {"4": {"digest": "d4", "origin": "compiled"}, "2": {"digest": "n2", "origin": "compiled"}}
    Installer._record_origins(installer, {2, 3, 4})
    assert json.loads(path.read_text()) == {"2": {"digest": "n2", "origin": "compiled"},
                                            "3": {"digest": "d3", "origin": "cache"},
                                            "4": {"digest": "d4", "origin": "compiled"}}
    assert installer._origins == {}
    # an interface whose pipeline went: its entry too (a plan that installs nothing)
    Installer._record_origins(installer, {2, 4})
    assert set(json.loads(path.read_text())) == {"2", "4"} and set(installer._recorded_origins) == {"2", "4"}
    # everything removed (detach): nothing left of it, read again or not
    Installer._drop_origins(installer)
    assert not path.exists()
    installer._origins = {"5": {"digest": "d5", "origin": "cache"}}
    Installer._record_origins(installer, {2, 4, 5})      # (2 and 4 again, of unknown origin)
    assert json.loads(path.read_text()) == {"5": {"digest": "d5", "origin": "cache"}}
