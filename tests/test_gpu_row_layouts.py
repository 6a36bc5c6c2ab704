"""The GPU reduction recipe's layouts of contiguous rows, chosen by rule from the extents.

The rule (:mod:`fuseloop.recipes.row_layout`): short rows get a work-item each
(no local memory, no barrier, unrolled when the length is known), many rows
of medium length a slice of a work-group each (rows on the group's second
axis), other rows a whole work-group.  The recipe runs on the CPU device here
(``fl.recipes.use``), so each layout's results are checked against numpy and
its generated code is read for what a GPU needs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes import gpu_rows
from fuseloop.recipes.row_layout import RowRule, row_size_class


def _group_size(src: str) -> tuple[int, ...]:
    sizes = re.findall(r"reqd_work_group_size\((\d+), (\d+), (\d+)\)", src)
    assert len(sizes) == 1, src
    return tuple(int(v) for v in sizes[0])


def _softmax(m, x):
    e = m.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _check_rows(h: np.ndarray) -> None:
    """Softmax (two reductions, one used by the other, and a loop over the row's
    elements) and argmax (a two-valued reduction) over rows, against numpy."""
    x = fl.asarray(h)
    np.testing.assert_allclose(_softmax(fl, x).get(), _softmax(np, h), rtol=1e-12)
    np.testing.assert_array_equal(x.argmax(axis=1).get(), h.argmax(axis=1))


def test_the_rule():
    rule = RowRule(group=512, short_max=32, slice_max=1024, slice_rows=1024, row_items=4)
    assert rule.kind([3], 1 << 24) == "short"
    assert rule.kind([3, 32], 5) == "short"
    assert rule.kind([128], 131072) == "slice"
    assert rule.kind([128], 100) == "group"  # few rows: a group each
    assert RowRule(512, 32, 1024, 1024, 4, short_rows=32).kind([3], 31) == "group"
    assert rule.kind([4096], 4096) == "group"
    assert rule.kind([], 4096) == "group"
    assert [rule.slice_width(p) for p in (33, 128, 129, 1024, 4096)] == [32, 32, 64, 256, 512]
    assert RowRule(512, 32, 1024, 1024, 4, layout="slice").kind([3], 1) == "slice"
    # the rule's choice is a declared parameter, searched by fl.tune
    assert set(gpu_rows.tunable) >= {"layout", "short_max", "slice_max", "row_items", "block"}


def test_growing_rows_make_few_size_classes():
    """A loop over rows that grow by one element (a triangular solve's dot products)
    meets a bounded number of size classes: with many rows one per very short length,
    one for the other short rows, and two per power of two of pieces; with fewer rows
    than ``short_rows`` (a dot product's one) the short lengths, 0 too, share the first
    piece's class."""
    rule = RowRule(group=512, short_max=32, slice_max=1024, slice_rows=1024, row_items=4,
                   short_rows=32)
    many = {row_size_class(rule, 16, [0], [p], 64, 0, False) for p in range(1, 20000)}
    assert len(many) <= 4 + 1 + 2 * 5 + 1, sorted(many)
    assert row_size_class(rule, 16, [0], [3], 64, 0, False) == "N >= 32 and p0 = 3"
    assert row_size_class(rule, 16, [0], [20], 64, 0, False) == "N >= 32 and 5 <= p0 <= 32"
    one = {row_size_class(rule, 16, [0], [p], 1, 0, False) for p in range(0, 20000)}
    assert len(one) <= 2 * 5 + 1, sorted(one)
    assert {row_size_class(rule, 16, [0], [p], 31, 0, False) for p in range(0, 512)} == {
        "0 <= p0 <= 511"}
    # rows of a whole power of two of pieces: no bounds test in the class
    assert row_size_class(rule, 16, [0], [8192], 1, 0, False) == "p0 = 8192"
    assert row_size_class(rule, 16, [0], [3000], 1, 0, False) == "2049 <= p0 <= 4095"
    # every length is inside its class's range (the class may be chosen for it)
    for p in (0, 1, 5, 33, 511, 512, 513, 1023, 1024, 1025, 3000, 8191, 8192):
        for rows in (1, 64):
            cls = row_size_class(rule, 16, [0], [p], rows, 0, False).replace("N >= 32 and ", "")
            lo, _, hi = cls.partition(" <= p0 <= ")
            assert (int(lo) <= p <= int(hi)) if hi else cls in ("", f"p0 = {p}"), (p, cls)


def test_distances_short_rows(restore_recipes):
    """Reductions over 3 (pairwise distances of 3-D points): one work-item per output,
    the 3 terms unrolled; no local memory, no barrier."""
    rng = np.random.default_rng(0)
    ph, qh = rng.random((70, 3), np.float32), rng.random((50, 3), np.float32)
    with fl.device("cpu"), fl.recipes.use(gpu_rows):
        p, q = fl.asarray(ph), fl.asarray(qh)
        d = fl.sqrt(fl.sum((p[:, None, :] - q[None, :, :]) ** 2, axis=-1))
        src = fl.show_code(d)
        want = np.sqrt(((ph[:, None, :] - qh[None, :, :]) ** 2).sum(-1))
        np.testing.assert_allclose(d.get(), want, rtol=1e-6)
    assert "barrier" not in src and "__local" not in src, src
    assert _group_size(src) == (256, 1, 1)
    assert not re.search(r"for \(int j0", src), src  # unrolled


@pytest.mark.parametrize("params, shape", [
    ({}, (77, 5)),  # the rule: short
    ({"layout": "short", "short_outputs": 2}, (301, 40)),  # forced, a loop, 2 rows each
])
def test_short_rows_values(restore_recipes, params, shape):
    h = np.random.default_rng(1).standard_normal(shape)
    with fl.device("cpu"), fl.recipes.use(gpu_rows.with_params(**params)):
        _check_rows(h)
        src = fl.show_code(fl.asarray(h).sum(axis=1))
    assert "barrier" not in src and "__local" not in src, src


def test_slice_rows(restore_recipes):
    """Many rows of 100: 32 work-items per row, 8 rows to a work-group (1030 rows: the
    last group has rows past the end), each row's partial results in its own slot."""
    h = np.random.default_rng(2).standard_normal((1030, 100))
    with fl.device("cpu"), fl.recipes.use(gpu_rows.with_params(slice_rows=512)):
        _check_rows(h)
        x = fl.asarray(h)
        src = fl.show_code(_softmax(fl, x))
        few = fl.show_code(fl.asarray(h[:100]).sum(axis=1))
    assert _group_size(src) == (32, 8, 1)
    # the max and the sum: each combined across the slice behind a barrier
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE)") == 2, src
    assert re.search(r"__local double lanes_t\d+\[32 \* 8\]", src), src
    assert _group_size(few) == (512, 1, 1)  # 100 rows: fewer than slice_rows
    # (the size class states the rows' length for the slice layout without the cache too)
    with fl.device("cpu"), fl.recipes.use(gpu_rows.with_params(slice_rows=512, cache_items=0)):
        x = fl.asarray(h)
        np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1), rtol=1e-12)
        assert _group_size(fl.show_code(x.sum(axis=1))) == (32, 8, 1)


