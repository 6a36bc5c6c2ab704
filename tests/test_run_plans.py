"""Run plans: evaluations with reductions, views and targets replayed per structure.

The first evaluation of a structure records the buffers it allocates and the kernels it
launches; later ones replay that record with their own buffers and scalars.  These tests
check that replays compute what fresh evaluations compute (two-stage reductions, softmax,
overlapping assignment, several outputs), that the counters of ``fl.stats()`` are the same,
that the checking mode agrees, and what is never planned.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate, plan_steps, run_plans
from fuseloop.expr import program as prog


@pytest.fixture
def plans():
    run_plans.clear()
    yield run_plans._plans
    run_plans.clear()


def _softmax(x, out):
    e = fl.exp(x - x.max(axis=-1, keepdims=True))
    out[...] = e / e.sum(axis=-1, keepdims=True)


def _np_softmax(h):
    h = h.astype(np.float64)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_softmax_replay_matches_and_counts(device, plans, fresh_stats):
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal((33, 70), dtype=np.float32) for _ in range(3)]
    x = fl.asarray(hosts[0])
    out = fl.empty_like(x)
    _softmax(x, out)
    np.testing.assert_allclose(out.get(), _np_softmax(hosts[0]), rtol=2e-5, atol=1e-7)
    assert len(plans) == 1 and next(iter(plans.values())) is not None
    fl.reset_stats()
    _softmax(x, out)
    fl.synchronize()
    one_call = fresh_stats()["kernels_launched"]
    for h in hosts[1:]:  # new buffers, same structure: replayed
        x2, out2 = fl.asarray(h), fl.empty((33, 70), np.float32)
        fl.reset_stats()
        _softmax(x2, out2)
        s = fresh_stats()
        assert s["kernels_launched"] == one_call
        assert s["kernels_lowered"] == 0 and s["memory_cache_misses"] == 0
        np.testing.assert_allclose(out2.get(), _np_softmax(h), rtol=2e-5, atol=1e-7)
    assert len(plans) == 1


@pytest.mark.parametrize("one_launch", [True, False])
def test_two_stage_sum_replay(device, plans, fresh_stats, monkeypatch, one_launch):
    from fuseloop import splits

    monkeypatch.setattr(splits, "ONE_LAUNCH", one_launch)
    n = evaluate.TWO_STAGE_MIN_LENGTH * 3 + 7
    rng = np.random.default_rng(1)
    for k in range(3):
        a = rng.integers(-1000, 1000, n).astype(np.int32)
        b = rng.integers(-1000, 1000, n).astype(np.int32)
        fl.reset_stats()
        got = fl.sum(fl.asarray(a) * fl.asarray(b) + k).get()
        assert got == (a.astype(np.int64) * b + k).sum()
        # both stages, replayed or not: one launch, or one each
        assert fresh_stats()["kernels_launched"] == (1 if one_launch else 2)
    assert len(plans) == 1


def test_overlapping_assignment_replay(device, plans):
    for k in range(3):
        h = np.arange(20, dtype=np.float32) * (k + 1)
        a = fl.asarray(h)
        a[1:] = a[:-1] * 2  # reads what it writes: through a temporary
        want = h.copy()
        want[1:] = h[:-1] * 2
        np.testing.assert_array_equal(a.get(), want)


def test_several_outputs_and_scalar_values_replay(device, plans):
    rng = np.random.default_rng(2)
    for k in range(3):
        h = rng.random((8, 50), dtype=np.float32)
        x = fl.asarray(h)
        lo, hi, total = fl.compute(x.min(axis=1), x.max(axis=1), (x * (k + 2)).sum(axis=1))
        np.testing.assert_array_equal(lo.get(), h.min(axis=1))
        np.testing.assert_array_equal(hi.get(), h.max(axis=1))
        np.testing.assert_allclose(total.get(), (h.astype(np.float64) * (k + 2)).sum(axis=1),
                                   rtol=1e-5)


def test_one_scalar_object_in_two_nodes(device, plans):
    """Scalars are bound per node: a value object shared by two nodes changes nothing."""
    h = np.arange(1, 101, dtype=np.float32)
    x = fl.asarray(h)
    s, t = np.float32(2), np.float32(3)
    assert float(fl.sum(x * s + x * t).get()) == float((h * 2 + h * 3).sum())
    assert float(fl.sum(x * s + x * s).get()) == float((h * 4).sum())  # replay, one object
    s = np.float32(5)
    assert float(fl.sum(x * s + x * s).get()) == float((h * 10).sum())
    assert float(fl.sum(x * s + x * t).get()) == float((h * 5 + h * 3).sum())


def test_a_structure_recorded_with_one_scalar_object_twice_is_planned(device, plans,
                                                                       monkeypatch):
    """``x*2 + y*2``: Python's 2 converts to one cached numpy scalar, held by two nodes.

    The recording names each launch's scalars by node, so the structure gets a plan
    (it was linearised afresh at every call before), and a replay with two different
    values binds each where it belongs.
    """
    h = np.arange(1, 101, dtype=np.float32)
    g = h[::-1].copy()
    x, y = fl.asarray(h), fl.asarray(g)
    e = fl.sum(x * 2 + y * 2)
    assert e._node.child.args[0].args[1].value is e._node.child.args[1].args[1].value
    assert float(e) == float((h * 2 + g * 2).sum())
    assert len(plans) == 1 and None not in plans.values()
    linearised = []
    real = evaluate.linearize
    monkeypatch.setattr(evaluate, "linearize",
                        lambda *a, **k: linearised.append(1) or real(*a, **k))
    for a, b in [(2, 3), (5, 5), (7, 1)]:
        assert float(fl.sum(x * a + y * b)) == float((h * a + g * b).sum())
    z = fl.asarray(h[:50])
    got = ((z - z.mean()) / z.std()).get()  # mean and var divide by one 50.0 object
    np.testing.assert_allclose(got, (h[:50] - h[:50].mean()) / h[:50].std(), rtol=1e-5)
    ((z - z.mean()) / z.std()).get()
    assert len(linearised) == 1  # the standardisation's first evaluation only


def test_checking_mode_agrees(device, plans, monkeypatch):
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", True)
    rng = np.random.default_rng(3)
    for _ in range(2):
        h = rng.standard_normal((5, 40), dtype=np.float32)
        x = fl.asarray(h)
        out = fl.empty_like(x)
        _softmax(x, out)
        np.testing.assert_allclose(out.get(), _np_softmax(h), rtol=2e-5, atol=1e-7)
        y = x - x.mean()
        np.testing.assert_allclose(y.get(), h - h.astype(np.float64).mean(), rtol=1e-5,
                                   atol=1e-6)


def test_gathers_of_device_indices_are_planned_and_still_checked(device, plans):
    """A gather at device indices is replayed like any structure (cross-entropy's
    ``z[rows, labels]`` was linearised afresh at every call), and each replay still
    reads the kernel's range flag: a bad index raises every time."""
    h = np.arange(10, dtype=np.float32)
    x = fl.asarray(h)
    for bad in ([3, 1, 12], [3, 1, 10]):
        idx = fl.asarray(np.array(bad, np.int64))
        with pytest.raises(IndexError):
            fl.sum(x[idx]).get()
    for good in ([3, 1, 9], [0, 0, 2]):
        idx = fl.asarray(np.array(good, np.int64))
        assert float(fl.sum(x[idx]).get()) == float(h[good].sum())
    assert len(plans) == 1


