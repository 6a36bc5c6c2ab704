"""``fl.fft`` (the Array API's fft extension) against ``numpy.fft`` (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import AxisError, DTypeError
from fuseloop.ops.fft_kernels import factor

TOL = {np.complex128: 1e-12, np.float64: 1e-12, np.complex64: 2e-5, np.float32: 2e-5}


def _close(got, want):
    assert isinstance(got, fl.Array)
    g = got.get()
    assert g.shape == want.shape and g.dtype == want.dtype, (g.shape, g.dtype, want.shape,
                                                               want.dtype)
    tol = TOL[want.dtype.type] * max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(g, want, rtol=0, atol=tol)


def _cdata(shape, dtype=np.complex128, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _skip_no_fp64(device):
    if not device.has_fp64:
        pytest.skip(f"{device.name} has no float64")


def test_factor():
    assert factor(2**10) == [16, 16, 4] and factor(2**7) == [16, 8]
    assert factor(60) == [4, 3, 5]
    assert factor(97) is None and factor(14) is None
    assert factor(1) == []


def test_radix_256_passes(device, monkeypatch):
    # the GPU plan (local-memory passes of radix 16 x 16), forced on whatever device runs
    from fuseloop.ops import fft_kernels, fft_local

    monkeypatch.setattr(fft_local, "_override", {"legacy": 1})  # the per-radix passes
    monkeypatch.setattr(fft_kernels, "wide_passes", lambda dev: True)
    # (complex128's groups hold 8 butterflies, not 16; checked by hand, not here: time)
    assert fft_kernels.plan(2048, np.dtype(np.complex128), device) == [256, 8]
    n = 4096 * 3
    assert fft_kernels.plan(n, np.dtype(np.complex64), device) == [256, 16, 3]
    a = _cdata((2, n), np.complex64, seed=4)
    _close(fl.fft.fft(fl.asarray(a), norm="ortho"), np.fft.fft(a, norm="ortho"))
    _close(fl.fft.ifft(fl.asarray(a)), np.fft.ifft(a))
    # n / 256 not a multiple of a group's 16 butterflies: radix 16 passes only
    assert fft_kernels.plan(256 * 8, np.dtype(np.complex64), device) == [16, 16, 8]


# 32: radix 16 and 2; 60: 4, 3, 5; 97: prime (Bluestein over a 2-3-5-smooth length)
@pytest.mark.parametrize("n", [32, 60, 97])
def test_fft_ifft_lengths(device, n):
    _skip_no_fp64(device)
    a = _cdata((3, n))
    x = fl.asarray(a)
    _close(fl.fft.fft(x), np.fft.fft(a))
    _close(fl.fft.ifft(x), np.fft.ifft(a))


def test_complex64_and_real_input(device):
    a = _cdata((2, 48), np.complex64)
    _close(fl.fft.ifft(fl.asarray(a), n=35), np.fft.ifft(a, n=35))  # (Bluestein)
    r = a.real.copy()
    _close(fl.fft.fft(fl.asarray(r)), np.fft.fft(r))  # float32 -> complex64, as numpy


def test_axis_n_and_norm(device):
    _skip_no_fp64(device)
    a = _cdata((4, 6, 5))
    x = fl.asarray(a)
    for norm in ("backward", "ortho", "forward"):
        # zero padding (n > length) and truncation (n < length) along a leading axis
        _close(fl.fft.fft(x, n=7, axis=0, norm=norm), np.fft.fft(a, n=7, axis=0, norm=norm))
        _close(fl.fft.ifft(x, n=3, axis=1, norm=norm), np.fft.ifft(a, n=3, axis=1, norm=norm))


def test_fftn_ifftn(device):
    _skip_no_fp64(device)
    a = _cdata((4, 6, 5))
    x = fl.asarray(a)
    _close(fl.fft.fftn(x), np.fft.fftn(a))
    _close(fl.fft.ifftn(x, norm="ortho"), np.fft.ifftn(a, norm="ortho"))
    _close(fl.fft.fftn(x, s=(5, 3), axes=(2, 0)), np.fft.fftn(a, s=(5, 3), axes=(2, 0)))
    _close(fl.fft.ifftn(x, axes=(1,), norm="forward"),
           np.fft.ifftn(a, axes=(1,), norm="forward"))


def test_real_transforms(device):
    _skip_no_fp64(device)
    r = np.random.default_rng(1).standard_normal((4, 10))
    h = np.fft.rfft(r)
    x, hx = fl.asarray(r), fl.asarray(h)
    _close(fl.fft.rfft(x), np.fft.rfft(r))
    _close(fl.fft.rfft(x, n=9, axis=0, norm="ortho"), np.fft.rfft(r, n=9, axis=0, norm="ortho"))
    for n in (None, 7, 1):  # default 2(m-1), odd, one point
        _close(fl.fft.irfft(hx, n=n, norm="forward"), np.fft.irfft(h, n=n, norm="forward"))
    # imaginary parts at the zero and Nyquist frequencies: ignored, as numpy ignores them
    hr = _cdata((4, 6), seed=6)
    _close(fl.fft.irfft(fl.asarray(hr), n=10, norm="ortho"), np.fft.irfft(hr, n=10, norm="ortho"))
    _close(fl.fft.hfft(hx, norm="ortho"), np.fft.hfft(h, norm="ortho"))
    _close(fl.fft.ihfft(x, n=7), np.fft.ihfft(r, n=7))


def test_real_nd_transforms(device):
    _skip_no_fp64(device)
    r = np.random.default_rng(2).standard_normal((4, 6, 5))
    _close(fl.fft.rfftn(fl.asarray(r), s=(5, 8), axes=(0, 1)),
           np.fft.rfftn(r, s=(5, 8), axes=(0, 1)))
    h = np.fft.rfftn(r)
    _close(fl.fft.irfftn(fl.asarray(h), s=(3, 7), axes=(1, 2)),
           np.fft.irfftn(h, s=(3, 7), axes=(1, 2)))


def test_single_precision_real(device):
    r = np.random.default_rng(3).standard_normal((3, 12)).astype(np.float32)
    _close(fl.fft.rfft(fl.asarray(r)), np.fft.rfft(r))
    h = np.fft.rfft(r)
    _close(fl.fft.irfft(fl.asarray(h)), np.fft.irfft(h))


def test_frequencies_and_shifts(device):
    for n in (7, 8):
        _close(fl.fft.fftfreq(n, d=0.25, dtype=np.float32), np.fft.fftfreq(n, 0.25)
               .astype(np.float32))
        _close(fl.fft.rfftfreq(n, d=0.25, dtype=np.float32), np.fft.rfftfreq(n, 0.25)
               .astype(np.float32))
    a = np.arange(35, dtype=np.float32).reshape(5, 7)
    x = fl.asarray(a)
    _close(fl.fft.fftshift(x), np.fft.fftshift(a))
    _close(fl.fft.ifftshift(x, axes=1), np.fft.ifftshift(a, axes=1))


def test_numpy_dispatch(device):
    a = _cdata((8,), np.complex64)
    got = np.fft.fft(fl.asarray(a))
    _close(got, np.fft.fft(a))


def test_kernels_are_cached(device, fresh_stats):
    a = fl.asarray(_cdata((2, 40), np.complex64))
    fl.fft.fft(a).get()
    before = fresh_stats()
    fl.fft.fft(fl.asarray(_cdata((2, 40), np.complex64, seed=1))).get()
    after = fresh_stats()
    assert after["kernels_compiled"] == before["kernels_compiled"]
    assert after["kernels_launched"] > before["kernels_launched"]


def test_errors(device):
    x = fl.asarray(_cdata((3, 4), np.complex64))
    with pytest.raises(ValueError, match="number of FFT data points"):
        fl.fft.fft(x, n=0)
    with pytest.raises(ValueError, match="number of FFT data points"):
        fl.fft.irfft(fl.asarray(np.ones(1, np.complex64)))  # default n = 2(m-1) = 0
    with pytest.raises(AxisError, match="out of bounds"):
        fl.fft.fft(x, axis=2)
    with pytest.raises(AxisError, match="out of bounds"):
        fl.fft.fftn(x, axes=(0, -3))
    with pytest.raises(ValueError, match="norm"):
        fl.fft.fft(x, norm="sideways")
    with pytest.raises(ValueError, match="at least one axis"):
        fl.fft.rfftn(fl.asarray(np.ones((2, 2), np.float32)), axes=())
    with pytest.raises(ValueError, match="same length"):
        fl.fft.fftn(x, s=(2, 2), axes=(0,))
    with pytest.raises(DTypeError, match="real input"):
        fl.fft.rfft(x)
    with pytest.raises(DTypeError, match="real input"):
        fl.fft.ihfft(x)
    with pytest.raises(ValueError, match="0-d"):
        fl.fft.fft(fl.asarray(np.complex64(1)))
    # hfft of real input: numpy's rule (taken as complex with zero imaginary part)
    r = np.linspace(0, 1, 5, dtype=np.float32)
    _close(fl.fft.hfft(fl.asarray(r)), np.fft.hfft(r))
