"""``@fl.fuse`` of functions that write: arrays the function makes (``fl.zeros``,
``fl.empty``, ``fl.full``, ``zeros_like``, ``fl.asarray``) written by slices, integer and
boolean indices, ``add.at`` and in-place operators, and writes into arguments.

Each function is compared with numpy and with itself untraced; ``Fused.traces`` and
``eager_signatures`` say that later calls replay the record, ``fl.stats()`` how many
kernels a call launches.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import TracingError

RNG = np.random.default_rng(11)


def _replayed(f, *args, calls=3):
    """The results of ``calls`` calls of ``f`` (numpy), after which ``f`` must have been
    traced once and replay its record."""
    got = [_host(f(*args)) for _ in range(calls)]
    assert f.traces == 1 and f.eager_signatures == 0
    return got


def _host(r):
    if isinstance(r, tuple | list):
        return type(r)(_host(x) for x in r)
    return r.get() if isinstance(r, fl.Array) else r


def _launches(f, *args):
    fl.reset_stats()
    _host(f(*args))
    return fl.stats()["kernels_launched"]


def _scatter_add(v, idx):
    out = fl.zeros(v.shape[0] // 16, dtype=v.dtype)
    fl.add.at(out, idx, v)
    return out


@pytest.mark.parametrize("n", [1 << 10, 1 << 17])  # (the atomic kernel; partial sums)
def test_scatter_add_into_a_new_array(device, n):
    vh = RNG.random(n, dtype=np.float32)
    ih = RNG.integers(0, n // 16, n)
    want = np.zeros(n // 16, np.float32)
    np.add.at(want, ih, vh)
    v, idx = fl.asarray(vh), fl.asarray(ih)
    fused = fl.fuse(_scatter_add)
    for got in [*_replayed(fused, v, idx), _scatter_add(v, idx).get()]:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert _launches(fused, v, idx) == 2  # (the fill is not a kernel)
    first, second = fused(v, idx), fused(v, idx)
    assert first._storage is not second._storage  # a new array per call, as eagerly


@pytest.mark.parametrize("variant,launches", [("gate", 2), ("narrow", 2), ("backup", 3),
                                              ("partition", 3)])
def test_hand_written_scatter_kernels_are_recorded(device, monkeypatch, variant, launches):
    from fuseloop.ops import scatter_kernel

    if getattr(device, "backend", "opencl") != "opencl":  # (they are OpenCL programs)
        pytest.skip(f"OpenCL's scatter kernels; {device.name} runs on the {device.backend} backend")

    monkeypatch.setattr(scatter_kernel, "ON_CPU", True)
    monkeypatch.setenv("FUSELOOP_SCATTER", variant)
    n = 1 << 12
    vh = RNG.random(n, dtype=np.float32)
    ih = RNG.integers(-(n // 16), n // 16, n)  # (negative ones wrap, as numpy's)
    want = np.zeros(n // 16, np.float32)
    np.add.at(want, ih, vh)
    v, idx = fl.asarray(vh), fl.asarray(ih)
    fused = fl.fuse(_scatter_add)
    for got in _replayed(fused, v, idx):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert _launches(fused, v, idx) == launches

    @fl.fuse
    def put(x, idx, v):  # (into an argument; an index out of range leaves it untouched)
        x[idx] = v

    xh = np.zeros(n, np.float32)
    perm = RNG.permutation(n)
    x = fl.asarray(xh)
    for _ in range(2):
        put(x, fl.asarray(perm), v)
    xh[perm] = vh
    np.testing.assert_array_equal(x.get(), xh)
    with pytest.raises(IndexError, match="out of bounds"):
        put(x, fl.asarray(perm + n), v * 2)
    np.testing.assert_array_equal(x.get(), xh)
    assert put.traces == 1 and put.eager_signatures == 0


def test_weighted_histograms(device):
    bins = 32

    def by_hand(x, w):
        k = fl.minimum((x * bins).astype(np.int64), bins - 1)
        h = fl.zeros(bins, dtype=w.dtype)
        fl.add.at(h, k, w)
        return h

    def library(x, w):
        return fl.histogram(x, bins=bins, range=(0.0, 1.0), weights=w)[0]

    xh, wh = RNG.random(5000), RNG.random(5000)
    want = np.histogram(xh, bins=bins, range=(0.0, 1.0), weights=wh)[0]
    x, w = fl.asarray(xh), fl.asarray(wh)
    for fn in (by_hand, library):
        fused = fl.fuse(fn)
        for got in [*_replayed(fused, x, w), fn(x, w).get()]:
            np.testing.assert_allclose(got, want, rtol=1e-10)
        # (the bins computed and checked by one kernel, then the scatter)
        assert _launches(fused, x, w) == 2


def test_masked_write_into_zeros_like(device):
    @fl.fuse
    def masked(x, t):
        out = fl.zeros_like(x)
        out[x > t] = 3.0
        return out

    xh = RNG.random((40, 30)).astype(np.float32)
    x = fl.asarray(xh)
    for t in (0.25, 0.5, 0.75):  # (a new threshold is a kernel argument, not a new trace)
        got = masked(x, t).get()
        want = np.zeros_like(xh)
        want[xh > t] = 3.0
        np.testing.assert_array_equal(got, want)
    assert masked.traces == 1 and masked.eager_signatures == 0
    assert _launches(masked, x, 0.5) == 1


def test_later_writes_win_and_reads_see_the_written_value(device):
    def f(x, idx):
        out = fl.empty(x.shape, dtype=x.dtype)
        out[:] = 1.0
        out[2:8] = x[:6] * 2
        out[5] = -1.0
        before = out * 10  # (read now: the writes below must not change it)
        out[idx] = 7.0
        out[1::3] += x[1::3]
        out *= 2
        return out, before

    xh = RNG.random(30).astype(np.float32)
    ih = np.array([0, 3, 3, 29])
    want = np.ones(30, np.float32)
    want[2:8] = xh[:6] * 2
    want[5] = -1.0
    before = want * 10
    want[ih] = 7.0
    want[1::3] += xh[1::3]
    want *= 2
    x, idx = fl.asarray(xh), fl.asarray(ih)
    fused = fl.fuse(f)
    for got in [*_replayed(fused, x, idx), _host(f(x, idx))]:
        np.testing.assert_allclose(got[0], want, rtol=1e-6)
        np.testing.assert_allclose(got[1], before, rtol=1e-6)


def test_buffered_index_increment_does_not_accumulate_repeats(device):
    @fl.fuse
    def bump(x, idx):
        out = fl.full(x.shape, 2, dtype=np.int64)
        out[idx] += x[idx]  # (numpy: repeats are written once, not added up)
        return out

    xh = np.arange(10, dtype=np.int64)
    ih = np.array([1, 1, 1, 4, 4, 9])
    want = np.full(10, 2, np.int64)
    want[ih] += xh[ih]
    for got in _replayed(bump, fl.asarray(xh), fl.asarray(ih)):
        np.testing.assert_array_equal(got, want)


def test_writes_into_arguments_update_the_callers_arrays(device):
    def step(x, v, idx, w):
        x += v  # in place
        x[1:4] = 0.0
        fl.add.at(w, idx, v)  # (accumulates repeats)
        return x

    xh, vh = RNG.random(20).astype(np.float32), RNG.random(20).astype(np.float32)
    ih = RNG.integers(0, 5, 20)
    fused = fl.fuse(step)
    x, w = fl.asarray(xh), fl.asarray(np.zeros(5, np.float32))
    xe, we = fl.asarray(xh), fl.asarray(np.zeros(5, np.float32))  # (untraced)
    v, idx = fl.asarray(vh), fl.asarray(ih)
    wx, ww = xh.copy(), np.zeros(5, np.float32)
    for _ in range(3):
        lazy_old = x * 1  # (a caller's lazy array reading x keeps x's value before)
        old = xh if _ == 0 else wx.copy()
        assert fused(x, v, idx, w) is x
        step(xe, v, idx, we)
        wx += vh
        wx[1:4] = 0.0
        np.add.at(ww, ih, vh)
        np.testing.assert_allclose(lazy_old.get(), old, rtol=1e-6)
        for got in (x, xe):
            np.testing.assert_allclose(got.get(), wx, rtol=1e-6)
        for got in (w, we):
            np.testing.assert_allclose(got.get(), ww, rtol=1e-5)
    assert fused.traces == 1 and fused.eager_signatures == 0


def test_arguments_sharing_a_buffer(device):
    @fl.fuse
    def shift(a, b):
        a[1:] = b[:-1]
        return a

    xh = np.arange(12, dtype=np.float32)
    shifted = np.concatenate([xh[:1], xh[:-1]])
    x = fl.asarray(xh)
    shift(x, x)  # (numpy's result: b read before a is written)
    np.testing.assert_array_equal(x.get(), shifted)
    y, z = fl.asarray(xh), fl.asarray(xh * 10)
    shift(y, z)  # (another way of sharing: a record of its own)
    np.testing.assert_array_equal(y.get(), np.concatenate([xh[:1], xh[:-1] * 10]))
    x = fl.asarray(xh)
    shift(x, x)
    np.testing.assert_array_equal(x.get(), shifted)
    assert shift.traces == 2 and shift.eager_signatures == 0


def test_host_data_written_is_made_again_per_call(device):
    @fl.fuse
    def f(x):
        table = fl.asarray(np.arange(8.0, dtype=np.float32))
        table[::2] = x
        return table

    for k in range(3):
        xh = np.full(4, float(k), np.float32)
        want = np.arange(8.0, dtype=np.float32)
        want[::2] = xh
        np.testing.assert_array_equal(f(fl.asarray(xh)).get(), want)
    assert f.traces == 1 and f.eager_signatures == 0


def test_what_cannot_be_traced(device):
    closed = fl.zeros(6, dtype=np.float32)

    @fl.fuse
    def into_closure(x):  # (an array it closes over: its contents are not replayed)
        closed[1:] = x[:-1]
        return closed * 2

    for k in range(3):
        xh = np.full(6, float(k), np.float32)
        want = np.concatenate([[0.0], xh[:-1]]) * 2
        np.testing.assert_array_equal(into_closure(fl.asarray(xh)).get(), want)
    assert into_closure.traces == 1 and into_closure.eager_signatures == 1

    @fl.fuse
    def compacts(x):
        out = fl.zeros_like(x)
        out[x > 0.5] = x[x > 0.5]  # (a value whose length depends on the data)
        return out

    with pytest.raises(TracingError, match=r"argument 'x'.*boolean mask"):
        compacts(fl.asarray(RNG.random(8)))


def test_a_record_traced_with_shared_buffers_reads_each_argument(device):
    @fl.fuse
    def diff(a, b):  # (reads only)
        return a - b

    xh = np.arange(6, dtype=np.float32)
    x = fl.asarray(xh)
    np.testing.assert_array_equal(diff(x, x).get(), np.zeros(6, np.float32))
    y = fl.asarray(xh * 3)
    np.testing.assert_array_equal(diff(y, x).get(), xh * 2)
    np.testing.assert_array_equal(diff(x, x).get(), np.zeros(6, np.float32))
    assert diff.traces == 2 and diff.eager_signatures == 0


def test_out_arguments(device):
    closed = fl.zeros(5, dtype=np.float32)

    @fl.fuse
    def into(x, y):
        fl.multiply(x, 2.0, out=y)  # (into an argument: recorded)
        fl.add(x, 1.0, out=closed)  # (into an array it closes over: Python per call)
        return y + closed

    for k in range(3):
        xh = np.full(5, float(k), np.float32)
        y = fl.asarray(np.zeros(5, np.float32))
        got = into(fl.asarray(xh), y).get()
        np.testing.assert_array_equal(y.get(), xh * 2)
        np.testing.assert_array_equal(closed.get(), xh + 1)
        np.testing.assert_array_equal(got, xh * 3 + 1)
    assert into.traces == 1 and into.eager_signatures == 1


def test_writes_into_a_view_argument_reach_its_base(device):
    @fl.fuse
    def f(v, w):
        v[1:3] = w[:2] * 2
        v += 1

    for k in range(3):
        xh = np.arange(12, dtype=np.float32)
        x = fl.asarray(xh)
        f(x[2:10:2], fl.asarray(np.full(4, 5.0 + k, np.float32)))
        view = xh[2:10:2]
        view[1:3] = 10.0 + 2 * k
        view += 1
        np.testing.assert_array_equal(x.get(), xh)
    assert f.traces == 1 and f.eager_signatures == 0
