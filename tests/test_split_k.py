"""Split-K: contractions with few output tiles split their reduced range over
work-groups (fuseloop.split_k), on a fake 132-unit GPU (the rule) and with the GPU
recipe forced onto PoCL (the kernels and their results against numpy)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import split_k
from fuseloop.expr.program import linearize
from fuseloop.recipes import DevicePredicate
from fuseloop.recipes import contraction as rc
from fuseloop.splits import two_stage_split


def _fake_gpu(device):
    """The device as a 132-unit NVIDIA GPU (the rule reads its type and units only)."""
    return dataclasses.replace(device, index=9132, type="gpu", compute_units=132,
                               name="NVIDIA H100 80GB HBM3", vendor="NVIDIA Corporation",
                               platform="NVIDIA CUDA", max_work_group_size=1024)


def _pieces(expr, device):
    split = two_stage_split([expr._node], expr.shape, device)
    if split is None:
        return 1
    assert split.columns  # the pieces are a first axis: a batch of the contraction
    return split.pieces


def test_rule_splits_few_tiles_on_a_large_gpu(device, restore_recipes):
    gpu = _fake_gpu(device)
    f32 = np.float32
    # (buffers are never written or read here: empty ones are enough)
    B = fl.empty((4096, 4096), dtype=f32)
    eight = _pieces(fl.empty((8, 4096), dtype=f32) @ B, gpu)
    assert eight > 1
    assert _pieces(fl.empty((64, 4096), dtype=f32) @ B, gpu) > 1
    # x @ A: split where its 2048 outputs leave units idle; 4096 fill the device, so
    # the lanes kernel (skinny.lanes_fill) takes it in one launch
    assert _pieces(fl.empty(4096, dtype=f32) @ fl.empty((4096, 2048), dtype=f32), gpu) > 1
    assert _pieces(fl.empty(4096, dtype=f32) @ B, gpu) == 1
    # enough tiles for every compute unit: one stage
    assert _pieces(fl.empty((4096, 4096), dtype=f32) @ B, gpu) == 1
    # an epilogue reading another array is applied when the pieces are combined
    c = fl.empty(4096, dtype=f32)
    assert _pieces(fl.tanh(fl.empty((8, 4096), dtype=f32) @ B + c), gpu) == eight
    # the parameter overrides the rule; 1 never splits
    with fl.recipes.use(rc.gpu_tiled.with_params(split_k=1)):
        assert _pieces(fl.empty((8, 4096), dtype=f32) @ B, gpu) == 1
    if device.type == "cpu":  # the CPU recipe has no split_k: one stage
        assert _pieces(fl.empty((8, 4096), dtype=f32) @ B, device) == 1


def test_rule_keeps_pieces_long_enough():
    # a tiny kernel on many units, but the range allows only K / MIN_PIECE pieces
    assert split_k.split_rule(256, 4 * split_k.MIN_PIECE, 132) == 4
    assert split_k.split_rule(256, 1 << 20, 132) == split_k.MAX_PIECES
    assert split_k.split_rule(1 << 20, 1 << 20, 132) == 1


def test_first_stage_is_a_batched_contraction(device):
    """The chunked first stage is detected as a contraction whose batch is the piece."""
    a, b = fl.empty((8, 1000), dtype=np.float32), fl.empty((1000, 64), dtype=np.float32)
    prog, binds = linearize([(a @ b)._node], (4, 8, 64), chunks=(4, 250, True, 0))
    c = prog.contraction
    assert c is not None and c.b_dims == (0,) and c.split is not None
    assert binds.params[c.k_size[1]] == 250 and binds.params[c.split[0][1]] == 1000


@pytest.fixture
def split_gpu_recipe(device, restore_recipes):
    if device.type != "cpu":
        pytest.skip("the GPU recipe runs on GPUs anyway")
    pred = DevicePredicate(type=device.type, vendor=device.vendor, name=device.name,
                           platform=device.platform)
    # (small float64 tiles: quick to build on PoCL)
    recipe = rc.gpu_tiled.with_params(split_k=4, wide_tiles=rc.TileConfig(32, 32, 4, 8, 8))
    fl.register_recipe(pred, recipe, name="test-split-k", kind="contraction")
    return device


def test_split_products_match_numpy(split_gpu_recipe, fresh_stats):
    """float64, sizes no tile divides and a range the pieces do not divide (1001: the
    last piece is short), with an epilogue reading another array."""
    rng = np.random.default_rng(5)
    a, b, c = rng.random((40, 1001)) - 0.5, rng.random((1001, 50)) - 0.5, rng.random(50)
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    src = fl.show_code(fl.tanh(A @ B + C))
    first, second = src.split("/* kernel 2 of 2 */")
    assert "fuseloop_contract" in first and "gid(2)" in first  # the pieces: a batch axis
    assert "tanh" not in first and "tanh" in second  # the epilogue combines the pieces
    fl.reset_stats()
    got = fl.tanh(A @ B + C).get()
    assert fresh_stats()["kernels_launched"] == 2
    np.testing.assert_allclose(got, np.tanh(a @ b + c), rtol=1e-12, atol=1e-13)
    # another split_k is another plan (run plans keep it in their key): one kernel
    with fl.recipes.use(fl.recipe_for(split_gpu_recipe, "contraction").with_params(split_k=1)):
        fl.reset_stats()
        got = fl.tanh(A @ B + C).get()
        assert fresh_stats()["kernels_launched"] == 1
    np.testing.assert_allclose(got, np.tanh(a @ b + c), rtol=1e-12, atol=1e-13)
    # vector times matrix, float32: the short side in registers, pieces on their own axis
    x, m = rng.random(1024).astype(np.float32), rng.random((1024, 70)).astype(np.float32)
    got = (fl.asarray(x) @ fl.asarray(m)).get()
    np.testing.assert_allclose(got, x.astype(np.float64) @ m, rtol=1e-5)
