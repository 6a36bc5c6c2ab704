"""Scatters (``a[idx] = v``, ``a[idx] += v``) check every index before writing: an
out-of-range index raises IndexOutOfBoundsError and leaves the target as it was,
as numpy does; in range they match numpy at a known number of kernels."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from launch_counts import counted

import fuseloop as fl

H1 = np.arange(5.0)
H2 = np.arange(12.0).reshape(3, 4)
H1I = np.arange(8, dtype=np.int32)
H2I = np.arange(12, dtype=np.int64).reshape(3, 4) * 3

FORMS = ["np", "fl", "lazy"]


def _as(form: str, k: Any) -> Any:
    """Index array ``k`` as given to numpy, as a concrete fuseloop array, or lazy."""
    if not isinstance(k, np.ndarray) or form == "np":
        return k
    return fl.asarray(k) if form == "fl" else fl.asarray(k + 1) - 1


def _key(form: str, key: tuple) -> tuple:
    return tuple(_as(form, k) for k in key)


def _write(op: str, x: Any, key: tuple, v: Any) -> None:
    if op == "set":
        x[key] = v
    else:
        x[key] += v


def _message(value: int, axis: int, size: int) -> str:
    # the gathers' wording (value, the indexed array's axis, that axis' length)
    return re.escape(f"index {value} is out of bounds for axis {axis} with size {size} "
                     "(an integer-array index, fl.take or x[idx])")


# (target, key, offending value, its axis in the target, that axis' length as indexed)
OUT_OF_RANGE = [
    (H1, (np.array([0, 9, 2]),), 9, 0, 5),
    (H1, (np.array([0, -6]),), -6, 0, 5),
    (H1I, (np.array([1, 8, 3], np.int8),), 8, 0, 8),
    (H1I, (np.array([-9], np.int16),), -9, 0, 8),
    (H2, (np.array([0, 1]), np.array([1, 7])), 7, 1, 4),
    (H2, (np.array([0, -4]), np.array([1, 2])), -4, 0, 3),
    (H2I, (np.array([2, 0]), np.array([-5, 3])), -5, 1, 4),
    (H2, (slice(1, None), np.array([0, 4])), 4, 1, 4),
    (H2I, (np.array([[0], [3]]), np.array([1, 2])), 3, 0, 3),  # broadcast index arrays
    (H2, (np.array([0, 1]), 1), None, None, None),  # (an in-range control)
]


@pytest.mark.parametrize("op", ["set", "add"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("h,key,value,axis,size", OUT_OF_RANGE)
def test_out_of_range_scatter_leaves_target_untouched(device, h, key, value, axis, size,
                                                      form, op):
    x = fl.asarray(h)
    v = h.dtype.type(7)
    if value is None:
        ref = h.copy()
        _write(op, ref, key, v)
        _write(op, x, _key(form, key), v)
        np.testing.assert_array_equal(x.get(), ref)
        return
    with pytest.raises(IndexError):
        _write(op, h.copy(), key, v)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(value, axis, size)):
        _write(op, x, _key(form, key), v)
    np.testing.assert_array_equal(x.get(), h)


@pytest.mark.parametrize("op", ["set", "add"])
@pytest.mark.parametrize("form", FORMS)
def test_out_of_range_scatter_into_a_strided_view(device, form, op):
    h = np.arange(10.0)
    x = fl.asarray(h)
    view = x[::2]  # length 5, writes through to x
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(5, 0, 5)):
        _write(op, view, (_as(form, np.array([4, 5, 0])),), 1.0)
    np.testing.assert_array_equal(x.get(), h)
    ref = h.copy()
    _write(op, ref[::2], (np.array([4, -5, 1]),), 1.0)
    _write(op, view, (_as(form, np.array([4, -5, 1])),), 1.0)
    np.testing.assert_array_equal(x.get(), ref)


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_out_of_range_lazy_index_expression(device, dtype):
    h = np.arange(8).astype(dtype)
    x_int = fl.asarray(np.array([0, 1, 2, 3]))
    a = fl.asarray(h)
    with pytest.raises(IndexError):
        h.copy()[np.array([0, 1, 2, 3]) % 7 + 5] = 1
    # 5, 6, 7 are in range and would be written first by a scatter that checks late
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(8, 0, 8)):
        a[x_int % 7 + 5] = dtype(-1)
    np.testing.assert_array_equal(a.get(), h)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(8, 0, 8)):
        a[x_int % 7 + 5] += dtype(1)
    np.testing.assert_array_equal(a.get(), h)
    ref = h.copy()
    ref[np.array([0, 1, 2, 3]) % 7 + 4] = -1
    a[x_int % 7 + 4] = dtype(-1)
    np.testing.assert_array_equal(a.get(), ref)


def test_out_of_range_index_that_reads_the_target(device):
    h = np.array([0, 1, 2, 3, 4], np.int64)
    x = fl.asarray(h)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(5, 0, 5)):
        x[x % 4 + 2] = 9  # positions 2, 3, 4 in range, 5 not
    np.testing.assert_array_equal(x.get(), h)
    # the failed check left nothing that a later write would compute (and raise) again
    x[0:2] = 100
    ref = h.copy()
    ref[0:2] = 100
    np.testing.assert_array_equal(x.get(), ref)


def test_out_of_range_through_an_inner_gather(device):
    h = np.arange(6.0)
    b = fl.asarray(np.array([0, 1, 9]))
    x = fl.asarray(h)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(9, 0, 6)):
        x[b[fl.asarray(np.array([0, 2]))]] = -1.0  # the index is in range, its value not
    np.testing.assert_array_equal(x.get(), h)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(3, 0, 2)):
        x[b[:2][fl.asarray(np.array([0, 3]))]] = -1.0  # the inner gather's own index
    np.testing.assert_array_equal(x.get(), h)


def test_numpy_order_and_corner_cases(device):
    # a value that does not fit is reported first, as numpy does (ValueError)
    x = fl.asarray(H1)
    with pytest.raises(ValueError):
        H1.copy()[np.array([0, 12])] = np.ones(3)
    with pytest.raises(fl.errors.ShapeError):
        x[np.array([0, 12])] = fl.asarray(np.ones(3))
    np.testing.assert_array_equal(x.get(), H1)
    # numpy checks no index when the selection is empty
    m, ref = fl.asarray(H2), H2.copy()
    ref[np.array([], np.int64), np.array([9])] = 1
    m[np.array([], np.int64), np.array([9])] = 1
    m[fl.asarray(np.array([], np.int64)), fl.asarray(np.array([9]))] = 1
    np.testing.assert_array_equal(m.get(), ref)
    # an axis of length 0 has no valid index
    z = fl.zeros((0, 3))
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(0, 0, 0)):
        z[np.array([0])] = 1.0
    # uint64 values above int64's range wrap to negative ones, as in numpy
    for k in (np.array([2**64 - 1], np.uint64), np.array([2**63], np.uint64)):
        ref, x = H1.copy(), fl.asarray(H1)
        try:
            ref[k] = -1.0
        except IndexError:
            with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(-2**63, 0, 5)):
                x[k] = -1.0
        else:
            x[k] = -1.0
        np.testing.assert_array_equal(x.get(), ref)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("h,key", [
    (H1, (np.array([4, 0, -2]),)), (H2, (np.array([0, -1]), np.array([3, -4]))),
    (H2I, (np.array([[2], [0]]), np.array([1, -1, 0]))), (H2I, (slice(1, None), np.array([-1]))),
    (H2, (np.array([1, 2]), slice(None), )), (H2I, (Ellipsis, np.array([2, 0]))),
])
def test_in_range_scatter_matches_numpy(device, h, key, form):
    for op in ("set", "add"):
        x, ref = fl.asarray(h), h.copy()
        v = np.arange(np.size(ref[key]), dtype=h.dtype).reshape(np.shape(ref[key])) + 1
        _write(op, ref, key, v)
        _write(op, x, _key(form, key), fl.asarray(v))
        np.testing.assert_array_equal(x.get(), ref)


def _write_counts(make: Callable[[], Any], write: Callable[[Any], None]) -> dict[str, int]:
    """Kernels and scans of ``write`` into a new array ``make()`` (and its read)."""
    write(make())  # compiles everything once
    x = make()
    x.get()

    def write_and_read() -> None:
        write(x)
        x.get()

    done = counted(write_and_read)
    return {"kernels": done.launches, "scans": done["scans"]}


def test_launch_counts_of_in_range_scatters(device):
    """Host index arrays are checked on the host: one kernel, the scatter.  Device
    index arrays and expressions: one more, the check.  An expression's check (one per
    distinct index shape) computes the wrapped positions the scatter reads; computed
    arrays are checked together by one reduction (whether any value is out of range),
    and the scatter wraps them itself.  A mask's positions are in range by
    construction: no check."""
    i_np = np.array([0, 3, -2])
    i_fl = fl.asarray(i_np)
    j_fl = fl.asarray(np.array([1, -1, 2]))
    xi = fl.asarray(np.arange(3))

    def one() -> Any:
        return fl.asarray(np.arange(6.0))

    def two() -> Any:
        return fl.asarray(np.arange(20.0).reshape(4, 5))

    def host(a: Any) -> None:
        a[i_np] = 8.0

    def dev(a: Any) -> None:
        a[i_fl] = 8.0

    def lazy(a: Any) -> None:
        a[xi % 4 + 1] = 8.0

    def pair(a: Any) -> None:
        a[i_fl, j_fl] = 8.0  # two index arrays of one shape: one check

    def outer(a: Any) -> None:
        a[i_fl[:, None], j_fl] = 8.0  # two shapes, computed arrays: one check

    def masked(a: Any) -> None:
        a[a > 2] = fl.arange(3.0)  # one kernel for the mask, one scan, the scatter

    assert _write_counts(one, host) == {"kernels": 1, "scans": 0}
    assert _write_counts(one, dev) == {"kernels": 2, "scans": 0}
    assert _write_counts(one, lazy) == {"kernels": 2, "scans": 0}
    assert _write_counts(two, pair) == {"kernels": 2, "scans": 0}
    assert _write_counts(two, outer) == {"kernels": 2, "scans": 0}
    assert _write_counts(one, masked) == {"kernels": 2, "scans": 1}


@pytest.mark.parametrize("op", ["set", "add"])
def test_device_index_check_is_not_read_before_the_scatter(device, monkeypatch, op):
    """A computed device index array's check leaves its answer on the device: the
    scatter's stores are masked by it and it is read back once after the launch, not
    read (a host round trip) between the check and the scatter."""
    from fuseloop.ops import index_check

    monkeypatch.setattr(index_check, "GATE_ON_CPU", True)  # (a GPU's way, here)

    def read_first(*args: Any) -> Any:
        raise AssertionError("the check was read back before the scatter's launch")

    monkeypatch.setattr(index_check, "check_in_range", read_first)
    h = np.arange(6.0)
    k = np.array([1, -2, 1, 5])
    x = fl.asarray(h)
    _write(op, x, (fl.asarray(k),), fl.asarray(np.array([1.0, 2.0, 3.0, 4.0])))
    ref = h.copy()
    _write(op, ref, (k,), np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(x.get(), ref)
    # out of range: numpy's message naming the first bad value, nothing written
    y = fl.asarray(h)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(-9, 0, 6)):
        _write(op, y, (fl.asarray(np.array([2, -9, 1, 4])),), 5.0)
    np.testing.assert_array_equal(y.get(), h)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_add_at_with_device_indices_of_other_dtypes(device, monkeypatch, dtype):
    """``fl.add.at`` with negative and repeated device indices into float64 and int32
    targets matches numpy; out of range it raises and writes nothing (gated as on a GPU)."""
    from fuseloop.ops import index_check

    monkeypatch.setattr(index_check, "GATE_ON_CPU", True)
    h = np.arange(7).astype(dtype)
    k = np.array([0, -1, 3, 3, -7, 6, 0, 0])
    v = np.arange(1, 9).astype(dtype)
    x = fl.asarray(h)
    fl.add.at(x, fl.asarray(k), fl.asarray(v) * 2)  # (the values' expression fused)
    ref = h.copy()
    np.add.at(ref, k, v * 2)
    np.testing.assert_array_equal(x.get(), ref)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(7, 0, 7)):
        fl.add.at(x, fl.asarray(np.r_[k, 7, -8]), fl.asarray(np.r_[v, 1, 1]))
    np.testing.assert_array_equal(x.get(), ref)
