"""Values held on the host as light 0-d arrays (fuseloop.host_held.Held, the elements of
``for b in data``): their operators against numpy scalars' and the plain 0-d arrays'."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.expr.nodes import Scalar
from fuseloop.host_eager import _scalar_array
from fuseloop.host_held import Held

OPS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
       operator.mod, operator.and_, operator.or_, operator.xor, operator.rshift,
       operator.lshift, operator.lt, operator.eq, operator.ge]
DTYPES = [np.uint8, np.int32, np.int64, np.float32, np.float64]


def _first(h):
    return next(iter(fl.asarray(h)))


def _same(got, want):
    assert type(got) is Held and got.shape == () and got.dtype == np.asarray(want).dtype, (
        got.dtype, np.asarray(want).dtype)
    np.testing.assert_equal(got.get(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS, ids=lambda f: f.__name__)
def test_operators_with_python_scalars_and_held_values_are_numpys(host, dtype, op):
    h = np.array([200, 7], dtype)
    v, e = _first(h), h[0]
    w, f = _first(np.array([3], np.uint8)), np.uint8(3)
    assert type(v) is Held
    ints = dtype in (np.uint8, np.int32, np.int64)
    for other in ([3, -2, 5.0] if op not in (operator.rshift, operator.lshift, operator.and_,
                                             operator.or_, operator.xor) else [3]):
        if not ints and op in (operator.rshift, operator.lshift, operator.and_,
                               operator.or_, operator.xor):
            continue
        with np.errstate(all="ignore"):
            try:
                want, rwant = op(e, other), op(other, e)
            except (TypeError, OverflowError):
                continue
        _same(op(v, other), want)  # (-2 beside a uint8 in a comparison too: numpy's answer)
        _same(op(other, v), rwant)
    if ints or op not in (operator.rshift, operator.lshift, operator.and_, operator.or_,
                          operator.xor):
        with np.errstate(all="ignore"):
            _same(op(v, w), op(e, f))
            _same(op(w, v), op(f, e))


def test_results_match_the_plain_arrays(host):
    v = _first(np.array([200, 7], np.uint8))
    plain = _scalar_array(np.uint8(200), np.dtype(np.uint8), v.device)
    for f in (lambda x: (0xFF & x) >> 1, lambda x: x * 2.5 - 1, lambda x: 1 ^ (x & 1),
              lambda x: x // 7 + x % 7, lambda x: (x < 100) | (x == 200)):
        got, want = f(v), f(plain)
        assert type(want) is not Held and got.dtype == want.dtype
        np.testing.assert_equal(got.get(), want.get())


def test_in_place_changes_the_value_held_and_keeps_old_nodes(host):
    v = _first(np.array([200], np.uint8))
    node = v._node
    alias = v
    v >>= 2
    assert type(v) is Held and v.dtype == np.uint8 and v.get() == 50 and alias.get() == 50
    assert node.value == 200  # (a node made before keeps the old value)
    x = _first(np.array([1.5]))
    x *= 4
    assert x.get() == 6.0 and x.dtype == np.float64


def test_in_place_cast_error_is_the_plain_arrays(host):
    v = _first(np.array([200], np.uint8))
    plain = _scalar_array(np.uint8(200), np.dtype(np.uint8), v.device)
    with pytest.raises(Exception) as want:
        plain += 2.5
    with pytest.raises(want.type):
        v += 2.5


def test_no_node_is_made_by_operators_and_truth(host, fresh_stats):
    crc, poly = 0xFFFF, 0x8408
    h = np.random.default_rng(5).integers(0, 256, 50, dtype=np.uint8)
    want = crc
    for e in h:  # (crc16's inner loop on numpy scalars)
        cur = 0xFF & e
        for _ in range(8):
            want = (want >> 1) ^ poly if (want & 1) ^ (cur & 1) else want >> 1
            cur >>= 1
    fl.reset_stats()
    for b in fl.asarray(h):
        cur = 0xFF & b
        for _ in range(8):
            t = (crc & 1) ^ (cur & 1)
            assert type(t) is Held and t._n is None
            crc = (crc >> 1) ^ poly if t else crc >> 1
            cur >>= 1
        assert type(cur) is Held and cur._n is None
    assert crc == want
    s = fl.stats()
    assert s["kernels_launched"] == 0 and s["host_operations"] >= 50 * 8 * 3, s


def test_other_operands_take_the_plain_path(host):
    v = _first(np.array([3.0, 4.0]))
    a = fl.asarray(np.arange(5.0))
    np.testing.assert_array_equal((v * a).get(), 3.0 * np.arange(5.0))  # (a kernel's operand)
    np.testing.assert_array_equal((a[1] + v).get(), 4.0)  # (a buffer's element)
    np.testing.assert_array_equal((v + np.float32(2)).get(), np.float64(3.0) + np.float32(2))
    assert type(v._node) is Scalar and v._node.value == 3.0
    a[2] = v  # (written into a buffer)
    np.testing.assert_array_equal(a.get(), [0.0, 1.0, 3.0, 3.0, 4.0])
    assert int(_first(np.array([7], np.int32))) == 7 and float(v) == 3.0


def test_a_node_other_than_a_scalar_makes_it_ordinary(host):
    v = _first(np.array([3.0, 4.0]))
    v.eval()
    np.testing.assert_array_equal((v + 1).get(), 4.0)
    v[...] = 9.0  # (an assignment: the general path's)
    assert float(v) == 9.0
    np.testing.assert_array_equal((v * 2).get(), 18.0)


def test_host_path_off_gives_the_same_values(cpu):
    # (FUSELOOP_HOST_PATH=0, the suite's default: the plain arrays' path, lazy nodes)
    v, e = _first(np.array([200, 7], np.uint8)), np.uint8(200)
    for f in (lambda x: (0xFF & x) >> 1, lambda x: x * 2.5 - 1, lambda x: 1 ^ (x & 1)):
        got = f(v)
        assert type(got) is not Held and got.dtype == f(e).dtype
        np.testing.assert_equal(got.get(), f(e))
    v >>= 2
    assert v.get() == 50 and v.dtype == np.uint8


def test_writes_of_held_values_are_numpys(host, fresh_stats, monkeypatch):
    from fuseloop import array

    def general(*args):
        raise AssertionError("the general path's assignment")

    monkeypatch.setattr(array, "_setitem", general)  # (every write here: numpy's, at once)
    h = np.arange(10, dtype=np.int32)
    a = fl.asarray(h)
    lazy = a * 2  # (a lazy reader of the elements written: computed before the write)
    vals = np.array([7.9, -3.5, 2.25])
    for i, v in enumerate(fl.asarray(vals)):
        assert type(v) is Held
        a[i] = v  # (an element: numpy's unsafe cast, as assignments cast)
        h[i] = vals[i]
        a[-1 - i] = v * 2
        h[-1 - i] = vals[i] * 2
    a[4:6] = v  # (a slice: broadcast)
    h[4:6] = vals[-1]
    np.testing.assert_array_equal(a.get(), h)
    np.testing.assert_array_equal(lazy.get(), np.arange(10, dtype=np.int32) * 2)
    assert fl.stats()["kernels_launched"] <= 1