@pytest.mark.parametrize("checking", [False, True])
def test_gather_flags_are_read_before_a_target_is_written(device, plans, monkeypatch,
                                                          checking):
    """An evaluation reads its kernels' error flags once at its end (fuseloop.flags), but
    before a later kernel writes a user's array: a bad index leaves the target as it
    was, in a replay and when recorded for real (the checking mode)."""
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", checking)
    x = fl.asarray(np.arange(10, dtype=np.float32))
    rows = np.arange(800).reshape(8, 100) % 10
    rows[5, 7] = 12
    rows = fl.asarray(rows)
    out = fl.asarray(np.full(3, -1.0, np.float32))
    y = fl.asarray(np.ones(3, np.float32))
    for _ in range(2):  # the row sums' kernel gathers; the next one writes out
        with pytest.raises(IndexError):  # (only after the row sums' flag was read)
            out[...] = y - fl.mean(fl.sum(x[rows], axis=1))
        np.testing.assert_array_equal(out.get(), [-1.0, -1.0, -1.0])
    assert len(plans) == 1


@pytest.mark.parametrize("checking", [False, True])
def test_computed_positions_are_planned(device, plans, monkeypatch, checking):
    """roll, tile and repeat gather at computed, always in-range positions: replayed,
    and written straight into a target that they do not read."""
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", checking)
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = fl.asarray(h)
    out = fl.empty((6, 8), np.float32)
    for k in (1, 2, 3):  # the shift is a scalar argument: one structure
        fl.reset_stats()
        out[...] = fl.roll(fl.tile(x, (2, 2)), k, axis=1) * 2 + fl.repeat(x, 2, axis=0)[:, :1]
        assert fl.stats()["kernels_launched"] == 1  # no temporary, no copy
        np.testing.assert_array_equal(
            out.get(), np.roll(np.tile(h, (2, 2)), k, axis=1) * 2 + np.repeat(h, 2, axis=0)[:, :1])
    assert len(plans) == 1


