"""The hand-written scatter kernels of ``fuseloop.ops.scatter_kernel`` (a GPU's path,
forced onto the CPU device here): numpy's results with negative and repeated indices,
the launches of each variant, and a target left as it was when an index is out of
range (read after the launch, or later with ``FUSELOOP_SCATTER_WAIT=defer``)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.ops import scatter_kernel


def _message(value: int, size: int) -> str:
    return re.escape(f"index {value} is out of bounds for axis 0 with size {size}")


@pytest.fixture
def hand(monkeypatch, device):
    """The hand-written kernels on the CPU device; returns the list of their calls.
    They are OpenCL programs: a device of another backend scatters through its own."""
    if getattr(device, "backend", "opencl") != "opencl":
        pytest.skip(f"OpenCL's scatter kernels; {device.name} runs on the {device.backend} backend")
    calls: list[str] = []
    real = scatter_kernel.scatter

    def spy(a: Any, key: Any, values: Any, op: Any) -> None:
        calls.append(scatter_kernel.mode_for(a, key))
        real(a, key, values, op)

    monkeypatch.setattr(scatter_kernel, "ON_CPU", True)
    monkeypatch.setattr(scatter_kernel, "scatter", spy)
    monkeypatch.delenv("FUSELOOP_SCATTER_WAIT", raising=False)
    monkeypatch.delenv("FUSELOOP_SCATTER_ITEMS", raising=False)
    yield calls
    scatter_kernel.confirm_pending()  # (nothing left for a later test's reads)


@pytest.mark.parametrize(("variant", "launches"),
                         [("gate", 2), ("narrow", 2), ("backup", 3), ("partition", 3)])
def test_add_at_variants(device, hand, monkeypatch, fresh_stats, variant, launches):
    """``fl.add.at`` with negative and repeated device indices into float64 matches numpy;
    an index out of range raises numpy's error naming the first and writes nothing
    (``backup``: the in-range values were added, then the target restored);
    ``partition`` with buckets of 8 elements (5 buckets); ``a[perm] = v`` too."""
    monkeypatch.setenv("FUSELOOP_SCATTER", variant)
    monkeypatch.setenv("FUSELOOP_SCATTER_SPAN", "64")
    rng = np.random.default_rng(4)
    h = rng.standard_normal(40)
    k = rng.integers(-40, 40, 700)  # (more than one work-group, a partial last one)
    v = rng.standard_normal(700)
    x, kd, vd = fl.asarray(h), fl.asarray(k), fl.asarray(v)
    fl.add.at(x, kd, vd)  # (compiles)
    fl.reset_stats()
    fl.add.at(x, kd, vd)
    assert fresh_stats()["kernels_launched"] == launches
    fl.add.at(x, kd, 0.25)  # (one value for all)
    ref = h.copy()
    np.add.at(ref, k, v)
    np.add.at(ref, k, v)
    np.add.at(ref, k, 0.25)
    before = x.get()
    np.testing.assert_allclose(before, ref, rtol=1e-12, atol=1e-12)
    bad = np.r_[k[:300], -41, 3, 40]
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(-41, 40)):
        fl.add.at(x, fl.asarray(bad), fl.asarray(np.ones(bad.size)))
    np.testing.assert_array_equal(x.get(), before)
    p = rng.permutation(40) - 20  # distinct positions, half of them negative
    y = fl.asarray(h)
    y[fl.asarray(p)] = fl.asarray(v[:40])
    g = h.copy()
    g[p] = v[:40]
    np.testing.assert_array_equal(y.get(), g)
    assert hand == [variant] * 5


def test_set_and_int32_targets(device, hand, monkeypatch):
    """``a[idx] = v`` and ``fl.add.at`` / ``fl.subtract.at`` into an int32 target, one
    element per work-item (``FUSELOOP_SCATTER_ITEMS=1``); ``auto`` (the default) picks
    ``gate`` for a target of at most two buckets (here of 1000 bytes), ``partition``
    for a larger one."""
    monkeypatch.delenv("FUSELOOP_SCATTER", raising=False)
    monkeypatch.setenv("FUSELOOP_SCATTER_SPAN", "1000")
    monkeypatch.setenv("FUSELOOP_SCATTER_ITEMS", "1")
    rng = np.random.default_rng(5)
    h = rng.integers(-9, 9, 30).astype(np.int32)
    k = rng.integers(-30, 30, 300)
    v = rng.integers(-5, 5, 300).astype(np.int32)
    x = fl.asarray(h)
    fl.add.at(x, fl.asarray(k), fl.asarray(v))
    fl.subtract.at(x, fl.asarray(k[:100]), fl.asarray(v[:100]))
    ref = h.copy()
    np.add.at(ref, k, v)
    np.subtract.at(ref, k[:100], v[:100])
    np.testing.assert_array_equal(x.get(), ref)
    g = rng.standard_normal(500)
    p = rng.permutation(500)[:200] - 250  # distinct, some negative
    y = fl.asarray(g)
    y[fl.asarray(p)] = fl.asarray(v[:200].astype(np.float64))
    g[p] = v[:200]
    y[fl.asarray(p[:50])] = 2.5
    g[p[:50]] = 2.5
    np.testing.assert_array_equal(y.get(), g)
    fl.add.at(x, fl.asarray(k), np.int32(3))
    np.add.at(ref, k, 3)
    np.testing.assert_array_equal(x.get(), ref)
    with pytest.raises(OverflowError):  # (as numpy: left to the general path)
        fl.add.at(x, fl.asarray(k), 2**40)
    with pytest.raises(TypeError):
        fl.add.at(x, fl.asarray(k), 1.5)  # (numpy's same_kind rule, before any path)
    np.testing.assert_array_equal(x.get(), ref)
    assert hand == ["gate", "gate", "partition", "partition", "gate"]


def test_deferred_check(device, hand, monkeypatch):
    """With ``FUSELOOP_SCATTER_WAIT=defer`` the error surfaces at the next read back or
    ``fl.synchronize()``, and the failed scatter left its target as it was."""
    monkeypatch.setenv("FUSELOOP_SCATTER", "gate")
    monkeypatch.setenv("FUSELOOP_SCATTER_WAIT", "defer")
    h = np.arange(10.0)
    x = fl.asarray(h)
    fl.add.at(x, fl.asarray(np.array([1, 12, 2])), fl.asarray(np.ones(3)))  # no raise
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(12, 10)):
        fl.synchronize()
    np.testing.assert_array_equal(x.get(), h)
    fl.add.at(x, fl.asarray(np.array([-11, 1])), fl.asarray(np.ones(2)))
    fl.add.at(x, fl.asarray(np.array([-1, 1])), fl.asarray(np.ones(2)))
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(-11, 10)):
        x.get()
    np.testing.assert_array_equal(x.get(), h + np.eye(10)[1] + np.eye(10)[-1])


def test_other_forms_take_the_general_path(device, hand, monkeypatch):
    """Host indices, lazy values, other dtypes, 2-D targets and shared buffers stay on the
    general path (and still match numpy)."""
    monkeypatch.setenv("FUSELOOP_SCATTER", "gate")
    k = np.array([0, 2, 2, -1])
    x = fl.asarray(np.zeros(5))
    fl.add.at(x, k, fl.asarray(np.ones(4)))  # host indices: checked on the host
    fl.add.at(x, fl.asarray(k), fl.asarray(np.ones(4)) * 2)  # lazy values: fused
    fl.add.at(x, fl.asarray(k), fl.asarray(np.ones(4, np.float32)))  # another dtype
    m = fl.asarray(np.zeros((3, 2)))
    m[fl.asarray(np.array([0, 2]))] = fl.asarray(np.ones((2, 2)))
    s = fl.asarray(np.arange(4.0))
    s[fl.asarray(np.array([3, 0, 1, 2]))] = s  # the values are the target
    np.testing.assert_array_equal(x.get(), [4, 0, 8, 0, 4])
    np.testing.assert_array_equal(m.get(), [[1, 1], [0, 0], [1, 1]])
    np.testing.assert_array_equal(s.get(), [1, 2, 3, 0])
    assert hand == []


class _FakeNvidia:
    backend, vendor, platform = "opencl", "NVIDIA Corporation", "NVIDIA CUDA"
    cl_device = type("Handle", (), {"compute_capability_major_nv": 9})()


class _FakeCpu:
    backend, vendor, platform = "opencl", "Intel(R) Corporation", "Portable Computing Language"


def test_update_bodies():
    """The atomic add each dtype gets: PTX reductions for floats on NVIDIA, integer
    atomics everywhere, a compare-and-swap loop for floats elsewhere; a store for set."""
    nv, cpu = _FakeNvidia(), _FakeCpu()
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert "red.global.add.f32" in scatter_kernel._update("add", f32, nv)
    assert '"d"((double) (-v))' in scatter_kernel._update("subtract", f64, nv)
    assert "atomic_cmpxchg" in scatter_kernel._update("add", f32, cpu)
    assert "atom_add" in scatter_kernel._update("add", np.dtype(np.int64), nv)
    assert scatter_kernel._update(None, f32, nv) == "*p = v;"


def test_store_reads_its_gate_with_its_loads():
    """The store kernel loads its indices and values before it tests the check's gate:
    a test first would hold every load behind one more trip to memory."""
    src = scatter_kernel._STORE
    body = src[src.index("fuseloop_scatter_store"):src.index("fuseloop_scatter_copy")]
    gate, loads, test = (body.index(s) for s in ("= in2[0];", "k[j] = in0[i];",
                                                 "if (gate != 0)"))
    assert gate < loads < test


def test_auto_takes_backup_for_many_indices(device, hand, monkeypatch):
    """``auto``: ``backup`` (no pass over the indices) where they are many beside the
    target (:func:`scatter_kernel.backup_pays`, its floor lowered here), ``gate`` for
    fewer; numpy's sums either way, and an index out of range leaves the target as it
    was."""
    monkeypatch.delenv("FUSELOOP_SCATTER", raising=False)
    monkeypatch.setattr(scatter_kernel, "BACKUP_MIN_BYTES", 4096)
    assert scatter_kernel.backup_pays(64, 4096) and not scatter_kernel.backup_pays(512, 4096)
    assert not scatter_kernel.backup_pays(8, 4095)
    rng = np.random.default_rng(8)
    h = rng.standard_normal(16)
    k = rng.integers(-16, 16, 600)  # 4800 bytes of indices into 128 bytes
    v = rng.standard_normal(600)
    x = fl.asarray(h)
    fl.add.at(x, fl.asarray(k), fl.asarray(v))
    fl.add.at(x, fl.asarray(k[:100]), fl.asarray(v[:100]))  # (800 bytes: gate)
    ref = h.copy()
    np.add.at(ref, k, v)
    np.add.at(ref, k[:100], v[:100])
    np.testing.assert_allclose(x.get(), ref, rtol=1e-12, atol=1e-12)
    bad = np.r_[k, 16]
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=_message(16, 16)):
        fl.add.at(x, fl.asarray(bad), fl.asarray(np.ones(bad.size)))
    np.testing.assert_allclose(x.get(), ref, rtol=1e-12, atol=1e-12)
    assert hand == ["backup", "gate", "backup"]
