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
    (NVIDIA, np.float32, 'red.global.add.f32 [%0], %1;" :: "l"(&(out[idx[i]])), "f"',
     "cmpxchg"),
    (NVIDIA, np.float64, 'red.global.add.f64 [%0], %1;" :: "l"(&(out[idx[i]])), "d"',
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
