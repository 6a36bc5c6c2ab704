"""Segmented primitives (fl.sort_by_key, the scans by key, fl.reduce_by_key) against
numpy references: segments are runs of equal consecutive keys, as thrust defines them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import ShapeError, UnknownOpError

_NP = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _runs(keys: np.ndarray) -> list[int]:
    """The lengths of the runs of equal consecutive keys."""
    return [len(list(g)) for _, g in itertools.groupby(keys.tolist())]


def scan_ref(keys, values, op, exclusive=False, initial=0):
    out, start = [], 0
    for n in _runs(keys):
        seg = values[start:start + n]
        acc = _NP[op].accumulate(seg)
        if exclusive:
            acc = np.concatenate([[initial], _NP[op](initial, acc[:-1])])
        out.append(acc)
        start += n
    return np.concatenate(out).astype(values.dtype) if out else values[:0]


def _data(n, dtype, distinct, seed=0):
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.integers(0, distinct, n)).astype(np.int32)
    keys[n // 3:n // 2] = keys[n // 3:n // 2][::-1].copy()  # (runs need not be sorted)
    values = (rng.random(n) * 10 + 1).astype(dtype) if np.dtype(dtype).kind == "f" \
        else rng.integers(-50, 50, n).astype(dtype)
    return keys, values


# (each operation and dtype is a scan kernel of its own, built in seconds on PoCL: the
# tests share a few: float32 values with int32 keys for add, int32 ones for max/mul/min)
@pytest.mark.parametrize("dtype,op", [(np.float32, "add"), (np.int32, "max")])
def test_reduce_by_key(device, dtype, op):
    keys, values = _data(3000, dtype, 40)
    got_k, got_v = fl.reduce_by_key(fl.asarray(keys), fl.asarray(values), op=op)
    starts = np.concatenate([[0], np.cumsum(_runs(keys))[:-1]])
    np.testing.assert_array_equal(got_k.get(), keys[starts])
    ref = _NP[op].reduceat(values, starts)
    assert got_v.dtype == values.dtype
    np.testing.assert_allclose(got_v.get(), ref, rtol=1e-5)


def test_scans_by_key(device):
    keys, values = _data(2500, np.float32, 300, seed=1)
    k, v = fl.asarray(keys), fl.asarray(values)
    np.testing.assert_allclose(fl.inclusive_scan_by_key(k, v).get(),
                               scan_ref(keys, values, "add"), rtol=1e-5)
    got = fl.exclusive_scan_by_key(k, v * 2, initial=1.5)  # (a lazy input)
    np.testing.assert_allclose(got.get(), scan_ref(keys, values * 2, "add", True, 1.5),
                               rtol=1e-5)
    ints = np.where(np.arange(keys.size) % 3 == 0, -1, 2).astype(np.int32)
    ints[::7] = 1
    for op in ("mul", "min"):
        np.testing.assert_array_equal(fl.inclusive_scan_by_key(k, ints, op=op).get(),
                                      scan_ref(keys, ints, op))


def test_edge_cases(device):
    # one segment, all-distinct keys, empty input
    v = np.arange(1, 9, dtype=np.float32)
    one = np.full(8, 7, np.int32)
    k, r = fl.reduce_by_key(one, v)
    assert k.get().tolist() == [7] and r.get().tolist() == [36]
    np.testing.assert_array_equal(fl.inclusive_scan_by_key(one, v).get(), np.cumsum(v))
    distinct = np.arange(8, dtype=np.int32)[::-1].copy()
    k, r = fl.reduce_by_key(distinct, v.astype(np.int32), op="min")
    np.testing.assert_array_equal(k.get(), distinct)
    np.testing.assert_array_equal(r.get(), v)
    np.testing.assert_array_equal(fl.exclusive_scan_by_key(distinct, v, initial=5).get(),
                                  np.full(8, 5))
    # values narrower than 4 bytes (pyopencl's scan takes 4 or 8): sums wrap as numpy's
    small = np.full(300, 100, np.int8)
    k, r = fl.reduce_by_key(np.zeros(300, np.int32), small)
    assert r.dtype == np.int8 and r.get().tolist() == [np.add.reduce(small, dtype=np.int8)]
    e = np.zeros(0, np.float32)
    k, r = fl.reduce_by_key(e.astype(np.int32), e)
    assert k.shape == (0,) and r.shape == (0,)
    assert fl.inclusive_scan_by_key(e, e).shape == (0,)
    sk, sv = fl.sort_by_key(e, e)
    assert sk.shape == (0,) and sv.shape == (0,)


def test_sort_by_key_is_stable(device):
    rng = np.random.default_rng(4)
    keys = rng.integers(-5, 5, 1000).astype(np.int32)
    values = np.arange(1000, dtype=np.float32)
    sk, sv = fl.sort_by_key(fl.asarray(keys), fl.asarray(values) * 2)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(sk.get(), keys[order])
    np.testing.assert_array_equal(sv.get(), values[order] * 2)
    # sorted, then reduced: one sum per distinct key (np.unique's keys)
    k, r = fl.reduce_by_key(sk, sv)
    ref_k, inverse = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(k.get(), ref_k)
    np.testing.assert_allclose(r.get(), np.bincount(inverse, values * 2), rtol=1e-6)


def test_errors(device):
    with pytest.raises(ShapeError, match=r"\(5,\).*\(4,\)"):
        fl.reduce_by_key(np.zeros(4, np.int32), np.zeros(5, np.float32))
    with pytest.raises(ShapeError, match=r"\(2, 2\)"):
        fl.inclusive_scan_by_key(np.zeros((2, 2), np.int32), np.zeros(4))
    with pytest.raises(ShapeError, match=r"\(3,\).*\(2,\)"):
        fl.sort_by_key(np.zeros(2), np.zeros(3))
    with pytest.raises(UnknownOpError, match=r"'xor'.*'add'"):
        fl.exclusive_scan_by_key(np.zeros(4, np.int32), np.zeros(4), op="xor")
    assert issubclass(UnknownOpError, ValueError)


def test_reduce_by_key_cpu_blocks(device, fresh_stats, monkeypatch):
    # the CPU path's blocks (tiny here: 24 keys each): segments crossing one or many
    # block ends, NaN keys (each a segment of its own), NaN values under max, booleans
    from fuseloop.ops import segmented_cpu

    monkeypatch.setattr(segmented_cpu, "MIN_BLOCK", 24)
    rng = np.random.default_rng(9)
    keys = np.repeat(rng.integers(0, 5, 60), rng.integers(1, 40, 60)).astype(np.float32)
    keys[100:110] = np.nan
    n = keys.size
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    values = (rng.random(n) * 4).astype(np.float32)
    values[starts[5] + 2] = np.nan
    for op, vals in (("add", values), ("max", values), ("add", values > 2)):
        k, r = fl.reduce_by_key(keys, vals, op=op)
        np.testing.assert_array_equal(k.get(), keys[starts])
        ref = _NP[op].reduceat(vals.astype(np.float64) if op == "add" else vals, starts)
        assert r.dtype == (np.int64 if vals.dtype == np.bool_ else vals.dtype)
        np.testing.assert_allclose(r.get(), ref, rtol=1e-5)
    if device.type == "cpu":
        # no scan and no compaction: the kernels of ops/segmented_cpu.py
        assert fresh_stats()["scans"] == 0


def test_scans_by_key_cpu_blocks(device, fresh_stats, monkeypatch):
    # the CPU scans over tiny blocks: a run spanning several blocks carries their
    # partial results in; NaN keys; booleans; an exclusive scan's initial value
    from fuseloop.ops import segmented_cpu

    monkeypatch.setattr(segmented_cpu, "MIN_BLOCK", 16)
    rng = np.random.default_rng(10)
    keys = np.repeat(rng.integers(0, 4, 30), rng.integers(1, 70, 30)).astype(np.float64)
    keys[40:44] = np.nan
    values = (rng.random(keys.size) * 3).astype(np.float32)
    k, v = fl.asarray(keys), fl.asarray(values)
    fresh_stats()
    got = fl.inclusive_scan_by_key(k, v)
    np.testing.assert_allclose(got.get(), scan_ref(keys, values, "add"), rtol=1e-5)
    if device.type == "cpu":
        assert fresh_stats()["kernels_launched"] == 2  # (pyopencl's scan counts none)
    np.testing.assert_allclose(fl.exclusive_scan_by_key(k, v, op="max", initial=1.5).get(),
                               scan_ref(keys, values, "max", True, 1.5), rtol=1e-6)
    flags = values > 1
    np.testing.assert_array_equal(fl.inclusive_scan_by_key(k, flags).get(),
                                  scan_ref(keys, flags.astype(np.int64), "add"))
