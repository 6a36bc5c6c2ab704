"""The structure cache of the host hot path (issue 2).

Evaluating an elementwise expression looks its *structure* up (operations, dtypes, shapes,
strides, which leaves are the same buffer, which scalars the same node) instead of
linearising it again; only the buffers and scalar values are collected.  These tests check
that a hit gives exactly what a fresh linearisation gives, that structures differing only in
sharing do not collide, and that the cached launch keeps the counters, the memory cache and
the aliasing rules intact.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache, evaluate, launching
from fuseloop.array import Array
from fuseloop.expr import nodes
from fuseloop.expr import program as prog
from fuseloop.expr.program import linearize, structure_entry
from fuseloop.recipes.registry import forget_chosen


def _entry(arr):
    hit = structure_entry([arr._node], arr.shape)
    assert hit is not None
    return hit


def test_same_structure_other_leaves_and_scalars_is_a_hit(device, fresh_stats):
    rng = np.random.default_rng(0)
    hosts = [rng.random(1000, dtype=np.float32) + 1 for _ in range(4)]
    x, y, u, v = (fl.asarray(h) for h in hosts)
    first = ((x * 2 + y) * x - y) / 3
    np.testing.assert_allclose(first.get(), ((hosts[0] * 2 + hosts[1]) * hosts[0] - hosts[1]) / 3,
                               rtol=1e-6)
    entry = _entry(((x * 2 + y) * x - y) / 3)[0]
    fl.reset_stats()
    for k in range(3):
        second = ((u * (k + 5) + v) * u - v) / (k + 7)  # other buffers, other scalar values
        e2, storages, scalars = _entry(second)
        assert e2 is entry  # one cache entry for the structure
        assert [s is t for s, t in zip(storages, (u._storage, v._storage))] == [True, True]
        assert [float(s) for s in scalars] == [k + 5, k + 7]
        np.testing.assert_allclose(
            second.get(), ((hosts[2] * (k + 5) + hosts[3]) * hosts[2] - hosts[3]) / (k + 7),
            rtol=1e-6)
    s = fresh_stats()
    assert s["kernels_lowered"] == 0 and s["kernels_compiled"] == 0
    assert s["memory_cache_misses"] == 0
    assert s["kernels_launched"] == 3 and s["memory_cache_hits"] == 3


def test_sharing_patterns_do_not_collide(device, checked):
    xh = np.arange(1, 9, dtype=np.float32)
    yh = xh[::-1].copy()
    x, y = fl.asarray(xh), fl.asarray(yh)
    xx, xy = x * x, x * y
    e_xx, e_xy = _entry(xx)[0], _entry(xy)[0]
    assert e_xx is not e_xy
    assert e_xx.program != e_xy.program  # x*x loads one buffer, x*y two
    np.testing.assert_array_equal(xx.get(), xh * xh)
    np.testing.assert_array_equal(xy.get(), xh * yh)
    np.testing.assert_array_equal((y * y).get(), yh * yh)  # x*x's entry, other buffer

    # a shared subexpression holds one scalar argument; two equal copies hold two
    t = x * 2
    shared = t * t
    copies = (x * 2) * (x * 3)
    e_shared, _, sc_shared = _entry(shared)
    e_copies, _, sc_copies = _entry(copies)
    assert e_shared is not e_copies
    assert len(sc_shared) == 1 and [float(s) for s in sc_copies] == [2, 3]
    np.testing.assert_array_equal(shared.get(), (xh * 2) ** 2)
    np.testing.assert_array_equal(copies.get(), (xh * 2) * (xh * 3))

    # sharing operation nodes does not change the program: equal copies built
    # around the same scalar node share the entry (the check compares programs)
    two = nodes.Scalar(np.float32(2))
    loop = (x.dtype,) * 3

    def times_two():
        return nodes.Apply("multiply", (x._node, two), loop, x.shape)

    one = times_two()
    by_node = nodes.Apply("add", (one, one), loop, x.shape)
    by_copy = nodes.Apply("add", (times_two(), times_two()), loop, x.shape)
    assert structure_entry([by_node], x.shape)[0] is structure_entry([by_copy], x.shape)[0]
    for node in (by_node, by_copy):
        leaf = evaluate.materialise(node, x.device)
        np.testing.assert_array_equal(Array._concrete(leaf.storage, x.dtype, x.shape).get(),
                                      xh * 2 + xh * 2)

    # the same buffer seen through two views is one input with two loads
    a = fl.asarray(np.arange(10, dtype=np.float32))
    d = a[1:] - a[:-1]
    _, storages, _ = _entry(d)
    assert len(storages) == 1
    np.testing.assert_array_equal(d.get(), np.ones(9, np.float32))


def test_hits_equal_fresh_linearisation(device, checked):
    rng = np.random.default_rng(3)
    xh = rng.random((6, 8), dtype=np.float32)
    yh = rng.random(8, dtype=np.float32)
    ih = rng.integers(-5, 5, (6, 8)).astype(np.int64)
    x, y, i = fl.asarray(xh), fl.asarray(yh), fl.asarray(ih)
    cube = fl.function("float cube(float v)", "return v * v * v;")
    cases = [
        (lambda: x * y + 1.5, lambda: xh * yh + np.float32(1.5)),  # broadcast
        (lambda: x[:, ::2] * fl.constant(2.0) - x[:, 1::2],
         lambda: xh[:, ::2] * 2 - xh[:, 1::2]),  # strided views, a literal
        (lambda: x.T[1:4] + 1, lambda: xh.T[1:4] + 1),  # transposed view with an offset
        (lambda: fl.where(x > 0.5, x, -y), lambda: np.where(xh > 0.5, xh, -yh)),
        (lambda: (i * 3) // 2 + (i > 0), lambda: (ih * 3) // 2 + (ih > 0)),
        (lambda: cube(x) + fl.sin(y), lambda: xh ** 3 + np.sin(yh)),
        (lambda: x + fl.arange(8, dtype=np.float32), lambda: xh + np.arange(8, dtype=np.float32)),
        (lambda: (x > 0.5) & True, lambda: (xh > 0.5) & True),  # a bool scalar argument
        (lambda: x + fl.constant(-0.0) * 0 + 0.0 * x, lambda: xh + np.float32(-0.0) * 0 + 0.0 * xh),
    ]
    for _ in range(2):  # the second round hits every entry (and checks it)
        for build, expect in cases:
            np.testing.assert_allclose(build().get(), expect(), rtol=1e-5, atol=1e-6)
    a, b = fl.compute(x * 2 + y, x - y)  # two outputs through the cache too
    np.testing.assert_allclose(a.get(), xh * 2 + yh, rtol=1e-6)
    np.testing.assert_allclose(b.get(), xh - yh, rtol=1e-6)
    z = fl.asarray(xh.copy())
    z += y  # a plain target
    np.testing.assert_allclose(z.get(), xh + yh, rtol=1e-6)


def test_linearize_returns_the_cached_program_with_fresh_bindings(device):
    x = fl.asarray(np.ones(5, np.float32))
    y = fl.asarray(np.ones(5, np.float32))
    p1, b1 = linearize([(x * 2 + y)._node], (5,))
    p2, b2 = linearize([(y * 7 + x)._node], (5,))
    p3, b3 = linearize([(y * 7 + x)._node], (5,), cache=False)
    assert p1 is p2 and p2 == p3
    assert b2.storages == b3.storages and [float(s) for s in b2.scalars] == [7.0]
    assert b2.params == b3.params and b2.params is not b1.params


def test_negative_zero_is_not_positive_zero(device):
    x = fl.asarray(np.ones(4, np.float32))
    # scalar arguments: values are data (and the weak-scalar conversion memo skips zeros)
    assert np.signbit((x * -0.0).get()).all() and not np.signbit((x * 0.0).get()).any()
    assert np.signbit((x * -0.0).get()).all()
    # literals: the structure key tells them apart (it holds the value's bytes)
    pos = prog.structure_key([(x * fl.constant(0.0, np.float32))._node], (4,))[0]
    neg = prog.structure_key([(x * fl.constant(-0.0, np.float32))._node], (4,))[0]
    assert pos != neg


def test_memory_cache_clear_and_new_recipe_are_seen(device, fresh_stats, restore_recipes,
                                                    monkeypatch):
    x = fl.asarray(np.arange(6, dtype=np.float32))
    f = lambda: (fl.tanh(x) * 3 + 0.25).get()  # noqa: E731
    expect = np.tanh(np.arange(6, dtype=np.float32)) * 3 + 0.25
    np.testing.assert_allclose(f(), expect, rtol=1e-6, atol=1e-6)
    fl.clear_memory_cache()
    fl.reset_stats()
    np.testing.assert_allclose(f(), expect, rtol=1e-6, atol=1e-6)
    s = fresh_stats()
    assert s["memory_cache_misses"] == 1 and s["kernels_launched"] == 1  # not the stale kernel
    np.testing.assert_allclose(f(), expect, rtol=1e-6, atol=1e-6)
    assert fresh_stats()["memory_cache_hits"] == 1

    # a recipe registered later applies to structures launched before
    real = evaluate.recipe_for
    seen = []

    def other_recipe(dev, kind="elementwise"):
        recipe = real(dev, kind).with_params(version="structure-cache-test")
        seen.append(recipe)
        return recipe

    monkeypatch.setattr(evaluate, "recipe_for", other_recipe)
    monkeypatch.setattr(launching, "recipe_for", other_recipe)
    # what a registration does: recipe_for's answers may have changed (kept plans are
    # confirmed again; restore_recipes does it again once recipe_for is restored)
    forget_chosen()
    fl.reset_stats()
    np.testing.assert_allclose(f(), expect, rtol=1e-6, atol=1e-6)
    assert seen and fresh_stats()["memory_cache_misses"] == 1
    assert any(k[3][1] == "structure-cache-test" for k in list(cache._memory))


def test_cached_launch_checks_the_device(device):
    x = fl.asarray(np.ones(4, np.float32))
    (x + 1).get()
    entry, storages, scalars = _entry(x + 1)
    other = nodes.Storage(storages[0].buffer, storages[0].nbytes,
                          SimpleNamespace(name="another device"))
    out = evaluate.allocate(16, device)
    with pytest.raises(fl.errors.DeviceError, match="move arrays"):
        launching.launch_cached(entry, [other], scalars, out, (4,), device)


def test_deferred_reader_registration_keeps_writes_safe(device):
    xh = np.arange(16, dtype=np.float32)
    x = fl.asarray(xh)
    early = x * 2 + 1  # lazy reader, not yet entered in x's readers
    for _ in range(2 * nodes.RECENT_LAZY_MAX):  # temporaries: forces registrations
        _ = x + 1
    late = x - 3  # created after the bulk registration
    assert early.is_lazy and late.is_lazy
    x[...] = 100  # both must be evaluated before the write
    np.testing.assert_array_equal(early.get(), xh * 2 + 1)
    np.testing.assert_array_equal(late.get(), xh - 3)
    np.testing.assert_array_equal(x.get(), np.full(16, 100, np.float32))
    x += 1
    np.testing.assert_array_equal(x.get(), np.full(16, 101, np.float32))
    # an evaluated array is no longer a reader
    y = fl.asarray(xh)
    kept = (y * 5).eval()
    y[...] = 0
    np.testing.assert_array_equal(kept.get(), xh * 5)
    assert all(r is not kept for r in y._storage.live_readers())


def test_structure_cache_is_bounded(device, monkeypatch):
    monkeypatch.setattr(prog, "STRUCTURES_MAX", 4)
    prog.clear_structure_cache()
    x = fl.asarray(np.ones(3, np.float32))
    for k in range(10):
        (x + fl.constant(float(k))).get()  # a new literal value: a new structure each time
    assert len(prog.structures) <= 4


def test_large_and_reducing_expressions_bypass_the_cache(device, monkeypatch):
    monkeypatch.setattr(prog, "MAX_TOKENS", 512)  # (the real limit: a kernel too large here)
    x = fl.asarray(np.ones(8, np.float32))
    deep = x
    for _ in range(prog.MAX_TOKENS):
        deep = deep + 1
    assert structure_entry([deep._node], deep.shape) is None
    np.testing.assert_array_equal(deep.get(), np.full(8, 1 + prog.MAX_TOKENS, np.float32))
    assert structure_entry([x.sum()._node], ()) is None


def test_the_kernel_cache_sees_one_program_object_per_structure(device):
    # (from empty caches: the signature table is cleared when full, and an expression
    # built after that clear has new signatures, so a new entry: if that happened
    # between the evaluation and the look-up below, other tests' signatures did it)
    fl.clear_caches()
    x = fl.asarray(np.ones(7, np.float32))
    (x * 3 - 1).get()
    entry = _entry(x * 3 - 1)[0]
    assert any(k[0] is entry.program for k in list(cache._memory))


def test_nan_literal_is_a_memory_cache_hit(device, fresh_stats):
    # a fresh program holds a new NaN object, never == to the stored key's; the cached
    # structure reuses one program object, so the memory cache finds the kernel again
    x = fl.asarray(np.zeros(3, np.float32))
    (x + fl.constant(float("nan"), np.float32)).get()
    fl.reset_stats()
    for _ in range(3):
        assert np.isnan((x + fl.constant(float("nan"), np.float32)).get()).all()
    s = fresh_stats()
    assert s["kernels_compiled"] == 0 and s["memory_cache_misses"] == 0
    assert s["memory_cache_hits"] == 3


def test_cached_launch_sets_changed_arguments_only_and_correctly(device):
    """The cached launch keeps its kernel's unchanged arguments: every change must reach it."""
    rng = np.random.default_rng(3)
    hs = [rng.random(257).astype(np.float32) for _ in range(4)]
    arrs = [fl.asarray(h) for h in hs]

    def check(a, b, ha, hb, s):
        np.testing.assert_allclose((a * s + b).get(), ha * np.float32(s) + hb, rtol=1e-6)

    check(arrs[0], arrs[1], hs[0], hs[1], 2.0)
    check(arrs[0], arrs[1], hs[0], hs[1], 2.0)  # nothing but the output changes
    check(arrs[0], arrs[1], hs[0], hs[1], 3.5)  # another scalar
    check(arrs[2], arrs[1], hs[2], hs[1], 3.5)  # another first input
    check(arrs[2], arrs[3], hs[2], hs[3], np.float32(-0.0))  # -0.0: not the cached 0.0
    check(arrs[2], arrs[3], hs[2], hs[3], 0.0)
    # an input buffer that is gone and a new one (which may reuse its id and pool memory)
    for k in range(5):
        h = np.full(257, k, np.float32)
        check(fl.asarray(h), arrs[3], h, hs[3], 2.0)
    # bool scalars are passed as uchar
    bh = hs[0] > 0.5
    b = fl.asarray(bh)
    for v in (True, False, True):
        np.testing.assert_array_equal((b & v).get(), bh & v)
        np.testing.assert_array_equal((b | v).get(), bh | v)
    # the same program at another length (another structure, its own constant arguments)
    for n in (100, 257, 100):
        np.testing.assert_allclose((arrs[0][:n] * 2.0 + arrs[1][:n]).get(),
                                   hs[0][:n] * 2 + hs[1][:n], rtol=1e-6)


