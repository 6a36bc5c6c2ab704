"""Which devices' binaries the disk cache stores: none for a driver that caches its own
builds (PoCL with its kernel cache on), whose binary costs a second compilation; a
later process then builds the entry's source, with no Loopy work (fuseloop.cache)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache
from fuseloop.backends import backend_for, opencl
from fuseloop.runtime import compile_workers


def _expr(x):
    return fl.sin(x) * 1.5 + x * 0.25


def _evaluate_fresh(x, xh):
    fl.clear_memory_cache()
    fl.reset_stats()
    np.testing.assert_allclose(_expr(x).get(), np.sin(xh) * 1.5 + xh * 0.25,
                               rtol=1e-5, atol=1e-6)
    return fl.stats()


def test_a_build_the_driver_caches_stores_no_binary_and_is_found_again(
        device, tmp_path, monkeypatch):
    backend = backend_for(device)
    if backend.stores_binaries(device):
        pytest.skip(f"{device.name}'s binaries are stored")
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSELOOP_COMPILE", "process")
    fetched, asked = [], []
    real_binary_of, real_compile = type(backend).binary_of, compile_workers.compile_binary
    monkeypatch.setattr(type(backend), "binary_of",
                        lambda self, program: fetched.append(1) or real_binary_of(self, program))

    def compile_binary(*args, **kwargs):
        asked.append(kwargs.get("binary", True))
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(compile_workers, "compile_binary", compile_binary)
    xh = np.linspace(-1, 1, 300, dtype=np.float32)
    x = fl.asarray(xh)
    s = _evaluate_fresh(x, xh)  # lowered, built by a worker that fetched no binary
    assert s["kernels_lowered"] == 1 and asked == [False] and not fetched
    [path] = cache.disk_entries(tmp_path)
    entry = cache.read_entry(path)
    assert entry is not None and entry.binary is None and entry.plan.source
    # a cleared memory cache (as a new process) finds the entry: no Loopy work, no
    # worker (the driver's cache has the build), still no binary
    s = _evaluate_fresh(x, xh)
    assert s["disk_cache_hits"] == 1 and s["kernels_lowered"] == 0
    assert s["kernels_compiled"] == 1 and asked == [False] and not fetched
    assert cache.read_entry(path).binary is None
    # an entry written with a binary the driver refuses is rewritten without one
    cache._write_disk(path, entry.key, entry.plan, b"not a device binary")
    s = _evaluate_fresh(x, xh)
    assert s["disk_cache_hits"] == 1 and s["kernels_lowered"] == 0
    assert cache.read_entry(path).binary is None and not fetched


def test_pocl_kernel_cache_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "kcache"))
    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    assert opencl.pocl_kernel_cache_on()  # PoCL's default, a folder it can make
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    assert not opencl.pocl_kernel_cache_on()
    monkeypatch.setenv("POCL_KERNEL_CACHE", "1")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "file" / "kcache"))
    assert not opencl.pocl_kernel_cache_on()  # a folder PoCL cannot make
    monkeypatch.delenv("POCL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert opencl.pocl_cache_dir() == tmp_path / "xdg" / "pocl" / "kcache"


def test_pocl_cpu_binaries_are_stored_while_its_cache_is_off(device, monkeypatch):
    if not (device.type == "cpu" and opencl._is_pocl(device)):
        pytest.skip("not PoCL's CPU device")
    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    monkeypatch.delenv("POCL_CACHE_DIR", raising=False)
    on = opencl.pocl_kernel_cache_on()
    assert backend_for(device).stores_binaries(device) is not on
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    assert backend_for(device).stores_binaries(device)
