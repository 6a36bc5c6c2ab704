"""A cold process's first result: the compile worker starts with device discovery where
the disk cache never saw the device, and a GPU's builds run in this process until a
worker has readied it (fuseloop.runtime.compile_workers, fuseloop.runtime.devices)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache_disk
from fuseloop.backends import opencl
from fuseloop.runtime import compile_worker_main, compile_workers

pytestmark = pytest.mark.opencl_only  # (the OpenCL backend's compile workers)

OPENING = textwrap.dedent("""
    import json
    import numpy as np
    import fuseloop as fl
    from fuseloop import cache_disk
    from fuseloop.runtime import compile_workers
    device = fl.get_device()
    discovered = compile_workers._pool.started
    device.queue  # (opens it: its context and queue)
    pool = compile_workers._pool
    print(json.dumps({"discovered": discovered, "started": pool.started,
                      "readied": sum(len(w.warmed) for w in pool.idle),
                      "seen": cache_disk.opened_before(device.identity)}))
""")


def _opening(cache_dir: str, **env_vars: str) -> dict:
    env = {**os.environ, "FUSELOOP_CACHE_DIR": cache_dir, "FUSELOOP_COMPILE": "process",
           **env_vars}
    out = subprocess.run([sys.executable, "-c", OPENING], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_cold_cache_starts_the_worker_with_discovery_a_warm_one_does_not(tmp_path):
    if os.environ.get("FUSELOOP_DEVICE", "").lower().startswith("cuda"):
        pytest.skip("the OpenCL backend's worker")
    cold = _opening(str(tmp_path))
    # a process that never opened this device with this cache builds kernels: the worker
    # starts before discovery ends and readies the device when it is opened
    assert cold == {"discovered": 1, "started": 1, "readied": 1, "seen": True}
    # the next process finds the device seen (its kernels on disk): no worker
    assert _opening(str(tmp_path)) == {"discovered": 0, "started": 0, "readied": 0,
                                       "seen": True}
    # nor with inline builds; with the disk cache off every process builds
    assert _opening(str(tmp_path / "other"), FUSELOOP_COMPILE="inline")["started"] == 0
    assert _opening("off")["discovered"] == 1
    # an emptied cache is cold again
    cache_disk.clear_disk_cache(tmp_path)
    assert _opening(str(tmp_path))["discovered"] == 1


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """A fresh pool and an empty disk cache; counts of the builds made in this process
    and in workers."""
    monkeypatch.setenv("FUSELOOP_COMPILE", "process")
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    pool = compile_workers._Pool()
    monkeypatch.setattr(compile_workers, "_pool", pool)
    counts = {"here": 0, "worker": 0}
    build_here, compile_binary = opencl.OpenCLBackend._build_here, compile_workers.compile_binary

    def here(self, *args, **kwargs):
        counts["here"] += 1
        return build_here(self, *args, **kwargs)

    def in_worker(*args, **kwargs):
        counts["worker"] += 1
        return compile_binary(*args, **kwargs)

    monkeypatch.setattr(opencl.OpenCLBackend, "_build_here", here)
    monkeypatch.setattr(compile_workers, "compile_binary", in_worker)
    yield pool, counts
    pool.shutdown()


def _new_kernel(x: fl.Array, k: float) -> None:
    # a constant is part of the source: each k is a new kernel
    xh = x.get()
    np.testing.assert_allclose((x * fl.constant(k) - fl.sqrt(x)).get(), xh * k - np.sqrt(xh),
                               rtol=1e-6)


def test_a_gpus_builds_run_here_until_a_worker_has_readied_it(device, builds, monkeypatch):
    pool, counts = builds
    gpu = dataclasses.replace(device, type="gpu")  # (the same device, built for as a GPU's)
    caught_up = compile_workers._Worker.caught_up
    ready = [False]  # (until set, no worker is ready however fast it starts)
    monkeypatch.setattr(compile_workers._Worker, "caught_up",
                        lambda self: ready[0] and caught_up(self))
    with fl.device(gpu):
        x = fl.asarray(np.linspace(1, 2, 300, dtype=np.float32))
        _new_kernel(x, 1.25)
        _new_kernel(x, 2.25)
        assert counts == {"here": 2, "worker": 0}
        # and a worker readies the device meanwhile, for the builds after
        assert pool.started == 1 and len(pool.idle) == 1 and pool.idle[0].warmed
        ready[0] = True
        worker = pool.idle[0]
        deadline = time.monotonic() + 120
        while not worker.caught_up():
            assert time.monotonic() < deadline, "the worker never readied the device"
            time.sleep(0.05)
        before = dict(counts)
        _new_kernel(x, 3.25)
        assert counts["worker"] == before["worker"] + 1


def test_a_cpus_builds_never_run_here(device, builds, monkeypatch):
    _, counts = builds
    if device.type != "cpu":
        pytest.skip("a CPU runtime's compiler")
    monkeypatch.setattr(compile_workers._Worker, "caught_up", lambda self: False)
    x = fl.asarray(np.linspace(1, 2, 300, dtype=np.float32))
    _new_kernel(x, 4.25)
    assert counts["worker"] == 1  # (PoCL's LLVM may abort: always in a worker)


def test_caught_up_reads_the_answers_owed_without_waiting(device, monkeypatch):
    worker = compile_workers._Worker()
    try:
        address = (opencl._BUILDER, *compile_workers._device_address(device))
        worker.send((*address, None, (), (), None, False))
        deadline = time.monotonic() + 120
        while not worker.caught_up():  # (never blocks: it polls)
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert worker.ready and worker.unread == 0
        source = "__kernel void k(__global float *a) { a[0] = 2.5f; }"
        status, _ = worker.request((*address, source, (), ("k",), None, True))
        assert status == "ok"
    finally:
        worker.kill()


class _Trickle(io.RawIOBase):
    """A pipe that hands out one byte a read (as an unbuffered pipe may)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        out, self.data = self.data[:1], self.data[1:]
        return out


