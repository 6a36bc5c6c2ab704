"""Run plans replayed at any lengths, bound once (fuseloop.plan_growing, issue 26): a loop
over slices that grow every statement makes no plan per length once its key's forms are
known, its results are numpy's, its kernels follow the size classes, and launchers keep
several outputs by record."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache, plan_growing, run_plans
from fuseloop.plan_growing import Growing
from fuseloop.plan_records import _Plan


@pytest.fixture
def device_path(device_path, monkeypatch):
    """conftest's ``device_path`` with the run plans starting empty and their tables
    smaller than the loops' lengths (as NPBench M's 5000-6000 lengths are past 1024)."""
    run_plans.clear()
    monkeypatch.setattr(run_plans, "PLANS_MAX", 16)
    return device_path


@pytest.fixture
def sized_plans(monkeypatch):
    """Counts the plans made at other lengths of a key (``run_plans._at_lengths``)."""
    made = [0]
    at_lengths = run_plans._at_lengths

    def counting(plan, lengths):
        made[0] += 1
        return at_lengths(plan, lengths)

    monkeypatch.setattr(run_plans, "_at_lengths", counting)
    return made


def _growings() -> list[Growing]:
    return [p.growing for p in run_plans._plans.values()
            if isinstance(p, _Plan) and type(p.growing) is Growing]


def _update(y, want, n):
    for k in range(1, n):
        y[:k] += 1e-3 * fl.flip(y[:k])
        want[:k] += 1e-3 * want[:k][::-1]


def _update_passes(n, seed, sized_plans=None, passes=2):
    """Passes of :func:`_update` over ``n`` lengths, each from the same data with the
    stats (and ``sized_plans``' count) reset and its result checked against numpy;
    yields each pass's number after its check."""
    yh = np.random.default_rng(seed).random(n)
    for run in range(passes):
        y, want = fl.asarray(yh), yh.copy()
        if sized_plans is not None:
            sized_plans[0] = 0
        fl.reset_stats()
        _update(y, want, n)
        np.testing.assert_allclose(y.get(), want, rtol=1e-12)
        yield run


def test_growing_update_makes_no_plan_per_length(device_path, sized_plans):
    n = 150
    for run in _update_passes(n, 4, sized_plans):
        s = fl.stats()
        assert s["kernels_launched"] == n - 1
        if run == 1:  # (every length by its key's Growing: no plan made, none recorded)
            assert sized_plans[0] == 0 and s["plans_recorded"] == 0, (sized_plans, s)
            assert s["plans_replayed"] == n - 1 and s["memory_cache_hits"] == n - 1
    assert _growings()


def test_trisolv_lengths_and_offsets_move_together(device_path, sized_plans):
    n = 120
    rng = np.random.default_rng(0)
    lh = np.tril(rng.random((n, n))) + n * np.eye(n)
    bh = rng.random(n)
    want = np.zeros(n)
    for i in range(n):
        want[i] = (bh[i] - lh[i, :i] @ want[:i]) / lh[i, i]
    L, b = fl.asarray(lh), fl.asarray(bh)
    for run in range(2):
        x = fl.zeros(n)
        sized_plans[0] = 0
        fl.reset_stats()
        for i in range(n):
            x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]
        np.testing.assert_allclose(x.get(), want, rtol=1e-12)
        if run == 1:
            assert sized_plans[0] == 0 and fl.stats()["plans_recorded"] == 0
    # (the row's offset, the element's and the length are the moved arguments)
    assert any(gs.offs and any(v for v in g.varying) for g in _growings() for gs in g.steps)


def test_a_size_class_met_later_is_learnt(device_path, sized_plans, restore_recipes):
    """The small-output recipe with a size class that splits one length class (64 ..
    127) in two: the key's Growing keeps a kernel for each, and the second pass makes
    no plan and lowers no kernel."""
    old = fl.recipe_for(device_path, "one_group")
    base = old.size_class

    def size_class(program, params, n_rows, n_elem):
        cls = base(program, params, n_rows, n_elem)
        return cls + " and N >= 65" if n_rows * n_elem > 64 else cls

    fl.register_recipe(device_path.type, old, name="test-growing-classes", version="1",
                       kind="one_group", size_class=size_class)
    for run in _update_passes(110, 6, sized_plans):
        if run == 1:
            assert sized_plans[0] == 0 and fl.stats()["kernels_lowered"] == 0
    assert max(len(gs.kernels) for g in _growings() for gs in g.steps) == 2


def test_kernels_dropped_from_the_memory_cache_are_learnt_again(device_path, sized_plans):
    for run in _update_passes(100, 7, sized_plans, passes=3):
        if run == 0:
            cache.clear_memory_cache()  # (every kept kernel's in_cache is False now)
    assert sized_plans[0] == 0
    for g in _growings():
        assert all(k.compiled.in_cache for gs in g.steps for k in gs.kernels.values())


def test_no_growing_where_a_tuned_entry_may_choose_per_size(device_path, monkeypatch):
    monkeypatch.setattr(plan_growing, "_untuned", lambda recipe, program, device: False)
    n = 80
    yh = np.random.default_rng(8).random(n)
    y, want = fl.asarray(yh), yh.copy()
    _update(y, want, n)
    np.testing.assert_allclose(y.get(), want, rtol=1e-12)
    assert not _growings()


class _Buf:
    __slots__ = ("__weakref__", "buffer")

    def __init__(self, name: str) -> None:
        self.buffer = name


