"""Split calls' parts launched from prepared launches (issue 29: ``multi.replay._Prepared``):
one per part, the results numpy's, a new or written input seen."""

from __future__ import annotations

import threading

import numpy as np

import fuseloop as fl
from fuseloop import host_path
from fuseloop.multi import replay as multi_replay

LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)


def _launches(monkeypatch):
    """The devices of the parts launched from a prepared launch, in order."""
    seen: list = []
    real = multi_replay._Staged.__init__

    def staged(self, device, counted, general=None, prepared=None, *args, **kwargs):
        if prepared is not None:  # (a launch staged from a prepared one)
            seen.append(device)
        real(self, device, counted, general, prepared, *args, **kwargs)

    monkeypatch.setattr(multi_replay._Staged, "__init__", staged)
    return seen


def test_split_sum_parts_launched_prepared(three, monkeypatch):
    """From the second fl.sum of a structure on, each part is one prepared launch, the
    first call's kernels; new arrays of the same shapes and a write across a part
    boundary give fresh sums."""
    rng = np.random.default_rng(3)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    fl.reset_stats()
    float(fl.sum(x * y))
    launched = fl.stats()["kernels_launched"]
    seen = _launches(monkeypatch)
    for _ in range(2):
        fl.reset_stats()
        total = float(fl.sum(x * y))
        assert [d.index for d in seen] == [d.index for d in three]
        assert fl.stats()["kernels_launched"] == launched
        np.testing.assert_allclose(total, np.dot(xn.astype(np.float64), yn), rtol=1e-5)
        seen.clear()
    x[9990:10010] = 2.0  # (across the first two parts' boundary)
    xn[9990:10010] = 2.0
    np.testing.assert_allclose(float(fl.sum(x * y)), np.dot(xn.astype(np.float64), yn),
                               rtol=1e-5)
    zn = rng.random(30000, np.float32)
    with fl.device(three):
        z = fl.asarray(zn)
    seen.clear()
    np.testing.assert_allclose(float(fl.sum(z * y)), np.dot(zn.astype(np.float64), yn),
                               rtol=1e-5)
    assert len(seen) == 3


def test_split_sum_parts_write_held_buffers(three, monkeypatch):
    """A kept split sum combined on the host launches its parts onto the buffers the kept
    call holds (``replay._Held``): from its second kept call on no part allocates its
    temporaries and result, nor (a part of one launch, ``_Held.one``) makes its pool and
    argument lists; writes, new arrays and two structures in turn give numpy's sums."""
    rng = np.random.default_rng(6)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    made: list[int] = []
    real = multi_replay.temporaries

    def temporaries(allocs, *args):
        made.append(len(allocs))
        return real(allocs, *args)

    def dot(a, b):
        return np.dot(a.astype(np.float64), b)

    for _ in range(3):  # (built, kept, held)
        float(fl.sum(x * y))
        float(fl.sum(x * x))
    monkeypatch.setattr(multi_replay, "temporaries", temporaries)
    listed: list[int] = []
    real_calls = multi_replay._step_calls
    monkeypatch.setattr(multi_replay, "_step_calls",
                        lambda steps, *a: listed.append(len(steps)) or real_calls(steps, *a))
    for _ in range(2):
        np.testing.assert_allclose(float(fl.sum(x * y)), dot(xn, yn), rtol=1e-5)
        np.testing.assert_allclose(float(fl.sum(x * x)), dot(xn, xn), rtol=1e-5)
    assert made == []
    assert listed == []  # (each part one launch onto held buffers: _Held.one)
    x[9990:10010] = 3.0  # (across the first two parts' boundary: the same buffers)
    xn[9990:10010] = 3.0
    np.testing.assert_allclose(float(fl.sum(x * y)), dot(xn, yn), rtol=1e-5)
    zn = rng.random(30000, np.float32)
    with fl.device(three):
        z = fl.asarray(zn)
    for _ in range(2):
        np.testing.assert_allclose(float(fl.sum(z * y)), dot(zn, yn), rtol=1e-5)
    np.testing.assert_allclose(float(fl.sum(x * x)), dot(xn, xn), rtol=1e-5)
    assert made == []


