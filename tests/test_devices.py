"""Device selection around devices whose compiler rejects every kernel."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.backends import opencl
from fuseloop.cli import main
from fuseloop.runtime import devices as devmod


class FakeCLDevice:
    """Stands in for a pyopencl device; building a program on it is a test failure."""

    def __init__(self, version: str) -> None:
        self.version = version


def fake(index: int, type: str, name: str, problem: str | None = None) -> devmod.Device:
    return devmod.Device(
        index=index, name=name, type=type, platform="Fake Platform", vendor="fake",
        driver_version="1", global_mem_size=2**30, max_alloc_size=2**28, has_fp64=True,
        cl_device=None, problem=problem)


@pytest.fixture
def present(monkeypatch):
    """Replaces the devices present with the given list (no default chosen yet)."""
    def install(found: list[devmod.Device]) -> None:
        monkeypatch.setattr(devmod, "_devices", found)
        monkeypatch.setattr(devmod, "_default", None)
        monkeypatch.delenv("FUSELOOP_DEVICE", raising=False)
    return install


@pytest.mark.parametrize("version", [
    "OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512",
    "OpenCL 3.0 CUDA",
    "OpenCL 3.0 PoCL HSTR: pthread-aarch64-unknown-linux-gnu-generic",
])
def test_only_suspect_pocl_devices_are_probed(version):
    # a device the heuristic does not suspect is never built on (FakeCLDevice has
    # no context: a probe would raise)
    assert opencl._compiler_problem(FakeCLDevice(version)) is None


def test_a_usable_cpu_is_the_default_before_one_that_cannot_build(present):
    broken = fake(0, "cpu", "pthread-AMD EPYC", problem="rejects every kernel")
    good = fake(1, "cpu", "pthread-skylake-avx512-AMD EPYC")
    present([broken, good])
    assert fl.get_device() is good
    assert devmod.find_device("cpu") is good
    assert devmod.find_device("epyc") is good  # both match the name: the usable one
    assert devmod.find_device(0) is broken  # an index is taken as given
    assert devmod.find_device("pthread-AMD") is broken  # the only match


def test_a_gpu_stays_the_default_when_usable(present):
    cpu, gpu = fake(0, "cpu", "cpu"), fake(1, "gpu", "gpu")
    present([cpu, gpu])
    assert fl.get_device() is gpu
    present([cpu, dataclasses.replace(gpu, problem="rejects every kernel")])
    assert fl.get_device() is cpu


def test_with_nothing_usable_the_first_device_is_chosen(present):
    first = fake(0, "cpu", "a", problem="rejects every kernel")
    present([first, fake(1, "cpu", "b", problem="rejects every kernel")])
    assert fl.get_device() is first


def test_devices_command_names_the_problem_and_fails_when_nothing_builds(present, capsys):
    good = fake(1, "cpu", "good-cpu")
    present([fake(0, "cpu", "bad-cpu", problem="rejects every kernel: install X"), good])
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "cannot build kernels: rejects every kernel: install X" in out
    assert "*  1  cpu" in out  # the usable device is the default
    present([fake(0, "cpu", "bad-cpu", problem="rejects every kernel: install X")])
    assert main(["devices"]) == 1
    assert "no device here can build kernels" in capsys.readouterr().out


def test_build_errors_on_a_device_with_a_known_problem_say_so(device):
    from fuseloop.errors import KernelBuildError

    marked = dataclasses.replace(device, problem="this compiler rejects every kernel; do Y")
    bad = fl.function("float fl_test_unbuildable(float x)", "return x +* ;")
    with fl.device(marked):
        x = fl.asarray(np.ones(4, np.float32))
        with pytest.raises(KernelBuildError, match="rejects every kernel; do Y"):
            bad(x).get()
    with pytest.raises(KernelBuildError) as plain:
        bad(fl.asarray(np.ones(4, np.float32))).get()
    assert "do Y" not in str(plain.value)


def test_the_devices_that_cannot_build_really_cannot():
    # where this machine has such a device (pip's PoCL 3.0 on AMD Zen 5), its
    # problem is real: a build of a trivial kernel fails on it
    broken = [d for d in fl.devices() if not d.usable]
    if not broken:
        pytest.skip("every device here builds kernels")
    for d in broken:
        assert "rejects every kernel" in d.problem
        with fl.device(d.index):
            with pytest.raises(fl.errors.KernelBuildError, match="rejects every kernel"):
                (fl.asarray(np.ones(4, np.float32)) * 3).get()


def test_later_backends_are_discovered_only_when_a_device_of_theirs_could_be_chosen(
        monkeypatch):
    # (CuPy's import and CUDA's start cost a cold first result tenths of a second
    # when FUSELOOP_DEVICE names an OpenCL device)
    gpu = fake(0, "gpu", "NVIDIA H100")
    gpu = dataclasses.replace(gpu, platform="NVIDIA CUDA")
    cpu = fake(1, "cpu", "pthread-skylake")
    calls = []

    def discover(names, start):
        calls.append(list(names))
        return [dataclasses.replace(gpu, index=start, platform="CUDA", backend="cuda")]

    monkeypatch.setattr(devmod, "_devices", None)
    monkeypatch.setattr(devmod, "_first", [gpu, cpu])
    monkeypatch.setattr(devmod, "_default", None)
    monkeypatch.setattr(devmod, "_discover", discover)
    monkeypatch.delenv("FUSELOOP_DEVICE", raising=False)
    assert fl.get_device() is gpu  # a usable GPU of the first backend: final
    assert devmod.find_device("nvidia") is gpu  # its platform names it: final
    assert devmod.find_device("cpu") is cpu
    assert devmod.find_device(1) is cpu
    assert devmod.find_device("opencl:1") is cpu
    assert calls == []
    later = devmod.find_device("cuda:0")
    assert calls == [["cuda"]] and later.index == 2 and later.backend == "cuda"
    assert devmod.find_device(0) is gpu  # the first backend's objects are kept
    assert fl.devices() == [gpu, cpu, later]


def test_a_default_that_a_later_backend_could_beat_discovers_it(monkeypatch):
    cpu = fake(0, "cpu", "pthread-skylake")
    later = fake(1, "gpu", "NVIDIA H100")
    monkeypatch.setattr(devmod, "_devices", None)
    monkeypatch.setattr(devmod, "_first", [cpu])
    monkeypatch.setattr(devmod, "_default", None)
    monkeypatch.setattr(devmod, "_discover", lambda names, start: [later])
    monkeypatch.delenv("FUSELOOP_DEVICE", raising=False)
    assert fl.get_device() is later  # GPUs first, from any backend
