"""The CPU rows recipe's blocks of a column-like reduction by its sizes: ``column_wide``
outputs per work-item in a split's first stage whose pieces are long
(``column_wide_rows``), ``column_width`` elsewhere; short reductions stay one stage
(``splits._column_pieces``, ``row_cpu._column_block``)."""

from __future__ import annotations

import re

import numpy as np
from launch_counts import launches

import fuseloop as fl
from fuseloop.recipes.row_cpu import plenty_block
from fuseloop.recipes.rows import (
    CPU_COLUMN_ITEMS,
    CPU_COLUMN_WIDE,
    CPU_COLUMN_WIDE_ROWS,
    CPU_COLUMN_WIDTH,
)


def _blocks(code: str) -> list[int]:
    """The accumulator blocks' lengths of each column kernel, in order."""
    return [int(n) for n in re.findall(r"float acc_j0\[(\d+)\]", code)]


def _data(shape, seed=3):
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_long_column_reductions_take_wide_blocks_in_two_stages(cpu):
    # one wide block of outputs, rows enough for two pieces of column_wide_rows
    h = _data((2 * CPU_COLUMN_WIDE_ROWS, CPU_COLUMN_WIDE))
    x = fl.asarray(h)
    code = fl.show_code(x.sum(axis=0))
    assert code.count("__kernel") == 2
    # (pieces, then combined: an unsplit reduction of CPU_COLUMN_WIDE outputs, whose
    # blocks leave each compute unit column_items of them, row_cpu.plenty_block)
    combine = plenty_block(CPU_COLUMN_WIDE, CPU_COLUMN_WIDTH, CPU_COLUMN_WIDE,
                           CPU_COLUMN_ITEMS * max(1, cpu.compute_units))
    assert _blocks(code) == [CPU_COLUMN_WIDE, combine]
    assert launches(lambda: x.sum(axis=0).get(), warm=True) == 2
    np.testing.assert_allclose(x.sum(axis=0).get(), h.sum(axis=0, dtype=np.float64),
                               rtol=1e-5)
    # a column variance: the nested mean's pieces and the outer ones, both wide
    var = ((x - x.mean(axis=0)) ** 2).mean(axis=0)
    assert _blocks(fl.show_code(var)).count(CPU_COLUMN_WIDE) >= 2
    np.testing.assert_allclose(var.get(), h.astype(np.float64).var(axis=0), rtol=1e-4)


def test_short_column_reductions_keep_narrow_blocks(cpu):
    # pieces would be shorter than column_wide_rows: one stage, whose blocks leave each
    # compute unit column_items of them (row_cpu.plenty_block; test_cpu_reduce_blocks.py)
    h = _data((CPU_COLUMN_WIDE_ROWS, CPU_COLUMN_WIDE))
    x = fl.asarray(h)
    assert set(_blocks(fl.show_code(x.sum(axis=0)))) == {plenty_block(
        CPU_COLUMN_WIDE, CPU_COLUMN_WIDTH, CPU_COLUMN_WIDE,
        CPU_COLUMN_ITEMS * max(1, cpu.compute_units))}
    np.testing.assert_allclose(x.sum(axis=0).get(), h.sum(axis=0, dtype=np.float64),
                               rtol=1e-5)
    # rows that fill less than a quarter of a wide block: narrow, however long
    y = fl.asarray(_data((4 * CPU_COLUMN_WIDE_ROWS, CPU_COLUMN_WIDE // 4 - 8)))
    assert set(_blocks(fl.show_code(y.sum(axis=0)))) == {CPU_COLUMN_WIDTH}
    # a small column mean: one stage
    small = fl.asarray(_data((200, 64)))
    assert launches(lambda: small.mean(axis=0).get(), warm=True) == 1


def test_a_recipe_without_wide_blocks_keeps_its_width(cpu):
    x = fl.asarray(_data((4 * CPU_COLUMN_WIDE_ROWS, CPU_COLUMN_WIDE)))
    with fl.recipes.use("cpu-rows", "reduction", column_wide=CPU_COLUMN_WIDTH):
        assert set(_blocks(fl.show_code(x.sum(axis=0)))) == {CPU_COLUMN_WIDTH}
