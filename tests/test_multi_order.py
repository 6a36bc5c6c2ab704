"""The order of a split evaluation's queue operations (issue 29's scaling): no part waits
for another.  The device opened again under other indices gives devices with queues of
their own (as several GPUs have); their runtimes' queue and event calls are recorded
with the launch count at each call."""

from __future__ import annotations

import numpy as np
import pytest
from launch_counts import calls_of

import fuseloop as fl
from fuseloop import host_path
from fuseloop.runtime import devices

_CALLS = ("submit", "finish_queue", "finish", "wait_event", "event_status", "enqueue_read",
          "enqueue_write")


def record(devs, monkeypatch):
    """A list receiving ``(call, part, kernels launched so far, extra)`` per queue call."""
    log: list[tuple] = []
    for k, d in enumerate(devs):
        rt = devices._runtime(d)

        def wrap(name, fn, k=k, rt=rt):
            def call(*args, **kwargs):
                extra = None
                if name in ("enqueue_read", "enqueue_write"):
                    extra = args[4]  # blocking? (queue, host/buffer, buffer/host, wait_for,
                    # blocking)
                elif name == "submit":
                    extra = len(rt.deferred)  # launches not yet enqueued
                log.append((name, k, fl.stats()["kernels_launched"], extra))
                return fn(*args, **kwargs)
            return call

        for name in _CALLS:
            monkeypatch.setattr(rt, name, wrap(name, getattr(rt, name)))
    return log


def _waits(log):
    return [e for e in log if e[0] in ("finish_queue", "finish", "wait_event", "event_status")]


def test_parts_launch_without_waiting(three, monkeypatch):
    """Each part's launch is handed to its device at once (deferred small launches
    too), and nothing waits between the parts' launches."""
    n = 3000  # (small: each part's launch is deferred until its queue is used)
    with fl.device(three):
        x = fl.arange(n, dtype=np.float32)
        y = fl.ones(n, np.float32).eval()
    e = 2 * x - fl.sin(y) + x * y
    fl.synchronize()
    fl.reset_stats()
    log = record(three, monkeypatch)
    e.eval()
    assert _waits(log) == [] and [e[0] for e in log] == ["submit"] * 3, log
    # device k's queue is submitted right after its part, with nothing left deferred
    assert [(e[1], e[2], e[3]) for e in log] == [(0, 1, 0), (1, 2, 0), (2, 3, 0)]
    xn = np.arange(n, dtype=np.float32)
    np.testing.assert_allclose(e.get(), 2 * xn - np.sin(1) + xn, rtol=1e-6)


def test_reduction_reads_after_all_launches(three, monkeypatch):
    """fl.sum of a split array: every part launched, then one non-blocking read per part,
    before the host waits for any."""
    rng = np.random.default_rng(5)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    fl.synchronize()
    fl.reset_stats()
    log = record(three, monkeypatch)
    total = fl.sum(x * y)
    launched = fl.stats()["kernels_launched"]
    first_wait = log.index(_waits(log)[0])
    reads = [e for e in log if e[0] == "enqueue_read"]
    assert [(e[1], e[3]) for e in reads] == [(0, False), (1, False), (2, False)], log
    assert all(log.index(r) < first_wait for r in reads), log
    assert all(e[2] == launched for e in reads), log  # (no launch after a read)
    np.testing.assert_allclose(total.get(), np.dot(xn, yn), rtol=1e-5)


def test_synchronize_submits_every_device_first(three, monkeypatch):
    with fl.device(three):
        x = fl.ones(3000, np.float32)
    (x * 2).eval()
    log = record(three, monkeypatch)
    fl.synchronize()
    mine = [e for e in log if e[0] in ("submit", "finish_queue", "finish", "event_status")]
    first_wait = next(i for i, e in enumerate(mine) if e[0] != "submit")
    assert {e[1] for e in mine[:first_wait]} == {0, 1, 2}, log


