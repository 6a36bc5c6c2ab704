"""Arg-reductions in the GPU reduction recipe, forced onto PoCL.

An argmax is two passes in one kernel: the row's max, then the least position
whose element equals it (or is NaN when the max is).  Results against numpy
(ties: the first index; NaN wins, the first NaN's index; ``-0.0 == 0.0``) over
rows, columns and the whole array, and the code of the index pass: 32-bit
positions where the axis allows, widened to int64 only for the result.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import splits
from fuseloop.ops import reductions as _reductions
from fuseloop.recipes.rows import make_gpu_rows

GROUP = 64  # a few pieces per row at small lengths


@pytest.fixture
def gpu_rows_on_cpu(restore_recipes):
    fl.register_recipe("cpu", make_gpu_rows(GROUP), name=f"test-gpu-rows-{GROUP}",
                       kind="reduction")
    with fl.device("cpu"):
        yield


def _specials(shape: tuple[int, int], dtype: type, seed: int) -> np.ndarray:
    """Small integers (many ties), a row of one value, NaNs and signed zeros."""
    rng = np.random.default_rng(seed)
    h = rng.integers(-3, 4, shape).astype(dtype)
    h[0] = 2  # every element ties: index 0
    if np.dtype(dtype).kind == "f":
        n = shape[1]
        h[1, [n // 3, n - 1]] = np.nan  # two NaNs in a row: the first one's index
        h[2] = 0.0
        h[2, n // 2] = -0.0  # -0.0 ties with 0.0: still the first index
        h[3, n - 1] = np.nan  # the last element alone
        h[4, :] = -np.inf
        h[4, n - 2] = np.nan
    return h


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_rows_columns_and_all_match_numpy(gpu_rows_on_cpu, dtype):
    h = _specials((6, 3 * GROUP + 5), dtype, 1)
    x = fl.asarray(h)
    for op in ("argmax", "argmin"):
        for axis in (1, 0, None):
            got = np.asarray(getattr(x, op)(axis=axis).get())
            want = getattr(h, op)(axis=axis)
            assert got.dtype == np.int64, (op, axis)
            np.testing.assert_array_equal(got, want, err_msg=f"{op} axis={axis} {dtype}")
    np.testing.assert_array_equal(x.argmax(axis=1, keepdims=True).get(),
                                  h.argmax(axis=1, keepdims=True))


def test_whole_array_in_two_stages_matches_numpy(gpu_rows_on_cpu):
    # long enough for the two-stage split; the extreme ties at both ends, then a NaN
    rng = np.random.default_rng(2)
    h = rng.integers(-50, 50, 70001).astype(np.float32)
    h[[3, -1]] = 99.0
    h[[5, -2]] = -99.0
    x = fl.asarray(h)
    assert (int(x.argmax()), int(x.argmin())) == (h.argmax(), h.argmin()) == (3, 5)
    h[[40000, 60000]] = np.nan
    x = fl.asarray(h)
    assert int(x.argmax()) == int(x.argmin()) == h.argmax() == 40000


def test_index_pass_carries_32_bit_positions(gpu_rows_on_cpu, fresh_stats):
    x = fl.asarray(np.zeros((4, 300), np.float32))
    src = fl.show_code(x.argmax(axis=1))
    # the positions and their group combination are ``int``; only the result is long
    assert re.search(r"__local int lanes_t\d+\[", src), src
    assert re.search(r"__local int part_t\d+\[", src), src
    assert "__local long" not in src, src
    assert re.search(r"out0\[[^]]*\] = fl_cast_i32_i64\(", src), src
    assert x.argmax(axis=1).get().dtype == np.int64
    assert fresh_stats()["kernels_launched"] == 1  # the widening is in the same kernel


# {{{ one pass over (value, position) keys (FUSELOOP_ARG_ONE_PASS, fuseloop.lower.arg_keys)


@pytest.fixture
def one_pass(gpu_rows_on_cpu, monkeypatch):
    monkeypatch.setattr(_reductions, "ARG_ONE_PASS", "1")


@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_one_pass_matches_numpy(one_pass, dtype):
    # specials in rows (ties, NaNs, signed zeros, -inf), along both axes and all of it
    h = _specials((6, 3 * GROUP + 5), dtype, 3)
    x = fl.asarray(h)
    for op in ("argmax", "argmin"):
        for axis in (1, 0, None):
            got = np.asarray(getattr(x, op)(axis=axis).get())
            assert got.dtype == np.int64, (op, axis)
            np.testing.assert_array_equal(got, getattr(h, op)(axis=axis),
                                          err_msg=f"{op} axis={axis} {dtype}")
    np.testing.assert_array_equal(x.argmin(axis=0, keepdims=True).get(),
                                  h.argmin(axis=0, keepdims=True))


def test_one_pass_bool_and_extremes(one_pass):
    b = np.zeros(50, np.bool_)
    b[[7, 9]] = True
    assert (int(fl.argmax(fl.asarray(b))), int(fl.argmin(fl.asarray(b)))) == (7, 0)
    i8 = np.array([5, -128, 127, -128, 127], np.int8)
    assert (int(fl.argmin(fl.asarray(i8))), int(fl.argmax(fl.asarray(i8)))) == (1, 2)
    u32 = np.array([7, 2**32 - 1, 0, 2**31, 0, 2**32 - 1], np.uint32)
    assert (int(fl.argmin(fl.asarray(u32))), int(fl.argmax(fl.asarray(u32)))) == (2, 1)
    # float64 and int64 do not fit a key: the two passes, with the same answers
    d = np.array([1.0, np.nan, -2.0, np.nan], np.float64)
    assert (int(fl.argmin(fl.asarray(d))), int(fl.argmax(fl.asarray(d)))) == (1, 1)
    f = np.array([np.inf, -np.inf, 3e38, -np.inf, np.inf, -0.0, 0.0], np.float32)
    assert (int(fl.argmin(fl.asarray(f))), int(fl.argmax(fl.asarray(f)))) == (1, 0)
    z = np.array([0.0, -0.0, 0.0, 1e-45, -1e-45], np.float32)  # subnormals order too
    assert (int(fl.argmin(fl.asarray(z))), int(fl.argmax(fl.asarray(z)))) == (4, 3)


def test_one_pass_whole_array_reads_once_in_two_launches(gpu_rows_on_cpu, monkeypatch,
                                                          fresh_stats):
    # long enough for the two-stage split: keys' partials, then one combining kernel
    rng = np.random.default_rng(4)
    h = rng.integers(-50, 50, 70001).astype(np.float32)
    h[[3, -1]], h[[5, -2]] = 99.0, -99.0
    x = fl.asarray(h)
    launches = {}
    for mode in ("0", "1"):
        monkeypatch.setattr(_reductions, "ARG_ONE_PASS", mode)
        before = fresh_stats()["kernels_launched"]
        assert (int(x.argmax()), int(x.argmin())) == (3, 5)
        launches[mode] = fresh_stats()["kernels_launched"] - before
    stages = 1 if splits.ONE_LAUNCH else 2  # (a split's two stages: launches)
    assert launches == {"0": 4 * stages, "1": 2 * stages}, launches
    src = fl.show_code(x.argmin())
    assert src.count("__kernel") == stages, src
    # each element read once, keyed
    assert re.search(r"fl_argmin_key_f32_i32_u64\(in\d+\[", src), src
    assert "__local ulong part_" in src and "fl_where" not in src, src
    assert re.search(r"out0\[[^]]*\] = fl_arg_key_index_u64_i64\(", src), src
    h[[40000, 60000]] = np.nan
    x = fl.asarray(h)
    assert int(x.argmax()) == int(x.argmin()) == 40000
    # few long columns: the column-like split (pieces of rows, then their keys combined;
    # the positions, an Iota along the columns, read no memory and do not prevent it)
    cols = h[:8704 * 8].reshape(8704, 8)
    before = fresh_stats()["kernels_launched"]
    np.testing.assert_array_equal(fl.asarray(cols).argmin(axis=0).get(), cols.argmin(axis=0))
    assert fresh_stats()["kernels_launched"] - before == 2


def test_one_pass_auto_is_for_gpus(gpu_rows_on_cpu, monkeypatch):
    # auto: on a CPU device the two passes stay (their min vectorises there)
    monkeypatch.setattr(_reductions, "ARG_ONE_PASS", "auto")
    x = fl.asarray(np.arange(100, dtype=np.float32))
    assert "argmin_key" not in fl.show_code(x.argmin())


def test_one_pass_auto_rule(monkeypatch):
    from types import SimpleNamespace

    from fuseloop.ops.reductions import _one_pass_arg

    monkeypatch.setattr(_reductions, "ARG_ONE_PASS", "auto")

    def arr(ndim, kind="gpu", dtype=np.float32):
        return SimpleNamespace(ndim=ndim, shape=(1,) * (ndim - 1) + (100,),
                               dtype=np.dtype(dtype),
                               device=SimpleNamespace(type=kind))

    # on GPUs: every axis, and the whole array (an axis out of range: the two-pass
    # path, which raises numpy's error)
    for ndim, axis, want in [(1, None, True), (1, -1, True), (2, None, True), (2, 0, True),
                             (2, -2, True), (3, 1, True), (2, 1, True), (2, -1, True),
                             (3, 2, True), (2, 5, False), (2, -3, False)]:
        assert _one_pass_arg(arr(ndim), axis) == want, (ndim, axis)
    assert not _one_pass_arg(arr(1, "cpu"), None)
    assert not _one_pass_arg(arr(1, dtype=np.float64), None)  # (no room for the position)
    monkeypatch.setattr(_reductions, "ARG_ONE_PASS", "1")
    assert _one_pass_arg(arr(2, "cpu"), 1)
    monkeypatch.setattr(_reductions, "ARG_ONE_PASS", "0")
    assert not _one_pass_arg(arr(1), None)


def test_one_pass_setting_words():
    # FUSELOOP_ARG_ONE_PASS is read once, at import, into ARG_ONE_PASS
    words = {"1": "1", " On ": "1", "yes": "1", "TRUE": "1", "0": "0", "off": "0",
             "no": "0", "false": "0", "auto": "auto", "": "auto", "maybe": "auto"}
    for text, want in words.items():
        assert _reductions.arg_one_pass_setting(text) == want, text


def test_one_pass_setting_changes_what_is_built(gpu_rows_on_cpu, monkeypatch):
    # the mode is in the composite's template key: set at run time, the next call (the
    # same structure, recorded before) builds the other way, and back
    x = fl.asarray(np.arange(100, dtype=np.float32)[::-1].copy())
    for mode in ("0", "0", "1", "1", "0"):
        monkeypatch.setattr(_reductions, "ARG_ONE_PASS", mode)
        src = fl.show_code(x.argmin())
        assert ("argmin_key" in src) == (mode == "1"), mode
        assert int(x.argmin()) == 99

# }}}
