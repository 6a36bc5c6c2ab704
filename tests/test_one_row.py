"""Full reductions consumed by a short output run inside its kernel, as one row.

``x - x.mean()``, a vector's softmax or ``x / fl.linalg.norm(x)`` on fewer than
``ONE_ROW_MAX_LENGTH`` elements are one kernel; longer ones run their reductions
first, each once (a reduction nested in another is not computed again).
"""

from __future__ import annotations

import numpy as np
import pytest
from launch_counts import launches_and_result

import fuseloop as fl
from fuseloop import splits
from fuseloop.evaluate import ONE_ROW_MAX_LENGTH


def rand(shape, seed: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).random(shape).astype(dtype)


def softmax(x, axis=-1):
    e = fl.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_softmax(h, axis=-1):
    e = np.exp(h - h.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape", [(1,), (7,), (1000,), (ONE_ROW_MAX_LENGTH - 1,), (1, 5),
                                   (1, 4101)])
def test_short_softmax_is_one_kernel(device, shape):
    h = rand(shape, seed=1) * 20
    n, got = launches_and_result(lambda: softmax(fl.asarray(h)))
    assert n == 1
    np.testing.assert_allclose(got, np_softmax(h.astype(np.float64)), rtol=2e-5, atol=1e-9)


@pytest.mark.parametrize("length", [ONE_ROW_MAX_LENGTH, 100_000])
def test_long_softmax_computes_its_maximum_once(device, length):
    h = rand((1, length), seed=2) * 20
    n, got = launches_and_result(lambda: softmax(fl.asarray(h)))
    # the maximum (two stages), the sum of exponentials (two stages), the quotient:
    # the maximum is not computed again inside the sum's kernels
    assert n == (3 if splits.ONE_LAUNCH else 5)  # (a split's two stages in one launch)
    np.testing.assert_allclose(got, np_softmax(h.astype(np.float64)), rtol=2e-5, atol=1e-12)


def test_standardise_and_normalise(device):
    h = rand(3000, seed=3) * 10 + 100
    x = fl.asarray(h)
    h64 = h.astype(np.float64)
    n, got = launches_and_result(lambda: (x - x.mean()) / x.std())
    assert n == 1
    np.testing.assert_allclose(got, (h64 - h64.mean()) / h64.std(), atol=2e-4)
    n, got = launches_and_result(lambda: x / fl.linalg.norm(x))
    assert n == 1
    np.testing.assert_allclose(got, h64 / np.linalg.norm(h64), rtol=1e-5)
    n, got = launches_and_result(lambda: x.var() + x)
    assert n == 1
    np.testing.assert_allclose(got, h64.var() + h64, rtol=1e-5)


def test_every_reduction_kind_in_one_row(device):
    n = 999
    h = rand(n, seed=4)
    h[123] = 2.0  # one maximum, so argmax has one answer
    x = fl.asarray(h)
    hi = (np.arange(n, dtype=np.int32) * 7919) % 1013
    xi = fl.asarray(hi)
    cases = [
        (lambda: fl.arange(n) == x.argmax(), np.arange(n) == h.argmax()),
        (lambda: fl.arange(n) - x.argmin(), np.arange(n) - h.argmin()),
        (lambda: fl.where(x == x.max(), 1, 0), np.where(h == h.max(), 1, 0)),
        (lambda: xi - xi.sum(), hi - hi.sum()),
        (lambda: xi * xi.max() - xi.min(), hi * hi.max() - hi.min()),
        (lambda: x * (x > 0.5).any() + (x < 2).all(), h * (h > 0.5).any() + (h < 2).all()),
        (lambda: x - x.min() + (x + 0.5).prod(),
         h.astype(np.float64) - h.min() + (h.astype(np.float64) + 0.5).prod()),
        (lambda: x * fl.dot(x, x), h.astype(np.float64) * np.dot(h.astype(np.float64), h)),
    ]
    for fn, want in cases:
        launched, got = launches_and_result(fn)
        assert launched == 1
        assert got.dtype == want.dtype or want.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=2e-5)


def test_reduced_range_other_than_the_output(device):
    yh, zh, bh = rand(5, seed=5), rand(100, seed=6), rand(50_000, seed=7)
    y, z, big = fl.asarray(yh), fl.asarray(zh), fl.asarray(bh)
    n, got = launches_and_result(lambda: y + fl.sum(z))
    assert n == 1
    np.testing.assert_allclose(got, yh + zh.astype(np.float64).sum(), rtol=1e-6)
    # a long reduced range runs first (in two stages), however short the output
    n, got = launches_and_result(lambda: y + fl.sum(big))
    assert n == (2 if splits.ONE_LAUNCH else 3)  # (a split's two stages in one launch)
    np.testing.assert_allclose(got, yh + bh.astype(np.float64).sum(), rtol=1e-5)


def test_full_reduction_beside_row_reductions_runs_first(device):
    h = rand((30, 40), seed=8)
    x = fl.asarray(h)
    # the full maximum would be recomputed for every row: it runs as a kernel of its own
    n, got = launches_and_result(lambda: x - x.max() - x.max(axis=1, keepdims=True))
    assert n == 2
    np.testing.assert_allclose(got, h - h.max() - h.max(axis=1, keepdims=True), rtol=1e-6)


def test_several_results_share_the_row(device):
    h = rand(2000, seed=9)
    x = fl.asarray(h)
    n, (a, b) = launches_and_result(lambda: fl.compute(x - x.mean(), x * x.max()))
    assert n == 1
    np.testing.assert_allclose(a, h - h.astype(np.float64).mean(), atol=1e-6)
    np.testing.assert_allclose(b, h * h.max(), rtol=1e-6)


def test_writing_into_an_array_the_reduction_reads(device):
    h = rand(5000, seed=10)
    x = fl.asarray(h)
    x -= x.mean()  # the mean reads all of x: no element may be written before it is known
    np.testing.assert_allclose(x.get(), h - h.astype(np.float64).mean(), atol=1e-6)
    x = fl.asarray(h)
    out = fl.empty_like(x)
    out[...] = x / x.sum()
    np.testing.assert_allclose(out.get(), h / h.astype(np.float64).sum(), rtol=1e-5)
    x[...] = softmax(x)
    np.testing.assert_allclose(x.get(), np_softmax(h.astype(np.float64)), rtol=2e-5)


def test_one_row_kernel_serves_many_lengths(device):
    # the length is a kernel parameter: one compiled kernel for many lengths (a GPU's
    # rows recipe has kernels of their own for rows of at most 512 * 16 elements)
    softmax(fl.asarray(rand(9000, seed=11))).get()
    compiled = fl.stats()["kernels_compiled"]
    for n in (10001, 20000, ONE_ROW_MAX_LENGTH - 1):
        h = rand(n, seed=n)
        got = softmax(fl.asarray(h)).get()
        np.testing.assert_allclose(got, np_softmax(h.astype(np.float64)), rtol=2e-5)
    assert fl.stats()["kernels_compiled"] == compiled
