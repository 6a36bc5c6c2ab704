"""The host cost of small arrays and loops of small statements (issue 26).

Basic keys (an int, a slice, a tuple of them) on a concrete array build their view in
one step (``ops.indexing._plain_view``): it must give the general path's leaf exactly
(same strides and offset, so the same structure key) and leave every other key to it.
A chain reusing its previous step (``r = sin(r) * 0.5 + r * 0.25``) is a DAG whose
expansion doubles per step: its structure key writes a node met again as a
back-reference, so the structure is cached instead of linearised on every call.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.array import _sig_loops
from fuseloop.errors import IndexOutOfBoundsError, InvalidIndexError
from fuseloop.expr import program as prog
from fuseloop.expr.nodes import Leaf
from fuseloop.expr.program import structure_entry
from fuseloop.ops import indexing

KEYS = [
    0, -1, 2, slice(None), slice(1, None), slice(None, -1), slice(None, None, 2),
    slice(None, None, -1), slice(4, 1, -2), slice(5, 5), slice(-100, 100),
    (1, 2), (slice(1, 3), -1), (-2, slice(None, None, -1)), (slice(None), 0),
    (slice(0, 0), slice(None)), (1, slice(2, None), 2), (slice(None), slice(None)),
    # new axes (pairwise broadcasts: x[:, None] - x[None, :])
    None, (None, 1), (slice(None), None), (1, None, slice(2, None)), (None, None, 0),
    (slice(None), None, slice(None), None),
]


def _general(arr, key):
    return indexing._basic_view(arr, indexing._split(arr, key).basic)


@pytest.mark.parametrize("base", ["whole", "strided", "offset"])
def test_plain_views_equal_the_general_path(device, base):
    h = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    x = fl.asarray(h)
    if base == "strided":
        x, h = x[::-1, :, ::2], h[::-1, :, ::2]
    elif base == "offset":
        x, h = x[1:, 2:], h[1:, 2:]
    for key in KEYS:
        fast = indexing._plain_view(x, key)
        assert fast is not None, key
        ref = _general(x, key)
        assert fast.shape == ref.shape == h[key].shape, key
        if ref is x:
            assert fast is x, key  # an identity view is the array itself, as before
            continue
        a, b = fast._node, ref._node
        assert type(a) is Leaf and type(b) is Leaf, key
        assert (a.storage, a.strides, a.offset) == (b.storage, b.strides, b.offset), key
        assert not fast.is_lazy
        np.testing.assert_array_equal(fast.get(), h[key], err_msg=str(key))


def test_other_keys_take_the_general_path(device):
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fl.asarray(h)
    for key in (np.int64(1), (1, np.int32(2)), Ellipsis, (None, ...), [0, 2], (0, ...),
                True, slice(np.int64(1), None), (5,), (0, 0, 0), slice(None, None, 0)):
        if not isinstance(key, slice) or key.step is not None or not isinstance(
                key.start, np.integer):
            assert indexing._plain_view(x, key) is None, key
    # (a slice of numpy integers goes through slice.indices in either path)
    np.testing.assert_array_equal(x[np.int64(1)].get(), h[1])
    np.testing.assert_array_equal(x[1, np.int32(2)].get(), h[1, 2])
    np.testing.assert_array_equal(x[None, 1].get(), h[None, 1])
    np.testing.assert_array_equal(x[[0, 2]].get(), h[[0, 2]])
    with pytest.raises(IndexOutOfBoundsError):
        x[5]
    with pytest.raises(IndexOutOfBoundsError):
        x[1, -5]
    with pytest.raises(InvalidIndexError):
        x[0, 0, 0]
    with pytest.raises(ValueError):
        x[::0]
    lazy = x * 2  # a lazy array: views are pushed into its expression
    assert indexing._plain_view(lazy, 1) is None
    np.testing.assert_array_equal(lazy[1, ::-1].get(), (h * 2)[1, ::-1])


def test_loops_of_small_statements_match_numpy(device):
    rng = np.random.default_rng(3)
    xh, yh = rng.random(50, dtype=np.float32), rng.random(50, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)
    for i in range(1, 50):
        x[i] = y[i] * 2 + x[i - 1]
        xh[i] = yh[i] * 2 + xh[i - 1]
    np.testing.assert_allclose(x.get(), xh, rtol=1e-5)

    n = 12
    ah = np.tril(rng.random((n, n))) + np.eye(n) * n
    bh = rng.random(n)
    a, b = fl.asarray(ah), fl.asarray(bh)
    out = fl.zeros(n, np.float64)
    ref = np.zeros(n)
    for i in range(n):
        out[i] = (b[i] - a[i, :i] @ out[:i]) / a[i, i]
        ref[i] = (bh[i] - ah[i, :i] @ ref[:i]) / ah[i, i]
    np.testing.assert_allclose(out.get(), ref, rtol=1e-12)
    np.testing.assert_allclose(out.get(), np.linalg.solve(ah, bh), rtol=1e-10)
    # a 2-D target, slices written from a view of the same buffer
    m = fl.asarray(ah.copy())
    mh = ah.copy()
    for i in range(1, n):
        m[i, :i] = m[i - 1, :i] * 0.5 + 1
        mh[i, :i] = mh[i - 1, :i] * 0.5 + 1
    np.testing.assert_allclose(m.get(), mh, rtol=1e-12)


def test_unbatched_matmul_matches_numpy(device):
    # 1-D and 2-D operands contract directly (no reshape to 2-D): numpy's shapes,
    # dtypes and its core-dimension error
    rng = np.random.default_rng(4)
    mat, vec = rng.random((3, 4)), rng.random(4)
    for ah, bh in ((vec, vec), (mat, vec), (vec[:3], mat), (mat, mat.T),
                   (np.arange(12, dtype=np.int32).reshape(3, 4), np.arange(4, dtype=np.int32))):
        got = fl.asarray(ah) @ fl.asarray(bh)
        want = ah @ bh
        assert got.shape == want.shape and got.dtype == want.dtype, (ah.shape, bh.shape)
        np.testing.assert_allclose(got.get(), want, rtol=1e-12)
    # a lazy operand, and the product feeding an expression
    a, v = fl.asarray(mat), fl.asarray(vec)
    np.testing.assert_allclose(((a * 2) @ (v + 1) - 1).get(), (mat * 2) @ (vec + 1) - 1,
                               rtol=1e-12)
    with pytest.raises(ValueError, match=r"core dimension.*\(4 != 3\)"):
        a @ a


def test_an_assigned_temporary_is_not_entered_as_a_reader(device):
    # the value of ``x[...] = expr`` (held by nothing else) is never entered in x's
    # readers; an earlier lazy reader and a value the caller keeps still see x's old
    # elements
    h = np.arange(20.0)
    x = fl.asarray(h.copy())
    kept = x[::2] * 1
    for _ in range(4):
        x[1:-1] = 0.5 * (x[:-2] + x[2:])
        h[1:-1] = 0.5 * (h[:-2] + h[2:])
    assert not x._storage.readers  # (kept, computed before the first write, left it)
    np.testing.assert_array_equal(kept.get(), np.arange(20.0)[::2])
    v = x[2:] * 0.5
    x[1:-1] = v
    x[...] = 0
    np.testing.assert_allclose(v.get(), h[2:] * 0.5, rtol=1e-12)
    np.testing.assert_array_equal(x.get(), np.zeros(20))


def _chain(r, steps):
    for _ in range(steps):
        r = fl.sin(r) * 0.5 + r * 0.25
    return r


def test_a_chain_reusing_its_step_is_cached(device, checked):
    rh = np.linspace(-2, 2, 100, dtype=np.float32)
    r0 = fl.asarray(rh)
    expect = rh
    for _ in range(10):
        expect = np.sin(expect) * np.float32(0.5) + expect * np.float32(0.25)
    r = _chain(r0, 10)
    # signed: the shared step's operands are merged, not repeated (r0 and 20 scalars;
    # before: 2**10 repeats, then the walk, which once wrote out the step per path)
    assert r._node.sig and len(r._node.operands) == 21
    hit = structure_entry([r._node], r.shape)
    assert hit is not None
    entry, storages, scalars = hit
    assert storages == [r0._storage] and len(scalars) == 20
    again = _chain(fl.asarray(rh[::-1].copy()), 10)
    assert structure_entry([again._node], again.shape)[0] is entry  # (checked: = fresh)
    np.testing.assert_allclose(r.get(), expect, rtol=1e-6)
    np.testing.assert_allclose(again.get(), expect[::-1], rtol=1e-6)


def test_back_references_tell_sharing_apart(device, checked):
    xh = np.arange(1, 9, dtype=np.float32)
    x = fl.asarray(xh)
    t = fl.sin(x)
    shared = t * t
    copies = fl.sin(x) * fl.sin(x)
    deep = x
    for _ in range(8):  # past the signature's operand limit: walked
        deep = deep * 0.5 + deep
    deep_copy = x
    for _ in range(8):
        deep_copy = deep_copy * 0.5 + deep_copy * 1.0
    keys = [prog.structure_key([e._node], e.shape)[0]
            for e in (shared, copies, deep, deep_copy)]
    assert keys[0] != keys[1] and keys[2] != keys[3]
    for e in (shared, copies, deep, deep_copy):
        assert structure_entry([e._node], e.shape) is not None
    np.testing.assert_allclose(shared.get(), np.sin(xh) ** 2, rtol=1e-6)
    np.testing.assert_allclose(copies.get(), np.sin(xh) ** 2, rtol=1e-6)
    np.testing.assert_allclose(deep.get(), xh * np.float32(1.5) ** 8, rtol=1e-5)
    np.testing.assert_allclose(deep_copy.get(), xh * np.float32(1.5) ** 8, rtol=1e-5)


def test_unary_of_an_unsigned_node_is_remembered(device):
    h = np.arange(1, 5, dtype=np.float32)
    x = fl.asarray(h)
    # a concatenation: no signature (reductions have one: tests/test_signatures_reduce.py)
    s = fl.concatenate([x, x])
    assert s._node.sig == 0 and x.sum()._node.sig != 0
    _sig_loops.clear()
    fl.sqrt(s)
    assert ("sqrt", s.dtype.char) in _sig_loops
    np.testing.assert_allclose(fl.sqrt(s).get(), np.sqrt(np.concatenate([h, h])), rtol=1e-6)
