"""Split calls replayed from what an earlier call of the same structure kept (issue 29):
a split reduction's partial results from each device's run plan by signature, without
building a node; a split stencil's part expressions from templates kept per (stencil,
partition).  Results as one device's; writes between calls are seen."""

from __future__ import annotations

import numpy as np
import pytest
from launch_counts import calls_of

import fuseloop as fl
from fuseloop.multi import array as multi_array
from fuseloop.multi import exchange, trace
from fuseloop.multi import reduce as multi_reduce
from fuseloop.multi import replay as multi_replay

LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)


def test_split_sum_replays_every_part_without_building(three, monkeypatch):
    """The second fl.sum of a split expression of one structure builds no reduction node
    for any part (the first part's neither): each part's partial is its device's plan
    replayed with the part's operands; the kernels launched per part are the first
    call's, all cache hits; a part written between calls is seen."""
    from fuseloop import run_plans
    from fuseloop.ops import reductions

    rng = np.random.default_rng(3)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    fl.reset_stats()
    first = float(fl.sum(x * y))
    launched = fl.stats()["kernels_launched"]
    assert multi_reduce.LAST_PLANNED == [0] and multi_reduce.LAST_PARTIALS == [1, 2]
    np.testing.assert_allclose(first, np.dot(xn.astype(np.float64), yn), rtol=1e-5)
    x[9990:10010] = 2.0  # (across the first two parts' boundary)
    xn[9990:10010] = 2.0
    e = x * y
    reduces = calls_of(monkeypatch, reductions, "Reduce")  # (what fl.sum builds)
    substituted = calls_of(monkeypatch, multi_reduce, "_substituted")
    replays = calls_of(monkeypatch, multi_reduce, "_signed_replay")
    walks = calls_of(monkeypatch, run_plans, "_key")
    fl.reset_stats()
    total = fl.sum(e)
    stats = fl.stats()
    assert multi_reduce.LAST_PLANNED == [3] and multi_reduce.LAST_PARTIALS == [0, 0]
    assert multi_replay.LAST_FAST == [3]  # (staged, then enqueued back to back)
    assert reduces == substituted == walks == replays == []
    assert stats["kernels_launched"] == launched == stats["memory_cache_hits"]
    np.testing.assert_allclose(float(total), np.dot(xn.astype(np.float64), yn), rtol=1e-5)
    # another reduction, or other arguments, of the same parts: not this plan
    np.testing.assert_allclose(float(fl.max(e)), (xn * yn).max(), rtol=1e-6)
    np.testing.assert_allclose(float(fl.sum(e, dtype=np.float64)),
                               np.dot(xn.astype(np.float64), yn), rtol=1e-9)