def test_split_sum_parts_hold_few_bytes(three, monkeypatch):
    """A part whose new buffers pass ``replay.HELD_MAX_BYTES`` holds none: each call
    allocates them again (the kept call does not keep large buffers alive)."""
    monkeypatch.setattr(multi_replay, "HELD_MAX_BYTES", 0)
    rng = np.random.default_rng(7)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(3):
        float(fl.sum(x * y))
    made: list[int] = []
    real = multi_replay.temporaries
    monkeypatch.setattr(multi_replay, "temporaries",
                        lambda allocs, *a: made.append(len(allocs)) or real(allocs, *a))
    np.testing.assert_allclose(float(fl.sum(x * y)), np.dot(xn.astype(np.float64), yn),
                               rtol=1e-5)
    assert len(made) == 3


def test_split_stencil_parts_launched_prepared(three, monkeypatch):
    """A stencil step's parts are prepared launches once their plans are known; a new
    grid of the same shape gives its own step, rows across the boundaries included."""
    rng = np.random.default_rng(4)

    def want(a):
        lap = sum(np.roll(a, s, axis) for s in (1, -1) for axis in (0, 1)) - 4 * a
        return a + np.float32(0.1) * lap

    def step(u):
        return u + np.float32(0.1) * fl.stencil(u, LAPLACE, boundary="wrap")

    un = rng.standard_normal((150, 100)).astype(np.float32)
    with fl.device(three):
        u = fl.asarray(un)
    step(u).eval()
    seen = _launches(monkeypatch)
    np.testing.assert_allclose(step(u).get(), want(un), rtol=1e-5, atol=1e-5)
    assert [d.index for d in seen] == [d.index for d in three]
    vn = rng.standard_normal((150, 100)).astype(np.float32)
    with fl.device(three):
        v = fl.asarray(vn)
    seen.clear()
    np.testing.assert_allclose(step(v).get(), want(vn), rtol=1e-5, atol=1e-5)
    assert len(seen) == 3


