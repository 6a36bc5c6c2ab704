"""Shared fixtures: every device test runs once per OpenCL device present."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# An isolated kernel cache for the test session (set before fuseloop reads it), made by
# the first process to import this file: pytest-xdist's workers inherit the variable
# from the controller, so a kernel one worker built is a disk hit for the others.  The
# process that made it removes it when the session ends (a run leaves ~40 MB of kernels).
_SESSION_CACHE = None
if "FUSELOOP_CACHE_DIR" not in os.environ:
    _SESSION_CACHE = tempfile.mkdtemp(prefix="fuseloop-test-cache-")
    os.environ["FUSELOOP_CACHE_DIR"] = _SESSION_CACHE
# no "building a kernel ..." lines from slow builds (tests/test_cold_start.py turns them on)
os.environ.setdefault("FUSELOOP_PROGRESS", "0")
# the tests exercise kernels: small evaluations on the CPU would otherwise run through
# numpy in host memory (fuseloop.host_path; tests/test_host_path.py turns it on)
os.environ.setdefault("FUSELOOP_HOST_PATH", "0")

import fuseloop as fl  # noqa: E402  (after the settings above)


def _device_params() -> list:
    # every device present; FUSELOOP_DEVICE narrows it unless FUSELOOP_TEST_ALL_DEVICES=1
    found = fl.devices()
    if os.environ.get("FUSELOOP_DEVICE") and os.environ.get("FUSELOOP_TEST_ALL_DEVICES") != "1":
        found = [fl.get_device()]
    # a device whose compiler rejects every kernel (Device.problem) is reported, not run
    return [pytest.param(d, id=f"{d.type}{d.index}",
                         marks=() if d.usable else pytest.mark.skip(reason=d.problem))
            for d in found]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.opencl_only`` tests skip where their device runs on another backend."""
    if item.get_closest_marker("opencl_only") is None:
        return
    params = getattr(getattr(item, "callspec", None), "params", {})
    dev = params.get("device")
    if dev is None:
        dev = fl.get_device()
    if getattr(dev, "backend", "opencl") != "opencl":
        pytest.skip(f"tests OpenCL specifics; {dev.name} runs on the {dev.backend} backend")


@pytest.fixture(params=_device_params())
def device(request):
    """Runs the test with each OpenCL device as the default device."""
    with fl.device(request.param) as dev:
        yield dev


@pytest.fixture
def fresh_stats():
    fl.reset_stats()
    return fl.stats


@pytest.fixture
def checked(monkeypatch):
    """Every structure-cache hit is compared with a fresh linearisation (asserts)."""
    from fuseloop.expr import program

    monkeypatch.setattr(program, "CHECK_STRUCTURE_CACHE", True)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty disk cache (its directory, returned) and an empty memory cache."""
    directory = tmp_path / "kernels"
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(directory))
    fl.clear_memory_cache()
    return directory


@pytest.fixture
def restore_recipes():
    """Tests may register recipes; the registry (in its order) is as it was afterwards."""
    from fuseloop.recipes import _REGISTRY
    from fuseloop.recipes.registry import forget_chosen

    saved = dict(_REGISTRY)
    try:
        yield
    finally:
        _REGISTRY.clear()
        _REGISTRY.update(saved)
        forget_chosen()


@pytest.fixture
def cpu():
    """The CPU device as the default device for the test."""
    with fl.device("cpu") as dev:
        yield dev



@pytest.fixture
def device_path(device, monkeypatch):
    """Every statement runs as kernels on ``device`` (no numpy shortcut on a CPU device)."""
    from fuseloop import host_path

    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    return device


@pytest.fixture
def host(cpu, monkeypatch):
    """The CPU device with the host path on (skips where its buffers are not host memory)."""
    from fuseloop import host_path

    if not host_path.host_device(cpu):
        pytest.skip(f"{cpu.name}: not a device whose buffers numpy may use")
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 1 << 14)
    # (no kernel plan kept from another test: a cached flat kernel runs in its place)
    fl.clear_caches()
    return cpu

@pytest.fixture
def pocl(cpu):
    """The CPU device, where the recipes apply vector builtins (PoCL); skips elsewhere."""
    from fuseloop.recipes.cpu_vector import POCL_PLATFORM

    if cpu.platform != POCL_PLATFORM:
        pytest.skip(f"vector math is applied on PoCL only, not on {cpu.platform!r}")
    return cpu


@pytest.fixture
def three(device, monkeypatch):
    """The device and two twins of it (queues and contexts of their own), for split
    arrays on one machine (tests/test_multi_*.py)."""
    import dataclasses

    from fuseloop import caches
    from fuseloop.runtime import devices
    from fuseloop.runtime.transfer import finish

    monkeypatch.setenv("FUSELOOP_COMPILE", "inline")  # (compile workers know no twins)
    # (a context each, as OpenCL devices of other platforms have: on a host with several
    # GPUs of one platform a twin would share the original's context, test_multi_context)
    monkeypatch.setenv("FUSELOOP_OPENCL_SHARED_CONTEXT", "0")
    twins = [dataclasses.replace(device, index=device.index + 987 + i) for i in range(2)]
    try:
        yield [device, *twins]
    finally:
        for t in twins:  # (not among fl.devices(): later code must not meet their runtimes)
            if t.index in devices._runtimes:
                finish(t)
                devices._runtimes.pop(t.index, None)
        # nor their kernels and plans (by device index: the next twins' contexts differ)
        caches.clear()
