"""Small evaluations computed by numpy in a CPU device's host memory (fuseloop.host_path).

The test session turns the host path off (tests/conftest.py) so that the other tests
exercise kernels; here it is on, and every result is compared with numpy's and with
the kernels' (the same expression evaluated with the host path off).
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_path


def _both(make, monkeypatch):
    """``make()``'s result (host numpy arrays) with the host path on, then off."""
    fl.reset_stats()
    on = make()
    on_stats = fl.stats()
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    off = make()
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 1 << 14)
    return on, off, on_stats


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64", "float32", "float64", "bool"])
def test_elementwise_matches_kernels_and_numpy(host, monkeypatch, dtype):
    rng = np.random.default_rng(1)
    a = (rng.random(50) * 20 - (0 if dtype in ("uint8", "bool") else 10)).astype(dtype)
    b = (rng.random(50) * 7 + 1).astype(dtype)

    def exprs(m, x, y):
        out = [x + y, x * y, m.maximum(x, y), x == y, x < y, m.where(x > y, x, y),
               (x + 1.5) * 2, m.abs(x), x.astype(np.float32)]
        if dtype != "bool":
            out += [x - y, x // y, x % y, -x, x / y]
        if dtype in ("int32", "int64", "uint8"):
            out += [x & y, x ^ y, x << 3, x >> 2]
        if dtype in ("float32", "float64"):
            out += [m.sin(x), m.sqrt(m.abs(x)), x ** y, m.exp(x / 10)]
        return out

    def make():
        x, y = fl.asarray(a), fl.asarray(b)
        return [e.get() for e in exprs(fl, x, y)]

    on, off, stats = _both(make, monkeypatch)
    want = exprs(np, a, b)
    assert stats["kernels_launched"] == 0 and stats["host_evaluations"] == len(want)
    for got, kern, ref in zip(on, off, want):
        assert got.dtype == ref.dtype == kern.dtype
        assert got.shape == ref.shape
        # identical to numpy; the kernels' transcendental functions may round differently
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_allclose(got, kern, rtol=1e-6)


def test_reductions_views_and_gathers(host, monkeypatch):
    rng = np.random.default_rng(2)
    a = rng.random((6, 7))
    idx = np.array([0, -1, 3, 2])

    def exprs(m, x, i):
        return [x.sum(axis=0), x[::-1, 1:5].max(axis=1), x.T[2:, ::2] * 3, m.argmax(x, axis=1),
                x.prod(axis=1, keepdims=True), m.take(x, i, axis=1) + 1, x[:, 2:].min(),
                m.concatenate([x[:2], x[4:] * 2]), m.any(x > 0.9, axis=0),
                m.sum(x[:, :0], axis=1)]

    def make():
        return [np.asarray(e.get()) for e in exprs(fl, fl.asarray(a), fl.asarray(idx))]

    on, off, stats = _both(make, monkeypatch)
    assert stats["kernels_launched"] == 0
    for got, kern, ref in zip(on, off, exprs(np, a, idx)):
        assert got.dtype == ref.dtype == kern.dtype and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-12)
        np.testing.assert_allclose(got, kern, rtol=1e-12)


def test_in_place_updates_and_overlap(host, monkeypatch):
    """The loops of NPBench's solvers: statements that read what they write."""
    base = np.random.default_rng(3).random((8, 8)) + np.eye(8) * 8

    def run(m, A):
        for i in range(1, 8):
            for j in range(i):
                A[i, j] -= m.dot(A[i, :j], A[j, :j])
                A[i, j] /= A[j, j]
            A[i, 1:] += A[i, :-1] * 0.5   # reads elements the statement writes
            A[i, :-1] = A[i, 1:]          # overlapping copy
        A[2:5] = A[3:6, ::-1]             # overlapping rows, reversed
        A[:, 1] = A[1]                    # a column from a row that crosses it
        return A

    def make():
        return run(fl, fl.asarray(base.copy())).get()

    on, off, stats = _both(make, monkeypatch)
    ref = run(np, base.copy())
    assert stats["kernels_launched"] == 0 and stats["host_evaluations"] > 0
    np.testing.assert_allclose(on, ref, rtol=1e-12)
    np.testing.assert_allclose(on, off, rtol=1e-12)