def test_threads_record_and_replay_their_own(device, plans):
    rng = np.random.default_rng(4)
    hosts = [rng.standard_normal((16, 64), dtype=np.float32) for _ in range(8)]
    errors: list[BaseException] = []

    def work(h):
        try:
            for _ in range(5):
                x = fl.asarray(h)
                out = fl.empty_like(x)
                _softmax(x, out)
                np.testing.assert_allclose(out.get(), _np_softmax(h), rtol=2e-5, atol=1e-7)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_loop_over_rows_reuses_one_plan_and_one_kernel(device, plans, fresh_stats):
    # offsets of views are kernel parameters and not part of the plan's key: a loop
    # over i records one plan and builds one kernel, and A[i, j] += A[i, j - 1]
    # (disjoint single elements) is one launch without a temporary
    rng = np.random.default_rng(7)
    host = rng.random((24, 5)).astype(np.float32)
    a = fl.asarray(host)
    fl.clear_caches()
    fl.reset_stats()
    for i in range(1, 21):
        a[i, 3] += a[i, 2]
        host[i, 3] += host[i, 2]
    fl.synchronize()
    s = fl.stats()
    assert len(plans) == 1
    assert s["kernels_compiled"] == 1 and s["kernels_launched"] == 20
    np.testing.assert_array_equal(a.get(), host)


def test_overlapping_row_updates_replay_with_each_rows_offsets(device, plans):
    # A[i, 1:] += A[i, :-1] * c reads elements it writes: the plan of the first row
    # serves every later row, with that row's offsets
    rng = np.random.default_rng(8)
    host = rng.random((24, 16)).astype(np.float32)
    a = fl.asarray(host)
    a[1, 1:] += a[1, :-1] * 0.5
    host[1, 1:] += host[1, :-1] * np.float32(0.5)
    fl.synchronize()
    recorded = len(plans)
    fl.reset_stats()
    for i in range(2, 22):
        a[i, 1:] += a[i, :-1] * 0.5
        host[i, 1:] += host[i, :-1] * np.float32(0.5)
    fl.synchronize()
    assert len(plans) == recorded and fl.stats()["kernels_compiled"] == 0
    # one launch a row: the update reads elements other work-items write, in one
    # work-group (every value loaded before any store; no temporary and copy)
    assert fl.stats()["kernels_launched"] == 20
    np.testing.assert_allclose(a.get(), host, rtol=1e-6)


