"""Elementwise kernels of several axes in rows on the CPU (``row_loops``,
``expr.program.with_row_loops``): per-row work once per row, the inner loop along
the last axis with no division in its addresses."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes import cpu_chunked

RNG = np.random.default_rng(7)


def _body(source: str) -> str:
    """The kernel's body (the helpers' definitions above it name fl_idx_div too)."""
    return source[source.index("__kernel"):]


def _inner_loop(body: str) -> str:
    """The loop along a row's elements (``e``): from its ``for`` to its closing brace
    (after it, the kernel's end stores a gather's error flag once per work-item)."""
    at = re.search(r"for \(\w+ e(_inner)? = ", body)
    assert at is not None, body
    depth, end = 0, len(body)
    for k in range(at.start(), len(body)):
        if body[k] == "{":
            depth += 1
        elif body[k] == "}":
            depth -= 1
            if depth == 0:
                end = k + 1
                break
    return body[at.start():end]


def test_gathered_rows_index_once_per_row(cpu):
    x_h = RNG.random((300, 100))
    idx_h = RNG.integers(-300, 300, 500).astype(np.int32)
    x, idx = fl.asarray(x_h), fl.asarray(idx_h)
    body = _body(fl.show_code(fl.take(x, idx, axis=0)))
    inner = _inner_loop(body)
    # the index is read and checked before the row's loop, not per element
    assert "in0[" not in inner and "err[" not in inner, body
    assert "fl_idx_div" not in body and "fl_idx_mod" not in body, body
    np.testing.assert_array_equal(fl.take(x, idx, axis=0).get(), x_h.take(idx_h, axis=0))


def test_slices_of_a_cube_divide_per_row(cpu):
    c_h = RNG.random((9, 10, 11)).astype(np.float32)
    c = fl.asarray(c_h)
    expr = c[1:-1, 1:-1, 2:] - 2 * c[:-2, 2:, :-2] + c[2:, :-2, 1:-1]
    body = _body(fl.show_code(expr))
    # the two outer axes are the rows: only the row's number is divided (a value the
    # element loop does not change), never a position along the row
    divided = re.findall(r"fl_idx_(?:div|mod)\(([^,]*),", body)
    assert divided and not any(re.search(r"\be\b", a) for a in divided), body
    want = c_h[1:-1, 1:-1, 2:] - 2 * c_h[:-2, 2:, :-2] + c_h[2:, :-2, 1:-1]
    np.testing.assert_allclose(expr.get(), want, rtol=1e-6)


CASES = {
    "transpose": (lambda m, a, b: m.T * 2 + a[:1, :].T, (6, 5)),
    "outer": (lambda m, a, b: a[:, :1] * b[:1, :], (7, 33)),
    "short rows": (lambda m, a, b: m[:, 1:] + m[:, :-1], (50, 5)),
    "each class": (lambda m, a, b: m[1:, ::2] - a[:-1, 1::2], (40, 130)),
    "long rows": (lambda m, a, b: m[:, 3:] * m[:, :-3], (3, 9000)),
    "unit axis": (lambda m, a, b: (m[:, None, 1:] + b[:, None, :-1]), (4, 20)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("case", list(CASES))
def test_row_loops_match_numpy(cpu, case, dtype):
    f, shape = CASES[case]
    h = [(RNG.random(shape) * 100).astype(dtype) for _ in range(3)]
    got = f(*(fl.asarray(a) for a in h)).get()
    np.testing.assert_array_equal(got, f(*h))


def test_several_outputs_in_rows(cpu):
    h = RNG.random((70, 90))
    a = fl.asarray(h)
    p, q = fl.compute(a.T + 1, fl.sin(a.T) * 3)
    np.testing.assert_allclose(p.get(), h.T + 1)
    np.testing.assert_allclose(q.get(), np.sin(h.T) * 3, rtol=1e-12)


def test_row_lengths_of_one_class_share_a_kernel(cpu):
    fl.clear_caches()
    fl.reset_stats()
    for cols in (20, 33, 64):  # one size class: rows of at most 64
        h = RNG.random((30, cols)).astype(np.float32)
        idx = RNG.integers(0, 30, 17)
        got = fl.take(fl.asarray(h), fl.asarray(idx), axis=0).get()
        np.testing.assert_array_equal(got, h[idx])
    assert fl.stats()["kernels_compiled"] == 1
    h = RNG.random((30, 65)).astype(np.float32)  # the next class
    np.testing.assert_array_equal(fl.take(fl.asarray(h), fl.asarray(idx), axis=0).get(),
                                  h[idx])
    assert fl.stats()["kernels_compiled"] == 2


def test_flat_loop_without_row_loops(cpu, restore_recipes):
    h = RNG.random((30, 40)).astype(np.float32)
    x = fl.asarray(h)
    with fl.recipes.use(cpu_chunked.with_params(row_loops=False)):
        body = _body(fl.show_code(x.T * 2))
        got = (x.T * 2).get()
    assert "fl_idx_mod" in body and " e " not in body
    np.testing.assert_array_equal(got, h.T * 2)


@pytest.mark.parametrize("cols, per_item", [(50, 64), (300, 8), (600, None)])
def test_short_reduction_rows_share_a_work_item(cpu, cols, per_item):
    """cpu-rows: rows a size class bounds (at most 512 long) are walked about 4096
    elements per work-item, longer ones one each."""
    h = RNG.random((200, cols)).astype(np.float32)
    x = fl.asarray(h)
    body = _body(fl.show_code(x.sum(axis=1)))
    rows_loop = re.search(r"for \(\w+ i_inner = 0; [^\n]*?-(\d+) \* gid\(0\)", body)
    if per_item is None:
        assert rows_loop is None and "out0[gid(0)]" in body, body
    else:
        assert rows_loop is not None and int(rows_loop.group(1)) == per_item, body
    np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1), rtol=1e-5)
    i = fl.asarray(h[:, :cols // 2].copy() * 100).astype(np.int32)
    np.testing.assert_array_equal(i.max(axis=1).get(), (h[:, :cols // 2] * 100).astype(
        np.int32).max(axis=1))