def test_1d_and_0d_views_read_and_written(host, monkeypatch):
    """Views read and written as slices of a buffer's typed host memory: reversed,
    strided, stride 0 (broadcast), and single elements (read as numpy scalars)."""
    def run(m, x):
        x[::-2] = x[1::2] * 2             # reversed target, overlapping the value
        x[3:8] += x[10:5:-1]              # reversed operand
        x[-1] = x[0] + x[1]               # 0-d target and operands
        x[4] *= x[4]                      # reads and writes the same element
        x[:5] -= m.broadcast_to(x[7], (5,)) * x[17:12:-1]
        return x, x[::3] + x[-1], m.sum(x[1:19:4] * x[2])

    base = np.arange(20.0) * 0.5 - 3

    def make():
        return [np.asarray(v.get()) for v in run(fl, fl.asarray(base.copy()))]

    on, off, stats = _both(make, monkeypatch)
    ref = run(np, base.copy())
    # (5 statements and reads; ``x[::3] + x[-1]`` and the sum of a product of views
    # are computed at once: host_eager, host_products.reduce)
    assert stats["kernels_launched"] == 0 and stats["host_evaluations"] == 5
    assert stats["host_operations"] >= 3
    for a, b, c in zip(on, off, ref):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(a, b)


def test_lazy_values_keep_their_inputs_old_elements(host):
    x = fl.asarray(np.arange(10.0))
    y = x * 2           # lazy: reads x's buffer
    x[...] = -1.0       # computed on the host: y must still see the old x
    np.testing.assert_array_equal(y.get(), np.arange(10.0) * 2)
    a, b = fl.asarray(np.arange(5.0)), fl.asarray(np.ones(5))
    fl.compute(a + b, a - b, out=(a, b))  # both read before either is written
    np.testing.assert_array_equal(a.get(), np.arange(5.0) + 1)
    np.testing.assert_array_equal(b.get(), np.arange(5.0) - 1)


def test_kernels_and_host_work_interleave(host):
    """A small host evaluation reads a large kernel's result after it has run, and a
    kernel reads what the host wrote."""
    n = 1 << 16  # above the host path's limit: a kernel
    big = fl.asarray(np.arange(n, dtype=np.float64))
    fl.reset_stats()
    doubled = (big * 2).eval()
    head = (doubled[:5] + 1).get()            # the host path, after the kernel
    doubled[:3] = fl.asarray(np.full(3, 7.0))  # the host writes ...
    total = float((doubled * 1).sum())          # ... and a kernel reads it
    s = fl.stats()
    # (``doubled[:5] + 1`` is an operation computed at once, host_eager; the write an
    # evaluation)
    assert s["kernels_launched"] >= 2 and s["host_evaluations"] >= 1 \
        and s["host_operations"] >= 1
    np.testing.assert_array_equal(head, np.arange(5) * 2.0 + 1)
    ref = np.arange(n) * 2.0
    ref[:3] = 7.0
    assert total == pytest.approx(ref.sum(), rel=1e-12)


def test_out_of_range_gather_still_raises(host):
    x = fl.asarray(np.arange(6.0))
    with pytest.raises(IndexError):
        fl.take(x, fl.asarray(np.array([0, 9])), axis=0).get()


def test_limit_zero_runs_kernels(host, monkeypatch):
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    fl.reset_stats()
    np.testing.assert_array_equal((fl.asarray(np.arange(4.0)) + 1).get(), np.arange(4.0) + 1)
    s = fl.stats()
    assert s["host_evaluations"] == 0 and s["kernels_launched"] == 1


