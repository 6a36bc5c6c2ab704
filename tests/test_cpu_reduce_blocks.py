"""Blocks of an unsplit column-like reduction on the CPU (``row_cpu._column_block``,
``_short_row_block``): as wide as the outputs allow while every compute unit keeps
``column_items`` blocks, and rows shorter than a block (a middle axis) taken several
per work-item so that a block walks as many outputs as a long row's."""

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
    """The rule's block for ``outputs``: the least CPU_COLUMN_PLENTY they reach, in blocks
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
    assert block > CPU_COLUMN_WIDTH  # (this rule's point on a CPU of up to 8 cores)
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


def test_short_rows_are_taken_several_per_work_item(cpu):
    # a middle axis: rows (axis 1) of 64 elements (axis 2), reduced over axis 0
    h = _data((256, 256, 64))
    x = fl.asarray(h)
    rows = _widest(256 * 64, cpu) // 64
    assert _blocks(fl.show_code(x.sum(axis=0))) == [f"{rows} * 64"]
    np.testing.assert_allclose(x.sum(axis=0).get(), h.sum(axis=0, dtype=np.float64),
                               rtol=1e-5)
    # two axes (the rows' sums of the middle axis' results next): two launches
    assert launches(lambda: x.sum(axis=(0, 2)).get(), warm=True) == 2
    np.testing.assert_allclose(x.sum(axis=(0, 2)).get(),
                               h.sum(axis=(0, 2), dtype=np.float64), rtol=1e-5)


def test_short_rows_of_odd_lengths(cpu):
    # 300 rows of 48: rows not a multiple of the rows per item; max, and a value kept
    # per element (each column's mean) beside the reduction
    h = _data((37, 300, 48), seed=7)
    x = fl.asarray(h)
    code = fl.show_code(x.max(axis=0))
    assert _blocks(code)[0].endswith("* 48")
    np.testing.assert_array_equal(x.max(axis=0).get(), h.max(axis=0))
    centred = ((x - x.mean(axis=0)) ** 2).sum(axis=0)
    want = ((h.astype(np.float64) - h.mean(axis=0, dtype=np.float64)) ** 2).sum(axis=0)
    np.testing.assert_allclose(centred.get(), want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(x.sum(axis=(0, 2)).get(), h.sum(axis=(0, 2), dtype=np.float64),
                               rtol=1e-5)
