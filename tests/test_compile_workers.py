"""Kernels are built by compile workers: a compiler that aborts or hangs costs the
caller a KernelBuildError or a Ctrl-C, never its process (fuseloop.runtime.compile_workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache
from fuseloop.runtime import compile_workers

pytestmark = pytest.mark.opencl_only  # (the OpenCL backend's own objects)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def process_mode(monkeypatch):
    monkeypatch.setenv("FUSELOOP_COMPILE", "process")


def _entries(directory: Path) -> set[Path]:
    return set(cache.disk_entries(directory))


def test_a_compiler_abort_is_a_build_error_and_the_library_keeps_working(
        device, process_mode, monkeypatch, tmp_path):
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    x_host = np.linspace(-2, 2, 1001).astype(np.float32)
    x = fl.asarray(x_host)
    # the worker calls os.abort() for a source holding the marker (an atan2 call),
    # as an LLVM abort would
    monkeypatch.setattr(compile_workers, "test_hook", ("abort", "atan2("))
    before = _entries(tmp_path)
    with pytest.raises(fl.errors.KernelBuildError) as info:
        fl.arctan2(x, x + 3).get()
    message = str(info.value)
    assert device.name in message and "SIGABRT" in message and "crashed" in message
    assert "atan2(" in info.value.source
    assert _entries(tmp_path) == before  # nothing half-written, nothing cached
    # the library still works: other kernels build, the same one fails the same way
    np.testing.assert_allclose((fl.exp(x) * 2).get(), np.exp(x_host) * 2, rtol=1e-6)
    with pytest.raises(fl.errors.KernelBuildError, match="SIGABRT"):
        fl.arctan2(x, x + 3).get()
    # and once the compiler behaves, the kernel builds and is cached
    monkeypatch.setattr(compile_workers, "test_hook", None)
    np.testing.assert_allclose(fl.arctan2(x, x + 3).get(), np.arctan2(x_host, x_host + 3),
                               rtol=1e-6, atol=1e-7)
    assert len(_entries(tmp_path)) > len(before)


def test_a_crashed_build_leaves_the_outputs_untouched(device, process_mode, monkeypatch):
    x_host = np.linspace(0.5, 2, 257).astype(np.float32)
    x = fl.asarray(x_host)
    out = fl.asarray(np.full(257, 7, np.float32))
    monkeypatch.setattr(compile_workers, "test_hook", ("abort", "asinh("))
    with pytest.raises(fl.errors.KernelBuildError):
        out[...] = fl.arcsinh(x) * 3
    with pytest.raises(fl.errors.KernelBuildError):
        x += fl.arcsinh(x)
    np.testing.assert_array_equal(out.get(), np.full(257, 7, np.float32))
    np.testing.assert_array_equal(x.get(), x_host)


def test_compiler_errors_come_back_with_their_log(device, process_mode):
    broken = fl.function("float fl_worker_broken(float x)", "return x +* ;")
    with pytest.raises(fl.errors.KernelBuildError) as info:
        broken(fl.asarray(np.ones(4, np.float32))).get()
    assert "rejected" in str(info.value) and info.value.build_log
    assert "fl_worker_broken" in info.value.source


def test_a_worker_that_cannot_start_says_what_to_do(device, process_mode, monkeypatch):
    monkeypatch.setattr(compile_workers, "_pool", compile_workers._Pool())
    monkeypatch.setattr(compile_workers.sys, "executable", "/nonexistent/python")
    x = fl.asarray(np.arange(5, dtype=np.float32))
    with pytest.raises(fl.errors.KernelBuildError, match="FUSELOOP_COMPILE=inline"):
        (x * 3 + fl.sqrt(x) * 7.5 - 1).get()


def test_inline_mode_builds_in_this_process(device, monkeypatch):
    monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
    monkeypatch.setattr(compile_workers, "_pool", compile_workers._Pool())
    x_host = np.arange(7, dtype=np.float32)
    r = (fl.asarray(x_host) * 5 - fl.cbrt(fl.asarray(x_host))).get()
    np.testing.assert_allclose(r, x_host * 5 - np.cbrt(x_host), rtol=1e-6)
    assert compile_workers._pool.started == 0


def test_the_pool_reuses_its_workers(device, process_mode, monkeypatch):
    pool = compile_workers._Pool()
    monkeypatch.setattr(compile_workers, "_pool", pool)
    x = fl.asarray(np.arange(9, dtype=np.float32))
    for k in range(4):  # four new kernels (a constant is part of the source)
        (x * fl.constant(k + 0.5) + 1).get()
    assert 1 <= pool.started <= compile_workers.pool_size()
    pool.shutdown()


def test_a_worker_readies_a_device_by_starting_its_compiler(device, monkeypatch):
    """A request without source (the prestart at a cache miss) makes the context and
    builds a one-line program, so the driver's compiler starts (PoCL reads its
    builtin library) while the caller lowers; once per device."""
    import pyopencl as cl

    from fuseloop.backends import opencl_worker

    built: list[str] = []
    original = cl.Program.build

    def spy(self, *args, **kwargs):
        built.append(self.get_info(cl.program_info.SOURCE))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cl.Program, "build", spy)
    state: dict = {}
    address = compile_workers._device_address(device)
    assert opencl_worker.build(state, address, None, (), ()) == ("ok", b"")
    assert built == [opencl_worker._WARM_UP]
    assert opencl_worker.build(state, address, None, (), ()) == ("ok", b"")
    assert len(built) == 1
    source = "__kernel void k(__global float *a) { a[0] = 1.5f; }"
    assert opencl_worker.build(state, address, source, (), ("k",), binary=False) == ("ok", None)
    assert built[1:] == [source]


_CTRL_C_SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import fuseloop as fl
    from fuseloop.runtime import compile_workers
    x = fl.asarray(np.linspace(0, 1, 100, dtype=np.float32))
    compile_workers.test_hook = ("hang", "tanh(")
    original = compile_workers.compile_binary

    def announced(*args, **kwargs):
        print("compiling", flush=True)
        return original(*args, **kwargs)

    compile_workers.compile_binary = announced
    start = time.monotonic()
    try:
        fl.tanh(x).get()
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - start:.2f}", flush=True)
    compile_workers.test_hook = None
    assert np.allclose(fl.tanh(x).get(), np.tanh(np.linspace(0, 1, 100, dtype=np.float32)))
    print("ok", flush=True)
""")