def test_prepared_launch_checked_at_each_call(three, monkeypatch):
    """A prepared launch is not used from another thread, nor once its kernel left the
    memory cache: those parts take the general replay, with the same results."""
    rng = np.random.default_rng(5)
    xn, yn = rng.random(3000, np.float32), rng.random(3000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    want = np.dot(xn.astype(np.float64), yn)
    float(fl.sum(x * y))
    float(fl.sum(x * y))
    seen = _launches(monkeypatch)
    got: list[float] = []
    worker = threading.Thread(target=lambda: got.append(float(fl.sum(x * y))))
    worker.start()
    worker.join()
    np.testing.assert_allclose(got, [want], rtol=1e-5)
    assert seen == []
    first = next(iter(multi_replay._PREPARED.values()))
    monkeypatch.setattr(first.compiled[0], "in_cache", False)
    np.testing.assert_allclose(float(fl.sum(x * y)), want, rtol=1e-5)
    assert first.device not in seen and len(seen) == 2


def test_kept_stencil_copies_cover_every_node_kind():
    """Every node kind a kept stencil part is moved through has a copier whose slots are
    the class's (a slot added to a node class would turn the move off for it)."""
    from fuseloop.multi import windows

    assert set(windows._COPY) == set(windows._COPIERS)


def test_split_parts_staged_before_the_first_enqueue(three, monkeypatch):
    """A split call's known parts (an elementwise expression's, a sum's partials) are all
    staged (plan looked up, output allocated, arguments listed) before the first part is
    enqueued, then enqueued back to back: one kernel each, numpy's results."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)  # (the device path, as on a GPU)
    order: list[str] = []
    real_stage, real_flat, real_launch = (multi_replay._Staged.__init__,
                                          multi_replay._stage_flat,
                                          multi_replay._Staged._launch)

    def stage(self, device, counted, general=None, prepared=None, *args, **kwargs):
        if prepared is not None:  # (a launch staged from a prepared one)
            order.append("stage")
        real_stage(self, device, counted, general, prepared, *args, **kwargs)

    def stage_flat(*args):
        got = real_flat(*args)
        order.append("stage" if got is not None else "none")
        return got

    def launch(self):
        order.append("launch")
        return real_launch(self)

    monkeypatch.setattr(multi_replay._Staged, "__init__", stage)
    monkeypatch.setattr(multi_replay, "_stage_flat", stage_flat)
    monkeypatch.setattr(multi_replay._Staged, "_launch", launch)
    rng = np.random.default_rng(6)
    xn, yn = rng.random(3000, np.float32), rng.random(3000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(2):  # (the first call builds and records, the second replays)
        order.clear()
        fl.reset_stats()
        e = (2 * x - fl.sin(y) + x * y).eval()
    assert order == ["stage"] * 3 + ["launch"] * 3
    assert fl.stats()["kernels_launched"] == 3
    np.testing.assert_allclose(e.get(), 2 * xn - np.sin(yn) + xn * yn, rtol=1e-5, atol=1e-6)
    for _ in range(2):
        order.clear()
        total = float(fl.sum(x * y))
    assert order == ["stage"] * 3 + ["launch"] * 3
    np.testing.assert_allclose(total, np.dot(xn.astype(np.float64), yn), rtol=1e-5)


def test_split_outputs_allocated_without_the_recent_walk(three, monkeypatch):
    """A split call's part outputs and temporaries come from the pool without first
    letting go of the recent lazy arrays (``evaluate.RELEASE_RECENT_AT``, here every
    buffer): that walk would register the expression's own parts as readers before the
    first part launched.  Results are numpy's, and a write after the call is seen."""
    from fuseloop import evaluate, plan_steps

    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)  # (the device path, as on a GPU)
    monkeypatch.setattr(evaluate, "RELEASE_RECENT_AT", 1)
    walks: list[int] = []
    real = evaluate.register_readers

    def walk():
        walks.append(1)
        real()

    monkeypatch.setattr(evaluate, "register_readers", walk)
    monkeypatch.setattr(plan_steps, "register_readers", walk)
    rng = np.random.default_rng(8)
    xn, yn = rng.random(3000, np.float32), rng.random(3000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(3):  # (the first call builds and records; the others replay)
        walks.clear()
        e = (2 * x - fl.sin(y) + x * y).eval()
        total = float(fl.sum(x * y))
    assert walks == []
    np.testing.assert_allclose(e.get(), 2 * xn - np.sin(yn) + xn * yn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(total, np.dot(xn.astype(np.float64), yn), rtol=1e-5)
    x[2990:3000] = 3.0  # (the last part's rows)
    xn[2990:3000] = 3.0
    np.testing.assert_allclose((x * y).get(), xn * yn, rtol=1e-6)
    np.testing.assert_allclose(float(fl.sum(x * y)), np.dot(xn.astype(np.float64), yn),
                               rtol=1e-5)


def test_split_output_refused_by_the_pool(three, monkeypatch):
    """A part output the pool refuses is allocated by ``evaluate.allocate`` (which lets
    go of the recent lazy arrays and tries again): the call's results are numpy's."""
    from fuseloop.errors import OutOfMemoryError
    from fuseloop.runtime.devices import _runtime

    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    rng = np.random.default_rng(9)
    xn, yn = rng.random(3000, np.float32), rng.random(3000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(2):
        (x * y + 1).eval()
        float(fl.sum(x * y))
    pool = _runtime(three[1]).pool
    real = type(pool).allocate
    refused: list[int] = []

    def refuse(self, nbytes):
        if self is pool and not refused:
            refused.append(nbytes)
            raise OutOfMemoryError("refused once (test)")
        return real(self, nbytes)

    monkeypatch.setattr(type(pool), "allocate", refuse)
    np.testing.assert_allclose((x * y + 1).get(), xn * yn + 1, rtol=1e-6)
    assert refused
    refused.clear()
    np.testing.assert_allclose(float(fl.sum(x * y)), np.dot(xn.astype(np.float64), yn),
                               rtol=1e-5)
    assert refused
