"""Regression tests for bugs found by the differential fuzzer (tests/test_fuzz.py).

Each is a minimal hand-written example compared against numpy.
"""

from __future__ import annotations

import numpy as np

import fuseloop as fl


def test_asarray_keeps_zero_dimensional_shape(device):
    for host in (np.array(False), np.array(3, np.int8), np.float32(2.5), 7.0):
        x = fl.asarray(host)
        assert x.shape == np.shape(host) == ()
        np.testing.assert_array_equal(x.get(), np.asarray(host))
        assert (x + 1).shape == np.shape(np.asarray(host) + 1) == ()
        np.testing.assert_array_equal((x + 1).get(), np.asarray(host) + 1)


def test_bool_scalar_kernel_arguments(device):
    # numpy bool scalars became kernel arguments that pyopencl could not pack (std::bad_cast)
    h = np.array([True, False, True])
    x = fl.asarray(h)
    np.testing.assert_array_equal(fl.logical_and(x, 0).get(), np.logical_and(h, 0))
    np.testing.assert_array_equal((x | np.True_).get(), h | np.True_)
    np.testing.assert_array_equal(fl.where(x, False, True).get(), np.where(h, False, True))
    y = fl.asarray(h)
    y[1:] = 0
    ref = h.copy()
    ref[1:] = 0
    np.testing.assert_array_equal(y.get(), ref)


def test_scatter_whose_axes_could_be_merged(device):
    # the scatter index was dropped when the output's axes were merged into one loop:
    # rows of a C-ordered array, or a single index, were written to the first positions
    v = np.arange(6.0).reshape(2, 3)
    a, ref = fl.asarray(np.zeros((3, 3))), np.zeros((3, 3))
    a[np.array([2, 0])] = fl.asarray(v)
    ref[[2, 0]] = v
    np.testing.assert_array_equal(a.get(), ref)
    b, ref = fl.asarray(np.zeros(4, np.int8)), np.zeros(4, np.int8)
    b[np.array([3])] = 1
    ref[[3]] = 1
    np.testing.assert_array_equal(b.get(), ref)
    c, ref = fl.asarray(np.zeros((2, 3), bool)), np.zeros((2, 3), bool)
    c[:, np.array([-1])] = fl.asarray(np.array(1, np.int8))
    ref[:, [-1]] = np.array(1, np.int8)
    np.testing.assert_array_equal(c.get(), ref)
