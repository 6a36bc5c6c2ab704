"""Split calls kept whole (issue 29: ``fuseloop.multi.calls``): from the second call of a
structure over the same split, every part is staged from the kept call in one look-up
(no per-part plan look-up), with the same launches and numpy's results; new buffers, a
write, another split or another thread never meet a stale buffer."""

from __future__ import annotations

import textwrap
import threading

import numpy as np
import pytest
from test_multi_context import _TWO_POCL, _run_child

import fuseloop as fl
from fuseloop import host_path
from fuseloop import run_plans as _rp
from fuseloop.multi import calls
from fuseloop.multi import replay as multi_replay


@pytest.fixture
def split(three, monkeypatch):
    """Three devices (the device and two twins), the device path (as on a GPU)."""
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    return three


def _no_part_lookups(monkeypatch):
    """Count the per-part look-ups (a part's run plan by its signed key)."""
    seen: list[int] = []
    real = _rp.signed_of

    def signed_of(*args):
        seen.append(1)
        return real(*args)

    monkeypatch.setattr(_rp, "signed_of", signed_of)
    return seen


def _dot(a, b):
    return np.dot(a.astype(np.float64), b)


def test_split_sum_found_whole(split, monkeypatch):
    """The third fl.sum of x*y is one kept call: no part looked up, the same launches
    (three partials and the combine), numpy's sum; new arrays of the same split and a
    write across a part boundary are read afresh."""
    rng = np.random.default_rng(11)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(split):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(2):
        float(fl.sum(x * y))
    fl.reset_stats()
    float(fl.sum(x * y))
    launched = fl.stats()["kernels_launched"]
    lookups = _no_part_lookups(monkeypatch)
    found = calls.COUNTS[0]
    fl.reset_stats()
    total = float(fl.sum(x * y))
    assert calls.COUNTS[0] == found + 1 and lookups == []
    # (the partials, combined on the host: a full reduction's are, see test_multi_order)
    assert fl.stats()["kernels_launched"] == launched == 3
    np.testing.assert_allclose(total, _dot(xn, yn), rtol=1e-5)
    x[9990:10010] = 3.0  # (across the first two parts' boundary)
    xn[9990:10010] = 3.0
    np.testing.assert_allclose(float(fl.sum(x * y)), _dot(xn, yn), rtol=1e-5)
    zn = rng.random(30000, np.float32)
    with fl.device(split):
        z = fl.asarray(zn)
    np.testing.assert_allclose(float(fl.sum(z * y)), _dot(zn, yn), rtol=1e-5)
    np.testing.assert_allclose(float(fl.sum(y * z)), _dot(zn, yn), rtol=1e-5)


_COMBINED = textwrap.dedent('''
    import numpy as np
    import fuseloop as fl
    from fuseloop.multi import EXCHANGED
''') + _TWO_POCL + textwrap.dedent('''
    assert d0.context is d1.context
    rng = np.random.default_rng(15)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device([d0, d1]):
        x, y = fl.asarray(xn), fl.asarray(yn)
    want = np.dot(xn.astype(np.float64), yn)
    for k in range(4):
        copies = EXCHANGED["copies"]
        fl.reset_stats()
        r = fl.sum(x * y)
        print("call", k, r.is_lazy, fl.stats()["kernels_launched"],
              EXCHANGED["copies"] - copies)
        np.testing.assert_allclose(float(r), want, rtol=1e-5)
    x[14990:15010] = 4.0  # (across the boundary)
    xn[14990:15010] = 4.0
    np.testing.assert_allclose(float(fl.sum(x * y)), np.dot(xn.astype(np.float64), yn),
                               rtol=1e-5)
    print("ok")
''')


def test_split_sum_combined_on_device_kept():
    """Partial sums combined on the first device (two PoCL devices of one context, in a
    child process; a full reduction's with ``FUSELOOP_MULTI_HOST_COMBINE=0``): from the
    third call the combine is kept too (the copy, then one launch: the result evaluated
    at once), with the launches and copies of the general combine (two partials, the
    combine's launch at the read), numpy's sums."""
    out = _run_child(_COMBINED, FUSELOOP_OPENCL_SHARED_CONTEXT="1",
                     FUSELOOP_MULTI_HOST_COMBINE="0")
    lines = [line.split()[2:] for line in out.splitlines() if line.startswith("call")]
    assert lines == [["True", "2", "1"]] * 2 + [["False", "3", "1"]] * 2, out


