"""A split result's parts are freed when the split array is let go (issue 29): evaluated
parts read nothing, so they leave the recent lazy arrays (``expr.readers``), which held
them, and with them their buffers, until up to 64 later lazy arrays; a split part's
large allocation does not prune that list first (``multi.replay.output``)."""

from __future__ import annotations

import weakref

import numpy as np

import fuseloop as fl
from fuseloop.expr.readers import recent_lazy


def _split(device, n=1 << 12):
    with fl.device([device, device]):
        x = fl.random.uniform(n, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(n, dtype=np.float32, key=2).eval()
    return x, y


def test_evaluated_parts_freed_at_del(device_path):
    x, y = _split(device_path)
    xn, yn = x.get(), y.get()
    for _ in range(3):  # (the first call, then the kept call's path: multi.calls)
        z = (2 * x - fl.sin(y) + x * y).eval()
        np.testing.assert_allclose(z.get(), 2 * xn - np.sin(yn) + xn * yn, rtol=1e-5,
                                   atol=1e-6)
        parts = [weakref.ref(p) for p in z.parts]
        buffers = [weakref.ref(p._storage) for p in z.parts]
        assert not any(p is q for p in z.parts for q in recent_lazy)
        del z
        assert all(r() is None for r in parts)
        assert all(r() is None for r in buffers)


def test_gathered_parts_freed(device_path):
    x, y = _split(device_path)
    for _ in range(3):
        z = x * y
        parts = [weakref.ref(p) for p in z.parts]
        np.testing.assert_allclose(z.get(), x.get() * y.get(), rtol=1e-6)
        del z
        assert all(r() is None for r in parts)


def test_held_parts_stay_correct(device_path):
    """A part still held after the split array is let go is evaluated, keeps its value,
    and a write into an operand afterwards does not change it."""
    x, y = _split(device_path, 64)
    xn, yn = x.get(), y.get()
    z = (x + y).eval()
    first = z.parts[0]
    del z
    x[:] = 0.0
    np.testing.assert_allclose(first.get(), (xn + yn)[:32], rtol=1e-6)
    lazy = x * 2 + y  # (lazy parts are still entered as readers before a write)
    keep = lazy.parts[1]
    del lazy
    y[:] = 1.0
    np.testing.assert_allclose(keep.get(), yn[32:], rtol=1e-6)
