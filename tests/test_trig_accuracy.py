"""Accuracy of sin and cos over a wide argument range, in ULPs against float64 numpy.

float32 sin/cos are the device's builtins (fuseloop never compiles with relaxed math), so
the bound is OpenCL's full-profile one, 4 ULPs.  Measured maxima: 1.48 on an H200 (a sample
of all magnitudes, benchmarks/probes/gpu_sin_probe.py); on PoCL 1.63 over every float32 in
[0, 2**17] and 2.1 on a sample beyond.  The arguments stress range reduction: every
magnitude up to the largest float32, the float32 nearest to multiples of pi/2, subnormals,
signed zeros, infinities and NaN.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import fuseloop as fl

MAX_ULP = 4.0  # OpenCL 1.2 full profile, sin and cos (float)
MODERATE = 2.0**17  # dense sampling below this magnitude
F32_MAX_BITS = 0x7F7FFFFF  # largest finite float32


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the float32 ULP at ``want`` (float64 reference)."""
    mag = np.abs(want).astype(np.float32)
    exp = np.floor(np.log2(np.maximum(mag, np.float32(2.0**-126)))).astype(np.int32)
    return np.abs(got.astype(np.float64) - want) / np.ldexp(1.0, exp - 23)


def arguments() -> np.ndarray:
    """Finite float32 arguments of both signs, weighted towards the hard cases."""
    rng = np.random.default_rng(42)
    parts = [
        # every magnitude: random bit patterns of all finite float32
        rng.integers(0, F32_MAX_BITS + 1, 400_000, dtype=np.uint32).view(np.float32),
        # dense at moderate magnitudes, uniform in value
        rng.uniform(0, MODERATE, 400_000).astype(np.float32),
        rng.uniform(0, 8, 200_000).astype(np.float32),
        # consecutive float32 around 1, pi/4, pi/2, pi, and small arguments
        *(np.arange(b - 5000, b + 5000, dtype=np.uint32).view(np.float32)
          for b in (np.float32(v).view(np.uint32)
                    for v in (1.0, np.pi / 4, np.pi / 2, np.pi, 3 * np.pi / 2, 1e-3))),
        # subnormals and the smallest normals
        np.arange(1, 20_000, dtype=np.uint32).view(np.float32),
        rng.integers(1, 0x00800000, 50_000, dtype=np.uint32).view(np.float32),
        np.arange(0x00800000 - 100, 0x00800000 + 100, dtype=np.uint32).view(np.float32),
        # around 2**17 and the largest finite values
        np.arange(np.float32(MODERATE).view(np.uint32) - 2000,
                  np.float32(MODERATE).view(np.uint32) + 2000,
                  dtype=np.uint32).view(np.float32),
        np.arange(F32_MAX_BITS - 1000, F32_MAX_BITS + 1, dtype=np.uint32).view(np.float32),
    ]
    # the float32 nearest to each multiple of pi/2 (and its neighbours): the arguments
    # whose reduced value is tiny, where a short reduction loses all its digits
    k = np.arange(1, int(MODERATE / (np.pi / 2)) + 2)
    near = (k * (np.pi / 2)).astype(np.float32).view(np.uint32)
    parts += [(near.astype(np.int64) + d).astype(np.uint32).view(np.float32) for d in (-1, 0, 1)]
    for extra in (1e5, 1e6, 1e7, 1e10, 1e20, 3e38):
        parts.append((extra * rng.random(20_000)).astype(np.float32))
    x = np.concatenate([p.astype(np.float32) for p in parts])
    return np.concatenate([x, -x])


def flushes_denormals(device: fl.Device) -> bool:
    if device.backend != "opencl":
        return False  # (CUDA keeps float32 subnormals unless built with -ftz=true)
    return not (device.cl_device.single_fp_config & cl.device_fp_config.DENORM)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float32_ulps(device, name):
    x = arguments()
    got = getattr(fl, name)(fl.asarray(x)).get()
    assert got.dtype == np.float32
    want = getattr(np, name)(x.astype(np.float64))
    err = ulp_error(got, want)
    subnormal = (x != 0) & (np.abs(x) < np.float32(2.0**-126))
    if flushes_denormals(device):
        # a subnormal argument may be read as zero: sin gives +-0 (or x), cos 1
        ok = np.isclose(got, 0.0 if name == "sin" else 1.0, atol=0) | (err <= MAX_ULP)
        err = np.where(subnormal & ok, 0.0, err)
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULP, (name, float(x[worst]), float(got[worst]),
                                   float(want[worst]), float(err[worst]))


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float32_special_values(device, name):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], np.float32)
    got = getattr(fl, name)(fl.asarray(x)).get()
    with np.errstate(invalid="ignore"):
        want = getattr(np, name)(x)
    np.testing.assert_array_equal(got, want)
    if name == "sin":  # the sign of zero is kept
        assert np.signbit(got[:2]).tolist() == [False, True]


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float32_subnormal_sin_is_exact(device, name):
    if flushes_denormals(device):
        pytest.skip("device flushes float32 denormals")
    x = np.array([1e-45, -1e-45, 1e-40, -3e-39, 1.1754942e-38], np.float32)
    got = getattr(fl, name)(fl.asarray(x)).get()
    want = x if name == "sin" else np.ones_like(x)
    np.testing.assert_array_equal(got, want)
    if name == "sin":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(x))


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float32_in_a_fused_expression(device, name):
    # the helper inlined among other operations, with a broadcast scalar
    rng = np.random.default_rng(3)
    xh = (rng.standard_normal(100_003) * 1000).astype(np.float32)
    x = fl.asarray(xh)
    f = getattr(fl, name)
    got = (f(x) * 2 + f(x * 0.5)).get()
    ref = getattr(np, name)
    want = ref(xh.astype(np.float64)) * 2 + ref((xh * np.float32(0.5)).astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=0, atol=8 * 2.0**-23)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float64_still_accurate(device, name):
    if not device.has_fp64:
        pytest.skip("no fp64")
    x = np.concatenate([np.linspace(-1e4, 1e4, 100_001), [0.0, -0.0, 1e300, -1e-310]])
    got = getattr(fl, name)(fl.asarray(x)).get()
    want = getattr(np, name)(x)
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * 2.0**-52)
