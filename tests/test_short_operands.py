"""A lazy short matrix operand of a large product is evaluated first, whatever its producer
(``fuseloop.ops.linalg._short_operand``): the skinny recipes read it in every work-item,
each applying the producer; a vector and a square product keep a cheap producer fused."""

import numpy as np
import pytest
from launch_counts import launches_and_result

import fuseloop as fl
from fuseloop.ops import linalg


@pytest.fixture
def small_threshold(monkeypatch):
    # (the rule's size at test sizes: products of 2^18 elements, not 2^22)
    monkeypatch.setattr(linalg, "SHORT_OTHER_MIN", 1 << 18)


def test_relu_of_short_operand_runs_first(device_path, small_threshold):
    rng = np.random.default_rng(0)
    h, b = rng.random((8, 512), dtype=np.float32) - 0.5, rng.random(512, dtype=np.float32)
    w = rng.random((512, 512), dtype=np.float32)
    fh, fb, fw = fl.asarray(h), fl.asarray(b), fl.asarray(w)
    # (a product alone: one launch, or two where the device splits its sum)
    product = launches_and_result(lambda: fl.asarray(np.maximum(h - b, 0)) @ fw)[0]
    launches, got = launches_and_result(lambda: fl.maximum(fh - fb, 0) @ fw)
    assert launches == 1 + product  # (the producer's pass, then the product)
    np.testing.assert_allclose(got, np.maximum(h - b, 0) @ w, rtol=1e-5)
    product = launches_and_result(lambda: fw @ fl.asarray(np.maximum(h - b, 0).T))[0]
    launches, got = launches_and_result(lambda: fw @ fl.maximum(fh - fb, 0).T)  # (on the right)
    assert launches == 1 + product
    np.testing.assert_allclose(got, w @ np.maximum(h - b, 0).T, rtol=1e-5)
    # (a vector keeps its producer: one pass over it costs more than it saves)
    product = launches_and_result(lambda: fw.T @ fl.asarray(2 * h[0]))[0]
    launches, got = launches_and_result(lambda: fw.T @ (2 * fh[0]))
    assert launches == product
    np.testing.assert_allclose(got, w.T @ (2 * h[0]), rtol=1e-5)


def test_square_and_small_products_keep_a_cheap_producer(device_path, small_threshold):
    rng = np.random.default_rng(1)
    a, c = rng.random((512, 512), dtype=np.float32), rng.random((512, 512), dtype=np.float32)
    fa, fc = fl.asarray(a), fl.asarray(c)
    product = launches_and_result(lambda: fa @ fc)[0]  # (one launch, or two where split)
    launches, got = launches_and_result(lambda: (fa * 2) @ fc)  # (equal sizes: no short side)
    assert launches == product
    np.testing.assert_allclose(got, (a * 2) @ c, rtol=1e-5)
    small = fl.asarray(c[:256, :256])  # (a product under SHORT_OTHER_MIN)
    product = launches_and_result(lambda: fl.asarray(2 * a[0, :256]) @ small)[0]
    launches, got = launches_and_result(lambda: (2 * fa[0, :256]) @ small)
    assert launches == product
    np.testing.assert_allclose(got, (2 * a[0, :256]) @ c[:256, :256], rtol=1e-5)
