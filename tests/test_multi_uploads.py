"""Halo uploads left to the devices' deferred work (issue 29, ``fuseloop.multi.uploads``)
over two PoCL CPU devices, a context each (halo rows through the host), in a child
process (the device list is made once per process): a halo read that fails, or a halo
write the driver refuses, is raised once, as HaloTransferError, at the next
synchronisation or read back; the devices' queues are not blocked by it and later steps
equal one device's again; an interruption leaves the upload to go on at the next use.
A write a deferred upload makes on another thread while the batch's thread settles its
writes under way is kept; threads stepping split stencils at once over the same devices
with deferred uploads on (each thread's uploads run by the others' launches) equal one
device's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.multi import exchange, uploads
from fuseloop.runtime.devices import _runtime

# (both child scripts' opening: two PoCL CPU devices, or a skip)
_POCL_PAIR = textwrap.dedent('''
    import fuseloop as fl
    pocl = [d for d in fl.devices() if "Portable" in d.platform and d.type == "cpu"]
    if len(pocl) < 2:
        print("SKIP: PoCL did not list 2 CPU devices")
        raise SystemExit(0)
    devs = pocl[:2]
''')

_CHILD = _POCL_PAIR + textwrap.dedent('''
    import numpy as np
    import pyopencl as cl
    import fuseloop as fl
    from fuseloop.errors import HaloTransferError
    from fuseloop.multi import uploads
    from fuseloop.runtime.devices import _runtime

    assert devs[0].context is not devs[1].context
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    un = np.random.default_rng(13).standard_normal((40, 24)).astype(np.float32)
    with fl.device(devs):
        u = fl.asarray(un)
    one = fl.asarray(un, device=devs[0])

    def step(a):
        return (a + np.float32(0.1) * fl.stencil(a, w, boundary="wrap")).eval()

    def failing_stencil(a):
        """The stencil of ``a`` with one halo read of device 1's upload failed (its
        event replaced by a user event the driver reports as failed)."""
        s = fl.stencil(a, w, boundary="wrap")
        pending = [go for go, _ in _runtime(devs[1]).deferred
                   if type(go) is uploads.DeferredUpload]
        assert len(pending) == 1 and pending[0].reads, pending
        event, source, *rest = pending[0].reads[0]
        failed = cl.UserEvent(_runtime(source).context)
        failed.set_status(-5)
        pending[0].reads[0] = (failed, source, *rest)
        return s

    def refused_write(*args):
        raise RuntimeError("write refused (test)")

    def refusing_stencil(a):
        """The stencil of ``a`` with device 1's halo write refused when it is enqueued."""
        s = fl.stencil(a, w, boundary="wrap")
        rt = _runtime(devs[1])
        rt.enqueue_write = refused_write
        return s

    for _ in range(3):  # (plans recorded and replayed)
        u, one = step(u), step(one)
    np.testing.assert_array_equal(u.get(), one.get())
    real_write = _runtime(devs[1]).enqueue_write
    for how, make in (("synchronize", failing_stencil), ("get", failing_stencil),
                      ("synchronize", refusing_stencil)):
        s = make(u)
        bad = (u + np.float32(0.1) * s).eval()  # (the upload runs at the parts' launch)
        _runtime(devs[1]).enqueue_write = real_write
        assert all(not _runtime(d).deferred for d in devs)  # (not put back: not blocked)
        try:
            fl.synchronize() if how == "synchronize" else bad.get()
        except HaloTransferError as e:
            assert "could not be copied to device [" in str(e) and devs[1].name in str(e), e
            assert e.__cause__ is not None
        else:
            raise AssertionError("the failed halo read was not raised")
        fl.synchronize()  # (raised once)
        for _ in range(3):  # (the step computed again, and later steps: one device's)
            u, one = step(u), step(one)
            np.testing.assert_array_equal(u.get(), one.get())
    # an interruption while an upload waits for a read: the upload stays in the device's
    # deferred work and goes on from there at the next use of the queue
    real_wait = uploads.wait
    calls = []

    def interrupted_wait(event, device):
        calls.append(device)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_wait(event, device)

    s, s_one = fl.stencil(u, w, boundary="wrap"), fl.stencil(one, w, boundary="wrap")
    uploads.wait = interrupted_wait
    try:
        (u + np.float32(0.1) * s).eval()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interruption was not raised")
    assert any(type(go) is uploads.DeferredUpload for d in devs for go, _ in _runtime(d).deferred)
    fl.synchronize()  # (the rest of the upload, no error kept)
    uploads.wait = real_wait
    assert all(not _runtime(d).deferred for d in devs)
    np.testing.assert_array_equal((u + np.float32(0.1) * s).get(),
                                  (one + np.float32(0.1) * s_one).get())
    print("ok")