def test_split_eval_found_whole(split, monkeypatch):
    """An elementwise expression's parts, evaluated again: one kept call, one launch per
    part; other inputs of the same split give their own values."""
    rng = np.random.default_rng(12)
    xn, yn, zn = (rng.random(30000, np.float32) for _ in range(3))
    with fl.device(split):
        x, y, z = fl.asarray(xn), fl.asarray(yn), fl.asarray(zn)

    def f(a, b):
        return 2 * a - fl.sin(b) + a * b

    for _ in range(2):
        f(x, y).eval()
    found = calls.COUNTS[0]
    fl.reset_stats()
    e = f(x, y).eval()
    assert calls.COUNTS[0] == found + 1
    assert fl.stats()["kernels_launched"] == 3
    np.testing.assert_allclose(e.get(), 2 * xn - np.sin(yn) + xn * yn, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f(z, x).eval().get(), 2 * zn - np.sin(xn) + zn * xn,
                               rtol=1e-5, atol=1e-6)
    # (the same structure with one operand twice: picked as the kept launch's picker says)
    np.testing.assert_allclose(f(x, x).eval().get(), 2 * xn - np.sin(xn) + xn * xn,
                               rtol=1e-5, atol=1e-6)


def test_other_split_other_call(split):
    """Arrays split otherwise (other weights: other part shapes) are another call, never
    the kept one's buffers or sizes."""
    rng = np.random.default_rng(13)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(split):
        x, y = fl.asarray(xn), fl.asarray(yn)
    with fl.device(split, weights=[1, 2, 3]):
        u, v = fl.asarray(xn), fl.asarray(yn)
    assert u.bounds != x.bounds
    for _ in range(3):
        np.testing.assert_allclose(float(fl.sum(x * y)), _dot(xn, yn), rtol=1e-5)
        np.testing.assert_allclose(float(fl.sum(u * v)), _dot(xn, yn), rtol=1e-5)
        np.testing.assert_allclose((x * y + 1).get(), xn * yn + 1, rtol=1e-6)
        np.testing.assert_allclose((u * v + 1).get(), xn * yn + 1, rtol=1e-6)


def test_kept_call_from_another_thread(split):
    """A kept call made in one thread is not staged from another (its kernel objects are
    the first thread's): that thread's call stages its parts itself, same results."""
    rng = np.random.default_rng(14)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(split):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for _ in range(3):
        float(fl.sum(x * y))
        (x * y + 1).eval()
    got: list = []

    def work():
        got.append(float(fl.sum(x * y)))
        got.append((x * y + 1).get())

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    np.testing.assert_allclose(got[0], _dot(xn, yn), rtol=1e-5)
    np.testing.assert_allclose(got[1], xn * yn + 1, rtol=1e-6)
    # (this thread's next call stages its parts and keeps the call again, the one after
    # finds it whole)
    for hits in (0, 1):
        found = calls.COUNTS[0]
        np.testing.assert_allclose(float(fl.sum(x * y)), _dot(xn, yn), rtol=1e-5)
        assert multi_replay.LAST_FAST[0] == 3 and calls.COUNTS[0] == found + hits
        found = calls.COUNTS[0]
        np.testing.assert_allclose((x * y + 1).get(), xn * yn + 1, rtol=1e-6)
        assert multi_replay.LAST_FAST[0] == 3 and calls.COUNTS[0] == found + hits


def test_moving_views_are_not_replayed_at_stale_offsets(split):
    """Column windows of arrays split by rows: every part is a view of the same shape at
    a moving offset, and signatures leave offsets out, so a kept call serves only the
    offsets it was kept under (the sum's and an evaluation's parts)."""
    rng = np.random.default_rng(5)
    xn, yn = rng.random((300, 200), np.float32), rng.random((300, 200), np.float32)
    with fl.device(split):
        x, y = fl.asarray(xn), fl.asarray(yn)
    for s in (0, 0, 0, 7, 7, 7, 3, 0):
        xs, ys = xn[:, s:s + 100], yn[:, s:s + 100]
        got = float(fl.sum(x[:, s:s + 100] * y[:, s:s + 100]))
        np.testing.assert_allclose(got, _dot(xs.ravel(), ys.ravel()), rtol=1e-5)
        ev = (2 * x[:, s:s + 100] - y[:, s:s + 100]).get()
        np.testing.assert_allclose(ev, 2 * xs - ys, rtol=1e-6)
