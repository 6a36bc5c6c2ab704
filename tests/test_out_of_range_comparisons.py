"""Comparisons of integer arrays with Python ints outside the dtype's range follow numpy 2:
the numbers are compared (``uint8_array < -1`` is all False), while arithmetic with such an
int still raises numpy's OverflowError."""

import operator

import numpy as np
import pytest

import fuseloop as fl

COMPARISONS = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("shape", [(), (7,), (2, 3)])
@pytest.mark.parametrize("value", [-1, -300, 300, 2**64, 3])
def test_operators_match_numpy(device, dtype, shape, value):
    host = (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)
    x = fl.asarray(host, device=device)
    for compare in COMPARISONS:
        for int_on_left in (False, True):
            want = compare(value, host) if int_on_left else compare(host, value)
            got = compare(value, x) if int_on_left else compare(x, value)
            got = np.asarray(got.get() if isinstance(got, fl.Array) else got)
            assert got.dtype == np.bool_ and got.shape == np.shape(want), compare
            np.testing.assert_array_equal(got, want, err_msg=f"{compare.__name__}")


def test_functions_and_fusion_match_numpy(device):
    host = np.arange(12, dtype=np.uint8).reshape(3, 4)
    x = fl.asarray(host, device=device)
    np.testing.assert_array_equal(fl.less(x, -1).get(), np.less(host, -1))
    np.testing.assert_array_equal(fl.greater(-1, x).get(), np.greater(-1, host))
    np.testing.assert_array_equal(fl.not_equal(x, 256).get(), np.not_equal(host, 256))
    combined = ((x < -1) | (x > 9)) & (x != 1000)
    np.testing.assert_array_equal(combined.get(), ((host < -1) | (host > 9)) & (host != 1000))


def test_arithmetic_still_raises(device):
    x = fl.asarray(np.arange(4, dtype=np.uint8), device=device)
    with pytest.raises(OverflowError, match="-1"):
        x + -1
    with pytest.raises(OverflowError, match="300"):
        fl.multiply(300, x)


def test_values_from_iteration_match_numpy(device):
    host = np.arange(3, dtype=np.uint8)
    for got, want in zip(fl.asarray(host, device=device), host, strict=True):
        assert bool(got < -1) == bool(want < -1)
        assert bool(got != 300) == bool(want != 300)
        assert bool(-5 <= got) == bool(-5 <= want)
