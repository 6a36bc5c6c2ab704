"""The GPU elementwise recipe's elements per work-item, chosen by rule from the kernel's
operation count: several for short bodies, one (and no second, full-tile body) for long
ones.  Applied on the CPU device, its code read and its results compared with numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes import gpu_coalesced
from fuseloop.recipes.elementwise import GPU_UNROLLED_OPERATIONS, items_by_rule


def test_items_rule_shrinks_with_the_body():
    assert items_by_rule(4) == 4 and items_by_rule(GPU_UNROLLED_OPERATIONS // 4) == 4
    assert items_by_rule(GPU_UNROLLED_OPERATIONS // 4 + 1) == 2
    assert items_by_rule(GPU_UNROLLED_OPERATIONS // 2 + 1) == 1
    assert items_by_rule(10_000) == 1


def _chain(x, y, steps):
    e = x
    for _ in range(steps):
        e = fl.sin(e) * 0.5 + e * y
    return e


@pytest.mark.parametrize("steps, sines", [(1, 4 * 2), (20, 20)])
def test_chain_unrolled_by_rule(restore_recipes, steps, sines):
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-items-rule")
    rng = np.random.default_rng(3)
    h, g = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    with fl.device("cpu"):
        x, y = fl.asarray(h), fl.asarray(g)
        src = fl.program(_chain(x, y, steps)).compile().source
        got = _chain(x, y, steps).get()
    # one step: 4 elements a work-item, in a full-tile body and a bounds-checked one;
    # twenty steps (80 operations): one element, one body
    assert len(re.findall(r"fl_sin_f32\(", src.split("__kernel")[-1])) == sines
    want = h
    for _ in range(steps):
        want = np.sin(want) * np.float32(0.5) + want * g
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_rule_counts_every_expression_kind(restore_recipes):
    # selections, comparisons, casts and Random123 calls: the count walks them all
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-items-kinds")
    h = np.linspace(-2, 2, 300, dtype=np.float32)
    with fl.device("cpu"):
        x = fl.asarray(h)
        got = fl.where(x > 0, x * 2, (x < -1).astype(np.float32)).get()
        normal = fl.random.normal((300,), key=1).get()
    np.testing.assert_array_equal(got, np.where(h > 0, h * 2, (h < -1).astype(np.float32)))
    assert normal.shape == (300,) and np.isfinite(normal).all()


def _horner(x, steps):
    r = x * 0 + 0.5
    for k in range(steps):
        r = r * x + 0.1 * (k + 1)
    return r


def test_arithmetic_counts_a_quarter(restore_recipes):
    # a degree-16 polynomial (34 arithmetic nodes, no call) is memory-bound: 4 elements a
    # work-item, their 4 loads first, as a 3-operation body gets
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-items-horner")
    h = np.random.default_rng(4).random(1000, dtype=np.float32)
    with fl.device("cpu"):
        x = fl.asarray(h)
        src = fl.program(_horner(x, 16)).compile().source
        got = _horner(x, 16).get()
    bulk = src.split("__kernel")[-1].split("final slab")[0]
    assert len(re.findall(r"= in0\[", bulk)) == 4
    np.testing.assert_allclose(got, _horner(h.astype(np.float64), 16), rtol=1e-5)


def test_calls_count_whole():
    # a call costs what an arithmetic node does four times over: 20 steps of a sin and
    # 3 arithmetic nodes keep one element, 16 polynomial steps (34 nodes) take four
    from fuseloop.recipes.elementwise import CHEAP_OPERATION

    assert items_by_rule(20 * (1 + 3 * CHEAP_OPERATION)) == 1
    assert items_by_rule(34 * CHEAP_OPERATION) == 4