def test_split_sum_parts_replayed_back_to_back(three, monkeypatch):
    """A later fl.sum of a split expression of a known structure replays every part in
    multi.replay: no reduction node, walk, or part-by-part replay; the first call's
    kernels, all cache hits; the parts enqueued in order; a part written between calls
    seen.  A part of another structure stops it there: the rest take the general path."""
    from fuseloop import run_plans
    from fuseloop.ops import reductions

    rng = np.random.default_rng(5)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    fl.reset_stats()
    float(fl.sum(x * y))
    launched = fl.stats()["kernels_launched"]
    assert multi_replay.LAST_FAST == [0]
    x[19990:20010] = 3.0  # (across the last two parts' boundary)
    xn[19990:20010] = 3.0
    e = x * y
    reduces = calls_of(monkeypatch, reductions, "Reduce")
    replays = calls_of(monkeypatch, multi_reduce, "_signed_replay")
    walks = calls_of(monkeypatch, run_plans, "_key")
    fl.reset_stats()
    with trace.tracing() as events:
        total = fl.sum(e)
    stats = fl.stats()
    assert multi_replay.LAST_FAST == [3] and multi_reduce.LAST_PLANNED == [3]
    assert reduces == replays == walks == []
    assert [(w, k) for w, k, _, _ in events if w == "enqueued"] == \
        [("enqueued", k) for k in range(3)]
    assert stats["kernels_launched"] == launched == stats["memory_cache_hits"]
    np.testing.assert_allclose(float(total), np.dot(xn.astype(np.float64), yn), rtol=1e-5)
    # the second part of another structure: the first replayed here, the rest not
    mixed = [e.parts[0], x.parts[1] - y.parts[1], e.parts[2]]
    got = fl.sum(multi_array.MultiArray(mixed, e.bounds, e.device_set))
    assert multi_replay.LAST_FAST == [1] and multi_reduce.LAST_PLANNED == [2]
    b = e.bounds
    want = np.dot(xn[:b[1]].astype(np.float64), yn[:b[1]]) \
        + np.sum(xn[b[1]:b[2]].astype(np.float64) - yn[b[1]:b[2]]) \
        + np.dot(xn[b[2]:].astype(np.float64), yn[b[2]:])
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_split_stencil_parts_of_known_plans_replayed(three, monkeypatch):
    """A stencil step's parts whose plans a step made are replayed in multi.replay by
    the split array's eval (no part through Array.eval), the first step's kernels, all
    cache hits; a write across a part boundary between two steps is seen."""
    un = np.random.default_rng(7).standard_normal((150, 100)).astype(np.float32)

    def want(a):
        lap = sum(np.roll(a, s, axis) for s in (1, -1) for axis in (0, 1)) - 4 * a
        return a + np.float32(0.1) * lap

    with fl.device(three):
        u = fl.asarray(un)
    fl.reset_stats()
    np.testing.assert_allclose(
        (u + np.float32(0.1) * fl.stencil(u, LAPLACE, boundary="wrap")).get(), want(un),
        rtol=1e-5, atol=1e-5)
    launched = fl.stats()["kernels_launched"]
    u[45:55] = 2.0  # (across the first two parts' boundary)
    un[45:55] = 2.0
    step = u + np.float32(0.1) * fl.stencil(u, LAPLACE, boundary="wrap")
    evals = calls_of(monkeypatch, multi_array, "launch_part")
    fl.reset_stats()
    step.eval()
    stats = fl.stats()
    assert multi_replay.LAST_FAST == [3] and evals == []
    assert stats["kernels_launched"] == launched == stats["memory_cache_hits"]
    np.testing.assert_allclose(step.get(), want(un), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("boundary", ["clamp", "wrap", "constant"])
def test_split_stencil_steps_reuse_the_kept_templates(three, boundary):
    """Steps of a split stencil: the first builds its parts (one per window structure),
    later ones substitute every part from the templates kept for the partition, the
    ends' halos (boundary rows) included; a write to a part between two steps and a
    stencil built before a write are as one device's."""
    un = np.random.default_rng(5).standard_normal((13, 6)).astype(np.float32)
    one = three[0]

    def want(a):
        return fl.stencil(fl.asarray(a, device=one), LAPLACE, boundary=boundary,
                          cval=0.5).get()

    with fl.device(three):
        u = fl.asarray(un)
    step1 = fl.stencil(u, LAPLACE, boundary=boundary, cval=0.5)
    assert exchange.LAST_PLAN_HIT == [0] and exchange.LAST_TEMPLATES[0] >= 1
    np.testing.assert_allclose(step1.get(), want(un), rtol=1e-5, atol=1e-5)
    step2 = fl.stencil(step1, LAPLACE, boundary=boundary, cval=0.5)
    assert exchange.LAST_PLAN_HIT == [1] and exchange.LAST_TEMPLATES == [0, 3]
    np.testing.assert_allclose(step2.get(), want(want(un)), rtol=1e-4, atol=1e-4)
    # a write across a boundary between steps; a step built before another write
    u[3:6] = 7.0
    vn = un.copy()
    vn[3:6] = 7.0
    before = fl.stencil(u, LAPLACE, boundary=boundary, cval=0.5)
    assert exchange.LAST_PLAN_HIT == [1]
    u[8:10] = -1.0
    np.testing.assert_allclose(before.get(), want(vn), rtol=1e-5, atol=1e-5)
    vn[8:10] = -1.0
    np.testing.assert_allclose(fl.stencil(u, LAPLACE, boundary=boundary, cval=0.5).get(),
                               want(vn), rtol=1e-5, atol=1e-5)


def test_kept_stencil_templates_hold_no_buffers(three):
    """What is kept for later steps reads only placeholders: no part's or halo's buffer
    stays alive through it; other weights, and a function body, are not that plan."""
    un = np.arange(60, dtype=np.float32).reshape(12, 5)
    with fl.device(three):
        u = fl.asarray(un)
    exchange._PLANS.clear()
    fl.stencil(u, LAPLACE).eval()
    assert len(exchange._PLANS) == 1
    kept = next(iter(exchange._PLANS.values()))
    for holders, node, _ in kept.built.values():
        assert node.storages <= {h.storage for h in holders}
        assert all(h.storage.buffer is None for h in holders)
    other = fl.stencil(u, 2 * LAPLACE)
    assert exchange.LAST_PLAN_HIT == [0] and len(exchange._PLANS) == 2
    np.testing.assert_allclose(
        other.get(), 2 * fl.stencil(fl.asarray(un, device=three[0]), LAPLACE).get(),
        rtol=1e-6)
    op = fl.stencil_function(lambda a, b, c: a - 2 * b + c, (3, 1))
    np.testing.assert_allclose(op(u).get(), op(fl.asarray(un, device=three[0])).get())
    assert len(exchange._PLANS) == 2  # (a body may read anything: never kept)


def test_split_stencil_steps_move_kept_templates_onto_buffers(three, monkeypatch):
    """Steps over concrete parts: from the third on, every part is the kept expression
    moved onto its buffers (no window built), holding placeholders only; a write to a
    part after a step was built is not seen by it, one before the next step is."""

    un = np.random.default_rng(9).standard_normal((13, 6)).astype(np.float32)
    with fl.device(three):
        u = fl.asarray(un)
    one = fl.asarray(un, device=three[0])
    exchange._PLANS.clear()
    for step in range(4):
        got = fl.stencil(u, LAPLACE, boundary="clamp")
        assert exchange.LAST_MOVED == [3 if step >= 2 else 0], step
        want = fl.stencil(one, LAPLACE, boundary="clamp").get()
        u.parts[1][0] = np.float32(step + 2)  # (a halo row of parts 0 and 2)
        np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)
        one[u.bounds[1]] = np.float32(step + 2)
    kept = next(iter(exchange._PLANS.values()))
    assert kept.by_buffer
    for mover in kept.by_buffer.values():
        assert all(h.buffer is None for h in mover.holders)
        assert mover.root.storages <= set(mover.holders)


