"""The host work of a kept split sum (issue 29: the last part starts after every part's
host work): a part's buffers are allocated in its launch, under the one device switch
it makes there (CUDA: not a second switch while staging); a prepared step whose inputs
are the part's own, in order, takes them as they are; a split full sum makes no import
statement per call (each cost the sum microseconds)."""

from __future__ import annotations

import builtins
import contextlib
import dataclasses

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_path
from fuseloop.multi import calls
from fuseloop.multi import replay as multi_replay


@pytest.fixture
def split(three, monkeypatch):
    """Three devices (the device and two twins), the device path (as on a GPU)."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    return three


def _kept_sum(split):
    rng = np.random.default_rng(21)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
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
    """A kept ``float(fl.sum(x*y))`` over a split runs no import statement."""
    x, y, want = _kept_sum(split)
    imported: list[str] = []
    real = builtins.__import__

    def counting(name, *args, **kwargs):
        imported.append(name)
        return real(name, *args, **kwargs)

    builtins.__import__ = counting
    try:
        total = float(fl.sum(x * y))
    finally:
        builtins.__import__ = real
    assert imported == []
    np.testing.assert_allclose(total, want, rtol=1e-5)
