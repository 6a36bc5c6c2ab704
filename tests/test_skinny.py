"""Contractions with a short side on the GPU recipe (run on the CPU device): the
streaming kernel (fuseloop.recipes.skinny.stream_long), the lanes kernel's unrolled
walk, their code and their results against numpy, and the split-K rule for them."""

from __future__ import annotations

import dataclasses
import re

import kernel_source
import numpy as np
import pytest

import fuseloop as fl
from fuseloop import split_k
from fuseloop.recipes import DevicePredicate, skinny
from fuseloop.recipes import contraction as rc
from fuseloop.splits import two_stage_split

#: small blocks: quick to build on PoCL, and still several columns a work-item
SMALL = {"stream_group": 32, "stream_per": 2, "stream_unroll": 2, "split_k": 1}


def rand(shape, seed=0, dtype=np.float32):
    return (np.random.default_rng(seed).random(shape) - 0.5).astype(dtype)


def _code(expr, **params):
    import loopy as lp

    with fl.recipes.use(rc.gpu_tiled.with_params(**({"split_k": 1} | params))):
        t_unit = fl.program(expr).lower().t_unit
    return lp.generate_code_v2(t_unit).device_code()


@pytest.fixture
def small_gpu_recipe(device, restore_recipes):
    if device.type != "cpu":
        pytest.skip("the GPU recipe runs on GPUs anyway")
    pred = DevicePredicate(type=device.type, vendor=device.vendor, name=device.name,
                           platform=device.platform)
    fl.register_recipe(pred, rc.gpu_tiled.with_params(**SMALL), name="test-skinny",
                       kind="contraction")
    return device


def _loop_body(src):
    """The body of the loop over the reduced range's steps."""
    at = src.index("for (int k_step")
    return src[at:src.index("\n    }\n", at)]


def test_stream_reads_the_long_operand_once_per_step(device):
    """8 rows of A times B (contiguous along its columns): each work-item keeps 8 x 4
    accumulators and reads 4 values of B per step, one contiguous run per
    work-group (lid(0) + r * group); A's values are the same for the whole group."""
    a, b = fl.asarray(rand((8, 300))), fl.asarray(rand((300, 1000)))
    src = _code(a @ b, stream_group=64, stream_per=4, stream_unroll=4)
    c = kernel_source.dialect(src)  # (OpenCL or CUDA C)
    assert c.local_memory not in src and c.barrier not in src
    # groups of 64 work-items along axis 0: no work-item id along another axis
    assert kernel_source.group_threads(src) == 64
    assert c.local_id(1) not in src and c.local_id(2) not in src
    # (Loopy orders the privatised accumulator's axes as it likes)
    assert re.search(r"acc_k_step_k_u\[(8 \* 4|4 \* 8)\]", src)
    body = _loop_body(src)
    b_reads = set(re.findall(r"in1\[[^]]*\]", body))
    a_reads = set(re.findall(r"in0\[[^]]*\]", body))
    assert len(b_reads) == 4 and len(a_reads) == 8  # per step: 4 + 8 loads, 32 FMAs
    assert all(c.local_id(0) in r for r in b_reads)
    assert not any(c.reads_local_id(r) for r in a_reads)
    assert len(re.findall(r"acc_k_step_k_u\[\d+\] = ", body)) == 32
    assert kernel_source.unroll_hinted(body)  # the device compiler unrolls the steps
    # a vector times a matrix: one accumulator per column, stream_per columns (the
    # streaming kernel: not the lanes kernel, which the CPU's 2 units would take)
    src = _code(fl.asarray(rand(300)) @ b, stream_group=64, stream_per=4, stream_unroll=4,
                stream_lanes=0)
    assert len(set(re.findall(r"in1\[[^]]*\]", _loop_body(src)))) == 4


def test_stream_rule_keeps_accumulators_in_registers():
    assert skinny.stream_per(1, 4) == 4 and skinny.stream_per(8, 4) == 4
    assert skinny.stream_per(16, 4) == 2 and skinny.stream_per(32, 4) == 1
    assert skinny.stream_per(8, 4, itemsize=8) == 2  # 8-byte accumulators: half as many


