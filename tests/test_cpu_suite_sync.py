"""A wait with nothing enqueued since the last completed wait makes no queue command
(issue 25: an idle ``fl.synchronize()`` enqueued a PoCL marker and polled it)."""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl
import pytest

import fuseloop as fl
from fuseloop.runtime.devices import _runtime


@pytest.fixture
def markers(device, monkeypatch):
    """The markers the runtime's waits enqueue (a list, one entry per marker)."""
    rt = _runtime(device)
    made: list[int] = []
    real = rt.marker
    monkeypatch.setattr(rt, "marker", lambda queue: made.append(1) or real(queue))
    return made


def test_an_idle_synchronize_enqueues_nothing(device, markers):
    x = fl.asarray(np.arange(1 << 16, dtype=np.float32))
    y = (x * 2 + 1).eval()
    fl.synchronize()  # (work was enqueued: waited for)
    first = len(markers)
    assert first <= 1 and (first == 1 or device.type != "cpu")
    for _ in range(3):
        fl.synchronize()
    assert len(markers) == first
    np.testing.assert_array_equal(y.get(), np.arange(1 << 16, dtype=np.float32) * 2 + 1)


def test_a_read_leaves_nothing_to_wait_for(device, markers):
    h = np.linspace(0, 1, 1 << 18, dtype=np.float32)
    x = fl.asarray(h)
    got = fl.sin(x).get()  # (the kernel, then the read after it on the in-order queue)
    fl.synchronize()
    assert markers == []
    np.testing.assert_allclose(got, np.sin(h), rtol=1e-6)


@pytest.mark.parametrize("small", [True, False])
def test_work_after_a_wait_is_waited_for(device, markers, small):
    """Launches (deferred small ones and large ones) after a completed wait mark the
    queue again: the next wait covers them."""
    n = 1000 if small else 1 << 20
    h = np.arange(n, dtype=np.float32)
    x = fl.asarray(h)
    (x + 1).eval()
    fl.synchronize()
    before = len(markers)
    rt = _runtime(device)
    outs = [(x + k).eval() for k in range(3)]
    fl.synchronize()
    if device.type == "cpu":
        assert len(markers) == before + 1
    assert not rt.deferred and not rt.enqueued
    marker = rt.marker(rt.bare_queue)
    rt.finish_queue(rt.bare_queue)
    assert rt.event_status(marker) == 0
    np.testing.assert_array_equal(outs[2].get(), h + 2)


@pytest.mark.opencl_only
def test_commands_fuseloop_did_not_see_are_still_waited_for(device):
    """A command enqueued on a queue object held across a wait (pyopencl, another
    thread) leaves no mark: the wait still finishes the queue."""
    h = np.arange(1 << 20, dtype=np.float32)
    x = fl.asarray(h)
    fl.synchronize()
    queue = device.queue
    fl.synchronize()
    assert not _runtime(device).enqueued
    out = np.empty_like(h)
    event = cl.enqueue_copy(queue, out, x._storage.buffer, is_blocking=False)
    fl.synchronize()
    assert event.command_execution_status == 0
    np.testing.assert_array_equal(out, h)


def test_another_threads_launch_is_waited_for(device):
    h = np.arange(1 << 20, dtype=np.float32)
    x = fl.asarray(h)
    (x * 3).eval()
    fl.synchronize()
    box = []

    def launch() -> None:
        with fl.device(device):
            box.append((x * 3).eval())

    t = threading.Thread(target=launch)
    t.start()
    t.join()
    fl.synchronize()
    np.testing.assert_array_equal(box[0].get(), h * 3)
