"""Assignment into a buffer the expression also reads: no temporary where the views
cannot share an element (fuseloop.expr.overlap), numpy's result either way."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop.expr.overlap import views_disjoint


def _elements(shape, strides, offset):
    return {offset + sum(i * s for i, s in zip(idx, strides))
            for idx in itertools.product(*(range(n) for n in shape))}


def _random_view(rng: random.Random):
    ndim = rng.randint(1, 3)
    shape = tuple(rng.randint(0, 4) for _ in range(ndim))
    strides = tuple(rng.choice([-7, -3, -2, -1, 0, 1, 2, 3, 4, 6, 12]) for _ in range(ndim))
    return shape, strides, rng.randint(0, 40)


def test_disjoint_never_claims_a_shared_element():
    """Against enumeration: a "disjoint" answer is always right, and the common
    cases (separate ranges, interleaved lattices) are recognised."""
    rng = random.Random(5)
    recognised = 0
    for _ in range(4000):
        a, b = _random_view(rng), _random_view(rng)
        shared = bool(_elements(*a) & _elements(*b))
        if views_disjoint(a, b):
            assert not shared, (a, b)
            recognised += 1
    assert recognised > 1000


@pytest.mark.parametrize("a, b, disjoint", [
    (((1,), (1,), 5), ((1,), (1,), 6), True),            # A[i, j] vs A[i, j - 1]
    (((5,), (2,), 0), ((5,), (2,), 1), True),            # a[::2] vs a[1::2]
    (((5,), (2,), 0), ((4,), (3,), 1), False),           # 4 is in both
    (((9,), (1,), 1), ((9,), (1,), 0), False),           # a[1:] vs a[:-1]
    (((3, 4), (4, 1), 0), ((3, 4), (4, 1), 12), True),   # two halves of a (6, 4) array
    (((0,), (1,), 0), ((3,), (1,), 0), True),            # empty
    (((8,), (8,), 1), ((8, 6), (8, 1), 2), True),        # A[:, 1] vs A[:, 2:] (8 x 8)
    (((8,), (8,), 3), ((8, 6), (8, 1), 2), False),       # A[:, 3] is in A[:, 2:]
    (((4, 2), (16, 1), 0), ((4, 2), (16, 1), 8), True),  # A[::2, :2] vs A[::2, 8:10] (8 x 8)
])
def test_disjoint_cases(a, b, disjoint):
    assert views_disjoint(a, b) is disjoint


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_element_statement_is_one_launch(device, dtype):
    host = np.arange(36, dtype=dtype).reshape(6, 6)
    a = fl.asarray(host, device=device)
    def statement(i: int, j: int) -> None:
        a[i, j] += a[i, j - 1] * 2

    for i, j in [(1, 2), (2, 3), (4, 1)]:
        host[i, j] += host[i, j - 1] * 2
        assert launches(lambda i=i, j=j: statement(i, j)) == 1
    np.testing.assert_array_equal(a.get(), host)


def test_interleaved_and_separate_views_write_directly(device):
    host = np.arange(20.0)
    a = fl.asarray(host, device=device)

    def interleaved():
        a[::2] = a[1::2] * 3
    assert launches(interleaved) == 1
    host[::2] = host[1::2] * 3
    m = fl.asarray(np.arange(24.0).reshape(6, 4), device=device)
    mh = np.arange(24.0).reshape(6, 4)

    def halves():
        m[3:] = m[:3] + 1
    assert launches(halves) == 1
    mh[3:] = mh[:3] + 1
    np.testing.assert_array_equal(a.get(), host)
    np.testing.assert_array_equal(m.get(), mh)


def test_reduction_statements_write_directly(device):
    """A reduction reading only elements the statement leaves alone writes its result
    straight into the target (Cholesky's ``A[i, j] -= A[i, :j] @ A[j, :j]``): one launch;
    one reading a written element still goes through a temporary, numpy's result."""
    host = np.random.default_rng(3).random((8, 8))
    a = fl.asarray(host, device=device)

    def statement(i: int, j: int) -> None:
        a[i, j] -= fl.dot(a[i, :j], a[j, :j])

    for i, j in [(3, 2), (5, 4), (7, 3)]:
        host[i, j] -= host[i, :j] @ host[j, :j]
        assert launches(lambda i=i, j=j: statement(i, j)) == 1

    def column_from_the_rest():
        a[:, 1] = a[:, 2:].sum(axis=1)
    assert launches(column_from_the_rest) == 1
    host[:, 1] = host[:, 2:].sum(axis=1)
    a[:, 0] += a.sum(axis=1)  # (each row's sum reads the element it writes)
    host[:, 0] += host.sum(axis=1)
    a[2] = a[2] - a[2].mean()
    host[2] = host[2] - host[2].mean()
    np.testing.assert_allclose(a.get(), host, rtol=1e-13)


def test_overlapping_shift_still_matches_numpy(device):
    """``b[1:] = b[:-1] * 2`` reads elements it writes: numpy's answer (the
    right-hand side as it was before the write), through a temporary."""
    host = np.arange(10.0)
    b = fl.asarray(host, device=device)
    b[1:] = b[:-1] * 2
    host[1:] = host[:-1] * 2
    np.testing.assert_array_equal(b.get(), host)
    b[:-1] += b[1:]
    host[:-1] += host[1:]
    np.testing.assert_array_equal(b.get(), host)


def test_lazy_readers_keep_the_values_they_read(device):
    """A lazy array reading elements that an assignment overwrites is computed first
    (it keeps the old values); one reading only other elements need not be, and
    still gives its values."""
    host = np.arange(10.0)
    a = fl.asarray(host.copy(), device=device)
    apart = a[:3] * 2
    across = a[4:7] * 2

    def write():
        a[5:] = 7.0
    assert launches(write) == 2  # `across` first, then the write
    np.testing.assert_array_equal(apart.get(), host[:3] * 2)
    np.testing.assert_array_equal(across.get(), host[4:7] * 2)
    host[5:] = 7.0
    np.testing.assert_array_equal(a.get(), host)


def test_statements_differing_in_offsets_share_one_kernel_object(device, monkeypatch):
    """Each offset is a launch plan of its own; they share the compiled kernel's
    kernel object (making one costs pyopencl a disk-cache look-up), and each launch
    sees its own offsets although the object was last set up for another plan."""
    import pyopencl as cl

    made = []
    original = cl.Kernel

    def counting(program, name):
        if not name.startswith("_"):  # (pyopencl's own probes of attribute names)
            made.append(name)
        return original(program, name)
    monkeypatch.setattr(cl, "Kernel", counting)
    host = np.zeros(40)
    a = fl.asarray(host, device=device)
    for i in range(1, 40):
        a[i] = a[i - 1] + i
        host[i] = host[i - 1] + i
    np.testing.assert_array_equal(a.get(), host)
    assert len(made) <= 2  # (one kernel, or two where index widths differ)