def test_larger_expressions_let_go_of_temporaries(host, monkeypatch):
    """From TRACK_USES_AT elements on, a value read once is let go (or computed into)
    and one read twice is kept: the results stay numpy's."""
    a = np.random.default_rng(4).random((13, 13, 13))

    def expr(m, x):
        t = x[1:-1, 1:-1, 1:-1] * 2.0  # read three times
        stencil = 0.125 * (x[2:, 1:-1, 1:-1] - 2.0 * x[1:-1, 1:-1, 1:-1] + x[:-2, 1:-1, 1:-1])
        return (t + t * 3.0 - m.sin(t)) / (stencil + 4.0) + m.sum(x[0] * x[1], axis=0)[1:-1]

    def make():
        x = fl.asarray(a)
        out = fl.zeros_like(x)
        out[1:-1, 1:-1, 1:-1] = expr(fl, x)
        return out.get()

    assert 11 ** 3 >= host_path.TRACK_USES_AT
    monkeypatch.setattr(host_path, "TRACK_USES_WORK", 0)  # (however few its temporaries)
    on, off, stats = _both(make, monkeypatch)
    ref = np.zeros_like(a)
    ref[1:-1, 1:-1, 1:-1] = expr(np, a)
    assert stats["kernels_launched"] == 0
    np.testing.assert_array_equal(on, ref)
    np.testing.assert_allclose(on, off, rtol=1e-12)


def test_a_repeated_flat_evaluation_moves_to_its_kernel(host, monkeypatch):
    monkeypatch.setattr(host_path, "FLAT_REPEATS_FOR_KERNEL", 3)
    x = fl.asarray(np.arange(8.0))
    fl.reset_stats()
    for _ in range(5):
        np.testing.assert_array_equal((x * 3 + 1).get(), np.arange(8.0) * 3 + 1)
    s = fl.stats()
    assert s["host_evaluations"] == 3 and s["kernels_launched"] == 2


def test_a_repeated_0d_evaluation_stays_here(host, monkeypatch):
    """A 0-d result (a loop's condition, read at once) never moves to its kernel: the
    read after a kernel waits on its event (NPBench's crc16, one bit per evaluation)."""
    monkeypatch.setattr(host_path, "FLAT_REPEATS_FOR_KERNEL", 3)
    x = fl.asarray(np.int64(5))
    fl.reset_stats()
    bits = [bool((x & 1) ^ k) for k in range(6)]  # (one structure: x, a scalar)
    assert bits == [bool((5 & 1) ^ k) for k in range(6)]
    s = fl.stats()
    # (each operator on a 0-d value is computed at once, fuseloop.host_ops, and bool
    # reads its value: no evaluation at all)
    assert s["kernels_launched"] == 0 and s["host_evaluations"] == 0
    assert s["host_operations"] == 12


def test_statements_write_here_without_the_general_path(host, monkeypatch):
    """A small statement into a concrete array is computed and written by
    host_path.write, without assignment's general path (its run); a lazy array
    reading the written elements is still computed first (by the general path)."""
    from fuseloop import assignment

    runs = []
    real_run = assignment.run
    monkeypatch.setattr(assignment, "run", lambda *a, **k: runs.append(1) or real_run(*a, **k))
    base = np.random.default_rng(4).random((6, 6)) + np.eye(6) * 6

    def lu(m, A):
        for i in range(6):
            for j in range(i):
                A[i, j] -= A[i, :j] @ A[:j, j]
                A[i, j] /= A[j, j]
            for j in range(i, 6):
                A[i, j] -= A[i, :i] @ A[:i, j]
            A[i, 0] = 0.25 if i % 2 else A[i, 0]  # a scalar, and a view into itself
        return A

    A = fl.asarray(base.copy())
    fl.reset_stats()
    got = lu(fl, A).get()
    s = fl.stats()
    np.testing.assert_allclose(got, lu(np, base.copy()), rtol=1e-12)
    assert not runs and s["kernels_launched"] == 0
    assert s["host_evaluations"] == 15 + 15 + 21 + 3  # (one per statement, A[i, 0] = A[i, 0]: none)
    old = A * 2           # lazy, held: reads the element written next (A[2] * 2, a
    A[2, 3] = -1.0        # small view's, is computed at once: host_eager)
    assert runs  # (the general path: old computed first)
    np.testing.assert_array_equal(old.get(), got * 2)
    assert float(A[2, 3]) == -1.0


