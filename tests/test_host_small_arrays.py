"""Small values on the CPU device computed at once by numpy (issue 26, NPBench's nbody
and contour_integral on preset S): ``m.T`` of a small concrete array is a HostArray
viewing its memory (operators on it are computed at once, not built into a lazy tree
for the host path to evaluate); ``a += v`` of a value made at once is numpy's in-place
operation with no buffer given to ``v``; the complex elements of ``for z in pts`` are
raised to powers, multiplied and measured (``abs``) at once, as numpy computes them.

As in tests/test_host_eager.py the host path is on here (the session turns it off).
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_eager
from fuseloop.expr.nodes import Scalar


def test_transpose_of_a_small_concrete_array_is_a_view_made_here(host):
    """nbody's ``mass * mass.T`` and ``x.T - x``: HostArrays computed at once, no lazy
    node; the transposed view shares its base's memory both ways."""
    rng = np.random.default_rng(7)
    m0, p0 = rng.random((6, 1)), rng.random((6, 3))
    m, p = fl.asarray(m0), fl.asarray(p0)
    fl.reset_stats()
    mt = m.T
    assert type(mt) is host_eager.HostArray and mt.shape == (1, 6)
    mm = m * mt
    x = p[:, 0:1]
    dx = x.T - x
    assert type(mm) is host_eager.HostArray and type(dx) is host_eager.HostArray
    assert fl.stats()["host_evaluations"] == 0 and fl.stats()["kernels_launched"] == 0
    np.testing.assert_array_equal(mm.get(), m0 * m0.T)
    np.testing.assert_array_equal(dx.get(), p0[:, 0:1].T - p0[:, 0:1])
    mt[0, 2] = -3.0  # (a write through the view reaches the base, and back)
    m0.T[0, 2] = -3.0
    np.testing.assert_array_equal(m.get(), m0)
    m[4, 0] = 9.0
    m0[4, 0] = 9.0
    np.testing.assert_array_equal(mt.get(), m0.T)


def test_transpose_of_a_value_made_here_shares_its_memory(host):
    """``v.T`` of a value made at once (no buffer yet): a view of the same elements
    (it is given its buffer first, so later writes to either show in both)."""
    a0 = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = fl.asarray(a0)[0:3, 0:4] * 2
    vt = v.T
    assert type(vt) is host_eager.HostArray and vt.dtype == np.float32
    want = a0 * 2
    np.testing.assert_array_equal(vt.get(), want.T)
    v[1, 1] = 100.0
    want[1, 1] = 100.0
    np.testing.assert_array_equal(vt.get(), want.T)
    vt[3, 0] = -1.0
    want[0, 3] = -1.0
    np.testing.assert_array_equal(v.get(), want)


def test_large_or_lazy_transposes_stay_views_of_leaves(host):
    """Beyond the eager limit, or of a lazy array: the general path's transpose."""
    big = fl.asarray(np.ones((100, 100)))
    assert type(big.T) is fl.Array
    lazy = fl.asarray(np.ones((3, 2))) + 1
    assert type(lazy.T) is fl.Array and lazy.T.shape == (2, 3)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_inplace_update_by_a_value_made_here_needs_no_buffer(host, dtype):
    """nbody's ``vel += acc * dt / 2.0``: numpy's in-place operation, the value made at
    once given no buffer; an int target with a float value is numpy's casting error."""
    rng = np.random.default_rng(8)
    v0 = (rng.random((5, 3)) * 10).astype(dtype)
    a0 = (rng.random((5, 3)) * 10).astype(dtype)
    vel, acc = fl.asarray(v0), fl.asarray(a0)
    step = acc[:, :] * 2
    assert type(step) is host_eager.HostArray and step._buf is None
    before = host_eager.counts["materialised"]
    fl.reset_stats()
    vel += step
    assert host_eager.counts["materialised"] == before and step._buf is None
    assert fl.stats()["kernels_launched"] == 0
    np.testing.assert_array_equal(vel.get(), v0 + a0 * 2)
    if dtype == np.int32:
        with pytest.raises(Exception, match="same_kind"):
            vel += acc[:, :] * 0.5
        np.testing.assert_array_equal(vel.get(), v0 + a0 * 2)