@pytest.mark.parametrize("sa,sb,dtype,form", [
    ((2, 3, 70), (2, 70, 45), np.float32, "batched three rows"),
    ((8, 37), (37, 100), np.float64, "eight rows"),
    ((45, 70), (70, 5), np.float32, "five columns of a transposed matrix"),
], ids=["batched three rows", "eight rows float64", "five columns, A transposed"])
def test_stream_matches_numpy(small_gpu_recipe, sa, sb, dtype, form):
    """Sizes no block divides (padded, reads clamped, stores predicated)."""
    if dtype == np.float64 and not small_gpu_recipe.has_fp64:
        pytest.skip("float64")
    a, b = rand(sa, 1, dtype), rand(sb, 2, dtype)
    A = fl.asarray(np.ascontiguousarray(a.T)).T if "transposed" in form else fl.asarray(a)
    if "transposed" in form:
        src = fl.show_code(A @ fl.asarray(b))
        assert "k_lane" not in src and "for (int k_u" in src  # streamed along A's rows
    got = (A @ fl.asarray(b)).get()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_lanes_unrolled_match_numpy(small_gpu_recipe):
    """Few columns of a matrix contiguous along the sum: lanes along the sum, each
    walking its terms two at a time (a range of 75: the last terms are padding), the
    short operand staged in local memory (skinny.stage_short_operand)."""
    a, b = rand((45, 75), 3), rand((75, 3), 4)
    with fl.recipes.use(fl.recipe_for(small_gpu_recipe, "contraction").with_params(
            skinny_group=32, skinny_unroll=2)):
        src = fl.show_code(fl.asarray(a) @ fl.asarray(b))
        assert re.search(r"for \(int k_su = 0; k_su <= 1;", src)
        # B's short rows are staged in local memory: the lanes read it there, along k
        loop = src[src.index("for (int k_su"):]
        loop = loop[:loop.index("\n      }\n")]
        assert "__local float s_tile" in src and "in1[" not in loop
        assert re.search(r"s_tile\[[^]]*lid\(0\) \+ 32 \* k_su\]", loop)
        got = (fl.asarray(a) @ fl.asarray(b)).get()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


def test_split_rule_for_streamed_products(device, restore_recipes):
    """The streaming kernel has few work-items (stream_group * per columns a group):
    on a 132-unit GPU, x @ A and 8 rows at 4096 take the most pieces, 128 long."""
    gpu = dataclasses.replace(device, index=9133, type="gpu", compute_units=132,
                              name="NVIDIA H100 80GB HBM3", vendor="NVIDIA Corporation",
                              platform="NVIDIA CUDA", max_work_group_size=1024)
    f32 = np.float32
    B = fl.empty((4096, 4096), dtype=f32)

    def pieces(expr):
        split = two_stage_split([expr._node], expr.shape, gpu)
        return 1 if split is None else split.pieces

    # (a vector whose long side fills the device takes the lanes kernel, unsplit, by
    # default: the streaming kernel's split with stream_lanes=0)
    x4096 = fl.empty(4096, dtype=f32) @ B
    assert pieces(x4096) == 1
    with fl.recipes.use(rc.gpu_tiled.with_params(stream_lanes=0)):
        assert pieces(x4096) == split_k.MAX_PIECES
    assert pieces(fl.empty((8, 4096), dtype=f32) @ B) == 4096 // split_k.stream_min_piece(8)
    # 16 rows: pieces of at least 256 (their partial products are 16 rows each)
    assert pieces(fl.empty((16, 4096), dtype=f32) @ B) == 4096 // 256
    # the recipe's cap on pieces, and its aim in bytes in flight per unit
    x8192 = fl.empty(8192, dtype=f32) @ fl.empty((8192, 8192), dtype=f32)
    with fl.recipes.use(rc.gpu_tiled.with_params(stream_lanes=0)):
        assert pieces(x8192) == split_k.MAX_PIECES
    with fl.recipes.use(rc.gpu_tiled.with_params(stream_pieces=64, stream_bytes=1 << 18,
                                                 stream_lanes=0)):
        assert pieces(x8192) == 64
    with fl.recipes.use(rc.gpu_tiled.with_params(stream_bytes=1 << 14, stream_lanes=0)):
        assert pieces(x8192) == 8  # a quarter of the loads in flight: 8 pieces, not 32


