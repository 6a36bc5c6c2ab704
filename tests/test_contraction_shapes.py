"""Contractions of every shape: few rows, few columns, vector operands, by rule.

The recipes choose their blocks from the extents through size classes
(:func:`fuseloop.recipes.contraction.make_size_class`); these tests check the
detection, the rule, the kernels it makes and the results against numpy, for
the CPU recipe and for the GPU recipe run on the CPU device.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.expr.program import linearize
from fuseloop.recipes import DevicePredicate
from fuseloop.recipes import contraction as rc


def rand(shape, seed=0):
    return (np.random.default_rng(seed).random(shape) - 0.5).astype(np.float32)


def close(got, a, b):
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(np.abs(ref).max(), 1.0))


def contraction_of(expr):
    return linearize([expr._node], expr.shape)[0].contraction


# (a, b, what): one of each shape class, the long side past GPU_FEW (32)
SHAPES = [((70,), (70, 45), "vector times matrix"),
          ((3, 70), (70, 45), "three rows"),
          ((8, 37), (37, 100), "eight rows"),
          ((45, 70), (70, 5), "five columns"),
          ((2, 1, 70), (2, 70, 40), "batched vector times matrix")]


def test_skinny_products_are_contractions(device):
    A, x = fl.asarray(rand((40, 50))), fl.asarray(rand(50))
    c = contraction_of(x @ fl.asarray(rand((50, 36))))
    assert c is not None and c.m_dims == () and c.n_dims == (0,) and c.m_size == 1
    assert contraction_of(A.T @ fl.asarray(rand(40))) is not None  # walks columns
    c = contraction_of(fl.asarray(rand((3, 50))) @ fl.asarray(rand((50, 36))))
    assert c is not None and c.m_dims == (0,) and c.n_dims == (1,)
    assert contraction_of(A @ fl.asarray(rand((50, 2)))) is not None
    # rows contiguous along the sum: one dot product per row (the reduction kernels)
    assert contraction_of(A @ x) is None
    assert contraction_of(fl.asarray(rand((8, 16))) @ fl.asarray(rand((16, 4)))) is None
    # huge sums into few outputs stay with the two-stage reductions
    assert contraction_of(fl.asarray(rand((2, 4096))) @ fl.asarray(rand((4096, 40)))) is None


@pytest.mark.parametrize("sa,sb,what", SHAPES, ids=[s[2] for s in SHAPES])
def test_skinny_products_match_numpy(device, sa, sb, what):
    a, b = rand(sa, 1), rand(sb, 2)
    close((fl.asarray(a) @ fl.asarray(b)).get(), a, b)


def test_skinny_epilogue_and_in_place_update(device):
    a, b, c = rand((5, 70), 3), rand((70, 21), 4), rand((5, 21), 5)
    A, B = fl.asarray(a), fl.asarray(b)
    got = fl.tanh(A @ B + 1).get()
    np.testing.assert_allclose(got, np.tanh(a.astype(np.float64) @ b + 1), rtol=1e-5, atol=1e-6)
    C = fl.asarray(c)
    C += A @ B  # 21 columns: column blocks of 16, the last one shifted; written once
    np.testing.assert_allclose(C.get(), c + a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_cpu_rule_sizes_blocks_to_short_sides():
    big = rc.CpuBlocks(6, 16, 1)
    assert rc.cpu_shape(big, (1, 1), (17, None), 8) == rc.CpuBlocks(1, 16, 1)  # x @ A
    assert rc.cpu_shape(big, (8, 8), (9, None), 8) == rc.CpuBlocks(8, 16, 1)
    assert rc.cpu_shape(big, (9, None), (5, 5), 8) == rc.CpuBlocks(6, 4, 1)
    assert rc.cpu_shape(rc.CpuBlocks(6, 16, 8), (3, 3), (40, None), 8) == rc.CpuBlocks(3, 16, 1)
    # no size class (a recipe given as a function): the blocks stay, columns are padded
    assert rc.cpu_shape(big, (1, None), (1, None), 8) == big
    # up to panel_rows rows: one work-group of blocks shares each column panel
    assert rc.cpu_shape(big, (64, 64), (17, None), 8, 64) == rc.CpuBlocks(6, 16, 11)
    assert rc.cpu_shape(big, (65, None), (17, None), 8, 64) == big


def test_gpu_rule_tiles_the_long_side():
    big = rc.GPU_TILES
    assert rc.skinny_tiles(big, None, None, 64, 16, 4) is big
    t = rc.skinny_tiles(big, 8, None, 64, 16, 4)  # 8 rows: 2 x 32 work-items, 4 x 4 each
    assert (t.bm, t.tm, t.tn, t.bn, t.bk) == (8, 2, 32, 128, 16)
    t = rc.skinny_tiles(big, None, 5, 64, 16, 4)  # 5 columns: padded to 8
    assert (t.bn, t.tn, t.tm, t.bm) == (8, 2, 32, 128)
    for group in (64, 128, 256):  # a vector of 8-byte values: shorter steps, fewer outputs
        t = rc.skinny_tiles(big, 1, None, group, 32, 8)
        assert (t.bm, t.tm, t.tn) == (1, 1, group) and t.bn in (group, 2 * group, 4 * group)
        assert (t.bk + 8) * (t.bm + t.bn) * 8 <= rc.MIN_LOCAL_MEMORY and t.bk >= 4


def test_size_classes_bound_the_kernels(device, fresh_stats):
    """Short sides are classes of their own (exact extents), long ones share one."""
    fl.asarray(rand((8, 40)) @ rand((40, 50))).get()  # (numpy: warm the copy kernels)
    for m in (8, 8, 3):
        (fl.asarray(rand((m, 40))) @ fl.asarray(rand((40, 50)))).get()
    for m in (70, 100):
        (fl.asarray(rand((m, 40))) @ fl.asarray(rand((40, 50)))).get()
    fl.reset_stats()
    for m in (8, 3, 70, 100, 85):
        (fl.asarray(rand((m, 40))) @ fl.asarray(rand((40, 50)))).get()
    assert fresh_stats()["kernels_compiled"] == 0


@pytest.fixture
def gpu_tiled_on(device, restore_recipes):
    if device.type != "cpu":
        pytest.skip("the GPU recipe runs on GPUs anyway")
    pred = DevicePredicate(type=device.type, vendor=device.vendor, name=device.name,
                           platform=device.platform)
    fl.register_recipe(pred, rc.gpu_tiled, name="test-gpu-tiled-shapes", kind="contraction")
    return device


def test_gpu_recipe_in_place_vector_times_matrix(gpu_tiled_on):
    """The lanes' sums are combined, then the first lane alone reads and writes c
    (PoCL runs the lanes one after another: a second lane would add twice)."""
    # (each GPU kernel takes PoCL seconds to build: one here; the code is read below)
    x, a, c = rand(70, 6), rand((70, 45), 7), rand(45, 8)
    C = fl.asarray(c)
    C += fl.asarray(x) @ fl.asarray(a)
    np.testing.assert_allclose(C.get(), c + x.astype(np.float64) @ a, rtol=1e-5, atol=1e-5)


def _gpu_code(expr, device, **params):
    """The GPU recipe's generated source (no build) and its transformed kernel."""
    import loopy as lp

    with fl.recipes.use(rc.gpu_tiled.with_params(**params) if params else rc.gpu_tiled):
        t_unit = fl.program(expr).lower(device).t_unit
    return lp.generate_code_v2(t_unit).device_code(), t_unit.default_entrypoint