def test_halo_exchange_through_the_host_waits_once_per_piece(three, monkeypatch):
    """Halos between devices without a direct way (OpenCL contexts): every halo's read
    is enqueued and submitted before the host waits for any; uploads come after (the
    host waiting in the stencil call: not left to the devices' deferred work)."""
    from fuseloop.multi import EXCHANGED, uploads

    monkeypatch.setattr(uploads, "DEFERRED_UPLOADS", "0")

    if three[0].backend != "opencl":
        pytest.skip("only OpenCL devices exchange through the host")
    un = np.random.default_rng(2).standard_normal((9, 70)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    want = fl.stencil(fl.asarray(un, device=three[0]), w).get()
    with fl.device(three):
        u = fl.asarray(un)
    fl.synchronize()
    before = EXCHANGED["through_host"]
    log = record(three, monkeypatch)
    got = fl.stencil(u, w)
    reads = [e for e in log if e[0] == "enqueue_read"]
    writes = [i for i, e in enumerate(log) if e[0] == "enqueue_write"]
    assert len(reads) == EXCHANGED["through_host"] - before == 4, log
    assert all(not e[3] for e in reads), log  # (none blocking)
    first_wait = log.index(_waits(log)[0])
    assert max(log.index(r) for r in reads) < first_wait, log
    assert first_wait < min(writes, default=0), log
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=1e-6)


def test_halo_rows_are_read_where_they_lie(three, monkeypatch):
    """Halo rows through the host (a context per device) are read from their part's
    buffer at their offset: no kernel copies them out first, and a lone copy too."""
    from fuseloop.multi import exchange

    if three[0].backend != "opencl":
        pytest.skip("only OpenCL devices exchange through the host")
    un = np.random.default_rng(3).standard_normal((9, 6)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    want = fl.stencil(fl.asarray(un, device=three[0]), w).get()
    with fl.device(three):
        u = fl.asarray(un)
    fl.synchronize()

    def work():
        s = fl.stats()
        return s["kernels_launched"] + s["host_evaluations"]

    before = work()
    got = fl.stencil(u, w)  # (the last row of parts 0 and 1: at an offset)
    lone = exchange._transfer(u.parts[0][2:3], three[1])
    assert work() == before
    np.testing.assert_array_equal(lone.get(), un[2:3])
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=1e-6)


def test_aligned_operands_take_the_short_path(device, monkeypatch):
    """Operators on split arrays split alike, with scalars, map the parts directly
    (prepare()'s general rules, tens of microseconds per operator, are not run); other
    operands still go through them."""
    from fuseloop.multi import array as multi_array

    with fl.device([device] * 2):
        x = fl.arange(6, dtype=np.float32)
        y = fl.ones(6, np.float32)
    prepared = []
    real = multi_array.prepare
    monkeypatch.setattr(multi_array, "prepare", lambda a, *r: prepared.append(a) or real(a, *r))
    got = 2 * x - fl.sin(y) + x * np.float32(3) + 1.5
    assert prepared == []
    np.testing.assert_allclose(got.get(), 5 * np.arange(6) - np.sin(1) + 1.5, rtol=1e-6)
    np.testing.assert_allclose((x + np.arange(6)).get(), 2 * np.arange(6))  # (host data)
    assert len(prepared) == 2


def test_tracing_records_each_part(device):
    """fuseloop.multi.trace (bench_multigpu.py --trace): each part's launch, in order,
    and each partial result's read."""
    from fuseloop.multi import trace

    with fl.device([device] * 3):
        x = fl.ones(3000, np.float32)
    with trace.tracing() as events:
        (x * 2).eval()
        total = fl.sum(x)
    assert [e[:2] for e in events if e[0] == "enqueued"][:3] == [("enqueued", k) for k in
                                                                 range(3)]
    times = [e[3] for e in events]
    assert times == sorted(times) and trace.events is None
    assert float(total) == 3000


def test_small_reads_go_through_the_backends_staging(three, monkeypatch):
    """Where the backend offers a staging buffer (CUDA: page-locked memory, so a read
    does not hold the host until it is done), partial results are read into it and
    copied out after the wait."""
    from fuseloop.backends import backend_for

    backend = type(backend_for(three[0]))
    staged = []

    def staging(self, nbytes):
        staged.append(np.zeros(nbytes, np.uint8))
        return staged[-1]

    monkeypatch.setattr(backend, "read_staging", staging)
    xn = np.arange(3000, dtype=np.float32)
    with fl.device(three):
        x = fl.asarray(xn)
    assert float(fl.sum(x)) == xn.sum()
    partials = [np.frombuffer(s.tobytes(), np.float32)[0] for s in staged]
    assert len(staged) == 3 and sum(partials) == xn.sum(), partials
    np.testing.assert_array_equal(x.get(), xn)  # (whole parts too: each under 1 MiB)
    assert len(staged) == 6