def test_in_place_operators_computed_here(host, monkeypatch):
    """``a op= b`` with a concrete target: computed by host_path.inplace (no node, no
    assignment) on the operation's own loop dtypes, as numpy and the kernels, lazy
    operands included (made concrete: one kept reads the old elements); what it does
    not take (a Python int out of the target's range, a cast numpy refuses) goes the
    general way, with its errors."""
    from fuseloop import assignment

    def run(m, f, i):
        f[2] += f[1]                       # 0-d float32 operands
        f[:4] *= m.asarray(np.arange(4.0)) if m is np else fl.asarray(np.arange(4.0))
        f[1:3] /= 3                        # a Python int into a float loop
        f[5] -= f[6:8].sum() * 2.5         # a lazy 0-d operand
        i[1] += 7                          # an int into int8, in range
        i[2:] -= i[:-2]                    # an operand overlapping the target
        i[0] //= i[3]
        f[3:6] += f[2:5] * 2               # a lazy one, overlapping too
        keep = f[0:3] + 1                  # kept: computed before the write, reads old f
        f[1:4] *= keep
        f[6:] += keep * keep
        return f, i

    fb = np.linspace(-2, 3, 9, dtype=np.float32)
    ib = np.arange(1, 7, dtype=np.int8) * 3

    calls = []
    real = assignment.assign
    monkeypatch.setattr(assignment, "assign", lambda *a, **k: calls.append(1) or real(*a, **k))
    import fuseloop.array as fa
    monkeypatch.setattr(fa, "assign", assignment.assign)

    counts = []

    def make():
        calls.clear()
        out = [v.get() for v in run(fl, fl.asarray(fb.copy()), fl.asarray(ib.copy()))]
        counts.append(len(calls))
        return out

    on, off, stats = _both(make, monkeypatch)
    ref = run(np, fb.copy(), ib.copy())
    assert stats["kernels_launched"] == 0 and stats["host_evaluations"] == 10
    assert counts == [0, 10]
    for a, b, c in zip(on, off, ref):
        assert a.dtype == c.dtype
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(a, b)
    fl.reset_stats()
    i = fl.asarray(ib.copy())
    calls.clear()
    with pytest.raises(OverflowError):
        i[1] += 1000                       # numpy: out of int8's range
    with pytest.raises(TypeError, match="same_kind"):
        i[1] //= 2.0                       # float64 result into int8
    assert len(calls) == 0  # (refused before any assignment)
    np.testing.assert_array_equal(i.get(), ib)


def test_scalars_of_lazy_elements_computed_without_a_buffer(host):
    """``bool``/``float``/``int`` of a small lazy size-1 array: computed here, the array
    left lazy (no buffer made, written and read back: nussinov's ``max`` of elements)."""
    t = fl.asarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    u = fl.asarray(np.array([2**63 + 5], dtype=np.uint64))
    fl.reset_stats()
    cond = t[1, 2] > t[2, 0]
    assert bool(cond) is False and cond.is_lazy
    assert max(t[2, 1], t[1, 3]) is not None  # (Python's max: a comparison's bool)
    half = t[2, 3] / 2
    assert float(half) == 5.5 and half.is_lazy
    assert int(t[0, 1:2] * 3) == 3
    assert int(u + 1) == 2**63 + 6 and int(u[0]) == 2**63 + 5
    # (the 0-d operations are computed at once, fuseloop.host_ops: 3 of the 5; so is
    # ``t[0, 1:2] * 3``, a small view's, fuseloop.host_eager)
    assert fl.stats()["kernels_launched"] == 0 and fl.stats()["host_evaluations"] == 1
    assert fl.stats()["host_operations"] == 3 + 1