def test_several_outputs_are_set_once_and_one_output_forgets(monkeypatch):
    """A launcher of several outputs sets a target it set last time on this kernel object
    no more; a one-output launch of the same kernel object sets that place, so the next
    launch of several outputs sets its output again."""
    from fuseloop.backends import LaunchSpec, opencl

    calls: list[tuple[int, str]] = []
    monkeypatch.setattr(opencl, "_set_arg", lambda k, i, b: calls.append((i, b)))
    monkeypatch.setattr(opencl, "_enqueue_nd_range", lambda *a: None)
    many = opencl.launcher_family(LaunchSpec(((0, 0),), ((1, 0),), (), (), (1,), (1,)))(())
    one = opencl.launcher_family(
        LaunchSpec(((0, 0),), ((1, 0),), (), (), (1,), (1,), True))(())
    out, other, inp = _Buf("out"), _Buf("other"), _Buf("in")
    last: list = [None] * 3
    many([out], [inp], [], None, last, None)
    many([out], [inp], [], None, last, None)
    assert calls == [(0, "out"), (1, "in")]
    one(other, [inp], [], None, last, None)
    many([out], [inp], [], None, last, None)
    assert calls[2:] == [(0, "other"), (0, "out")]


def test_a_plan_whose_growing_is_gone_replays_in_general(device_path):
    """A free entry keeps the plan whose Growing replayed there; where that Growing is
    gone (not remade: tries counted instead), the statement replays the general way."""
    n = 90
    yh = np.random.default_rng(9).random(n)
    y, want = fl.asarray(yh), yh.copy()
    _update(y, want, n)
    owners = [p for p in run_plans._plans.values()
              if isinstance(p, _Plan) and type(p.growing) is Growing]
    assert owners
    for p in owners:
        p.growing = plan_growing.GROWING_TRIES  # (no Growing, none tried again)
    y, want = fl.asarray(yh), yh.copy()
    _update(y, want, n)
    np.testing.assert_allclose(y.get(), want, rtol=1e-12)
    assert all(p.growing == plan_growing.GROWING_TRIES for p in owners)


@pytest.fixture
def made_launches(monkeypatch):
    """Counts the launches a Growing makes from its forms (``Growing._made``)."""
    made = [0]
    from_forms = Growing._made

    def counting(self, offsets, lengths):
        made[0] += 1
        return from_forms(self, offsets, lengths)

    monkeypatch.setattr(Growing, "_made", counting)
    return made


def test_known_lengths_replay_their_prepared_launches(device_path, sized_plans,
                                                      made_launches):
    """A pass over lengths met by their key's Growing before makes no launches from the
    forms: each length's are kept on it (the last of four: a size class's first
    lengths run before its key has a Growing, which may serve them a pass later)."""
    for run in _update_passes(120, 10, sized_plans, passes=4):
        if run == 2:
            made_launches[0] = 0
    assert made_launches[0] == 0 and sized_plans[0] == 0
    assert any(g.prepared for g in _growings())


def test_prepared_lengths_are_bounded(device_path, made_launches, monkeypatch):
    """Past ``PREPARED_MAX`` lengths, new ones are not kept (made from the forms every
    pass) while the first ones kept still serve."""
    monkeypatch.setattr(plan_growing, "PREPARED_MAX", 8)
    passes = list(_update_passes(100, 11, passes=3))
    assert passes == [0, 1, 2]
    growings = _growings()
    assert growings and all(len(g.prepared) <= 8 for g in growings)
    assert any(len(g.prepared) == 8 for g in growings)
    kept = [list(g.prepared) for g in growings]
    made_launches[0] = 0
    for _ in _update_passes(100, 11, passes=1):
        pass
    assert made_launches[0] > 0  # (the lengths not kept)
    assert [list(g.prepared) for g in growings] == kept


def _row_updates(x, want, rows, m):
    """Each row's growing update: the same lengths in every row, at other offsets."""
    for i in range(rows):
        for k in range(1, m):
            x[i, :k] += 1e-3 * fl.flip(x[i, :k])
            want[i, :k] += 1e-3 * want[i, :k][::-1]


@pytest.mark.parametrize("named", [False, True])
def test_other_offsets_at_known_lengths_are_patched_in(device_path, made_launches,
                                                       monkeypatch, named):
    """Rows after the first meet the first row's lengths at other view offsets: their
    launches are the kept ones with the offsets patched in, made from the forms again
    only where a kernel's grid or size class names an offset (``named``)."""
    if named:
        monkeypatch.setattr(plan_growing, "_names_offsets", lambda *a: True)
    rows, m = 4, 60
    xh = np.random.default_rng(12).random((rows, m))
    x, want = fl.asarray(xh), xh.copy()
    for _ in range(3):  # (each length met by its key's Growing: see the test above)
        _row_updates(x, want, 1, m)
    made_first = made_launches[0]
    _row_updates(x[1:], want[1:], rows - 1, m)
    np.testing.assert_allclose(x.get(), want, rtol=1e-12)
    again = made_launches[0] - made_first
    assert made_first > 0
    if named:
        assert again >= (rows - 1) * (m - 10), (made_first, again)
    else:
        assert again == 0, (made_first, again)


def test_a_threads_first_launch_takes_the_growing(device_path, sized_plans, made_launches):
    """Another thread's first launch of a kept kernel makes its kernel object there and
    replays by the Growing, as the general replay would (no plan made at its lengths)."""
    import threading

    for _ in _update_passes(80, 13, passes=4):
        pass
    sized_plans[0] = made_launches[0] = 0
    failed: list[BaseException] = []

    def other() -> None:
        try:
            for _ in _update_passes(80, 13, passes=1):
                pass
        except BaseException as e:  # (reported by the main thread)
            failed.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert not failed, failed
    assert sized_plans[0] == 0 and made_launches[0] == 0, (sized_plans, made_launches)
