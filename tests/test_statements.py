"""Launches of a loop's statements on the device path (issue 26), values as numpy's.

In-place operators on lazy arrays: the new expression takes the array's place (no
kernel per statement), a chain is computed every ``INPLACE_CHAIN_MAX`` steps (NPBench's
go_fast, ``trace += tanh(a[i, i])``).  A write whose value reads a copy of its target
(``pn = p.copy(); p[1:-1] = pn[2:] + pn[:-2]``) reads the copy's buffer: one kernel for
the copy, one for the write (cavity_flow, channel_flow)."""

from __future__ import annotations

import numpy as np
import pytest
from launch_counts import counted, launches, launches_and_result

import fuseloop as fl
from fuseloop import assignment
from fuseloop.expr.nodes import Apply


def test_accumulating_a_scalar_launches_once_per_chain(device_path):
    h = np.random.default_rng(0).random((50, 50))
    a = fl.asarray(h)
    steps = assignment.INPLACE_CHAIN_MAX

    def go_fast(n):
        trace = 0.0
        for i in range(n):
            trace += fl.tanh(a[i, i])
            assert trace.is_lazy  # (no statement computes anything)
        return (a + trace).get()

    go_fast(50)  # (kernels built)
    done = counted(lambda: go_fast(50))
    got, launched = done.value, done.launches
    np.testing.assert_allclose(got, h + np.tanh(np.diag(h)).sum(), rtol=1e-12)
    # one kernel per chain of INPLACE_CHAIN_MAX steps, then the result's
    assert launched == (50 - 1) // steps + 1, launched
    # before: the first statement computed trace and each later one wrote it in place
    assert launched < 50 // 4


def test_inplace_on_a_lazy_array_keeps_numpy_values_and_readers(device_path):
    xh = np.arange(6.0)
    x = fl.asarray(xh)
    y = x * 2.0  # lazy, reads x's buffer
    kept = y[1:]  # a view of a lazy array reads its expression: y's value now
    y += 1.0
    y *= x
    assert y.is_lazy
    x[...] = 100.0  # y reads x: computed before x is written
    np.testing.assert_array_equal(y.get(), (xh * 2 + 1) * xh)
    np.testing.assert_array_equal(kept.get(), (xh * 2)[1:])
    np.testing.assert_array_equal(x.get(), np.full(6, 100.0))


def test_a_long_chain_is_cut_and_reads_what_it_needs(device_path):
    xh = np.linspace(0.0, 1.0, 7)
    x = fl.asarray(xh)
    t = x * 0.5
    th = xh * 0.5
    for k in range(3 * assignment.INPLACE_CHAIN_MAX + 5):
        t += x * k if k % 2 else k
        th += xh * k if k % 2 else k
        t -= 0.25
        th -= 0.25
    assert t.is_lazy
    x[...] = -1.0  # (the chain's last part still reads x: computed first)
    np.testing.assert_allclose(t.get(), th, rtol=1e-13)


