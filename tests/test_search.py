"""Expression DAGs whose nodes are read more than once (issue 27): every walk over a
DAG visits a shared subtree once, so evaluating a chain of k dependent steps costs O(k),
not O(2^k)."""

import os
import sys

import numpy as np

import fuseloop as fl
from fuseloop import ufuncs
from fuseloop.array import Array
from fuseloop.expr.nodes import Gather

_PACKAGE = os.path.dirname(fl.__file__)


def _chain(table: Array, x: Array, steps: int) -> Array:
    """``steps`` dependent unchecked gathers; each step's position is read twice by the
    next (``pos + h`` as the gather's index and ``pos`` in the select)."""
    m = table.shape[0]
    pos = ufuncs.astype(x < x, np.int64)
    for k in range(steps):
        h = 1 << (k % 4)
        at = ufuncs.FUNCTIONS["minimum"](pos + h, m - 1)
        got = Array._lazy(Gather(table._node, at._node, 0, checked=False), x.device)
        pos = ufuncs.where(got <= x, at, pos)
    return pos


def _fuseloop_calls(fn) -> int:
    """Python function calls inside fuseloop's own modules while ``fn`` runs."""
    count = 0

    def hook(frame, event, arg):
        nonlocal count
        if event == "call" and frame.f_code.co_filename.startswith(_PACKAGE):
            count += 1

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def _numpy_chain(table, x, steps):
    pos = np.zeros(x.shape, np.int64)
    for k in range(steps):
        at = np.minimum(pos + (1 << (k % 4)), len(table) - 1)
        pos = np.where(table[at] <= x, at, pos)
    return pos


def test_shared_subtrees_are_walked_once(device):
    # a tree walk of this DAG makes 2^steps visits; the evaluation's work must grow
    # linearly with the steps (16 steps took minutes when walks were trees)
    rng = np.random.default_rng(0)
    table, xs = np.sort(rng.random(40)), rng.random(64)
    t, x = fl.asarray(table, device=device), fl.asarray(xs, device=device)
    calls = {}
    for steps in (6, 12):
        out = _chain(t, x, steps)
        calls[steps] = _fuseloop_calls(out.eval)
        np.testing.assert_array_equal(out.get(), _numpy_chain(table, xs, steps))
    assert calls[12] < 2 * calls[6], calls
