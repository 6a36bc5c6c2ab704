"""Run plans made ready (``fuseloop.plan_ready``): a plan remembered under a signature is
replayed from bound steps after its first replay, with the general replay's results and
counts, and by the general replay again where the bound steps no longer hold."""

from __future__ import annotations

import launch_counts
import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate, host_path, plan_ready, run_plans
from fuseloop.recipes.registry import forget_chosen


@pytest.fixture
def kernels_only(monkeypatch):
    """Small work is not computed by numpy on the host (so plans are replayed)."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)


def _entry(a: fl.Array) -> tuple:
    """The run plan remembered under lazy ``a``'s signature, and its view offsets."""
    signed = run_plans._signed_key([a._node], a.shape, a.device)
    plan, offsets = run_plans._signed[signed[0]][:2]
    return plan, signed[3] if offsets is None else offsets


def test_a_replayed_plan_is_made_ready_and_counts_as_before(device, kernels_only,
                                                           monkeypatch):
    monkeypatch.setattr(evaluate, "ONE_ROW_MAX_LENGTH", 1)  # (the mean runs first)
    rng = np.random.default_rng(0)

    def fn(a):  # (a full reduction consumed by a larger result: two kernels, a temporary)
        return a - a.mean()

    x = fl.asarray(rng.random((8, 16), np.float32))
    fn(x).eval()  # recorded
    fn(x).eval()  # replayed the general way, then made ready
    plan, offsets = _entry(fn(x))
    ready = plan.ready[offsets]
    assert isinstance(ready, plan_ready.Ready)
    assert len(plan.steps) >= 2 and plan.allocs
    before = fl.stats()
    for _ in range(3):  # other buffers, the same structure
        h = rng.random((8, 16), np.float32)
        np.testing.assert_allclose(fn(fl.asarray(h)).eval().get(), h - h.mean(),
                                   rtol=1e-5, atol=1e-6)
    after = fl.stats()
    steps = len(plan.steps)
    assert after["kernels_launched"] - before["kernels_launched"] == 3 * steps
    assert after["memory_cache_hits"] - before["memory_cache_hits"] == 3 * steps
    assert after["kernels_compiled"] == before["kernels_compiled"]
    assert plan.ready[offsets] is ready  # (still valid: not made again)


def test_a_recipes_change_replays_the_general_way_then_readies_again(device, kernels_only):
    h = np.arange(48, dtype=np.float32).reshape(6, 8)
    x = fl.asarray(h)
    for _ in range(2):
        x.sum(axis=1).eval()
    plan, offsets = _entry(x.sum(axis=1))
    first = plan.ready[offsets]
    assert isinstance(first, plan_ready.Ready)
    forget_chosen()  # (what a recipe's registration does: a new recipes token)
    assert first.run([x._storage], [], device) is None  # (no longer current: refused)
    np.testing.assert_allclose(x.sum(axis=1).eval().get(), h.sum(axis=1))
    again = plan.ready[offsets]
    assert isinstance(again, plan_ready.Ready) and again is not first
    np.testing.assert_allclose(x.sum(axis=1).eval().get(), h.sum(axis=1))


def test_checked_gathers_are_made_ready_and_still_report(device, kernels_only, monkeypatch):
    """A plan whose kernel writes a checked gather's error flag is made ready too; its
    ready replay reads the flag as the general replay does (an index out of range
    raises at the evaluation), and a later call's flag is a zeroed one."""
    from fuseloop.ops import host_mirror

    # (indices the host holds no copy of: else checked there, and the kernel is not)
    monkeypatch.setattr(host_mirror, "MIRROR_MAX_BYTES", 0)
    h = np.arange(10, dtype=np.float32)
    x = fl.asarray(h)
    idx = fl.asarray(np.array([3, 1, 9], np.int64))
    for _ in range(3):
        assert float(fl.sum(x[idx]).eval().get()) == float(h[[3, 1, 9]].sum())
    plan, offsets = _entry(fl.sum(x[idx]))
    ready = plan.ready[offsets]
    assert isinstance(ready, plan_ready.Ready) and ready.flagged
    ran = []
    real = plan_ready.Ready.run

    def counted(self, *args):
        done = real(self, *args)
        ran.append(done is not None)
        return done

    monkeypatch.setattr(plan_ready.Ready, "run", counted)
    with pytest.raises(IndexError):
        fl.sum(x[fl.asarray(np.array([3, 1, 12], np.int64))]).eval()
    assert ran and all(ran)  # (raised by the ready replay's flag read)
    ran.clear()
    before = fl.stats()
    other = fl.asarray(np.array([0, 2, 4], np.int64))
    assert float(fl.sum(x[other]).eval().get()) == float(h[[0, 2, 4]].sum())
    assert ran and all(ran)
    assert fl.stats()["kernels_launched"] - before["kernels_launched"] == len(plan.steps)


