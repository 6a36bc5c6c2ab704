"""Halo uploads left to the devices' deferred work (issue 29, ``fuseloop.multi.uploads``)
over two PoCL CPU devices, a context each (halo rows through the host), in a child
process (the device list is made once per process): a halo read that fails, or a halo
write the driver refuses, is raised once, as HaloTransferError, at the next
synchronisation or read back; the devices' queues are not blocked by it and later steps
equal one device's again; an interruption leaves the upload to go on at the next use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent('''
    import numpy as np
    import pyopencl as cl
    import fuseloop as fl
    from fuseloop.errors import HaloTransferError
    from fuseloop.multi import uploads
    from fuseloop.runtime.devices import _runtime

    pocl = [d for d in fl.devices() if "Portable" in d.platform and d.type == "cpu"]
    if len(pocl) < 2:
        print("SKIP: PoCL did not list 2 CPU devices")
        raise SystemExit(0)
    devs = pocl[:2]
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


def test_failed_halo_read_raised_once_at_the_next_sync_on_pocl_devices():
    env = dict(os.environ, POCL_DEVICES="pthread pthread", FUSELOOP_HOST_PATH="0",
               FUSELOOP_OPENCL_SHARED_CONTEXT="0", FUSELOOP_MULTI_DEFERRED_UPLOADS="1")
    env.pop("FUSELOOP_DEVICE", None)  # (it might name a device that is not listed now)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    if run.stdout.startswith("SKIP"):
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