@pytest.mark.parametrize("boundary", ["clamp", "wrap", "constant"])
def test_split_stencil_steps_replay_a_kept_step_plan(three, monkeypatch, boundary):
    """Steps over concrete parts: once a step made every part from kept templates, later
    steps replay its plan (no halo walked, no window built: the same reads and parts),
    with one device's results, a write to a halo row between steps seen; a lazy part (a
    layout not planned) takes the general path."""
    from fuseloop.multi import steps

    un = np.random.default_rng(4).standard_normal((17, 6)).astype(np.float32)
    with fl.device(three):
        u = fl.asarray(un)
    one = fl.asarray(un, device=three[0])
    exchange._PLANS.clear()
    steps._STEPS.clear()
    halos = calls_of(monkeypatch, exchange, "_halo")
    hits = []
    copied = -1
    for step in range(5):
        halos.clear()
        copies = exchange.EXCHANGED["copies"]
        u = (u + np.float32(0.1) * fl.stencil(u, LAPLACE, boundary=boundary, cval=0.5)).eval()
        one = (one + np.float32(0.1) * fl.stencil(one, LAPLACE, boundary=boundary,
                                                  cval=0.5)).eval()
        hits.append(steps.LAST_STEP_PLAN[0])
        if hits[-1]:
            assert halos == [] and exchange.LAST_MOVED == [3]
            assert exchange.EXCHANGED["copies"] - copies == copied
        copied = exchange.EXCHANGED["copies"] - copies
        np.testing.assert_array_equal(u.get(), one.get())
        u.parts[1][0] = np.float32(step)  # (a halo row of part 0)
        one[u.bounds[1]] = np.float32(step)
    assert hits == [0, 0, 0, 1, 1] and len(steps._STEPS) == 1
    lazy = u * np.float32(2)  # (lazy parts: no layout to plan)
    got = fl.stencil(lazy, LAPLACE, boundary=boundary, cval=0.5)
    assert steps.LAST_STEP_PLAN == [0]
    np.testing.assert_array_equal(
        got.get(), fl.stencil(one * np.float32(2), LAPLACE, boundary=boundary, cval=0.5).get())


