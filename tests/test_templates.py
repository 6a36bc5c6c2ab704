"""Composites built once per operand structure, then copied (``fuseloop.expr.templates``).

``x.argmax(axis=1)``, ``x.std()``, ``e[:, None]`` of an expression: the subtree is
recorded the first time and copied with the new buffers and scalars later (``x ** -1.5``
has been one power node since the lazybuild merge; it is still checked here beside them).
Every copy must be what a fresh build makes (values, dtypes, structure key), must not
keep the first call's buffers alive, and errors must still be raised on every call.
Benchmark: ``benchmarks/bench_lazy_build.py``, ``benchmarks/probes/lazy_front_half.py``.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import DTypeError, IndexOutOfBoundsError, ShapeError
from fuseloop.expr import templates
from fuseloop.expr.nodes import Leaf, Storage
from fuseloop.ops import reductions


def test_a_composite_is_copied_not_built(device, checked, monkeypatch):
    rng = np.random.default_rng(0)
    first, second = rng.random((2, 6, 5), dtype=np.float32)
    second[2, 3] = np.nan  # (numpy: the first NaN's index)
    r1 = fl.asarray(first).argmax(axis=1)
    fl.asarray(first).argmax(axis=1)  # (met twice: recorded)

    def built(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(reductions, "_arg_extreme_built", built)
    r2 = fl.asarray(second).argmax(axis=1)  # other buffer: the template's copy
    assert r2._node.sig == r1._node.sig and r2.dtype == np.int64
    np.testing.assert_array_equal(r1.get(), first.argmax(axis=1))
    np.testing.assert_array_equal(r2.get(), second.argmax(axis=1))


def test_copies_take_the_new_scalars_and_buffers(device, checked):
    h = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    for scale, shift in ((2.0, 1.0), (3.0, -5.0), (0.5, 0.0)):
        hh = h[::-1] * np.float32(scale)
        x = fl.asarray(hh.copy())
        e = x * scale - shift  # (Python scalars: arguments, not in the key)
        got = fl.compute(e.std(axis=0), (e ** -1.5)[:, None, :])
        want = (hh * np.float32(scale) - np.float32(shift))
        np.testing.assert_allclose(got[0].get(), want.std(axis=0), rtol=1e-5)
        np.testing.assert_allclose(got[1].get(), (want ** -1.5)[:, None, :], rtol=1e-5)


def test_repeated_operands_are_part_of_the_key(device, checked):
    # the same signature, but x is read twice in the first and z once in the second:
    # a copy of the first's view must not read x where the second reads z
    h = [np.arange(k, k + 8, dtype=np.float32) for k in range(4)]
    x, y, w, z = (fl.asarray(a) for a in h)
    twice, once = (x * y) + (w * x), (x * y) + (w * z)
    assert twice._node.sig == once._node.sig
    twice[:, None], twice[:, None]  # (recorded)
    np.testing.assert_array_equal(twice[:, None].get(), (h[0] * h[1] + h[2] * h[0])[:, None])
    np.testing.assert_array_equal(once[:, None].get(), (h[0] * h[1] + h[2] * h[3])[:, None])


def test_a_key_met_once_is_not_recorded(device, monkeypatch):
    calls = []
    real = templates.record
    monkeypatch.setattr(templates, "record", lambda *a: calls.append(1) or real(*a))
    e = fl.asarray(np.ones((3, 7), np.float32)) * 2.0
    for k in range(3):  # (a loop's slices: each view's key met once)
        e[k:k + 1, 1:]
    assert not calls
    e[0:1, 1:]
    assert len(calls) == 1


def test_dtypes_follow_numpy(device):
    # one shape, several dtypes: each its own template (dtypes are in the signature)
    for dt in (np.int32, np.complex64, np.int8, np.float32):
        h = (np.arange(12) % 5 - 2).astype(dt).reshape(3, 4)
        x = fl.asarray(h)
        for _ in range(3):  # built, recorded, copied
            pairs = [(x.mean(axis=1), h.mean(axis=1)),
                     ((x * 2.5).mean(axis=0), (h * 2.5).mean(axis=0))]
            if dt != np.complex64:
                pairs += [(x.argmin(axis=0), h.argmin(axis=0)), (x.var(axis=1), h.var(axis=1))]
            for got, want in pairs:
                assert got.dtype == want.dtype, (dt, got.dtype, want.dtype)
        if dt in (np.int32, np.complex64):  # (values: two dtypes, one kernel each)
            got = fl.compute(pairs[0][0], pairs[1][0])
            for g, (_, want) in zip(got, pairs):
                np.testing.assert_allclose(g.get(), want, rtol=1e-6)


def test_errors_are_raised_on_every_call(device):
    x = fl.asarray(np.ones((2, 3), np.float32))
    c = fl.asarray(np.ones((2, 3), np.complex64))
    for _ in range(2):
        with pytest.raises(IndexOutOfBoundsError, match="out of bounds"):
            (x * 2.0)[5]
        with pytest.raises(ShapeError, match="cannot reshape"):
            x.reshape(4)
        with pytest.raises(ValueError, match="empty sequence"):
            fl.asarray(np.ones((2, 0), np.float32)).argmax(axis=1)
        with pytest.raises(DTypeError, match="complex"):
            fl.floor(c)  # (complex var is numpy's now: tests/test_complex.py)
        with pytest.raises(ShapeError, match=r"broadcast together with shapes \(2,\) and \(2, 3\)"):
            x.mean(axis=1) + x


def test_a_template_keeps_no_buffer_alive(device):
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    for _ in range(3):  # built, recorded, copied
        x = fl.asarray(h)
        r = ((x * 2.0).var(axis=1), (x + 1.0)[:, None].T, x.argmax(axis=0))
        ref = weakref.ref(x._storage)
        del x, r
        fl.synchronize()  # (lets go of the recent lazy arrays)
        gc.collect()
        assert ref() is None


def test_a_buffer_made_on_the_way_is_not_recorded(device):
    x = fl.asarray(np.ones(4, np.float32))
    other = Leaf(Storage(None, 16, x.device), x.dtype, (4,))
    e = (x * 2.0)._node
    assert templates.record(e, e) is not None
    assert templates.record(e, type(e)("add", (e, other), (x.dtype,) * 3, (4,))) is None


def test_views_of_buffers(device):
    h = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = fl.asarray(h)
    lazy = fl.asarray(h[0]) * 1.0
    assert x.T.shape == (4, 3, 2) and not x.T.is_lazy
    np.testing.assert_array_equal(x.T.get(), h.T)
    np.testing.assert_array_equal(x[1].T.get(), h[1].T)
    np.testing.assert_array_equal(lazy.T.get(), h[0].T)
    np.testing.assert_array_equal(x.reshape(4, 6).T.reshape(-1).get(), h.reshape(4, 6).T.ravel())
    np.testing.assert_array_equal(x[:, None, ::2, 1].get(), h[:, None, ::2, 1])


def test_a_view_at_a_numpy_integer_offset(device):
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fl.asarray(h)
    for _ in range(3):  # built, recorded, copied (the leaf's offset a numpy integer)
        np.testing.assert_array_equal(fl.diagonal(x * 2.0, np.int64(1)).get(),
                                      np.diagonal(h * 2, 1))


def test_a_changed_setting_is_not_copied_from_an_old_template(device, monkeypatch):
    # ROWS_FIRST_MIN decides how a CPU reduction over (0, 2) is built; templates recorded
    # under the old value built the old structure after a change
    if device.type != "cpu":
        pytest.skip("the rows-first split is for CPU devices")
    from fuseloop.expr.nodes import Reduce

    h = np.arange(128.0).reshape(4, 8, 4)
    x = fl.asarray(h)

    def rows_first() -> list[bool]:
        out = []
        for _ in range(3):  # built, recorded, copied
            for r in (x.sum(axis=(0, 2)), x.mean(axis=(0, 2))):
                node = r._node if type(r._node) is Reduce else r._node.args[0]
                out.append(type(node.child) is Reduce)
        np.testing.assert_allclose(r.get(), h.mean(axis=(0, 2)))
        return out

    assert not any(rows_first())
    monkeypatch.setattr(reductions, "ROWS_FIRST_MIN", 1)
    assert all(rows_first())


def test_a_binary_search_is_copied(device, checked, monkeypatch):
    """``searchsorted``'s gathers (one a halving) are copied too: the third call of a
    structure builds nothing, takes the new buffers and gives numpy's positions (NaNs,
    ties, both sides)."""
    from fuseloop.ops import sorting

    rng = np.random.default_rng(5)
    hs = np.sort(rng.standard_normal(20000)).astype(np.float32)  # (15 halvings)
    hs[-3:] = np.nan
    hs[50:60] = hs[50]
    tables = [hs, np.sort(rng.standard_normal(20000)).astype(np.float32)]
    values = [rng.standard_normal(40).astype(np.float32) for _ in range(3)]
    values[2][:4] = [np.nan, hs[50], hs[0], np.inf]
    for side in ("left", "right"):
        fl.searchsorted(fl.asarray(hs), fl.asarray(values[0]), side=side)
        fl.searchsorted(fl.asarray(hs), fl.asarray(values[0]), side=side)  # (recorded)

    def built(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(sorting, "_search", built)
    for table in tables:
        for v in values:
            for side in ("left", "right"):
                got = fl.searchsorted(fl.asarray(table), fl.asarray(v), side=side)
                np.testing.assert_array_equal(got.get(), np.searchsorted(table, v, side=side))


def _lap(a):
    return a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4.0 * a[1:-1, 1:-1]


def _same_tree(a, b) -> None:
    """``a`` and ``b`` are the same expression: kinds, fields, buffers, scalars' values."""
    from fuseloop.expr.nodes import Apply, Scalar

    assert type(a) is type(b)
    assert (a.shape, a.dtype, a.storages) == (b.shape, b.dtype, b.storages)
    if type(a) is Leaf:
        assert (a.storage, a.strides, a.offset) == (b.storage, b.strides, b.offset)
    elif isinstance(a, Apply):
        assert (a.op, a.loop, a.sig, a.offs, a.fancy) == (b.op, b.loop, b.sig, b.offs, b.fancy)
        assert len(a.operands) == len(b.operands)
        assert len(a.args) == len(b.args)
        for x, y in zip(a.args, b.args):
            _same_tree(x, y)
    elif type(a) is Scalar:
        assert a.value == b.value
    else:
        assert a is b