def test_partials_combined_on_the_device_without_waiting(device, monkeypatch):
    """Where every part's device copies to the first without the host (here: one device
    listed three times; CUDA: peer copies), a reduction along the split axis neither reads
    nor waits: the partials are combined by a kernel on the first device (a full
    reduction's too where ``HOST_COMBINE`` is off)."""
    from fuseloop.multi import reduce as multi_reduce

    monkeypatch.setattr(multi_reduce, "HOST_COMBINE", "0")
    rng = np.random.default_rng(7)
    an = rng.integers(-50, 50, (30, 4)).astype(np.int32)
    with fl.device([device] * 3):
        a = fl.asarray(an)
    fl.synchronize()
    log = record([device], monkeypatch)
    total, cols, hi = fl.sum(a), fl.sum(a, axis=0), a.max(axis=0, keepdims=True)
    count, mean = fl.count_nonzero(a > 0), a.mean(axis=0)
    assert [e for e in log if e[0] != "submit"] == [], log
    assert mean.dtype == np.float64
    np.testing.assert_allclose(mean.get(), an.mean(axis=0), rtol=1e-12)
    assert total.device is device and total.shape == () and hi.shape == (1, 4)
    assert int(total) == an.sum() and int(count) == np.count_nonzero(an > 0)
    np.testing.assert_array_equal(cols.get(), an.sum(axis=0))
    np.testing.assert_array_equal(hi.get(), an.max(axis=0, keepdims=True))


@pytest.mark.parametrize("parts", [2, 4])
def test_full_reductions_combined_on_the_host(device, monkeypatch, parts):
    """A full reduction over parts that could combine on the first device (one device
    listed 2 or 4 times) reads each partial behind its kernel instead: one read per part,
    no copy, no combine kernel; a host value (reading it reads nothing), numpy's result
    and dtype for float32, float64 and int sums, mean, max, min and a dot-like sum.
    With ``keepdims`` the partials are combined on the device."""
    from fuseloop.expr.nodes import Scalar
    from fuseloop.multi import EXCHANGED

    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    rng = np.random.default_rng(9)
    xs = {np.float32: rng.random(30001).astype(np.float32),
          np.float64: rng.standard_normal(30001),
          np.int32: rng.integers(-1000, 1000, 30001).astype(np.int32)}
    with fl.device([device] * parts):
        split = {t: fl.asarray(v) for t, v in xs.items()}
    f32, f64, i32 = np.float32, np.float64, np.int32
    cases = [(f32, lambda a: fl.sum(a), np.sum), (f32, lambda a: a.mean(), np.mean),
             (f32, lambda a: fl.sum(a * a), lambda v: np.sum(v * v)),
             (f64, lambda a: fl.sum(a), np.sum), (f64, lambda a: a.max(), np.max),
             (i32, lambda a: fl.sum(a), np.sum), (i32, lambda a: a.mean(), np.mean),
             (i32, lambda a: fl.min(a), np.min)]
    for t, func, ref in cases:
        fl.synchronize()
        copies = EXCHANGED["copies"]
        log = record([device], monkeypatch)
        fl.reset_stats()
        r = func(split[t])
        reads = [e for e in log if e[0] == "enqueue_read"]
        assert len(reads) == parts and not any(e[3] for e in reads), log
        assert fl.stats()["kernels_launched"] == parts, fl.stats()
        assert EXCHANGED["copies"] == copies and type(r._node) is Scalar
        monkeypatch.undo()  # (the recording; HOST_MAX_WORK again below)
        monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
        want = ref(xs[t])
        assert r.dtype == want.dtype and r.device is device, (t, r.dtype, want.dtype)
        if t is i32 or ref in (np.max, np.min):
            assert r.get() == want, (t, r.get(), want)
        else:
            np.testing.assert_allclose(r.get(), want, rtol=1e-5 if t is f32 else 1e-12)
    # (kept dimensions: combined on the device, as a host result would be uploaded again)
    fl.synchronize()
    log = record([device], monkeypatch)
    kept = fl.sum(split[i32], keepdims=True)
    assert [e for e in log if e[0] != "submit"] == [] and kept.shape == (1,), log
    np.testing.assert_array_equal(kept.get(), np.sum(xs[i32], keepdims=True))


