"""``x ** 2``, ``x ** 0.5`` and ``x ** -1`` as numpy's operator computes them (square, sqrt,
reciprocal: exact, and no ``pow`` call in the kernel)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("exponent", [2, 2.0, 0.5, -1, -1.0])
def test_fast_powers_equal_numpy(device, dtype, exponent):
    if not device.has_fp64 and np.dtype(dtype) == np.float64:
        pytest.skip("no float64 on this device")
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, 257).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = (x + 1j * rng.uniform(-3, 3, 257)).astype(dtype)
    x[:3] = [0, -0.0, 1]
    got = (fl.asarray(x, device=device) ** exponent).get()
    with np.errstate(all="ignore"):
        want = x ** exponent
    assert got.dtype == want.dtype
    if np.dtype(dtype).kind == "c":  # (complex sqrt/reciprocal: the device's own rounding)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("exponent, present, absent", [
    (2, "fl_square", "pow("), (0.5, "sqrt", "pow("), (-1, "fl_reciprocal", "pow("),
    (3, "pow(", "fl_square")])
def test_fast_powers_emit_no_pow(device, exponent, present, absent):
    x = fl.asarray(np.linspace(1, 2, 64, dtype=np.float32), device=device)
    source = fl.program(x ** exponent).compile().source
    assert present in source and absent not in source


def test_integer_and_reflected_powers_keep_power(device):
    i = fl.asarray(np.arange(6), device=device)
    np.testing.assert_array_equal((i ** 2).get(), np.arange(6) ** 2)
    x = fl.asarray(np.linspace(1, 2, 8, dtype=np.float32), device=device)
    assert "pow(" in fl.program(2 ** x).compile().source
