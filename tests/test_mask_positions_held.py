"""A boolean mask applied again before its buffer is written reuses the positions of its
first application (fuseloop.ops.masks): one compaction, one count read back, for
``Z[I] = Z[I] ** 2 + C[I]`` (NPBench's mandelbrot1); any write to the mask's buffer,
through any view or ``out=``, makes them afresh."""

from __future__ import annotations

import numpy as np
from launch_counts import counted

import fuseloop as fl


def _inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(30, 40)) + 1j * rng.normal(size=(30, 40))
    c = rng.normal(size=(30, 40)) + 1j * rng.normal(size=(30, 40))
    return z, c


def test_one_scan_for_a_mask_applied_three_times(device_path):
    z, c = _inputs()
    Z, C = fl.asarray(z), fl.asarray(c)
    want = z.copy()
    for _ in range(3):
        mask = np.abs(want) < 1.5
        want[mask] = want[mask] ** 2 + c[mask]

    def step() -> None:
        I = fl.less(abs(Z), 1.5)  # noqa: E741 (NPBench's name)
        Z[I] = Z[I] ** 2 + C[I]

    done = [counted(step) for _ in range(3)]
    assert [d["scans"] for d in done] == [1, 1, 1]
    np.testing.assert_allclose(Z.get(), want, rtol=1e-12)


def test_a_written_mask_is_compacted_again(device_path):
    z, c = _inputs(1)
    x = fl.asarray(z.real)
    m = fl.asarray(z.real > 0)
    assert counted(lambda: x[m].get())["scans"] == 1
    got = counted(lambda: x[m].get())
    assert got["scans"] == 0
    np.testing.assert_array_equal(got.value, z.real[z.real > 0])
    fl.logical_not(m, out=m)  # (written whole, in place)
    got = counted(lambda: x[m].get())
    assert got["scans"] == 1
    np.testing.assert_array_equal(got.value, z.real[~(z.real > 0)])
    part = m[3:7]
    part[...] = True  # (written through a view)
    want = ~(z.real > 0)
    want[3:7] = True
    np.testing.assert_array_equal(x[m].get(), z.real[want])
    m[0, 0] = not want[0, 0]  # (one element)
    want[0, 0] = not want[0, 0]
    np.testing.assert_array_equal(x[m].get(), z.real[want])
    m2 = fl.asarray(c.real > 0)
    m[...] = m2  # (copied from another array)
    np.testing.assert_array_equal(x[m].get(), z.real[c.real > 0])


def test_positions_go_with_their_mask(device_path):
    from fuseloop.ops import masks

    x = fl.asarray(np.arange(50.0))
    m = x > 20
    x[m].get()
    assert any(h.owner() is m for h in masks._held)
    del m
    assert not any(h.owner() is None for h in masks._held)
