"""Binary-search searchsorted / isin (issue 27) and expression DAGs whose nodes are read
more than once: every walk over a DAG visits a shared subtree once, so building and
lowering a chain of k dependent steps costs O(k), not O(2^k)."""

import os
import re
import sys

import numpy as np
import pytest

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
        y = fl.zeros(64, device=device)

        def run(out=out, y=y, steps=steps):
            out.eval()
            # (a store under a lazy mask)
            fl.compute(y + 1.0, out=y, where=_chain(t, x, steps) > 3)

        calls[steps] = _fuseloop_calls(run)
        ref = _numpy_chain(table, xs, steps)
        np.testing.assert_array_equal(out.get(), ref)
        np.testing.assert_array_equal(y.get(), (ref > 3).astype(float))
    assert calls[12] < 2 * calls[6], calls


def test_binary_search_kernel_reads_each_step_once(device):
    # one gather of the sorted values per halving, each position computed once
    s = fl.asarray(np.arange(1000.0), device=device)
    v = fl.asarray(np.linspace(-1, 1001, 50), device=device)
    src = fl.show_code(fl.searchsorted(s, v, side="right"))
    steps = (1000).bit_length()
    assert len(re.findall(r"\bin\d+\[fl_cast", src)) == steps, src
    # each temporary is assigned once: the kernel is a straight line of the steps
    assigned = [line.split("=")[0].strip() for line in src.splitlines()
                if line.strip().startswith("t") and "=" in line]
    assert len(assigned) == len(set(assigned)) and len(src) < 12000, src


_NAN = np.nan


@pytest.mark.parametrize("a, v", [
    (np.array([1., 2, 2, 2, 3, _NAN, _NAN]),
     np.array([_NAN, 0, 1, 2, 2.5, 3, 4, -np.inf, np.inf])),  # duplicates, NaN both sides
    (np.array([1, 3, 3, 7], np.int32), np.array([[0, 3], [7, 8]], np.int64)),  # 2-D values
    (np.array([1, 3, 3, 7]), np.array([0.5, 3.0, 7.5, _NAN])),  # ints searched by floats
    (np.array([], np.float64), np.array([1.0, 2.0])),  # empty
])
def test_searchsorted_matches_numpy(device, a, v):
    for side in ("left", "right"):
        got = fl.searchsorted(fl.asarray(a, device=device), fl.asarray(v, device=device),
                              side=side).get()
        np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))
        assert got.shape == v.shape and got.dtype == np.int64


def test_searchsorted_sorter_and_scalar(device):
    a = np.array([5.0, 1.0, 3.0, 3.0, 9.0, _NAN])
    perm = np.argsort(a, kind="stable")
    v = np.array([3.0, 0.0, 10.0, _NAN])
    got = fl.searchsorted(fl.asarray(a, device=device), fl.asarray(v, device=device),
                          side="right", sorter=fl.asarray(perm, device=device))
    np.testing.assert_array_equal(got.get(), np.searchsorted(a, v, side="right", sorter=perm))
    got = fl.searchsorted(fl.asarray(np.sort(a), device=device), 3.0)
    assert got.shape == () and int(got.get()) == np.searchsorted(np.sort(a), 3.0)
    # a computed x1 (evaluated once) and host data for x1
    got = fl.searchsorted(fl.asarray(np.sort(a), device=device) * 2, fl.asarray(v, device=device))
    np.testing.assert_array_equal(got.get(), np.searchsorted(np.sort(a) * 2, v))
    got = fl.searchsorted([1, 3, 3], fl.asarray(v, device=device), side="right")
    np.testing.assert_array_equal(got.get(), np.searchsorted([1, 3, 3], v, side="right"))


@pytest.mark.parametrize("a, b", [
    (np.array([1.0, _NAN, 2, 3, -0.0, 7]), np.array([_NAN, 2, 0.0, 2, 7])),  # NaN in nothing
    (np.array([[1, 2], [3, 4]]), np.array([4.0, 2.5, 1.0])),  # ints against floats
    (np.array([1, 2, 3]), np.array([], np.int64)),  # nothing to find
])
def test_isin_matches_numpy(device, a, b):
    for invert in (False, True):
        got = fl.isin(fl.asarray(a, device=device), fl.asarray(b, device=device),
                      invert=invert).get()
        np.testing.assert_array_equal(got, np.isin(a, b, invert=invert))
        assert got.shape == a.shape


def test_binary_search_under_the_gpu_elementwise_recipe(restore_recipes):
    # the GPU recipe (work-items mapped to groups) applied on the CPU device
    from fuseloop.recipes import gpu_coalesced

    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    rng = np.random.default_rng(5)
    a = np.sort(rng.integers(0, 300, 700)).astype(np.float32)
    v = np.concatenate([rng.random(1500) * 320 - 10, [_NAN]]).astype(np.float32)
    with fl.device("cpu"):
        got = fl.searchsorted(fl.asarray(a), fl.asarray(v), side="right") * 2
        src = fl.show_code(got)
        np.testing.assert_array_equal(got.get(), np.searchsorted(a, v, side="right") * 2)
        np.testing.assert_array_equal(fl.isin(fl.asarray(v), fl.asarray(a)).get(),
                                      np.isin(v, a))
    assert "gid(0)" in src and "lid(0)" in src, src  # (the recipe's grid, not the CPU's)


def test_reduction_structure_key_is_compact(device):
    # a reduction's structure key (equal reductions are computed once) numbers each
    # distinct subtree: as nested tuples it spelled the DAG as a tree, and hashing it
    # took 3^steps (40 steps never finished)
    from fuseloop.passes.emit import _Structure

    t = fl.asarray(np.arange(8.0), device=device)
    x = fl.asarray(np.linspace(0, 8, 16), device=device)
    key = _Structure()(fl.sum(_chain(t, x, 10))._node)
    assert len(repr(key)) < 100, len(repr(key))
