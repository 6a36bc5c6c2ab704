"""Slicing, shape operations, gathers, scatters and contractions against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).random(shape).astype(dtype)


KEYS = [
    (slice(1, 4),), (slice(None, None, -1),), (slice(-2, 0, -2), 3), (2,), (-1, slice(1, None)),
    (Ellipsis, 1), (None, slice(None), None), (slice(None), None, slice(2, 6, 3)),
    (slice(10, 20),), (1, -2),
]


@pytest.mark.parametrize("key", KEYS)
def test_basic_indexing_is_a_view(device, key):
    h = rand((5, 7), seed=1)
    x = fl.asarray(h)
    v = x[key]
    assert v.shape == h[key].shape
    if not v.is_lazy and v.size:
        assert v._storage is x._storage  # no copy
    np.testing.assert_array_equal(v.get(), h[key])
    np.testing.assert_allclose((v * 2 + 1).get(), h[key] * 2 + 1)


def test_views_of_expressions_fuse(device):
    h = rand((6, 8), seed=2)
    x = fl.asarray(h)
    fl.reset_stats()
    got = ((x * 2)[1:, ::2].T + 1).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(got, (h * 2)[1:, ::2].T + 1)


def test_stencil_of_slices_is_one_kernel(device):
    h = rand(1000, seed=3)
    x = fl.asarray(h)
    y = fl.zeros_like(x)
    fl.reset_stats()
    y[1:-1] = 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]
    assert fl.stats()["kernels_launched"] == 1
    ref = np.zeros_like(h)
    ref[1:-1] = 0.25 * h[:-2] + 0.5 * h[1:-1] + 0.25 * h[2:]
    np.testing.assert_allclose(y.get(), ref, rtol=1e-6)


@pytest.mark.parametrize("name,args", [
    ("reshape", ((4, 6),)), ("reshape", ((2, -1, 3),)), ("ravel", ()), ("transpose", ()),
    ("transpose", ((1, 2, 0),)), ("swapaxes", (0, 2)), ("moveaxis", (0, -1)),
    ("flip", ()), ("flip", (1,)), ("roll", (3,)), ("roll", (-1, 2)), ("expand_dims", (1,)),
    ("squeeze", ()), ("broadcast_to", ((3, 2, 3, 4),)), ("tile", ((2, 1, 2),)),
    ("repeat", (2, 1)), ("repeat", (3,)), ("diagonal", ()), ("diagonal", (1, 1, 2)),
])
def test_shape_functions_match_numpy(device, name, args):
    h = rand((2, 3, 4), seed=4)
    if name == "squeeze":
        h = h[:, :1]
    if name == "broadcast_to":
        h = h[:1]
    x = fl.asarray(h)
    got = getattr(fl, name)(x, *args)
    ref = getattr(np, name)(h, *args)
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got.get(), ref)


@pytest.mark.parametrize("name,args", [
    ("tile", ((2, 2),)), ("tile", (3,)), ("tile", ((2, 1, 3),)), ("tile", ((1, 1),)),
    ("tile", (0,)), ("repeat", (3, 1)), ("repeat", (2,)), ("repeat", (2, 0)),
    ("repeat", (1, -1)), ("repeat", (0, 0)),
])
def test_tile_and_repeat_read_through_computed_indices(device, name, args):
    h = rand((2, 3), seed=9)
    x = fl.asarray(h)
    for view in (lambda t: t.T, lambda t: t):  # of a strided view, too
        fl.reset_stats()
        got = (getattr(fl, name)(view(x), *args) * 2 + 1).get()
        ref = getattr(np, name)(view(h), *args) * 2 + 1
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
    # no copy first: one kernel (none for an empty result)
    assert fl.stats()["kernels_launched"] == (0 if ref.size == 0 else 1)
    kept = getattr(fl, name)(x, *args)  # a new array: later writes do not show through
    x[...] = -1
    np.testing.assert_array_equal(kept.get(), getattr(np, name)(h, *args))


def test_tile_and_repeat_reject_negative_counts(device):
    x = fl.asarray(rand((2, 3), seed=10))
    with pytest.raises(ValueError, match=r"negative repetitions are not allowed: \(2, -1\)"):
        fl.tile(x, (2, -1))
    with pytest.raises(ValueError, match="negative dimensions are not allowed"):
        fl.repeat(x, -2, axis=0)


def test_transposed_reshape_copies_like_numpy(device):
    h = rand((3, 4), seed=5)
    x = fl.asarray(h)
    np.testing.assert_array_equal(x.T.reshape(-1).get(), h.T.reshape(-1))
    with pytest.raises(fl.errors.ShapeError, match=r"size 12 \(shape \(3, 4\)\) into shape \(5,"):
        x.reshape(5, -1)


def test_concatenate_stack_tri(device):
    a, b = rand((2, 3), seed=6), rand((4, 3), seed=7)
    np.testing.assert_array_equal(fl.concatenate([fl.asarray(a), fl.asarray(b)]).get(),
                                  np.concatenate([a, b]))
    np.testing.assert_array_equal(fl.stack([fl.asarray(a), fl.asarray(a * 2)], axis=-1).get(),
                                  np.stack([a, a * 2], axis=-1))
    m = rand((5, 5), seed=8)
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(fl.triu(fl.asarray(m), k).get(), np.triu(m, k))
        np.testing.assert_array_equal(fl.tril(fl.asarray(m), k).get(), np.tril(m, k))
    with pytest.raises(fl.errors.ShapeError, match="must match exactly"):
        fl.concatenate([fl.asarray(a), fl.asarray(b.T.copy())])


def test_gather_with_lazy_index(device):
    h = rand(10, seed=9)
    x = fl.asarray(h)
    idx = fl.arange(5) * 2 - 3  # -3, -1, 1, 3, 5: negative ones count from the end
    np.testing.assert_array_equal(x[idx].get(), h[np.arange(5) * 2 - 3])
    np.testing.assert_array_equal(fl.take(x, np.array([[0, 9], [4, 4]])).get(),
                                  np.take(h, [[0, 9], [4, 4]]))
    m = rand((4, 6), seed=10)
    np.testing.assert_array_equal(fl.asarray(m)[:, [5, 0, 2]].get(), m[:, [5, 0, 2]])


def test_gather_out_of_bounds_is_reported(device):
    x = fl.asarray(np.arange(5.0))
    out = fl.full((2,), 7.0)
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        out[...] = x[np.array([1, 9])]
    np.testing.assert_array_equal(out.get(), [7.0, 7.0])  # left untouched


def test_assignment_through_views(device):
    h = rand((6, 6), seed=11)
    a = fl.asarray(h)
    ref = h.copy()
    a[1:-1, 1:-1] = a[1:-1, 1:-1] * 0 + 5
    ref[1:-1, 1:-1] = 5
    a[::2] += 1
    ref[::2] += 1
    np.testing.assert_allclose(a.get(), ref)


def test_overlapping_self_assignment_matches_numpy(device):
    h = np.arange(10.0)
    a = fl.asarray(h)
    a[1:] = a[:-1]
    ref = h.copy()
    ref[1:] = h[:-1]
    np.testing.assert_array_equal(a.get(), ref)
    b = fl.asarray(h)
    b[...] = b[::-1]
    np.testing.assert_array_equal(b.get(), h[::-1])


def test_scatter(device):
    a = fl.zeros(8)
    a[np.array([1, 5, -1])] = fl.asarray(np.array([1.0, 2.0, 3.0]))
    ref = np.zeros(8)
    ref[[1, 5, -1]] = [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(a.get(), ref)


def test_view_sees_later_writes(device):
    a = fl.asarray(np.arange(6.0))
    v = a[2:]
    a[...] = 0
    np.testing.assert_array_equal(v.get(), np.zeros(4))


@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((7,), (7, 3)), ((5, 7), (7,)),
                                   ((2, 5, 7), (7, 4)), ((3, 1, 5, 7), (2, 7, 4))])
def test_matmul_matches_numpy(device, sa, sb):
    a, b = rand(sa, seed=12), rand(sb, seed=13)
    got = fl.asarray(a) @ fl.asarray(b)
    ref = a.astype(np.float64) @ b
    assert got.shape == ref.shape
    np.testing.assert_allclose(got.get(), ref, rtol=1e-5)


def test_matmul_fuses_producers_and_consumers(device):
    a, b, c = rand((8, 16), seed=14), rand((16, 4), seed=15), rand(4, seed=16)
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    fl.reset_stats()
    got = fl.tanh((A * 2) @ B + C).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(got, np.tanh((a * 2.0) @ b + c), rtol=1e-5)


def test_einsum_and_tensordot(device):
    a, b, c = rand((3, 4), seed=17), rand((4, 5), seed=18), rand((5, 2), seed=19)
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    cases = [("ij,jk->ik", (A, B), (a, b)), ("ij,jk,kl->il", (A, B, C), (a, b, c)),
             ("ij->ji", (A,), (a,)), ("ij,ij->", (A, A), (a, a)), ("ij,jk", (A, B), (a, b)),
             ("ii->i", (fl.asarray(a[:, :3].copy()),), (a[:, :3],)), ("ij->", (A,), (a,))]
    for spec, ops, hs in cases:
        np.testing.assert_allclose(fl.einsum(spec, *ops).get(), np.einsum(spec, *hs),
                                   rtol=1e-5, err_msg=spec)
    t = rand((2, 3, 4), seed=20)
    np.testing.assert_allclose(fl.tensordot(fl.asarray(t), A.T, axes=([1, 2], [1, 0])).get(),
                               np.tensordot(t, a.T, axes=([1, 2], [1, 0])), rtol=1e-5)
    with pytest.raises(fl.errors.ShapeError, match="subscript 'ijk' has 3 letters"):
        fl.einsum("ijk,jk->i", A, B)
    with pytest.raises(fl.errors.ShapeError, match="mismatch in the core dimension"):
        A @ A


def test_a_view_made_again_is_the_same_leaf(device):
    """From a leaf's second view on its views are remembered by key: the same key gives
    the same leaf node (values and launches as before), another key its own."""
    h = rand((6, 9), seed=3)
    x = fl.asarray(h)
    keys = [(slice(1, -1), slice(None, -2)), (None, slice(None)), 2, (slice(None), 3),
            (slice(None, None, 2),), (slice(None), slice(None))]
    first = [x[k] for k in keys]  # (the leaf's first view is not remembered)
    again = [x[k] for k in keys]
    assert x[keys[0]]._node is again[0]._node is not first[0]._node
    for a, b in zip(first[1:], again[1:]):
        assert b._node is a._node
    assert again[-1] is x  # (a whole-array key: the array itself, as before)
    assert len({id(v._node) for v in again}) == len(keys)
    for k, v in zip(keys, again):
        np.testing.assert_array_equal(v.get(), h[k])
    fl.synchronize()
    fl.reset_stats()
    got = (x[1:-1, :-2] + x[1:-1, 2:]).get()
    np.testing.assert_allclose(got, h[1:-1, :-2] + h[1:-1, 2:], rtol=1e-6)
    assert fl.stats()["kernels_launched"] == 1


def test_remembered_views_keep_numpy_errors_and_values(device):
    h = rand(10, seed=4)
    x = fl.asarray(h)
    for _ in range(3):  # (remembered from the second)
        x[1:3]
        x[1]
    with pytest.raises(TypeError):
        x[1.0:3]
    with pytest.raises((TypeError, IndexError)):
        x[1.0]
    np.testing.assert_array_equal(x[np.int64(1):3].get(), h[1:3])
    x[1:3] = fl.asarray(np.array([7.0, 8.0], np.float32))  # (a write: the view reads it)
    h[1:3] = [7.0, 8.0]
    np.testing.assert_array_equal(x[1:3].get(), h[1:3])
    np.testing.assert_array_equal(x[0:-1:3].get(), h[0:-1:3])
    for _ in range(3):  # (views of views: each view leaf remembers its own)
        np.testing.assert_array_equal(x[1:][::2][1:].get(), h[1:][::2][1:])


def test_views_on_a_gpu_skip_the_host_paths_tests(device, monkeypatch):
    # only a CPU device has a host path (numpy's small views, fuseloop.host_eager): a
    # GPU array's view goes straight to the view of its buffer
    import dataclasses

    from fuseloop import array as array_module

    h = rand((6, 7), seed=3)
    x = fl.asarray(h)
    asked = []
    monkeypatch.setattr(array_module, "_eager_getitem",
                        lambda a, key: asked.append(key))  # (None: not taken)
    np.testing.assert_array_equal(x[1:-1, None, 2:].get(), h[1:-1, None, 2:])
    cpu = int(device.type == "cpu")
    assert len(asked) == cpu  # (a CPU device: asked)
    x.device = dataclasses.replace(device, index=9134, type="gpu")
    v = x[1:-1, None, 2:]
    assert len(asked) == cpu and v.shape == (4, 1, 5) and v.device is x.device
    assert v._node.storage is x._storage and v._node.strides == (7, 0, 1)
