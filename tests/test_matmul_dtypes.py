"""The GPU matmul for 8-byte types (``gpu-tiled``'s ``wide_tiles``): a register tile of
the same bytes as float32's, read from the local tiles as double2 pairs, two copies of
the tiles; its code for a fake H100 (read, not run) and its results on this device
against numpy (PoCL runs the GPU recipe; small tiles, so that each kernel builds in
seconds): sizes that are multiples of no tile, transposed operands, a batch, an
epilogue reading the output, mixed float32 and float64 operands.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from matmul_source import tiled_source

import fuseloop as fl
from fuseloop.recipes import contraction as rc
from fuseloop.recipes import contraction_pipeline as pipeline

#: small tiles with the wide default's structure: 4 x 2 outputs of a group of 8 x 8
#: (pairs of consecutive rows and columns), steps of 4, two copies of the tiles
SMALL_WIDE = rc.TileConfig(32, 16, 4, 8, 8, "blocked", vec=True, prefetch="double",
                           reg_loops="vector")
#: float32's tiles of the same recipe (its groups of four)
SMALL = rc.TileConfig(32, 32, 4, 8, 8, "blocked", vec=True, prefetch="double")


def test_vector_width_is_sixteen_bytes():
    assert [pipeline.vector_width(n) for n in (1, 2, 4, 8, 16)] == [4, 4, 4, 2, 1]


def test_wide_default_reads_double2_pairs(device):
    """float64 on an H100: 128 x 64 blocks by 16 x 16 work-items, 8 x 4 accumulators each
    (256 bytes, as float32's 8 x 8), rows and columns in pairs read as one double2, the
    next step read into registers and stored into the other copy of the tiles: one
    barrier per step."""
    a = fl.empty((256, 256), dtype=np.float64, device=device)
    src = tiled_source(a @ a, device)
    assert "reqd_work_group_size(16, 16, 1)" in src
    assert "double acc_reg[2 * 2 * 4 * 2];" in src
    # two copies of 8 rows: x's padded to 132, y's 64; 25 KiB of local memory
    assert "__local double2 x_tile_store[1056];" in src
    assert "__local double2 y_tile_store[512];" in src
    assert pipeline.tile_bytes(rc.GPU_TILES_WIDE, 8) <= rc.MIN_LOCAL_MEMORY
    # the update: Loopy writes the pairs' two components, the device compiler the rest
    update = src[src.index("for (int k_in"):]
    update = update[:update.index("if (8 * (k_blk + 1) < p0)")]
    assert update.count("fl_lvec2d(x_tile[") == update.count("fl_lvec2d(y_tile[") == 4
    assert "#define fl_lvec2d(x, c) ((*(__local const double2 *) &(x)).s##c)" in src
    step = src[src.index("for (int k_blk"):]
    assert step.count("barrier(") == 1 and src.count("barrier(") == 2
    assert re.search(r"x_reg\[0\] = .*in0\[", step)


def test_former_rule_is_a_parameter(device):
    """``wide_tiles=GPU_TILES_WIDE_V4``: 4 x 4 outputs a work-item, 16 apart, scalar reads
    of one copy of the tiles (the rule before version 5, which the dtype probe times)."""
    a = fl.empty((256, 256), dtype=np.float64, device=device)
    src = tiled_source(a @ a, device, rc.gpu_tiled.with_params(wide_tiles=rc.GPU_TILES_WIDE_V4))
    assert "double acc_reg[4 * 4];" in src and "double2" not in src
    assert "__local double x_tile[8 * 68];" in src
    # float32 is not affected by the wide tiles
    b = fl.empty((256, 256), dtype=np.float32, device=device)
    assert tiled_source(b @ b, device) == tiled_source(
        b @ b, device, rc.gpu_tiled.with_params(wide_tiles=rc.GPU_TILES_WIDE_V4))


def test_pair_component_by_index_where_the_device_compiler_unrolls(device):
    """``reg_loops="device"``: the pair's component is a loop index (``fl_lvec2d_at``), a
    literal once the device compiler unrolls the loop."""
    a = fl.empty((256, 256), dtype=np.float64, device=device)
    tiles = rc.GPU_TILES_WIDE._replace(reg_loops="device")
    src = tiled_source(a @ a, device, rc.gpu_tiled.with_params(wide_tiles=tiles))
    assert "#define fl_lvec2d_at(x, c) ((c) == 0 ? fl_lvec2d_of(x).s0 : " \
        "fl_lvec2d_of(x).s1)" in src
    assert "fl_lvec2d_at(x_tile[" in src and "fl_lvec2d(" not in src


def test_medium_side_keeps_whole_pairs(device):
    """A side of at most 64 outputs gets blocks of 64 (not 128) when the work-items still
    own whole groups of a vector's elements: pairs for float64."""
    a = fl.empty((64, 512), dtype=np.float64, device=device)
    b = fl.empty((512, 512), dtype=np.float64, device=device)
    # (split_k=1: on a GPU with many units the rule would split this product in two kernels)
    src = tiled_source(a @ b, device, rc.gpu_tiled.with_params(split_k=1))
    assert "double acc_reg[2 * 2 * 2 * 2];" in src and "fl_lvec2d(" in src


def _rand(shape, seed, dtype):
    return (np.random.default_rng(seed).standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_products_match_numpy(device, dtype):
    """Sizes that are multiples of no tile (130 = 32 steps of 4 and a half one),
    transposed operands, a batch; float32 takes ``tiles``, float64 ``wide_tiles``."""
    a, b = _rand((300, 130), 1, dtype), _rand((130, 201), 2, dtype)
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    A, B, AT, BT = (fl.asarray(x) for x in (a, b, at, bt))
    xs, ys = _rand((3, 40, 70), 3, dtype), _rand((3, 70, 36), 4, dtype)
    ref = a.astype(np.float64) @ b
    tol = 1e-12 if dtype == np.float64 else 1e-4
    # (dmma=False: float64 on an NVIDIA GPU of sm_80 or later would take the tensor cores)
    with fl.recipes.use(rc.gpu_tiled.with_params(tiles=SMALL, wide_tiles=SMALL_WIDE, dmma=False)):
        cases = [(A @ B, ref), (AT.T @ B, ref), (A @ BT.T, ref), (AT.T @ BT.T, ref),
                 (fl.asarray(xs) @ fl.asarray(ys), xs.astype(np.float64) @ ys)]
        for expr, want in cases:
            got = expr.get()
            assert got.dtype == dtype
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
        if device.backend == "opencl":
            read = "fl_lvec2d(" if dtype == np.float64 else "fl_lvec4("
            assert read in fl.show_code(A @ B)


def test_epilogue_reading_the_output_is_one_kernel(device, fresh_stats):
    """NPBench's gemm, ``C[:] = alpha * A @ B + beta * C`` in float64: one kernel (the
    scaling of A in the fill, C read where it is written), every element written once."""
    a, b, c = _rand((70, 45), 5, np.float64), _rand((45, 83), 6, np.float64), \
        _rand((70, 83), 7, np.float64)
    want = 1.5 * a @ b + 1.2 * c
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    with fl.recipes.use(rc.gpu_tiled.with_params(wide_tiles=SMALL_WIDE)):
        fl.synchronize()
        fl.reset_stats()
        C[:] = 1.5 * A @ B + 1.2 * C
        got = C.get()
        assert fresh_stats()["kernels_launched"] == 1
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_mixed_operands_read_each_tile_by_its_type(device):
    """float32 @ float64: pairs for both sides (the wider type's), the float64 tile read as
    double2, the float32 tile (whose vector would be four) as scalars."""
    a, b = _rand((50, 37), 8, np.float32), _rand((37, 45), 9, np.float64)
    A, B = fl.asarray(a), fl.asarray(b)
    with fl.recipes.use(rc.gpu_tiled.with_params(wide_tiles=SMALL_WIDE)):
        got = (A @ B).get()
        src = fl.show_code(A @ B) if device.backend == "opencl" else ""
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    if src:
        assert "fl_lvec2d(y_tile[" in src and "__local float x_tile[" in src
        assert "fl_lvec2d(x_tile[" not in src and "fl_lvec4(" not in src


def test_tile_bytes_count_padding_and_copies():
    """The local memory a configuration needs, as the recipe's ``valid`` hook reads it:
    two copies of steps of 8, rows padded by 4."""
    assert pipeline.tile_bytes(rc.GPU_TILES, 4) == 2 * 8 * (128 + 128 + 8) * 4
    assert pipeline.tile_bytes(rc.GPU_TILES_WIDE, 8) == 2 * 8 * (128 + 64 + 8) * 8
    assert pipeline.tile_bytes(rc.GPU_TILES_WIDE_V4, 8) == 8 * (64 + 64 + 8) * 8
    wide = rc.GPU_TILES_WIDE._replace(bn=128)
    assert pipeline.tile_bytes(wide, 8) > rc.MIN_LOCAL_MEMORY
    assert pipeline.tile_bytes(wide._replace(bk=4), 8) <= rc.MIN_LOCAL_MEMORY
