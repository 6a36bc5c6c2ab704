"""The generated source of the GPU matmul (``gpu-tiled``) for a fake H100.

Read, not run: the update of the register tile must stay the straight-line code
the GPU timings were measured with, the same in every process, while the zeroing
and the read-out of the accumulators are loops (Loopy's code generation time grew
with every statement it emitted).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import islpy as isl
import numpy as np

import fuseloop as fl
from fuseloop.lower import codegen

ROOT = Path(__file__).resolve().parents[1]


def _fake_h100(device):
    return dataclasses.replace(device, index=9133, type="gpu", compute_units=132,
                               name="NVIDIA H100 80GB HBM3", vendor="NVIDIA Corporation",
                               platform="NVIDIA CUDA", max_work_group_size=1024)


def _source(device, reg_loops: str = "loopy") -> str:
    """The fake H100's ``a @ a`` source with the register tile unrolled by Loopy (every
    register's statement written: what this file reads), or as ``reg_loops`` says."""
    from fuseloop.recipes import contraction, gpu_tiled

    # (two copies of the tiles: the update this file reads; A @ A takes one by default)
    tiles = contraction.GPU_TILES._replace(reg_loops=reg_loops, prefetch="double")
    a = fl.empty((256, 256), dtype=np.float32, device=device)
    # (split_k=1: on a real GPU of many units the rule would split the sum)
    with fl.recipes.use(gpu_tiled.with_params(tiles=tiles, split_k=1)):
        low = fl.program(a @ a).lower(_fake_h100(device))
    assert low.recipe.name == "gpu-tiled"
    with codegen.loopy_section():
        return codegen.generate(low.t_unit, low.device).source


def _inner_loop(src: str) -> list[str]:
    body = src[src.index("for (int k_in = 0; k_in <= 7; ++k_in)"):]
    body = body[body.index("{") + 1:body.index("}")]
    return [line.strip() for line in body.strip().splitlines()]


def _term(tile: str, row: int, block: int, reg: int, lid: int) -> str:
    # Loopy's spelling of tile[k_blk % 2][k_in][64 * block + 4 * lid + reg] (x_tile rows
    # padded; two copies of 8 rows each), read as component reg of a float4
    parts = [f"{8 * row} * (k_blk + -2 * (k_blk / 2))", f"{row} * k_in",
             *(["64"] if block else []), f"4 * lid({lid})"]
    return f"fl_lvec4({tile}[{' + '.join(parts)}], {reg})"


def _expected_update() -> list[str]:
    """The update as generated before the accumulators became an explicit array (with
    Loopy's name for them): columns outer, the innermost register of each side last;
    since the pipeline (TileConfig.vec, prefetch="double"), its tile reads are float4
    components from the step's copy of the tiles."""
    lines = []
    for n_r0 in range(4):
        for n_r1 in range(2):
            for m_r1 in range(2):
                for m_r0 in range(4):
                    i = len(lines)
                    x = _term("x_tile", 132, m_r1, m_r0, 1)
                    y = _term("y_tile", 128, n_r1, n_r0, 0)
                    lines.append(f"acc_reg[{i}] = acc_reg[{i}] + {x} * {y};")
    return lines


def test_register_tile_update_is_unchanged_and_the_rest_are_loops(device):
    src = _source(device)
    assert _inner_loop(src) == _expected_update(), src
    # zeroing and read-out: one statement each, in loops the device compiler unrolls
    assert len(re.findall(r"acc_reg\[[^\]]*\] = 0\.0f;", src)) == 1, src
    assert len(re.findall(r"\bout0\[", src)) == 1, src
    assert src.count("#pragma unroll") == 9, src  # 4 + 4 loops and the k step


def _source_with_hash_seed(reg_loops: str) -> str:
    child = ("import sys, fuseloop as fl\n"
             "sys.path.insert(0, 'tests')\n"
             "import test_matmul_gpu_source as t\n"
             f"print(t._source(fl.get_device(), {reg_loops!r}))\n")
    # (ROOT before the caller's own path, which may hold the installed dependencies)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONHASHSEED="4", PYTHONPATH=path)
    return subprocess.run([sys.executable, "-c", child], env=env, cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout


def test_register_tile_order_does_not_follow_the_hash_seed(device):
    # (Loopy ordered its privatised accumulators' loops by Python's string hashes)
    assert _inner_loop(_source_with_hash_seed("loopy")) == _expected_update()
    # the default (float4 components by Loopy, the rest by the device compiler): the
    # same source in a process with another hash seed
    default = _source(device, "vector")
    assert _source_with_hash_seed("vector").strip() == default.strip()


def test_loop_domains_are_one_per_iname(device):
    # (Loopy's code generation works on the domain of each statement's inames for
    # every statement it emits: one domain of all 20 inames made each isl operation
    # carry them all; split, the same source took about a quarter less time)
    for n in (256, 250):
        a = fl.empty((n, n), dtype=np.float32, device=device)
        low = fl.program(a @ a).lower(_fake_h100(device))
        knl = low.t_unit.default_entrypoint
        assert low.recipe.name == "gpu-tiled"
        assert max(len(d.get_var_names(isl.dim_type.set)) for d in knl.domains) == 1, \
            knl.domains
        assert len(knl.domains) == len(knl.all_inames())