def test_cpu_rule_gives_few_rows_wide_column_blocks():
    big = rc.CpuBlocks(6, 16, 1)
    # x @ A with at least short_cols columns: one row of a 256-column panel per step
    assert rc.cpu_shape(big, (1, 1), (256, None), 8, 0, 256) == rc.CpuBlocks(1, 256, 1)
    assert rc.cpu_shape(big, (8, 8), (300, None), 8, 0, 256) == rc.CpuBlocks(8, 256, 1)
    # fewer columns than that, or more rows: the blocks of the configuration
    assert rc.cpu_shape(big, (1, 1), (17, None), 8, 0, 256) == rc.CpuBlocks(1, 16, 1)
    assert rc.cpu_shape(big, (9, None), (300, None), 8, 0, 256) == big


def test_cpu_wide_blocks_match_numpy(device, restore_recipes):
    """300 columns: one 256-column block and one shifted back into range, which
    skips the columns it shares with the first (an in-place update adds once)."""
    if device.type != "cpu":
        pytest.skip("the CPU recipe")
    with fl.recipes.use(rc.cpu_blocked):
        a, b, c = rand((3, 77), 5), rand((77, 300), 6), rand(300, 7)
        src = fl.show_code(fl.asarray(a) @ fl.asarray(b))
        assert "acc_tile[3 * 256]" in src or "acc_tile[768]" in src
        got = (fl.asarray(a) @ fl.asarray(b)).get()
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
        C = fl.asarray(c)
        C += fl.asarray(a[0]) @ fl.asarray(b)
        np.testing.assert_allclose(C.get(), c + a[0].astype(np.float64) @ b, rtol=1e-5,
                                   atol=1e-5)


def test_medium_side_gets_blocks_of_its_length(device):
    """A side of more than `few` and at most `medium` outputs is not padded to the
    tile (64 rows of a 128-row tile: half computed for nothing): here 20 rows in
    blocks of 32 rather than 64.  (The kernel is the tiled one with other tiles,
    whose results the tiled kernels' tests check: only its code is read here.)"""
    params = {"tiles": rc.TileConfig(64, 32, 4, 8, 8, "blocked"), "few": 8, "medium": 32}
    A, B = fl.asarray(rand((20, 50), 8)), fl.asarray(rand((50, 70), 9))
    src = _code(A @ B, **params)
    assert 32 <= _tile_rows(src, "x") < 64  # (a tile's rows are padded)
    assert _tile_rows(_code(A @ B, **params | {"medium": 0}), "x") >= 64


def _tile_rows(src, name):
    shared = re.escape(kernel_source.dialect(src).local_memory)
    return int(re.search(rf"{shared} float {name}_tile\[4 \* (\d+)\]", src).group(1))



def _bulk_body(src):
    """The body of the bulk loop over whole unrolled steps (Loopy's slab)."""
    at = src.index("/* bulk slab for 'k_step' */")
    return src[at:src.index("/* final slab for 'k_step' */", at)]


@pytest.mark.parametrize("split", [1, 7], ids=["whole range", "seven pieces"])
def test_stream_bulk_loop_has_no_bounds_tests(device, restore_recipes, split):
    """A reduced range that no unroll divides (1009, prime): the bulk loop walks whole
    steps with no select and no clamp on k (the clamp of a work-item's own column is
    the same at every step); the remaining terms are one final step.  In 7 pieces (145
    long, the last 139: 1009 is prime) the piece's end is a bound of the loop, not a
    select per read (lower.contraction.bound_last_piece)."""
    if device.type != "cpu":
        pytest.skip("the GPU recipe presented on the CPU device")
    a0, b0 = rand((8, 1009), 10), rand((1009, 999), 11)
    a, b = fl.asarray(a0), fl.asarray(b0)
    params = {"stream_group": 64, "stream_per": 2, "stream_unroll": 8, "split_k": split}
    with fl.recipes.use(rc.gpu_tiled.with_params(**params)):
        src = fl.show_code(a @ b)
        got = (a @ b).get()
    if split > 1:
        assert "kernel 1 of 2" in src and "k_end = min(" in src
        src = src[:src.index("kernel 2 of 2")]
    body = _bulk_body(src)
    assert "for (int k_u = 0; k_u <= 7;" in body
    assert "?" not in body
    for clamp in re.findall(r"min\(((?:\([^()]*\)|[^()])*)\)", body):
        assert "k_" not in clamp, clamp
    assert "/* final slab for 'k_step' */" in src
    np.testing.assert_allclose(got, a0.astype(np.float64) @ b0, rtol=1e-4, atol=1e-4)


