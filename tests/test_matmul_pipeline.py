"""The GPU matmul's pipeline (``TileConfig.vec``, ``TileConfig.prefetch``): its code for a
fake H100 (read, not run), and its results on this device against numpy (PoCL runs
the GPU recipe; small tiles, so that each kernel builds in seconds).

PoCL runs the work-items of a group one after another between barriers, so a
missing barrier would not show in the results: the source is read for them.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from matmul_source import fake_h100, tiled_source

import fuseloop as fl
from fuseloop.errors import RecipeError
from fuseloop.recipes import contraction as rc

#: small tiles with the default's pipeline: 4 x 4 outputs of a group of 8 x 8, steps of 4
SMALL = rc.TileConfig(32, 32, 4, 8, 8, "blocked", vec=True, prefetch="double")


def _step_loop(src: str) -> str:
    return src[src.index("for (int k_blk"):]


def test_default_tiles_are_the_hand_written_updates_structure(device):
    """128 x 128 by 16 x 16 work-items, 8 x 8 accumulators each, steps of 8: the tiles
    read as float4, the next step read into registers before the products and stored
    into the other copy of the tiles after them, one barrier per step (with every
    register's statement written by Loopy: the default leaves all but a float4's
    components to the device compiler, see the next test); two copies of the tiles
    where both operands are read along the sum (A @ B.T), else one (A @ B)."""
    assert rc.GPU_TILES.reg_loops == "lanes" and rc.GPU_TILES.prefetch == "layout"
    a = fl.empty((256, 256), dtype=np.float32, device=device)
    tiles = rc.GPU_TILES._replace(reg_loops="loopy")
    one = _step_loop(tiled_source(a @ a, device, rc.gpu_tiled.with_params(tiles=tiles)))
    assert one.count("barrier(") == 2 and "k_blk / 2" not in one
    src = tiled_source(a @ a.T, device, rc.gpu_tiled.with_params(tiles=tiles))
    assert "reqd_work_group_size(16, 16, 1)" in src
    assert "float acc_reg[4 * 2 * 2 * 4];" in src
    # tiles stored as float4 (16-byte aligned), two copies of 8 rows (padded to 132)
    assert "__local float4 x_tile_store[528];" in src and "__local float4 y_tile_store[528];" in src
    assert src.count("fl_lvec4(x_tile[") == src.count("fl_lvec4(y_tile[") == 64
    step = _step_loop(src)
    loads = step.index("x_reg[0] = in0[")
    products = step.index("acc_reg[0] = acc_reg[0] +")
    stores = step.index("] = x_reg[0];")
    assert loads < products < stores
    # one barrier in the step (after the stores), one after the first step's fill
    assert step.count("barrier(") == 1 and step.index("barrier(") > stores
    assert src.count("barrier(") == 2
    # the registers hold step k_blk + 1, read while step k_blk computes; none past the end
    assert re.search(r"if \(8 \* \(k_blk \+ 1\) < p0\)", step)


@pytest.mark.parametrize("form", ["atb", "abt"])
def test_transposed_operands_are_read_along_their_strides(device, form):
    """The fill's work-items walk the operand's contiguous axis: A.T's rows (m) and
    B.T's reduced range (k) are the fast index, as A's k and B's n are in A @ B."""
    a = fl.empty((256, 256), dtype=np.float32, device=device)
    expr = a.T @ a if form == "atb" else a @ a.T
    step = _step_loop(tiled_source(expr, device))
    # (the first copy, or the copies' loop: the default "lanes" writes them as one)
    x_load = re.search(r"x_reg\[[^\]]*\] = in0\[(.*)\];", step).group(1)
    y_load = re.search(r"y_reg\[[^\]]*\] = in0\[(.*)\];", step).group(1)
    # (128 neighbouring work-items along m or n, 8 along k; the other index times p0)
    fast = {"atb": ("% 128", "% 128"), "abt": ("% 8", "% 8")}[form]
    assert fast[0] in x_load and fast[1] in y_load, (x_load, y_load)
    # (two copies of the tiles where both are read along the sum: one barrier a step)
    assert "fl_lvec4(x_tile[" in step and step.count("barrier(") == (1 if form == "abt" else 2)


def test_other_backends_get_no_float4_reads(device):
    cuda = dataclasses.replace(device, backend="cuda")
    assert rc._for_backend(rc.GPU_TILES, cuda).vec is False
    assert rc._for_backend(rc.GPU_TILES, device).vec is (device.backend == "opencl")


