"""The one-frame evaluation of cached flat expressions (``evaluate.run_flat``, issue 2).

``Array.eval`` first tries :func:`fuseloop.evaluate.run_flat`, which does what ``run``,
``allocate``, ``structure_entry`` and ``launch_cached`` do for a cached one-dimensional
elementwise expression, in one frame.  These tests check that it is taken where it applies,
gives numpy's results and the same counters, and leaves everything else to ``run``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fuseloop as fl
import fuseloop.array as array_module
from fuseloop import evaluate, launching
from fuseloop.expr import nodes
from fuseloop.expr import program as prog


@pytest.fixture
def flat_calls(monkeypatch):
    """Records what each ``run_flat`` call returned: True for a storage, False for None."""
    taken: list[bool] = []
    real = evaluate.run_flat

    def spy(node, shape, device, *rest):
        out = real(node, shape, device, *rest)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(array_module, "run_flat", spy)
    return taken


def test_cached_expressions_take_the_flat_path(device, flat_calls, fresh_stats):
    rng = np.random.default_rng(11)
    xh, yh = (rng.random(257, dtype=np.float32) + 1 for _ in range(2))
    ih = rng.integers(-50, 50, 257).astype(np.int32)
    x, y, i = fl.asarray(xh), fl.asarray(yh), fl.asarray(ih)
    t = x * 2
    cases = [
        (lambda: x * x, xh * xh),  # one buffer loaded once
        (lambda: x * y, xh * yh),  # x*x's signature, another sharing pattern
        (lambda: y * y, yh * yh),  # x*x's entry with another buffer
        (lambda: t * t + 1, (xh * 2) ** 2 + 1),  # a shared subexpression
        (lambda: (x * 2) * (x * 3), (xh * 2) * (xh * 3)),  # equal structure, two scalars
        (lambda: 2 * x - y / 3, 2 * xh - yh / 3),  # scalars on either side
        (lambda: (i * 3) // 7 - i % 5, (ih * 3) // 7 - ih % 5),
        (lambda: (x > 1.5) & (y < 1.5), (xh > 1.5) & (yh < 1.5)),
        (lambda: fl.asarray(np.float32(3)) * 2 + 1, np.float32(7)),  # zero dimensions
    ]
    for build, expect in cases:
        first = build().eval()  # linearises, compiles, plans the launch
        # (float results may differ by an ulp: the kernel may contract a*b + c)
        np.testing.assert_allclose(first.get(), expect, rtol=1e-6)
        del flat_calls[:]
        fl.reset_stats()
        for _ in range(3):
            np.testing.assert_allclose(build().eval().get(), expect, rtol=1e-6)
        assert flat_calls == [True] * 3
        s = fresh_stats()
        assert s["kernels_launched"] == 3 and s["memory_cache_hits"] == 3
        assert s["memory_cache_misses"] == 0 and s["kernels_lowered"] == 0


def test_other_evaluations_go_to_run(device, flat_calls, monkeypatch):
    rng = np.random.default_rng(12)
    mh = rng.random((5, 7), dtype=np.float32)
    bh = rng.random(2 * launching.DEFER_MAX_ELEMENTS, dtype=np.float32)
    m, b = fl.asarray(mh), fl.asarray(bh)
    for _ in range(2):
        np.testing.assert_allclose((m * 2 + 1).get(), mh * 2 + 1, rtol=1e-6)  # 2-D
        np.testing.assert_allclose((m.sum(axis=1) + 1).get(), mh.sum(axis=1) + 1, rtol=1e-5)
    assert not any(flat_calls)
    # a large result (not deferred): once cached, the same one-frame path launches it at
    # once (Array.eval asks run_flat for it directly, not again after a first refusal)
    for _ in range(3):
        np.testing.assert_allclose((b * 2 + 1).get(), bh * 2 + 1, rtol=1e-6)
    assert flat_calls[-2:] == [True, True]
    flat_calls.clear()

    x = fl.asarray(np.arange(8, dtype=np.float32))
    (x * 4 - 1).get()
    (x * 4 - 1).get()
    assert flat_calls[-1]
    # while kernel sources are captured (fl.show_code), nothing may run
    e = x * 4 - 1
    with evaluate.capturing_sources():
        assert evaluate.run_flat(e._node, e.shape, e.device) is None
    assert e.is_lazy and evaluate.run_flat(e._node, e.shape, e.device) is not None
    # checking mode compares every hit with a fresh linearisation, in run
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", True)
    np.testing.assert_array_equal((x * 4 - 1).get(), np.arange(8, dtype=np.float32) * 4 - 1)
    assert flat_calls[-1] is False


def test_a_new_recipe_object_for_the_same_kernel_keeps_the_flat_path(device, flat_calls):
    """Another Device object of the same index (a test's marked copy) makes the recipe
    registry hand out a new, equal recipe object; the kernel, and the launch plan kept
    on it, are shared, so the plan must follow the new object or the flat path is lost."""
    from fuseloop.recipes import recipe_for

    x = fl.asarray(np.arange(8, dtype=np.float32))
    for _ in range(2):
        np.testing.assert_array_equal((x * 5 - 2).get(), np.arange(8) * 5 - 2)
    assert flat_calls[-1]
    before = recipe_for(device, "elementwise")
    recipe_for(dataclasses.replace(device), "elementwise")
    if recipe_for(device, "elementwise") is before:
        # (the case arises where a device variant is made per Device object: PoCL's
        # vector_math; a recipe without variants stays one object, as on NVIDIA GPUs)
        pytest.skip(f"the registry keeps one elementwise recipe object on {device.name}")
    for _ in range(2):
        np.testing.assert_array_equal((x * 5 - 2).get(), np.arange(8) * 5 - 2)
    assert flat_calls[-1]


def test_a_cleared_memory_cache_is_seen(device, flat_calls, fresh_stats):
    x = fl.asarray(np.linspace(0, 1, 100, dtype=np.float32))
    (fl.cos(x) * 3).get()
    fl.clear_memory_cache()
    fl.reset_stats()
    np.testing.assert_allclose((fl.cos(x) * 3).get(), np.cos(np.linspace(0, 1, 100)) * 3,
                               rtol=1e-5)
    assert flat_calls[-1] is False and fresh_stats()["memory_cache_misses"] == 1
    (fl.cos(x) * 3).get()
    assert flat_calls[-1] is True


def test_flat_path_checks_the_device(device):
    x = fl.asarray(np.ones(4, np.float32))
    (x + 1).get()
    e = x + 1
    other = nodes.Storage(x._storage.buffer, x._storage.nbytes,
                          type("OtherDevice", (), {"name": "another device"})())
    e._node.operands = (other, *e._node.operands[1:])  # same structure, a foreign buffer
    with pytest.raises(fl.errors.DeviceError, match="move arrays"):
        e.eval()
    assert e.is_lazy


def test_flat_entries_follow_the_operands_repeats(device, flat_calls):
    rng = np.random.default_rng(13)
    xh, yh = (rng.random(13, dtype=np.float32) for _ in range(2))
    x, y = fl.asarray(xh), fl.asarray(yh)
    prog.clear_structure_cache()
    np.testing.assert_allclose(fl.hypot(x, x).get(), np.hypot(xh, xh), rtol=1e-6)
    del flat_calls[:]
    # x*x's program reads one buffer: x*y needs its own (a signature of its own too: a
    # buffer that both arguments read is in the signature, see expr.nodes)
    np.testing.assert_allclose(fl.hypot(x, y).get(), np.hypot(xh, yh), rtol=1e-6)
    assert flat_calls == [False]
    # one buffer given twice: x*x's program
    np.testing.assert_allclose(fl.hypot(y, y).get(), np.hypot(yh, yh), rtol=1e-6)
    assert flat_calls == [False, True]
    np.testing.assert_allclose(fl.hypot(x, y).get(), np.hypot(xh, yh), rtol=1e-6)
    assert flat_calls == [False, True, True]


def test_flat_launches_are_counted_exactly_under_threads(device, flat_calls):
    """run_flat tallies without the counters' lock (fuseloop.stats.cached_launches):
    launches from several threads, resets and reads in between all add up."""
    import sys
    import threading

    x = fl.asarray(np.linspace(0, 1, 100, dtype=np.float32))
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def work() -> None:
        barrier.wait()
        try:
            for _ in range(300):
                (x * 3 + 1).eval()
        except BaseException as e:  # (a thread's error is otherwise only a warning)
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads interleave after few bytecodes
    try:
        for _ in range(2):  # every thread's first launch of the structure goes to run
            threads = [threading.Thread(target=work) for _ in range(4)]
            fl.reset_stats()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # (Array.eval once read the last recent lazy array after another thread
            # had emptied the list: IndexError, a thread's launches lost)
            assert not errors, errors
            s = fl.stats()
            assert s == fl.stats()  # reading does not count
            assert s["kernels_launched"] == 1200, (s, flat_calls.count(True),
                                                   flat_calls.count(False))
            assert s["memory_cache_hits"] + s["memory_cache_misses"] >= 1200
    finally:
        sys.setswitchinterval(old)
    assert flat_calls.count(True) >= 2400 - 16
    fl.reset_stats()
    assert fl.stats()["kernels_launched"] == 0 and fl.stats()["memory_cache_hits"] == 0
    (x * 3 + 1).eval()
    assert fl.stats()["kernels_launched"] == 1 and fl.stats()["memory_cache_hits"] == 1
    fl.synchronize()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64", "uint8",
                                   "uint64", "bool"])
def test_scalars_that_change_every_call_are_each_launched_with_their_value(device, dtype,
                                                                          flat_calls):
    # the flat launcher sets a scalar argument from its bytes (opencl.SET_SCALAR_ARG)
    # only when it changed; results read after all launches see each call's own value
    if dtype == "float64" and not device.has_fp64:
        pytest.skip("no float64 on this device")
    dt = np.dtype(dtype)
    rng = np.random.default_rng(12)
    xh = (rng.random(300) < 0.5) if dt.kind == "b" else (rng.random(300) * 50).astype(dt)
    x = fl.asarray(xh)
    if dt.kind == "b":
        values = [True, False, True, True, False]
        build, expect = (lambda v: x ^ v), (lambda v: xh ^ v)
    else:
        values = [1, 2, 3, 7, 7, 5, 1] if dt.kind in "iu" else [0.5, 1.25, -3.0, 1.25, 2.0]
        # (no a*b + c, which the kernel may contract into one rounding)
        build, expect = (lambda v: x * v / 4), (lambda v: xh * v / 4)
    build(values[0]).eval()  # compiles and plans
    del flat_calls[:]
    results = [build(v).eval() for v in values]
    assert flat_calls == [True] * len(values)
    for v, got in zip(values, results):
        np.testing.assert_array_equal(got.get(), expect(v), err_msg=f"scalar {v}")


def test_the_pinned_pyopencl_sets_scalars_from_their_bytes():
    # (its public set_arg took 10-15 us per numpy scalar on PoCL: see backends/opencl.py)
    from fuseloop.backends import opencl

    assert opencl.SET_SCALAR_ARG == "_set_arg_buf"


@pytest.fixture
def into_calls(monkeypatch):
    """Records what each ``run_flat`` call with a target buffer returned (True: a storage)."""
    taken: list[bool] = []
    real = evaluate.run_flat

    def spy(node, shape, device, into=None):
        out = real(node, shape, device, into)
        if into is not None:
            taken.append(out is not None)
        return out

    monkeypatch.setattr(evaluate, "run_flat", spy)
    return taken


@pytest.mark.parametrize("n", [1000, 100_000])  # deferred, and enqueued at once
def test_assignment_shares_the_evaluation_path(device, into_calls, n):
    rng = np.random.default_rng(12)
    xh, yh = (rng.random(n, dtype=np.float32) for _ in range(2))
    x, y = fl.asarray(xh), fl.asarray(yh)
    out = fl.empty_like(x)
    (x * y + 1).eval()  # compiles the structure
    fl.synchronize()
    before = fl.stats()
    for k in range(3):
        out[...] = x * y + k
        np.testing.assert_allclose(out.get(), xh * yh + k, rtol=1e-6)
    after = fl.stats()
    assert after["kernels_launched"] - before["kernels_launched"] == 3
    assert after["kernels_compiled"] == before["kernels_compiled"]  # eval's kernel
    assert into_calls == ([True] * 3 if n <= launching.DEFER_MAX_ELEMENTS else [False] * 3)


def test_assignment_keeps_readers_and_aliases_right(device, into_calls):
    rng = np.random.default_rng(13)
    xh, oh = rng.random(500, dtype=np.float32), rng.random(500, dtype=np.float32)
    x, out = fl.asarray(xh), fl.asarray(oh)
    (x + 1).eval()
    r = out * 2  # lazy, reads out's old values
    out[...] = x + 1
    np.testing.assert_allclose(r.get(), oh * 2, rtol=1e-6)
    np.testing.assert_allclose(out.get(), xh + 1, rtol=1e-6)
    assert into_calls == [True]
    out[...] = out * 3 + x  # reads the target: not this path
    np.testing.assert_allclose(out.get(), (xh + 1) * 3 + xh, rtol=1e-6)
    out[...] = out[::-1] + 0  # reads it at other positions: through a temporary
    np.testing.assert_allclose(out.get(), ((xh + 1) * 3 + xh)[::-1], rtol=1e-6)
    assert into_calls == [True]


def test_assignment_casts_and_broadcasts_as_numpy(device, into_calls):
    xh = np.linspace(-3, 3, 301, dtype=np.float32)
    x = fl.asarray(xh)
    ints = fl.zeros(301, np.int32)
    ints[...] = x * 2.5  # numpy's setitem casts unsafely
    want = np.zeros(301, np.int32)
    want[...] = xh * np.float32(2.5)
    np.testing.assert_array_equal(ints.get(), want)
    ints[...] = x * 2.5  # now cached: written in one frame
    np.testing.assert_array_equal(ints.get(), want)
    assert into_calls == [False, True]
    row = fl.asarray(np.arange(4, dtype=np.float32))
    m = fl.zeros((3, 4), np.float32)
    m[...] = row * 2  # broadcast into two dimensions: the general path
    np.testing.assert_array_equal(m.get(), np.tile(np.arange(4, dtype=np.float32) * 2, (3, 1)))
    empty = fl.zeros(0, np.float32)
    empty[...] = fl.zeros(0, np.float32) + 1
    assert empty.get().shape == (0,)
