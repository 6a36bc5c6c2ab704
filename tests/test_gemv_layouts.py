"""Vector-matrix and matrix-vector products: layouts and results.

``d[:, i] @ d[:, i:]`` (covariance's statement) with few outputs and a long reduced
range is a reduction over the last axis of a transposed view: a column-like one
(neighbouring outputs read neighbouring addresses), so it is split across
work-groups where its outputs are too few (``splits._column_like``), and its kernels
read the matrix along its rows.  Against numpy float64 over strides, transposes,
float32 and float64 and lengths from 1 up; the GPU recipes run on the CPU device.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop import splits
from fuseloop.recipes import gpu_coalesced, gpu_tiled
from fuseloop.recipes.rows import make_gpu_rows


@pytest.fixture
def gpu_on_cpu(restore_recipes):
    """The GPU recipes on the CPU device, asking for as many work-items as a large GPU
    (4096 per compute unit of the CPU's few): short outputs split their reduced range."""
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    fl.register_recipe("cpu", make_gpu_rows().with_params(column_items=4096),
                       name="test-gpu-rows-split", kind="reduction")
    fl.register_recipe("cpu", gpu_tiled, name="test-gpu-tiled", kind="contraction")
    with fl.device("cpu") as dev:
        yield dev


def _operands(rng, kind, k, n, dtype):
    """numpy operands of ``kind`` (x @ A, A @ x, A.T @ x, x @ A.T, a strided column
    of a matrix times the matrix's columns)."""
    if kind == "column":
        d = rng.standard_normal((k, n + 3)).astype(dtype)
        return d, (lambda m: m[:, 1] @ m[:, 3:])
    mat = rng.standard_normal((k, n) if kind in ("xA", "ATx") else (n, k)).astype(dtype)
    vec = rng.standard_normal(k).astype(dtype)
    return (mat, vec), {
        "xA": lambda a: a[1] @ a[0], "Ax": lambda a: a[0] @ a[1],
        "ATx": lambda a: a[0].T @ a[1], "xAT": lambda a: a[1] @ a[0].T}[kind]


SIZES = [(1, 1), (1, 70), (5, 3), (40, 1), (300, 7), (3001, 64), (20011, 5), (9000, 100),
         (700, 900)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["xA", "Ax", "ATx", "xAT", "column"])
@pytest.mark.parametrize("k,n", SIZES)
@pytest.mark.parametrize("recipes", ["default", "gpu"])
def test_products_match_numpy(request, recipes, k, n, kind, dtype):
    if recipes == "gpu":
        request.getfixturevalue("gpu_on_cpu")
    else:
        request.getfixturevalue("cpu")
    rng = np.random.default_rng(k * 7 + n)
    ops, product = _operands(rng, kind, k, n, dtype)
    ops = ops if isinstance(ops, tuple) else (ops,)
    args = [fl.asarray(o) for o in ops]
    got = product(args if len(args) > 1 else args[0]).get()
    want = product([o.astype(np.float64) for o in ops] if len(ops) > 1
                   else ops[0].astype(np.float64))
    tol = 2e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.sqrt(k)))


def _reduce_of(expr):
    node = expr._node
    tops: list = []
    assert splits.top_reduces(node, tops) and len(tops) == 1
    return tops[0]


def test_strided_vector_times_matrix_is_column_like(cpu):
    """A strided vector times a matrix (and a transposed matrix's row sums) read the
    matrix along its rows: column-like; A @ x is not, nor (as yet: the vector is read
    contiguously along the reduced range) x @ A with x contiguous."""
    a = fl.asarray(np.ones((500, 64)))
    x = fl.asarray(np.ones(500))
    assert splits._column_like(_reduce_of(a[:, 3] @ a[:, 5:]))
    assert splits._column_like(_reduce_of(a.T.sum(axis=1)))
    assert not splits._column_like(_reduce_of(x @ a))
    assert not splits._column_like(_reduce_of(fl.asarray(np.ones((64, 500))) @ x))


def test_short_output_splits_its_reduced_range(gpu_on_cpu):
    """64 outputs of a strided column times a matrix over 20000 rows: two stages
    (pieces, then their sum), as a column sum of that shape; 4000 outputs over 100
    rows (shorter than two pieces of ``COLUMN_MIN_PIECE`` rows, on a device of any
    size): one launch."""
    rng = np.random.default_rng(0)
    ah = rng.standard_normal((20000, 67))
    a = fl.asarray(ah)
    assert launches(lambda: (a[:, 2] @ a[:, 3:]).get(), warm=True) == 2
    np.testing.assert_allclose((a[:, 2] @ a[:, 3:]).get(), ah[:, 2] @ ah[:, 3:],
                               rtol=1e-10, atol=1e-9)
    b = rng.standard_normal((100, 4001))
    bd = fl.asarray(b)
    assert launches(lambda: (bd[:, 0] @ bd[:, 1:]).get(), warm=True) == 1


def test_short_output_kernels_read_rows_coalesced(gpu_on_cpu):
    """Every load of the matrix in the kernels of a short d[:, i] @ d[:, i:] has the
    work-items' index lid(0) with coefficient 1: neighbouring work-items, neighbouring
    addresses."""
    a = fl.asarray(np.ones((20000, 49)))
    src = fl.show_code(a[:, 0] @ a[:, 1:])
    loads = [m for m in re.findall(r"in\d\[([^\]]*)\]", src) if "lid(0)" in m]
    assert loads, src
    for index in loads:
        # (lid(0) times something, or inside a parenthesis that is: a strided read)
        assert not re.search(r"\w+ \* lid\(0\)|lid\(0\) \*|\* \([^()]*lid\(0\)", index), index
