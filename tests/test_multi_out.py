"""fl.compute(..., out=(a, b)): several results written into existing arrays by one kernel."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop.errors import DeviceError, DTypeError, ShapeError

DTYPES = [np.float32, np.float64, np.int32]


def data(n, dtype, seed):
    return (np.random.default_rng(seed).random(n) * 100).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_two_targets_one_kernel(device, dtype):
    xh, yh = data(1000, dtype, 1), data(1000, dtype, 2)
    x, y = fl.asarray(xh), fl.asarray(yh)
    a, b = fl.zeros(1000, dtype), fl.zeros(1000, dtype)
    got: list = []
    assert launches(lambda: got.extend(fl.compute(x + y, x * y, out=(a, b)))) == 1
    assert got[0] is a and got[1] is b
    np.testing.assert_array_equal(a.get(), xh + yh)
    np.testing.assert_array_equal(b.get(), xh * yh)


@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_reads_see_old_values(device, dtype):
    # numpy: every result computed before anything is written
    ah, bh = data(5000, dtype, 3), data(5000, dtype, 4)
    a, b = fl.asarray(ah), fl.asarray(bh)
    assert launches(lambda: fl.compute(a + b, a - b, out=(a, b))) == 1
    np.testing.assert_array_equal(a.get(), ah + bh)
    np.testing.assert_array_equal(b.get(), ah - bh)
    # a target read only by the *other* expression (its load is otherwise free to
    # follow the first store)
    a, b = fl.asarray(ah), fl.asarray(bh)
    assert launches(lambda: fl.compute(b * 2, a + 1, out=(a, b))) == 1
    np.testing.assert_array_equal(a.get(), bh * 2)
    np.testing.assert_array_equal(b.get(), ah + 1)


def test_strided_view_targets(device):
    h = np.arange(24.0).reshape(4, 6)
    m = fl.asarray(h)
    x = fl.asarray(np.arange(12.0).reshape(4, 3))
    assert launches(lambda: fl.compute(x * 2, -x, out=(m[:, ::2], m[:, 1::2]))) == 1
    ref = h.copy()
    ref[:, ::2], ref[:, 1::2] = np.arange(12.0).reshape(4, 3) * 2, -np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(m.get(), ref)
    # swapping the two halves of one buffer through disjoint views
    v = fl.asarray(np.arange(10.0))
    fl.compute(v[1::2], v[::2], out=(v[::2], v[1::2]))
    np.testing.assert_array_equal(v.get(), [1, 0, 3, 2, 5, 4, 7, 6, 9, 8])


def test_broadcast_cast_and_shape_groups(device):
    a = fl.zeros((3, 4), np.float64)
    b = fl.zeros((3, 4), np.float32)
    c = fl.zeros(5, np.int64)
    row = fl.asarray(np.arange(4.0))
    n = launches(lambda: fl.compute(row + 1, row * 0.5, fl.arange(5) * 3, out=(a, b, c)))
    assert n == 2  # one kernel per target shape
    np.testing.assert_array_equal(a.get(), np.broadcast_to(np.arange(4.0) + 1, (3, 4)))
    np.testing.assert_array_equal(b.get(), np.broadcast_to(np.arange(4.0) * 0.5, (3, 4)))
    np.testing.assert_array_equal(c.get(), np.arange(5) * 3)
    single = fl.zeros(4)
    assert fl.compute(row * 3, out=single)[0] is single
    np.testing.assert_array_equal(single.get(), np.arange(4.0) * 3)


def test_kept_value_keeps_its_values(device):
    ah = np.arange(6.0)
    a, b = fl.asarray(ah), fl.zeros(6)
    keep = a * 2                       # reads a, which the call overwrites
    other = (a + 1).astype(np.float32)  # another dtype than its target: computed too
    pending = a - 1                     # a lazy reader not in the call: evaluated first
    fl.compute(other, keep, out=(a, b))
    np.testing.assert_array_equal(a.get(), ah + 1)
    np.testing.assert_array_equal(keep.get(), ah * 2)
    np.testing.assert_array_equal(other.get(), (ah + 1).astype(np.float32))
    np.testing.assert_array_equal(pending.get(), ah - 1)
    b[...] = 0  # keep reads b now: a later write evaluates it first
    np.testing.assert_array_equal(keep.get(), ah * 2)


def test_errors(device):
    x = fl.asarray(np.arange(4.0))
    ints = fl.zeros(4, np.int32)
    with pytest.raises(DTypeError, match="same_kind"):
        fl.compute(x * 2, out=(ints,))
    with pytest.raises(ShapeError, match=r"\(4,\).*\(5,\)"):
        fl.compute(x * 2, out=(fl.zeros(5),))
    with pytest.raises(ShapeError):
        fl.compute(fl.zeros((2, 4)), out=(fl.zeros(4),))
    t = fl.zeros(4)
    with pytest.raises(ValueError, match="share memory"):
        fl.compute(x, x * 2, out=(t, t))
    m = fl.zeros(8)
    with pytest.raises(ValueError, match="share memory"):
        fl.compute(x, x, out=(m[:4], m[2:6]))
    with pytest.raises(ValueError, match="2 expressions but 1"):
        fl.compute(x, x, out=(t,))
    with pytest.raises(TypeError):
        fl.compute(x, out=(np.zeros(4),))
    np.testing.assert_array_equal(t.get(), 0)  # nothing written by a refused call
    np.testing.assert_array_equal(ints.get(), 0)


def test_target_on_another_device(device):
    # (one device here: a stand-in for a second one, as the check compares identities)
    x = fl.asarray(np.arange(4.0))
    t = fl.zeros(4)
    t.device = SimpleNamespace(name="another device", index=99)
    with pytest.raises(DeviceError, match="another device"):
        fl.compute(x * 2, out=(t,))
    # each value on its target's device, but the targets on two devices
    other = SimpleNamespace(name="another device", index=99)
    x2, u = fl.asarray(np.arange(4.0)), fl.zeros(4)
    x2.device = u.device = other
    with pytest.raises(DeviceError, match="different devices"):
        fl.compute(x, x2, out=(fl.zeros(4), u))
