"""Blocks of an unsplit column-like reduction on the CPU (``row_cpu._column_block``,
``plenty_block``): as wide as the outputs allow while every compute unit keeps
``column_items`` blocks, never narrower than ``column_width`` nor wider than
``column_wide``."""

from __future__ import annotations

import re

import numpy as np
from launch_counts import launches

import fuseloop as fl
from fuseloop.recipes.row_cpu import CPU_COLUMN_PLENTY, plenty_block
from fuseloop.recipes.rows import CPU_COLUMN_ITEMS, CPU_COLUMN_WIDE, CPU_COLUMN_WIDTH


def _blocks(code: str, dtype: str = "float") -> list[str]:
    """Each column kernel's accumulator block, as declared (``256``, ``64 * 64``)."""
    return re.findall(rf"{dtype} acc_j0\[([\d *]+)\]", code)


def _widest(outputs: int, device: fl.Device) -> int:
    """The rule's block for ``outputs``: the largest CPU_COLUMN_PLENTY they reach, in blocks
    of column_items a compute unit."""
    stated = max((t for t in CPU_COLUMN_PLENTY if t <= outputs), default=0)
    return plenty_block(stated, CPU_COLUMN_WIDTH, CPU_COLUMN_WIDE,
                        CPU_COLUMN_ITEMS * max(1, device.compute_units))


def test_the_widest_block_leaves_every_compute_unit_its_blocks():
    assert plenty_block(16384, 256, 4096, 4) == 4096
    assert plenty_block(16384, 256, 4096, 8) == 2048
    assert plenty_block(4096, 256, 4096, 4) == 1024
    assert plenty_block(4096, 256, 4096, 32) == 256  # (never below column_width)
    assert plenty_block(0, 256, 4096, 1) == 256
    assert plenty_block(1 << 20, 256, 4096, 1) == 4096  # (nor above column_wide)


def _data(shape, seed=5):
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_many_outputs_take_wide_blocks_in_one_launch(cpu):
    h = _data((256, 16384))
    x = fl.asarray(h)
    block = _widest(16384, cpu)
    if cpu.compute_units <= 8:  # (more cores want more, narrower blocks)
        assert block > CPU_COLUMN_WIDTH
    assert _blocks(fl.show_code(x.sum(axis=0))) == [str(block)]
    assert launches(lambda: x.sum(axis=0).get(), warm=True) == 1
    np.testing.assert_allclose(x.sum(axis=0).get(), h.sum(axis=0, dtype=np.float64),
                               rtol=1e-5)
    # int32 maxima, and outputs that are not a multiple of the block (a partial last one)
    k = np.random.default_rng(1).integers(-1000, 1000, (100, 16384 + 777)).astype(np.int32)
    xk = fl.asarray(k)
    assert _blocks(fl.show_code(xk.max(axis=0)), "int") == [str(block)]
    np.testing.assert_array_equal(xk.max(axis=0).get(), k.max(axis=0))


def test_few_outputs_keep_column_width(cpu):
    x = fl.asarray(_data((300, 1000)))
    assert _blocks(fl.show_code(x.sum(axis=0))) == [str(CPU_COLUMN_WIDTH)]


def test_a_middle_axis_with_long_rows_takes_wide_blocks(cpu):
    # rows (axis 0) of 8192 elements (axis 2), reduced over axis 1: blocks of a row
    h = _data((8, 64, 8192))
    x = fl.asarray(h)
    block = _widest(8192, cpu)
    assert _blocks(fl.show_code(x.sum(axis=1))) == [str(block)]
    np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1, dtype=np.float64),
                               rtol=1e-5)
    # a value kept per element (each column's mean) beside the reduction
    centred = ((x - x.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    want = ((h.astype(np.float64) - h.mean(axis=1, keepdims=True, dtype=np.float64)) ** 2
            ).sum(axis=1)
    np.testing.assert_allclose(centred.get(), want, rtol=1e-4, atol=1e-6)


def test_a_middle_axis_with_short_rows_merges_them(cpu):
    # rows of 48 elements, 300 of them one after the other, are one run of 14400 outputs
    # (fuseloop.passes.axis_merge): the blocks of that many columns
    h = _data((37, 300, 48), seed=7)
    x = fl.asarray(h)
    assert _blocks(fl.show_code(x.max(axis=0))) == [str(_widest(300 * 48, cpu))]
    np.testing.assert_array_equal(x.max(axis=0).get(), h.max(axis=0))
    np.testing.assert_allclose(x.sum(axis=(0, 2)).get(), h.sum(axis=(0, 2), dtype=np.float64),
                               rtol=1e-5)
