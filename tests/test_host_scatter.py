"""Scatters by concrete index arrays on the CPU device written by numpy at once
(fuseloop.host_writes.scatter): numpy's results (advanced axes' place, negative and
repeated positions, casts), no kernel, and the general path's errors with nothing
written.  The host path is on here (the session turns it off)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import IndexOutOfBoundsError


def _pair(a):
    return a.copy(), fl.asarray(a)


def test_scatters_are_numpys_and_launch_nothing(host):
    rng = np.random.default_rng(3)
    base = rng.random((6, 7))
    rows, cols = np.array([0, 2, -1, 2]), np.array([1, 1, 4, 1])  # (repeated: last wins)
    ir, ic = fl.asarray(rows), fl.asarray(cols)
    val = rng.random(4)
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    c0 = (base + 1j * base[::-1])[:3]
    cases = [  # (numpy target, fuseloop target, numpy key, fuseloop key, value)
        (*_pair(base), (rows, cols), (ir, ic), 7.5),
        (*_pair(base), (rows, cols), (ir, ic), val),
        (*_pair(base), (rows, cols), (ir, ic), fl.asarray(val)),
        (*_pair(base), (2, cols), (2, ic), fl.asarray(val)[1]),   # an element's value
        (*_pair(base), (slice(1, 5), cols), (slice(1, 5), ic), 0.0),
        (*_pair(base), (rows, slice(None, None, 2)), (ir, slice(None, None, 2)), -1),
        (*_pair(base), rows, ir, rng.random(7)),                   # whole rows, broadcast
        (*_pair(base), (rows, 3), (rows, 3), fl.asarray(val)),     # a numpy index
        (*_pair(ints), (rows[:2], cols[:2]), (ir[:2], ic[:2]), 2.9),  # a float into int32
        (*_pair(ints), (rows[:2], cols[:2]), (ir[:2], ic[:2]), fl.asarray(val[:2])),
        (*_pair(c0), (rows[:2], cols[:2]), (ir[:2], ic[:2]), fl.asarray(val[:2] * 1j)),
    ]
    for a in (ir, ic):
        a.get()
    for j, (want, got, key_np, key_fl, value) in enumerate(cases):
        want[key_np] = value.get() if isinstance(value, fl.Array) else value
        before = dict(fl.stats())
        got[key_fl] = value
        after = fl.stats()
        assert after["kernels_launched"] == before["kernels_launched"], j
        assert after["host_evaluations"] == before["host_evaluations"] + 1
        np.testing.assert_array_equal(got.get(), want)
        assert got.dtype == want.dtype


def test_errors_are_the_general_paths_and_nothing_is_written(host):
    a0 = np.arange(20.0).reshape(4, 5)
    a = fl.asarray(a0)
    with pytest.raises(IndexOutOfBoundsError):
        a[fl.asarray(np.array([0, 4])), fl.asarray(np.array([1, 1]))] = 1.0
    with pytest.raises(ValueError):
        a[fl.asarray(np.array([0, 1])), 2] = fl.asarray(np.ones(3))
    np.testing.assert_array_equal(a.get(), a0)


def test_lazy_readers_and_kernels_come_first(host):
    """A lazy array reading the target is computed before the write; indices and a
    target a kernel wrote (above the host path's limit) are read once it is done."""
    n = 3 * fl.host_path.HOST_MAX_WORK
    x0 = np.linspace(0.0, 1.0, n)
    x = fl.asarray(x0)
    doubled = x * 2.0                                   # lazy, reads x
    idx = (fl.arange(0, n, 7) + 1).eval()               # a kernel's result
    x[idx] = -1.0
    want = x0.copy()
    want[np.arange(0, n, 7) + 1] = -1.0
    np.testing.assert_array_equal(doubled.get(), x0 * 2.0)
    np.testing.assert_array_equal(x.get(), want)
    y = (fl.asarray(x0) + 1.0).eval()                   # a target a kernel wrote
    y[idx] = fl.asarray(np.zeros(idx.shape[0]))
    want = x0 + 1.0
    want[np.arange(0, n, 7) + 1] = 0.0
    np.testing.assert_array_equal(y.get(), want)
