"""The minimal record of a traced function that writes (:mod:`fuseloop.fuse_prune`):
fills folded into the kernels reading them, writes no result needs dropped.

Each function is compared with numpy over several calls (the first is the trace's own
run, later ones replay the pruned record); ``_commands`` counts what one replayed call
enqueues: kernel launches and fills.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.backends import backend_for

RNG = np.random.default_rng(5)


@pytest.fixture
def fills(device, monkeypatch):
    """A counter of the fills enqueued on ``device`` (``count[0]``)."""
    backend = backend_for(device)
    count = [0]
    fill = backend.fill

    def counted(*args, **kwargs):
        count[0] += 1
        return fill(*args, **kwargs)

    monkeypatch.setattr(backend, "fill", counted)
    return count


def _commands(fills, f, *args):
    """(kernel launches, fills) of one call of ``f``, its result read back."""
    r = f(*args)  # (the trace, or a replay whose plans are made; read back, which
    for x in r if isinstance(r, tuple) else (r,):  # reads a deferred scatter's gate)
        x.get()
    fl.reset_stats()
    before = fills[0]
    r = f(*args)
    for x in r if isinstance(r, tuple) else (r,):
        x.get()
    return fl.stats()["kernels_launched"], fills[0] - before


def _check(f, want, *args, calls=3):
    for _ in range(calls):
        got = f(*args)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.get(), w)
    assert f.traces == 1 and f.eager_signatures == 0


def _masked_into_zeros():
    @fl.fuse
    def masked(x, t):
        out = fl.zeros_like(x)
        out[x > t] = 3.0
        return out

    return masked


def _run_masked_once_kernel(masked, fills, n):
    """Check ``masked`` against numpy and that a call is one kernel and no fill."""
    xh = RNG.random(n).astype(np.float32)
    x = fl.asarray(xh)
    _check(masked, [np.where(xh > 0.5, np.float32(3), np.float32(0))], x, 0.5)
    assert _commands(fills, masked, x, 0.5) == (1, 0)
    return xh, x


def test_masked_write_into_zeros_like_is_one_kernel(device, fills):
    masked = _masked_into_zeros()
    # (traced: a fill, then a kernel reading the zeros where the mask is false)
    xh, x = _run_masked_once_kernel(masked, fills, 1000)
    _check(masked, [np.where(xh > 0.25, np.float32(3), np.float32(0))], x, 0.25)


def test_a_fill_then_a_whole_write_is_one_kernel(device, fills):
    @fl.fuse
    def overwrite(x):
        out = fl.zeros_like(x)
        out[:] = x * 2
        return out

    @fl.fuse
    def twice(x):  # (a kernel's whole write that a later one overwrites: dropped too)
        out = fl.empty(x.shape, dtype=x.dtype)
        out[:] = 1.0
        out[:] = x * 2
        return out

    xh = RNG.random((20, 30))
    x = fl.asarray(xh)
    for f in (overwrite, twice):
        _check(f, [xh * 2], x)
        assert _commands(fills, f, x) == (1, 0)


def test_what_reads_the_fill_first_takes_its_value(device, fills):
    @fl.fuse
    def f(x):
        out = fl.full(x.shape, 2.5, dtype=x.dtype)
        before = out * 4  # (reads the fill: 10 everywhere)
        out[:] = out + x  # (reads it in place, then writes it whole)
        return out, before

    xh = RNG.random(64).astype(np.float32)
    _check(f, [xh + np.float32(2.5), np.full(64, 10, np.float32)], fl.asarray(xh))
    assert _commands(fills, f, fl.asarray(xh)) == (2, 0)


def test_a_masked_compute_into_a_fill_is_one_kernel(device, fills):
    @fl.fuse
    def masked(x, t):  # (the mask guards the store: the rest keeps the fill)
        out = fl.full(x.shape, -2.0, dtype=x.dtype)
        fl.compute(fl.sqrt(x) * 2, out=out, where=x > t)
        return out

    xh = RNG.random(300)
    x = fl.asarray(xh)
    _check(masked, [np.where(xh > 0.4, np.sqrt(xh) * 2, -2.0)], x, 0.4)
    assert _commands(fills, masked, x, 0.4) == (1, 0)


def test_fills_still_needed_are_kept(device, fills):
    @fl.fuse
    def partly(x):  # (a part written: the rest keeps the fill)
        out = fl.full(x.shape, -1.0, dtype=x.dtype)
        out[2:5] = x[:3]
        return out

    @fl.fuse
    def not_finite(x):  # (no literal for NaN: the fill stays, the kernel reads it)
        out = fl.full(x.shape, np.nan, dtype=x.dtype)
        out[x > 0.5] = 1.0
        return out

    @fl.fuse
    def written_later(x):  # (no whole write after the reads)
        out = fl.zeros_like(x)
        y = out + x
        out[1] = 5.0
        return out, y

    xh = RNG.random(16)
    x = fl.asarray(xh)
    want = np.full(16, -1.0)
    want[2:5] = xh[:3]
    _check(partly, [want], x)
    assert _commands(fills, partly, x) == (1, 1)
    want = np.where(xh > 0.5, 1.0, np.nan)
    for _ in range(3):
        np.testing.assert_array_equal(not_finite(x).get(), want)
    assert _commands(fills, not_finite, x) == (1, 1)
    want = np.zeros(16)
    want[1] = 5.0
    _check(written_later, [want, xh], x)
    assert _commands(fills, written_later, x) == (2, 1)


def test_boolean_and_integer_fills_fold(device, fills):
    @fl.fuse
    def flags(x, t):
        out = fl.zeros(x.shape, dtype=np.bool_)
        out[x > t] = True
        return out

    @fl.fuse
    def labels(x):
        out = fl.full(x.shape, 7, dtype=np.int32)
        out[x < 0.5] = -3
        return out

    xh = RNG.random(200)
    x = fl.asarray(xh)
    _check(flags, [xh > 0.3], x, 0.3)
    _check(labels, [np.where(xh < 0.5, -3, 7).astype(np.int32)], x)
    assert _commands(fills, flags, x, 0.3) == (1, 0)
    assert _commands(fills, labels, x) == (1, 0)


def test_writes_into_arguments_are_pruned_alike(device, fills):
    @fl.fuse
    def reset(a, x):  # (the argument's first whole write is dead: the second wins)
        a[:] = 0.0
        a[:] = x + 1
        return a

    xh = RNG.random(32)
    a, x = fl.asarray(np.ones(32)), fl.asarray(xh)
    for _ in range(3):
        assert reset(a, x) is a
        np.testing.assert_array_equal(a.get(), xh + 1)
    assert _commands(fills, reset, a, x) == (1, 0)


def _record(f):
    (entry,) = f._entries.values()
    return entry


def test_outputs_no_one_reads_are_not_written(device, fills):
    @fl.fuse
    def first_of_two(x):
        a, _ = fl.compute(x * 2, x + 1)  # (one kernel, two outputs; the second unused)
        return a

    xh = RNG.random(50)
    _check(first_of_two, [xh * 2], fl.asarray(xh))
    entry = _record(first_of_two)
    (step, *_), = entry.steps
    assert len(step.program.outputs) == 1 and len(entry.temps) == 1


def test_a_gpus_masked_write_is_one_kernel_of_one_output(device, fills):
    import dataclasses

    gpu = dataclasses.replace(device, type="gpu", max_work_group_size=256)
    with fl.device(gpu):
        masked = _masked_into_zeros()  # (a GPU's evaluation also stores the mask, kept meanwhile)
        _run_masked_once_kernel(masked, fills, 4096)
        entry = _record(masked)
        (step, *_), = entry.steps
        assert len(step.program.outputs) == 1 and len(entry.temps) == 1


@pytest.mark.parametrize("variant,commands", [
    ("gate", (2, 1)), ("narrow", (2, 1)), ("auto", (2, 1)),  # (the target's fill alone)
    ("backup", (3, 1)), ("partition", (3, 2))])  # (partition's: the counters' too)
@pytest.mark.parametrize("wait", ["", "defer"])
def test_a_traced_scatter_add_takes_no_gate_fill(device, fills, monkeypatch, variant,
                                                 commands, wait):
    from fuseloop.ops import scatter_kernel

    if getattr(device, "backend", "opencl") != "opencl":
        pytest.skip(f"OpenCL's scatter kernels; {device.name} runs on the {device.backend} backend")
    monkeypatch.setattr(scatter_kernel, "ON_CPU", True)
    monkeypatch.setenv("FUSELOOP_SCATTER", variant)
    monkeypatch.setenv("FUSELOOP_SCATTER_WAIT", wait)

    @fl.fuse
    def scatter_add(v, idx):
        out = fl.full(v.shape[0] // 16, 0.5, dtype=v.dtype)
        fl.add.at(out, idx, v)
        return out

    n = 1 << 12
    vh = RNG.random(n, dtype=np.float32)
    ih = RNG.integers(-(n // 16), n // 16, n)
    want = np.full(n // 16, 0.5, np.float32)
    np.add.at(want, ih, vh)
    v, idx = fl.asarray(vh), fl.asarray(ih)
    for _ in range(3):
        np.testing.assert_allclose(scatter_add(v, idx).get(), want, rtol=1e-5)
    assert scatter_add.traces == 1 and scatter_add.eager_signatures == 0
    assert _commands(fills, scatter_add, v, idx) == commands
    bad = ih.copy()
    bad[7] = n  # (out of range: numpy's IndexError; the next calls are right again)
    with pytest.raises(IndexError, match="out of bounds"):
        scatter_add(v, fl.asarray(bad)).get()
        fl.synchronize()
    for _ in range(2):
        np.testing.assert_allclose(scatter_add(v, idx).get(), want, rtol=1e-5)


def test_a_histograms_fill_stays(device, fills):
    bins = 64

    @fl.fuse
    def histogram(x, w):  # (an atomic update reads its target: the zeros are needed)
        k = fl.minimum((x * bins).astype(np.int64), bins - 1)
        h = fl.zeros(bins, dtype=w.dtype)
        fl.add.at(h, k, w)
        return h

    xh, wh = RNG.random(5000), RNG.random(5000)
    want = np.zeros(bins)
    np.add.at(want, np.minimum((xh * bins).astype(np.int64), bins - 1), wh)
    x, w = fl.asarray(xh), fl.asarray(wh)
    for _ in range(3):
        np.testing.assert_allclose(histogram(x, w).get(), want, rtol=1e-10)
    assert _commands(fills, histogram, x, w) == (2, 1)


def test_an_unused_output_still_checks_its_indices(device):
    @fl.fuse
    def first(x, y, idx):
        a, _ = fl.compute(x * 2, y[idx])  # (the gather's check stays)
        return a

    xh, yh = RNG.random(40), RNG.random(10)
    x, y = fl.asarray(xh), fl.asarray(yh)
    for _ in range(3):
        np.testing.assert_array_equal(first(x, y, fl.asarray(np.arange(40) % 10)).get(),
                                      xh * 2)
    with pytest.raises(IndexError):
        first(x, y, fl.asarray(np.arange(40))).get()