def test_inplace_on_a_lazy_array_casts_and_refuses_as_numpy(device_path):
    f = fl.asarray(np.arange(4, dtype=np.float32)) * 2  # float32, lazy
    f += fl.asarray(np.full(4, 0.1))  # float64 operand: same_kind, cast back
    assert f.dtype == np.float32 and f.is_lazy
    np.testing.assert_allclose(f.get(), np.arange(4, dtype=np.float32) * 2 + np.float32(0.1))
    i = fl.asarray(np.arange(4, dtype=np.int32)) + 1
    with pytest.raises(fl.errors.DTypeError):
        i += 0.5
    i //= 2
    np.testing.assert_array_equal(i.get(), (np.arange(4) + 1) // 2)
    row = fl.asarray(np.ones(3)) * 2
    with pytest.raises(ValueError):
        row += fl.asarray(np.ones((2, 3)))  # numpy: a non-broadcastable output
    np.testing.assert_array_equal(row.get(), np.full(3, 2.0))


def test_large_and_concrete_targets_are_written_in_place(device_path, monkeypatch):
    monkeypatch.setattr(assignment, "INPLACE_LAZY_MAX", 4)
    x = fl.asarray(np.arange(8.0)) * 1.0  # lazy, larger than the limit
    x += 1.0
    assert not x.is_lazy  # (computed, then written in place: as before)
    c = fl.asarray(np.arange(3.0))
    view = c[1:]
    c += 1.0  # a concrete target: its views see the write
    np.testing.assert_array_equal(view.get(), [2.0, 3.0])


def test_a_write_reading_a_copy_of_its_target_is_one_kernel_more(device_path):
    rng = np.random.default_rng(3)
    ph, bh = rng.random((9, 11)), rng.random((9, 11))
    p, b = fl.asarray(ph), fl.asarray(bh)

    def step(p, b, copy):
        pn = copy(p)
        p[1:-1, 1:-1] = 0.25 * (pn[1:-1, 2:] + pn[1:-1, :-2] + pn[2:, 1:-1] + pn[:-2, 1:-1]) \
            - b[1:-1, 1:-1]
        p[:, -1] = p[:, -2]
        return pn

    for _ in range(3):
        step(p, b, lambda a: a.copy())
        step(ph, bh, np.copy)
    launched = launches(lambda: step(p, b, lambda a: a.copy()))
    step(ph, bh, np.copy)
    assert launched == 3, launched  # the copy, the write (no temporary), the edge
    np.testing.assert_allclose(p.get(), ph, rtol=1e-13)
    pn = p.copy()
    p[1:-1, 1:-1] = pn[:-2, :-2] * 2.0  # (a copy read at other offsets: still its buffer)
    p[0, 0] = 7.0
    np.testing.assert_allclose(pn.get(), ph, rtol=1e-13)  # (the copy keeps its values)
    ph[1:-1, 1:-1] = ph[:-2, :-2] * 2.0
    ph[0, 0] = 7.0
    np.testing.assert_allclose(p.get(), ph, rtol=1e-13)


def test_an_operand_reading_the_chain_reads_its_computed_value(device_path):
    # x += x * c: the operand holds the chain too; cut, it reads the computed value,
    # so the expression stays bounded however long the loop
    h = np.linspace(-1.0, 1.0, 5)
    x = fl.asarray(h) * 1.0
    for _ in range(20 * assignment.INPLACE_CHAIN_MAX):
        x += x * 0.001
        h = h + h * 0.001
        assert x.is_lazy
    seen, stack = set(), [x._node]  # (the expression's nodes, each once)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(getattr(n, "args", ()))
    assert len(seen) <= 4 * assignment.INPLACE_CHAIN_MAX, len(seen)
    launched, got = launches_and_result(lambda: x)
    assert launched == 1
    np.testing.assert_allclose(got, h, rtol=1e-12)


def test_a_chain_over_new_buffers_is_cut_every_second_step(device_path):
    # durbin: beta *= 1 - alpha * alpha with alpha computed anew each iteration, read by
    # a statement over slices of every length: as one chain of up to INPLACE_CHAIN_MAX
    # steps, each of its lengths was another structure for every length class (139
    # plans recorded here, 100 kernels compiled for 64 iterations)
    from fuseloop import run_plans

    run_plans.clear()
    n = 64
    rh = np.random.default_rng(4).random(n) / n

    def durbin(r, flip, dot, empty_like):
        y = empty_like(r)
        alpha = -r[0]
        beta = 1.0
        y[0] = -r[0]
        for k in range(1, n):
            beta *= 1.0 - alpha * alpha
            alpha = -(r[k] + dot(flip(r[:k]), y[:k])) / beta
            y[:k] += alpha * flip(y[:k])
            y[k] = alpha
            if isinstance(beta, fl.ndarray):  # (the chain: at most two steps)
                steps, step = 0, beta._node
                while type(step) is Apply:
                    steps, step = steps + 1, step.args[0]
                assert steps <= 2, (k, steps)
        return y

    fl.reset_stats()
    got = durbin(fl.asarray(rh), fl.flip, fl.dot, fl.empty_like).get()
    np.testing.assert_allclose(got, durbin(rh, np.flip, np.dot, np.empty_like), rtol=1e-12)
    assert fl.stats()["plans_recorded"] <= 64, fl.stats()["plans_recorded"]


def _live_readers(a):
    readers = a._storage.readers or {}
    return [r for r in readers.values() if r() is not None]


def test_a_temporary_operand_of_an_inplace_write_is_no_reader(device_path):
    # A[i, j] -= A[i, :j] @ A[j, :j]: the product is held by the statement only, so it
    # is never entered as a reader of A's buffer (the write's check has nothing to walk)
    h = np.random.default_rng(5).random((6, 6))
    a = fl.asarray(h)
    for i, j in ((3, 2), (4, 3), (5, 1)):
        a[i, j] -= a[i, :j] @ a[j, :j]
        h[i, j] -= h[i, :j] @ h[j, :j]
        assert not a._storage.readers, a._storage.readers
    np.testing.assert_allclose(a.get(), h, rtol=1e-13)
    # (one that reads the written elements is then read through a temporary, as the
    # value's own check decides: numpy's values)
    x, xh = fl.asarray(np.arange(10.0)), np.arange(10.0)
    x[1:] += x[:-1] * 2.0
    xh[1:] += xh[:-1] * 2.0
    np.testing.assert_array_equal(x.get(), xh)


def test_a_held_operand_of_an_inplace_write_keeps_its_values(device_path):
    xh = np.arange(10.0)
    x = fl.asarray(xh)
    t = x[:-1] * 2.0  # (held: computed before the write changes what it reads)
    x[1:] += t
    assert not _live_readers(x)
    np.testing.assert_array_equal(t.get(), xh[:-1] * 2.0)
    held = [x[:-1] + 1.0]  # (held by a list only)
    x[1:] -= held[0]
    want = xh.copy()
    want[1:] += want[:-1] * 2.0
    np.testing.assert_array_equal(held[0].get(), want[:-1] + 1.0)
    want[1:] -= want[:-1] + 1.0
    np.testing.assert_array_equal(x.get(), want)