def test_a_large_copy_makes_its_arguments_when_read(device_path, monkeypatch):
    """A view of a large lazy expression, copied from its template, makes only its root
    until its arguments are read: a cached statement of such views (a stencil of a lazy
    stencil) never reads them; once read they are the tree a fresh build makes."""
    made = []
    real = templates._later_args
    monkeypatch.setattr(templates, "_later_args", lambda *a: made.append(1) or real(*a))
    h = np.random.default_rng(7).random((12, 10), dtype=np.float32)
    want = (lambda lap: lap[:-2, 1:-1] * 2.0 - lap[2:, 1:-1] + lap[1:-1, 2:])(_lap(h))
    for k in range(4):  # built, recorded, copied (the first copy walked: a new plan)
        x = fl.asarray(h * (k + 1))
        lap = _lap(x)
        windows = (lap[:-2, 1:-1], lap[2:, 1:-1], lap[1:-1, 2:])
        made.clear()
        got = (windows[0] * 2.0 - windows[1] + windows[2]).get()
        np.testing.assert_allclose(got, want * (k + 1), rtol=1e-5, atol=1e-5)
    assert made == [] and all(w._node.later for w in windows)
    templates._templates.clear()
    for w, fresh in zip(windows, (lap[:-2, 1:-1], lap[2:, 1:-1], lap[1:-1, 2:])):
        _same_tree(w._node, fresh._node)
    assert len(made) == 3


