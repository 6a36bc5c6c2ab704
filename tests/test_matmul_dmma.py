"""Float64 products on FP64 tensor cores (``gpu-tiled``'s DMMA path,
``recipes/matmul_dmma.py``): the generated code for NVIDIA devices described with a compute
capability (read, not run: no tensor cores here), the rule that chooses the path, and the
FMA tiles wherever the rule says no.  Results on an H200 against numpy and cupy:
``benchmarks/probes/matmul_dmma_probe.py``.
"""

from __future__ import annotations

import dataclasses
import re
import types

import numpy as np
import pytest
from matmul_source import fake_h100, tiled_source

import fuseloop as fl
from fuseloop.errors import RecipeError
from fuseloop.lower import codegen
from fuseloop.recipes import contraction as rc
from fuseloop.recipes import matmul_dmma as dm


class _Capability:
    """A device handle answering NVIDIA's compute capability query (the rest: the real
    handle's, which code generation reads)."""

    def __init__(self, handle, major, minor):
        self._handle = handle
        self.compute_capability_major_nv = major
        self.compute_capability_minor_nv = minor

    def __getattr__(self, name):
        return getattr(self._handle, name)


def described(device, capability):
    """``device`` described as an NVIDIA GPU of ``capability`` (major * 10 + minor)."""
    h = fake_h100(device)
    return dataclasses.replace(h, cl_device=_Capability(h.cl_device, *divmod(capability, 10)))


# (one kernel: on a real GPU of many units the rule would split these sums, split_k)
ONE_KERNEL = rc.gpu_tiled.with_params(split_k=1)


def source(expr, device, capability=90, recipe=ONE_KERNEL):
    with fl.recipes.use(recipe):
        low = fl.program(expr).lower(described(device, capability))
    with codegen.loopy_section():
        return codegen.generate(low.t_unit, low.device).source


def _f64(device, *shape):
    return fl.empty(shape, dtype=np.float64, device=device)


def test_sm90_product_calls_the_tensor_cores(device):
    """The default blocks on sm_90: 16 warps of 32 x 32 outputs (2 x 4 tiles of 16 x 8, four
    accumulators a lane each) in m16n8k8 products, 128 x 128 blocks in steps of 8, two
    copies of the local tiles, one barrier a step."""
    a = _f64(device, 512, 512)
    src = source(a @ a, device)
    assert "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, " \
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};" in src
    assert "reqd_work_group_size(32, 16, 1)" in src
    assert "double acc_reg[2 * 4 * 4];" in src
    assert "__local double x_tile[2 * 8 * 132];" in src
    step = src[src.index("for (int k_blk"):]
    step = step[:step.index("#pragma unroll\n  for (int ti_e")]
    assert step.count("fl_dmma_m16n8k8(") == 1 and step.count("barrier(") == 1
    # no FMA tiles
    assert "fl_lvec2d" not in src


def test_sm80_takes_the_shape_it_has(device):
    """sm_80 has m8n8k4 only: the same blocks in 8 x 8 tiles, two accumulators a lane."""
    a = _f64(device, 512, 512)
    src = source(a @ a, device, capability=80)
    assert "mma.sync.aligned.m8n8k4.row.col.f64" in src and "m16n8" not in src
    assert "double acc_reg[4 * 4 * 2];" in src


def test_padding_batch_and_epilogue(device):
    """Sizes that are multiples of no block (clamped reads, guarded stores), a scaled
    operand, a batch (the third group axis) and an epilogue reading another array, all in
    one kernel."""
    x, y, c = _f64(device, 300, 204), _f64(device, 204, 260), _f64(device, 300, 260)
    src = source(1.5 * x @ y + c, device, recipe=rc.gpu_tiled.with_params(split_k=1))
    assert "fl_dmma_m16n8k8(" in src and "min(" in src
    store = src[src.index("for (int ti_e"):]
    assert re.search(r"if \(.* < p\d+ && .* < p\d+\)", store) and "in2[" in store
    # the next step's prefetch is the arrays' reads alone; the producer (1.5 *) and the
    # zero past the sum are applied where the registers are stored, after the products
    step = src[src.index("for (int k_blk"):]
    assert re.search(r"x_in0\[0\] = in0\[[^?]*\];", step) and "? s0 * x_in0[0] : 0.0" in step
    assert "y_in0[0] = in1[" in step and "x_reg" not in src
    assert step.index("x_in0[0] = in0[") < step.index("fl_dmma_m16n8k8(") < \
        step.index("? s0 * x_in0[0]")
    b = source(_f64(device, 3, 130, 70) @ _f64(device, 3, 70, 90), device,
               recipe=rc.gpu_tiled.with_params(split_k=1))
    assert "fl_dmma_m16n8k8(" in b and "gid(2)" in b


