"""Parts past int32 byte indexing replayed without a walk (issue 29): at 2**30 float32
over two GPUs each part is 2 GiB, one byte past what int32 indexes, and every call of
such a part walked its structure.  Here the limit is lowered so that small buffers
count as wide (the same rule at any size): later calls replay by signature and the
flat path, int64 launches only over wide buffers, results numpy's."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import plan_ready

#: bytes a buffer may have and still be indexed in int32, for this file's tests
LIMIT = (1 << 16) - 1
_MODULES = ("fuseloop.launching", "fuseloop.run_plans", "fuseloop.evaluate",
            "fuseloop.plan_ready", "fuseloop.plan_lengths", "fuseloop.prebuild",
            "fuseloop.passes.build", "fuseloop.multi.replay", "fuseloop.multi.calls")


@pytest.fixture
def wide_limit(monkeypatch):
    for name in _MODULES:
        monkeypatch.setattr(importlib.import_module(name), "INT32_LIMIT", LIMIT)
    return LIMIT


def _ready_runs(monkeypatch):
    """The widest input buffer of each replay through a plan's int32 Ready."""
    seen: list[int] = []
    real = plan_ready.Ready.run

    def run(self, storages, scalars, device):
        seen.append(max((s.nbytes for s in storages), default=0))
        return real(self, storages, scalars, device)

    monkeypatch.setattr(plan_ready.Ready, "run", run)
    return seen


def test_wide_split_parts_replay_without_walk(three, wide_limit, monkeypatch):
    """A split sum and elementwise expression over wide parts: from the second call on
    no part walks and every part is launched by the split replay."""
    from fuseloop.multi import calls
    from fuseloop.multi import replay as multi_replay

    rng = np.random.default_rng(5)
    xn, yn = rng.random(60000, np.float32), rng.random(60000, np.float32)
    with fl.device(three):
        x, y = fl.asarray(xn), fl.asarray(yn)
    assert all(p.nbytes > LIMIT for p in x.parts)
    for _ in range(2):
        float(fl.sum(x * y))
        (2 * x - fl.sin(y) + x * y).eval()
    for _ in range(2):
        fl.reset_stats()
        found = calls.COUNTS[0]
        total = float(fl.sum(x * y))
        assert multi_replay.LAST_FAST[0] == 3
        e = (2 * x - fl.sin(y) + x * y).eval()
        assert multi_replay.LAST_FAST[0] == 3
        assert calls.COUNTS[0] == found + 2  # (both calls kept whole)
        assert fl.stats()["plans_walked"] == 0
        assert fl.stats()["kernels_compiled"] == 0
        np.testing.assert_allclose(total, np.dot(xn.astype(np.float64), yn), rtol=1e-5)
        np.testing.assert_allclose(e.get(), 2 * xn - np.sin(yn) + xn * yn, rtol=1e-5,
                                   atol=1e-6)


def test_wide_and_narrow_buffers_of_one_signature(device_path, wide_limit, monkeypatch):
    """A reduction over a narrow buffer and over an equal-shaped view of a wide one (one
    signature, one plan): each replays without a walk once met, the wide one never
    through the narrow one's int32 Ready."""
    rng = np.random.default_rng(6)
    an = rng.random(4000, np.float32)
    bn = rng.random(40000, np.float32)
    a = fl.asarray(an, device=device_path)
    big = fl.asarray(bn, device=device_path)
    b = big[:4000]
    assert a.nbytes <= LIMIT < big.nbytes
    seen = _ready_runs(monkeypatch)
    for _ in range(3):
        for v, vn in ((a, an), (b, bn[:4000])):
            np.testing.assert_allclose(float(fl.sum(v * v + 1)),
                                       np.sum(vn.astype(np.float64) ** 2 + 1), rtol=1e-5)
    fl.reset_stats()
    for v in (a, b, a, b):
        float(fl.sum(v * v + 1))
    assert fl.stats()["plans_walked"] == 0
    assert seen and max(seen) <= LIMIT