@pytest.mark.opencl_only  # (reads OpenCL source)
def test_gpu_rule_splits_the_sum_for_a_short_side(device):
    A, B = fl.asarray(rand((8, 37))), fl.asarray(rand((37, 300)))
    # (B contiguous along its columns is streamed by default: skinny.stream_long)
    src, knl = _gpu_code(A @ B, device, stream=0)
    # 32 columns x 8 lanes of the sum, eight rows in each work-item's registers
    assert "reqd_work_group_size(32, 8, 1)" in src
    assert [str(t) for t in knl.iname_tags("k_lane")] == ["l.1"]
    lines = src.splitlines()
    store = next(k for k, line in enumerate(lines) if "out0[" in line)
    assert "lid(1) == 0" in lines[store - 1]  # the first lane stores
    # few columns of a matrix contiguous along the sum: the lanes are the fast axis
    src, knl = _gpu_code(fl.asarray(rand((300, 37))) @ fl.asarray(rand((37, 5))), device)
    assert [str(t) for t in knl.iname_tags("k_lane")] == ["l.0"]
    assert "reqd_work_group_size(32, 8, 1)" in src
    # the other kernel for short sides: one block of them, the long side tiled
    src, _ = _gpu_code(A @ B, device, skinny="tiles", skinny_group=64, stream=0)
    assert "reqd_work_group_size(32, 2, 1)" in src
    assert re.search(r"__local float x_tile\[16 \* \d+\]", src) is not None


