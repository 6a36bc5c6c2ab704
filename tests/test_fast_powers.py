"""``x ** 2``, ``x ** 0.5`` and ``x ** -1`` as numpy's operator computes them (square, sqrt,
reciprocal: exact, and no ``pow`` call in the kernel); other small whole and half-whole
constant powers by products (``fuseloop.powers``): numpy's values within a few units in
the last place, special values and dtypes included."""

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
    (3, "fl_square", "pow("), (-1.5, "sqrt", "pow("), (1.25, "pow(", "fl_square")])
def test_fast_powers_emit_no_pow(device, exponent, present, absent):
    x = fl.asarray(np.linspace(1, 2, 64, dtype=np.float32), device=device)
    source = fl.program(x ** exponent).compile().source
    assert present in source and absent not in source


def test_integer_and_reflected_powers_keep_power(device):
    i = fl.asarray(np.arange(6), device=device)
    np.testing.assert_array_equal((i ** 2).get(), np.arange(6) ** 2)
    x = fl.asarray(np.linspace(1, 2, 8, dtype=np.float32), device=device)
    assert "pow(" in fl.program(2 ** x).compile().source


SPECIAL = [-np.inf, -4.0, -0.0, 0.0, 1e-30, 1e-10, 0.3, 2.0, 3.7, 1e10, np.inf, np.nan]
EXPONENTS = [1.5, -1.5, -0.5, 2.5, -2.5, 3, -2, 4, -4, 3.5, -3.5, 4.0, -3]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_powers_match_numpy(device, dtype):
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("no fp64")
    h = np.concatenate([np.array(SPECIAL, dtype),
                        np.random.default_rng(0).uniform(0.01, 50, 64).astype(dtype)])
    x = fl.asarray(h)
    rtol = 1e-6 if dtype == np.float32 else 4e-15
    for e in EXPONENTS:
        with np.errstate(all="ignore"):
            ref = h ** e
        got = (x ** e).get()
        assert got.dtype == ref.dtype, e
        np.testing.assert_allclose(got, ref, rtol=rtol, err_msg=f"x ** {e}")
        finite = ~np.isnan(ref)
        np.testing.assert_array_equal(np.signbit(got)[finite], np.signbit(ref)[finite])


def test_lazy_power_by_products_one_kernel_per_exponent(device):
    """``d2 ** -1.5`` of a lazy expression: numpy's value within the products' rounding,
    in the kernel of the expression; a new base of the same structure reuses the kernel,
    another exponent is another kernel (the exponent is structure)."""
    rng = np.random.default_rng(5)
    hs = [rng.uniform(0.1, 4, 300).astype(np.float32) for _ in range(3)]
    xs = [fl.asarray(h, device=device) for h in hs]
    for e in (-1.5, 2.5, 3):
        (xs[0] * xs[0] + 1e-3) ** e  # (built and dropped: nothing runs)
        got = ((xs[0] * xs[0] + 1e-3) ** e).get()
        fl.reset_stats()
        for x, h in zip(xs[1:], hs[1:]):
            with np.errstate(all="ignore"):
                want = (h * h + np.float32(1e-3)) ** e
            np.testing.assert_allclose(((x * x + 1e-3) ** e).get(), want, rtol=1e-6)
        s = fl.stats()
        assert s["kernels_launched"] == 2 and s["kernels_lowered"] == 0, (e, s)
        assert got.dtype == np.float32


def test_power_of_constant_exponent_equals_operator(device):
    """``x ** fl.constant(e)`` is the operator's node: the same products, bit for bit."""
    h = np.concatenate([np.array(SPECIAL, np.float32),
                        np.random.default_rng(1).uniform(0.01, 50, 64).astype(np.float32)])
    x = fl.asarray(h, device=device)
    for e in (-1.5, 3, -2):
        np.testing.assert_array_equal((x ** fl.constant(e)).get(), (x ** e).get())


def test_host_path_powers_equal_kernels(host):
    """Small work computed by numpy on the host gives the kernel's products, bit for bit."""
    from fuseloop import host_path

    h = np.concatenate([np.array(SPECIAL, np.float64),
                        np.random.default_rng(2).uniform(0.01, 50, 64)])
    x = fl.asarray(h, device=host)
    for e in EXPONENTS:
        fl.clear_caches()  # (4.0 after 4: the kernel's plan, kept by signature, would run)
        before = fl.stats()["host_evaluations"]
        on_host = ((x + 0.0) ** e).get()
        assert fl.stats()["host_evaluations"] == before + 1, e
        host_path.HOST_MAX_WORK = 0
        try:
            on_device = ((x + 0.0) ** e).get()
        finally:
            host_path.HOST_MAX_WORK = 1 << 14
        np.testing.assert_array_equal(on_host, on_device, err_msg=f"x ** {e}")