@pytest.mark.parametrize("case", ["no capability", "float32", "mixed", "medium", "off",
                                  "sm75"])
def test_fma_tiles_elsewhere(device, case):
    """The FMA tiles where the rule says no: a device that does not answer the capability
    query (the fake H100 of the other matmul tests), float32 or mixed operands, a side of
    at most 64 outputs (medium blocks), ``dmma=False``, compute capability 7.5."""
    a = _f64(device, 512, 512)
    if case == "no capability":
        src = tiled_source(a @ a, device, ONE_KERNEL)
    elif case in ("float32", "mixed"):
        b = fl.empty((512, 512), dtype=np.float32, device=device)
        src = source(b @ (b if case == "float32" else a), device)
    elif case == "medium":
        src = source(_f64(device, 64, 512) @ a, device,
                     recipe=rc.gpu_tiled.with_params(split_k=1))
    elif case == "off":
        src = source(a @ a, device, recipe=rc.gpu_tiled.with_params(dmma=False, split_k=1))
    else:
        src = source(a @ a, device, capability=75)
    assert "fl_dmma" not in src and "mma.sync" not in src
    assert "acc_reg[" in src  # (the register tiles)


def test_capability_of_each_backend(device):
    """From the CUDA backend's architecture, NVIDIA's OpenCL query, else 0."""
    assert dm.nvidia_capability(described(device, 86)) == 86
    cuda = dataclasses.replace(fake_h100(device), platform="CUDA",
                               cl_device=types.SimpleNamespace(arch="90"))
    assert dm.nvidia_capability(cuda) == 90
    assert dm.nvidia_capability(fake_h100(device)) == 0  # (no query answered)
    amd = dataclasses.replace(described(device, 90), vendor="AMD", platform="AMD APP")
    assert dm.nvidia_capability(amd) == 0
    assert dm.nvidia_capability(device) == 0 or device.type == "gpu"


def test_shape_sources():
    """Each shape's function: its lane's values of A, B and C in, D out (the first
    returned, the others through pointers), numbered as the PTX operands."""
    assert [dm.SHAPES[n].counts for n in dm.SHAPES] == [(1, 1, 2), (2, 1, 4), (4, 2, 4),
                                                        (8, 4, 4)]
    src = dm.dmma_source("m16n8k16")
    assert "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, " \
        "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%16, %17, %18, %19};" in src
    assert "double c3, double *d1, double *d2, double *d3)" in src
    assert '"=d"(d0), "=d"(*d1), "=d"(*d2), "=d"(*d3)' in src
    small = dm.dmma_source("m8n8k4")
    assert "{%0, %1}, {%2}, {%3}, {%4, %5};" in small and "double *d1)" in small


def test_blocks_the_recipe_can_build():
    assert all(dm.tiles_ok(t) for t in dm.DMMA_SEARCH)
    T = dm.DmmaTiles
    assert dm.tiles_ok(T(64, 64, 8, 8, 32, 2, "m8n8k4"))
    assert not dm.tiles_ok(T(64, 64, 8, 8, 32))  # (16-row products in 8-row warp tiles)
    assert not dm.tiles_ok(T(128, 128, 8, 32, 32, 2, "m16n8k16"))  # (steps of 8 < k)
    assert not dm.tiles_ok(T(128, 128, 16, 32, 32))  # (66 KiB of local tiles)
    assert not dm.tiles_ok(T(64, 64, 8, 32, 32, 3)) and not dm.tiles_ok(T(mma="m32n8k4"))
    with pytest.raises(RecipeError):
        rc.gpu_tiled.with_params(dmma_tiles=T(128, 128, 16, 32, 32))


def test_tuning_search_is_not_multiplied():
    """fl.tune tries the DMMA parameters' defaults only: their candidates would multiply
    the search of every GPU product, float32's too."""
    for name in ("dmma", "dmma_tiles"):
        assert rc.gpu_tiled.params[name].space.candidates == (rc.gpu_tiled.values[name],)