def test_messages_survive_short_reads_and_writes():
    sink = io.BytesIO()
    compile_worker_main.write_message(sink, ("ok", b"\x00" * 5000))
    stream = _Trickle(sink.getvalue())
    assert compile_worker_main.read_message(stream) == ("ok", b"\x00" * 5000)
    with pytest.raises(EOFError):
        compile_worker_main.read_message(_Trickle(sink.getvalue()[:20]))


FINGERPRINT = textwrap.dedent("""
    from fuseloop.recipes.core import Recipe
    def transform(t_unit, device):
        kinds = {"op", "call", "load", "reduce"}  # (a frozenset constant of strings)
        pick = lambda name: name in kinds  # (a nested code object)
        return t_unit if pick("op") else None
    print(Recipe("t", transform).fingerprint)
""")


def test_a_recipes_fingerprint_is_the_same_in_every_process():
    # (string hashes, which order a frozenset's elements, are seeded per process)
    found = {subprocess.run([sys.executable, "-c", FINGERPRINT], capture_output=True, text=True,
                            check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
             for seed in ("1", "2", "3")}
    assert len(found) == 1


def test_a_recipes_fingerprint_reads_no_source(monkeypatch):
    # (inspect.getsource searched every loaded module, in each process's first evaluation,
    # a disk-cache hit's too)
    import inspect

    from fuseloop.recipes.core import Recipe

    def refuse(*args, **kwargs):
        raise AssertionError("the source was read")

    monkeypatch.setattr(inspect, "getsource", refuse)
    monkeypatch.setattr(inspect, "getsourcelines", refuse)

    def transform(t_unit, device):
        return t_unit

    def other(t_unit, device):
        return None

    assert Recipe("t", transform).fingerprint != Recipe("t", other).fingerprint


def test_objects_frozen_before_fuseloops_import_do_not_stop_the_sections_freeze(monkeypatch):
    # (the H200 host's Python starts with objects frozen: had the sections left them alone
    # and frozen nothing, each one's collection would traverse every object)
    import gc

    from fuseloop.lower import codegen

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.freeze()  # (as if before the import)
        monkeypatch.setattr(codegen, "FROZEN_AT_IMPORT", gc.get_freeze_count())
        before = gc.get_freeze_count()
        alive = [[] for _ in range(10)]  # (made since: the section freezes them too)
        with codegen.loopy_section():
            assert gc.get_freeze_count() >= before + len(alive)
        assert gc.get_freeze_count() == 0  # (and unfroze all of it)
        gc.freeze()  # a freeze made later, by code running with fuseloop, is left alone
        frozen = gc.get_freeze_count()
        with codegen.loopy_section():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()
