"""CPU runtimes: registering Intel's pip runtime with the ICD loader, and selecting runtimes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuseloop.cli import main
from fuseloop.runtime import devices as devmod
from fuseloop.runtime import icd

ROOT = Path(__file__).resolve().parent.parent
POCL_VERSION = ("OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, SLEEF, DISTRO, "
                "POCL_DEBUG")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """register_runtimes() runs anew, with a fake libintelocl.so and a vendor directory."""
    lib = tmp_path / "lib" / icd.INTEL_LIBRARY
    lib.parent.mkdir()
    lib.write_bytes(b"not a shared library")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    monkeypatch.setattr(icd, "find_intel_library", lambda: (lib.resolve(), "9.9"))
    monkeypatch.setattr(icd, "_vendors_base", lambda: [tmp_path / "made"])
    # (set, then deleted: monkeypatch then restores the value from before the test, or
    # its absence, even after register_runtimes() set it; a leaked fake vendor
    # directory made later tests' subprocesses load another OpenCL runtime)
    monkeypatch.setenv("OCL_ICD_VENDORS", "")
    monkeypatch.delenv("OCL_ICD_VENDORS")
    monkeypatch.delenv("FUSELOOP_REGISTER_ICD", raising=False)
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(vendors))
    with icd._reset_for_tests():
        yield lib.resolve(), vendors


def test_registration_keeps_every_icd_the_loader_read(fresh):
    lib, vendors = fresh
    other = vendors / "pocl.icd"
    other.write_text("libpocl.so.2\n")
    state = icd.register_runtimes()
    assert state.vendors_dir is not None and not state.notes
    assert os.environ["OCL_ICD_VENDORS"] == str(state.vendors_dir)
    made = {p.name: p for p in state.vendors_dir.iterdir()}
    assert set(made) == {"pocl.icd", "fuseloop-intel-cpu.icd"}
    assert made["pocl.icd"].resolve() == other.resolve()
    assert made["fuseloop-intel-cpu.icd"].read_text().strip() == str(lib)
    # the same entries again: the same directory, not a new one
    with icd._reset_for_tests():
        os.environ["OPENCL_VENDOR_PATH"] = str(vendors)
        del os.environ["OCL_ICD_VENDORS"]
        assert icd.register_runtimes().vendors_dir == state.vendors_dir


def test_a_user_vendor_directory_is_kept(fresh, monkeypatch, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "custom.icd").write_text("/opt/custom/libcustom.so\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(mine))
    state = icd.register_runtimes()
    assert {p.name for p in state.vendors_dir.iterdir()} == {"custom.icd",
                                                             "fuseloop-intel-cpu.icd"}


def test_an_intel_runtime_registered_already_is_not_registered_twice(fresh):
    lib, vendors = fresh
    (vendors / "intel.icd").write_text(f"{lib}\n")
    state = icd.register_runtimes()
    assert state.vendors_dir is None and "OCL_ICD_VENDORS" not in os.environ


def test_one_icd_named_by_the_user_is_left_alone(fresh, monkeypatch, tmp_path):
    one = tmp_path / "only.icd"
    one.write_text("libpocl.so.2\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(one))
    state = icd.register_runtimes()
    assert state.vendors_dir is None and os.environ["OCL_ICD_VENDORS"] == str(one)
    assert "names one ICD" in state.notes[0]


def test_a_vendors_variable_naming_nothing_is_reported(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path / "missing"))
    state = icd.register_runtimes()
    assert state.vendors_dir is None
    assert "names no file or directory" in state.notes[0] and "missing" in state.notes[0]


def test_registration_can_be_turned_off(fresh, monkeypatch):
    monkeypatch.setenv("FUSELOOP_REGISTER_ICD", "0")
    assert icd.register_runtimes().vendors_dir is None
    assert "OCL_ICD_VENDORS" not in os.environ


def test_a_runtime_that_cannot_load_is_named_in_the_notes(fresh):
    state = icd.register_runtimes()
    icd.check_discovered(["Portable Computing Language"])
    assert "installed but cannot load" in state.notes[-1]
    assert "intel-cmplr-lib-rt" in state.notes[-1]


def test_runtime_labels():
    assert icd.runtime_label("Portable Computing Language", POCL_VERSION,
                             "3.0-rc2") == "PoCL 3.0-rc2 (LLVM 14.0.6)"
    assert icd.runtime_label(
        "Portable Computing Language",
        "OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, LLVM 15.0.6, SLEEF",
        "3.1+debian") == "PoCL 3.1+debian (LLVM 15.0.6)"
    assert icd.runtime_label("Intel(R) OpenCL", "OpenCL 3.1 LINUX",
                             "2026.22.10.0.01_160000").startswith("Intel OpenCL 2026.22.10.0.01")
    assert icd.runtime_label("NVIDIA CUDA", "OpenCL 3.0 CUDA 12.4", "550.54") == \
        "NVIDIA CUDA 550.54"


def fake(index: int, name: str, platform: str, runtime: str) -> devmod.Device:
    return devmod.Device(
        index=index, name=name, type="cpu", platform=platform, vendor="fake",
        driver_version="1", global_mem_size=2**30, max_alloc_size=2**28, has_fp64=True,
        cl_device=None, runtime=runtime)


@pytest.fixture
def two_runtimes(monkeypatch):
    intel = fake(0, "Intel(R) Xeon(R) Processor", "Intel(R) OpenCL",
                 "Intel OpenCL 2026.22.10.0.01")
    pocl = fake(1, "pthread-Intel(R) Xeon(R) Processor", "Portable Computing Language",
                "PoCL 3.0-rc2 (LLVM 14.0.6)")
    monkeypatch.setattr(devmod, "_devices", [intel, pocl])
    monkeypatch.setattr(devmod, "_default", None)
    monkeypatch.delenv("FUSELOOP_DEVICE", raising=False)
    return intel, pocl


def test_runtime_names_select_their_runtime(two_runtimes):
    intel, pocl = two_runtimes
    # 'intel' is also in PoCL's device name: the runtime named so comes first
    assert devmod.find_device("intel") is intel
    assert devmod.find_device("pocl") is pocl
    assert devmod.find_device("pocl 3.0") is pocl
    assert devmod.find_device("xeon") is pocl  # both: the preferred runtime
    assert devmod.find_device("cpu") is pocl
    assert devmod.get_device() is pocl
    # in either order of the loader's platforms
    devmod._devices.reverse()
    assert devmod.find_device("intel") is intel and devmod.find_device("cpu") is pocl


def test_a_type_means_the_runtime_fuseloop_device_names(two_runtimes, monkeypatch):
    intel, _ = two_runtimes
    monkeypatch.setenv("FUSELOOP_DEVICE", "intel")
    assert devmod.get_device() is intel
    assert devmod.find_device("cpu") is intel  # (tests' cpu fixture: fl.device("cpu"))


def test_devices_command_shows_runtimes(two_runtimes, capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "[Intel OpenCL 2026.22.10.0.01]" in out and "[PoCL 3.0-rc2 (LLVM 14.0.6)]" in out


def _fuseloop_devices(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = ("import json, fuseloop as fl; from fuseloop.runtime.icd import registration; "
            "print(json.dumps({'runtimes': [d.runtime for d in fl.devices()], "
            "'notes': registration().notes}))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OCL_ICD_VENDORS", "FUSELOOP_DEVICE", "FUSELOOP_REGISTER_ICD")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    return env


def test_the_installed_intel_runtime_is_seen_beside_the_others(tmp_path):
    if icd.find_intel_library() is None:
        pytest.skip(f"{icd.INTEL_DIST} is not installed")
    proc = _fuseloop_devices(_clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    runtimes = json.loads(proc.stdout.splitlines()[-1])["runtimes"]
    assert any(r.startswith("Intel OpenCL") for r in runtimes), runtimes
    assert any(r.startswith("PoCL") for r in runtimes), runtimes  # not hidden


def test_an_intel_runtime_that_cannot_load_is_reported_not_fatal(tmp_path):
    # a fake installed intel-opencl-rt, first on the path, whose library cannot load
    site = tmp_path / "site"
    info = site / "intel_opencl_rt-9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: intel-opencl-rt\n"
                                   "Version: 9.9\n")
    (info / "RECORD").write_text(f"../lib/{icd.INTEL_LIBRARY},,\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / icd.INTEL_LIBRARY).write_bytes(b"\0" * 64)
    env = _clean_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    proc = _fuseloop_devices(env)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.splitlines()[-1])
    assert not any(r.startswith("Intel OpenCL (pip 9.9)") for r in found["runtimes"])
    assert any("9.9) is installed but cannot load" in n for n in found["notes"]), found


def test_fuseloop_device_naming_nothing_mentions_a_bad_vendors_variable(tmp_path):
    env = _clean_env(tmp_path)
    env["OCL_ICD_VENDORS"] = str(tmp_path / "nothing-here")
    proc = subprocess.run([sys.executable, "-m", "fuseloop.cli", "devices"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "no OpenCL devices found" in proc.stdout
    assert "names no file or directory" in proc.stdout


def test_intel_runtime_results_match_numpy_with_partial_chunks():
    # Intel's runtime keeps the chunked CPU recipes: its compiler (2026.2) writes the
    # whole last work-group past Loopy's guard once work-items are local-parallel
    import numpy as np

    import fuseloop as fl
    from fuseloop.recipes import recipe_for

    found = [d for d in fl.devices() if d.platform == icd.INTEL_PLATFORM and d.usable]
    if not found:
        pytest.skip("Intel's CPU runtime is not present")
    assert recipe_for(found[0]).name == "cpu-chunked"
    rng = np.random.default_rng(3)
    xh = rng.uniform(-20, 20, (37, 1001)).astype(np.float32)
    with fl.device(found[0]):
        x = fl.asarray(xh)
        guard = fl.full(8, -1.0, np.float32)  # allocated next: a stray write may land here
        np.testing.assert_allclose((fl.sin(x) * 2 - x).get(), np.sin(xh) * 2 - xh,
                                   rtol=1e-5, atol=1e-5)
        e = fl.exp(x - x.max(axis=1, keepdims=True))
        want = np.exp(xh - xh.max(1, keepdims=True))
        np.testing.assert_allclose((e / e.sum(axis=1, keepdims=True)).get(),
                                   want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(x.sum(axis=0).get(), xh.astype(np.float64).sum(0),
                                   rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(fl.sum(x * x).get(), np.sum(xh.astype(np.float64) ** 2),
                                   rtol=1e-5)
        assert (guard.get() == -1).all()
