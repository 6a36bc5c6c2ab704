"""Math builtins on vectors in the CPU reduction recipe (``cpu_rows`` on PoCL).

Reductions over contiguous rows whose terms call a builtin (``sum(exp(x - m))``)
compute the calls a block of 8 elements at a time, one accumulator per lane, and
the loop over a row's elements (softmax's ``exp(x - m) / s``) is vectorised like
the elementwise recipe's.  Results against numpy in float64 at row lengths that
end in a full block, a partial block, or are shorter than a block; the code that
PoCL gets (read, on PoCL only); and the reductions the transform leaves alone.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes.cpu_vector import LANES

# (rows, row length): one element, less than a block, one block, a block and one,
# long rows with a partial last block
SHAPES = [(1, 1), (3, 7), (4, LANES), (5, LANES + 1), (37, 1003), (2, 4101)]


def _rand(shape: tuple[int, ...], dtype: type, seed: int, scale: float = 4.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _tol(dtype: type) -> dict:
    return {"rtol": 3e-6, "atol": 1e-7} if dtype is np.float32 else {"rtol": 1e-12,
                                                                       "atol": 1e-15}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_matches_numpy(cpu, fresh_stats, dtype):
    for k, shape in enumerate(SHAPES):
        h = _rand(shape, dtype, k)
        x = fl.asarray(h)
        fl.reset_stats()
        e = fl.exp(x - x.max(axis=-1, keepdims=True))
        got = (e / e.sum(axis=-1, keepdims=True)).get()
        if shape[0] > 1:  # (one row is spread over the work-items in stages)
            assert fl.stats()["kernels_launched"] == 1
        h64 = h.astype(np.float64)
        want = np.exp(h64 - h64.max(axis=-1, keepdims=True))
        want /= want.sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(got, want, **_tol(dtype), err_msg=f"shape {shape}")
        assert got.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sums_of_calls_match_numpy(cpu, dtype):
    # short rows (a few per work-item) and long ones (one per work-item)
    for k, shape in enumerate([*SHAPES, (3, 70001)]):
        h = _rand(shape, dtype, 10 + k, scale=2.0)
        x = fl.asarray(h)
        h64 = h.astype(np.float64)
        np.testing.assert_allclose(fl.exp(x).sum(axis=-1).get(), np.exp(h64).sum(axis=-1),
                                   rtol=1e-5 if dtype is np.float32 else 1e-12,
                                   err_msg=f"shape {shape}")
        np.testing.assert_allclose(fl.log1p(x * x).mean(axis=-1).get(),
                                   np.log1p(h64 * h64).mean(axis=-1),
                                   rtol=1e-5 if dtype is np.float32 else 1e-12,
                                   err_msg=f"shape {shape}")


def test_full_sum_of_calls(cpu):
    h = _rand(2**20 + 3, np.float32, 20, scale=1.0)
    got = float(fl.exp(fl.asarray(h)).sum())
    np.testing.assert_allclose(got, np.exp(h.astype(np.float64)).sum(), rtol=1e-5)


def test_chained_and_binary_calls_in_reductions(cpu, fresh_stats):
    h = _rand((9, 1001), np.float64, 30, scale=1.0)
    x = fl.asarray(h)
    a, b, c = fl.compute(fl.sin(fl.exp(x)).sum(axis=-1),
                         fl.arctan2(x, x * x + 1).sum(axis=-1),
                         (fl.power(fl.abs(x) + 1, 1.5) * fl.cos(x)).sum(axis=-1))
    np.testing.assert_allclose(a.get(), np.sin(np.exp(h)).sum(axis=-1), rtol=1e-12)
    np.testing.assert_allclose(b.get(), np.arctan2(h, h * h + 1).sum(axis=-1), rtol=1e-12)
    np.testing.assert_allclose(c.get(), (np.power(np.abs(h) + 1, 1.5) * np.cos(h)).sum(-1),
                               rtol=1e-12, atol=1e-12)


def test_logsumexp(cpu):
    h = _rand((16, 777), np.float32, 40, scale=30.0)
    x = fl.asarray(h)
    m = x.max(axis=-1, keepdims=True)
    got = (m + fl.log(fl.exp(x - m).sum(axis=-1, keepdims=True))).get()
    h64 = h.astype(np.float64)
    m64 = h64.max(axis=-1, keepdims=True)
    want = m64 + np.log(np.exp(h64 - m64).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_special_values_in_rows(cpu):
    h = np.zeros((4, 19), np.float32)
    h[0, 3] = -np.inf  # softmax: a zero
    h[1, 17] = np.nan  # propagates through the sum
    h[2, 5] = np.inf  # exp: inf, and inf / inf is nan
    h[3, :] = np.linspace(-80, 80, 19)  # (float32 exp overflows past 88.7)
    x = fl.asarray(h)
    with np.errstate(all="ignore"):
        h64 = h.astype(np.float64)
        np.testing.assert_allclose(fl.exp(x).sum(axis=-1).get(), np.exp(h64).sum(axis=-1),
                                   rtol=1e-5)
        np.testing.assert_array_equal(np.isnan(fl.exp(x).max(axis=-1).get()),
                                      np.isnan(np.exp(h64).max(axis=-1)))
        e = fl.exp(x - 1)
        got = (e / e.sum(axis=-1, keepdims=True)).get()
        want = np.exp(h64 - 1) / np.exp(h64 - 1).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-30)


def test_other_reductions_and_conditions(cpu):
    h = _rand((7, 203), np.float32, 50, scale=1.0)
    x = fl.asarray(h)
    h64 = h.astype(np.float64)
    mx, mn, pr, cond = fl.compute(fl.exp(x).max(axis=-1), fl.exp(x).min(axis=-1),
                                  fl.exp(x * 0.01).prod(axis=-1),
                                  fl.where(x > 0, fl.log(x), 0).sum(axis=-1))
    np.testing.assert_allclose(mx.get(), np.exp(h64).max(axis=-1), rtol=2e-6)
    np.testing.assert_allclose(mn.get(), np.exp(h64).min(axis=-1), rtol=2e-6)
    np.testing.assert_allclose(pr.get(), np.exp(h64 * 0.01).prod(axis=-1), rtol=1e-5)
    with np.errstate(all="ignore"):
        want = np.where(h64 > 0, np.log(h64), 0).sum(axis=-1)
    np.testing.assert_allclose(cond.get(), want, rtol=1e-5)


def test_code_of_softmax_and_row_sums(pocl):
    x = fl.asarray(_rand((16, 300), np.float32, 60))
    e = fl.exp(x - x.max(axis=-1, keepdims=True))
    code = fl.show_code(e / e.sum(axis=-1, keepdims=True))
    # vector exps in the sum's loop and in the element loop, each in its full blocks
    # and in its last one; no scalar exp
    assert code.count(f"exp((float{LANES})(") == 4 and "fl_exp_f32(" not in code
    full_blocks = code.split("bulk slab for 'j1_outer'")[1].split("final slab")[0]
    assert "if (" not in full_blocks and "?" not in full_blocks
    assert f"part_j1[{LANES - 1}] = part_j1[{LANES - 1}] + _fl_vr" in code  # accumulators
    # long rows are summed in pieces, one per work-item (here 2^16 = 8 pieces of 2^13)
    long_rows = fl.asarray(_rand((2, 2**16), np.float64, 61))
    code = fl.show_code(fl.exp(long_rows).sum(axis=-1))
    assert re.search(r"exp\(\(double4\)\(\w+\[0\], ", code)
    assert re.search(r"exp\(\(double4\)\(\w+\[4\], ", code)
    assert "fl_exp_f64(" not in code
    # a load used twice is a temporary per lane; where's arguments are all computed
    code = fl.show_code(fl.where(x > 0, fl.log(x), 0).sum(axis=-1))
    assert f"log((float{LANES})(" in code and "fl_log_f32(" not in code


def test_exact_builtins_of_terms_are_vector_calls(pocl):
    # (PoCL's sqrt and fabs are library calls: a loop calling them stayed scalar)
    h = _rand((16, 300), np.float32, 72)
    x = fl.asarray(h)
    for expr, want in ((fl.sqrt(x * x + 1).sum(axis=-1), np.sqrt(h * h + 1.0).sum(axis=-1)),
                       (fl.abs(x).sum(axis=-1), np.abs(h).sum(axis=-1))):
        code = fl.show_code(expr)
        assert f"((float{LANES})(" in code, code
        np.testing.assert_allclose(expr.get(), want, **_tol(np.float32))


def test_reductions_left_alone(pocl):
    x = fl.asarray(_rand((16, 300), np.float32, 70))
    # no builtin call
    code = fl.show_code(x.sum(axis=-1))
    assert "vload" not in code and "_fl_v" not in code, code
    # a column sum reads down the columns: its calls stay scalar
    assert "_fl_v" not in fl.show_code(fl.exp(x).sum(axis=0))
    # pieces of a row that end past it: the terms are selected by a condition
    ragged = fl.asarray(_rand((2, 70001), np.float32, 71))
    assert "_fl_v" not in fl.show_code(fl.exp(ragged).sum(axis=-1))


def test_row_last_block_runs_whole_lane_loops(cpu):
    """The last block of a row runs its lane loops over all 8 lanes, testing only the
    lanes that load or store (see test_cpu_vector_math: PoCL builds variable trip
    counts slowly); the values past the row's end are never stored."""
    h = _rand((5, 8 * 9 + 3), np.float32, 20)
    x = fl.asarray(h)
    e = fl.exp(x - x.max(axis=-1, keepdims=True))
    src = fl.show_code(e)
    final = src.split("final slab for 'e_outer'")[1]
    assert final.count("<= 7;") == 2 and "NE + -8 * e_outer;" not in final, src
    assert final.count("if (") == 2, src  # the load and the store
    h64 = h.astype(np.float64)
    np.testing.assert_allclose(e.get(), np.exp(h64 - h64.max(axis=-1, keepdims=True)),
                               rtol=1e-6)
