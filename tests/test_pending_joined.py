"""A full reduction of a value that runs as a kernel of its own first (a reduction over
rows consumed by it) and that kernel in one launch (fuseloop.pending_joined): the rows
kernel's groups take tickets, the last one reduces the rows' results.  On a CPU device
the join is off by default (CPU_MAX_VALUES); here it is raised to run the joined kernel
on PoCL."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import pending_joined, splits


@pytest.fixture
def joined(device_path, monkeypatch):
    monkeypatch.setattr(pending_joined, "CPU_MAX_VALUES", 1 << 20)
    fl.clear_caches()  # (no run plan recorded under another limit)
    yield device_path
    fl.clear_caches()


def _inputs(seed: int = 0, shape: tuple[int, int] = (48, 300)
            ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-4, 4, shape).astype(np.float32),
            rng.integers(0, shape[1], shape[0]))


def _cases(inputs):
    """(expression maker, numpy's value): row reductions under a full one."""
    h, lab = inputs
    xd = fl.asarray(h)
    rows = fl.asarray(np.arange(h.shape[0]))
    ld = fl.asarray(lab)
    h64 = h.astype(np.float64)
    top = h64.max(axis=1)
    lse = top + np.log(np.exp(h64 - top[:, None]).sum(axis=1))

    def cross_entropy():
        m = fl.max(xd, axis=1, keepdims=True)
        return fl.mean(m[:, 0] + fl.log(fl.sum(fl.exp(xd - m), axis=1)) - xd[rows, ld])

    return [(lambda: fl.sum(fl.max(xd, axis=1)), h64.max(axis=1).sum()),
            (cross_entropy, (lse - h64[np.arange(h.shape[0]), lab]).mean())]


def test_row_reductions_under_a_full_one_take_one_launch(joined):
    for make, want in _cases(_inputs()):
        for _ in range(3):  # (the ticket is back at 0 after each launch; a plan replays it)
            fl.reset_stats()
            got = float(make())
            assert fl.stats()["kernels_launched"] == 1
            np.testing.assert_allclose(got, want, rtol=2e-5)


def test_cpu_default_and_setting_off_keep_two_launches(joined, monkeypatch):
    inputs = _inputs(1)
    patches = [(splits, "ONE_LAUNCH", False)]
    if joined.type == "cpu":  # (the CPU default: no join; GPUs join whatever it says)
        patches.append((pending_joined, "CPU_MAX_VALUES", 0))
    for patch in patches:
        with monkeypatch.context() as m:
            m.setattr(*patch)
            fl.clear_caches()
            for make, want in _cases(inputs):
                fl.reset_stats()
                np.testing.assert_allclose(float(make()), want, rtol=2e-5)
                assert fl.stats()["kernels_launched"] == 2


def test_gpu_recipes_join_by_default(device_path, monkeypatch):
    """The CPU device presented as a GPU (the GPU recipes' kernels, run by PoCL): the
    join is on for GPUs whatever CPU_MAX_VALUES says, for many rows too."""
    if device_path.type != "cpu":
        pytest.skip("presents the CPU device as a GPU")
    # (a compile worker finds no device of that description: builds in this process)
    monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
    gpu = dataclasses.replace(device_path, index=9134, type="gpu", compute_units=132,
                              max_work_group_size=1024)
    # (1024 rows of 1024: the combining stage's group is narrowed to the row kernel's)
    with fl.device(gpu):
        for make, want in [*_cases(_inputs(2)), *_cases(_inputs(3, (1024, 1024)))]:
            for _ in range(2):
                fl.reset_stats()
                np.testing.assert_allclose(float(make()), want, rtol=2e-5)
                assert fl.stats()["kernels_launched"] == 1
