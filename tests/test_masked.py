"""Masks that skip work: fl.compute(expr, out=y, where=mask) against numpy's
``np.add(a, b, out=y, where=mask)``; the kernel guards the computation and the store."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate
from fuseloop.errors import MaskError, ShapeError


def test_masked_compute_skips_work(device):
    rng = np.random.default_rng(0)
    a, b = rng.random(3000).astype(np.float32), rng.random(3000).astype(np.float32)
    y0 = np.full(3000, -1, np.float32)
    x, z, y = fl.asarray(a), fl.asarray(b), fl.asarray(y0)
    with evaluate.capturing_sources() as sources:
        fl.compute(fl.sin(x) + z, out=y, where=fl.asarray(a > 0.5))
    (src,) = sources
    # the mask is read first; the sine, the other loads and the store only under its if
    body = src[src.index("__kernel" if "__kernel" in src else "__global__"):]
    if "fl_any" in body:
        # PoCL's math on vectors (lower/masking.vectorise_masked): a block of 8 is
        # computed only if one of its lanes is selected, each lane stored only if it is
        block = re.search(r"if \(fl_any != 0\)", body)
        assert block, body
        before, after = body[:block.start()], body[block.end():]
        assert "sin(" not in before and "out0[" not in before
        # (the store within the lane's test against the size)
        assert "sin(" in after and re.search(
            r"if \(fl_mask\[\w+\] != 0\)\s*(if \([^\n]*N >= 0\)\s*)?out0\[", after)
    else:
        guard = re.search(r"if \((\w+\[\d\] |)fl_mask(\[\d\])? != 0\)", body)
        assert guard, body
        before = body[:guard.start()]
        assert "fl_sin" not in before and "out0[" not in before
        assert "fl_sin" in body[guard.end():] and "out0[" in body[guard.end():]
    for _ in range(2):  # (the second call replays the run plan, with another mask)
        m = rng.random(3000) < 0.3
        y = fl.asarray(y0)
        fl.compute(fl.sin(x) + z, out=y, where=fl.asarray(m))
        ref = y0.copy()
        np.add(np.sin(a), b, out=ref, where=m)
        np.testing.assert_allclose(y.get(), ref, rtol=1e-6)
        assert (y.get()[~m] == -1).all()
    # numpy's own spelling on fuseloop arrays runs the same masked kernel
    y = fl.asarray(y0)
    with evaluate.capturing_sources() as sources:
        np.add(x, z, out=y, where=m)
    assert "if (fl_mask" in sources[0] or "fl_mask[" in sources[0]
    np.add(x, z, out=y, where=m)
    np.testing.assert_allclose(y.get(), np.where(m, a + b, -1), rtol=1e-6)


def test_views_broadcast_and_reading_the_target(device):
    rng = np.random.default_rng(1)
    h, y0 = rng.random((5, 30)), rng.random((5, 60))
    x, yy = fl.asarray(h), fl.asarray(y0)
    rows = np.array([True, False, True, True, False])[:, None]  # (broadcast along rows)
    fl.compute(x - x.mean(axis=1, keepdims=True), out=yy[:, ::2], where=rows)
    ref = y0.copy()
    np.subtract(h, h.mean(axis=1, keepdims=True), out=ref[:, ::2], where=rows)
    np.testing.assert_allclose(yy.get(), ref, rtol=1e-12)
    # a value and a mask reading the target itself, element by element
    v = fl.asarray(y0)
    fl.synchronize()
    fl.reset_stats()
    fl.compute(v * 2, out=v, where=v > 0.5)
    fl.synchronize()
    assert fl.stats()["kernels_launched"] == 1
    ref = y0.copy()
    np.multiply(y0, 2, out=ref, where=y0 > 0.5)
    np.testing.assert_array_equal(v.get(), ref)
    # a mask kept by the caller keeps its values too (computed before the write)
    v = fl.asarray(y0)
    m = v > 0.5
    fl.compute(v * 0, out=v, where=m)
    np.testing.assert_array_equal(m.get(), y0 > 0.5)
    np.testing.assert_array_equal(v.get(), np.where(y0 > 0.5, 0, y0))


def test_bitmasks(device):
    rng = np.random.default_rng(2)
    n = 1001
    a, m = rng.random(n).astype(np.float32), rng.random(n) < 0.4
    y0 = np.full(n, 7, np.float32)
    x = fl.asarray(a)
    ref = y0.copy()
    np.multiply(a, 2, out=ref, where=m)
    words = fl.packbits(fl.asarray(m))  # numpy's packbits, big bit order
    np.testing.assert_array_equal(words.get(), np.packbits(m))
    y = fl.asarray(y0)
    fl.compute(x * 2, out=y, where=fl.bitmask(words))
    np.testing.assert_array_equal(y.get(), ref)
    # uint32 words, little bit order: packbits(bitorder="little") viewed as <u4
    little = np.packbits(m, bitorder="little")
    u32 = np.concatenate([little, np.zeros(-little.size % 4, np.uint8)]).view("<u4")
    y = fl.asarray(y0)
    fl.compute(x * 2, out=y, where=fl.bitmask(u32, bitorder="little"))
    np.testing.assert_array_equal(y.get(), ref)


def test_several_outputs_and_kept_values(device):
    rng = np.random.default_rng(3)
    a, y0 = rng.random(500), rng.random(500)
    m = rng.random(500) < 0.5
    x, p, q = fl.asarray(a), fl.asarray(y0), fl.zeros(500, np.float64)
    kept = p * 3  # reads a target and is kept: keeps its values after the write
    fl.compute(x + 1, kept, out=(p, q), where=m)
    np.testing.assert_array_equal(p.get(), np.where(m, a + 1, y0))
    np.testing.assert_array_equal(q.get(), np.where(m, y0 * 3, 0))
    np.testing.assert_array_equal(kept.get(), y0 * 3)


def test_mask_errors_write_nothing(device):
    y0 = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = fl.asarray(y0)
    x = fl.asarray(np.ones((3, 4), np.float32))
    with pytest.raises(ShapeError, match=r"\(4, 3\).*\(3, 4\)"):
        fl.compute(x, out=y, where=np.ones((4, 3), bool))
    with pytest.raises(MaskError, match=r"int32 of shape \(3, 4\).*fl.bitmask"):
        fl.compute(x, out=y, where=fl.asarray(np.ones((3, 4), np.int32)))
    with pytest.raises(ShapeError, match=r"3 uint8 words.*\(3, 4\).*2 words"):
        fl.compute(x, out=y, where=fl.bitmask(np.zeros(3, np.uint8)))
    with pytest.raises(MaskError, match="float32"):
        fl.bitmask(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="needs out="):
        fl.compute(x, where=np.ones((3, 4), bool))
    assert issubclass(MaskError, TypeError)
    np.testing.assert_array_equal(y.get(), y0)


def test_masked_math_on_vectors(pocl):
    # PoCL's masked math keeps its vector builtins (lower/masking.vectorise_masked):
    # sizes ending in a partial chunk and block; masks random, empty, the last lanes
    rng = np.random.default_rng(4)
    n = 2 * 4096 + 13
    a = (rng.random(n) * 4).astype(np.float32)
    y0 = np.full(n, -1, np.float32)
    x = fl.asarray(a)
    with evaluate.capturing_sources() as sources:  # (runs nothing)
        fl.compute(fl.exp(fl.sin(x)) * 2 + fl.log1p(x), out=fl.asarray(y0),
                   where=fl.asarray(np.ones(n, bool)))
    assert "(float8)(_fl_v" in sources[0] and "fl_any" in sources[0], sources[0]
    for m in (rng.random(n) < 0.3, np.zeros(n, bool), np.arange(n) >= n - 5):
        y = fl.asarray(y0)
        fl.compute(fl.exp(fl.sin(x)) * 2 + fl.log1p(x), out=y, where=fl.asarray(m))
        ref = np.where(m, np.exp(np.sin(a.astype(np.float64))) * 2 + np.log1p(a), -1)
        np.testing.assert_allclose(y.get(), ref, rtol=2e-6)
    # a mask computed in the kernel, with a math call of its own, from a load the
    # value shares
    y = fl.asarray(y0)
    with evaluate.capturing_sources() as sources:
        fl.compute(fl.exp(x) * 2, out=y, where=fl.sin(x) > 0.5)
    assert "fl_any" in sources[0], sources[0]
    fl.compute(fl.exp(x) * 2, out=y, where=fl.sin(x) > 0.5)
    np.testing.assert_allclose(y.get(), np.where(np.sin(a) > 0.5, np.exp(a) * 2, -1),
                               rtol=2e-6)
    # a user function (here dividing integers by one that is 0 where the mask is false)
    # runs only where selected: element by element
    div = fl.function("int div(int a, int b)", "return a / b;")
    q = (x * 4).astype(np.int32)
    with evaluate.capturing_sources() as sources:
        fl.compute(fl.exp(x) + div(7, q), out=y, where=q != 0)
    assert "fl_any" not in sources[0], sources[0]
    fl.compute(fl.exp(x) + div(7, q), out=y, where=q != 0)
    qh = (a * 4).astype(np.int32)
    np.testing.assert_allclose(
        y.get(), np.where(qh != 0, np.exp(a) + 7 // np.where(qh != 0, qh, 1), y.get()),
        rtol=2e-6)