def test_group_rows_unchanged(restore_recipes):
    """Rows longer than ``slice_max`` keep a work-group of ``group`` each."""
    h = np.random.default_rng(3).standard_normal((1100, 1500)).astype(np.float32)
    with fl.device("cpu"), fl.recipes.use(gpu_rows.with_params(slice_max=1024)):
        x = fl.asarray(h)
        np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1), rtol=1e-4)
        src = fl.show_code(x.sum(axis=1))
    assert _group_size(src) == (512, 1, 1)


def test_few_columns_split(restore_recipes):
    """Batch-norm statistics over 40 columns, split across work-groups: the first
    stage's work-groups are 64 columns (not 128, 88 past the end) by slices of a piece,
    the nested mean's partials are summed first (folded into the split), and the
    mean's and the variance's partial sums walk the piece's rows together."""
    h = np.random.default_rng(4).standard_normal((3000, 40)).astype(np.float32)
    with fl.device("cpu"), fl.recipes.use(gpu_rows.with_params(column_items=4096)):
        x = fl.asarray(h)
        mean, var = fl.mean(x, axis=0), fl.mean((x - fl.mean(x, axis=0)) ** 2, axis=0)
        src = fl.show_code(mean, var)
        got = fl.compute(mean, var)
    np.testing.assert_allclose(got[0].get(), h.mean(axis=0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got[1].get(), h.var(axis=0), rtol=1e-4)
    kernels = src.split("/* kernel ")[1:]
    first = [k for k in kernels if "out1" in k and "NE" in k]
    assert len(first) == 1, src
    assert "lid(1)" in first[0] and "* 64" in first[0], first[0]
    # one loop over the piece's rows (in0), both sums in it; the folded mean's partials
    # (in1) in a loop of their own
    loops = re.split(r"for \(int j\d+\w* = 0", first[0])[1:]
    walking = [body for body in loops if "in0[" in body]
    assert len(walking) == 1 and walking[0].count("in0[") == 2, first[0]
    assert any("in1[" in body for body in loops), first[0]


def test_few_outputs_split_in_group(restore_recipes):
    """40 column sums over 3000 rows, not split across work-groups: a work-group is
    64 outputs by 8 slices of the rows, combined in local memory; one slice stores."""
    h = np.random.default_rng(5).standard_normal((3000, 40))
    with fl.device("cpu"), fl.recipes.use(gpu_rows.with_params(column_items=1)):
        x = fl.asarray(h)
        src = fl.show_code(x.max(axis=0))
        np.testing.assert_array_equal(x.max(axis=0).get(), h.max(axis=0))
        np.testing.assert_allclose(x.var(axis=0).get(), h.var(axis=0), rtol=1e-10)
    assert _group_size(src) == (64, 8, 1)
    assert "barrier(CLK_LOCAL_MEM_FENCE)" in src and "lid(1) == 0" in src, src
