"""Halo exchange between the parts of a split array without the host
(``fuseloop.multi.exchange``): a device listed twice copies on its own queue; CUDA
devices copy peer to peer (``Backend.copy_from``); only a backend without a direct way
goes through the host."""

from __future__ import annotations

import numpy as np

import fuseloop as fl
from fuseloop.multi import EXCHANGED


def test_rows_of_another_part_are_copied_on_the_device(device):
    """A device listed twice: rows (a view at an offset, or a lazy part's, computed
    first) are copied on its own queue, never through the host."""
    from fuseloop.multi import exchange

    xn = np.arange(40, dtype=np.float32).reshape(10, 4)
    x = fl.asarray(xn, device=device)
    before = dict(EXCHANGED)
    got = exchange._transfer(x[3:7], device)
    doubled = exchange._transfer((x * 2)[1:3], device)
    assert got._storage is not x._storage
    np.testing.assert_array_equal(got.get(), xn[3:7])
    np.testing.assert_array_equal(doubled.get(), xn[1:3] * 2)
    with fl.device([device] * 3):
        m = fl.asarray(xn[:, 0].copy())
    np.testing.assert_array_equal((m[1:] - m[:-1]).get(), np.diff(xn[:, 0]))
    assert EXCHANGED["copies"] - before["copies"] == 4
    assert EXCHANGED["through_host"] == before["through_host"]


def test_devices_without_a_direct_way_go_through_the_host(device, monkeypatch):
    """Two OpenCL devices (each in a context of its own: here the device opened a second
    time under another index) exchange through the host, correctly; two CUDA devices
    copy peer to peer."""
    monkeypatch.setenv("FUSELOOP_OPENCL_SHARED_CONTEXT", "0")  # (the twin's own context)
    import dataclasses

    from fuseloop.multi import exchange
    from fuseloop.runtime import devices
    from fuseloop.runtime.transfer import finish

    twin = dataclasses.replace(device, index=device.index + 977)
    x = fl.asarray(np.arange(12.0, dtype=np.float32).reshape(6, 2), device=device)
    before = EXCHANGED["through_host"]
    try:
        piece = exchange._transfer(x[2:4], twin)
        assert piece.device is twin
        np.testing.assert_array_equal(piece.get(), np.arange(4.0, 8.0).reshape(2, 2))
        # (CUDA: a peer copy; OpenCL: no copy between contexts)
        assert EXCHANGED["through_host"] - before == (0 if device.backend == "cuda" else 1)
        del piece
    finally:
        # (the twin is not among fl.devices(): its runtime would break later synchronize())
        finish(twin)
        devices._runtimes.pop(twin.index, None)


def test_two_cuda_devices_exchange_peer_to_peer():
    """On a host with two CUDA devices: a stencil over both copies its halos peer to
    peer (none through the host) and equals one device's."""
    cuda = [d for d in fl.devices() if d.backend == "cuda"]
    if len(cuda) < 2:
        import pytest

        pytest.skip("needs two CUDA devices")
    rng = np.random.default_rng(8)
    un = rng.standard_normal((64, 33)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    want = fl.stencil(fl.asarray(un, device=cuda[0]), w, boundary="wrap").get()
    with fl.device(cuda[:2]):
        u = fl.asarray(un)
    before = dict(EXCHANGED)
    got = fl.stencil(u, w, boundary="wrap")
    np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)
    assert EXCHANGED["copies"] > before["copies"]
    assert EXCHANGED["through_host"] == before["through_host"]
    # a reduction's partial results are copied peer to peer and combined on the first GPU
    # (a full reduction's where the host's combine is off)
    from fuseloop.multi import reduce as multi_reduce

    copies = EXCHANGED["copies"]
    saved, multi_reduce.HOST_COMBINE = multi_reduce.HOST_COMBINE, "0"
    try:
        total = fl.sum(u)
    finally:
        multi_reduce.HOST_COMBINE = saved
    assert total.device is cuda[0] and EXCHANGED["copies"] == copies + 1
    np.testing.assert_allclose(total.get(), un.sum(dtype=np.float64), rtol=1e-4)
    assert EXCHANGED["through_host"] == before["through_host"]
