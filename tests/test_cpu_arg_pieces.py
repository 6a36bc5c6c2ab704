"""Arg-reductions of few long rows on a CPU, in pieces (``ops.reductions._arg_pieces``).

Each row is cut into pieces; one rows kernel finds each piece's extreme and its first
position (both passes over a piece in cache), a second takes the least of the pieces'
(value, position) keys.  Results against numpy: ties across pieces (the first),
NaN (the first NaN), -0.0 against 0.0, integer and bool values, rows that no piece
count divides (the two whole passes), and the launches.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.ops.reductions import _arg_pieces
from fuseloop.splits import TWO_STAGE_MIN_LENGTH

N = 1 << 16


def _check(h: np.ndarray, **kw: object) -> None:
    x = fl.asarray(h)
    for name in ("argmax", "argmin"):
        got = getattr(fl, name)(x, **kw).get()
        want = getattr(np, name)(h, **kw)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, kw)
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {h.dtype} {kw}")


def test_pieces_match_numpy(cpu):
    rng = np.random.default_rng(3)
    h = rng.random(N).astype(np.float32)
    assert _arg_pieces(fl.asarray(h), 0) > 1
    _check(h)
    # the extremes twice, in different pieces: the first
    h[[7, N - 9]] = 2.0
    h[[11, N - 3]] = -1.0
    _check(h)
    z = np.zeros(N, np.float32)
    z[[5, N // 2]] = -0.0  # numpy finds -0.0 equal to 0.0: position 0 either way
    _check(z)
    h[[N // 2 + 1, N - 1]] = np.nan  # the first NaN, in a later piece than the extremes
    _check(h)
    _check(rng.integers(-3, 4, N).astype(np.int32))
    _check(rng.random(N) > 0.5)


def test_few_long_rows_match_numpy(cpu):
    rng = np.random.default_rng(4)
    h = rng.integers(-50, 50, (3, 40000)).astype(np.float32)
    h[1, 39999] = np.nan
    assert _arg_pieces(fl.asarray(h), 1) > 1
    _check(h, axis=1)
    _check(h, axis=-1, keepdims=True)
    _check(h)  # the whole array: one row


def test_rows_no_piece_count_divides_take_two_passes(cpu):
    length = 32771  # a prime
    assert length >= TWO_STAGE_MIN_LENGTH
    h = np.random.default_rng(5).random(length).astype(np.float32)
    assert _arg_pieces(fl.asarray(h), 0) == 1
    _check(h)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_pieces_take_two_launches(cpu, fresh_stats, name):
    h = np.random.default_rng(6).random(N).astype(np.float32)
    x = fl.asarray(h)
    code = fl.show_code(getattr(fl, name)(x))
    # the rows kernel keys each piece's result; the second reads the least key's position
    assert code.count("__kernel") == 2 and f"fl_{name}_key_f32" in code
    fl.reset_stats()
    assert int(getattr(fl, name)(x)) == getattr(np, name)(h)
    assert fresh_stats()["kernels_launched"] == 2


def test_float64_and_many_rows_keep_two_passes(cpu):
    # float64 values do not fit a key's 32 bits; many rows are many work-items already
    assert _arg_pieces(fl.asarray(np.zeros(N)), 0) == 1
    assert _arg_pieces(fl.asarray(np.zeros((64, TWO_STAGE_MIN_LENGTH), np.float32)), 1) == 1
    assert _arg_pieces(fl.asarray(np.zeros((N, 2), np.float32)), 0) == 1  # not the last axis


def test_strided_rows_keep_two_passes(cpu):
    h = np.random.default_rng(7).random(2 * N).astype(np.float32)
    x = fl.asarray(h)
    assert _arg_pieces(x[::2], 0) == 1 and _arg_pieces(x[::-1], 0) == 1
    assert _arg_pieces(fl.exp(x[N:]), 0) > 1  # (an offset, an operation)
    for view, want in ((x[::2], h[::2]), (x[::-1], h[::-1])):
        assert int(fl.argmax(view)) == want.argmax()
