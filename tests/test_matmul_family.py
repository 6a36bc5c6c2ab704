"""The matmul family's layouts by rule (issue 25), read from the code generated for a fake
H100 (not run): each shape of the broad suite's matmul family gets its kernel from its
dimensions and strides, not from a case of its own (benchmarks/probes/matmul_family.py
times them against cuBLAS)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from matmul_source import fake_h100, tiled_source

import fuseloop as fl
from fuseloop import split_k
from fuseloop.recipes import contraction as rc
from fuseloop.splits import two_stage_split

#: one launch (split-K is decided per evaluation, outside the kernel)
ONE = rc.gpu_tiled.with_params(split_k=1)


def _e(device, *shape):
    return fl.empty(shape, dtype=np.float32, device=device)


def _update(src: str) -> list[str]:
    """The products of a step, with the tiles' row strides (padded or not) named alike."""
    body = src[src.index("for (int k_in"):]
    lines = [ln.strip() for ln in body.splitlines() if "acc_reg[" in ln and "fl_lvec4" in ln]
    return [re.sub(r"\b(132|128) \* k_in", "ROW * k_in", ln) for ln in lines]


@pytest.mark.opencl_only  # (reads OpenCL source)
def test_transposed_and_batched_products_share_the_tiles_and_update(device):
    """A.T @ B, A @ B.T and a batch get A @ B's blocks, work-items and products; only the
    fill differs (the operand's contiguous axis fastest, a tile stored across that order
    padded: x_tile of 132-float rows), a batch is the grid's third axis, and the tiles
    have two copies (one barrier a step) where both operands are read along the sum."""
    n = 256
    a, b = _e(device, n, n), _e(device, n, n)
    srcs = {"ab": tiled_source(a @ b, device, ONE), "atb": tiled_source(a.T @ b, device, ONE),
            "abt": tiled_source(a @ b.T, device, ONE),
            "batch": tiled_source(_e(device, 8, n, n) @ _e(device, 8, n, n), device, ONE)}
    update = _update(srcs["ab"])
    assert len(update) == 16  # (a float4's components written out, the rest loops)
    # (float4s of the tiles: copies x 8 rows x 128 or 132 floats / 4)
    tiles = {"ab": (264, 256), "atb": (256, 256), "abt": (528, 528), "batch": (264, 256)}
    for form, src in srcs.items():
        assert "reqd_work_group_size(16, 16, 1)" in src, form
        step = src[src.index("for (int k_blk"):]
        if form == "abt":
            assert step.count("barrier(") == 1 and "k_blk / 2" in step
        else:
            assert _update(src) == update, form
            assert step.count("barrier(") == 2 and "k_blk / 2" not in step, form
        x, y = tiles[form]
        assert f"__local float4 x_tile_store[{x}];" in src, form
        assert f"__local float4 y_tile_store[{y}];" in src, form
        assert ("gid(2)" in src) == (form == "batch"), form
        assert "min(" not in src and "?" not in src, form


@pytest.mark.opencl_only  # (reads OpenCL source)
def test_attention_scores_read_whole_steps(device):
    """einsum('bqd,bkd->bqk') with d = 64: A @ B.T's tiles over a batch, the sum of 64 in
    whole steps (its size class states it), no clamped or tested reads."""
    q, k = _e(device, 4, 256, 64), _e(device, 4, 256, 64)
    src = tiled_source(fl.einsum("bqd,bkd->bqk", q, k), device, ONE)
    assert "__local float4 x_tile_store[528];" in src and "gid(2)" in src
    assert "__local float4 y_tile_store[528];" in src
    assert "min(" not in src and "?" not in src


@pytest.mark.opencl_only  # (reads OpenCL source)
@pytest.mark.parametrize("case", ["rows64", "rows8", "cols8", "vecmat"])
def test_short_sides_get_their_kernels_by_rule(device, case):
    """64 rows: blocks of 64 rows (the tiles' float4 rows kept); 8 rows of a product whose
    long operand is contiguous along the long side: streamed (no local tiles), each
    work-item 8 rows x 2 columns; 8 columns of a matrix contiguous along the sum: 32
    lanes of the sum (the fast axis) by 8 rows, the short operand staged; x @ A: 32
    columns by 32 lanes of the sum in one launch, whole steps (no clamps)."""
    n = 4096 if case == "vecmat" else 512  # (x @ A: 4096 columns fill the H100's units)
    b = _e(device, n, n)
    expr = {"rows64": lambda: _e(device, 64, n) @ b, "rows8": lambda: _e(device, 8, n) @ b,
            "cols8": lambda: b @ _e(device, n, 8), "vecmat": lambda: _e(device, n) @ b}[case]()
    src = tiled_source(expr, device, ONE)
    if case == "rows64":
        assert "__local float4 x_tile_store[136];" in src  # (8 x (64 + 4) / 4: one copy)
        assert "reqd_work_group_size(16, 16, 1)" in src
    elif case == "rows8":
        assert "__local" not in src and "reqd_work_group_size(128, 1, 1)" in src
        # (8 rows x 2 columns of accumulators; Loopy prints the size folded or not)
        assert re.search(r"float acc_k_step_k_u\[(8 \* 2|16)\];", src), src
    elif case == "cols8":
        assert "reqd_work_group_size(32, 8, 1)" in src and "s_tile[" in src
        # (8 terms of each lane unrolled: 8 loads in flight; whole steps of 256)
        assert "for (int k_su = 0; k_su <= 7; ++k_su)" in src and "min(" not in src
    else:
        assert "reqd_work_group_size(32, 32, 1)" in src
        assert "min(" not in src and "?" not in src


def test_split_k_pieces_by_rule(device):
    """On the H100's 132 units at 4096: 64 rows in pieces of MIN_PIECE (8), 8 rows streamed
    in pieces of 128 (32), 8 columns and x @ A in one launch, the square product whole."""
    gpu, n = fake_h100(device), 4096
    b = _e(device, n, n)

    def pieces(expr):
        split = two_stage_split([expr._node], expr.shape, gpu)
        return 1 if split is None else split.pieces

    assert pieces(_e(device, 64, n) @ b) == n // split_k.MIN_PIECE == 8
    assert pieces(_e(device, 8, n) @ b) == 32
    assert pieces(b @ _e(device, n, 8)) == pieces(_e(device, n) @ b) == 1
    assert pieces(b @ b) == 1