def test_copies_differing_in_a_view_keep_their_own_results(device_path, checked):
    """Windows of one lazy expression that differ only in their offsets, or a view of a
    buffer beside them, each read their own elements (their copies share the template's
    steps, not its offsets), in any order and into a view written before they are read."""
    h, g = np.random.default_rng(8).random((2, 14, 12), dtype=np.float32)
    ref = _lap(h - g * 0.5)
    for k in range(4):
        x = fl.asarray(h)
        lap = _lap(x - fl.asarray(g) * 0.5)
        pairs = [(lap[:-2, 1:-1] - lap[2:, 1:-1], ref[:-2, 1:-1] - ref[2:, 1:-1]),
                 (lap[:-2, 1:-1] - lap[1:-1, 1:-1], ref[:-2, 1:-1] - ref[1:-1, 1:-1]),
                 (lap[1:-1, 2:] - x[2:-2, 3:-1], ref[1:-1, 2:] - h[2:-2, 3:-1]),
                 (lap[1:-1, 2:] - x[1:-3, 3:-1], ref[1:-1, 2:] - h[1:-3, 3:-1])]
        for e, want in pairs[::-1] if k % 2 else pairs:
            np.testing.assert_allclose(e.get(), want, rtol=1e-5, atol=1e-5)
        out = fl.asarray(h[2:-2, 2:-2].copy())
        win = lap[1:-1, :-2]  # (a copy whose buffers are then written: read first)
        x[:] = 0.0
        out[:, :] = win - out
        np.testing.assert_allclose(out.get(), ref[1:-1, :-2] - h[2:-2, 2:-2], rtol=1e-5,
                                   atol=1e-5)