def test_a_kept_step_plan_holds_no_step_buffers(three):
    """A kept step plan holds templates over placeholders, where each buffer comes from
    (a part, the part's halo buffer) and the constant boundary's kept rows only: no
    part's or halo buffer of the step that made it."""
    from fuseloop.multi import steps

    un = np.random.default_rng(6).standard_normal((12, 5)).astype(np.float32)
    steps._STEPS.clear()
    with fl.device(three):
        u = fl.asarray(un)
    for _ in range(3):
        u = fl.stencil(u, LAPLACE, boundary="constant").eval()
    assert len(steps._STEPS) == 1
    plan = next(iter(steps._STEPS.values()))
    kept_rows = {id(a) for _, a in exchange._CONSTANT_ROWS.values()}
    for pp in plan.parts:
        assert all(h.buffer is None for h in pp.mover.holders)
        assert pp.mover.root.storages <= set(pp.mover.holders)
        for role, what in pp.roles:
            assert role in ("x", "arena", "const")
            assert role != "const" or id(what) in kept_rows
    assert [r for pp in plan.parts for r, _ in pp.roles].count("const") == 2  # (the ends)


def test_deferred_halo_uploads_wait_for_their_reads_at_the_parts_launch(three, monkeypatch):
    """With halo uploads left to the destination devices' deferred work (forced on for
    every device), a split stencil returns without waiting for any halo read; each
    part's upload (its reads waited for, its rows written) runs before anything else
    uses its device's queue: the parts' launches, a read, fl.synchronize(); results as
    one device's, a write between steps seen."""
    from fuseloop.multi import uploads
    from fuseloop.runtime.devices import _runtime

    monkeypatch.setattr(uploads, "DEFERRED_UPLOADS", "1")
    un = np.random.default_rng(8).standard_normal((19, 7)).astype(np.float32)
    with fl.device(three):
        u = fl.asarray(un)
    one = fl.asarray(un, device=three[0])
    waits = calls_of(monkeypatch, uploads, "wait")
    in_stencil = calls_of(monkeypatch, exchange, "wait")
    for step in range(4):
        fl.synchronize()
        waits.clear()
        s = fl.stencil(u, LAPLACE, boundary="wrap")
        assert waits == in_stencil == []  # (the stencil call waited for no read)
        pending = [go for d in three for go, _ in _runtime(d).deferred]
        assert len(pending) == 3 and all(type(go) is uploads.DeferredUpload for go in pending)
        # (one per part: its two halos)
        u = (u + np.float32(0.1) * s).eval()
        assert len(waits) == 6 and all(not _runtime(d).deferred for d in three)
        one = (one + np.float32(0.1) * fl.stencil(one, LAPLACE, boundary="wrap")).eval()
        np.testing.assert_allclose(u.get(), one.get(), rtol=1e-5, atol=1e-5)
        u.parts[2][0] = np.float32(step)  # (part 2's first row: part 1's lower halo)
        one[u.bounds[2]] = np.float32(step)
    s = fl.stencil(u, LAPLACE, boundary="wrap")
    fl.synchronize()  # (runs every device's deferred upload)
    assert all(not _runtime(d).deferred for d in three)
    np.testing.assert_allclose(s.get(), fl.stencil(one, LAPLACE, boundary="wrap").get(),
                               rtol=1e-5, atol=1e-5)
