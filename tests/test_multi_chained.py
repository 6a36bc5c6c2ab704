"""Halo rows through the host uploaded by writes their devices hold back until the reads
are done (issue 29: ``opencl_staging.uploads_after``): the host waits for none."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.backends import opencl_staging
from fuseloop.multi import exchange
from fuseloop.runtime import devices

LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)


@pytest.fixture
def three(three, monkeypatch):
    """conftest's device and two twins, halo uploads chained on every OpenCL device (a
    CPU's included)."""
    monkeypatch.setattr(opencl_staging, "HALO_EVENTS", "1")
    return three


def _step_numpy(a: np.ndarray, boundary: str) -> np.ndarray:
    mode = {"clamp": "edge", "wrap": "wrap", "constant": "constant"}[boundary]
    p = np.pad(a, 1, mode=mode)
    lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * a
    return a + np.float32(0.1) * lap


def test_stencil_halos_chained_without_host_waits(three, monkeypatch):
    """Steps run one after the other without the host waiting for a halo read (one
    held-back write per part), across the parts' boundaries and at the ends, each
    boundary rule; the grid of every step is the one before it."""
    uploads: list = []
    real = opencl_staging.uploads_after
    monkeypatch.setattr(opencl_staging, "uploads_after",
                        lambda ups, reads: uploads.extend(ups) or real(ups, reads))
    waits: list = []
    monkeypatch.setattr(exchange, "wait", lambda *a: waits.append(a))
    un = np.random.default_rng(6).standard_normal((150, 40)).astype(np.float32)
    with fl.device(three):
        u = fl.asarray(un)
    for boundary in ("clamp", "wrap", "constant"):
        v, want = u, un
        for _ in range(3):
            uploads.clear()
            v = (v + np.float32(0.1) * fl.stencil(v, LAPLACE, boundary=boundary)).eval()
            want = _step_numpy(want, boundary)
            # (one write per part: the ends' rows of wrap come from the other end)
            assert len(uploads) == 3
            assert waits == []
        np.testing.assert_allclose(v.get(), want, rtol=1e-4, atol=1e-4)


def test_chained_upload_fails_with_its_read(three):
    """A read whose rows cannot be copied in fails the held-back write, so nothing
    reads stale halo rows."""
    a = fl.asarray(np.arange(8, dtype=np.float32), device=three[1]).eval()
    b = fl.zeros(8, np.float32, device=three[2]).eval()
    host = np.zeros(8, np.float32)
    rt = devices._runtime(three[1])
    read = rt.enqueue_read(rt.queue, host, a._storage.buffer, None, False)
    rt.submit(rt.queue)

    def broken(status: int) -> None:
        raise ValueError("no room")

    (write,) = opencl_staging.uploads_after([(three[2], b._storage.buffer, host)],
                                            [(read, broken)])
    devices._runtime(three[2]).submit(three[2].queue)
    with pytest.raises(Exception, match="WAIT_LIST"):
        write.wait()


def test_realigned_operands_chained(three, monkeypatch):
    """Operands split at other rows (a shifted slice) get their rows by held-back writes
    too (a buffer per piece, outside any stencil's arena)."""
    calls: list = []
    real = opencl_staging.uploads_after
    monkeypatch.setattr(opencl_staging, "uploads_after",
                        lambda ups, reads: calls.append(len(ups)) or real(ups, reads))
    xn = np.arange(30000, dtype=np.float32)
    yn = np.random.default_rng(1).random(30000).astype(np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    np.testing.assert_allclose((x[1:] + y[:-1]).get(), xn[1:] + yn[:-1])
    assert calls == [2]  # (one row across each of the two inner boundaries)
