"""Generated source of a matrix product for an NVIDIA GPU, read on any device (shared by the
matmul source tests)."""

from __future__ import annotations

import dataclasses

import fuseloop as fl
from fuseloop.lower import codegen
from fuseloop.recipes import contraction as rc


class _NoCapability:
    """A device handle that does not answer NVIDIA's compute capability query (the rest:
    the real handle's), so a described device is the same on a real NVIDIA GPU."""

    def __init__(self, handle):
        self._handle = handle

    def __getattr__(self, name):
        if name.startswith("compute_capability"):
            raise AttributeError(name)
        return getattr(self._handle, name)


def fake_h100(device):
    """``device`` described as an H100 that does not say its compute capability (so
    float64 products take the FMA tiles), so the GPU rule picks what it would pick there."""
    return dataclasses.replace(device, index=9133, type="gpu", compute_units=132,
                               name="NVIDIA H100 80GB HBM3", vendor="NVIDIA Corporation",
                               platform="NVIDIA CUDA", max_work_group_size=1024,
                               cl_device=_NoCapability(device.cl_device))


def tiled_source(expr, device, recipe=rc.gpu_tiled) -> str:
    """The OpenCL source of ``expr``'s product under ``recipe``, lowered for an H100."""
    with fl.recipes.use(recipe):
        low = fl.program(expr).lower(fake_h100(device))
    with codegen.loopy_section():
        return codegen.generate(low.t_unit, low.device).source