def test_cached_launch_keeps_no_input_alive(device):
    import gc
    import weakref

    y = fl.asarray(np.ones(64, np.float32))
    for _ in range(2):
        x = fl.asarray(np.arange(64, dtype=np.float32))
        (x * 2 + y).eval()
    gone = weakref.ref(x._storage)
    # a deferred small launch holds its buffers until it is enqueued; after that
    # neither the launch plan nor the kernel object may keep an input alive
    fl.synchronize()
    del x
    gc.collect()
    assert gone() is None


def test_cached_launch_in_threads(device):
    """Each thread launches through its own kernel object, with its own arguments."""
    import threading

    hs = [np.full(300, k, np.float32) for k in range(4)]
    errors = []

    def work(k):
        try:
            x = fl.asarray(hs[k])
            for j in range(50):
                got = (x * float(j) + 1.0).get()
                if not np.array_equal(got, hs[k] * np.float32(j) + 1):
                    errors.append((k, j))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_signature_lookup_walks_nothing(device, fresh_stats, monkeypatch):
    """A cached single-root expression is found by its signature: no structure walk."""
    rng = np.random.default_rng(5)
    xh, yh = (rng.random(1000, dtype=np.float32) + 1 for _ in range(2))
    x, y = fl.asarray(xh), fl.asarray(yh)
    (((x * 2 + y) * x - y) / 3).get()  # the first evaluation linearises

    def no_walk(*args, **kwargs):
        raise AssertionError("the structure was walked")

    monkeypatch.setattr(prog, "_walk", no_walk)
    fl.reset_stats()
    for k in range(3):
        e = ((x * (k + 2) + y) * x - y) / (k + 3)
        # x, 2, y, 3 in walk order (x and y read again by a later step: once, in the
        # signature; before: x, 2, y, x, y, 3)
        assert e._node.sig and len(e._node.operands) == 4
        np.testing.assert_allclose(e.get(), ((xh * (k + 2) + yh) * xh - yh) / (k + 3),
                                   rtol=1e-6)
    s = fresh_stats()
    assert s["kernels_lowered"] == 0 and s["memory_cache_misses"] == 0
    assert s["kernels_launched"] == 3