def test_a_plan_is_not_replayed_where_views_meet_differently(device, plans):
    # the same structure with offsets that make the views overlap needs a temporary:
    # how a target meets the views it reads is part of the key
    host = np.arange(40, dtype=np.float32)
    a = fl.asarray(host)
    a[11:21] = a[1:11] + 1  # disjoint: written in place
    host[11:21] = host[1:11] + 1
    a[26:36] = a[21:31] + 1  # overlapping: through a temporary (numpy's result)
    host[26:36] = host[21:31] + 1
    np.testing.assert_array_equal(a.get(), host)


def test_cross_entropy_reads_its_flag_once_after_its_kernels(device, plans, fresh_stats,
                                                             monkeypatch):
    """The label gather's error flag is read after the mean's kernel too was enqueued (no
    wait between the two kernels), from a pooled buffer, and the evaluation replays."""
    from fuseloop import flags
    from fuseloop.bench.broad import cross_entropy

    reads: list[int] = []
    check = flags.check

    def counted(buf, dev):
        reads.append(fl.stats()["kernels_launched"])
        check(buf, dev)

    monkeypatch.setattr(flags, "check", counted)
    pool = _runtime_flags(device)
    pool.clear()
    rng = np.random.default_rng(25)
    h = rng.uniform(-4, 4, (40, 300)).astype(np.float32)
    labels = rng.integers(0, 300, 40)
    x, rows, lab = fl.asarray(h), fl.asarray(np.arange(40)), fl.asarray(labels)
    m = h.astype(np.float64).max(axis=1)
    lse = m + np.log(np.exp(h - m[:, None]).sum(axis=1))
    want = (lse - h[np.arange(40), labels]).mean()
    for k in range(3):
        fl.reset_stats()
        np.testing.assert_allclose(float(cross_entropy(fl, x, rows, lab)), want, rtol=1e-5)
        # one read, once the evaluation's kernels were launched: two on a CPU (row values,
        # then the mean), one on a GPU (pending_joined joins them behind a ticket)
        launched = fl.stats()["kernels_launched"]
        assert launched == (2 if device.type == "cpu" else 1), launched
        assert reads == [launched], reads
        reads.clear()
        if k:
            assert fresh_stats()["kernels_lowered"] == 0
    assert len(plans) == 1
    assert len(pool) == 1  # one flag buffer served the three calls: back in the pool


def _runtime_flags(device):
    from fuseloop.runtime.devices import _runtime

    return _runtime(device).flags


@pytest.fixture
def gpu_recipes(restore_recipes):
    """The GPU recipes on the CPU device (they split column reductions in stages)."""
    from fuseloop.recipes import gpu_coalesced
    from fuseloop.recipes.rows import make_gpu_rows

    fl.register_recipe("cpu", gpu_coalesced, name="test-plans-gpu-coalesced")
    fl.register_recipe("cpu", make_gpu_rows(256), name="test-plans-gpu-rows",
                       kind="reduction")
    with fl.device("cpu"):
        yield


def _colstat(x):
    return ((x - x.mean(0)) ** 2).mean(0)


def test_multi_kernel_replay_launches_what_an_unplanned_run_does(gpu_recipes, plans,
                                                                 fresh_stats, monkeypatch):
    rng = np.random.default_rng(5)
    hosts = [rng.random((256, 256), dtype=np.float32) for _ in range(3)]
    want = [((h - h.mean(0)) ** 2).mean(0) for h in hosts]
    planned = run_plans.run
    monkeypatch.setattr(run_plans, "run", evaluate.run_unplanned)
    fl.reset_stats()
    np.testing.assert_allclose(_colstat(fl.asarray(hosts[0])).get(), want[0], rtol=1e-5)
    unplanned = fresh_stats()["kernels_launched"]
    assert unplanned >= 3 and not plans  # (a reduction run first, two stages)
    monkeypatch.setattr(run_plans, "run", planned)
    _colstat(fl.asarray(hosts[0])).eval()  # recorded
    # replays with new buffers ask neither recipe_for nor the key's recipe fields again
    asked = []

    def noting(fn):
        return lambda *a: asked.append(a) or fn(*a)

    monkeypatch.setattr(plan_steps, "recipe_for", noting(plan_steps.recipe_for))
    monkeypatch.setattr(evaluate, "column_params", noting(evaluate.column_params))
    for h, w in zip(hosts[1:], want[1:]):
        fl.reset_stats()
        np.testing.assert_allclose(_colstat(fl.asarray(h)).get(), w, rtol=1e-5)
        s = fresh_stats()
        assert s["kernels_launched"] == unplanned
        assert s["kernels_lowered"] == 0 and s["memory_cache_misses"] == 0
    assert asked == [] and len(plans) == 1