def test_split_sum_parts_replay_their_plans(three, monkeypatch):
    """A repeated fl.sum of a split array: every part's partial is replayed from its
    device's run plan, no node built (no structure walk, every launch a cache hit, not
    through ``evaluate.run``), and every partial is launched before the first read."""
    from fuseloop import host_path, run_plans
    from fuseloop.multi import reduce as multi_reduce

    rng = np.random.default_rng(11)
    xn, yn = rng.random(24000, np.float32), rng.random(24000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    float(fl.sum(x * y))  # (each device's plan recorded)
    e = x * y
    fl.synchronize()
    walks = calls_of(monkeypatch, run_plans, "_key")
    replays = calls_of(monkeypatch, run_plans, "_signed_replay")
    general = calls_of(monkeypatch, host_path, "try_run")  # (evaluate.run's first step)
    fl.reset_stats()
    log = record(three, monkeypatch)
    total = fl.sum(e)
    stats = fl.stats()
    assert multi_reduce.LAST_PARTIALS == [0, 0] and multi_reduce.LAST_PLANNED == [3]
    assert walks == [] and replays == [] and general == []  # (staged back to back)
    assert stats["kernels_launched"] == stats["memory_cache_hits"] > 0
    assert stats["kernels_launched"] % 3 == 0 and stats["memory_cache_misses"] == 0
    first_read = next(i for i, e in enumerate(log) if e[0] == "enqueue_read")
    assert all(e[2] == stats["kernels_launched"] for e in log[first_read:]), log
    np.testing.assert_allclose(float(total), np.dot(xn.astype(np.float64), yn), rtol=1e-5)


def test_stencil_halos_through_the_host_one_upload_per_part(three, monkeypatch):
    """Halo rows through the host (a context per device), the periodic ends' too: every
    part's rows share one buffer and go up by one write, without the host waiting for
    it where uploads are asynchronous (GPUs); a second step waits for the first's (the
    host waiting in the stencil call: not left to the devices' deferred work)."""
    from fuseloop.multi import EXCHANGED, exchange, uploads

    monkeypatch.setattr(uploads, "DEFERRED_UPLOADS", "0")

    if three[0].backend != "opencl":
        pytest.skip("only OpenCL devices exchange through the host")
    monkeypatch.setattr(exchange, "_async_upload", lambda device: True)
    un = np.random.default_rng(4).standard_normal((9, 7)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    want = fl.stencil(fl.asarray(un, device=three[0]), w, boundary="wrap").get()
    with fl.device(three):
        u = fl.asarray(un)
    fl.synchronize()
    before = EXCHANGED["through_host"]
    log = record(three, monkeypatch)
    got = fl.stencil(u, w, boundary="wrap")
    writes = [e for e in log if e[0] == "enqueue_write"]
    assert EXCHANGED["through_host"] - before == 6  # (a row above and below each part)
    assert sorted(e[1] for e in writes) == [0, 1, 2] and not any(e[3] for e in writes), log
    assert len(exchange._local.in_flight) == 3
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=1e-6)
    again = fl.stencil(got, w, boundary="wrap")
    assert len(exchange._local.in_flight) == 3  # (the first step's let go)
    np.testing.assert_allclose(again.get(), fl.stencil(fl.asarray(want, device=three[0]), w,
                                                       boundary="wrap").get(),
                               rtol=1e-5, atol=1e-5)


def test_copy_through_the_host_allocates_once(three, monkeypatch):
    """Rows copied to a device of another context (through the host) take one buffer on
    the receiving device: none is allocated first for a device copy that cannot be."""
    from fuseloop.multi import exchange

    if three[0].backend != "opencl":
        pytest.skip("only OpenCL devices exchange through the host")
    xn = np.arange(12, dtype=np.float32).reshape(6, 2)
    x = fl.asarray(xn, device=three[0])
    allocated = calls_of(monkeypatch, exchange, "allocate")
    got = exchange._transfer(x[2:4], three[1])
    assert len(allocated) == 1 and got.device is three[1]
    np.testing.assert_array_equal(got.get(), xn[2:4])
