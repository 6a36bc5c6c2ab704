"""Bad input gets a clear error and leaves outputs and caches intact."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.runtime import devices as devmod


def test_shapes_that_do_not_broadcast(device):
    x, y = fl.asarray(np.ones((3, 4))), fl.asarray(np.ones(5))
    with pytest.raises(fl.errors.ShapeError, match=r"\(3, 4\).*\(5,\)"):
        x + y
    with pytest.raises(ValueError):  # ShapeError is a ValueError
        fl.where(x > 0, x, y)


def test_assignment_of_wrong_shape_leaves_output_untouched(device):
    out = fl.asarray(np.arange(6.0))
    with pytest.raises(fl.errors.ShapeError, match=r"\(7,\).*\(6,\)"):
        out[...] = fl.asarray(np.ones(7))
    with pytest.raises(fl.errors.ShapeError):
        out[...] = fl.asarray(np.ones((2, 6)))
    np.testing.assert_array_equal(out.get(), np.arange(6.0))


def test_failed_build_leaves_output_untouched(device):
    out = fl.asarray(np.arange(4, dtype=np.float32))
    bad = fl.function("float bad(float x)", "return x + ;")
    with pytest.raises(fl.errors.KernelBuildError):
        out[...] = bad(out)
    np.testing.assert_array_equal(out.get(), np.arange(4, dtype=np.float32))


def test_unsupported_dtypes(device):
    # complex arrays and scalars are supported since issue 27 (tests/test_complex.py)
    with pytest.raises(fl.errors.DTypeError, match="float16"):
        fl.zeros(3, np.float16)
    with pytest.raises(fl.errors.DTypeError, match="is not supported by fuseloop"):
        fl.asarray(np.ones(3, np.clongdouble))
    with pytest.raises(fl.errors.DTypeError, match="str"):
        fl.asarray(np.ones(3, np.float32)) + "a"
    with pytest.raises(fl.errors.DTypeError):
        fl.bitwise_and(fl.asarray(np.ones(3)), 1)  # numpy has no float loop either


def test_float64_on_device_without_fp64(device, monkeypatch):
    import dataclasses

    no_fp64 = dataclasses.replace(device, has_fp64=False)
    monkeypatch.setitem(devmod._runtimes, no_fp64.index, devmod._runtime(device))
    with fl.device(no_fp64):
        with pytest.raises(fl.errors.DTypeError, match="float64"):
            fl.asarray(np.ones(3))
        x = fl.asarray(np.arange(3, dtype=np.int32))
        with pytest.raises(fl.errors.DTypeError, match="float64"):
            (x / 2).get()  # int32 / int -> float64, as in numpy
        np.testing.assert_allclose((x.astype(np.float32) / 2).get(), [0, 0.5, 1])


def test_arrays_on_different_devices(device, monkeypatch):
    import dataclasses

    other = dataclasses.replace(device, index=device.index + 1000)
    monkeypatch.setitem(devmod._runtimes, other.index, devmod._runtime(device))
    a = fl.asarray(np.ones(3, np.float32))
    with fl.device(other):
        b = fl.asarray(np.ones(3, np.float32))
    with pytest.raises(fl.errors.DeviceError, match="different devices"):
        a + b
    with pytest.raises(fl.errors.DeviceError):
        a[...] = b


def test_device_spec_naming_no_device(monkeypatch):
    with pytest.raises(fl.errors.DeviceNotFoundError, match="available devices"):
        fl.set_device("no-such-device-xyz")
    monkeypatch.setenv("FUSELOOP_DEVICE", "no-such-device-xyz")
    monkeypatch.setattr(devmod, "_default", None)
    with pytest.raises(fl.errors.DeviceNotFoundError, match="FUSELOOP_DEVICE"):
        fl.get_device()


def test_allocation_larger_than_device_allows(device):
    with pytest.raises(fl.errors.DeviceMemoryError, match="bytes"):
        fl.empty(device.max_alloc_size + 8, np.uint8)
    np.testing.assert_array_equal(fl.ones(3).get(), np.ones(3))  # still usable


def test_bad_indices_are_clear_errors(device):
    x = fl.asarray(np.arange(5))
    with pytest.raises(ValueError, match="step cannot be zero"):
        x[::0]
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 5"):
        x[7]
    with pytest.raises(IndexError, match="too many indices"):
        x[1, 2]
    with pytest.raises(IndexError, match="only integers, slices"):
        x[1.5]
    with pytest.raises(fl.errors.DTypeError, match="integer type, got float64"):
        x[np.array([0.0, 1.0])]
    np.testing.assert_array_equal(x[np.array([True, False, True, False, True])].get(), [0, 2, 4])
    with pytest.raises(fl.errors.InvalidIndexError, match="boolean index did not match indexed "
                       "array along axis 0; size of axis is 5 but size of corresponding boolean "
                       "axis is 4"):
        x[np.array([True, False, True, False])]
    with pytest.raises(fl.errors.InvalidIndexError, match=r"could not be broadcast together "
                       r"with shapes \(2,\) \(3,\)"):
        fl.asarray(np.ones((3, 3)))[[0, 1], [0, 1, 2]]
