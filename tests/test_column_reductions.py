"""Column-like reductions (reduced axes other than the contiguous one) and epilogues.

Against numpy in float32, float64 and int32 over shapes that are not multiples
of any block size; the CPU recipe's and the GPU recipe's kernels (the latter
on the CPU device, see test_gpu_recipes_on_cpu.py), with and without the split
of the reduced axis across work-groups; the generated code's loop order; the
launch counts of split reductions and of scalar epilogues on full reductions.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop import evaluate, splits
from fuseloop.recipes import cpu_rows, gpu_coalesced
from fuseloop.recipes.rows import make_gpu_rows
from fuseloop.splits import column_params

DTYPES = [np.float32, np.float64, np.int32]
# (shape, axis, keepdims): axis 0 of 2-D, middle axes of 3-D and 4-D, several axes
CASES = [
    ((37, 5), 0, False),
    ((300, 257), 0, False),
    ((1001, 3), 0, True),
    ((129, 513), 0, False),
    ((2, 700, 3), 1, False),
    ((9, 130, 33), 1, True),
    ((5, 6, 7), (0, 1), False),
    ((17, 4, 300), (0, 1), True),
    ((3, 50, 4, 9), (1, 2), False),
    ((40, 3, 70), (0, 2), False),
    ((4097, 2), 0, False),
]


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


def _check_all(shape, axis, keepdims, dtype):
    h = _data(shape, dtype)
    x = fl.asarray(h)
    kw = dict(axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(x.max(**kw).get(), h.max(**kw))
    np.testing.assert_array_equal(x.min(**kw).get(), h.min(**kw))
    if np.dtype(dtype).kind == "i":
        np.testing.assert_array_equal(x.sum(**kw).get(), h.sum(**kw))
        return
    np.testing.assert_allclose(x.sum(**kw).get(), h.sum(**kw), **_tol(dtype))
    np.testing.assert_allclose(x.mean(**kw).get(), h.mean(**kw), **_tol(dtype))
    # a reduction nested in a column reduction: the column variance
    m = x.mean(axis=axis, keepdims=True)
    got = ((x - m) ** 2).mean(**kw).get()
    np.testing.assert_allclose(got, h.var(**kw), **_tol(dtype))
    # several reductions of one input in one expression
    got = (x.sum(**kw) - 2 * x.max(**kw) + x.min(**kw)).get()
    want = h.sum(**kw) - 2 * h.max(**kw) + h.min(**kw)
    np.testing.assert_allclose(got, want, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis,keepdims", CASES)
def test_column_reductions_match_numpy(device, shape, axis, keepdims, dtype):
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("no float64 on this device")
    _check_all(shape, axis, keepdims, dtype)


@pytest.fixture
def split_everywhere(restore_recipes):
    """The CPU recipe asking for many work-items: every column reduction big enough splits."""
    fl.register_recipe("cpu", cpu_rows.with_params(column_items=4096),
                       name="test-cpu-rows-split", kind="reduction")
    with fl.device("cpu"):
        yield


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis,keepdims", CASES)
def test_split_column_reductions_match_numpy(split_everywhere, shape, axis, keepdims, dtype):
    _check_all(shape, axis, keepdims, dtype)


@pytest.fixture(params=[256, 64])
def gpu_rows_on_cpu(request, restore_recipes):
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    fl.register_recipe("cpu", make_gpu_rows(request.param), name="test-gpu-rows",
                       kind="reduction")
    with fl.device("cpu"):
        yield


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis,keepdims", CASES)
def test_gpu_recipe_column_reductions(gpu_rows_on_cpu, shape, axis, keepdims, dtype):
    _check_all(shape, axis, keepdims, dtype)


# reductions used by every element of their column: the rows of the kernel are columns
CENTRED = [((37, 5), 0), ((300, 257), 0), ((9, 130, 33), 1), ((4, 5, 600), 0),
           ((2, 700, 3), (0, 1))]


def _check_centred(shape, axis, dtype):
    h = _data(shape, dtype)
    x = fl.asarray(h)
    tol = _tol(dtype)
    np.testing.assert_allclose((x - x.mean(axis=axis, keepdims=True)).get(),
                               h - h.mean(axis=axis, keepdims=True), **tol)
    e = fl.exp(x - x.max(axis=axis, keepdims=True))
    got = (e / e.sum(axis=axis, keepdims=True)).get()
    eh = np.exp(h - h.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(got, eh / eh.sum(axis=axis, keepdims=True), **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis", CENTRED)
def test_columns_as_rows_match_numpy(device, shape, axis, dtype):
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("no float64 on this device")
    _check_centred(shape, axis, dtype)


@pytest.mark.parametrize("shape,axis", CENTRED)
def test_gpu_recipe_columns_as_rows(gpu_rows_on_cpu, shape, axis):
    _check_centred(shape, axis, np.float32)


def test_columns_as_rows_kernel_is_contiguous_across_columns(cpu, restore_recipes):
    """``x - x.mean(axis=0)`` on the CPU: a block of columns per work-item, the loop
    down the columns outside, the block's contiguous loop inside (it walked each
    column on its own before)."""
    fl.register_recipe("cpu", cpu_rows.with_params(column_width=64), name="test-cols-64",
                       kind="reduction")
    x = fl.asarray(_data((500, 300), np.float32))
    src = _kernel_source(x - x.mean(axis=0))
    bulk = src[src.index("bulk slab"):src.index("final slab")]
    assert bulk.index("for (long e") < bulk.index("for (long i_inner", bulk.index("for (long e"))
    assert re.search(r"in0\[i_inner \+ gid\(0\) \* 64 \+ p\d+ \* e\]", bulk), bulk


def test_few_columns_split_in_two_stages(cpu):
    """Few outputs: the reduced axis is split across work-items, then combined."""
    h = _data((1 << 16, 8), np.float32)
    x = fl.asarray(h)
    assert evaluate.two_stage_split([x.sum(axis=0)._node], (8,), cpu).columns
    assert launches(lambda: x.sum(axis=0).get(), warm=True) == 2
    np.testing.assert_allclose(x.sum(axis=0).get(), h.sum(axis=0), rtol=1e-4)
    # enough outputs for the device's compute units: one kernel
    width, per_unit = column_params(cpu)
    n_out = max(4096, width * per_unit * cpu.compute_units)
    y = fl.asarray(_data((512, n_out), np.float32))
    assert evaluate.two_stage_split([y.sum(axis=0)._node], (n_out,), cpu) is None
    assert launches(lambda: y.sum(axis=0).get(), warm=True) == 1
    # a transposed input's reduced axis is contiguous: not column-like
    t = fl.asarray(_data((8, 1 << 16), np.float32)).T
    split = evaluate.two_stage_split([t.sum(axis=0)._node], (8,), cpu)
    assert split is not None and not split.columns


def test_transposed_matmul_stays_a_contraction():
    """``a.T @ b`` reads both operands across rows along the reduced axis, like a column
    reduction to two axes: it must still be found as a contraction (tiled recipes)."""
    from fuseloop.expr.program import linearize

    a = fl.asarray(_data((96, 80), np.float32))
    b = fl.asarray(_data((96, 70), np.float32))
    program, _ = linearize([(a.T @ b)._node], (80, 70), cache=False)
    assert program.contraction is not None and program.row_dims is None
    # and a column-like reduction to two axes that is no contraction gets rows
    x = fl.asarray(_data((6, 50, 40), np.float32))
    program, _ = linearize([x.sum(axis=1)._node], (6, 40), cache=False)
    assert program.contraction is None and program.row_dims == (0,)


def test_nested_reduction_runs_once_before_a_split(split_everywhere):
    """The column mean inside a split variance runs first (two stages of its own),
    not once per piece."""
    h = _data((3000, 40), np.float64)
    x = fl.asarray(h)
    assert launches(lambda: ((x - x.mean(axis=0)) ** 2).mean(axis=0).get(), warm=True) == 4
    np.testing.assert_allclose(((x - x.mean(axis=0)) ** 2).mean(axis=0).get(), h.var(axis=0),
                               rtol=1e-10)


def _kernel_source(expr):
    return fl.show_code(expr)


def test_cpu_column_kernel_walks_rows_inside(cpu, restore_recipes):
    """The CPU kernel of a column sum: the reduced axis outside, the block of
    neighbouring outputs inside (unit stride), not one strided column per output."""
    fl.register_recipe("cpu", cpu_rows.with_params(column_width=64), name="test-cols-64",
                       kind="reduction")
    # enough blocks of 64 outputs for every compute unit (no split), and a partial one
    blocks = max(10, column_params(cpu)[1] * cpu.compute_units)
    x = fl.asarray(_data((1000, 64 * blocks + 60), np.float32))
    src = _kernel_source(x.sum(axis=0))
    bulk = src[src.index("bulk slab"):src.index("final slab")]
    # the reduction loop encloses the loop over the block of outputs
    assert bulk.index("for (long j0") < bulk.index("for (long i_inner", bulk.index("for (long j0"))
    # unit stride along the block, the row stride along the reduced axis
    assert re.search(r"in0\[p\d+ \* j0 \+ i_inner \+ gid\(0\) \* 64\]", bulk), bulk
    assert "acc_j0[64]" in src


def test_middle_axis_kernel_has_no_division_per_element(cpu, restore_recipes):
    """A middle axis: rows of the last axis (the grid's second axis numbers them), so
    the loads of a row's block are contiguous without a division per element."""
    fl.register_recipe("cpu", cpu_rows.with_params(column_width=64), name="test-cols-64",
                       kind="reduction")
    h = _data((9, 130, 300), np.float32)
    x = fl.asarray(h)
    src = _kernel_source(x.sum(axis=1))
    loads = [line for line in src.splitlines() if "acc_j0[e_inner] + in0[" in line]
    assert loads, src
    for line in loads:
        assert "fl_idx_div" not in line and "fl_idx_mod" not in line, line
        assert re.search(r"in0\[p\d+ \* gid\(1\) \+ p\d+ \* j0 \+ e_inner \+ gid\(0\) \* 64\]",
                         line), line
    np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_gpu_column_kernel_is_coalesced(gpu_rows_on_cpu):
    """The GPU kernel of a column sum: neighbouring work-items, neighbouring outputs."""
    x = fl.asarray(_data((100, 3000), np.float32))
    src = _kernel_source(x.sum(axis=0))
    assert "fuseloop_cols" in src
    assert re.search(r"in0\[p\d+ \* j0 \+ lid\(0\) \+ gid\(0\) \* \d+\]", src), src
    # a middle axis: a row per group of the second grid axis, work-items along the last
    src = _kernel_source(fl.asarray(_data((5, 100, 300), np.float32)).sum(axis=1))
    assert re.search(r"in0\[p\d+ \* gid\(1\) \+ p\d+ \* j0 \+ lid\(0\) \+ gid\(0\) \* \d+\]",
                     src), src


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scalar_epilogue_costs_no_launch(device, dtype):
    """A scalar epilogue on a full reduction runs in its last stage: as many launches
    as the plain sum."""
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("no float64 on this device")
    n = (1 << 20) + 3
    a, b = fl.asarray(_data(n, dtype, 1)), fl.asarray(_data(n, dtype, 2))
    ah, bh = a.get(), b.get()
    plain = launches(lambda: fl.sum(a * b).get(), warm=True)
    assert plain == (1 if splits.ONE_LAUNCH else 2)  # two stages: in one launch, or two
    for make in (lambda: fl.sum(a * b) ** 0.5, lambda: fl.sqrt(fl.sum((a - 2 * b) ** 2)),
                 lambda: fl.mean(a), lambda: fl.linalg.norm(a), lambda: 2 * a.sum() + 1):
        assert launches(lambda make=make: make().get(), warm=True) == plain
    tol = _tol(dtype) | dict(rtol=1e-4 if dtype == np.float32 else 1e-10)
    np.testing.assert_allclose((fl.sum((a - 2 * b) ** 2) ** 0.5).get(),
                               np.sum((ah - 2 * bh) ** 2) ** 0.5, **tol)
    np.testing.assert_allclose(fl.linalg.norm(a).get(), np.linalg.norm(ah), **tol)


@pytest.fixture
def gpu_rows_split(restore_recipes):
    """The GPU recipes on the CPU device, asking for as many work-items as a large GPU
    (4096 per compute unit of the CPU's few): column reductions big enough split."""
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    fl.register_recipe("cpu", make_gpu_rows().with_params(column_items=4096),
                       name="test-gpu-rows-split", kind="reduction")
    with fl.device("cpu") as dev:
        yield dev


# narrow outputs along a row (fewer than column_group) over long reduced axes, odd
# lengths: 2-D columns, middle axes, several axes; and a row of 130 outputs (not narrow)
NARROW = [((5001, 5), 0, False), ((3, 4001, 7), 1, False), ((20, 701, 33), (0, 1), True),
          ((6001, 64), 0, False), ((2, 3001, 130), 1, False)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,axis,keepdims", NARROW)
def test_gpu_narrow_column_splits_match_numpy(gpu_rows_split, shape, axis, keepdims, dtype):
    if dtype == np.float64 and not gpu_rows_split.has_fp64:
        pytest.skip("no float64 on this device")
    _check_all(shape, axis, keepdims, dtype)


def test_gpu_narrow_split_counts_its_slices(gpu_rows_split):
    """64 outputs: a group of 64 outputs by 8 slices of the reduced axis (the rule:
    max(group, column_group) / 64), so the split needs 8x fewer pieces than a
    work-item per output and piece would."""
    dev = gpu_rows_split
    x = fl.asarray(_data((1 << 16, 64), np.float32))
    split = evaluate.two_stage_split([x.sum(axis=0)._node], (64,), dev)
    assert split is not None and split.columns
    want = 4096 * dev.compute_units
    assert split.pieces == min(-(-want // (64 * 8)), (1 << 16) // (64 * 8))
    src = _kernel_source(x.sum(axis=0))
    first = src[:src.index("__kernel", src.index("__kernel") + 1)]
    assert "reqd_work_group_size(64, 8, 1)" in first, first
    # each slice walks every 8th row of its piece (the piece is the group's second axis)
    assert re.search(r"in0\[p\d+ \* \(gid\(1\) \* p\d+ \+ lid\(1\) \+ j0_outer \* 8\) "
                     r"\+ lid\(0\) \+ gid\(0\) \* 64\]", first), first


@pytest.mark.parametrize("shape", [(3000, 40), (4096, 300)])
def test_nested_column_mean_folds_into_the_split(gpu_rows_split, shape):
    """The column mean inside a split column variance runs its first stage only; every
    piece of the variance combines the mean's partials itself: 3 launches, not 4."""
    h = _data(shape, np.float64)
    x = fl.asarray(h)
    inner = evaluate.two_stage_split([x.sum(axis=0)._node], (shape[1],), gpu_rows_split)
    outer = evaluate.two_stage_split([((x - x.mean(axis=0)) ** 2).sum(axis=0)._node],
                                     (shape[1],), gpu_rows_split)
    assert splits.folds_into(inner, outer)
    assert launches(lambda: ((x - x.mean(axis=0)) ** 2).mean(axis=0).get(), warm=True) == 3
    np.testing.assert_allclose(((x - x.mean(axis=0)) ** 2).mean(axis=0).get(),
                               h.var(axis=0), rtol=1e-10)
    # batch-norm statistics: the mean, and the variance around it, in one evaluation
    assert launches(lambda: fl.compute(x.mean(axis=0),
                                       ((x - x.mean(axis=0)) ** 2).mean(axis=0))[1].get(),
                    warm=True) == 3
    m, v = fl.compute(x.mean(axis=0), ((x - x.mean(axis=0)) ** 2).mean(axis=0))
    np.testing.assert_allclose(m.get(), h.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(v.get(), h.var(axis=0), rtol=1e-10)
