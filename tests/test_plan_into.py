"""A loop's statement into a view replayed in one frame (``fuseloop.plan_into``): once
its plan is remembered by signature and made ready (a Ready, or a Moving for views at
new offsets), the assignment replays it without ``evaluate.run``; anything else takes
that route, with numpy's results either way."""

from __future__ import annotations

import launch_counts
import numpy as np
import pytest

import fuseloop as fl
from fuseloop import assignment, host_path, run_plans


@pytest.fixture
def general_runs(monkeypatch):
    """Small work is not computed by numpy on the host (plans are replayed); the
    assignments' calls of ``evaluate.run`` and the general replays, counted."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    calls: list[str] = []
    for owner, name in ((assignment, "run"), (run_plans, "_replay")):
        real = getattr(owner, name)

        def counted(*args, real=real, name=name, **kw):
            calls.append(name)
            return real(*args, **kw)

        monkeypatch.setattr(owner, name, counted)
    run_plans.clear()
    return calls


def test_a_statement_into_a_moving_view_skips_the_general_route(device, general_runs):
    rng = np.random.default_rng(5)
    n = 20
    h = rng.random((n, n))
    a = fl.asarray(h)

    def sweep(rows: range) -> None:
        for i in rows:  # (seidel_2d's row update, a view at a new offset each statement)
            a[i, 1:-1] = a[i, 1:-1] + 0.5 * (a[i - 1, :-2] + a[i + 1, 2:])
            h[i, 1:-1] = h[i, 1:-1] + 0.5 * (h[i - 1, :-2] + h[i + 1, 2:])

    sweep(range(1, 5))  # (recorded; replayed, made a Ready; replayed, made a Moving)
    assert general_runs == ["run", "_replay", "_replay", "_replay"]
    del general_runs[:]
    counted = launch_counts.counted(lambda: sweep(range(5, n - 1)))
    assert not general_runs
    assert counted.launches == n - 6 and counted["plans_walked"] == 0
    assert counted["plans_replayed"] == n - 6 and counted["kernels_compiled"] == 0
    np.testing.assert_allclose(a.get(), h, rtol=1e-12)


def test_a_new_statement_and_a_mask_take_the_general_route(device, general_runs):
    h = np.arange(30.0)
    x = fl.asarray(h)
    for k in range(4):
        x[1:] = x[:-1] * 0.5 + k  # (the value overlaps the target: a temporary)
        h[1:] = h[:-1] * 0.5 + k
    # (its first statement walked and recorded, its second made ready: then in one frame)
    assert general_runs == ["run", "_replay", "_replay"]
    x[x > 3.0] = 0.0  # (a mask: not a plain view's statement)
    h[h > 3.0] = 0.0
    del general_runs[:]
    x[2:5] = x[10:13] * 2.0  # (a new structure: the general route)
    h[2:5] = h[10:13] * 2.0
    assert general_runs[:1] == ["run"]
    np.testing.assert_allclose(x.get(), h, rtol=1e-12)
    del general_runs[:]
    for k in range(3):
        x[1:] = x[:-1] * 0.5 + k  # (ready: one frame)
        h[1:] = h[:-1] * 0.5 + k
    assert not general_runs
    np.testing.assert_allclose(x.get(), h, rtol=1e-12)
