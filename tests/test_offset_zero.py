"""A view's offset is a kernel parameter at 0 too: a loop over ``a[i]`` builds its kernels
on its first iteration and reuses them at every later one."""

from __future__ import annotations

import re

import numpy as np

import fuseloop as fl

# one shape for every test here (their kernels are shared)
ROWS, COLS = 8, 6


def _built(stats: dict) -> tuple[int, int]:
    """Kernels generated, and programs the memory cache did not hold (a kernel the disk
    cache held from an earlier run counts there, not as generated)."""
    return stats["kernels_lowered"], stats["memory_cache_misses"]


def _loop(step, count: int = 3) -> list[tuple[int, int]]:
    """``step(i)`` for ``i`` in ``range(count)`` on empty memory caches; the kernels built
    after each step."""
    fl.clear_caches()
    fl.reset_stats()
    after = []
    for i in range(count):
        step(i)
        after.append(_built(fl.stats()))
    return after


def _once(after: list[tuple[int, int]]) -> None:
    """Every kernel was built at the first step: none at a later offset."""
    assert after[0][1] >= 1, after  # (the first step built or loaded something)
    assert all(a == after[0] for a in after[1:]), after


def test_rows_read_at_every_offset_share_a_kernel(device_path):
    a = np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS)
    A = fl.asarray(a)
    got = []
    after = _loop(lambda i: got.append((A[i] * 2.0 + 1.0).get()))
    _once(after)
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, a[i] * 2.0 + 1.0)


def test_columns_read_at_every_offset_share_a_kernel(device_path):
    a = np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS)
    A = fl.asarray(a)
    got = []
    after = _loop(lambda j: got.append((A[:, j] * 3.0 - A[:, j + 1]).get()))
    _once(after)
    for j, g in enumerate(got):
        np.testing.assert_allclose(g, a[:, j] * 3.0 - a[:, j + 1])


def test_element_targets_share_a_kernel(device_path):
    a = np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS)
    A = fl.asarray(a)

    def step(k: int) -> None:
        i, j = ((0, 0), (0, 1), (1, 0), (2, 2))[k]  # (offset 0 first)
        A[i, j] = A[i, j] * 0.5 + A[i + 1, j]
        a[i, j] = a[i, j] * 0.5 + a[i + 1, j]

    _once(_loop(step, 4))
    np.testing.assert_allclose(A.get(), a)


def test_slice_targets_share_a_kernel(device_path):
    x = np.arange(ROWS * COLS, dtype=np.float64)
    X = fl.asarray(x)

    def step(i: int) -> None:
        X[i:i + 5] = X[i:i + 5] * 2.0 + X[i + 10:i + 15]
        x[i:i + 5] = x[i:i + 5] * 2.0 + x[i + 10:i + 15]

    _once(_loop(step))
    np.testing.assert_allclose(X.get(), x)


def test_moving_rows_into_a_matrix_share_a_kernel(device_path):
    # a row written from the row before it (a recurrence, as NPBench's loops are)
    a = np.linspace(0.0, 1.0, ROWS * COLS).reshape(ROWS, COLS)
    A = fl.asarray(a)

    def step(i: int) -> None:
        A[i + 1] = A[i + 1] - A[i] * 0.25
        a[i + 1] = a[i + 1] - a[i] * 0.25

    _once(_loop(step, 4))
    np.testing.assert_allclose(A.get(), a)


def test_views_starting_together_share_a_kernel(device_path):
    # A[1, j] and A[1, 0:3] start at one place at j == 0 only (as lu's A[i, j] and
    # A[i, :j]): each view has its offset's parameter, so that is no other program
    a = np.linspace(0.0, 1.0, ROWS * COLS).reshape(ROWS, COLS)
    A = fl.asarray(a)

    def step(j: int) -> None:
        A[1, j] = A[1, j] - A[1, 0:3].sum() * 0.125
        a[1, j] = a[1, j] - a[1, 0:3].sum() * 0.125

    _once(_loop(step))
    np.testing.assert_allclose(A.get(), a)


def _offset_reads(source: str) -> list[str]:
    """The loads of ``in0`` whose address adds an integer parameter (``p<k>``)."""
    return re.findall(r"in0\[[^\]]*\bp\d+\b[^\]]*\]", source)


def test_whole_arrays_have_no_offset_parameter(device_path):
    a = np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS)
    A = fl.asarray(a)
    assert _offset_reads(fl.show_code(A * 2.0 + 1.0)) == []
    # a view at offset 0 reads through its offset's parameter, as at any other offset
    assert _offset_reads(fl.show_code(A[0] * 2.0 + 1.0))
    assert fl.show_code(A[0] * 2.0 + 1.0) == fl.show_code(A[3] * 2.0 + 1.0)
    # a whole buffer viewed whole (a slice of everything, a reshape) is the plain leaf
    assert _offset_reads(fl.show_code(A[:, :].reshape(-1) * 2.0 + 1.0)) == []


def test_views_at_offset_zero_are_not_whole(device_path):
    a = np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS)
    A = fl.asarray(a)
    assert A.is_contiguous and A[:, :].is_contiguous
    assert not A[0].is_contiguous and not A[0:2].is_contiguous and not A[0, 0].is_contiguous
    assert A[0].get().tolist() == a[0].tolist() and A[0:2].get().tolist() == a[0:2].tolist()
