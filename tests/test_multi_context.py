"""Split arrays over two OpenCL devices of one platform (issue 29): in one shared
context (the default) partial results are combined and halos exchanged on the devices,
without a host read or wait; with a context per device (``FUSELOOP_OPENCL_SHARED_CONTEXT=0``)
through the host.  PoCL's CPU driver listed twice (``POCL_DEVICES="pthread pthread"``)
gives the two devices, in a child process (the device list is made once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# (a child's first lines after its imports: two PoCL CPU devices, or a skip)
_TWO_POCL = textwrap.dedent('''
    pocl = [d for d in fl.devices() if "Portable" in d.platform and d.type == "cpu"]
    if len(pocl) < 2:
        print("SKIP: PoCL did not list two CPU devices")
        raise SystemExit(0)
    d0, d1 = pocl[:2]
''')

_CHILD = textwrap.dedent('''
    import numpy as np
    import fuseloop as fl
    from fuseloop.multi import EXCHANGED
    from fuseloop.runtime import devices
''') + _TWO_POCL + textwrap.dedent('''
    shared = d0.context is d1.context
    print("shared", shared)
    rng = np.random.default_rng(29)
    an = rng.integers(-50, 50, (3001, 3)).astype(np.int32)
    xn = rng.random(5000, np.float32)
    un = rng.standard_normal((40, 33)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    with fl.device([d0, d1]):
        a, x, u = fl.asarray(an), fl.asarray(xn), fl.asarray(un)
    fl.synchronize()
    calls = []
    for d in (d0, d1):  # (the runtimes' reads and waits, recorded)
        rt = devices._runtime(d)
        for name in ("enqueue_read", "wait_event", "finish_queue"):
            def wrap(*args, _fn=getattr(rt, name), _name=name):
                calls.append(_name)
                return _fn(*args)
            setattr(rt, name, wrap)
    before = dict(EXCHANGED)
    total, cols, hi = fl.sum(a), fl.sum(a, axis=0), a.max(axis=0, keepdims=True)
    count, mean, dot = fl.count_nonzero(a > 0), a.mean(axis=0), fl.sum(x * x)
    step = u + np.float32(0.1) * fl.stencil(u, w, boundary="wrap")
    step.eval()
    print("host calls", len(calls))
    print("through_host", EXCHANGED["through_host"] - before["through_host"])
    print("copies", EXCHANGED["copies"] - before["copies"])
    assert total.device is d0 and total.shape == () and hi.shape == (1, 3)
    assert int(total) == an.sum() and int(count) == np.count_nonzero(an > 0)
    np.testing.assert_array_equal(cols.get(), an.sum(axis=0))
    np.testing.assert_array_equal(hi.get(), an.max(axis=0, keepdims=True))
    np.testing.assert_allclose(mean.get(), an.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(float(dot), np.dot(xn, xn), rtol=1e-5)
    want = un + np.float32(0.1) * fl.stencil(fl.asarray(un, device=d0), w,
                                             boundary="wrap").get()
    np.testing.assert_allclose(step.get(), want, rtol=1e-5, atol=1e-6)
    # every combination of partials, on the host or on the first device; one part empty
    small = a[:1000]  # (no rows on the second device)
    assert small.parts[1].shape[0] == 0
    for got, want in ((fl.min(a), an.min()), (fl.max(small), an[:1000].max()),
                      (fl.prod(a[:7] % 3 + 1), np.prod(an[:7] % 3 + 1)),
                      (fl.any(a > 48), (an > 48).any()), (fl.all(a > -51), True),
                      (fl.all(small > -49), (an[:1000] > -49).all()),
                      (fl.sum(small, axis=0), an[:1000].sum(axis=0)),
                      (fl.min(a, axis=0, keepdims=True), an.min(axis=0, keepdims=True))):
        np.testing.assert_array_equal(np.asarray(got), want)
    print("ok")
''')


def _run_child(program: str, **settings: str) -> str:
    """The stdout of ``program`` run on two PoCL CPU devices (skips where PoCL lists
    fewer), which must end with ``ok``."""
    env = dict(os.environ, POCL_DEVICES="pthread pthread", FUSELOOP_HOST_PATH="0",
               **settings)
    env.pop("FUSELOOP_DEVICE", None)  # (it might name a device that is not listed now)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, timeout=600)
    if run.stdout.startswith("SKIP"):
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
    return run.stdout


def _child(shared: str, **settings: str) -> dict[str, str]:
    out = _run_child(_CHILD, FUSELOOP_OPENCL_SHARED_CONTEXT=shared, **settings)
    return dict(line.rsplit(" ", 1) for line in out.splitlines()[:-1])


def test_one_context_combines_and_exchanges_on_the_devices():
    """Six reductions along the split axis and a stencil step, full reductions combined
    on the device too (``FUSELOOP_MULTI_HOST_COMBINE=0``): partials copied to the first
    device and halos copied between the devices (none through the host), and not one
    read or wait on either device's queue until the results are read."""
    got = _child("1", FUSELOOP_MULTI_HOST_COMBINE="0")
    assert got == {"shared": "True", "host calls": "0", "through_host": "0",
                   "copies": got["copies"]}, got
    assert int(got["copies"]) == 6 + 4  # (a partial per reduction but the first part's;
    # the stencil's four halo rows: two inner boundaries, two wrapped ends)


def test_one_context_reads_full_reductions_partials():
    """By default the three full reductions' partials are read (each behind its
    kernel) and combined on the host; the other three's are still copied to the first
    device, the halos between the devices."""
    got = _child("1")
    assert got["shared"] == "True" and got["through_host"] == "0", got
    assert int(got["host calls"]) >= 3 * 2, got  # (a read per part, and the waits)
    assert int(got["copies"]) == 3 + 4, got


def test_a_context_per_device_goes_through_the_host():
    got = _child("0")
    assert got["shared"] == "False" and int(got["host calls"]) > 0, got
    assert int(got["through_host"]) == 4, got  # (the halos; partials are read, not copied)


_TOO_LARGE = textwrap.dedent('''
    import dataclasses
    import numpy as np
    import fuseloop as fl
    from fuseloop.errors import DeviceMemoryError
    from fuseloop.runtime import devices
''') + _TWO_POCL + textwrap.dedent('''
    room = 5 << 20
    for d in (d0, d1):  # (each device's memory as counted: what it holds now, plus 5 MiB)
        memory = devices._runtime(d).pool
        memory.device = dataclasses.replace(d, global_mem_size=memory.in_use + room)
        memory.credit = -1  # (the next allocation checks the room)
    n = 2 << 20  # 8 MiB of int32: more than either device has left, 4 MiB a part
    try:
        fl.arange(n, dtype=np.int32, device=d0).eval()
    except DeviceMemoryError as exc:
        print("one device:", str(exc).split(";")[0])
    else:
        raise AssertionError("8 MiB fitted in 5 MiB")
    with fl.device([d0, d1]):
        x = fl.arange(n, dtype=np.int32).eval()
    assert [p.nbytes for p in x.parts] == [4 << 20, 4 << 20]
    assert int(fl.sum(x)) == n * (n - 1) // 2
    np.testing.assert_array_equal(x[n - 3:].get(), np.arange(n - 3, n, dtype=np.int32))
    print("ok")
''')


def test_an_array_too_large_for_one_device_fits_the_set():
    """Issue 29's bad-input list: an array larger than one device's memory (as counted,
    each of two devices given 5 MiB of room) is refused there, and split over both (a
    part each, within its room) it is made and computed."""
    out = _run_child(_TOO_LARGE)
    assert "out of device memory: cannot allocate 8388608 bytes" in out, out
