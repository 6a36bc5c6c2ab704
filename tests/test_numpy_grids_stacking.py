"""numpy's grids (``mgrid``, ``ogrid``), the ``ndarray`` constructor and the stacking
functions (``hstack``, ``vstack``, ``dstack``, ``column_stack``, ``atleast_*d``) that
code written for numpy or CuPy calls, against numpy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuseloop as fl

GRIDS = [
    (slice(0, 5), slice(0, 3)),
    (slice(2, 10, 3), slice(1, 4)),
    (slice(-1, 1, 5j), slice(0, 2, 0.5)),  # a complex step: points, stop included
    (slice(0, 3), slice(0, 2), slice(1, 3)),
]


@pytest.mark.parametrize("key", GRIDS)
def test_mgrid_ogrid_match_numpy(device, key):
    with fl.device(device):
        dense = fl.mgrid[key]
        ref = np.mgrid[key]
        got = dense.get()
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
        for a, b in zip(fl.ogrid[key], np.ogrid[key], strict=True):
            assert a.shape == b.shape
            np.testing.assert_array_equal(a.get(), b)
        # one slice: a 1-D array, as numpy's
        np.testing.assert_array_equal(fl.mgrid[key[0]].get(), np.mgrid[key[0]])


def test_grid_bad_keys():
    with pytest.raises(TypeError, match="slices"):
        fl.mgrid[3]
    with pytest.raises(TypeError, match="stop"):
        fl.ogrid[0:, 0:2]


def test_ndarray_constructor(device):
    with fl.device(device):
        x = fl.ndarray((3, 4), dtype=np.float32)
        assert (x.shape, x.dtype) == ((3, 4), np.float32)
        assert isinstance(x, fl.ndarray) and isinstance(fl.asarray([1.0]), fl.ndarray)
        assert not isinstance(np.zeros(2), fl.ndarray)
        x[...] = 2
        np.testing.assert_array_equal(x.get(), np.full((3, 4), 2, np.float32))
        if device.has_fp64:
            assert fl.ndarray(5).dtype == np.float64  # numpy's default: float
    with pytest.raises(TypeError, match="buffer"):
        fl.ndarray((2,), buffer=b"12345678")


@pytest.mark.parametrize("name", ["hstack", "vstack", "dstack", "column_stack"])
def test_stacking_matches_numpy(device, name):
    rng = np.random.default_rng(0)
    cases = [(rng.random((2, 3)), rng.random((2, 3))), (rng.random(3), rng.random(3)),
             (rng.random((2, 3, 2)), rng.random((2, 3, 2)))]
    with fl.device(device):
        for arrays in cases:
            ref = getattr(np, name)(arrays)
            got = getattr(fl, name)([fl.asarray(a) for a in arrays]).get()
            assert got.shape == ref.shape
            np.testing.assert_array_equal(got, ref)
        for f in ("atleast_1d", "atleast_2d", "atleast_3d"):
            for h in (np.float64(1.5), rng.random(3), rng.random((2, 3))):
                assert getattr(fl, f)(fl.asarray(h)).shape == getattr(np, f)(h).shape
    with pytest.raises(TypeError, match="sequence"):
        getattr(fl, name)(fl.asarray(np.ones(3)))


def test_complex_solve_runs_on_the_device_without_a_warning(cpu):
    """(NPBench's contour_integral: a complex solve; on the device since cplx27)"""
    rng = np.random.default_rng(1)
    a = rng.random((6, 6)) + 1j * rng.random((6, 6)) + 6 * np.eye(6)
    b = rng.random(6) + 1j * rng.random(6)
    with fl.device(cpu), warnings.catch_warnings():
        warnings.simplefilter("error", fl.HostFallbackWarning)
        x = fl.linalg.solve(fl.asarray(a), fl.asarray(b))
    np.testing.assert_allclose(x.get(), np.linalg.solve(a, b), rtol=1e-12)