@pytest.mark.opencl_only  # (reads OpenCL source)
def test_gpu_tiles_that_divide_the_sizes_need_no_clamps(device):
    """Sides and sums that are multiples of GPU_ALIGN are a size class: no padding."""
    small = {"tiles": rc.TileConfig(32, 32, 4, 8, 8, "blocked")}  # (quick to generate)
    A, B = fl.asarray(rand((128, 256))), fl.asarray(rand((256, 128)))
    src, _ = _gpu_code(B.T @ A.T, device, **small)  # (both operands transposed)
    body = src[src.index("{"):]
    assert "min(" not in body and "?" not in body and "if (" not in body
    src, _ = _gpu_code(fl.asarray(rand((200, 256))) @ B, device, **small)
    assert "min(" in src  # 200 rows: padded to whole tiles, reads clamped


@pytest.mark.opencl_only  # (reads OpenCL source)
def test_gpu_sums_of_whole_steps_need_no_clamps(device):
    """A reduced range that is a multiple of the tiles' step and not of GPU_ALIGN
    (``einsum('bqd,bkd->bqk')`` with d = 64) is a size class: whole steps, no clamped
    or tested reads; a range of no whole steps is padded."""
    small = {"tiles": rc.TileConfig(32, 32, 8, 8, 8, "blocked")}  # (quick to generate)
    q, k = rand((2, 128, 64)), rand((2, 128, 64))
    attn = fl.einsum("bqd,bkd->bqk", fl.asarray(q), fl.asarray(k))
    src, _ = _gpu_code(attn, device, **small)
    body = src[src.index("{"):]
    assert "min(" not in body and "?" not in body and "if (" not in body
    with fl.recipes.use(rc.gpu_tiled.with_params(**small)):
        got = attn.get()
    np.testing.assert_allclose(got, np.einsum("bqd,bkd->bqk", q, k), rtol=1e-5, atol=1e-5)
    src, _ = _gpu_code(fl.asarray(rand((128, 60))) @ fl.asarray(rand((60, 128))), device,
                       **small)
    assert "min(" in src  # (60: the last step padded, its reads clamped)


def test_gpu_lanes_steps_that_divide_the_sum_need_no_clamps(device):
    """x @ A: 32 lanes of the sum, 8 terms each unrolled (a step of 256); a sum of 512
    states its factor 512 (not GPU_ALIGN's 128), so no read is clamped or tested."""
    x, a = rand(512), rand((512, 512))
    expr = fl.asarray(x) @ fl.asarray(a)
    src, knl = _gpu_code(expr, device, stream_lanes=1, split_k=1)
    assert "k_lane" in knl.all_inames()  # (the lanes kernel)
    body = src[src.index("{"):]
    assert "min(" not in body and "?" not in body
    with fl.recipes.use(rc.gpu_tiled.with_params(stream_lanes=1, split_k=1)):
        got = expr.get()
    np.testing.assert_allclose(got, x @ a, rtol=1e-5, atol=1e-5)