def test_small_reads_come_from_host_memory(host, monkeypatch):
    """``get``, ``float`` and ``bool`` of a small array read its host memory after the
    queue has finished (here after a kernel that wrote it), views included."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 64)
    n = 40000  # (a kernel enqueued at once: above the limit and too large to defer)
    big = fl.asarray(np.arange(float(n)))
    y = (big * 3).eval()
    from fuseloop.backends import opencl

    copies = []  # (device reads: pyopencl's read function, else its dispatching enqueue_copy)
    real_read, real_copy = opencl._read_buffer, opencl.cl.enqueue_copy
    if real_read is not None:
        monkeypatch.setattr(opencl, "_read_buffer", lambda *a: copies.append(1) or real_read(*a))
    monkeypatch.setattr(opencl.cl, "enqueue_copy",
                        lambda *a, **k: copies.append(1) or real_copy(*a, **k))
    np.testing.assert_array_equal(y[10:20:3].get(), np.arange(n)[10:20:3] * 3.0)
    assert float(y[n - 1]) == 3.0 * (n - 1) and bool(y[1] > 2) and not copies
    np.testing.assert_array_equal(y[:100].get(), np.arange(100.0) * 3)  # (a copy command)
    assert copies


def test_statements_join_waiting_small_launches(host):
    """While small kernel launches wait to be enqueued together (a complex division's
    here), a statement joins them as a kernel instead of flushing and waiting for them."""
    z = fl.asarray(np.ones(8, np.complex128))
    x = fl.asarray(np.arange(8.0))
    for _ in range(2):  # (the second launch of a cached structure is deferred)
        (z / 2).eval()
        (x + 1).eval()
    fl.synchronize()
    fl.reset_stats()
    w = (z / 2).eval()
    y = (x + 1).eval()
    s = fl.stats()
    assert s["host_evaluations"] == 0 and s["kernels_launched"] == 2
    np.testing.assert_array_equal(y.get(), np.arange(8.0) + 1)
    np.testing.assert_array_equal(w.get(), np.full(8, 0.5 + 0j))
    # nothing waits now (a structure with a kept kernel plan would take its kernel)
    np.testing.assert_array_equal((x * 3).get(), np.arange(8.0) * 3)
    assert fl.stats()["host_evaluations"] == 1


def test_memory_pressure_lets_go_of_kept_maps(host):
    """An allocation that does not fit first drops the host path's kept maps (each holds
    its buffer), as it gives the pool's unused blocks back."""
    from fuseloop.errors import DeviceMemoryError
    from fuseloop.runtime.devices import _runtime

    x = fl.asarray(np.arange(100, dtype=np.float32), device=host)
    np.testing.assert_array_equal((x * 2 + 1).get(), np.arange(100, dtype=np.float32) * 2 + 1)
    assert host_path._mapped  # (the result was read from a kept map)
    too_big = host.global_mem_size * 4
    with pytest.raises(DeviceMemoryError):
        _runtime(host).pool._check(too_big, too_big)
    assert not host_path._mapped
    np.testing.assert_array_equal((x * 3).get(), np.arange(100, dtype=np.float32) * 3)


def _durbin(r, flip):
    """NPBench's durbin: each ``y[:k] += ...`` first computes two pending readers of
    ``y`` of different shapes (``alpha``, the flipped ``y[:k]``)."""
    y = r * 0
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, r.shape[0]):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + (flip(r[:k]) * y[:k]).sum()) / beta
        y[:k] += alpha * flip(y[:k])
        y[k] = alpha
    return y


def test_pending_readers_are_not_built_ahead_again(host, monkeypatch):
    # fl.compute of several groups builds their kernels ahead (fuseloop.prebuild) by
    # lowering each group dry: not for work the host path computes, and once per
    # structure otherwise (a loop lowered every group again on every statement)
    from fuseloop import prebuild
    from fuseloop.runtime import compile_workers

    monkeypatch.setattr(compile_workers, "mode", lambda: "process")
    dry = []
    real = prebuild._dry_launches
    monkeypatch.setattr(prebuild, "_dry_launches", lambda jobs: dry.append(len(jobs)) or
                        real(jobs))
    rh = np.random.default_rng(5).random(12) * 0.1
    want = _durbin(rh.copy(), np.flip)
    got = _durbin(fl.asarray(rh), fl.flip)
    np.testing.assert_allclose(got.get(), want, rtol=1e-12)
    assert dry == []
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)  # (the kernels: once per structure)
    for k in range(3):
        x = fl.asarray(rh)
        a, b = x[:6] * 2, x[6:].sum() + k
        x[...] = 1.0  # (a and b read x: both are computed first, two groups)
        np.testing.assert_allclose(a.get(), rh[:6] * 2, rtol=1e-12)
        np.testing.assert_allclose(float(b.get()), rh[6:].sum() + k, rtol=1e-12)
    assert dry == [2]