''')


def _run_on_two_pocl_devices(script: str) -> None:
    """Run a child script over two PoCL CPU devices in separate contexts, deferred
    uploads on; skip when PoCL lists fewer, else expect its last line to be ``ok``."""
    env = dict(os.environ, POCL_DEVICES="pthread pthread", FUSELOOP_HOST_PATH="0",
               FUSELOOP_OPENCL_SHARED_CONTEXT="0", FUSELOOP_MULTI_DEFERRED_UPLOADS="1")
    env.pop("FUSELOOP_DEVICE", None)  # (it might name a device that is not listed now)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    if run.stdout.startswith("SKIP"):
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


def test_failed_halo_read_raised_once_at_the_next_sync_on_pocl_devices():
    _run_on_two_pocl_devices(_CHILD)


def test_a_write_appended_by_another_thread_while_settling_is_kept(device, monkeypatch):
    """A DeferredUpload run by another thread's flush (its write noted in this thread's
    in-flight writes) while this thread settles them, waiting for its oldest write over
    the most it keeps: the other thread's write is still there after."""
    exchange._settle_uploads()
    in_flight = exchange._in_flight()
    rt = _runtime(device)
    host = np.arange(256, dtype=np.float32)
    target = fl.empty(256, np.float32).eval()
    pending = [fl.empty(256, np.float32).eval() for _ in range(2)]
    fl.synchronize()
    for p in pending:  # (two writes of this thread, seen as still running below)
        in_flight.append((rt.enqueue_write(rt.queue, p._storage.buffer, host, None, False),
                          device, host, None))
    up = uploads.DeferredUpload(device, in_flight)
    up.writes.append((host, target._storage.buffer, None))
    real_wait = uploads.wait
    ran = []

    def wait_with_another_thread(event, dev):
        if not ran:  # (while the oldest write is waited for, the other thread writes)
            ran.append(True)
            other = threading.Thread(target=up, args=(rt.queue,))
            other.start()
            other.join()
        real_wait(event, dev)

    monkeypatch.setattr(exchange, "IN_FLIGHT_MAX", 1)
    monkeypatch.setattr(uploads, "wait", wait_with_another_thread)
    monkeypatch.setattr(rt, "event_status", lambda event: 1)
    exchange._settle_uploads()
    monkeypatch.undo()
    assert ran and not up.writes
    assert len(in_flight) == 2  # (this thread's newer write and the other thread's)
    fl.synchronize()
    exchange._settle_uploads()
    assert len(in_flight) == 0
    np.testing.assert_array_equal(target.get(), host)


_THREADS = _POCL_PAIR + textwrap.dedent('''
    import threading
    import numpy as np
    import fuseloop as fl
    from fuseloop.multi import exchange

    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    errors, results = [], {}

    def steps(k):
        try:
            un = np.random.default_rng(k).standard_normal((48, 16)).astype(np.float32)
            with fl.device(devs):
                u = fl.asarray(un)
            one = fl.asarray(un, device=devs[0])
            for _ in range(12):
                u = (u + np.float32(0.1) * fl.stencil(u, w, boundary="wrap")).eval()
                one = (one + np.float32(0.1) * fl.stencil(one, w, boundary="wrap")).eval()
            results[k] = (u.get(), one.get())
            fl.synchronize()
            exchange._settle_uploads()
            assert len(exchange._in_flight()) == 0, len(exchange._in_flight())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=steps, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(results) == [0, 1, 2, 3]
    for k, (split, one) in results.items():
        np.testing.assert_array_equal(split, one)
    print("ok")
''')


def test_threads_stepping_split_stencils_with_deferred_uploads_on_pocl_devices():
    _run_on_two_pocl_devices(_THREADS)
