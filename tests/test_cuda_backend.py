"""The CUDA backend (``fuseloop.backends.cuda``): device selection, the generated CUDA
C, and on a machine with a CUDA device, evaluation against numpy.

The whole suite runs on the CUDA device with ``FUSELOOP_DEVICE=cuda:0`` (the
``tests_cuda`` nox session); the tests here are the ones that need two backends or
read what only the CUDA backend makes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import (
    DeviceError,
    DeviceNotFoundError,
    KernelBuildError,
)
from fuseloop.runtime import devices as _devices


def _cuda_devices() -> list:
    return [d for d in fl.devices() if d.backend == "cuda"]


needs_cuda = pytest.mark.skipif(not _cuda_devices(), reason="no CUDA device (CuPy and a driver)")


# {{{ no device


def test_a_backend_index_spec_counts_that_backends_devices():
    opencl = [d for d in fl.devices() if d.backend == "opencl"]
    assert fl.devices()  # (the suite needs a device)
    if opencl:
        assert _devices.find_device("opencl:0") is opencl[0]
    with pytest.raises(DeviceNotFoundError, match=r"no cuda device with index 7"):
        _devices.find_device("cuda:7")
    # not a backend label: an ordinary name look-up
    with pytest.raises(DeviceNotFoundError):
        _devices.find_device("nosuchbackend:0")


def test_grid_is_counted_in_blocks():
    cuda = pytest.importorskip("fuseloop.backends.cuda")
    assert cuda._grid((1024,), (128,)) == ((8, 1, 1), (128, 1, 1))
    assert cuda._grid((64, 48), (16, 16)) == ((4, 3, 1), (16, 16, 1))
    with pytest.raises(KernelBuildError, match="at most 3 axes"):
        cuda._grid((1, 1, 1, 1), (1, 1, 1, 1))


def _fake_cuda_device():
    cuda = pytest.importorskip("fuseloop.backends.cuda")
    return _devices.Device(
        index=99, name="NVIDIA H100 80GB HBM3", type="gpu", platform="CUDA",
        vendor="NVIDIA Corporation", driver_version="13.0", global_mem_size=80 << 30,
        max_alloc_size=80 << 30, has_fp64=True, cl_device=cuda.CudaDevice(0, "90"),
        compute_units=132, backend="cuda", max_work_group_size=1024)


_EXPRESSIONS = {
    "elementwise": lambda x, y, i, X: [2 * x - fl.sin(y) + x * y],
    "integer helpers": lambda x, y, i, X: [(i // 3) % 5 + fl.minimum(i, 2) ** 2,
                                           fl.maximum(x, y), fl.isnan(x)],
    "full reduction": lambda x, y, i, X: [fl.sum(x * y)],
    "softmax rows": lambda x, y, i, X: [fl.exp(X - X.max(axis=1, keepdims=True))
                                        / fl.exp(X - X.max(axis=1, keepdims=True))
                                        .sum(axis=1, keepdims=True)],
    "matmul": lambda x, y, i, X: [X.T @ X],
    "argmax": lambda x, y, i, X: [X.argmax(axis=1)],
}


def _nvrtc_compiles(source: str, options: list[str], names: list[str]) -> None:
    """``source`` builds with NVRTC as the CUDA backend builds it (its prelude and
    options): skips where CuPy or NVRTC is missing; no GPU needed."""
    cuda = pytest.importorskip("fuseloop.backends.cuda")
    try:
        cuda._nvrtc.getVersion()
    except Exception as exc:  # (CuPy without its NVRTC library)
        pytest.skip(f"NVRTC is not loadable: {exc}")
    fake = _fake_cuda_device()
    binary, _ = cuda.CudaBackend()._compile(fake, source, options, names)
    assert binary


@pytest.mark.parametrize("case", list(_EXPRESSIONS))
def test_generated_cuda_source_builds_with_nvrtc(case):
    """The CUDA C of each kind of kernel (helpers, Loopy's own helpers, local memory)
    builds with NVRTC after the prelude."""
    from fuseloop.lower import codegen

    fake = _fake_cuda_device()
    rng = np.random.default_rng(0)
    x = fl.asarray(rng.random(4096, dtype=np.float32))
    y = fl.asarray(rng.random(4096, dtype=np.float32))
    i = fl.asarray(np.arange(4096, dtype=np.int64) - 7)
    X = fl.asarray(rng.random((256, 512), dtype=np.float32))
    lowered = fl.program(*_EXPRESSIONS[case](x, y, i, X)).lower(fake)
    plan = codegen.generate(lowered.t_unit, fake)
    assert re.search(r'extern "C" __global__', plan.source)
    assert "get_local_id" not in plan.source and "__local" not in plan.source
    _nvrtc_compiles(plan.source, plan.build_options, [plan.name])


def test_int64_max_has_no_unsigned_literal():
    """INT64_MIN, the identity of max, is written as a sum: C's '-9223372036854775808'
    negates an unsigned constant and made comparisons with it unsigned."""
    from fuseloop.lower import codegen

    fake = _fake_cuda_device()
    x = fl.asarray(np.arange(24, dtype=np.int64).reshape(4, 6))
    source = codegen.generate(fl.program(x.max(axis=1)).lower(fake).t_unit, fake).source
    assert "-9223372036854775808" not in source
    assert "9223372036854775807" in source


def _hand_written_plans() -> list:
    from fuseloop import linalg_kernels
    from fuseloop.ops import bincount_kernel, compaction

    plans = []
    for layout in (compaction.Layout(256, 8, 1 << 13, 4096), compaction.Layout(1, 1, 1 << 15, 8)):
        plans.append(compaction._plan("fuseloop_mask_count", compaction._COUNT,
                                      ["in0", "out0"], layout))
        plans.append(compaction._plan("fuseloop_mask_compact", compaction._COMPACT,
                                      ["in0", "in1", "out0", "out1"], layout))
    for name in linalg_kernels._KERNELS:
        plans.append(linalg_kernels._kernel(name, np.dtype(np.float64), 256).plan)
    # (the complex LU's and QR's panels)
    from fuseloop import linalg_complex, linalg_qr_complex

    for dt in (np.complex64, np.complex128):
        plans.append(linalg_complex._panel_kernel(np.dtype(dt), 256).plan)
        plans.append(linalg_qr_complex._kernel(np.dtype(dt), 256).plan)
    plans += [bincount_kernel._kernel(np.dtype(t)).plan for t in (np.int32, np.uint64)]
    return plans


def test_complex_kernels_build_as_cuda():
    """Kernels of complex64 and complex128 values (pyopencl's complex header, its
    OpenCL spellings: two-argument sincos, FLT_MAX, M_PI) build with NVRTC."""
    from fuseloop.lower import codegen

    fake = _fake_cuda_device()
    rng = np.random.default_rng(0)
    z = fl.asarray(rng.random(512) + 1j * rng.random(512))
    w = fl.asarray((rng.random(512) + 1j * rng.random(512)).astype(np.complex64))
    x = fl.asarray(rng.random(512))
    # (two kernels: each build reads the whole header; arcsin's helpers use M_PI, M_LN2)
    outs = [[z * z + x / z - 2j + fl.arcsin(z), (z == w) | fl.isnan(z)],
            [fl.sum(w * w.conj() + fl.cos(w) + fl.abs(w))]]
    for out in outs:
        plan = codegen.generate(fl.program(*out).lower(fake).t_unit, fake)
        _nvrtc_compiles(plan.source, plan.build_options, [plan.name])


def test_segmented_scan_kernels_build_as_cuda():
    """The scans by key's kernels (fuseloop.ops.segmented_kernels) build with NVRTC."""
    from fuseloop.ops import segmented_kernels

    f32, i64 = np.dtype(np.float32), np.dtype(np.int64)
    for kernel in segmented_kernels._kernels("max", i64, f32, f32, True, 256, 8):
        _nvrtc_compiles(kernel.plan.source, kernel.plan.build_options, [kernel.plan.name])


def test_hand_written_kernels_build_as_cuda():
    """The mask compaction's and the linalg kernels' OpenCL C builds for CUDA through
    the prelude's spellings (``__kernel``, ``__local``, ``barrier``, work-item ids)."""
    for plan in _hand_written_plans():
        _nvrtc_compiles(plan.source, plan.build_options, [plan.name])


def test_random_number_helpers_build_as_cuda():
    """Random123's headers (pyopencl's OpenCL copy) build with NVRTC, read as C."""
    from fuseloop.lower.scalar_ops import make_helper

    i64, u64, f32, u32 = (np.dtype(t) for t in (np.int64, np.uint64, np.float32, np.uint32))
    source = (make_helper("r123_normal_philox", (i64, i64, i64, f32)).source
              + make_helper("r123_bits_threefry", (i64, u64, u64, u32)).source
              + 'extern "C" __global__ void k(float *o)'
              + " { o[0] = fl_r123_normal_philox_i64_i64_i64_f32(1, 2, 3); }\n")
    _nvrtc_compiles(source, [], ["k"])


# }}}


# {{{ on a CUDA device


@pytest.fixture
def cuda_device():
    found = _cuda_devices()
    if not found:
        pytest.skip("no CUDA device (CuPy and a driver)")
    with fl.device(found[0]) as dev:
        yield dev


@needs_cuda
def test_expressions_match_numpy_on_cuda(cuda_device, fresh_stats):
    rng = np.random.default_rng(1)
    a = rng.random(100_003)
    b = rng.random(100_003)
    M = rng.random((300, 700))
    x, y, X = fl.asarray(a), fl.asarray(b), fl.asarray(M)
    assert x.device is cuda_device
    # (CUDA's sin is within 1 ulp of the correctly rounded result, as numpy's)
    np.testing.assert_allclose((2 * x - fl.sin(y) + x * y).get(), 2 * a - np.sin(b) + a * b,
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fl.sum(x * y).get(), np.sum(a * b), rtol=1e-10)
    np.testing.assert_allclose(X.max(axis=1).get(), M.max(axis=1))
    np.testing.assert_allclose(X.sum(axis=0).get(), M.sum(axis=0), rtol=1e-10)
    np.testing.assert_allclose((X @ X.T).get(), M @ M.T, rtol=1e-10)
    np.testing.assert_array_equal(X.argmax(axis=1).get(), M.argmax(axis=1))
    ints = np.arange(-50, 50, dtype=np.int32)
    k = fl.asarray(ints)
    np.testing.assert_array_equal((k // 7).get(), ints // 7)
    np.testing.assert_array_equal((k % 7).get(), ints % 7)
    # slices and views pass offsets as arguments
    np.testing.assert_allclose((x[1::3] * 2 + y[:-1:3]).get(), a[1::3] * 2 + b[:-1:3])
    # a cached expression compiles nothing the second time
    (2 * x - fl.sin(y) + x * y).get()
    before = fl.stats()["kernels_compiled"]
    (2 * x - fl.sin(y) + x * y).get()
    assert fl.stats()["kernels_compiled"] == before


@needs_cuda
def test_assignment_and_float32_on_cuda(cuda_device):
    a = np.linspace(-3, 3, 4097, dtype=np.float32)
    x = fl.asarray(a)
    x[10:20] = 5
    a[10:20] = 5
    x += 1
    a += 1
    np.testing.assert_allclose(x.get(), a, rtol=1e-6)
    np.testing.assert_allclose(fl.exp(x).get(), np.exp(a), rtol=1e-6)
    assert fl.zeros(5, dtype=np.int16).get().tolist() == [0] * 5
    assert fl.full(3, 2.5, dtype=np.float32).get().tolist() == [2.5] * 3


@needs_cuda
def test_mixing_backends_in_one_expression_names_both_devices(cuda_device):
    others = [d for d in fl.devices() if d.backend != "cuda" and d.usable]
    if not others:
        pytest.skip("no device of another backend")
    x = fl.asarray(np.ones(8))
    with fl.device(others[0]):
        y = fl.asarray(np.ones(8))
    with pytest.raises(DeviceError) as info:
        (x + y).get()
    assert cuda_device.name in str(info.value) and others[0].name in str(info.value)


@needs_cuda
def test_split_arrays_of_two_backends_name_both_sets(cuda_device):
    """Issue 29: a split array over CUDA devices and one over another backend's in one
    expression raise DeviceError naming both device sets (each set's indices)."""
    others = [d for d in fl.devices() if d.backend != "cuda" and d.usable]
    if not others:
        pytest.skip("no device of another backend")
    with fl.device([cuda_device, cuda_device]):
        x = fl.ones(8, dtype=np.float32)
    with fl.device([others[0], others[0]]):
        y = fl.ones(8, dtype=np.float32)
    with pytest.raises(DeviceError, match="different device sets") as info:
        x + y
    assert f"[{cuda_device.index}]" in str(info.value) and f"[{others[0].index}]" in str(info.value)


def test_a_split_over_cuda_without_a_driver_says_so():
    """Issue 29: ``fl.device`` of a list naming CUDA devices where none is found (no
    driver, or no CuPy) raises DeviceNotFoundError asking for the driver."""
    if _cuda_devices():
        pytest.skip("a CUDA device is present")
    with pytest.raises(DeviceNotFoundError, match=r"no cuda device.*driver"), \
            fl.device(["cuda:0", "cuda:1"]):
        pass


@needs_cuda
def test_hand_written_and_library_kernels_on_cuda(cuda_device):
    """Boolean masks (the compaction kernels), sorting and scans (CuPy), random
    numbers (Random123) and the linalg kernels run on the CUDA device."""
    rng = np.random.default_rng(3)
    h = rng.standard_normal(10_001)
    x = fl.asarray(h)
    np.testing.assert_array_equal(x[x > 0.5].get(), h[h > 0.5])
    np.testing.assert_array_equal(fl.nonzero(x > 1)[0].get(), np.nonzero(h > 1)[0])
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(h))
    np.testing.assert_array_equal(fl.argsort(-x, stable=True).get(), np.argsort(-h, kind="stable"))
    np.testing.assert_array_equal(fl.sort(x, descending=True).get(), np.sort(h)[::-1])
    np.testing.assert_allclose(fl.cumulative_sum(x).get(), np.cumsum(h), rtol=1e-12, atol=1e-9)
    k = fl.asarray(np.arange(1, 8, dtype=np.int64))
    np.testing.assert_array_equal(fl.cumulative_prod(k).get(), np.cumprod(np.arange(1, 8)))
    u = fl.random.uniform((1 << 16,), key=7).get()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    with fl.device(next(d for d in fl.devices() if d.backend == "opencl" and d.usable)):
        same = fl.random.uniform((1 << 16,), key=7).get()
    np.testing.assert_array_equal(u, same)  # (the same stream on both backends)
    a = rng.random((96, 96))
    spd = a @ a.T + 96 * np.eye(96)
    np.testing.assert_allclose(fl.linalg.cholesky(fl.asarray(spd)).get(), np.linalg.cholesky(spd),
                               rtol=1e-10, atol=1e-10)


@needs_cuda
def test_segmented_primitives_on_cuda(cuda_device):
    """The scans by key (fuseloop's own kernels on CUDA), reduce_by_key and sort_by_key
    (CuPy's sort) match numpy, over many tiles."""
    rng = np.random.default_rng(6)
    n = 300_001
    keys = np.repeat(rng.integers(0, 9, n), rng.integers(1, 50, n))[:n]
    vals = rng.standard_normal(n)
    starts = np.r_[True, keys[1:] != keys[:-1]]
    seg = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    cums = np.cumsum(vals)
    want = cums - np.r_[0.0, cums][first][seg]
    np.testing.assert_allclose(fl.inclusive_scan_by_key(keys, vals).get(), want, atol=1e-8)
    np.testing.assert_allclose(fl.exclusive_scan_by_key(keys, vals, initial=1.5).get(),
                               want - vals + 1.5, atol=1e-8)
    v32 = vals.astype(np.float32)
    running_max = np.empty_like(v32)
    for a, b in zip(first, np.r_[first[1:], n], strict=True):
        running_max[a:b] = np.maximum.accumulate(v32[a:b])
    np.testing.assert_array_equal(fl.inclusive_scan_by_key(keys, v32, op="max").get(),
                                  running_max)
    uk, sums = fl.reduce_by_key(keys, vals)
    np.testing.assert_array_equal(uk.get(), keys[first])
    np.testing.assert_allclose(sums.get(), np.add.reduceat(vals, first), atol=1e-8)
    sk, sv = fl.sort_by_key(keys[::-1].copy(), np.arange(n))
    order = np.argsort(keys[::-1], kind="stable")
    np.testing.assert_array_equal(sk.get(), keys[::-1][order])
    np.testing.assert_array_equal(sv.get(), order)


@needs_cuda
def test_complex_numbers_on_cuda(cuda_device):
    """complex64 and complex128 (pyopencl's complex header through the prelude) match
    numpy: arithmetic with a complex scalar argument, functions, a reduction, parts."""
    rng = np.random.default_rng(5)
    zh = rng.standard_normal(5001) + 1j * rng.standard_normal(5001)
    wh = zh.astype(np.complex64)
    z, w = fl.asarray(zh), fl.asarray(wh)
    np.testing.assert_allclose((z * z + 3 / z - 2j).get(), zh * zh + 3 / zh - 2j, rtol=1e-12)
    np.testing.assert_allclose((fl.exp(z) + fl.sqrt(z) + fl.arcsin(z)).get(),
                               np.exp(zh) + np.sqrt(zh) + np.arcsin(zh), rtol=1e-10)
    np.testing.assert_allclose(fl.sum(z * z).get(), np.sum(zh * zh), rtol=1e-10)
    np.testing.assert_allclose((w * w.conj() + fl.cos(w)).get(), wh * wh.conj() + np.cos(wh),
                               rtol=1e-5)
    # (|w| + re - im cancels near zero: an absolute tolerance too)
    np.testing.assert_allclose((fl.abs(w) + w.real - w.imag).get(),
                               np.abs(wh) + wh.real - wh.imag, rtol=1e-5, atol=1e-5)
    assert (z * 1j).dtype == np.complex128 and (w * 1j).get().dtype == np.complex64


# }}}


# {{{ interop on a CUDA device


@needs_cuda
def test_cupy_and_fuseloop_share_memory_both_ways(cuda_device):
    import cupy

    x = fl.asarray(np.arange(12, dtype=np.float32)) * 2
    c = cupy.asarray(x)  # (through __cuda_array_interface__)
    assert c.data.ptr == x.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(cupy.asnumpy(c), np.arange(12) * 2)
    src = cupy.arange(10, dtype=cupy.float64)
    y = fl.asarray(src)
    assert y.__cuda_array_interface__["data"][0] == src.data.ptr  # no copy
    src += 1  # (a write through CuPy is seen by fuseloop)
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal((y * 3).get(), (np.arange(10) + 1) * 3)
    # a strided producer cannot be shared
    with pytest.raises(BufferError, match="not C-contiguous"):
        fl.asarray(cupy.arange(10.0)[::2], copy=False)
    np.testing.assert_array_equal(fl.asarray(cupy.arange(10.0)[::2]).get(), np.arange(0, 10, 2))


@needs_cuda
def test_torch_tensors_in_and_out_without_a_copy(cuda_device):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.arange(16, dtype=torch.float32, device="cuda")
    x = fl.from_dlpack(t)
    assert x.__cuda_array_interface__["data"][0] == t.data_ptr()
    out = (fl.sin(x) * 2).eval()
    back = torch.from_dlpack(out)
    assert back.data_ptr() == out.__cuda_array_interface__["data"][0]
    np.testing.assert_allclose(back.cpu().numpy(), np.sin(np.arange(16, dtype=np.float32)) * 2,
                               rtol=1e-6)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s), fl.cuda.stream(s):
        y = (x + 1).eval()
    s.synchronize()
    np.testing.assert_array_equal(torch.as_tensor(y, device="cuda").cpu().numpy(),
                                  np.arange(16, dtype=np.float32) + 1)


@needs_cuda
def test_cuda_interop_on_other_devices_is_absent_or_an_error(cuda_device):
    with pytest.raises(DeviceError, match="CUDA device"):
        with fl.device(next(d for d in fl.devices() if d.backend != "cuda")):
            with fl.cuda.stream(0):
                pass


def test_arrays_off_cuda_have_no_cuda_array_interface():
    x = fl.asarray(np.ones(3))
    if x.device.backend != "cuda":
        assert not hasattr(x, "__cuda_array_interface__")

# }}}


# {{{ the launcher's arguments (no device: a recording stand-in for CuPy's Function)


class _Buf:
    def __init__(self, ptr):
        self.ptr = ptr


class _Stor:
    def __init__(self, ptr):
        self.buffer = _Buf(ptr)


def _arg_bytes(arg, sizes: dict[int, int]) -> bytes:
    """The bytes cuLaunchKernel would read for one argument CuPy passes unconverted
    (``sizes``: a scalar's size by the id of its argument object; addresses: 8)."""
    import ctypes

    from cupy.cuda.function import CPointer

    assert isinstance(arg, CPointer)  # (CuPy converts anything else on every launch)
    return ctypes.string_at(arg.ptr, sizes.get(id(arg), 8))


def test_scalar_arguments_hold_the_values_bytes():
    """Each kernel type's value, as the argument object CuPy passes, starts with the
    value's bytes (what cuLaunchKernel reads for a parameter of that size); a scalar
    object that comes again is not converted again."""
    import ctypes

    cuda = pytest.importorskip("fuseloop.backends.cuda")
    values = [np.int8(-3), np.uint16(65000), np.int32(-7), np.float32(-0.0), np.float64(1e300),
              np.uint64(2**64 - 3), np.bool_(True), np.complex64(1 - 2j),
              np.complex128(3.5 + 1e-300j)]
    for v in values:
        arg = cuda.by_value(v)
        assert ctypes.string_at(arg.ptr, v.itemsize) == v.tobytes(), v.dtype
    half = 0.5
    assert cuda.scalar_arg(half, np.float32) is cuda.scalar_arg(half, np.float32)
    assert cuda.scalar_arg(half, np.float64) is not cuda.scalar_arg(half, np.float32)


def test_launcher_passes_prepared_arguments_and_converts_only_changes(monkeypatch):
    """The CUDA launcher hands CuPy argument objects it passes as they are (addresses,
    and scalars of the declared types), converting an input or scalar only when it
    changed; the bytes each launch sends are the numpy values'."""
    cuda = pytest.importorskip("fuseloop.backends.cuda")
    from fuseloop.backends import LaunchSpec

    made = []
    sizes: dict[int, int] = {}
    real = cuda.by_value

    def by_value(v):
        arg = real(v)
        sizes[id(arg)] = np.asarray(v).itemsize
        made.append(arg)
        return arg

    monkeypatch.setattr(cuda, "by_value", by_value)
    spec = LaunchSpec(outputs=((0, 0),), inputs=((1, 0), (2, 1)), scalars=((3, 0, np.float32),),
                      consts=((4, np.int32(1000)),), global_size=(1024,), local_size=(256,),
                      one_output=True)
    sent = []

    class Function:
        def __call__(self, grid, block, args, shared, queue):
            assert (grid, block, shared, queue) == ((4, 1, 1), (256, 1, 1), 0, "q")
            sent.append([_arg_bytes(a, sizes) for a in args])

    kernel = cuda.CudaKernel(Function(), 0)
    monkeypatch.setattr(cuda, "_single_device", lambda: True)
    go = cuda.make_launcher(spec)
    last = [None] * (spec.n_args + 1)
    x, y = _Stor(0x7000), _Stor(0x8000)
    scale = np.float32(2.5)
    go(_Stor(0x1000), [x, y], [scale], kernel, last, "q")
    converted = len(made)
    go(_Stor(0x2000), [x, y], [scale], kernel, last, "q")
    assert len(made) == converted  # (same inputs and scalar: nothing converted again)
    go(_Stor(0x3000), [x, _Stor(0x9000)], [np.float32(-1)], kernel, last, "q")

    def row(out, a, b, s):
        return [np.uint64(out).tobytes(), np.uint64(a).tobytes(), np.uint64(b).tobytes(),
                np.float32(s).tobytes(), np.int32(1000).tobytes()]

    assert sent == [row(0x1000, 0x7000, 0x8000, 2.5), row(0x2000, 0x7000, 0x8000, 2.5),
                    row(0x3000, 0x7000, 0x9000, -1)]

# }}}