def test_ctrl_c_during_a_long_build_returns_at_once(tmp_path):
    env = dict(os.environ, FUSELOOP_COMPILE="process", FUSELOOP_CACHE_DIR=str(tmp_path),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _CTRL_C_SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "compiling"
        time.sleep(0.5)  # the request is with the worker, which 'compiles' for an hour
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    lines = out.split()
    assert "interrupted" in lines and lines[-1] == "ok", out
    # the interrupted build had hung for an hour in its worker: it was not waited for
    assert float(lines[lines.index("after") + 1]) < 60


def _builds_wait_for_company(device, monkeypatch) -> threading.Event:
    """Each build waits (at most 60 s) until another one is running too: builds made
    one at a time each wait in vain, and count no overlap (no timing is asserted)."""
    from fuseloop.backends import backend_for

    backend = type(backend_for(device))
    build = backend.build_source
    running, lock, both = [0], threading.Lock(), threading.Event()

    def waiting_build(self, *args, **kwargs):
        with lock:
            running[0] += 1
            if running[0] >= 2:
                both.set()
        try:
            both.wait(60)
            return build(self, *args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(backend, "build_source", waiting_build)
    return both


def test_an_evaluations_new_kernels_are_built_together(device, process_mode, monkeypatch):
    # x - mean(x) over a long vector needs several kernels (the reduction's stages, the
    # elementwise one); they are built ahead, together: fewer programs than kernels
    # (fuseloop.batch_build).  (With the stages in one launch, splits.ONE_LAUNCH, the
    # joined kernel's plan is made while the plan is recorded, to know whether the
    # stages can share a launch, and built with the others.)
    from fuseloop import prebuild, splits

    monkeypatch.setattr(splits, "ONE_LAUNCH", False)
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")
    host = np.random.default_rng(3).random(1 << 16).astype(np.float32)
    x = fl.asarray(host)

    def evaluate():
        fl.clear_caches()
        fl.reset_stats()
        return (x * 3 - fl.mean(x)).get(), fl.stats()

    monkeypatch.setattr(prebuild, "MIN_KERNELS", 10 ** 9)  # one build at a time
    serial, stats = evaluate()
    assert stats["kernels_compiled"] >= 2 and stats["builds_overlapped"] == 0
    assert stats["programs_built"] == stats["kernels_compiled"]

    monkeypatch.setattr(prebuild, "MIN_KERNELS", 2)
    together, stats = evaluate()
    assert stats["kernels_compiled"] >= 2 and stats["memory_cache_misses"] == \
        stats["kernels_compiled"]
    assert stats["programs_built"] < stats["kernels_compiled"]
    np.testing.assert_array_equal(together, serial)
    np.testing.assert_allclose(together, host * 3 - host.mean(dtype=np.float64), rtol=1e-5,
                               atol=1e-5)


def test_compute_builds_its_shape_groups_programs_concurrently(device, process_mode,
                                                              monkeypatch):
    # fl.compute of results of two shapes whose kernels' preambles define other helper
    # functions: two programs (two such might define one name), built concurrently
    # (kernels of one preamble share a program: tests/test_batch_build.py)
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")
    a_host = np.linspace(-1, 1, 300).astype(np.float32)
    a_host[::7] = np.inf
    b_host = np.linspace(0, 2, 77).astype(np.float32)
    b_host[::5] = np.nan
    a, b = fl.asarray(a_host), fl.asarray(b_host)
    fl.clear_caches()
    both = _builds_wait_for_company(device, monkeypatch)
    fl.reset_stats()
    p, q = fl.compute(fl.where(fl.isinf(a), 1, a) * 3, fl.where(fl.isnan(b), 0, b) * 2)
    s = fl.stats()
    assert s["kernels_compiled"] == 2 and s["programs_built"] == 2
    assert s["builds_overlapped"] == 1 and both.is_set()
    assert s["memory_cache_misses"] == 2 and s["memory_cache_hits"] == 0
    np.testing.assert_array_equal(p.get(), np.where(np.isinf(a_host), 1, a_host) * 3)
    np.testing.assert_array_equal(q.get(), np.where(np.isnan(b_host), 0, b_host) * 2)
