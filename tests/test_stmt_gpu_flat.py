"""Flat evaluations whose views move every call (issue 26), on the device path: ``s = s +
x[i]`` and ``(x[i:i + 4] * 2).eval()`` in a loop launch the entry's one moving plan (the
offsets as launch arguments, ``flat_moves.moved_launch``), made once, not a plan bound
anew per offsets; a launch sets only the offsets that changed."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import launching
from fuseloop.backends import opencl


@pytest.fixture
def made(monkeypatch):
    """Counts the moving plans and the plans bound anew that the flat path makes."""
    import fuseloop.flat_moves as flat_moves

    counts = {"moving_plan": 0, "rebound": 0}
    def counter(name: str):
        original = getattr(launching, name)

        def counted(*args):
            counts[name] += 1
            return original(*args)
        return counted

    for name in counts:  # (the flat path's names: the module imports them; rebound: did)
        monkeypatch.setattr(flat_moves, name, counter(name), raising=False)
    return counts


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_zero_d_running_sum_makes_one_moving_plan(device_path, made, fresh_stats, dtype):
    xh = (np.arange(1, 41) * 3 % 17).astype(dtype)
    x = fl.asarray(xh)
    s = fl.asarray(dtype(0))
    want = dtype(0)
    for i in range(2):  # (the kernel and its entry: made here)
        s = (s + x[i]).eval()
        want = want + xh[i]
    fl.reset_stats()
    for i in range(2, 40):
        s = (s + x[i]).eval()
        want = want + xh[i]
    assert s.get() == want
    stats = fresh_stats()
    assert stats["kernels_launched"] == 38 and stats["memory_cache_misses"] == 0
    assert made["moving_plan"] <= 1 and made["rebound"] == 0, made


def test_moving_window_and_fixed_window_alternate(device_path, made):
    # the entry's own offsets (its plan's constants) and others (the moving plan's
    # arguments) in turn on one kernel object: each launch sets what it reads
    xh = np.random.default_rng(3).random(64)
    x = fl.asarray(xh)
    for _ in range(2):
        for i in range(0, 56, 3):
            for at in (0, i, 0, i + 1):
                got = (x[at:at + 8] * 2 - 1).eval()
                np.testing.assert_array_equal(got.get(), xh[at:at + 8] * 2 - 1)
    assert made["moving_plan"] <= 1 and made["rebound"] == 0, made


def test_a_moving_launch_sets_only_the_offset_that_changed(device_path, monkeypatch):
    if device_path.backend != "opencl":
        pytest.skip("the OpenCL backend's launchers")
    # x[i] + y[45]: the second offset stays, so each launch sets the first one only
    xh, yh = np.arange(30.0), np.arange(50.0) * 7
    x, y = fl.asarray(xh), fl.asarray(yh)
    for i in range(3):
        (x[i] + y[45]).eval()
    fl.synchronize()
    set_scalars: list[int] = []
    real = opencl._set_scalar

    def spy(kernel, index, value):
        set_scalars.append(index)
        return real(kernel, index, value)

    monkeypatch.setattr(opencl, "_set_scalar", spy)
    # (launchers bind the setter when made: the moving plan's is made anew here)
    from fuseloop.expr import program

    for entry in program.flat_entries.values():
        entry.rebind = None
    got = [(x[i] + y[45]).eval() for i in range(3, 20)]
    for i, g in enumerate(got, 3):
        assert g.get() == xh[i] + yh[45]
    assert len(set_scalars) <= 17 + 2, set_scalars


def test_vector_elements_are_placed_without_the_general_walk(device_path, monkeypatch):
    # ``b[i]``, ``x[-i]``: a vector's element placed at once (ops.indexing._walk_view),
    # out-of-range ones left to the general walk (which gives numpy's IndexError)
    from fuseloop.ops import indexing

    walked = [0]
    real = indexing._walk_place

    def counted(*args):
        walked[0] += 1
        return real(*args)

    monkeypatch.setattr(indexing, "_walk_place", counted)
    xh = np.arange(50.0) * 3
    x = fl.asarray(xh)
    got = [x[i] for i in range(-50, 50)]
    assert walked[0] == 0
    for i, g in zip(range(-50, 50), got):
        assert g.shape == () and float(g) == xh[i]
    for bad in (50, -51):
        with pytest.raises(IndexError):
            x[bad]
    assert walked[0] == 2