def test_two_copies_must_fit_local_memory(device):
    """(fl.tune's candidates pass the recipe's ``valid`` hook: two copies of steps of 16
    need more than the 32 KiB every device has; one copy of them fits)"""
    values = dict(rc.gpu_tiled.values)
    values["tiles"] = rc.TileConfig(128, 128, 16, 16, 16, "blocked", prefetch="double")
    assert not rc.gpu_tiled.allows(values, device)
    values["tiles"] = values["tiles"]._replace(prefetch="regs")
    assert rc.gpu_tiled.allows(values, device)
    assert rc.gpu_tiled.allows(dict(rc.gpu_tiled.values), device)
    with pytest.raises(RecipeError):
        rc.gpu_tiled.with_params(tiles=rc.TileConfig(prefetch="triple"))


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("tiles", [SMALL, SMALL._replace(vec=False, prefetch="regs"),
                                   SMALL._replace(reg_loops="vector"),
                                   SMALL._replace(reg_loops="lanes"),
                                   SMALL._replace(reg_loops="device")],
                         ids=["vec+double", "regs", "vector-loops", "lanes-loops",
                              "device-loops"])
def test_pipelined_products_match_numpy(device, tiles):
    """Sizes that are not multiples of the tiles (the last step's registers are not
    loaded: 130 = 32 steps of 4 and a half one), transposed operands, a batch."""
    a, b = _rand((300, 130), 1), _rand((130, 200), 2)
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    A, B, AT, BT = (fl.asarray(x) for x in (a, b, at, bt))
    xs, ys = _rand((3, 40, 70), 3), _rand((3, 70, 36), 4)
    ref = a.astype(np.float64) @ b
    with fl.recipes.use(rc.gpu_tiled.with_params(tiles=tiles)):
        cases = [(A @ B, ref), (AT.T @ B, ref), (A @ BT.T, ref),
                 (fl.asarray(xs) @ fl.asarray(ys), xs.astype(np.float64) @ ys)]
        if tiles.prefetch == "regs" or tiles.reg_loops != "loopy":
            cases = cases[:2]  # (the fill and the update are the pieces that differ)
        for expr, want in cases:
            got = expr.get()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        if tiles.vec and device.backend == "opencl":
            assert ("fl_lvec4_at(" if tiles.reg_loops == "device" else "fl_lvec4(") \
                in fl.show_code(A @ B)


@pytest.mark.parametrize("reg_loops", ["vector", "lanes", "device"])
def test_register_loops_left_to_the_device_compiler(device, reg_loops):
    """``TileConfig.reg_loops``: the register tile's products as loops under ``#pragma
    unroll`` rather than one statement per register: 16 product statements (a float4's
    components, literals; the fill's copies kept, or, "lanes", a loop) or one (the
    component an index; the fill a loop too)."""
    a = fl.empty((256, 256), dtype=np.float32, device=device)
    # (two copies of the tiles, as A @ B.T takes them: one barrier a step)
    tiles = rc.GPU_TILES._replace(reg_loops=reg_loops, prefetch="double")
    step = _step_loop(tiled_source(a @ a, device, rc.gpu_tiled.with_params(tiles=tiles)))
    start = step.index("for (int k_in")
    products = step[start:step.index("if (8 * (k_blk + 1) < p0)", start)]
    if reg_loops != "device":
        assert products.count("fl_lvec4(x_tile[") == products.count("fl_lvec4(y_tile[") == 16
        assert re.search(r"#pragma unroll\s+for \(int m_r1 = 0; m_r1 <= 1", products)
    if reg_loops == "vector":
        assert "x_reg[3] = in0[" in step and "x_fu" not in step
    else:
        if reg_loops == "device":
            assert products.count("fl_lvec4_at(x_tile[") == 1, products
            assert re.search(r"#pragma unroll\s+for \(int m_r0 = 0; m_r0 <= 3", products)
            assert "fl_lvec4(" not in step
        # the fill: one statement per operand in a loop, its registers indexed by it
        assert re.search(r"#pragma unroll\s+for \(int x_fu = 0; x_fu <= 3; \+\+x_fu\)\s+"
                         r"x_reg\[x_fu\] = in0\[", step), step
    assert step.count("barrier(") == 1


def test_step_loop_unrolled_in_parts(device):
    """``TileConfig.unroll``: the step's loop unrolled that many at a time by the device
    compiler (Loopy's OpenCL C 2.0 attribute, written as the pragma every compiler reads)."""
    a = fl.empty((256, 256), dtype=np.float32, device=device)
    src = tiled_source(a @ a, device, rc.gpu_tiled.with_params(tiles=SMALL._replace(unroll=2)))
    assert re.search(r"#pragma unroll 2\s+for \(int k_in", src), src
    assert "unroll_hint" not in src


def test_register_limit_is_a_build_option_on_nvidia_opencl_only(device):
    a = fl.empty((256, 256), dtype=np.float32, device=device)
    recipe = rc.gpu_tiled.with_params(tiles=SMALL._replace(max_registers=128))
    with fl.recipes.use(recipe):
        nvidia = fl.program(a @ a).lower(fake_h100(device)).t_unit.default_entrypoint
        here = fl.program(a @ a).lower(device).t_unit.default_entrypoint
    assert "-cl-nv-maxrregcount=128" in nvidia.options.build_options
    if "nvidia" not in device.platform.lower():  # (on NVIDIA's OpenCL it is one too)
        assert not any("maxrreg" in o for o in here.options.build_options or [])