def test_a_small_result_of_a_large_input_is_left_to_the_kernels(host, monkeypatch):
    """``X.sum(axis=1)``: the result is small, the input read is not.  Every route into
    the host path sees that from the tree (once per structure) and leaves it to the
    kernels without finishing the device's queue first (that wait serialised a loop
    of such evaluations with its kernels)."""
    from fuseloop.ops import reductions
    from fuseloop.runtime.devices import _runtime

    # (a reduction called on a concrete array is numpy's before any route here is asked:
    # ops.reductions.REDUCE_NOW_MAX, tests/test_reduce_now.py; off, the routes are seen)
    monkeypatch.setattr(reductions, "REDUCE_NOW_MAX", 0)
    xs = np.arange(256 * 256, dtype=np.int32).reshape(256, 256) % 7  # above the limit
    x = fl.asarray(xs)
    small = fl.asarray(np.zeros(256, dtype=np.int64))
    rt = _runtime(host)
    finished = []
    plain, plain_own = rt.finish_queue, rt.finish
    # (each wait notes how many kernels had been launched by then)
    monkeypatch.setattr(rt, "finish_queue", lambda q: (
        finished.append(fl.stats()["kernels_launched"]), plain(q)))
    monkeypatch.setattr(rt, "finish", lambda: (
        finished.append(fl.stats()["kernels_launched"]), plain_own()))
    fl.reset_stats()
    rows = x.sum(axis=1).eval()                 # host_path.try_run
    small[:] = x.sum(axis=1)                    # host_statements.write
    small += x.max(axis=1)                      # host_statements.inplace
    assert finished == []
    before = fl.stats()["kernels_launched"]
    total = float(x.sum())                      # host_statements.scalar
    s = fl.stats()
    assert s["host_evaluations"] == 0 and s["kernels_launched"] >= 4
    # reading the sum waits for its kernels, never before they are launched
    assert all(n > before for n in finished), (finished, before)
    np.testing.assert_array_equal(rows.get(), xs.sum(axis=1))
    np.testing.assert_array_equal(small.get(), xs.sum(axis=1) + xs.max(axis=1))
    assert total == xs.sum()
    # a small input still runs here (a small view's sum: at once, host_products.reduce)
    np.testing.assert_array_equal(x[:8, :8].sum(axis=1).get(), xs[:8, :8].sum(axis=1))
    after = fl.stats()
    assert after["host_evaluations"] + after["host_operations"] == 1
    assert after["kernels_launched"] == s["kernels_launched"]


def test_a_temporary_operand_overlapping_the_target_gets_no_buffer(host, monkeypatch):
    """``A[:, j] -= A[:, k] * A[k, j]`` (gramschmidt, syrk): the lazy operand reads an
    element the statement writes, but nothing else holds it, so it is not made
    concrete first (a buffer, a copy and its bookkeeping per statement); one held by
    a name still is, and keeps the old elements."""
    from fuseloop import evaluate

    made = []
    real = evaluate.allocate
    monkeypatch.setattr(evaluate, "allocate", lambda *a, **k: made.append(1) or real(*a, **k))
    a0 = np.random.default_rng(3).random((6, 6))
    a, ref = fl.asarray(a0), a0.copy()
    fl.reset_stats()
    for j in range(1, 6):
        a[:, j] -= a[:, j - 1] * a[j - 1, j]
        ref[:, j] -= ref[:, j - 1] * ref[j - 1, j]
    assert made == [] and fl.stats()["host_evaluations"] == 5
    held = a[:, 0] * a[0, 2]
    old = ref[:, 0] * ref[0, 2]
    a[:, 2] -= held
    ref[:, 2] -= old
    assert len(made) == 0  # (held: computed at once, host_eager, in memory of its own)
    np.testing.assert_array_equal(held.get(), old)
    np.testing.assert_array_equal(a.get(), ref)


