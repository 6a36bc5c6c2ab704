"""Several devices, one array (issue 29): split arrays against numpy.

The machine has one OpenCL device; listing it several times makes several parts,
each with its own buffers, so the split, halo exchange, reduction and gathering
logic runs as it would over several GPUs.
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import DeviceError, DeviceMemoryError, ShapeError
from fuseloop.multi import EXCHANGED, MultiArray

RNG = np.random.default_rng(29)


def test_uneven_split_elementwise(device):
    xn = RNG.standard_normal(10).astype(np.float32)
    with fl.device([device] * 3) as dset:
        x = fl.asarray(xn)
        y = fl.arange(10, dtype=np.float32)
        z = fl.zeros(10, np.float32)
    assert isinstance(x, MultiArray) and len(dset) == 3
    assert x.bounds == (0, 3, 7, 10) and y.bounds == x.bounds
    assert [p.shape for p in x.parts] == [(3,), (4,), (3,)]
    assert all(p.device is device for p in x.parts)
    assert len({id(p._storage.buffer) for p in x.parts}) == 3  # a buffer per part
    yn = np.arange(10, dtype=np.float32)
    got = 2 * x - fl.sin(y) + x * y + z
    assert isinstance(got, MultiArray) and got.bounds == x.bounds
    fl.reset_stats()
    got.eval()
    assert fl.stats()["kernels_launched"] == 3  # one fused kernel per part
    np.testing.assert_allclose(got.get(), 2 * xn - np.sin(yn) + xn * yn, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(xn + x), 2 * xn)  # numpy defers to the split array
    np.testing.assert_allclose(fl.where(x > 0, x, 0.5).get(), np.where(xn > 0, xn, 0.5))


def test_weights_decide_rows(device):
    with fl.device([device, device], weights=[1, 3]):
        assert fl.ones((8, 2), np.float32).bounds == (0, 2, 8)
    with fl.device([device] * 3):  # each part gets at least one row
        assert fl.empty(3, np.float32).bounds == (0, 1, 2, 3)
        scalar = fl.asarray(2.5)  # (0-d: nothing to split, on the first device)
    assert type(scalar) is fl.Array and scalar.device is device


def test_weights_from_cached_copy_bandwidth(device, monkeypatch):
    explain = importlib.import_module("fuseloop.explain")  # (fl.explain is the function)
    monkeypatch.setattr(explain, "_copy_bandwidth", {})
    with fl.device([device] * 2) as dset:  # nothing measured: equal weights
        assert dset.weights == (1.0, 1.0)
    monkeypatch.setattr(explain, "_copy_bandwidth", {device.index: (device, 42.0)})
    with fl.device([device] * 2) as dset:  # what fl.explain measured, not measured again
        assert dset.weights == (42.0, 42.0)


def test_equal_parts_for_one_model(device, monkeypatch):
    """Measured bandwidths split in proportion only between different models that
    differ by more than the tolerance: noise between identical GPUs would make one part
    longer, and the slowest part sets the time."""
    from fuseloop.multi import DeviceSet
    from fuseloop.multi.devset import EQUAL_WITHIN

    explain = importlib.import_module("fuseloop.explain")
    other = dataclasses.replace(device, name=device.name + " (another model)",
                                index=device.index + 991)  # (never opened)
    monkeypatch.setattr(explain, "_copy_bandwidth", {device.index: (device, 100.0)})
    with fl.device([device, device]) as dset:  # one model: equal, whatever was measured
        assert dset.weights == (100.0, 100.0)
    for bw, expect in ((100.0 * EQUAL_WITHIN * 0.99, "equal"), (300.0, "proportional")):
        monkeypatch.setattr(explain, "_copy_bandwidth",
                            {device.index: (device, 100.0), other.index: (other, bw)})
        dset = DeviceSet.of([device, other])
        if expect == "equal":
            assert dset.weights[0] == dset.weights[1]
            assert dset.split(10) == (0, 5, 10)
        else:
            assert dset.weights == (100.0, 300.0) and dset.split(8) == (0, 2, 8)
    with fl.device([device, device], weights=[1, 3]) as dset:  # numbers: as given
        assert dset.weights == (1.0, 3.0)


def test_reductions(device):
    an = RNG.standard_normal((10, 4)).astype(np.float32)
    bn = RNG.standard_normal((10, 4)).astype(np.float32)
    with fl.device([device] * 3):
        a, b = fl.asarray(an), fl.asarray(bn)
    first = a.devices[0]
    total = fl.sum(a * b)
    assert isinstance(total, fl.Array) and total.device is first and total.shape == ()
    np.testing.assert_allclose(total.get(), np.sum(an * bn), rtol=1e-5)
    np.testing.assert_allclose(fl.sum(a, axis=0).get(), an.sum(0), rtol=1e-5)
    rows = fl.sum(a, axis=1)  # along a kept axis: each part's own rows, still split
    assert isinstance(rows, MultiArray) and rows.bounds == a.bounds
    np.testing.assert_allclose(rows.get(), an.sum(1), rtol=1e-5)
    np.testing.assert_allclose(a.max(axis=0, keepdims=True).get(), an.max(0, keepdims=True))
    assert float(fl.min(a)) == an.min()
    np.testing.assert_allclose(a.mean().get(), an.mean(), rtol=1e-5)
    np.testing.assert_allclose(fl.var(a, axis=0, ddof=1).get(), an.var(0, ddof=1), rtol=1e-4)
    np.testing.assert_allclose(a.std().get(), an.std(), rtol=1e-5)
    assert bool(fl.any(a > 2)) == bool((an > 2).any()) and not bool(fl.all(a > 0))
    assert int(fl.count_nonzero(a > 0)) == int(np.count_nonzero(an > 0))
    # a 0-d result is a scalar in a split expression (its value goes to every part)
    np.testing.assert_allclose((a - a.mean()).get(), an - an.mean(), rtol=1e-5, atol=1e-6)


def test_slices_across_parts_exchange_rows(device):
    xn = RNG.standard_normal(10).astype(np.float32)
    with fl.device([device] * 3):
        x = fl.asarray(xn)
    before = EXCHANGED["rows"]
    d = x[1:] - x[:-1]  # x[:-1] brought to x[1:]'s bounds: one row per inner boundary
    assert EXCHANGED["rows"] - before == 2
    np.testing.assert_allclose(d.get(), np.diff(xn), rtol=1e-6)
    np.testing.assert_allclose(x[2:9:2].get(), xn[2:9:2])
    row = x[5]  # one row: an array on the device holding it
    assert isinstance(row, fl.Array) and float(row) == xn[5]
    x[3:8] = x[2:7] * 2  # an assignment across parts, reading a misaligned slice
    want = xn.copy()
    want[3:8] = xn[2:7] * 2
    np.testing.assert_allclose(x.get(), want)


@pytest.mark.parametrize("boundary", ["clamp", "wrap", "constant"])
def test_stencil_halo_exchange(device, boundary):
    un = RNG.standard_normal((10, 6)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    want = fl.stencil(fl.asarray(un, device=device), w, boundary=boundary, cval=2).get()
    with fl.device([device] * 4):  # parts of 3, 2, 3, 2 rows
        u = fl.asarray(un)
    before = EXCHANGED["copies"]
    got = fl.stencil(u, w, boundary=boundary, cval=2)
    assert isinstance(got, MultiArray) and got.bounds == u.bounds
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=1e-6)
    # a halo row above and below each inner boundary (wrap: the two ends too)
    assert EXCHANGED["copies"] - before == (8 if boundary == "wrap" else 6)


@pytest.mark.parametrize("boundary", ["clamp", "wrap", "constant"])
def test_stencil_parts_share_one_built_expression(device, boundary, monkeypatch):
    """An evenly split stencil builds one part's expression and gives the other parts
    that expression with their windows substituted; the constant rule's rows beyond
    the ends are filled once, not per step; evaluating runs one launch per part."""
    from fuseloop.backends import backend_for
    from fuseloop.multi import exchange

    un = RNG.standard_normal((8, 5)).astype(np.float32)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    mode = {"clamp": "edge", "wrap": "wrap", "constant": "constant"}[boundary]
    pad = np.pad(un, 1, mode, **({"constant_values": 2} if mode == "constant" else {}))
    want = sum(w[i, j] * pad[i:i + 8, j:j + 5] for i in range(3) for j in range(3))
    with fl.device([device] * 4):  # two rows a part
        u = fl.asarray(un)
    fl.stencil(u, w, boundary=boundary, cval=2)  # (the constant's rows: filled here)
    fl.synchronize()
    fills: list = []
    backend = type(backend_for(device))
    real_fill = backend.fill
    monkeypatch.setattr(backend, "fill", lambda self, *a: fills.append(a) or real_fill(self, *a))
    # (templates made within the call: kept ones substitute every part, test_multi_plans)
    exchange._PLANS.clear()
    got = fl.stencil(u, w, boundary=boundary, cval=2)
    assert exchange.LAST_TEMPLATES == [1, 3]
    before = fl.stats()
    got.eval()
    after = fl.stats()
    assert sum(after[k] - before[k] for k in ("kernels_launched", "host_evaluations")) == 4
    assert fills == []
    np.testing.assert_allclose(got.get(), want, rtol=1e-6, atol=1e-6)


def test_stencil_halo_wider_than_parts(device):
    """Halos of several rows span several parts (1-2 rows each; an off-centre stencil
    reads only above): as one device gives."""
    un = RNG.standard_normal((7, 5)).astype(np.float32)
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    with fl.device([device] * 4):
        u = fl.asarray(un)
    one = fl.asarray(un, device=device)
    got = fl.stencil(u, w, center=(4, 2), boundary="constant", cval=2)
    want = fl.stencil(one, w, center=(4, 2), boundary="constant", cval=2)
    np.testing.assert_allclose(got.get(), want.get(), rtol=1e-5, atol=1e-5)


def test_stencil_steps_and_stencil_function(device):
    un = RNG.standard_normal((9, 5))
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]])
    ref = fl.asarray(un, device=device)
    with fl.device([device] * 3):
        u = fl.asarray(un)
    for _ in range(3):  # an explicit diffusion step, written back in place
        ref[...] = ref + 0.1 * fl.stencil(ref, w)
        u[...] = u + 0.1 * fl.stencil(u, w)
    np.testing.assert_allclose(u.get(), ref.get(), rtol=1e-12)
    op = fl.stencil_function(lambda a, c, b: fl.maximum(a, b) - c, (3, 1))
    np.testing.assert_allclose(op(u).get(), op(ref).get())


def test_lazy_generators_match_one_device(device):
    with fl.device([device] * 3):
        r = fl.random.uniform(11, key=7, dtype=np.float32)
        s = fl.linspace(0, 1, 11)
    assert isinstance(r, MultiArray)
    np.testing.assert_array_equal(
        r.get(), fl.random.uniform(11, key=7, dtype=np.float32, device=device).get())
    np.testing.assert_allclose(s.get(), np.linspace(0, 1, 11))


def test_errors_name_both_sets(device):
    with fl.device([device] * 2):
        a = fl.zeros(6, np.float32)
    with fl.device([device] * 3):
        b = fl.zeros(6, np.float32)
    index = rf"\[{device.index}\]"
    with pytest.raises(DeviceError, match=rf"different device sets.*{index}.*{index}"):
        a + b
    single = fl.zeros(6, np.float32, device=device)
    with pytest.raises(DeviceError, match="one device"):
        single + a
    with pytest.raises(DeviceError, match="one device"):
        fl.maximum(a, single)
    with fl.device([device] * 4), pytest.raises(ShapeError, match="3 rows over 4 parts"):
        fl.asarray(np.zeros(3))
    with fl.device([device] * 2):
        c = fl.zeros((6, 1), np.float32)
    with pytest.raises(ShapeError, match="broadcasting along the split axis"):
        a + c  # (ranks differ: numpy would broadcast a along c's second axis)
    with pytest.raises(ShapeError, match=r"host data of shape \(2, 6\)"):
        a + np.zeros((2, 6), np.float32)
    with pytest.raises(AttributeError, match="does not take split arrays"):
        fl.reshape(a, (3, 2))


def test_too_large_for_one_device_fits_the_set(device):
    small = dataclasses.replace(device, max_alloc_size=4096)  # the same runtime, a small cap
    with pytest.raises(DeviceMemoryError):
        fl.zeros(2048, np.float32, device=small)  # 8 KiB in one allocation
    with fl.device([small] * 3):
        x = fl.zeros(2048, np.float32) + 1
    assert int(fl.sum(x)) == 2048


def test_compute_into_split_arrays(device):
    # out= a split array: each part written on its device (it was read as a sequence of
    # its elements, one target per element)
    h = np.linspace(-1, 1, 1001, dtype=np.float32)
    with fl.device([device] * 3):
        x = fl.asarray(h)
        out = fl.zeros(1001, dtype=np.float32)
        assert fl.compute(2 * x + 1, out=out)[0] is out
    np.testing.assert_allclose(out.get(), 2 * h + 1, rtol=1e-6)
    with pytest.raises(DeviceError, match="split the same way"):
        fl.compute(fl.asarray(h, device=device), out=out)
    with pytest.raises(TypeError, match="out= takes"):
        fl.compute(x, out=5)


def test_stencil_step_parts_found_by_signature(device, monkeypatch):
    """A repeated split stencil: each part's expression (reading row windows, lazy
    concatenations of halo and own rows) finds its run plan by signature, without a
    walk of its structure, and computes what one device does."""
    from fuseloop import run_plans

    un = RNG.standard_normal((8, 5)).astype(np.float32)  # (test_stencil_parts_share_...)
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    want = fl.stencil(fl.asarray(un, device=device), w, boundary="clamp").get()
    with fl.device([device] * 4):
        u = fl.asarray(un)
    fl.stencil(u, w, boundary="clamp").eval()  # (each part's plan recorded)
    walks: list = []
    real = run_plans._key
    monkeypatch.setattr(run_plans, "_key", lambda *a: walks.append(a) or real(*a))
    step = fl.stencil(u, w, boundary="clamp")
    step.eval()
    assert walks == []
    np.testing.assert_allclose(step.get(), want, rtol=1e-6, atol=1e-6)


def test_operators_over_aligned_parts_build_split_arrays_as_the_checked_constructor(device):
    """Operators and ufuncs of split arrays split alike (with Python and numpy scalars,
    reflected, unary, comparisons) take the aligned parts' own operator paths: each result
    is what the checked constructor makes of its parts, equals numpy, and is one fused
    kernel per part."""
    # (its own draws: after other tests' draws a value near 0 of 2*a - sin(b) + a*b came
    # out of float32's cancellation 2e-6 off numpy's, past rtol; which tests ran before
    # in a worker varies)
    rng = np.random.default_rng(2901)
    xn = rng.standard_normal(11).astype(np.float32)
    yn = rng.standard_normal(11).astype(np.float32)
    with fl.device([device] * 3):
        x, y = fl.asarray(xn), fl.asarray(yn)
    cases = [(lambda a, b: 2 * a - fl.sin(b) + a * b, 2 * xn - np.sin(yn) + xn * yn),
             (lambda a, b: np.float32(1.5) / (abs(a) + 1) ** 2, 1.5 / (np.abs(xn) + 1) ** 2),
             (lambda a, b: -a + 3, -xn + 3), (lambda a, b: (a > b) | (b < -0.5),
                                              (xn > yn) | (yn < -0.5)),
             (lambda a, b: fl.maximum(a, b) * np.float64(2.0),
              np.maximum(xn, yn) * np.float64(2.0))]
    for fn, want in cases:
        got = fn(x, y)
        checked = MultiArray(got.parts, got.bounds, got.device_set)  # (asserts the parts)
        assert (got.shape, got.dtype, got.bounds) == (checked.shape, checked.dtype,
                                                      checked.bounds) == (
            want.shape, want.dtype, x.bounds), (got, want.dtype)
        fl.reset_stats()
        got.eval()
        assert fl.stats()["kernels_launched"] == 3
        np.testing.assert_allclose(got.get(), want, rtol=1e-6)