def test_stream_whole_steps_are_not_peeled(device, restore_recipes):
    """A reduced range that its size class makes whole unrolled steps (1024, a multiple
    of 128, in 8-step unrolls): one loop of whole steps and no final step, the same
    work per step as a peeled loop's bulk, and no copy of the body."""
    if device.type != "cpu":
        pytest.skip("the GPU recipe presented on the CPU device")
    a0, b0 = rand((8, 1024), 16), rand((1024, 999), 17)
    a, b = fl.asarray(a0), fl.asarray(b0)
    params = {"stream_group": 64, "stream_per": 2, "stream_unroll": 8, "split_k": 1}
    with fl.recipes.use(rc.gpu_tiled.with_params(**params)):
        src = fl.show_code(a @ b)
        got = (a @ b).get()
    assert "slab" not in src and src.count("for (int k_u = 0; k_u <= 7;") == 1
    assert "?" not in _loop_body(src)
    np.testing.assert_allclose(got, a0.astype(np.float64) @ b0, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,dtype", [(1, np.float32), (5, np.float32), (16, np.float32),
                                        (64, np.float32), (3, np.float64), (8, np.float64)])
def test_short_sides_match_numpy(small_gpu_recipe, rows, dtype):
    """Rows 1 to 64 times a matrix whose sum (211, prime) no unroll divides and whose
    columns (129) no block does: streamed up to ``stream`` rows, 64 rows in the tiles
    of a medium side.  (17 to 32 rows, the lanes kernel: test_lanes_unrolled_match_numpy;
    its build takes over a minute on PoCL at 17 rows.)"""
    if dtype == np.float64 and not small_gpu_recipe.has_fp64:
        pytest.skip("float64")
    a, b = rand((rows, 211), 12, dtype), rand((211, 129), 13, dtype)
    got = (fl.asarray(a) @ fl.asarray(b)).get()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("rows,dtype", [(1, np.float32), (16, np.float32), (16, np.float64)])
def test_stream_rule_defaults_match_numpy(device, restore_recipes, rows, dtype):
    """The GPU recipe's defaults on the sum of 211 terms (not whole unrolled steps: a
    final step) and 129 columns, for 1 and 16 rows."""
    if device.type != "cpu":
        pytest.skip("the GPU recipe presented on the CPU device")
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("float64")
    a, b = rand((rows, 211), 18, dtype), rand((211, 129), 19, dtype)
    with fl.recipes.use(rc.gpu_tiled):
        got = (fl.asarray(a) @ fl.asarray(b)).get()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("k,pieces", [(13, 6), (211, 5)], ids=["empty last piece", "short last"])
def test_stream_split_pieces_match_numpy(small_gpu_recipe, k, pieces):
    """Split-K pieces that do not tile the sum: 13 in 6 pieces of 3 (the last one empty:
    its loop runs no step) and 211 in 5 of 43 (the last 39); float64, two steps
    unrolled (a final step of one term in every piece of 43)."""
    if not small_gpu_recipe.has_fp64:
        pytest.skip("float64")
    a, b = rand((8, k), 14, np.float64), rand((k, 129), 15, np.float64)
    with fl.recipes.use(fl.recipe_for(small_gpu_recipe, "contraction").with_params(
            split_k=pieces)):
        fl.reset_stats()
        got = (fl.asarray(a) @ fl.asarray(b)).get()
        assert fl.stats()["kernels_launched"] == 2  # the pieces, then their sum
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)