def test_a_1d_gather_by_one_index_array_skips_the_key_analysis(host, monkeypatch):
    """``x[cols]`` (spmv's row): the gather the general path makes (same structure,
    checked: an index out of range still raises), without its key analysis."""
    from fuseloop.ops import indexing

    xs = np.arange(10.0)
    x, idx = fl.asarray(xs), fl.asarray(np.array([3, -1, 0, 9], dtype=np.int32))
    general = x[fl.asarray(np.array([[3, -1], [0, 9]]))]._node  # (2-D index: the general path)

    def refused(*a):
        raise AssertionError("the general key analysis ran")

    monkeypatch.setattr(indexing, "_split", refused)
    got = x[idx]
    assert type(got._node) is type(general) and got._node.checked == general.checked == 2
    np.testing.assert_array_equal(got.get(), xs[[3, -1, 0, 9]])
    np.testing.assert_array_equal((fl.asarray(xs[:4]) @ x[idx]).get(), xs[:4] @ xs[[3, -1, 0, 9]])
    with pytest.raises(IndexError):
        x[fl.asarray(np.array([0, 10]))].get()


def test_few_temporaries_are_not_tracked(host, monkeypatch):
    """A 4-operation statement on 3200 elements (jacobi_1d) keeps its few temporaries
    rather than counting their readers; a larger expression still counts them.  (The
    eager front end's limit is pinned below 3200 so that the statements reach the host
    path's evaluation: its own limit takes them now, tests/test_host_eager.py.)"""
    from fuseloop import host_eager, host_products, host_statements, host_views, host_writes

    for module in (host_eager, host_products, host_views, host_writes):
        monkeypatch.setattr(module, "EAGER_MAX_WORK", 2048)
    counted = []
    real = host_statements._uses
    monkeypatch.setattr(host_statements, "_uses", lambda roots: counted.append(1) or real(roots))
    a0 = np.random.default_rng(5).random(3200)
    a, b = fl.asarray(a0), fl.asarray(np.zeros(3200))
    fl.reset_stats()
    b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
    assert counted == []
    def larger(m, a):  # (more than TRACK_USES_WORK / 3198 operations)
        return (a[:-2] * 2.0 + a[1:-1] * 3.0 - a[2:] * 4.0) / (a[1:-1] + 1.0) \
            + m.sin(a[2:]) * m.cos(a[:-2]) - a[1:-1] * a[1:-1] + 0.5 * (a[2:] - a[:-2]) \
            + m.exp(a[1:-1] * 0.5) * (a[2:] + 2.0) - m.sqrt(a[:-2] + 1.0) / (a[2:] + 3.0)

    b[1:-1] = larger(fl, a)
    assert counted == [1]
    ref = larger(np, a0)
    np.testing.assert_allclose(b.get()[1:-1], ref, rtol=1e-14)
    assert fl.stats()["kernels_launched"] == 0


def test_a_0d_integer_array_in_a_key_is_read_as_its_value(host):
    """``G[k, idx[a, b]]`` (scattering_self_energies): numpy takes a 0-d integer array
    as an integer, so on the CPU device the index is read and the element view copied
    (lazily): no checked gather whose error flag is read back before the next write.
    The copy keeps the old elements; an index out of range still raises."""
    h = np.arange(60.0).reshape(3, 4, 5)
    g = fl.asarray(h)
    idx = fl.asarray(np.array([[2, -1]], dtype=np.int32))
    fl.reset_stats()
    row, elem = g[1, idx[0, 0]], g[1, 2, idx[0, 1]]
    assert "Gather" not in (type(row._node).__name__, type(elem._node).__name__)
    g[1, 2] = 0.0
    np.testing.assert_array_equal(row.get(), h[1, 2])
    assert float(elem) == h[1, 2, -1]
    assert fl.stats()["kernels_launched"] == 0
    with pytest.raises(IndexError):
        g[1, fl.asarray(np.array(7))].get()
