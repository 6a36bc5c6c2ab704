"""Statements of many views, made again each call (issues 25/26: a stencil's host time).

A cached statement into a view of a buffer it reads is keyed by how the target meets
each view (``signed_keys._target_meets``, whose answer for a statement of many views is
remembered whole): the same statement into a target at another offset meets them
otherwise, and must not take the first's answer (a temporary where the target overlaps
a view it reads, none where it does not).
"""

from __future__ import annotations

import numpy as np

import fuseloop as fl


def _smooth(a, lo, hi):
    # nine views of ``a``: a 3 x 3 box over rows lo..hi-1 (of the columns 1..-1)
    return sum(a[lo + i:hi + i, 1 + j:a.shape[1] - 1 + j]
               for i in (-1, 0, 1) for j in (-1, 0, 1)) / 9.0


def test_a_target_at_another_offset_meets_the_views_otherwise(device_path):
    h = np.random.default_rng(3).random((40, 12), dtype=np.float32)
    for k in range(6):  # the same statement into a disjoint and an overlapping target
        x, want = fl.asarray(h), h.copy()
        lo, hi, at = (20, 30, 21) if k % 2 else (20, 30, 2)
        value = _smooth(want, lo, hi)
        want[at:at + hi - lo, 1:-1] = value
        launched = fl.stats()["kernels_launched"]
        x[at:at + hi - lo, 1:-1] = _smooth(x, lo, hi)
        fl.synchronize()
        # (overlapping: computed into a temporary, then copied; disjoint: in place)
        assert fl.stats()["kernels_launched"] - launched == (2 if k % 2 else 1)
        np.testing.assert_allclose(x.get(), want, rtol=1e-6)
