"""``fl.fft``'s multi-stage passes (a sub-FFT per work-group in local memory; issue 27)
against ``numpy.fft``: lengths, mixed radices, batches, round trips, launch counts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop.ops import fft_local

TOL = {np.complex128: 1e-12, np.complex64: 2e-5}


def _close(got, want):
    g = got.get()
    assert g.shape == want.shape and g.dtype == want.dtype, (g.shape, g.dtype, want.shape,
                                                               want.dtype)
    tol = TOL[want.dtype.type] * max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(g, want, rtol=0, atol=tol)


def _cdata(shape, dtype=np.complex64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _gpu_like(local=48 * 1024, items=1024):
    """A stand-in for an NVIDIA device as :func:`fft_local.params` sees one."""
    return SimpleNamespace(type="gpu", cl_device=SimpleNamespace(local_mem_size=local),
                           max_work_group_size=items)


def test_split():
    assert fft_local.split(2**20, 1024) == [1024, 1024]
    assert fft_local.split(2**24, 2048) == [256, 256, 256]
    assert fft_local.split(1024, 1024) == [1024]
    # the fewest local stages (radix 16 where it can) before balance
    assert fft_local.split(2**20, 4096) == [4096, 256] and fft_local.split(4096, 1024) == [256, 16]
    assert fft_local.split(2**3 * 3**2 * 5, 1024) == [360]
    assert fft_local.split(97, 1024) is None and fft_local.split(1, 1024) == [1]
    with pytest.raises(ValueError, match="unknown FFT knobs"):
        fft_local.set_override(sub=4)
    with pytest.raises(ValueError, match="max_sub"):
        fft_local.split(64, 4)
    with pytest.raises(ValueError, match="max_radix"):
        fft_local._stages(64, 1)


def test_gpu_rule(device):
    c64 = np.dtype(np.complex64)
    p = fft_local.params(_gpu_like(), c64)
    # 48 KiB for groups of >= 4 neighbouring columns: sub-FFTs of up to 1536 -> 1024
    assert p.max_sub == 1024 and p.local_bytes == 48 * 1024 and p.max_items == 256
    for n in (2**20, 2**24, 3**15, 2**10 * 5**6):
        s = fft_local.shapes(n, c64, p)
        assert s is not None and len(s) <= 3, (n, s)
        assert all((x.sub + (x.sub // p.pad if p.pad else 0)) * x.jj * 8 <= p.local_bytes
                   and x.items <= 256
                   for x in s)
    assert len(fft_local.shapes(2**20, c64, p) or []) == 2
    assert [x.sub for x in fft_local.shapes(1024, c64, p) or []] == [1024]
    # the GPU's knobs (16 columns per group, several passes), padded local memory too,
    # run on this device
    a = _cdata((2, 4096), seed=5)
    try:
        for pad in (0, 16):
            fft_local.set_override(**{**p.__dict__, "pad": pad})
            _close(fl.fft.fft(fl.asarray(a)), np.fft.fft(a))
    finally:
        fft_local.set_override()


@pytest.mark.parametrize("k", [1, 4, 16, 20])
def test_powers_of_two(device, k):
    n = 2**k
    a = _cdata((2, n) if k < 20 else (n,), seed=k)
    x = fl.asarray(a)
    _close(fl.fft.fft(x), np.fft.fft(a))
    np.testing.assert_array_equal(x.get(), a)  # read in place, never written


def test_mixed_radices(device):
    for n in (5, 360, 2**4 * 3**3 * 5**2):  # one pass of 5, one of 360, 2 passes
        a = _cdata((2, n), seed=n)
        _close(fl.fft.fft(fl.asarray(a)), np.fft.fft(a))


def test_batched_rows_either_axis(device, fresh_stats):
    a = _cdata((16, 1024), seed=3)
    x = fl.asarray(a)
    fl.fft.fft(x).eval()
    before = fresh_stats()["kernels_launched"]
    got = fl.fft.fft(x)
    got.eval()
    assert fresh_stats()["kernels_launched"] - before == 1  # 16 rows of 1024: one launch
    _close(got, np.fft.fft(a))
    b = np.ascontiguousarray(a.T[:, :12])  # (1024, 12): transformed along axis 0
    _close(fl.fft.fft(fl.asarray(b), axis=0), np.fft.fft(b, axis=0))


def test_groups_straddle_rows(device):
    # 3 rows of 24 columns in groups of 16: groups cross rows, the last one is partial
    p = fft_local.params(device, np.dtype(np.complex64))
    s = fft_local.shapes(960, np.dtype(np.complex64),
                         fft_local.FFTParams(**{**p.__dict__, "max_sub": 64}))
    assert s is not None and any((3 * 960 // x.sub) % x.jj for x in s), s
    a = _cdata((3, 960), seed=9)
    try:
        fft_local.set_override(max_sub=64)
        _close(fl.fft.fft(fl.asarray(a)), np.fft.fft(a))
    finally:
        fft_local.set_override()


def test_round_trips_and_double(device):
    if not device.has_fp64:
        pytest.skip(f"{device.name} has no float64")
    for n, dt in ((2**13, np.complex128), (360, np.complex128),
                  (2**4 * 3**3 * 5**2, np.complex64)):
        a = _cdata((2, n), dt, seed=n)
        x = fl.asarray(a)
        if dt == np.complex128:
            _close(fl.fft.fft(x, norm="ortho"), np.fft.fft(a, norm="ortho"))
        _close(fl.fft.ifft(fl.fft.fft(x)), a)


def test_launches_of_2_20(device):
    a = fl.asarray(_cdata(2**20, seed=1))

    def fft() -> None:
        fl.fft.fft(a).eval()

    # the device's rule (CPUs: the per-radix passes beyond one sub-FFT, which overwrite
    # their input, so a copy of it first), as counted
    copy = 0 if fft_local.params(device, a.dtype).local_for(2**20) else 1
    assert launches(fft, warm=True) == fft_local.launches(2**20, a.dtype, device) + copy
    try:  # the local-memory passes: at most 3 launches
        fft_local.set_override(multi_pass=1)
        launched = launches(fft, warm=True)
        assert launched <= 3 and launched == fft_local.launches(2**20, a.dtype, device)
    finally:
        fft_local.set_override()


def test_cpu_rule_takes_local_passes_for_one_sub_fft_only(cpu):
    p = fft_local.params(cpu, np.dtype(np.complex64))
    assert p.local_for(1024) and p.local_for(p.max_sub) and not p.local_for(2 * p.max_sub)
    assert fft_local.params(_gpu_like(), np.dtype(np.complex64)).local_for(2**24)


def test_real_transforms_read_in_place(device, fresh_stats):
    # an evaluated contiguous real signal is the packed complex one in memory: rfft runs
    # the passes on it (no packing copy) and leaves it unchanged; irfft's result is its
    # passes' buffer seen as reals
    r = np.random.default_rng(7).standard_normal((3, 2048)).astype(np.float32)
    x = fl.asarray(r)
    spectrum = fl.fft.rfft(x)
    spectrum.eval()
    before = fresh_stats()["kernels_launched"]
    fl.fft.rfft(x).eval()
    assert (fresh_stats()["kernels_launched"] - before
            == fft_local.launches(1024, np.dtype(np.complex64), device) + 1)  # + the split
    _close(spectrum, np.fft.rfft(r))
    np.testing.assert_array_equal(x.get(), r)
    back = fl.fft.irfft(spectrum)
    assert back.dtype == np.float32 and back.shape == r.shape
    np.testing.assert_allclose(back.get(), r, rtol=0, atol=2e-5 * np.abs(r).max())
