"""Split arrays' small reads and their combined results (issue 29): OpenCL reads into
page-locked slots (``fuseloop.backends.opencl_staging``, forced on here: by default for
GPUs only), never reused before their read completed; a host-combined sum kept as the
host's value; a halo batch through the host waited for once per source device."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.backends import backend_for, opencl_staging
from fuseloop.multi import exchange
from fuseloop.runtime import devices

LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)


@pytest.fixture
def pinned(monkeypatch):
    monkeypatch.setattr(opencl_staging, "PINNED_READS", "1")
    opencl_staging._AREAS.clear()
    yield
    opencl_staging._AREAS.clear()


def test_pinned_slot_not_reused_before_its_read_completes(device, pinned, monkeypatch):
    """A slot given back while its read is still held (a gated queue) is not handed out
    again; once the read completed it is, and holds what was read."""
    if device.backend != "opencl":
        pytest.skip("OpenCL's staging")
    backend = backend_for(device)
    src = fl.arange(1000, dtype=np.float32, device=device).eval()
    fl.synchronize()
    rt = devices._runtime(device)
    release = backend.hold(device.context, rt.queue)  # (nothing enqueued after runs)
    try:
        slot = backend.staging_slot(device, 4000)
        assert slot.size == 4096 and slot.host.nbytes == 4096
        slot.event = rt.enqueue_read(rt.queue, slot.host[:4000], src._storage.buffer, None,
                                     False)
        slot.release()  # (early: the read is still held)
        other = backend.staging_slot(device, 3000)
        assert other is not slot and other.host.ctypes.data != slot.host.ctypes.data
    finally:
        release()
    slot.event.wait()
    np.testing.assert_array_equal(slot.host[:4000].view(np.float32), np.arange(1000))
    again = backend.staging_slot(device, 100)
    assert again is slot and again.event is None
    assert backend.staging_slot(device, 5000).size == 8192
    # at the bound, the oldest given back is waited for rather than another made
    monkeypatch.setattr(opencl_staging, "MAX_SLOTS", 2)
    again.event = rt.enqueue_read(rt.queue, again.host[:4000], src._storage.buffer, None,
                                  False)
    rt.submit(rt.queue)
    again.release()
    assert backend.staging_slot(device, 4096) is again


def test_split_reads_through_pinned_slots(three, pinned, monkeypatch):
    """Partial sums, whole parts and halo rows read through the slots, halo rows
    uploaded from them (asynchronously, as to GPUs): results as one device's; every
    slot is given back (an upload's once it is written); a write to a part between two
    steps is seen."""
    if three[0].backend != "opencl":
        pytest.skip("OpenCL's staging")
    monkeypatch.setattr(exchange, "_async_upload", lambda device: True)
    rng = np.random.default_rng(3)
    xn = rng.random(6000, np.float32)
    un = rng.standard_normal((30, 17)).astype(np.float32)
    with fl.device(three):
        x, u = fl.asarray(xn), fl.asarray(un)
    assert float(fl.sum(x * x)) == pytest.approx(float(np.dot(xn, xn)), rel=1e-5)
    np.testing.assert_array_equal(x.get(), xn)
    one = fl.asarray(un, device=three[0])
    for step in range(2):
        got = fl.stencil(u, LAPLACE, boundary="wrap").get()
        want = fl.stencil(one, LAPLACE, boundary="wrap").get()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        u.parts[1][0] = np.float32(step + 5)  # (a halo row of parts 0 and 2)
        one[u.bounds[1]] = np.float32(step + 5)
    areas = [a for _, a in opencl_staging._AREAS.values()]
    assert len(areas) == 3
    in_flight = [slot for *_, slot in exchange._local.in_flight]
    assert len(in_flight) == 3 and all(s is not None for s in in_flight)
    exchange._settle_uploads()
    for a in areas:  # (each slot made was given back)
        assert sum(len(f) for f in a.free.values()) == sum(a.made.values()) > 0


def test_host_combined_sum_stays_on_the_host(three, monkeypatch):
    """A split sum combined on the host is the host's value: reading it (``float``,
    ``.get()``) enqueues nothing; a kernel takes it as an argument; ``.eval()`` still
    gives it a buffer."""
    xn = np.arange(3001, dtype=np.int64)
    with fl.device(three):
        x = fl.asarray(xn)
    total = fl.sum(x)
    fl.synchronize()
    log: list[str] = []  # (the runtimes' queue calls but submits)

    def logged(name, fn):
        return lambda *a: log.append(name) or fn(*a)

    for d in three:
        rt = devices._runtime(d)
        for name in ("enqueue_read", "enqueue_write", "wait_event", "finish_queue",
                     "finish", "event_status", "marker"):
            monkeypatch.setattr(rt, name, logged(name, getattr(rt, name)))
    assert total.device is three[0] and total.shape == () and total.dtype == xn.dtype
    assert int(total) == xn.sum() and float(total) == xn.sum()
    assert total.get() == xn.sum() and total.get().shape == ()
    assert log == []
    y = fl.arange(4, dtype=np.int64, device=three[0])
    np.testing.assert_array_equal((y * total).get(), np.arange(4) * xn.sum())
    assert not total.eval().is_lazy and total.get() == xn.sum()


def test_halo_batch_waits_once_per_source_device(three, monkeypatch):
    """Halo rows through the host (a context per device): every read enqueued first,
    then one wait per device read from (its queue runs in order), not one per piece
    (the host waiting in the stencil call: not left to the devices' deferred work)."""
    from fuseloop.multi import uploads

    monkeypatch.setattr(uploads, "DEFERRED_UPLOADS", "0")
    if three[0].backend != "opencl":
        pytest.skip("only OpenCL devices exchange through the host")
    un = np.random.default_rng(8).standard_normal((12, 5)).astype(np.float32)
    want = fl.stencil(fl.asarray(un, device=three[0]), LAPLACE, boundary="wrap").get()
    with fl.device(three):
        u = fl.asarray(un)
    fl.synchronize()
    waited: list = []
    real = exchange.wait
    monkeypatch.setattr(exchange, "wait", lambda e, d: waited.append(d) or real(e, d))
    got = fl.stencil(u, LAPLACE, boundary="wrap")
    assert len(waited) == 3 and {d.index for d in waited} == {d.index for d in three}
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=1e-6)


def test_halos_in_one_part_copied_at_once(three, monkeypatch):
    """Halo rows lying in one part's buffer (the periodic ends' too) are copied from
    there without the general row walk (``rows``); results as one device's."""
    un = np.random.default_rng(6).standard_normal((12, 9)).astype(np.float32)
    want = fl.stencil(fl.asarray(un, device=three[0]), LAPLACE, boundary="wrap").get()
    with fl.device(three):
        u = fl.asarray(un)
    walked: list = []
    real = exchange.rows
    monkeypatch.setattr(exchange, "rows", lambda *a: walked.append(a) or real(*a))
    before = dict(exchange.EXCHANGED)
    got = fl.stencil(u, LAPLACE, boundary="wrap")
    assert walked == [] and exchange.EXCHANGED["copies"] - before["copies"] == 6
    assert exchange.EXCHANGED["rows"] - before["rows"] == 6
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=1e-6)