def test_gpu_tile_step_is_unrolled_by_the_device_compiler(device, fresh_stats):
    """The tile step's k loop is left to the device compiler (``#pragma unroll``, which
    every OpenCL C version reads; Loopy spells it as OpenCL C 2.0's attribute): Loopy
    unrolling it made code generation several times slower.  Sizes of one aligned
    class share the kernel."""
    small = rc.gpu_tiled.with_params(tiles=rc.TileConfig(32, 32, 4, 8, 8, "blocked"))
    with fl.recipes.use(small):
        for m, k, n in ((128, 256, 384), (384, 128, 256)):  # one size class
            a, b = rand((m, k), m), rand((k, n), n)
            close((fl.asarray(a) @ fl.asarray(b)).get(), a, b)
        src = fl.show_code(fl.asarray(a) @ fl.asarray(b))
    body = src[src.index("{"):]
    assert "min(" not in body and "if (" not in body and "?" not in body
    assert re.search(r"#pragma unroll\s+for \(int k_in", body) and "unroll_hint" not in src
    assert fresh_stats()["kernels_compiled"] == 1


@pytest.mark.opencl_only  # (reads OpenCL source)
def test_gpu_lanes_partial_sums_fit_local_memory(device):
    """32 rows of float64 in 256 work-items would need 64 KiB: the group shrinks."""
    if not device.has_fp64:
        pytest.skip("float64")
    a, b = rand((32, 64)).astype(np.float64), rand((64, 40)).astype(np.float64)
    src, _ = _gpu_code(fl.asarray(a) @ fl.asarray(b), device)
    sizes = re.findall(r"__local double \w+\[([\d *]+)\]", src)
    assert sizes and sum(eval(n) for n in sizes) * 8 <= rc.MIN_LOCAL_MEMORY


def test_least_extents_reach_recipes_without_size_classes(device, restore_recipes):
    """A recipe given as a function has no size class; the program's least extents
    (MIN_SIDE, or a short side's length) still let it shift whole column blocks."""
    from fuseloop.expr.contraction import MIN_SIDE
    from fuseloop.lower.contraction import extent_range

    with fl.recipes.use(fl.recipes.Recipe("test-fn-blocked", rc.blocked(rc.CPU_BLOCKS),
                                          kind="contraction")):
        low = fl.program(fl.asarray(rand((40, 50))) @ fl.asarray(rand((50, 36)))).lower(device)
        assert low.sizes == ""
        assert extent_range(low.t_unit_before.default_entrypoint, "n")[0] == MIN_SIDE
        low = fl.program(fl.asarray(rand((40, 50))) @ fl.asarray(rand((50, 5)))).lower(device)
        assert extent_range(low.t_unit_before.default_entrypoint, "n") == (5, None)


def test_square_products_keep_whole_column_blocks(device):
    """m and n of a square product are one parameter: its class holds both sides'
    conditions, so the CPU rule knows the columns fill whole blocks (no clamping)."""
    A = fl.asarray(rand((80, 80)))
    prog, bindings = linearize([(A @ A)._node], (80, 80))
    c = prog.contraction
    assert c.m_size == c.n_size
    rows = max(rc.CPU_FEW_ROWS, rc.CPU_PANEL_ROWS)
    cls = rc.cpu_blocked.size_class(prog, bindings.params, 0, 0)
    assert f">= {rc.CPU_BLOCKS.rn}" in cls and f">= {rows + 1}" in cls
    cls = rc.make_size_class(8, 15)(prog, [5 if p == 80 else p for p in bindings.params], 0, 0)
    assert cls == f"p{c.m_size[1]} = 5"