def test_a_replay_after_the_recipes_changed_plans_its_launches_again(gpu_recipes, plans):
    from fuseloop.recipes.rows import make_gpu_rows

    rng = np.random.default_rng(6)
    h = rng.random((256, 256), dtype=np.float32)
    x = fl.asarray(h)
    for _ in range(2):
        _colstat(x).eval()
    steps = [s for p in plans.values() if isinstance(p, run_plans._Plan) for s in p.steps]
    kept = [s.plan for s in steps]
    assert len(steps) >= 3 and None not in kept
    # another reduction recipe: the kept launch plans are stale, whatever the key says
    # (the fixture's group, which sizes narrow column groups, kept: only the lanes differ)
    fl.register_recipe("cpu", make_gpu_rows(256, lanes=16), name="test-plans-gpu-rows-lanes16",
                       kind="reduction")
    np.testing.assert_allclose(_colstat(x).get(), ((h - h.mean(0)) ** 2).mean(0),
                               rtol=1e-5)
    # (the column parameters are the same: the same key, its steps planned anew)
    assert [s for p in plans.values() if isinstance(p, run_plans._Plan)
            for s in p.steps] == steps
    rows = fl.recipes.find("test-plans-gpu-rows-lanes16", "reduction")
    for step, old in zip(steps, kept):
        if step.program.has_reduce:
            assert step.plan is not old and step.plan.recipe.name == rows.name


@pytest.mark.parametrize("route", ["general", "device"])
@pytest.mark.parametrize("checking", [False, True])
def test_scatters_are_planned(device, plans, monkeypatch, checking, route):
    """``a[idx] = v``, ``fl.add.at`` and a scatter whose values read its own target are
    replayed with each call's buffers (they were linearised afresh at every call), and
    every replay still checks its indices and writes nothing when one is out of range.

    ``route``: ``general`` gives every scatter the general (Loopy) scatter
    (``FUSELOOP_SCATTER=expr``); ``device`` the route the device takes, with a CPU
    taking a GPU's: ``fl.add.at`` of computed 1-D arrays then runs the hand-written
    kernels of :mod:`fuseloop.ops.scatter_kernel` where it asks for them (an OpenCL
    GPU), which are launched as they are: no evaluation, nothing planned."""
    from fuseloop.ops import index_check, scatter_kernel

    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", checking)
    if route == "general":
        monkeypatch.setenv("FUSELOOP_SCATTER", "expr")
    else:
        monkeypatch.delenv("FUSELOOP_SCATTER", raising=False)
        monkeypatch.setattr(scatter_kernel, "ON_CPU", True)
    monkeypatch.setattr(index_check, "GATE_ON_CPU", True)  # (a GPU's masked scatters)
    rng = np.random.default_rng(5)
    for _ in range(3):
        h = rng.standard_normal(16)
        k = rng.integers(-16, 16, 24)
        v = rng.standard_normal(24)
        # (an assignment's positions distinct, negative indices among them: which of two
        # stores to one position lands is unspecified, in numpy too, and differs on GPUs)
        ks = rng.permutation(16)[:12] - 16 * rng.integers(0, 2, 12)
        x, a, b = fl.asarray(h), fl.asarray(h), fl.asarray(h)
        x[fl.asarray(ks)] = fl.asarray(v[:12]) * 2
        ka, va = fl.asarray(k), fl.asarray(v)
        hand = scatter_kernel.takes(a, ka, va, "add")
        fl.add.at(a, ka, va)
        b[fl.asarray(ks[:8])] = b[fl.asarray(k[8:16])] + 1.0
        rx, ra, rb = h.copy(), h.copy(), h.copy()
        rx[ks] = v[:12] * 2
        np.add.at(ra, k, v)
        rb[ks[:8]] = rb[k[8:16]] + 1.0
        np.testing.assert_array_equal(x.get(), rx)
        np.testing.assert_allclose(a.get(), ra, rtol=1e-12)
        np.testing.assert_array_equal(b.get(), rb)
        with pytest.raises(IndexError):
            fl.add.at(a, fl.asarray(np.r_[k, 16]), fl.asarray(np.r_[v, 1.0]))
        np.testing.assert_allclose(a.get(), ra, rtol=1e-12)

    def scatter_targets(key):  # the target tokens of a key that scatter
        if isinstance(key, tuple):
            if len(key) == 8 and key[0] == "T":
                return [key[7] or "set"] if key[6] else []
            return [t for part in key for t in scatter_targets(part)]
        return []

    found = {t for key, plan in plans.items() if plan for t in scatter_targets(key)}
    assert found == ({"set"} if hand else {"set", "add"}), (route, hand)
    if route == "device" and getattr(device, "backend", "opencl") == "opencl":
        assert hand  # (a CPU taking a GPU's way: the hand-written kernels)


