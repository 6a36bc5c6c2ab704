"""Regression tests for the value and protocol defects of issue 23 (an independent
test campaign): fill values, 64-bit indices of lazy sources, copy and pickle,
``shape`` assignment, byte order, numpy's reduction keywords, ``__array__``'s
``copy``, pyopencl arrays and ``linspace``'s ``num``."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.expr.program import Target, linearize
from fuseloop.launching import INT32_LIMIT

BIG = 2**31 + 100  # a lazy length past int32's range (no buffer is allocated)


# {{{ 2. index expressions of lazy sources past 2**31

@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_strided_arange_longer_than_int32(device, dtype):
    got = fl.arange(BIG, dtype=dtype)[::2**30].get()
    np.testing.assert_array_equal(got, np.array([0, 2**30, 2**31], dtype=dtype))


def test_strided_linspace_longer_than_int32(device):
    n = BIG + 1
    got = fl.linspace(0.0, 1.0, n)[::2**30].get()
    np.testing.assert_allclose(got, np.array([0, 2**30, 2**31]) / (n - 1), rtol=1e-15)


def test_lazy_views_past_int32(device):
    # reversed, offset and two-dimensional views of a lazy source, mixed with a buffer
    np.testing.assert_array_equal(fl.arange(2**32)[::-2**30].get(),
                                  [2**32 - 1 - k * 2**30 for k in range(4)])
    np.testing.assert_array_equal(fl.arange(BIG)[-2:].get(), [BIG - 2, BIG - 1])
    grid = fl.arange(2**32).reshape(2**16, 2**16)[::2**15, ::2**15]
    np.testing.assert_array_equal(grid.get(), [[0, 2**15], [2**31, 2**31 + 2**15]])
    mixed = fl.arange(BIG)[::2**30] + fl.asarray(np.arange(3))
    np.testing.assert_array_equal(mixed.get(), [0, 2**30 + 1, 2**31 + 2])
    assert float(fl.arange(3 * 2**30, dtype=np.float64)[::2**30].sum()) == 3 * 2**30


def test_strided_target_counts_for_the_index_type(device):
    # a strided write target is no input: its reach must still widen the indices
    store = fl.zeros(4, np.int8)._storage
    value = fl.arange(3)._node
    _, small = linearize([value], (3,), targets=[Target(store, (2,), 0)])
    assert max(small.params, default=0) <= INT32_LIMIT
    _, big = linearize([value], (3,), targets=[Target(store, (2**30,), 0)])
    assert max(big.params) > INT32_LIMIT

# }}}
