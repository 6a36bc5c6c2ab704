"""The atomic update each device gets (fuseloop.lower.atomics): native adds where the
device has them, the compare-and-swap loop elsewhere; read from the generated code for
fake devices (no NVIDIA device here), and run on the devices present."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.lower import atomics

lp = pytest.importorskip("loopy")


def _device(vendor: str, capability: int | None = None, backend: str = "opencl"):
    handle = SimpleNamespace() if capability is None else SimpleNamespace(
        compute_capability_major_nv=capability)
    return SimpleNamespace(vendor=vendor, platform=f"{vendor} OpenCL", backend=backend,
                           cl_device=handle)


def _update_code(device, dtype, expr: str = "out[idx[i]] + v[i]") -> str:
    """The OpenCL source of ``out[idx[i]] = <expr>`` as an atomic update for ``device``."""
    knl = lp.make_kernel(
        "{[i]: 0 <= i < n}", f"out[idx[i]] = {expr} {{atomic}}",
        [lp.GlobalArg("out", dtype, shape=None, for_atomic=True, is_input=True,
                      is_output=True),
         lp.GlobalArg("idx", np.int32, shape=None), lp.GlobalArg("v", dtype, shape=None),
         lp.ValueArg("n", np.int32)],
        target=atomics.native_target(lp.OpenCLTarget(), device), lang_version=(2018, 2))
    return lp.generate_code_v2(knl).device_code()


NVIDIA = _device("NVIDIA Corporation", capability=9)
OTHER = _device("Intel(R) Corporation")


@pytest.mark.parametrize(("device", "dtype", "expect", "absent"), [
    (NVIDIA, np.float32, 'red.global.add.f32 [%0], %1;" :: "l"((ulong) &(out[idx[i]])), "f"',
     "cmpxchg"),
    (NVIDIA, np.float64, 'red.global.add.f64 [%0], %1;" :: "l"((ulong) &(out[idx[i]])), "d"',
     "cmpxchg"),
    (_device("NVIDIA Corporation", capability=5), np.float64, "atom_cmpxchg", "red."),
    (OTHER, np.float32, "atomic_cmpxchg", "red."),
    (OTHER, np.int32, "atomic_add((volatile __global int *) &(out[idx[i]]), v[i])",
     "cmpxchg"),
    (OTHER, np.int64, "atom_add((volatile __global long *) &(out[idx[i]]), v[i])",
     "cmpxchg"),
])
def test_add_lowering_per_device(device, dtype, expect, absent):
    code = _update_code(device, dtype)
    assert expect in code, code
    assert absent not in code, code


def test_other_updates_keep_compare_and_swap():
    # a product (not ``x = x + v``) and the CUDA backend's own target are left alone
    code = _update_code(NVIDIA, np.float32, "out[idx[i]] * v[i]")
    assert "atomic_cmpxchg" in code and "red." not in code, code
    assert atomics.float_add_flavor(_device("NVIDIA", 9, backend="cuda"), np.float32) is None
    target = lp.CudaTarget()
    assert atomics.native_target(target, NVIDIA) is target


def test_ptx_atomics_can_be_turned_off(monkeypatch):
    assert atomics.float_add_flavor(NVIDIA, np.dtype(np.float32)) == "ptx"
    monkeypatch.setenv("FUSELOOP_PTX_ATOMICS", "0")
    assert atomics.float_add_flavor(NVIDIA, np.dtype(np.float32)) is None
    assert "atomic_cmpxchg" in _update_code(NVIDIA, np.float32)


def test_subtract_is_a_native_add(device):
    # subtract.at is out + (-v): a native add for int32 (numpy's wrap-around too)
    rng = np.random.default_rng(4)
    a = rng.integers(-5, 5, 9).astype(np.int32)
    idx = rng.integers(-9, 9, 300)
    v = rng.integers(-2**31, 2**31 - 1, 300, dtype=np.int64).astype(np.int32)
    x = fl.asarray(a)
    fl.subtract.at(x, fl.asarray(idx), fl.asarray(v))
    ref = a.copy()
    np.subtract.at(ref, idx, v)
    np.testing.assert_array_equal(x.get(), ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_add_at_with_device_indices(device, dtype):
    # computed device indices: checked by their minimum and maximum, wrapped by the
    # scatter itself (negative ones count from the end; repeats accumulate)
    rng = np.random.default_rng(5)
    a = (rng.random(40) * 10).astype(dtype)
    idx = rng.integers(-40, 40, 3000).astype(np.int32)
    v = (rng.random(3000) * 10).astype(dtype)
    x = fl.asarray(a)
    fl.add.at(x, fl.asarray(idx), fl.asarray(v))
    ref = a.copy()
    np.add.at(ref, idx, v)
    np.testing.assert_allclose(x.get(), ref, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_out_of_range_device_index_names_the_first(device):
    # numpy names the first value out of range, and nothing is written
    a = np.arange(50, dtype=np.float32)
    bad = np.arange(-50, 50) % 50
    bad[7], bad[9] = 50, -99
    x = fl.asarray(a)
    with pytest.raises(IndexError, match=r"index 50 is out of bounds for axis 0 with size 50"):
        fl.add.at(x, fl.asarray(bad), 1.0)
    with pytest.raises(IndexError, match=r"index 50 is out of bounds"):
        np.add.at(a.copy(), bad, 1.0)
    with pytest.raises(IndexError, match=r"index 50 is out of bounds"):
        x[fl.asarray(bad)] = 2.0
    np.testing.assert_array_equal(x.get(), a)


def _spy_cpu_path(monkeypatch):
    from fuseloop.ops import scatter_add_cpu

    calls = []
    real = scatter_add_cpu.scatter_add
    monkeypatch.setattr(scatter_add_cpu, "scatter_add",
                        lambda *a: (calls.append(a[0]), real(*a))[1])
    return calls


@pytest.mark.parametrize(("op", "dtype", "bins"), [("add", np.float32, 1000),
                                                  ("subtract", np.int64, 7)])
def test_cpu_partial_sums(device, monkeypatch, op, dtype, bins):
    # many values into few bins on a CPU: per-core partial sums, no atomics
    calls = _spy_cpu_path(monkeypatch)
    rng = np.random.default_rng(6)
    n = 1 << 16
    a = (rng.random(bins) * 10).astype(dtype)
    idx = rng.integers(-bins, bins, n).astype(np.int32)
    v = (rng.random(n) * 10).astype(dtype)
    x = fl.asarray(a)
    before = x * 1  # (lazy, reads x: computed before x is written)
    getattr(fl, op).at(x, fl.asarray(idx), fl.asarray(v))
    ref = a.copy()
    getattr(np, op).at(ref, idx, v)
    np.testing.assert_allclose(x.get(), ref, rtol=1e-5)
    np.testing.assert_array_equal(before.get(), a)
    assert calls == ([op] if device.type == "cpu" else [])


def test_cpu_partial_sums_out_of_range(device, monkeypatch):
    calls = _spy_cpu_path(monkeypatch)
    n, bins = 1 << 16, 100
    idx = np.arange(n) % (2 * bins) - bins
    idx[40000], idx[50000] = -101, 100
    a = np.arange(bins, dtype=np.float64)
    x = fl.asarray(a)
    with pytest.raises(IndexError, match=r"index -101 is out of bounds for axis 0 with size 100"):
        fl.add.at(x, fl.asarray(idx), fl.asarray(np.ones(n)))
    np.testing.assert_array_equal(x.get(), a)
    assert len(calls) == (device.type == "cpu")


def test_gpu_recipe_keeps_the_native_add(restore_recipes):
    # the GPU elementwise recipe (loads separated, 4 items per work-item) forced onto
    # the CPU: the atomic update still reads ``x = x + v``, so it stays a native add
    from fuseloop import evaluate
    from fuseloop.recipes import gpu_coalesced

    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    rng = np.random.default_rng(7)
    idx = rng.integers(-64, 64, 5000)
    v = rng.integers(0, 9, 5000).astype(np.int32)
    with fl.device("cpu"):
        out = fl.zeros(64, np.int32).eval()
        i_fl, v_fl = fl.asarray(idx), fl.asarray(v)
        with evaluate.capturing_sources() as sources:
            fl.add.at(out, i_fl, v_fl * 2)
        assert "atomic_add((volatile __global int *)" in sources[-1], sources[-1]
        assert "cmpxchg" not in sources[-1], sources[-1]
        fl.add.at(out, i_fl, v_fl * 2)
        ref = np.zeros(64, np.int32)
        np.add.at(ref, idx, v * 2)
        np.testing.assert_array_equal(out.get(), ref)


def test_bincount_weights_take_the_cpu_path(device, monkeypatch):
    calls = _spy_cpu_path(monkeypatch)
    rng = np.random.default_rng(8)
    x = rng.integers(0, 5000, 1 << 16)
    w = rng.random(1 << 16)
    got = fl.bincount(fl.asarray(x), weights=fl.asarray(w))
    np.testing.assert_allclose(got.get(), np.bincount(x, weights=w), rtol=1e-12)
    assert len(calls) == (device.type == "cpu")


@pytest.mark.parametrize("n", [1000, 1 << 16])  # the atomic kernel; the CPU's partial sums
def test_add_at_under_fuse(device, n):
    # every call of a fused function checks its indices and adds its own values
    bins = 100

    @fl.fuse
    def f(idx, v):
        out = fl.zeros(bins, np.float32)
        fl.add.at(out, idx, v)
        return out

    rng = np.random.default_rng(9)
    for call in range(3):
        idx = rng.integers(-bins, bins, n)
        v = rng.random(n, dtype=np.float32)
        if call == 2:
            idx[3] = 5000
            with pytest.raises(IndexError, match="out of bounds"):
                f(fl.asarray(idx), fl.asarray(v)).get()
            continue
        ref = np.zeros(bins, np.float32)
        np.add.at(ref, idx, v)
        np.testing.assert_allclose(f(fl.asarray(idx), fl.asarray(v)).get(), ref, rtol=1e-4)
