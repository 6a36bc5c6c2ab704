"""Iteration over arrays (``for b in data``) against numpy's, and crc16's loop on a device
whose buffers are not host memory (as a GPU's): values held on the host, no launch."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import iteration
from fuseloop.expr.nodes import Scalar


@pytest.fixture
def not_host(cpu, monkeypatch):
    """The CPU device with its buffers taken as not host memory (a GPU's case): no
    element read in place, the host path's limits as they are by default."""
    from fuseloop import host_path

    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    monkeypatch.setitem(host_path._host_devices, cpu.index, False)
    fl.clear_caches()
    return cpu


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.float64, np.bool_,
                                   np.complex128])
def test_1d_elements_are_numpys(cpu, dtype):
    h = (np.arange(300) % 7 - 2).astype(dtype)
    got = list(fl.asarray(h))
    assert len(got) == len(h)
    for g, e in zip(got, h, strict=True):
        assert g.shape == () and g.dtype == h.dtype
        assert g.get() == e


def test_rows_of_2d_and_lazy_arrays(cpu):
    h = np.arange(12.0).reshape(3, 4)
    rows = list(fl.asarray(h))
    for r, e in zip(rows, h, strict=True):
        np.testing.assert_array_equal(r.get(), e)
    lazy = fl.asarray(h)[:, 1] * 2 + 1  # (a lazy 1-D expression)
    assert [float(v) for v in lazy] == list(h[:, 1] * 2 + 1)
    strided = fl.asarray(np.arange(1000.0))[::-3]  # (a view: several blocks)
    assert [float(v) for v in strided] == list(np.arange(1000.0)[::-3])


def test_0d_raises_numpys_error(cpu):
    with pytest.raises(TypeError):
        iter(np.float64(1.0) * np.ones(()))  # (numpy's own, for comparison)
    with pytest.raises(TypeError):
        iter(fl.asarray(np.ones(())))


@pytest.mark.parametrize("n", [10, 400])
def test_write_inside_the_loop_is_seen_as_numpy_sees_it(cpu, n):
    h = np.arange(float(n))
    a = fl.asarray(h)
    got, want = [], []
    for i, x in enumerate(a):
        got.append(float(x))
        if i + 1 < n:
            a[i + 1] = a[i + 1] * 10 + x
    for i, x in enumerate(h):
        want.append(float(x))
        if i + 1 < n:
            h[i + 1] = h[i + 1] * 10 + x
    assert got == want
    np.testing.assert_array_equal(a.get(), h)


def _crc16(data, poly=0x8408):
    # (NPBench's crc16, run unchanged on numpy's and fuseloop's arrays)
    crc = 0xFFFF
    for b in data:
        cur_byte = 0xFF & b
        for _ in range(0, 8):
            if (crc & 0x0001) ^ (cur_byte & 0x0001):
                crc = (crc >> 1) ^ poly
            else:
                crc >>= 1
            cur_byte >>= 1
    crc = (~crc & 0xFFFF)
    crc = (crc << 8) | ((crc >> 8) & 0xFF)
    return crc & 0xFFFF


def test_crc16_loop_launches_nothing_on_a_device_path(not_host, fresh_stats):
    h = np.random.default_rng(3).integers(0, 256, 700, dtype=np.uint8)
    d = fl.asarray(h)
    fl.synchronize()
    fl.reset_stats()
    assert _crc16(d) == _crc16(h)
    s = fl.stats()
    assert s["kernels_launched"] == 0 and s["kernels_compiled"] == 0, s


def test_values_held_here_fold_on_a_device_path(not_host):
    v = next(iter(fl.asarray(np.array([200, 7], np.uint8))))
    assert type(v._node) is Scalar
    x = (0xFF & v) >> 1
    y = v * 2.5 - 1
    assert type(x._node) is Scalar and type(y._node) is Scalar
    e = np.uint8(200)
    assert x.dtype == ((0xFF & e) >> 1).dtype and x.get() == (0xFF & e) >> 1
    assert y.dtype == (e * 2.5 - 1).dtype and y.get() == e * 2.5 - 1
    v >>= 2  # (in place: the value held changes, numpy's same_kind cast)
    assert type(v._node) is Scalar and v.dtype == np.uint8 and v.get() == 50
    elem = fl.asarray(np.array([3.0, 4.0]))[1]  # (a buffer's element: the device's)
    assert type((elem + 1)._node) is not Scalar


def test_early_break_reads_one_block(cpu, monkeypatch):
    reads = []
    get = fl.Array.get

    def counted(self):
        reads.append(self.shape)
        return get(self)

    monkeypatch.setattr(fl.Array, "get", counted)
    for i, _ in enumerate(fl.asarray(np.arange(100_000.0))):
        if i == 5:
            break
    assert reads == [(iteration.FIRST_BLOCK,)]


def test_a_loop_writing_as_it_goes_copies_no_block_per_element(not_host, fresh_stats):
    n = 1000
    a = fl.asarray(np.arange(float(n)))
    h = np.arange(float(n))
    for i, v in enumerate(a):
        a[i] = v * 2 + 1
    for i, v in enumerate(h):
        h[i] = v * 2 + 1
    np.testing.assert_array_equal(a.get(), h)
    fl.reset_stats()
    for i, v in enumerate(a):
        a[i] = v * 2 + 1
    fl.synchronize()
    # (one launch per write at most, and a watch computed once per FIRST_BLOCK elements)
    assert fl.stats()["kernels_launched"] <= n + n // iteration.FIRST_BLOCK + 1
