"""The backend interface (``fuseloop.backends``) and its OpenCL implementation."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import fuseloop as fl
from fuseloop import backends, cache, evaluate, launching
from fuseloop.backends import (
    Backend,
    BuiltProgram,
    DeviceInfo,
    LaunchSpec,
    backend_for,
    get_backend,
)
from fuseloop.backends.opencl import OpenCLBackend
from fuseloop.cache_disk import KernelPlan
from fuseloop.errors import DeviceMemoryError, OutOfMemoryError
from fuseloop.ops import compaction
from fuseloop.runtime import devices
from fuseloop.runtime.memory import DeviceMemory

pytestmark = pytest.mark.opencl_only  # (the OpenCL backend's own objects)

_SOURCE = """
__kernel void axpb(__global float *out, __global const float *x, const float a,
                   const long n)
{
    const long i = get_global_id(0);
    if (i < n)
        out[i] = a * x[i] + 1.0f;
}
"""


# {{{ no device


def test_the_registry_names_opencl_and_gives_one_object():
    assert "opencl" in backends.BACKENDS
    b = get_backend("opencl")
    assert isinstance(b, Backend) and b.name == "opencl" and b.language == "opencl"
    assert get_backend("opencl") is b
    with pytest.raises(KeyError):
        get_backend("no-such-backend")


def test_a_backend_must_implement_every_method():
    class Half(Backend):
        name = "half"
        language = "c"

        def discover(self):
            return []

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]


def test_launch_spec_counts_its_arguments():
    spec = LaunchSpec(outputs=((0, 0),), inputs=((1, 0), (2, 1)),
                      scalars=((3, 0, np.float32),), consts=((5, np.int32(7)),),
                      global_size=(64,), local_size=(16,))
    assert spec.n_args == 6 and not spec.one_output and spec.error_arg is None
    assert LaunchSpec((), (), (), (), (1,), (1,), error_arg=2).n_args == 3
    with pytest.raises(AttributeError):
        spec.global_size = (1,)  # type: ignore[misc]  (frozen)


def test_device_info_and_built_program_are_records():
    info = DeviceInfo("opencl", "dev", "cpu", "plat", "vendor", "1.0", 1 << 30, 1 << 28,
                      True, 4, 1024, handle=object())
    same = DeviceInfo("opencl", "dev", "cpu", "plat", "vendor", "1.0", 1 << 30, 1 << 28,
                      True, 4, 1024, handle=object())
    assert info == same  # (the handle is not part of the record's value)
    assert info.problem is None and "handle" not in repr(info)
    p = BuiltProgram("opencl", handle=object(), kernel_names=("k",))
    assert p.kernel_names == ("k",) and p != BuiltProgram("opencl", p.handle, ("k",))


# }}}


# {{{ on a device


def test_discovery_matches_the_devices(device):
    b = backend_for(device)
    infos = b.discover()
    assert any(i.name == device.name and i.platform == device.platform for i in infos)
    assert device.backend == "opencl" and device.max_work_group_size >= 1


def _build(device, inline=False, monkeypatch=None):
    if inline:
        monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
    return backend_for(device).build_source(device, _SOURCE, [], ("axpb",))


def _run(device, program):
    b = backend_for(device)
    n = 100
    xh = np.arange(n, dtype=np.float32)
    x = b.buffer_from_host(device, xh)
    out = b.allocate(device, n * 4)
    kernel = b.kernel(program, "axpb")
    event = b.launch(device, kernel, (128,), None, [out, x, np.float32(3), np.int64(n)])
    b.wait(device, event)
    got = np.empty(n, np.float32)
    b.wait(device, b.download(device, got, out))
    np.testing.assert_array_equal(got, 3 * xh + 1)


@pytest.mark.parametrize("inline", [False, True], ids=["worker", "inline"])
def test_build_from_source_and_launch(device, monkeypatch, inline):
    program = _build(device, inline, monkeypatch)
    assert program.backend == "opencl" and program.kernel_names == ("axpb",)
    _run(device, program)


def test_build_from_binary_round_trip(device):
    b = backend_for(device)
    binary = b.binary_of(_build(device))
    if binary is None:
        pytest.skip(f"{device.name} provides no program binary")
    again = b.build_binary(device, binary, [], ("axpb",))
    assert again is not None
    _run(device, again)
    assert b.build_binary(device, b"not a device binary", [], ("axpb",)) is None


def test_a_rejected_source_raises_kernel_build_error(device):
    with pytest.raises(fl.errors.KernelBuildError, match="rejected") as info:
        backend_for(device).build_source(device, "__kernel void k( {", [], ("k",))
    assert info.value.build_log


def test_events_copies_and_finish(device):
    b = backend_for(device)
    h = np.arange(1000, dtype=np.int64)
    buf = b.allocate(device, h.nbytes)
    b.wait(device, b.upload(device, buf, h))
    other = b.allocate(device, h.nbytes)
    event = b.copy(device, other, buf, h.nbytes)
    b.finish(device)
    assert event.command_execution_status == 0  # CL_COMPLETE
    got = np.zeros_like(h)
    b.wait(device, b.download(device, got, other))
    np.testing.assert_array_equal(got, h)
    b.free(other)


def test_a_launcher_sets_only_changed_arguments(device):
    # the plan's launcher: inputs by storage identity, scalars by object identity
    b = backend_for(device)
    program = _build(device)
    n = 64
    spec = LaunchSpec(outputs=((0, 0),), inputs=((1, 0),), scalars=((2, 0, np.float32),),
                      consts=((3, np.int64(n)),), global_size=(n,), local_size=(n,),
                      one_output=True)
    go = b.make_launcher(spec)
    kernel = b.kernel(program, "axpb", spec.consts)
    last = [None] * spec.n_args
    xh = np.arange(n, dtype=np.float32)
    x = fl.asarray(xh)
    out = fl.empty(n, np.float32)
    rt = device.queue
    two = np.float32(2)
    go(out._storage, [x._storage], [two], kernel, last, rt)
    assert last[1]() is x._storage and last[2] is two
    np.testing.assert_array_equal(out.get(), 2 * xh + 1)
    y = fl.asarray(xh + 10)
    go(out._storage, [y._storage], [np.float32(5)], kernel, last, device.queue)
    np.testing.assert_array_equal(out.get(), 5 * (xh + 10) + 1)


def test_two_plans_of_one_kernel_object_set_their_constants_by_value(device, monkeypatch):
    # plans of one kernel object with other constants (a loop over rows: other offsets
    # each statement) set them from their bytes: pyopencl's set_arg takes ~25 us for a
    # numpy scalar, which such loops paid per constant and statement
    if device.backend != "opencl":
        pytest.skip("OpenCL launchers")
    from fuseloop.backends import opencl

    b = backend_for(device)
    program = _build(device)
    n = 64
    specs = [LaunchSpec(outputs=((0, 0),), inputs=((1, 0),), scalars=((2, 0, np.float32),),
                        consts=((3, np.int64(m)),), global_size=(n,), local_size=(n,),
                        one_output=True) for m in (n, n // 2)]
    goes = [b.make_launcher(s) for s in specs]
    kernel = b.kernel(program, "axpb", specs[0].consts)
    last = [None] * specs[0].n_args
    by_object = []
    real_set_arg = opencl._set_arg
    monkeypatch.setattr(opencl, "_set_arg", lambda k, i, v: (by_object.append(v),
                                                             real_set_arg(k, i, v)))
    xh = np.arange(n, dtype=np.float32)
    x = fl.asarray(xh)
    for go, m in zip(goes * 2, (n, n // 2) * 2):
        out = fl.zeros(n, np.float32)
        go(out._storage, [x._storage], [np.float32(2)], kernel, last, device.queue)
        want = np.where(np.arange(n) < m, 2 * xh + 1, 0)
        np.testing.assert_array_equal(out.get(), want)
    assert not [v for v in by_object if isinstance(v, np.generic)]


def test_a_launcher_family_binds_other_constants(device):
    # a statement's new offsets: the family of one spec (the backend's own, and the base
    # class's default through make_launcher) launches with the constants it is given
    b = backend_for(device)
    program = _build(device)
    n = 64
    spec = LaunchSpec(outputs=((0, 0),), inputs=((1, 0),), scalars=((2, 0, np.float32),),
                      consts=((3, np.int64(n)),), global_size=(n,), local_size=(n,),
                      one_output=True)
    kernel = b.kernel(program, "axpb", spec.consts)
    last = [None] * spec.n_args
    xh = np.arange(n, dtype=np.float32)
    x = fl.asarray(xh)
    for family in (b.launcher_family(spec), Backend.launcher_family(b, spec)):
        for m in (n // 4, n // 2):
            out = fl.zeros(n, np.float32)
            go = family(((3, np.int64(m)),))
            go(out._storage, [x._storage], [np.float32(2)], kernel, last, device.queue)
            want = np.where(np.arange(n) < m, 2 * xh + 1, 0)
            np.testing.assert_array_equal(out.get(), want)


def _forget_source_kernels():
    with cache._memory_lock:
        for held in (cache._memory, cache._retired):
            for key in [k for k in held if isinstance(k[0], str)]:
                held.pop(key).in_cache = False


def test_hand_written_kernels_go_through_the_kernel_cache(device, fresh_stats):
    # a SourceKernel compiles once per device, from the disk cache in a "new process"
    plan = KernelPlan(name="axpb", source=_SOURCE, arg_names=["out0", "in0", "s0", "s1"],
                      gsize=["(N + 63) // 64"], lsize=["64"], build_options=[],
                      arg_dtypes=[None, None, "float32", "int64"])
    sk = cache.SourceKernel(plan)
    assert cache.SourceKernel(plan).digest == sk.digest
    fl.reset_stats()
    compiled = sk.get(device)
    s = fl.stats()
    assert s["memory_cache_misses"] == 1 and s["kernels_compiled"] <= 1
    assert sk.get(device) is compiled and fl.stats()["memory_cache_hits"] == 1
    n = 300
    lp = launching.plan_for(compiled, (), n, 1, device)
    assert lp is not None and launching.plan_for(compiled, (), n, 1, device) is lp
    xh = np.linspace(0, 1, n, dtype=np.float32)
    x, out = fl.asarray(xh), fl.empty(n, np.float32)
    before = fl.stats()["kernels_launched"]
    launching.enqueue(lp, [out._storage], [x._storage], [np.float32(4), np.int64(n)], False,
                      device)
    assert fl.stats()["kernels_launched"] == before + 1
    np.testing.assert_allclose(out.get(), 4 * xh + 1, rtol=1e-6)
    if cache.cache_dir() is not None:
        _forget_source_kernels()
        fl.reset_stats()
        sk.get(device)
        s = fl.stats()
        assert s["disk_cache_hits"] == 1 and s["kernels_compiled"] == 1


def test_compaction_goes_through_the_common_path(device, monkeypatch):
    # built by the kernel cache (counted compiled once, then memory-cache hits) and
    # launched by launching.enqueue, one kernel for one block, two for several (counted
    # as one scan each time, not in kernels_launched: docs/api.md)
    launched = []
    real = launching.enqueue

    def counted(plan, *args, **kwargs):
        launched.append(plan.compiled.plan.name)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(launching, "enqueue", counted)
    layout = compaction.layout_for(device)
    monkeypatch.setattr(compaction, "layout_for",
                        lambda d: compaction.Layout(layout.group, layout.per_item, 1024, 8))
    _forget_source_kernels()
    h = np.arange(20_000) % 7 == 0
    m = fl.asarray(h)
    fl.reset_stats()
    got = fl.flatnonzero(m).get()
    np.testing.assert_array_equal(got, np.flatnonzero(h))
    s = fl.stats()
    assert s["kernels_compiled"] == 2  # count and compact, nothing else
    assert s["memory_cache_misses"] == 2 and s["scans"] == 1
    assert s["kernels_launched"] == 0
    assert launched == ["fuseloop_mask_count", "fuseloop_mask_compact"]
    del launched[:]
    fl.reset_stats()
    small = fl.asarray(h[:500])
    np.testing.assert_array_equal(fl.flatnonzero(small).get(), np.flatnonzero(h[:500]))
    s = fl.stats()
    assert s["kernels_compiled"] == 0 and s["scans"] == 1 and launched == ["fuseloop_mask_compact"]
    assert s["memory_cache_hits"] == 1 and s["memory_cache_misses"] == 0
    del launched[:]
    fl.reset_stats()  # the same size again: the kept plan, still one memory-cache hit
    np.testing.assert_array_equal(fl.flatnonzero(small).get(), np.flatnonzero(h[:500]))
    s = fl.stats()
    assert s["memory_cache_hits"] == 1 and s["kernels_compiled"] == 0
    assert launched == ["fuseloop_mask_compact"]


# }}}


# {{{ the per-device runtime through the backend


def test_read_from_a_byte_offset(device):
    """enqueue_read's ``offset``: a split array's halo rows are read where they lie."""
    b = backend_for(device)
    context, queue = b.open(device)
    h = np.arange(64, dtype=np.int32)
    buf = b.buffer_pool(device, context, queue).allocate(h.nbytes)
    b.enqueue_write(queue, buf, h, None, True)
    got = np.zeros(8, np.int32)
    b.enqueue_read(queue, got, buf, None, True, 10 * h.itemsize)
    np.testing.assert_array_equal(got, h[10:18])


def test_open_gives_a_queue_with_its_own_pool_and_copies(device):
    b = backend_for(device)
    context, queue = b.open(device)
    assert (context, queue) != (device.context, device.queue)  # (a new pair each call)
    pool = b.buffer_pool(device, context, queue)
    h = np.arange(1000, dtype=np.int32)
    buf = pool.allocate(h.nbytes)
    assert pool.managed_bytes >= h.nbytes
    b.enqueue_write(queue, buf, h, None, True)
    got = np.zeros_like(h)
    b.enqueue_read(queue, got, buf, None, True)
    np.testing.assert_array_equal(got, h)
    released = []
    direct = pool.buffer(h.nbytes, h[::-1].copy(), released.append)
    b.enqueue_read(queue, got, direct, None, True)
    np.testing.assert_array_equal(got, h[::-1])
    del direct
    assert released == [h.nbytes]
    del buf
    pool.free_held()
    assert pool.managed_bytes == 0


def test_copies_with_an_offset_and_fills_round_trip(device):
    b = backend_for(device)
    h = np.arange(64, dtype=np.int64)
    src = b.allocate(device, h.nbytes)
    b.upload(device, src, h, blocking=True)
    dst = b.allocate(device, h.nbytes)
    b.fill(device, dst, np.array([-1], np.int64), h.nbytes)
    b.copy(device, dst, src, 16 * 8, src_offset=8 * 8)
    got = np.empty_like(h)
    b.wait(device, b.download(device, got, dst))
    np.testing.assert_array_equal(got[:16], h[8:24])
    np.testing.assert_array_equal(got[16:], -1)


def test_events_are_polled_through_the_backend(device):
    b = backend_for(device)
    _, queue = b.open(device)
    marker = b.marker(queue)
    b.submit(queue)
    b.finish_queue(queue)
    assert b.event_status(marker) == 0
    b.wait_event(marker)
    # the runtime binds the same functions once per device
    rt = devices._runtime(device)
    assert rt.event_status == b.event_status and rt.submit == b.submit


def test_the_gate_holds_a_queue_until_released(device):
    b = backend_for(device)
    context, queue = b.open(device)
    release = b.hold(context, queue)
    assert release is not None  # (OpenCL holds with a user event)
    marker = b.marker(queue)
    b.submit(queue)
    assert b.event_status(marker) > 0  # held: not complete, not failed
    release()
    b.wait_event(marker)
    assert b.event_status(marker) == 0


def test_a_backend_without_a_gate_runs_batches_as_enqueued(device, monkeypatch):
    rt = devices._runtime(device)
    fl.synchronize()
    monkeypatch.setattr(rt, "gate_at", 2)
    monkeypatch.setattr(rt, "hold", lambda context, queue: None)
    h = np.arange(100, dtype=np.float32)
    x = fl.asarray(h)
    outs = [(x * k).eval() for k in range(5)]
    fl.synchronize()
    np.testing.assert_array_equal(outs[3].get(), h * 3)


class _Refusing:
    """A buffer pool whose driver refuses the first ``n`` allocations."""

    def __init__(self, pool, n):
        self.real, self.left = pool, n
        self.managed_bytes = pool.managed_bytes

    def _refuse(self):
        if self.left:
            self.left -= 1
            raise cl.MemoryError("MEM_OBJECT_ALLOCATION_FAILURE (simulated)")

    def allocate(self, nbytes):
        self._refuse()
        return self.real.allocate(nbytes)

    def buffer(self, nbytes, host, on_release):
        self._refuse()
        return self.real.buffer(nbytes, host, on_release)

    def free_held(self):
        self.real.free_held()


def test_driver_refusals_become_the_backends_out_of_memory(device):
    b = backend_for(device)
    memory = DeviceMemory(device, device.context, device.queue)
    assert memory.OutOfMemory is b.OutOfMemory
    memory.pool = _Refusing(memory.pool, 2)
    for make in (lambda: memory.allocate(4096), lambda: memory.host_buffer(np.zeros(8))):
        with pytest.raises(OutOfMemoryError, match="refused to allocate") as info:
            make()
        assert isinstance(info.value, b.OutOfMemory | DeviceMemoryError)
        assert isinstance(info.value, cl.MemoryError)  # (pyopencl's code still catches it)
        assert device.name in str(info.value)
    assert memory.allocate(4096) is not None


def test_evaluation_retries_once_after_a_refusal(device, monkeypatch):
    rt = devices._runtime(device)
    monkeypatch.setattr(rt.pool, "pool", _Refusing(rt.pool.pool, 1))
    storage = evaluate.allocate(4096, device)
    assert storage.nbytes == 4096 and rt.pool.pool.left == 0
    monkeypatch.setattr(rt.pool, "pool", _Refusing(rt.pool.pool.real, 2))
    with pytest.raises(DeviceMemoryError, match="out of device memory allocating 4096"):
        evaluate.allocate(4096, device)


def test_the_code_generator_uses_the_backends_loopy_target(device, monkeypatch):
    import loopy as lp

    b = backend_for(device)
    assert isinstance(b.loopy_target(), lp.OpenCLTarget)
    assert b.loopy_target() is not b.loopy_target()
    made = []

    class Marked(lp.OpenCLTarget):
        """A target no other code makes."""

    def counted(self):
        made.append(Marked())
        return made[-1]

    monkeypatch.setattr(OpenCLBackend, "loopy_target", counted)
    x = fl.asarray(np.arange(10, dtype=np.float32))
    lowered = fl.program(x * 3 + 1).lower(device)
    # (equal targets are one object in the code generator, lower/codegen.py: the one
    # used may be an earlier equal one)
    target = lowered.t_unit_before.target
    assert made and type(target) is Marked and target == made[-1]


class _Relabelled(OpenCLBackend):
    """OpenCL under another label: a second backend, as a new module would add one."""

    name = "relabelled"
    opened: list = []

    def open(self, device):
        self.opened.append(device.index)
        return super().open(device)


def test_a_registered_backend_runs_a_device_end_to_end(device, monkeypatch):
    # a backend registered under its own label: the runtime opens the device, counts
    # its buffers and generates code through it, and evaluation needs nothing else
    monkeypatch.setitem(backends._loaded, "relabelled", _Relabelled())
    present = devices._all_devices()
    index = len(present)  # (a device's index is its place in the list)
    other = devices.Device(**{**{f: getattr(device, f) for f in (
        "name", "type", "platform", "vendor", "driver_version", "global_mem_size",
        "max_alloc_size", "has_fp64", "cl_device", "compute_units", "runtime",
        "max_work_group_size")}, "index": index, "backend": "relabelled"})
    monkeypatch.setattr(devices, "_devices", [*present, other])
    # (compile workers find a device by its number among OpenCL's: this one has none)
    monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
    try:
        h = np.linspace(0, 1, 50, dtype=np.float32)
        x = fl.asarray(h, device=other)
        y = fl.zeros(50, np.float32, device=other)
        np.testing.assert_allclose(((2 * x + y) - 1).get(), 2 * h - 1, rtol=1e-6)
        assert _Relabelled.opened == [index]
        assert backend_for(other) is backends._loaded["relabelled"]
    finally:
        fl.synchronize()
        devices._runtimes.pop(index, None)
        _Relabelled.opened.clear()


# }}}
