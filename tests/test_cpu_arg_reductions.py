"""Arg-reductions and max/min over contiguous rows in the CPU reduction recipe.

``cpu_rows`` gives a row's ``max``/``min`` (an argmax's two passes among them)
more interleaved accumulators than a sum, addresses the rows with 64-bit loop
indices (so the compiler makes vector loads of neighbouring accumulators'
elements) and NaN tests are ``a != a`` rather than a call per element.  Results
against numpy (first index of the extreme; NaN wins, the first NaN's index) at
row lengths around the accumulator count, and the code PoCL gets: a max/min's
accumulator lanes a loop on 4-byte elements where they fill a vector of 8 (one
statement per lane on 8-byte ones).  A reduction
over the trailing axis and others not next to it (axes ``(0, 2)``) runs in two steps:
the trailing axis first, or one other axis first where it shrinks the array enough.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.expr.nodes import Reduce
from fuseloop.ops.reductions import COLUMNS_FIRST_MIN, ROWS_FIRST_MIN
from fuseloop.recipes.rows import (
    CPU_ACCUMULATORS,
    CPU_SELECT_ACCUMULATORS,
    CPU_SELECT_MIN,
    CPU_SELECT_STEPS,
    CPU_SHORT_ROWS,
)

# (rows, length): short of the accumulators, long with a partial block
# row lengths in the first and last short-row size classes, not multiples of the
# accumulators
SHORT_LENGTHS = (CPU_SHORT_ROWS[0] - 1, CPU_SHORT_ROWS[-1] - 5)
SHAPES = [(3, CPU_SELECT_ACCUMULATORS - 1), (4, 1003)]


def _with_specials(shape: tuple[int, int], dtype: type, seed: int) -> np.ndarray:
    """Values with repeats (ties), a row of one value, and NaNs in some rows."""
    rng = np.random.default_rng(seed)
    h = rng.integers(-5, 6, shape).astype(dtype)
    h[0] = 2  # every element ties
    if np.dtype(dtype).kind == "f":
        n = shape[1]
        h[1, [n // 2, n - 1]] = np.nan  # two NaNs: the first one's index
        h[-1, n - 1] = np.nan  # the last element alone
    return h


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_row_arg_reductions_match_numpy(cpu, dtype):
    for k, shape in enumerate(SHAPES):
        h = _with_specials(shape, dtype, k)
        x = fl.asarray(h)
        for op in ("argmax", "argmin", "max", "min"):
            got = getattr(x, op)(axis=1).get()
            want = getattr(h, op)(axis=1)
            assert got.dtype == want.dtype, (op, shape)
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {shape} {dtype}")


def test_whole_array_arg_reductions_match_numpy(cpu):
    # long enough to be reduced in pieces (two stages); the max ties at the end too
    h = _with_specials((7, 10007), np.float32, 9).ravel()
    for nan in (False, True):
        if not nan:
            h = np.where(np.isnan(h), 0, h).astype(np.float32)
        x = fl.asarray(h)
        assert int(x.argmax()) == h.argmax() and int(x.argmin()) == h.argmin(), nan
        np.testing.assert_array_equal(float(x.max()), h.max())


def test_row_max_gets_select_accumulators_and_wide_indices(pocl):
    x = fl.asarray(np.zeros((4, 4096), np.float32))
    code = fl.show_code(x.max(axis=1))
    assert f"acc_j0_outer[{CPU_SELECT_ACCUMULATORS}]" in code
    assert "for (long j0_outer" in code
    # a sum keeps the default count (each step is one add)
    assert "acc_j0_outer[8]" in fl.show_code(x.sum(axis=1))


def test_short_rows_get_fewer_select_accumulators(pocl):
    # a size class bounds a short row's length: a max/min accumulator per
    # CPU_SELECT_STEPS elements of the bound (at least CPU_SELECT_MIN), both passes
    # of an argmax (the index pass at most CPU_ACCUMULATORS); rows longer than every
    # bound keep the full count
    for length in (*SHORT_LENGTHS, CPU_SHORT_ROWS[-1] + 1):
        bound = next((b for b in CPU_SHORT_ROWS if length <= b), None)
        want = CPU_SELECT_ACCUMULATORS if bound is None else min(
            CPU_SELECT_ACCUMULATORS, max(CPU_SELECT_MIN, bound // CPU_SELECT_STEPS))
        x = fl.asarray(np.zeros((64, length), np.float32))
        code = fl.show_code(x.argmax(axis=1))
        counts = set(re.findall(r"float acc_j\d_outer\[(\d+)\];", code))
        assert counts == {str(want)}, (length, counts)
        index = min(want, CPU_ACCUMULATORS)
        assert f"int acc_j0_outer[{index}];" in code or f"int acc_j1_outer[{index}];" in code
    assert CPU_SELECT_MIN < CPU_SELECT_ACCUMULATORS


def test_short_row_arg_reductions_match_numpy(cpu):
    for k, length in enumerate(SHORT_LENGTHS):
        h = _with_specials((37, length), np.float32, 20 + k)
        h[5] = np.arange(length, dtype=np.float32)  # the largest last, the smallest first
        h[6] = -0.0
        h[6, 3:] = 0.0  # -0.0 ties with 0.0: the first
        h[7, [2, length - 1]] = np.inf
        h[7, [4, length - 2]] = -np.inf
        x = fl.asarray(h)
        for op in ("argmax", "argmin", "max", "min"):
            np.testing.assert_array_equal(getattr(x, op)(axis=1).get(),
                                          getattr(h, op)(axis=1), err_msg=f"{op} {length}")


def test_float_index_pass_compares_once(pocl):
    # the index pass tests ``x >= best`` (argmin: ``<=``) or NaN: best is NaN only
    # when an element is, and then no compare with it holds
    x = fl.asarray(np.zeros((4, 4096), np.float32))
    for op in ("argmax", "argmin"):
        code = fl.show_code(getattr(x, op)(axis=1))
        assert "fl_equal_f32" not in code and "fl_bitwise_and" not in code, op


def test_nan_tests_are_not_calls(pocl):
    x = fl.asarray(np.zeros((4, 4096), np.float32))
    code = fl.show_code(x.argmax(axis=1))
    assert "isnan(" not in code.replace("fl_isnan", "")


def test_trailing_axis_is_reduced_first(cpu, fresh_stats):
    # (axes 0 and 2 of a 3-D array: one loop over both divided its index per element)
    shape = (5, 211, 64)
    assert np.prod(shape) >= ROWS_FIRST_MIN
    h = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    h[3, 7, 9] = np.nan
    x = fl.asarray(h)
    # no index division inside a reduction's loop (the row's own, once per row, is fine)
    assert not re.search(r"fl_idx_(div|mod)\(\(int\) \([^)]*j\d", fl.show_code(x.sum(axis=(0, 2))))
    fl.reset_stats()
    np.testing.assert_allclose(x.sum(axis=(0, 2)).get(),
                               h.astype(np.float64).sum(axis=(0, 2)), rtol=1e-5, atol=1e-4)
    assert fresh_stats()["kernels_launched"] == 2
    np.testing.assert_array_equal(x.max(axis=(0, 2), keepdims=True).get(),
                                  h.max(axis=(0, 2), keepdims=True))
    n = (h > 0).astype(np.int32)
    np.testing.assert_array_equal(fl.asarray(n).sum(axis=(0, 2)).get(), n.sum(axis=(0, 2)))


@pytest.mark.parametrize("shape, axes", [((24, 45, 64), (0, 2)), ((3, 20, 7, 160), (0, 1, 3)),
                                         ((20, 18, 2, 96), (1, 3))])
def test_other_axis_first_where_it_shrinks_the_array(cpu, fresh_stats, shape, axes):
    # the one reduced axis before the trailing one (neighbours merged) goes first (a
    # column walk keeping the trailing run), then the trailing axis of a result at least
    # COLUMNS_FIRST_MIN times smaller; float64, int32 (int64 sums), keepdims
    assert np.prod(shape) >= ROWS_FIRST_MIN
    assert np.prod([shape[d] for d in axes[:-1]]) >= COLUMNS_FIRST_MIN
    rng = np.random.default_rng(7)
    h = rng.standard_normal(shape)
    h.flat[1234] = np.nan
    for data in (h.astype(np.float32), h, rng.integers(-9, 9, shape, dtype=np.int32)):
        x = fl.asarray(data)
        node = x.sum(axis=axes)._node
        assert type(node.child) is Reduce
        assert node.child.shape[-1] == shape[-1]
        fl.reset_stats()
        np.testing.assert_allclose(x.sum(axis=axes).get(), data.sum(axis=axes, dtype=None
                                   if data.dtype.kind == "i" else np.float64),
                                   rtol=1e-5, atol=1e-3)
        assert fresh_stats()["kernels_launched"] == 2
        np.testing.assert_array_equal(x.max(axis=axes, keepdims=True).get(),
                                      data.max(axis=axes, keepdims=True))
        np.testing.assert_array_equal(x.min(axis=axes).get(), data.min(axis=axes))


def test_trailing_axis_first_beside_two_other_axes(cpu):
    # two other reduced axes would be one loop dividing its index: the trailing rows
    # go first, however much the other axes shrink the array
    shape = (8, 3, 8, 6, 64)
    assert np.prod(shape) >= ROWS_FIRST_MIN and 8 * 8 >= COLUMNS_FIRST_MIN
    h = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    x = fl.asarray(h)
    node = x.sum(axis=(0, 2, 4))._node
    assert type(node.child) is Reduce and node.child.shape == shape[:-1]
    np.testing.assert_allclose(x.sum(axis=(0, 2, 4)).get(),
                               h.astype(np.float64).sum(axis=(0, 2, 4)), rtol=1e-5, atol=1e-4)


def test_nan_helpers_match_numpy(cpu):
    # isnan, maximum and minimum test NaN as ``a != a`` (see test_nan_tests_are_not_calls)
    a = np.array([1, np.nan, 3, np.nan, -np.inf, np.inf], np.float32)
    b = np.array([np.nan, 2, 1, np.nan, 0, np.nan], np.float32)
    x, y = fl.asarray(a), fl.asarray(b)
    got = fl.compute(fl.isnan(x), fl.maximum(x, y), fl.minimum(x, y))
    for g, want in zip(got, (np.isnan(a), np.maximum(a, b), np.minimum(a, b)), strict=True):
        np.testing.assert_array_equal(g.get(), want)


def test_lanes_are_a_loop_on_four_byte_rows(pocl):
    # PoCL vectorised a loop over a max/min's accumulator lanes better than the lanes
    # written out (float32/int32 argmax, int32 max), but not on doubles; an argmax's
    # index pass (j0; j1 is the max) has at most CPU_ACCUMULATORS accumulators
    for dtype in (np.float32, np.int32, np.float64):
        code = fl.show_code(fl.asarray(np.zeros((4, 4096), dtype)).argmax(axis=1))
        loops = [f"for (long j{k}_inner = 0; j{k}_inner <= " for k in (0, 1)]
        if np.dtype(dtype).itemsize == 4:
            assert all(loop in code for loop in loops), dtype
        else:
            assert not any(loop in code for loop in loops), dtype
        assert f"int acc_j0_outer[{CPU_ACCUMULATORS}];" in code, dtype
        assert f"acc_j1_outer[{CPU_SELECT_ACCUMULATORS}];" in code, dtype
    # a sum's lanes stay written out (a lane loop gained nothing, and lost on long
    # terms), as do a short row's 4 max accumulators (fewer than a vector of 8)
    assert "for (long j0_inner" not in fl.show_code(
        fl.asarray(np.zeros((4, 4096), np.float32)).sum(axis=1))
    short = fl.show_code(fl.asarray(np.zeros((64, CPU_SHORT_ROWS[0]), np.float32)).max(axis=1))
    assert "float acc_j0_outer[4];" in short and "for (long j0_inner" not in short


@pytest.mark.parametrize("count", [3, 5, 32])
def test_accumulators_combined_as_a_tree_match_numpy(cpu, count):
    """A row's accumulators are combined in halvings (``row_lanes.tree_steps``): any
    count, rows shorter than it (accumulators past the end never set), NaN rows, ties
    and sums (added in another order: to rounding) as numpy."""
    from fuseloop.recipes.row_lanes import tree_steps
    from fuseloop.recipes.rows import cpu_rows

    assert tree_steps(5) == [(2, 3), (1, 2), (1, 1)] and tree_steps(1) == []
    recipe = cpu_rows.with_params(accumulators=min(count, 8), select_accumulators=count,
                                  vector_math=False)
    with fl.recipes.use(recipe):
        for length in (1, 2, count - 1 or 1, count + 2, 1003):
            h = _with_specials((5, length), np.float32, count + length)
            x = fl.asarray(h)
            for op in ("argmax", "argmin", "max", "min"):
                np.testing.assert_array_equal(getattr(x, op)(axis=1).get(),
                                              getattr(h, op)(axis=1),
                                              err_msg=f"{op} {length}")
            clean = np.nan_to_num(h)
            np.testing.assert_allclose(fl.asarray(clean).sum(axis=1).get(),
                                       clean.sum(axis=1), rtol=1e-6)


def test_accumulators_are_combined_in_halvings(pocl):
    x = fl.asarray(np.zeros((4, 4096), np.float32))
    code = fl.show_code(x.max(axis=1))
    half = CPU_SELECT_ACCUMULATORS // 2
    assert f"part_j0[0] = ((part_j0[0] >= part_j0[{half}]" in code
    assert "acc_j0_combine = ((acc_j0_combine >= part_j0[1]" not in code  # no chain


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.uint32, np.bool_])
def test_arg_reductions_of_concrete_arrays_are_numpys_now(host, fresh_stats, dtype):
    """With the host path on, argmax/argmin of a concrete array on the CPU device (up to
    ARG_NOW_MAX elements) are numpy's, computed at once: no kernel, numpy's first index
    of ties and of the first NaN, int64 results of numpy's shapes."""
    h = _with_specials((5, 37), dtype, 3)
    x = fl.asarray(h)
    for op in ("argmax", "argmin"):
        for axis in (None, 0, 1, -1):
            for keepdims in (False, True):
                got = getattr(x, op)(axis=axis, keepdims=keepdims)
                want = getattr(h, op)(axis=axis, keepdims=keepdims)
                assert got.shape == want.shape and got.dtype == np.int64, (op, axis)
                np.testing.assert_array_equal(np.asarray(got.get()), want)
    view = x[1:4]  # (a small view: a HostArray)
    np.testing.assert_array_equal(view.argmax(axis=1).get(), h[1:4].argmax(axis=1))
    assert int(x[1].argmin().get()) == h[1].argmin()
    assert fl.stats()["kernels_launched"] == 0
    assert fl.stats()["host_operations"] == 18


def test_arg_reductions_past_the_limit_or_of_lazy_arrays_launch(host, fresh_stats,
                                                                   monkeypatch):
    """A concrete array past ARG_NOW_MAX elements, or a lazy one (whose arg-reduction
    fuses with its producer), takes the kernels; numpy's errors stay the lazy path's."""
    from fuseloop import host_products

    h = _with_specials((20, 1003), np.float32, 4)  # (past the host path's limit too)
    x = fl.asarray(h)
    monkeypatch.setattr(host_products, "ARG_NOW_MAX", h.size - 1)
    np.testing.assert_array_equal(x.argmax(axis=1).get(), h.argmax(axis=1))
    assert fl.stats()["kernels_launched"] == 1
    monkeypatch.setattr(host_products, "ARG_NOW_MAX", h.size)
    np.testing.assert_array_equal((x * 2).argmin(axis=1).get(), (h * 2).argmin(axis=1))
    assert fl.stats()["kernels_launched"] == 2
    with pytest.raises(fl.errors.AxisError):  # (the lazy path's error, not numpy's)
        x.argmax(axis=2)
    with pytest.raises(ValueError, match="empty"):
        fl.asarray(np.zeros((3, 0), np.float32)).argmin(axis=1)