def test_split_rule_follows_the_streaming_kernels_loads():
    """Work-items per compute unit that split-K aims for with the streaming kernel: the
    same bytes of loads in flight whatever its columns, unroll and element size."""
    values = dict(rc.gpu_tiled.values)
    per_unit = split_k.stream_items_per_unit
    assert per_unit(values, 8, 4) == split_k.ITEMS_PER_UNIT  # 2 columns, 8 steps, float32
    assert per_unit(values | {"stream_per": 1}, 8, 4) == 2 * split_k.ITEMS_PER_UNIT
    assert per_unit(values | {"stream_unroll": 16}, 8, 4) == split_k.ITEMS_PER_UNIT // 2
    assert per_unit(values, 8, 8) == split_k.ITEMS_PER_UNIT // 2  # float64: 8-byte loads
    # 16 rows: two columns (32 accumulators); 32 rows: one, so twice the work-items
    assert per_unit(values, 16, 4) == split_k.ITEMS_PER_UNIT
    assert per_unit(values, 32, 4) == 2 * split_k.ITEMS_PER_UNIT
    # the aim is the recipe's stream_bytes
    assert per_unit(values | {"stream_bytes": 1 << 15}, 8, 4) == split_k.ITEMS_PER_UNIT // 2


@pytest.mark.parametrize("rows,dtype", [(1, np.float32), (4, np.float64), (5, np.float32)])
def test_few_rows_in_one_launch_match_numpy(device, restore_recipes, rows, dtype):
    """``stream_lanes``: up to that many rows, where the long side alone gives the device's
    units a group each (skinny.lanes_fill), the lanes kernel in one launch (32 lanes of
    the sum combined in local memory, no split-K); more rows: the streaming kernel.  Sums
    of 211 and 1024 terms, 129 columns."""
    if device.type != "cpu":
        pytest.skip("the GPU recipe presented on the CPU device")
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("float64")
    params = {"stream_lanes": 4, "stream_lanes_group": 64, "split_k": 0}
    for k in (211, 1024):
        a, b = rand((rows, k), 20, dtype), rand((k, 129), 21, dtype)
        A, B = fl.asarray(a), fl.asarray(b)
        with fl.recipes.use(rc.gpu_tiled.with_params(**params)):
            src = fl.show_code(A @ B)
            fl.reset_stats()
            got = (A @ B).get()
            launches = fl.stats()["kernels_launched"]
        # (more rows: the streaming kernel, split as the CPU's 2 units make it)
        assert (launches == 1 and "k_lane" in src) if rows <= 4 else "k_lane" not in src
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64),
                                   rtol=tol, atol=tol)


def test_lanes_fill_rule():
    """One launch where the long side gives half the units a group (32 outputs a group
    of 1024): x @ A at 4096 on 132 units (128 groups) and at 3000 (94: gemver's), not at
    2048 (64), nor above ``stream_lanes`` rows, nor batched; and with fewer groups where
    the long operand is small (covariance's rows: 1800 x 1400 float64, 20 MB)."""
    values = dict(rc.gpu_tiled.values) | {"stream_lanes": 4}
    assert skinny.lanes_fill(values, 1, 4096, 132)
    assert skinny.lanes_fill(values, 1, 3000, 132)
    assert not skinny.lanes_fill(values, 1, 2048, 132)
    assert not skinny.lanes_fill(values, 1, 2048, 132, nbytes=2048 * 4096 * 8)
    assert skinny.lanes_fill(values, 1, 1400, 132, nbytes=1400 * 1800 * 8)
    assert not skinny.lanes_fill(values, 1, 1400, 132, batched=True, nbytes=8)
    assert not skinny.lanes_fill(values, 8, 4096, 132)
    assert not skinny.lanes_fill(values, 1, 4096, 132, batched=True)
    assert not skinny.lanes_fill(values | {"stream_lanes": 0}, 1, 4096, 132)


def test_vector_takes_one_launch_by_default():
    """The recipe's default ``stream_lanes`` (1): ``x @ A`` whose long side fills the
    device runs the lanes kernel in one launch; two rows and more keep split-K's two."""
    values = dict(rc.gpu_tiled.values)
    assert skinny.lanes_fill(values, 1, 4096, 132)
    assert not skinny.lanes_fill(values, 2, 4096, 132)
