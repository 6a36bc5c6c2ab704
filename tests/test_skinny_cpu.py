"""Products with few rows (and wide ones) on the CPU recipe (``cpu-blocked``): register
blocks sized by the operands' shapes and itemsize walking a wide column panel
(:func:`fuseloop.lower.contraction.register_block`), their code and their results
against numpy, transposed operands and in-place epilogues included."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes import contraction as rc

f32, f64 = np.float32, np.float64


def rand(shape, seed=0, dtype=f32):
    return (np.random.default_rng(seed).random(shape) - 0.5).astype(dtype)


@pytest.fixture
def cpu_recipe(device_path, restore_recipes):
    if device_path.type != "cpu":
        pytest.skip("the CPU recipe")
    with fl.recipes.use(rc.cpu_blocked):
        yield device_path


def test_rule_sizes_register_blocks_to_rows_and_itemsize():
    big = rc.CPU_BLOCKS
    wide = (300, None)

    def shape(rows, itemsize):
        return rc.cpu_shape(big, (rows, rows), wide, 32, 0, 256, itemsize)

    # 1 KB of accumulators: 8 x 32 float32, 8 x 16 float64, 4 x 64, 1 x 256 (no panel)
    assert shape(8, 4) == rc.CpuBlocks(8, 32, 1, 256)
    assert shape(8, 8) == rc.CpuBlocks(8, 16, 1, 256)
    assert shape(4, 4) == rc.CpuBlocks(4, 64, 1, 256)
    assert shape(1, 4) == rc.CpuBlocks(1, 256, 1, 0)
    # rows beyond a block are split evenly: 12 rows are two blocks of 6, 32 four of 8
    assert shape(12, 4) == rc.CpuBlocks(6, 32, 1, 256)
    assert shape(32, 8) == rc.CpuBlocks(8, 16, 1, 256)
    # fewer columns than a panel: the register block alone, no wider than the columns
    assert rc.cpu_shape(big, (8, 8), (40, None), 32, 0, 256, 4) == rc.CpuBlocks(8, 32, 1, 0)
    # more rows than few_rows: blocks of 8 rows walking the panel, or with fewer columns
    # than a panel the default blocks
    assert rc.cpu_shape(big, (33, None), wide, 32, 0, 256, 8) == rc.CpuBlocks(8, 16, 1, 256)
    assert rc.cpu_shape(big, (33, None), (200, None), 32, 0, 256, 4) == big


@pytest.mark.parametrize("rows, cols, k, dtype", [
    (8, 300, 70, f32),   # a panel and one shifted back into range
    (4, 520, 33, f64),   # 8-byte accumulators, k not a multiple of the step
    (16, 257, 64, f32),  # two row blocks
    (12, 300, 45, f64),  # rows split evenly (two blocks of 6)
    (41, 260, 40, f32),  # more rows than few_rows: blocks of 8, the last rows padded
])
def test_few_rows_match_numpy(cpu_recipe, rows, cols, k, dtype):
    a, b = rand((rows, k), 1, dtype), rand((k, cols), 2, dtype)
    A, B = fl.asarray(a), fl.asarray(b)
    src = fl.show_code(A @ B)
    cfg = rc.cpu_shape(rc.CPU_BLOCKS, (rows, rows), (cols, None), rc.CPU_FEW_ROWS, 0,
                       rc.CPU_SHORT_COLS, np.dtype(dtype).itemsize)
    # the register block in the code: the most power-of-two columns 1 KB holds, the
    # panel 256 wide
    block_bytes = cfg.rm * cfg.rn * np.dtype(dtype).itemsize
    assert cfg.panel == 256 and block_bytes <= rc.CPU_REG_BYTES < 2 * block_bytes
    assert f"acc_reg[{cfg.rm} * {cfg.rn}]" in src or f"acc_reg[{cfg.rm * cfg.rn}]" in src
    assert f"acc_tile[{cfg.rm} * 256]" in src or f"acc_tile[{cfg.rm * 256}]" in src
    want = a.astype(f64) @ b.astype(f64)
    tol = 1e-5 if dtype == f32 else 1e-12
    np.testing.assert_allclose((A @ B).get(), want, rtol=tol, atol=tol)


def test_transposed_operand_and_inplace_epilogue(cpu_recipe):
    """``X @ B.T`` (Y contiguous along k) and ``C += x @ A`` (each output written once,
    where the last panel overlaps the one before it)."""
    x, bt, c = rand((8, 40), 3), rand((300, 40), 4), rand((8, 300), 5)
    got = (fl.asarray(x) @ fl.asarray(bt).T).get()
    np.testing.assert_allclose(got, x.astype(f64) @ bt.T.astype(f64), rtol=1e-5, atol=1e-5)
    C = fl.asarray(c)
    before = fl.stats()["kernels_launched"]
    C += fl.asarray(x) @ fl.asarray(bt).T
    np.testing.assert_allclose(C.get(), c + x.astype(f64) @ bt.T.astype(f64), rtol=1e-5,
                               atol=1e-5)
    assert fl.stats()["kernels_launched"] == before + 1