def test_operators_on_unsigned_operands_are_remembered(device, monkeypatch):
    """An operand that is a reduction is remembered (by its signature since reductions
    have one; a node without one, a concatenation, by dtype and shape): the second
    ``x - x.mean()`` works out no loop or broadcast again."""
    import fuseloop.array as array_module

    # (the table is per process: a run on another device before this one filled it)
    array_module._sig_loops.clear()
    xh = np.random.default_rng(6).random(500, dtype=np.float32)
    x = fl.asarray(xh)
    xd = fl.asarray(xh.astype(np.float64))
    x - x.mean(), x.mean() - x, fl.sum(x) / 7.0  # (remembered here)
    calls = []
    real = array_module._signed_loop
    monkeypatch.setattr(array_module, "_signed_loop",
                        lambda *a: calls.append(a[0]) or real(*a))
    c, r, q = x - x.mean(), x.mean() - x, fl.sum(x) / 7.0
    assert calls == []
    assert c.dtype == r.dtype == q.dtype == np.float32 and c.shape == (500,) and q.shape == ()
    np.testing.assert_allclose(c.get(), xh - xh.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r.get(), xh.mean() - xh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(q.get(), xh.sum() / 7, rtol=1e-5)
    # another dtype or shape of unsigned operand is another entry, with its own loop
    d = xd - xd.mean()
    e = x[:100] - x[:100].mean()
    assert calls and d.dtype == np.float64 and e.shape == (100,)
    np.testing.assert_allclose(d.get(), xh.astype(np.float64) - xh.astype(np.float64).mean(),
                               rtol=1e-12)
    np.testing.assert_allclose(e.get(), xh[:100] - xh[:100].mean(), rtol=1e-5, atol=1e-6)


def test_signatures_tell_structures_apart(device):
    xf = fl.asarray(np.arange(6, dtype=np.float32))
    xd = fl.asarray(np.arange(6, dtype=np.float64))
    xi = fl.asarray(np.arange(6, dtype=np.int32))
    sig = lambda a: a._node.sig  # noqa: E731
    assert sig(xf * 2) == sig(xf * 3)  # scalar values are data
    assert len({sig(xf * 2), sig(xd * 2), sig(xi * 2), sig(xf * 2.5 + 0 * xf)}) == 4
    # offsets beside the signature, which says which of them are equal
    assert sig(xf[1:] * 2) == sig(xf[:-1] * 2)
    assert (xf[1:] * 2)._node.offs == (1,) and (xf[:-1] * 2)._node.offs == (0,)
    assert sig(xf[1:] * xf[1:]) != sig(xf[1:] * xf[:-1])
    assert sig(xf[::2] * 2) != sig(xf[:3] * 2)  # strides
    assert sig(xf * xf) == sig(xf * xf[::1])  # the same view; which buffers repeat is not in it
    assert sig(xf * fl.constant(0.0)) != sig(xf * fl.constant(-0.0))
    assert sig(fl.sin(xf)) != sig(fl.cos(xf))
    # reductions and gathers have signatures too (their run plans are found by them),
    # apart from each other and from elementwise work (tests/test_signatures_reduce.py)
    gathered = xf[fl.asarray(np.array([0, 2]))] * 2
    assert len({sig(xf.sum() * 2), sig(xf.max() * 2), sig(xf * 2), sig(gathered), 0}) == 5


def test_signatures_survive_clearing_the_table(device, checked, monkeypatch):
    monkeypatch.setattr(nodes, "SIG_TABLE_MAX", 3)
    xh = np.arange(1, 9, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(xh[::-1].copy())
    early = (x * 2 + y) * y  # signed before the table is cleared several times
    seen = {early._node.sig}
    for k in range(12):  # a new literal value: a new structure (and signature) each time
        other = x * fl.constant(float(k)) + y
        assert other._node.sig not in seen  # signatures are never reused
        seen.add(other._node.sig)
        np.testing.assert_array_equal(other.get(), xh * k + xh[::-1])
    late = (x * 2 + y) * y
    np.testing.assert_array_equal(early.get(), (xh * 2 + xh[::-1]) * xh[::-1])
    np.testing.assert_array_equal(late.get(), (xh * 2 + xh[::-1]) * xh[::-1])


def test_many_operands_fall_back_to_the_walk(device):
    xh = np.arange(8, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(xh + 1)
    e, expect = x, xh.copy()
    for k in range(nodes.MAX_OPERANDS // 2 + 1):
        e = e + y * k
        expect = expect + (xh + 1) * np.float32(k)
    assert e._node.sig == 0 and e._node.operands is None
    assert structure_entry([e._node], e.shape) is not None  # cached through the walk
    np.testing.assert_allclose(e.get(), expect, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_unary_operators_build_the_nodes_apply_builds(device, dtype):
    # the lean unary path builds its node in place: it must be the node Apply would build
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("no float64 on this device")
    from fuseloop.array import _lean_unary
    from fuseloop.dtypes import resolve_loop
    from fuseloop.expr.nodes import Apply

    h = np.arange(1, 7).astype(dtype)
    x = fl.asarray(h)
    for base in (x, x[::2], x * 2, x.sum()):  # a leaf, a view, an operation, a reduction
        for op in ("negative", "absolute", "sqrt", "exp", "invert", "isnan", "logical_not"):
            try:
                loop = resolve_loop(op, (base.dtype,))
            except fl.errors.DTypeError:  # numpy has no loop: neither path builds a node
                with pytest.raises(fl.errors.DTypeError):
                    _lean_unary(op)(base)
                continue
            lean = _lean_unary(op)(base)._node
            ref = Apply(op, (base._node,), loop, base.shape)
            for field in ("op", "args", "loop", "loop_key", "dtype", "shape", "sig",
                          "operands", "storages", "fancy"):
                assert getattr(lean, field) == getattr(ref, field), (op, field)
    if dtype == np.bool_:
        np.testing.assert_array_equal(fl.logical_not(~x).get(), np.logical_not(~h))
    else:
        np.testing.assert_allclose(fl.sqrt(fl.abs(-x)).get(), np.sqrt(np.abs(-h)), rtol=1e-6)
