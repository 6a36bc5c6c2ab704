"""A split full reduction and its scalar epilogue in one launch (lower/one_launch.py):
every group publishes its partial and takes a ticket, the last one combines."""

from __future__ import annotations

import kernel_source
import numpy as np
import pytest

import fuseloop as fl
from fuseloop import splits

N = 1 << 17  # long enough to split into pieces (splits.TWO_STAGE_MIN_LENGTH)


@pytest.fixture
def device_path(monkeypatch):
    monkeypatch.setenv("FUSELOOP_HOST_PATH", "0")


def data(dtype, seed=0):
    return np.random.default_rng(seed).random(N).astype(dtype) + 0.25


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_epilogues_match_numpy_in_one_launch_each(device, device_path, dtype):
    h = data(dtype)
    h64 = h.astype(np.float64)
    x = fl.asarray(h)
    cases = [(lambda: fl.sum(x * x) ** 0.5, np.sqrt((h64 * h64).sum())),
             (lambda: fl.mean(x), h64.mean()),
             (lambda: fl.linalg.norm(x), np.linalg.norm(h64)),
             (lambda: fl.max(x) - 1, h64.max() - 1)]
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for make, want in cases:
        for _ in range(3):  # (the ticket is back at 0 after each launch)
            fl.reset_stats()
            got = float(make())
            assert fl.stats()["kernels_launched"] == 1
            np.testing.assert_allclose(got, want, rtol=tol)


def test_std_is_two_single_launches(device, device_path):
    h = data(np.float64, 1)
    x = fl.asarray(h)
    for _ in range(2):
        fl.reset_stats()
        np.testing.assert_allclose(float(fl.std(x)), h.std(), rtol=1e-12)
        assert fl.stats()["kernels_launched"] == 2  # the mean, then the deviations


def test_two_reductions_in_one_evaluation(device, device_path):
    h = data(np.float32, 2)
    x = fl.asarray(h)
    for _ in range(3):
        fl.reset_stats()
        lo, total = fl.compute(fl.min(x) * 2, fl.sum(x) + 1)
        assert fl.stats()["kernels_launched"] == 1
        assert float(lo) == h.min() * 2
        np.testing.assert_allclose(float(total), h.astype(np.float64).sum() + 1, rtol=1e-5)


def test_fused_function_replays_the_one_launch(device, device_path):
    h = data(np.float32, 3)
    norm = fl.fuse(lambda a: fl.sum(a * a) ** 0.5)
    for k in range(3):
        x = fl.asarray(h * (k + 1))
        fl.reset_stats()
        got = float(norm(x))
        assert fl.stats()["kernels_launched"] == 1
        np.testing.assert_allclose(got, np.linalg.norm(h.astype(np.float64) * (k + 1)),
                                   rtol=2e-5)


def test_setting_off_keeps_two_launches(device, device_path, monkeypatch):
    monkeypatch.setattr(splits, "ONE_LAUNCH", False)
    h = data(np.float32, 4)
    x = fl.asarray(h)
    fl.reset_stats()
    np.testing.assert_allclose(float(fl.sum(x) ** 0.5), np.sqrt(h.astype(np.float64).sum()),
                               rtol=2e-5)
    assert fl.stats()["kernels_launched"] == 2


def test_kernel_takes_a_ticket(device, device_path):
    x = fl.asarray(data(np.float32, 5))
    code = fl.show_code(fl.sum(x * x) ** 0.5)
    source = code if isinstance(code, str) else "\n".join(code)
    assert "atomic_inc(fl_ticket)" in source and "mem_fence(CLK_GLOBAL_MEM_FENCE)" in source
    assert kernel_source.entry_points(source) == 1  # (OpenCL or CUDA C)