def test_a_repeated_statement_finds_its_plan_by_signature(device, kernels_only, monkeypatch):
    """A statement into a view (``s[1:-1] = ...`` in a time loop) is replayed by its
    signature and its target's place, strides and offset: no walk after the first
    (which records its plan and remembers it under the signature)."""
    walks = []
    real = run_plans._key

    def counted(*args):
        walks.append(1)
        return real(*args)

    monkeypatch.setattr(run_plans, "_key", counted)
    run_plans.clear()  # (no plan of an earlier test's)
    h = np.linspace(0, 1, 40)
    s = fl.asarray(h)
    a = fl.asarray(np.arange(24.0).reshape(4, 6))
    ah = a.get()
    for _ in range(4):
        s[1:-1] = 0.5 * (s[:-2] + s[2:])  # (reads what it writes: through a temporary)
        h[1:-1] = 0.5 * (h[:-2] + h[2:])
        a[1] = a[1] * 2.0 + a[2]  # (in place)
        ah[1] = ah[1] * 2.0 + ah[2]
    np.testing.assert_allclose(s.get(), h, rtol=1e-12)
    np.testing.assert_allclose(a.get(), ah, rtol=1e-12)
    assert len(walks) == 2  # (each statement's first evaluation)
    # their plans, writing a caller's buffer, are made ready too
    ready = [r for key, entry in run_plans._signed.items() if len(key) > 4
             for r in (entry[0].ready or {}).values() if isinstance(r, plan_ready.Ready)]
    assert len(ready) == 2
    # another offset of the same statement: its signature without offsets is the same,
    # so is its plan (no walk)
    a[2] = a[2] * 2.0 + a[3]
    ah[2] = ah[2] * 2.0 + ah[3]
    assert len(walks) == 2
    # a target that now overlaps what it reads at other positions: walked
    a[1, 1:] = a[1, :-1] * 2.0 + a[2, 1:]
    ah[1, 1:] = ah[1, :-1] * 2.0 + ah[2, 1:]
    np.testing.assert_allclose(a.get(), ah, rtol=1e-12)
    assert len(walks) == 3


def _count_general_replays(monkeypatch) -> list[int]:
    """Empty run plans, and a list that gains an item at each general replay."""
    replays: list[int] = []
    real = run_plans._replay

    def general(*args):
        replays.append(1)
        return real(*args)

    monkeypatch.setattr(run_plans, "_replay", general)
    run_plans.clear()
    return replays


def test_a_loop_over_rows_replays_its_plan_at_any_offsets(device, kernels_only, monkeypatch):
    """A statement whose views move every iteration (floyd_warshall's row, seidel_2d's
    element) meets new offsets at every statement: past its first few (a Ready each)
    it is replayed by the plan's Moving (``fuseloop.plan_moving``), its offsets appended
    to each launch's arguments: no general replay, one launch per statement, numpy's
    results."""
    from fuseloop import plan_moving

    replays = _count_general_replays(monkeypatch)
    rng = np.random.default_rng(3)
    n = 24
    ph = rng.integers(1, 50, (n, n)).astype(np.int32)
    gh = rng.random((n, n))
    path, grid = fl.asarray(ph), fl.asarray(gh)

    def sweep(k: int) -> None:
        for i in range(1, n):  # (i == k: the target is read elsewhere, another structure)
            if i != k:
                path[i, :] = fl.minimum(path[i, :], path[i, k] + path[k, :])
                ph[i, :] = np.minimum(ph[i, :], ph[i, k] + ph[k, :])
        for j in range(1, n):  # (an element of a row: A[i, j] += A[i, j - 1])
            grid[k, j] += grid[k, j - 1]
            gh[k, j] += gh[k, j - 1]

    sweep(1)  # (recorded, a Ready for the first offsets, then a Moving for all others)
    movings = [e[0].moving for e in run_plans._signed.values()]
    assert sum(type(m) is plan_moving.Moving for m in movings) == 2
    assert len(replays) == 2 * 3  # (each plan: its record, the next two offsets)
    del replays[:]
    counted = launch_counts.counted(lambda: [sweep(k) for k in range(2, 5)])
    assert not replays  # (every statement by the Moving)
    assert counted.launches == 3 * (n - 2 + n - 1)
    assert counted["kernels_compiled"] == 0 and counted["plans_walked"] == 0
    assert counted["plans_replayed"] == counted.launches
    np.testing.assert_array_equal(path.get(), ph)
    np.testing.assert_allclose(grid.get(), gh, rtol=1e-12)


def test_a_moving_replay_is_made_again_after_the_memory_cache_is_cleared(
        device, kernels_only, monkeypatch):
    """``fl.clear_memory_cache()`` drops the kernels a plan's Moving launches: the next
    statement takes the general replay (which finds its kernels again) and the plan's
    Moving is made anew from it, so the statements after it are replayed by the Moving
    again, not each by the general replay."""
    from fuseloop import plan_moving

    replays = _count_general_replays(monkeypatch)
    n = 24
    gh = np.random.default_rng(4).random((n, n))
    grid = fl.asarray(gh)

    def sweep(k: int) -> None:  # (an element of a row: A[i, j] += A[i, j - 1])
        for j in range(1, n):
            grid[k, j] += grid[k, j - 1]
            gh[k, j] += gh[k, j - 1]

    sweep(1)
    old = [e[0].moving for e in run_plans._signed.values()]
    assert sum(type(m) is plan_moving.Moving for m in old) == 1
    fl.clear_memory_cache()
    del replays[:]
    sweep(2)
    # (the first statement finds its kernel again, the second its plan at moving
    # offsets: plan_steps makes it where the offsets change; cleared before: 23)
    assert len(replays) == 2
    now = [e[0].moving for e in run_plans._signed.values()]
    assert sum(type(m) is plan_moving.Moving and m not in old for m in now) == 1
    del replays[:]
    sweep(3)
    assert not replays
    np.testing.assert_allclose(grid.get(), gh, rtol=1e-12)
