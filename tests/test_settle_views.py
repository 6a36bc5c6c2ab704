"""A lazy array holding a node that runs as a kernel of its own (a reduction broadcast
back) is evaluated at its second view (fuseloop.ops.settle): a loop of statements that
each read a view of it launches one kernel per statement, not the reductions again."""

from __future__ import annotations

import weakref

import numpy as np
from launch_counts import counted

import fuseloop as fl
from fuseloop.ops import settle


def _normalised(h: np.ndarray) -> tuple[fl.Array, np.ndarray]:
    """A batch normalisation as NPBench's resnet writes it (means and deviations over
    axis 0, broadcast back), lazy, and numpy's value."""
    x = fl.asarray(h)
    lazy = fl.maximum((x - fl.mean(x, axis=0, keepdims=True))
                      / fl.sqrt(fl.std(x, axis=0, keepdims=True) + 1e-5), 0)
    want = np.maximum((h - h.mean(axis=0, keepdims=True))
                      / np.sqrt(h.std(axis=0, keepdims=True) + 1e-5), 0)
    return lazy, want


def _windows(x: fl.Array, n: int) -> fl.Array:
    """A 3 x 3 window sum per position of a row, one statement each (a convolution's
    loop)."""
    out = fl.empty((x.shape[0], n, x.shape[3]), dtype=x.dtype)
    for j in range(n):
        out[:, j, :] = fl.sum(x[:, 0:3, j:j + 3, :], axis=(1, 2))
    return out


def test_views_of_a_normalised_array_launch_once_each(device_path):
    rng = np.random.default_rng(3)
    h = rng.random((4, 6, 12, 5))
    # (a first structure warms the kernels: the counted loop launches, builds nothing)
    warm, _ = _normalised(h)
    _windows(warm, 10).get()
    lazy, want = _normalised(h)
    done = counted(lambda: _windows(lazy, 10).get())
    # the array once (its reductions and itself: two or three kernels), then one a view
    assert done.launches <= 10 + 3
    assert not lazy.is_lazy
    expect = np.stack([want[:, 0:3, j:j + 3, :].sum(axis=(1, 2)) for j in range(10)], axis=1)
    np.testing.assert_allclose(done.value, expect, rtol=1e-12)


def test_one_view_stays_a_pushed_down_read(device_path):
    rng = np.random.default_rng(4)
    h = rng.random((5, 40))
    x = fl.asarray(h)
    lazy = x - fl.mean(x, axis=0)
    part = lazy[:, :3]
    assert lazy.is_lazy  # (one view: the array's other columns are never computed)
    np.testing.assert_allclose(part.get(), (h - h.mean(axis=0))[:, :3], rtol=1e-12)


def test_a_stencil_of_an_elementwise_temporary_stays_one_kernel(device_path):
    h = np.arange(40.0)
    x = fl.asarray(h)
    lazy = x * 2 + 1
    done = counted(lambda: (lazy[:-4] + lazy[1:-3] + lazy[2:-2] + lazy[3:-1]
                            + lazy[4:]).get(), warm=False)
    assert lazy.is_lazy and done.launches == 1
    t = h * 2 + 1
    np.testing.assert_array_equal(done.value, t[:-4] + t[1:-3] + t[2:-2] + t[3:-1] + t[4:])


def test_a_loop_of_windows_of_an_elementwise_array_reads_its_buffer(device_path):
    h = np.random.default_rng(5).random((3, 20, 4))
    x = fl.asarray(h)
    lazy = fl.maximum(x - 0.5, 0)
    out = fl.empty((3, 10, 4), dtype=x.dtype)
    for j in range(10):
        out[:, j, :] = fl.max(lazy[:, 2 * j:2 * j + 2, :], axis=1)
        # (views up to the ninth are pushed down; after it, the buffer is read)
        assert lazy.is_lazy == (j < settle.PLAIN_VIEWS - 1)
    t = np.maximum(h - 0.5, 0)
    np.testing.assert_array_equal(out.get(), t.reshape(3, 10, 2, 4).max(axis=2))


def test_a_reused_id_is_not_taken_for_the_array_viewed_before(device_path):
    x = fl.asarray(np.arange(20.0).reshape(4, 5))
    first = x - fl.mean(x, axis=0)
    second = x - fl.max(x, axis=0)
    # (a dead array's entry under the id the new one has: its weak reference is dead)
    settle._viewed[id(second)] = (weakref.ref(first), 1)
    del first
    second[1]
    assert second.is_lazy


def test_views_of_a_reduction_stay_lazy(device_path):
    h = np.arange(60.0).reshape(3, 4, 5)
    s = fl.asarray(h).sum(axis=0)
    np.testing.assert_array_equal(s[0].get(), h.sum(axis=0)[0])
    np.testing.assert_array_equal(s[1:].get(), h.sum(axis=0)[1:])
    assert s.is_lazy  # (each view is one kernel computing its own part)