def _kernels_of_plans(plans) -> list:
    return [s.plan.compiled for p in plans.values() if isinstance(p, run_plans._Plan)
            for s in p.steps if s.plan is not None]


def test_new_offsets_reuse_the_kernels_argument_layout_and_launcher(device, plans,
                                                                    monkeypatch):
    # a statement on new offsets of the same kernel and grid (a row loop) launches the
    # one plan of its step that takes the offsets as launch arguments
    # (launching.moving_plan, whose spec is made once, on the second row): no argument
    # sorting, no LaunchSpec per row; at most PLANS_PER_KERNEL plans kept on the kernel
    from fuseloop import launching

    rng = np.random.default_rng(11)
    host = rng.random((40, 9)).astype(np.float32)
    a = fl.asarray(host)
    a[1, 1:] -= a[1, :-1] * 0.25
    host[1, 1:] -= host[1, :-1] * np.float32(0.25)
    fl.synchronize()
    kernels = set(_kernels_of_plans(plans))
    layouts = {k: k.arg_layout for k in kernels}
    assert kernels and None not in layouts.values()
    specs = []
    made = launching.LaunchSpec
    monkeypatch.setattr(launching, "LaunchSpec", lambda *a: specs.append(a) or made(*a))
    for i in range(2, 40):
        a[i, 1:] -= a[i, :-1] * 0.25
        host[i, 1:] -= host[i, :-1] * np.float32(0.25)
    np.testing.assert_allclose(a.get(), host, rtol=1e-6)
    assert len(specs) <= len(kernels), specs
    for compiled, layout in layouts.items():
        assert compiled.arg_layout is layout
        assert 1 <= len(compiled.launch_plans) <= launching.PLANS_PER_KERNEL
        assert len(compiled.launchers) == 1


def test_launchers_kept_per_kernel_are_bounded(device, plans, monkeypatch):
    # one launcher family per grid: a loop over ever new lengths keeps at most
    # LAUNCHERS_PER_KERNEL of them (and plans at most PLANS_PER_KERNEL)
    from fuseloop import launching

    monkeypatch.setattr(launching, "LAUNCHERS_PER_KERNEL", 3)
    monkeypatch.setattr(launching, "PLANS_PER_KERNEL", 4)
    # (kernels built by an earlier test of this process hold launch plans kept under
    # the default bounds)
    fl.clear_caches()
    rng = np.random.default_rng(12)
    host = rng.random(64)
    a = fl.asarray(host)
    for j in range(2, 40, 3):
        a[1:j] += a[:j - 1] * 0.5
        host[1:j] += host[:j - 1] * 0.5
    np.testing.assert_allclose(a.get(), host, rtol=1e-12)
    kernels = set(_kernels_of_plans(plans))
    assert kernels
    for compiled in kernels:
        assert len(compiled.launchers) <= 3 and len(compiled.launch_plans) <= 4