def test_complex_elements_power_and_abs_are_numpys_at_once(host):
    """contour_integral's ``zz = np.power(z, e)``, ``Tz += zz * Ham[n]`` and
    ``abs(z) < 1.0`` for the complex elements ``z`` of ``for z in pts``: numpy's
    values, computed at once (no lazy node, nothing launched), numpy's dtypes."""
    pts0 = np.array([1 + 2j, 0.5 - 0.25j, -0.3 + 0.1j])
    ham0 = np.arange(2 * 3 * 3).reshape(2, 3, 3) * (0.5 - 1j)
    pts, ham = fl.asarray(pts0), fl.asarray(ham0)
    tz = fl.zeros((3, 3), dtype=np.complex128)
    want = np.zeros((3, 3), dtype=np.complex128)
    fl.reset_stats()
    for z, z0 in zip(pts, pts0):
        for n, e in enumerate((1.5, -0.5)):
            zz = fl.power(z, e)
            assert type(zz._node) is Scalar and zz.dtype == np.complex128
            tz += zz * ham[n]
            want += np.power(z0, e) * ham0[n]
            assert zz.get() == np.power(z0, e)
        a = abs(z)
        assert type(a._node) is Scalar and a.dtype == np.float64 and a.get() == abs(z0)
        assert bool(a < 1.0) == bool(abs(z0) < 1.0)
        assert (-z).get() == -z0
        q = z / (z * 2.0 - 1.0)
        assert q.get() == z0 / (z0 * 2.0 - 1.0) and q.dtype == np.complex128
    # (one evaluation per ``tz +=``: the write; nothing else evaluated, nothing launched)
    assert fl.stats()["kernels_launched"] == 0 and fl.stats()["host_evaluations"] == 6
    np.testing.assert_array_equal(tz.get(), want)


def test_broadcasts_of_small_views_are_numpys_or_the_general_paths(host):
    """``x.T - x`` broadcast by numpy here; shapes that do not broadcast raise the
    general path's error; a broadcast beyond ``BROADCAST_MAX`` is left lazy."""
    p0 = np.random.default_rng(9).random((200, 3))
    p = fl.asarray(p0)
    x, w = p[0:20, 0:1], p[0:20, 0:2]
    got = x.T - x
    assert type(got) is host_eager.HostArray
    np.testing.assert_array_equal(got.get(), p0[0:20, 0:1].T - p0[0:20, 0:1])
    with pytest.raises(Exception, match="broadcast"):
        (w.T - w).get()
    col, row = p[0:200, 0:1], p[0:200, 1:2].T  # (40000 elements: more than BROADCAST_MAX)
    big = col * row
    assert type(big) is not host_eager.HostArray
    np.testing.assert_array_equal(big.get(), p0[:, 0:1] * p0[:, 1:2].T)


def test_ufunc_functions_of_held_elements_are_numpys_at_once(host):
    """``np.power(z, e)``, ``np.power(e, z)`` and ``np.multiply(z, w)`` of held complex
    elements: numpy scalars' values, computed at once."""
    for vals in (np.array([1 + 2j, 0.5 - 1j]), np.array([0.5j, 3 - 1j], np.complex64)):
        z, w = iter(fl.asarray(vals))
        for got, want in ((fl.power(z, 2.5), np.power(vals[0], 2.5)),
                          (fl.power(2.0, w), np.power(2.0, vals[1])),
                          (fl.multiply(z, w), vals[0] * vals[1])):
            assert type(got._node) is Scalar and got.dtype == want.dtype
            assert got.get() == want
