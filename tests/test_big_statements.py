"""Statements of many views, made again each call (issues 25/26: a stencil's host time).

A cached statement into a view of a buffer it reads is keyed by how the target meets
each view (``signed_keys._target_meets``, whose answer for a statement of many views is
remembered whole): the same statement into a target at another offset meets them
otherwise, and must not take the first's answer (a temporary where the target overlaps
a view it reads, none where it does not).
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate
from fuseloop.expr.nodes import Leaf


def _smooth(a, lo, hi):
    # nine views of ``a``: a 3 x 3 box over rows lo..hi-1 (of the columns 1..-1)
    return sum(a[lo + i:hi + i, 1 + j:a.shape[1] - 1 + j]
               for i in (-1, 0, 1) for j in (-1, 0, 1)) / 9.0


@pytest.mark.parametrize("one_group", [False, True], ids=["temporary", "one-group"])
def test_a_target_at_another_offset_meets_the_views_otherwise(device_path, one_group,
                                                               monkeypatch):
    # (without one work-group an overlapping target takes a temporary and a copy, which
    # the launch count shows; with it, both take one launch and only the values tell)
    if not one_group:
        monkeypatch.setattr(evaluate, "_one_group", lambda *args: False)
    fl.clear_caches()  # (run plans recorded under the other rule would replay its launches)
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
        assert fl.stats()["kernels_launched"] - launched == (2 if k % 2 and not one_group
                                                             else 1)
        np.testing.assert_allclose(x.get(), want, rtol=1e-6)


def _leaves(node):
    if isinstance(node, Leaf):
        return [node]
    return [a for arg in getattr(node, "args", ()) for a in _leaves(arg)]


def test_several_roots_sharing_views_at_new_offsets(device_path):
    """Roots evaluated together whose views' offsets are partly the same (where a later
    root's land among the earlier ones' is part of the key, with their joined views):
    each row's statement reads its own rows, and later rows replay the plan without a
    walk."""
    from fuseloop import signed_keys

    h, g = np.random.default_rng(4).random((2, 9, 16), dtype=np.float32)
    x, y = fl.asarray(h), fl.asarray(g)
    walked = []
    for i in range(6):
        roots = (x[i, ::2] * 2.0 - y[i + 1, :8], x[i + 1, 1::2] + x[i, ::2],
                 x[i + 2, :8] - y[i + 1, :8])
        # each joined view (shape, strides, which offset) is one of the roots' leaves
        _, views, offs, _ = signed_keys._free_views([r._node for r in roots])
        leaves = {(a.shape, a.strides, a.offset) for r in roots for a in _leaves(r._node)}
        assert {(shape, strides, offs[k]) for shape, strides, k in views} == leaves
        got = fl.compute(*roots)
        want = (h[i, ::2] * 2 - g[i + 1, :8], h[i + 1, 1::2] + h[i, ::2],
                h[i + 2, :8] - g[i + 1, :8])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.get(), b, rtol=1e-6)
        walked.append(fl.stats()["plans_walked"])
    assert walked[-1] == walked[1]
