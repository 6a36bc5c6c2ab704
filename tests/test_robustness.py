"""Robustness: threads, processes, resource faults and interruptions.

Each test that needs a kernel no cache has seen points ``FUSELOOP_CACHE_DIR``
at a fresh directory and clears the memory cache (the OpenCL driver may still
have the source cached: that only makes the build cheaper).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pyopencl as cl
import pytest

import fuseloop as fl
from fuseloop import cache, cache_disk
from fuseloop.expr.program import linearize
from fuseloop.runtime import devices as devmod


@pytest.fixture
def switch_often():
    """Let threads interleave after very few bytecodes, to provoke races."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def run_threads(target, count: int, timeout: float = 300) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrapped(k: int) -> None:
        try:
            target(k)
        except BaseException as exc:  # reported to the test, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread hangs (deadlock?)"
    return errors


def loopy_lock_free() -> bool:
    """True if another thread can take the Loopy lock (it is reentrant, so ask elsewhere)."""
    got = []

    def probe() -> None:
        ok = cache._loopy_lock.acquire(timeout=5)
        got.append(ok)
        if ok:
            cache._loopy_lock.release()

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return got == [True]


def check_unlocked() -> None:
    assert cache._build_locks == {}, "a per-kernel build lock was left behind"
    assert not cache._global_lock.locked()
    assert loopy_lock_free(), "the Loopy lock is still held"


def disk_files(directory) -> list:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


# {{{ threads

def test_eight_threads_evaluate_identical_and_different_expressions(device, switch_often):
    """Shared compiled kernels, launched from eight threads with different arguments."""
    different = [  # (fuseloop, numpy)
        (lambda x, y: x + y, lambda x, y: x + y),
        (lambda x, y: x - 2 * y, lambda x, y: x - 2 * y),
        (lambda x, y: fl.maximum(x, y) * 3, lambda x, y: np.maximum(x, y) * 3),
        (lambda x, y: fl.sqrt(x) + y, lambda x, y: np.sqrt(x) + y),
    ]  # threads k and k + 4 share one: identical structure, different data
    steps = 25
    fl.reset_stats()

    def work(k: int) -> None:
        n = 1000 + 37 * k  # different sizes: one kernel serves them all
        xh = np.random.default_rng(k).random(n, dtype=np.float32)
        yh = np.random.default_rng(100 + k).random(n, dtype=np.float32)
        x, y = fl.asarray(xh), fl.asarray(yh)
        for i in range(steps):
            a, b = np.float32(k + 1), np.float32(i * 0.5)
            same = (a * x + fl.sin(y) - b).get()  # identical structure in every thread
            np.testing.assert_allclose(same, a * xh + np.sin(yh) - b, rtol=1e-5, atol=1e-5)
            own = different[k % 4][0](x, y).get()
            np.testing.assert_allclose(own, different[k % 4][1](xh, yh), rtol=1e-5, atol=1e-6)

    errors = run_threads(work, 8)
    assert not errors, errors[0]
    assert fl.stats()["kernels_launched"] == 8 * steps * 2
    check_unlocked()


