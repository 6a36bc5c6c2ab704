"""A split full reduction combined on the host folds each part's partial result into the
first as its read is done (issue 29: after the last part's read only its own fold is
left, not a reduction over every partial), with numpy's results for every combining
reduction, wrapping integer sums and empty parts included."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_path
from fuseloop.multi import array as multi_array
from fuseloop.multi import reduce as multi_reduce


@pytest.fixture
def split(three, monkeypatch):
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)  # (the device path, as on a GPU)
    return three


class _Recorded:
    """``np.add`` with its calls and reductions written to ``log``."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __call__(self, *args, **kwargs):
        self.log.append("fold")
        return np.add(*args, **kwargs)

    def reduce(self, *args, **kwargs):
        self.log.append("reduce")
        return np.add.reduce(*args, **kwargs)


def test_partials_folded_as_their_reads_are_done(split, monkeypatch):
    rng = np.random.default_rng(29)
    xn, yn = rng.random(30000, np.float32), rng.random(30000, np.float32)
    with fl.device(split):
        x, y = fl.asarray(xn), fl.asarray(yn)
    want = np.dot(xn.astype(np.float64), yn)
    for _ in range(2):  # (the first call builds, the second replays the kept call)
        float(fl.sum(x * y))
    log: list[str] = []
    real_wait = multi_array.wait
    monkeypatch.setattr(multi_array, "wait", lambda *a: log.append("wait") or real_wait(*a))
    monkeypatch.setitem(multi_reduce._COMBINE, "sum", _Recorded(log))
    for _ in range(2):
        log.clear()
        np.testing.assert_allclose(float(fl.sum(x * y)), want, rtol=1e-5)
        # (each later partial folded once its read is done, before the next wait)
        assert log == ["wait", "wait", "fold", "wait", "fold"]


def test_folded_reductions_equal_numpy(split):
    rng = np.random.default_rng(30)
    an = rng.integers(-100, 100, 3001).astype(np.int8)
    fn = rng.standard_normal((3001, 3)).astype(np.float32)
    with fl.device(split):
        a, f = fl.asarray(an), fl.asarray(fn)
    small = a[:1000]  # (rows on the first device only: the others' parts empty)
    assert [p.shape[0] for p in small.parts] == [1000, 0, 0]
    cases = [(fl.sum(a, dtype=np.int8), an.sum(dtype=np.int8)),  # (wraps, as numpy's)
             (fl.sum(a), an.sum()), (fl.max(a), an.max()), (fl.min(a), an.min()),
             (fl.prod(a[:9] % 3 + 1), np.prod(an[:9] % 3 + 1)),
             (fl.any(a > 98), (an > 98).any()), (fl.all(a > -101), True),
             (fl.count_nonzero(a), np.count_nonzero(an)), (fl.max(small), an[:1000].max()),
             (fl.sum(f, axis=0), fn.sum(axis=0)),
             (fl.max(f, axis=0, keepdims=True), fn.max(axis=0, keepdims=True))]
    for got, want in cases:
        got = np.asarray(got)
        assert got.dtype == np.asarray(want).dtype and got.shape == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-5)
