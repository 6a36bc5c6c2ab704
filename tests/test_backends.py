"""The backend interface (``fuseloop.backends``) and its OpenCL implementation."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import backends, cache, launching
from fuseloop.backends import (
    Backend,
    BuiltProgram,
    DeviceInfo,
    LaunchSpec,
    backend_for,
    get_backend,
)
from fuseloop.cache_disk import KernelPlan
from fuseloop.ops import compaction

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