def test_eight_threads_share_input_arrays(device, switch_often):
    """Expressions over the same arrays, built and evaluated in eight threads at once."""
    xh = np.random.default_rng(1).random(2000, dtype=np.float32)
    yh = np.random.default_rng(2).random(2000, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)

    def work(k: int) -> None:
        for i in range(40):
            c = np.float32(k + i)
            pending = [x * c + y, y - x * c]  # lazy readers of the shared buffers
            got = [p.get() for p in pending]
            np.testing.assert_allclose(got[0], xh * c + yh, rtol=1e-5)
            np.testing.assert_allclose(got[1], yh - xh * c, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(float(fl.sum(x[k:] * c)), (xh[k:] * c).sum(dtype=np.float64),
                                       rtol=1e-4)

    errors = run_threads(work, 8)
    assert not errors, errors[0]


def test_threads_compile_a_new_kernel_once(device, fresh_cache):
    xs = [np.random.default_rng(k).random(500 + k, dtype=np.float32) for k in range(8)]
    arrays = [fl.asarray(x) for x in xs]
    start = threading.Barrier(8)
    results = {}
    fl.reset_stats()

    def work(k: int) -> None:
        x = arrays[k]
        expr = fl.arctan2(x, x + 1) * 3 + fl.hypot(x, 2 * x)
        start.wait()  # all eight ask for the same new kernel at once
        results[k] = expr.get()

    errors = run_threads(work, 8)
    assert not errors, errors[0]
    s = fl.stats()
    assert s["kernels_lowered"] == 1
    assert s["kernels_compiled"] == 1
    assert s["memory_cache_misses"] == 1
    for k, x in enumerate(xs):
        np.testing.assert_allclose(results[k], np.arctan2(x, x + 1) * 3 + np.hypot(x, 2 * x),
                                   rtol=1e-5, atol=1e-6)
    check_unlocked()
    assert len(cache.disk_entries(fresh_cache)) == 1


def test_each_thread_launches_its_own_kernel_object(device):
    x = fl.asarray(np.ones(10, np.float32))
    (x * 2 + 5).get()
    program, _ = linearize([(x * 2 + 5)._node], (10,))
    compiled = next(v for k, v in cache._memory.items() if k[0] == program)
    seen = []
    run_threads(lambda k: seen.append(compiled.kernel), 4)
    assert compiled.kernel is compiled.kernel  # stable within a thread
    ids = {id(k) for k in [*seen, compiled.kernel]}
    assert len(ids) == 5


def test_show_code_in_one_thread_leaves_other_threads_running(device):
    """fl.show_code captures its own thread's kernels; other threads still compute."""
    from fuseloop import evaluate

    xh = np.linspace(-1, 1, 300, dtype=np.float32)
    x = fl.asarray(xh)
    (x * 4 - 1).get()  # cached: the other thread takes the flat path unless told not to
    results: dict[str, object] = {}

    def other(_: int) -> None:
        results["flat"] = (x * 4 - 1).get()
        results["general"] = (fl.exp(x) + x.sum()).get()

    with evaluate.capturing_sources() as sources:
        errors = run_threads(other, 1)
        # this thread's own evaluations are captured, not run
        assert evaluate.run_flat((x * 4 - 1)._node, (300,), x.device) is None
        evaluate.run([(x * 7)._node], (300,), x.device)
    assert not errors
    np.testing.assert_allclose(results["flat"], xh * 4 - 1, rtol=1e-6)
    np.testing.assert_allclose(results["general"], np.exp(xh) + xh.sum(), rtol=1e-5, atol=1e-5)
    assert len(sources) == 1  # x * 7's kernel only: the other thread's ran, uncaptured
    assert evaluate.captured_sources() is None and evaluate.capturing_threads[0] == 0
    assert "exp" in fl.show_code(fl.exp(x) * 2)


def test_stats_counters_under_threads(switch_often):
    stats_mod = importlib.import_module("fuseloop.stats")  # fl.stats is the function
    fl.reset_stats()
    errors = run_threads(
        lambda k: [stats_mod.increment("disk_cache_misses") for _ in range(20000)], 8)
    assert not errors, errors[0]
    assert fl.stats()["disk_cache_misses"] == 8 * 20000
    fl.reset_stats()

# }}}


# {{{ processes

CHILD = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import fuseloop as fl

    k = int(sys.argv[1])
    ready, go = sys.argv[2], sys.argv[3]
    xh = np.random.default_rng(k).random(3000 + k, dtype=np.float32)
    yh = np.random.default_rng(50 + k).random(3000 + k, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)
    open(ready, "w").close()
    deadline = time.time() + 120
    while not os.path.exists(go) and time.time() < deadline:
        time.sleep(0.01)
    ok = True
    shared = (fl.exp(-x * x) + fl.sin(y) * 0.25).get()   # the same kernel in every process
    ok &= bool(np.allclose(shared, np.exp(-xh * xh) + np.sin(yh) * 0.25, rtol=1e-5, atol=1e-6))
    c = k % 4 + 1
    own = (x * fl.constant(c) - y).get()  # processes k and k+4 share it (the literal is in the key)
    ok &= bool(np.allclose(own, xh * c - yh, rtol=1e-5, atol=1e-6))
    print(json.dumps({"ok": ok, "stats": fl.stats()}))
""")


def test_eight_processes_share_one_cache_directory(device, tmp_path):
    directory = tmp_path / "shared-cache"
    env = dict(os.environ, FUSELOOP_CACHE_DIR=str(directory), FUSELOOP_DEVICE=str(device.index))
    procs = []
    for k in range(8):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", CHILD, str(k), str(tmp_path / f"ready{k}"),
             str(tmp_path / "go")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not all(
                (tmp_path / f"ready{k}").exists() or procs[k].poll() is not None
                for k in range(8)):
            time.sleep(0.02)
        (tmp_path / "go").touch()  # all start compiling at once
        outputs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        res = json.loads(out.strip().splitlines()[-1])
        assert res["ok"], res
        assert res["stats"]["kernels_launched"] == 2
    entries = cache.disk_entries(directory)
    assert len(entries) == 1 + 4  # the shared kernel and the four others, once each
    keys = set()
    for path in entries:
        entry = cache.read_entry(path)
        assert entry is not None, f"{path} does not verify"
        keys.add(entry.key)
    assert len(keys) == 5
    # no temporary files: besides the entries, only the marker that a process opened this
    # device with the cache (fuseloop.cache_disk.note_opened)
    marker = cache_disk._opened_marker(directory, device.identity)
    assert [p for p in disk_files(directory) if p not in entries] == [marker]

# }}}


# {{{ resource faults

def test_evaluation_larger_than_the_device_allows(device):
    n = device.max_alloc_size // 4 + 16  # float32 elements: one more than fits
    big = fl.arange(n, dtype=np.float32) * 2  # lazy: nothing allocated yet
    with pytest.raises(fl.errors.DeviceMemoryError, match="bytes"):
        big.eval()
    assert big.is_lazy
    x = fl.asarray(np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal((x * 2).get(), np.arange(5) * 2)


@pytest.mark.opencl_only
def test_device_out_of_memory_is_a_device_memory_error(device, monkeypatch):
    class ExhaustedPool:  # (the driver's pool, under fuseloop's accounting)
        managed_bytes = 0

        def allocate(self, nbytes):
            raise cl.MemoryError("MEM_OBJECT_ALLOCATION_FAILURE (simulated)")

        def free_held(self):
            pass

    runtime = devmod._runtime(device)
    x = fl.asarray(np.arange(6, dtype=np.float32))
    with monkeypatch.context() as m:
        m.setattr(runtime.pool, "pool", ExhaustedPool())
        with pytest.raises(fl.errors.DeviceMemoryError, match="out of device memory"):
            (x + 1).eval()
    np.testing.assert_array_equal((x + 1).get(), np.arange(6) + 1)  # usable again


def test_failed_build_leaves_no_cache_entry(device, fresh_cache):
    bad = fl.function("float bad_body(float x)", "return x * ;")
    x = fl.asarray(np.ones(8, np.float32))
    before = len(cache._memory)
    with pytest.raises(fl.errors.KernelBuildError):
        bad(x).get()
    assert len(cache._memory) == before
    assert disk_files(fresh_cache) == []
    check_unlocked()
    np.testing.assert_array_equal((x + 2).get(), np.full(8, 3, np.float32))


def test_unwritable_cache_directory_still_evaluates(device, tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(blocker / "cache"))
    fl.clear_memory_cache()
    x = fl.asarray(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal((x * 3 + 1).get(), np.arange(4) * 3 + 1)
    fl.clear_memory_cache()
    np.testing.assert_array_equal((x * 3 + 1).get(), np.arange(4) * 3 + 1)
    err = capfd.readouterr().err
    assert err.count("could not write kernel cache entry") == 1  # warned once, not per kernel

# }}}


# {{{ interruptions

class InterruptOnce:
    """Raise KeyboardInterrupt at the first call, then behave like ``func``."""

    def __init__(self, func):
        self.func = func
        self.fired = False

    def __call__(self, *args, **kwargs):
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return self.func(*args, **kwargs)


def _interrupt_lowering(monkeypatch):
    from fuseloop.lower import kernel as lower_kernel

    hook = InterruptOnce(lower_kernel.lower_program)
    monkeypatch.setattr(lower_kernel, "lower_program", hook)
    return hook


def _interrupt_build(monkeypatch):
    hook = InterruptOnce(cache._build_source)
    monkeypatch.setattr(cache, "_build_source", hook)
    return hook


def _interrupt_disk_write(monkeypatch):
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if not hook.fired and str(dst).endswith(".json"):
            hook.fired = True
            raise KeyboardInterrupt  # after the temporary file was written
        return real(src, dst, *args, **kwargs)

    hook = InterruptOnce(None)
    monkeypatch.setattr(os, "replace", replace)
    return hook


def _interrupt_launch(monkeypatch):
    from fuseloop.backends import opencl

    prop = cache.CompiledKernel.kernel

    def kernel(self):
        k = prop.fget(self)
        return hook if not hook.fired else k

    hook = InterruptOnce(opencl._enqueue_nd_range)
    monkeypatch.setattr(cache.CompiledKernel, "kernel", property(kernel))
    # a cached elementwise launch enqueues through a kernel object of its own, with
    # the enqueue function its launcher took when it was made (after this patch)
    monkeypatch.setattr(opencl, "_enqueue_nd_range", hook)
    return hook


@pytest.mark.parametrize("where", ["lowering", "build", "disk_write", "launch",
                                   "large_launch"])
def test_keyboard_interrupt_leaves_library_usable(device, fresh_cache, monkeypatch, where):
    from fuseloop.launching import DEFER_MAX_ELEMENTS
    from fuseloop.runtime.devices import _runtime

    if where.endswith("launch") and device.backend != "opencl":
        pytest.skip("the interrupt is injected into the OpenCL launcher's enqueue")

    # a small launch is deferred (enqueued at the next use of the queue), a large one not
    n = 2 * DEFER_MAX_ELEMENTS if where == "large_launch" else 300
    xh = np.linspace(0, 1, n, dtype=np.float32)
    x = fl.asarray(xh)
    z = fl.tanh(x) * 5 - fl.cos(x)  # a structure no other test uses
    expect = np.tanh(xh) * 5 - np.cos(xh)
    hook = {"lowering": _interrupt_lowering, "build": _interrupt_build,
            "disk_write": _interrupt_disk_write, "launch": _interrupt_launch,
            "large_launch": _interrupt_launch}[where](monkeypatch)
    before = len(cache._memory)
    with pytest.raises(KeyboardInterrupt):
        z.get()
    assert hook.fired
    check_unlocked()
    if where == "launch":
        # interrupted in get()'s enqueue of the deferred launch: z is concrete and
        # its launch still waits (to be enqueued by the next use of the queue)
        assert not z.is_lazy and len(_runtime(device).deferred) == 1
    else:
        assert z.is_lazy
    if where.endswith("launch"):  # the kernel was complete before the interrupt: it may stay
        assert len(cache._memory) == before + 1
        assert len(cache.disk_entries(fresh_cache)) == 1
    else:  # nothing half-registered: no memory entry, no disk entry, no temporary file
        assert len(cache._memory) == before
        assert disk_files(fresh_cache) == []
    fl.reset_stats()
    np.testing.assert_allclose(z.get(), expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((fl.tanh(x) * 2 - fl.cos(x)).get(), np.tanh(xh) * 2 - np.cos(xh),
                               rtol=1e-5, atol=1e-6)
    assert fl.stats()["kernels_lowered"] == (0 if where.endswith("launch") else 1)
    check_unlocked()
    entries = cache.disk_entries(fresh_cache)
    assert len(entries) == 1 and cache.read_entry(entries[0]) is not None
    assert disk_files(fresh_cache) == entries

# }}}


def test_synchronize_waits_for_a_device_missing_from_the_list(device):
    """A device in use that ``fl.devices()`` does not list (one opened under another
    index) is waited for too; it made ``fl.synchronize()`` raise IndexError."""
    import dataclasses

    from fuseloop.runtime import devices
    from fuseloop.runtime.transfer import finish

    twin = dataclasses.replace(device, index=device.index + 991)
    try:
        x = fl.asarray(np.arange(4, dtype=np.float32), device=twin)
        fl.synchronize()
        np.testing.assert_array_equal(x.get(), np.arange(4, dtype=np.float32))
        del x
    finally:
        finish(twin)
        devices._runtimes.pop(twin.index, None)
