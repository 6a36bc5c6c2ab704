"""Composites of two arrays built once per pair of operand structures, then copied
(``fuseloop.expr.templates.composite_of``): ``a @ b``.

A copy must be what a fresh build makes (values, dtypes, structure key), for other
buffers and scalars of the same structures; which operands repeat across the two
arrays is part of the key; errors are raised on every call.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_path
from fuseloop.errors import ShapeError
from fuseloop.expr import program as prog
from fuseloop.ops import linalg


@pytest.fixture
def lazy_products(monkeypatch):
    """Small products are built as kernels (not computed at once by numpy), and every
    structure-cache hit is compared with a fresh linearisation (asserts)."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", True)


def rand(shape, seed):
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_a_product_is_copied_not_built(device, lazy_products, monkeypatch):
    first = [rand((5, 7), 0), rand((7, 3), 1)]
    x, y = (fl.asarray(h) for h in first)
    r1 = x @ y
    x @ y  # (met twice: recorded)

    real = linalg._matmul

    def built(*args):
        raise AssertionError("built again")

    monkeypatch.setattr(linalg, "_matmul", built)
    ha, hb = rand((5, 7), 2), rand((7, 3), 3)
    a, b = fl.asarray(ha), fl.asarray(hb)
    r2 = a @ b  # other buffers: the template's copy
    assert r2._node.sig == r1._node.sig and r2.dtype == np.float32
    np.testing.assert_allclose(r2.get(), ha @ hb, rtol=1e-5)
    np.testing.assert_allclose(r1.get(), first[0] @ first[1], rtol=1e-5)
    monkeypatch.setattr(linalg, "_matmul", real)
    for scale in (2.0, 3.0, 3.0, -1.0):  # an expression operand with new scalars
        np.testing.assert_allclose(((a * scale) @ b).get(), (ha * np.float32(scale)) @ hb,
                                   rtol=1e-5)


def test_operands_repeated_across_the_pair_are_part_of_the_key(device, lazy_products):
    h, g = rand((6, 6), 0), rand((6, 6), 1)
    x, y = fl.asarray(h), fl.asarray(g)
    for _ in range(3):  # built, recorded, copied; x read by both, then each its own
        np.testing.assert_allclose((x @ x).get(), h @ h, rtol=1e-5)
        np.testing.assert_allclose((x @ y).get(), h @ g, rtol=1e-5)
        np.testing.assert_allclose(((x + y) @ x).get(), (h + g) @ h, rtol=1e-5)
        np.testing.assert_allclose(((x + y) @ y).get(), (h + g) @ g, rtol=1e-5)


def test_vectors_views_and_batches(device, lazy_products):
    m, v, w = rand((4, 9), 0), rand(9, 1), rand(4, 2)
    bat = rand((2, 4, 9), 3)
    a, x, y, b = fl.asarray(m), fl.asarray(v), fl.asarray(w), fl.asarray(bat)
    for _ in range(3):
        np.testing.assert_allclose((a @ x).get(), m @ v, rtol=1e-5)
        np.testing.assert_allclose((y @ a).get(), w @ m, rtol=1e-5)
        np.testing.assert_allclose((a.T[1:, :] @ a[:, :3]).get(), m.T[1:] @ m[:, :3],
                                   rtol=1e-5)
        np.testing.assert_allclose((b @ a.T).get(), bat @ m.T, rtol=1e-5)
        assert (x @ x).shape == ()
        np.testing.assert_allclose(float(x @ x), v @ v, rtol=1e-5)
        got = fl.asarray(m.astype(np.int32)) @ fl.asarray(m.T.astype(np.int32))
        assert got.dtype == np.int32


def test_errors_are_raised_on_every_call(device, lazy_products):
    a, b = fl.asarray(rand((3, 4), 0)), fl.asarray(rand((5, 2), 1))
    for _ in range(3):
        with pytest.raises(ShapeError, match=r"\(3, 4\) @ \(5, 2\)"):
            a @ b


def test_a_pair_template_keeps_no_buffer_alive(device, lazy_products):
    for _ in range(3):  # built, recorded, copied
        x, y = fl.asarray(rand((4, 5), 0)), fl.asarray(rand((5, 3), 1))
        r = (x * 2.0) @ y
        refs = weakref.ref(x._storage), weakref.ref(y._storage)
        del x, y, r
        fl.synchronize()  # (lets go of the recent lazy arrays)
        gc.collect()
        assert refs[0]() is None and refs[1]() is None


def _same_tree(a, b, seen=None):
    """Whether the node trees ``a`` and ``b`` have the same classes and fields (buffers
    and shared leaves by identity)."""
    from fuseloop.expr.nodes import Node, Storage

    seen = {} if seen is None else seen
    if isinstance(a, Storage) or not isinstance(a, Node):
        return a is b if isinstance(a, Storage) else (
            type(a) is type(b) and (a == b if not isinstance(a, np.ndarray) else a is b))
    if type(a) is not type(b):
        return False
    if id(a) in seen:
        return seen[id(a)] is b
    seen[id(a)] = b
    names = {n for cls in type(a).__mro__ for n in getattr(cls, "__slots__", ())}
    names.discard("__weakref__")
    if "_args" in names:  # (read through ``args``: a copy may make it when first read)
        names = (names - {"_args"}) | {"args"}
    for name in sorted(names):
        x, y = getattr(a, name, None), getattr(b, name, None)
        if name in ("token", "views", "later"):  # (made on first use; views: a leaf's
            continue  # remembered; later: how a copy makes its arguments)
        if isinstance(x, tuple | frozenset) and not isinstance(x, str):
            if type(x) is not type(y) or len(x) != len(y):
                return False
            pairs = zip(x, y) if type(x) is tuple else zip(
                sorted(x, key=id), sorted(y, key=id))
            if not all(_same_tree(p, q, seen) for p, q in pairs):
                return False
        elif not _same_tree(x, y, seen):
            return False
    return True


def test_a_copy_is_the_tree_a_fresh_build_makes(device, lazy_products):
    from fuseloop.expr import templates

    h = rand((6, 5), 0)
    x, v = fl.asarray(h), fl.asarray(rand(5, 1))
    builds = {
        "argmin": lambda: fl.argmin(x * 2.0),  # element indices, scalars, a cast
        "var": lambda: (x + 1.0).var(axis=1, keepdims=True),
        "power": lambda: (x - 3.0) ** -1.5,
        "view": lambda: (x * v)[:, None, ::2].T,
        "matmul": lambda: (x * 0.5) @ v,
    }
    for name, build in builds.items():
        build(), build()  # (recorded)
        copied = build()._node
        templates._templates.clear()
        fresh = build()._node
        assert _same_tree(copied, fresh), name


def test_einsum_is_copied_per_subscripts(device, lazy_products):
    m, g = rand((4, 5), 0), rand((5, 3), 1)
    a, b = fl.asarray(m), fl.asarray(g)
    for _ in range(3):  # built, recorded, copied; the subscripts are part of the key
        np.testing.assert_allclose(fl.einsum("ij,jk->ik", a, b).get(), m @ g, rtol=1e-5)
        np.testing.assert_allclose(fl.einsum("ij,jk->ki", a, b).get(), (m @ g).T, rtol=1e-5)
        np.testing.assert_allclose(fl.einsum("ij,jk,kl->il", a, b, b.T).get(),
                                   m @ g @ g.T, rtol=1e-5)  # (an intermediate: built)
        np.testing.assert_allclose(fl.einsum("ij->j", a * 2.0).get(), (m * 2).sum(0),
                                   rtol=1e-5)
