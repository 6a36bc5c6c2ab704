"""The host work of a kept split sum (issue 29: the last part starts after every part's
host work): a part's buffers are allocated in its launch, under the one device switch
it makes there (CUDA: not a second switch while staging); a prepared step whose inputs
are the part's own, in order, takes them as they are; a split full sum makes no import
statement per call (each cost the sum microseconds); parts past int32 bytes (2**30
float32 over two GPUs) are prepared launches too, not the general step launch."""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import dis
import importlib
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from test_multi_wide import _MODULES, LIMIT

import fuseloop as fl
from fuseloop import host_path
from fuseloop.multi import calls
from fuseloop.multi import replay as multi_replay


@pytest.fixture
def split(three, monkeypatch):
    """Three devices (the device and two twins), the device path (as on a GPU)."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    return three


@pytest.fixture
def wide_limit(monkeypatch):
    """Buffers past ``LIMIT`` bytes count as past int32 (``test_multi_wide``'s)."""
    for name in _MODULES:
        monkeypatch.setattr(importlib.import_module(name), "INT32_LIMIT", LIMIT)
    return LIMIT


def _kept_sum(split, n=30000):
    rng = np.random.default_rng(21)
    xn, yn = rng.random(n, np.float32), rng.random(n, np.float32)
    with fl.device(split):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(3):  # (plans recorded, launches prepared, the call kept)
        float(fl.sum(x * y))
    return x, y, np.dot(xn.astype(np.float64), yn)


def test_kept_parts_switch_once_at_launch(split, monkeypatch):
    """Staging a kept split sum switches no device; launching it switches once per part
    (its partial buffer allocated then, on its device), with numpy's sum: the devices
    presented as CUDA ones, the switch counted."""
    x, y, want = _kept_sum(split)
    entered: list[int] = []

    @contextlib.contextmanager
    def switch(device):
        entered.append(device.index)
        yield

    monkeypatch.setattr(multi_replay, "_CUDA_SWITCH", [switch])
    e = x * y
    base = ("sum", (0,), True, ())
    _, staged, call = calls.found(base, e.parts)
    assert staged is not None and call is not None
    assert all(s.prepared is not None for s in staged)
    # (each step reads the part's x and y in order: passed as the part's list)
    assert all(step[4] is None for s in staged for step in s.prepared.steps)
    for s in staged:
        s.device = dataclasses.replace(s.device, backend="cuda")
    assert entered == []
    results: list = []
    multi_replay.enqueue_all(staged, results)
    assert entered == [d.index for d in split]
    got = sum(float(np.asarray(fl.Array._concrete(r, np.dtype(np.float32), (1,)).get())[0])
              for r in results)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_kept_split_sum_imports_nothing(split):
    """A kept ``float(fl.sum(x*y))`` over a split runs no import statement of fuseloop's
    (numpy's own, such as ``ndarray.ctypes``' on the CUDA backend, are not ours)."""
    x, y, want = _kept_sum(split)
    imported: list[str] = []
    real = builtins.__import__

    def counting(name, *args, **kwargs):
        # (an import statement of fuseloop's: its frame is at an IMPORT_NAME; a C function
        # importing under a fuseloop frame, as numpy's ndarray.ctypes does, is not one)
        frame = sys._getframe(1)
        if (frame.f_globals.get("__name__", "").startswith("fuseloop")
                and dis.opname[frame.f_code.co_code[frame.f_lasti]] == "IMPORT_NAME"):
            imported.append(name)
        return real(name, *args, **kwargs)

    builtins.__import__ = counting
    try:
        total = float(fl.sum(x * y))
    finally:
        builtins.__import__ = real
    assert imported == []
    np.testing.assert_allclose(total, want, rtol=1e-5)


def test_wide_parts_prepared(three, wide_limit, monkeypatch):
    """Parts past int32 bytes (the limit lowered, as at 2**30 float32 over two GPUs): a
    kept split sum's parts are prepared launches (int64 index, the general launch's),
    not the general step launch; launches and numpy's sum as before."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    general: list[int] = []
    real = multi_replay._launch

    def counted(*args):
        general.append(1)
        return real(*args)

    monkeypatch.setattr(multi_replay, "_launch", counted)
    x, y, want = _kept_sum(three, 60000)
    assert all(p.nbytes > wide_limit for p in x.parts)
    general.clear()
    fl.reset_stats()
    total = float(fl.sum(x * y))
    assert general == []
    assert fl.stats()["kernels_launched"] == len(three)
    _, staged, _ = calls.found(("sum", (0,), True, ()), (x * y).parts)
    assert staged is not None
    for s in staged:
        assert s.prepared is not None and s.prepared.steps
        assert all(lp.index_dtype == np.int64 for lp in _launch_plans(s.prepared))
    np.testing.assert_allclose(total, want, rtol=1e-5)


def _launch_plans(prepared):
    return [step.plan for step in prepared.entry[0].steps]


def _step(*refs):
    return SimpleNamespace(storage_refs=refs)


def test_index_of_rule():
    """A prepared step's index type is the one every admitted launch takes, else None:
    int64 past int32 sizes or over every input of a wide entry; int32 over a narrow
    entry's inputs or a wide one's new buffers alone; None over some of a wide entry's
    inputs (their sizes decide per launch)."""
    index_of, big = multi_replay._index_of, multi_replay.INT32_LIMIT + 1
    both, one, temps = _step(("i", 0), ("i", 1)), _step(("i", 1), ("t", 0)), _step(("t", 0))
    assert index_of(both, 10, 2, True) == np.int64
    assert index_of(one, 10, 2, True) is None
    assert index_of(temps, 10, 2, True) == np.int32
    assert index_of(one, 10, 2, False) == np.int32
    assert index_of(temps, big, 2, False) == np.int64


def test_long_gpu_sums_split_into_more_pieces(three, monkeypatch):
    """A long contiguous sum on a GPU takes more first-stage pieces than 2048 past 2**26
    elements (pieces of ``GPU_LONG_PIECE`` elements, up to ``GPU_MAX_PIECES``: the
    counts an H200 ran a 2**28-element part and a 2**30 sum fastest at), shorter ones
    as before; a split's parts of that many pieces each still run in one launch and
    give numpy's sum."""
    from fuseloop import splits

    gpu = dataclasses.replace(three[1], type="gpu")
    assert [splits.piece_count(1 << k, gpu) for k in (20, 22, 24, 26, 27, 28, 30)] == [
        256, 1024, 2048, 2048, 4096, 8192, 16384]
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    monkeypatch.setattr(splits, "GPU_LONG_PIECE", 16)  # (the long rule at a test's size)
    gpus = [dataclasses.replace(d, type="gpu", compute_units=132, max_work_group_size=1024)
            for d in three[1:]]
    assert splits.piece_count(1 << 16, gpus[0]) == 4096
    rng = np.random.default_rng(8)
    xn, yn = rng.random(1 << 17, np.float32), rng.random(1 << 17, np.float32)
    with fl.device(gpus):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(2):
        float(fl.sum(x * y))
    fl.reset_stats()
    total = float(fl.sum(x * y))
    assert fl.stats()["kernels_launched"] == 2
    np.testing.assert_allclose(total, np.dot(xn.astype(np.float64), yn), rtol=1e-5)
