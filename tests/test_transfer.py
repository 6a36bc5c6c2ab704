"""Host <-> device copies and waits (fuseloop.runtime.transfer)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyopencl as cl
import pytest

import fuseloop as fl
from fuseloop.backends import backend_for
from fuseloop.evaluate import upload
from fuseloop.runtime import devices, transfer

DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64, np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_asarray_copies_before_it_returns(device, dtype):
    if dtype is np.float64 and not device.has_fp64:
        pytest.skip("no fp64 on this device")
    rng = np.random.default_rng(3)
    for shape in [(1000,), (7, 5), (), (0,), (3, 0)]:
        host = np.asarray(rng.random(shape) * 100).astype(dtype)
        want = host.copy()
        x = fl.asarray(host)
        host[...] = 0  # the caller may change its array at once
        assert x.shape == want.shape and x.dtype == want.dtype
        np.testing.assert_array_equal(x.get(), want)
    strided = (np.arange(24) % 3).astype(dtype).reshape(4, 6).T  # not C-contiguous
    np.testing.assert_array_equal(fl.asarray(strided).get(), strided)


def test_asarray_on_a_cpu_device_enqueues_no_copy(device, monkeypatch):
    """On a CPU device the buffer is made from the host data: no queue command to wait
    for (a blocking write cost 150 us there against about 1 us)."""
    if device.type != "cpu":
        pytest.skip("GPUs upload into pooled buffers with a blocking write")
    from fuseloop.backends import opencl

    copies = []  # (device writes: pyopencl's write function, else its dispatching enqueue_copy)
    real_write, real_copy = opencl._write_buffer, cl.enqueue_copy
    if real_write is not None:
        monkeypatch.setattr(opencl, "_write_buffer", lambda *a: copies.append(1) or real_write(*a))
    monkeypatch.setattr(cl, "enqueue_copy", lambda *a, **k: copies.append(1) or real_copy(*a, **k))
    x = fl.asarray(np.arange(1000, dtype=np.int32))
    assert copies == []
    monkeypatch.undo()
    np.testing.assert_array_equal((x * 2).get(), np.arange(1000) * 2)


@pytest.mark.opencl_only
def test_upload_errors_are_device_memory_errors(device, monkeypatch):
    small = dataclasses.replace(device, max_alloc_size=16)  # (same index: same runtime)
    with pytest.raises(fl.errors.DeviceMemoryError, match="cannot allocate 32 bytes"):
        upload(np.zeros(8, np.float32), small)

    def exhausted(*args, **kwargs):
        raise cl.MemoryError("MEM_OBJECT_ALLOCATION_FAILURE (simulated)")

    class ExhaustedPool:
        allocate = staticmethod(exhausted)  # (GPUs' uploads)
        buffer = staticmethod(exhausted)  # (CPU devices' uploads)
        managed_bytes = 0

        def free_held(self):
            pass

    with monkeypatch.context() as m:
        m.setattr(devices._runtime(device).pool, "pool", ExhaustedPool())
        with pytest.raises(fl.errors.DeviceMemoryError, match="out of device memory"):
            fl.asarray(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(fl.asarray(np.arange(6.0)).get(), np.arange(6.0))


@pytest.mark.parametrize("spin_s", [0.0, 1e-3, 10.0])
def test_reads_and_synchronize_wait_for_all_earlier_work(device, monkeypatch, spin_s):
    """However long a CPU wait polls before it sleeps, a read returns the finished
    result and ``fl.synchronize`` returns after every earlier command."""
    monkeypatch.setattr(transfer, "SPIN_S", spin_s)
    h = np.linspace(0, 1, 1 << 20, dtype=np.float32)
    x = fl.asarray(h)
    y = fl.sin(x) * fl.cos(x) + fl.sqrt(x + 1)
    np.testing.assert_allclose(y.get(), np.sin(h) * np.cos(h) + np.sqrt(h + 1), rtol=2e-6)
    assert float(fl.sum(x)) == pytest.approx(h.sum(dtype=np.float64), rel=1e-5)
    outs = [(x[:1000] * k).eval() for k in range(100)]  # small launches, deferred
    backend = backend_for(device)
    marker = backend.marker(device.queue)  # (the queue enqueues them first)
    fl.synchronize()
    assert backend.event_status(marker) == 0  # complete
    np.testing.assert_array_equal(outs[7].get(), h[:1000] * 7)


class _FakeEvent:
    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.waited = False

    @property
    def command_execution_status(self) -> int:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def wait(self) -> None:
        self.waited = True
        if self.statuses[0] < 0:
            raise cl.RuntimeError("clWaitForEvents failed: EXEC_STATUS_ERROR (simulated)")


@pytest.mark.opencl_only
def test_a_polled_wait_sleeps_when_the_work_is_long_and_raises_on_failure(device,
                                                                          monkeypatch):
    cpu = dataclasses.replace(device, type="cpu")  # (the polling path, on any device)
    running = cl.command_execution_status.RUNNING
    complete = cl.command_execution_status.COMPLETE
    done_soon = _FakeEvent([running, running, complete])
    # (a deadline no loaded machine reaches between three polls: each yields the CPU)
    monkeypatch.setattr(transfer, "SPIN_S", 60.0)
    transfer.wait(done_soon, cpu)
    assert not done_soon.waited  # seen complete while polling
    monkeypatch.setattr(transfer, "SPIN_S", 1e-4)
    never = _FakeEvent([running])
    transfer.wait(never, cpu)
    assert never.waited  # polled past the deadline, then slept in wait()
    failed = _FakeEvent([running, -5])
    with pytest.raises(cl.RuntimeError, match="simulated"):
        transfer.wait(failed, cpu)
