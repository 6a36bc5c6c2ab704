"""Recipes for Intel's CPU OpenCL runtime (device type ``"intel-cpu"``).

Intel's CPU compiler vectorises a kernel across the work-items of a work-group
(dimension 0, 16 float lanes with AVX-512), not along loops inside a work-item.
The PoCL recipes give each work-item a contiguous chunk and a sequential loop
(``cpu-chunked``, ``cpu-rows``): Intel's compiler then puts work-items 4096
elements apart into one vector, and every load becomes a gather.  Here
neighbouring work-items take neighbouring elements, as on a GPU: elementwise
kernels one element per work-item in groups of :data:`INTEL_GROUP`, reductions
the ``gpu-rows`` form with groups of :data:`INTEL_ROW_GROUP` work-items per row.

Measured on the Intel runtime 2026.2 (pip) on the project's 2-core Xeon (AVX-512),
in one process with the variants interleaved, 2^22 float32 elements, time of the
chunked recipe over this one: ``2*x + x*y - 3*y`` 2.0x, ``sin`` 4.0x, ``exp`` 2.9x,
``power`` 7.3x; 2048x2048 row softmax 4.8x, ``sum(axis=0)`` 6.1x,
``sum(axis=1)`` 1.2x; ``sum(x*y)`` 0.83x (its pieces are few and long).  The
machine was shared and busy: the ratios moved by up to 2x between runs, never
below 1 but for the full sum (``benchmarks/bench_cpu_runtimes.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import loopy as lp

from ..lower.kernel import FLAT_INAME
from .rows import make_gpu_rows

if TYPE_CHECKING:
    from ..runtime.devices import Device

#: the platform name of Intel's CPU runtime (see fuseloop.runtime.icd)
INTEL_CPU_PLATFORM = "Intel(R) OpenCL"
INTEL_GROUP = 128
INTEL_ROW_GROUP = 128


def is_intel_cpu(device: Device) -> bool:
    """Whether ``device`` runs on Intel's CPU OpenCL runtime."""
    return device.type == "cpu" and device.platform == INTEL_CPU_PLATFORM


def intel_flat(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
    """One element per work-item, :data:`INTEL_GROUP` neighbours per work-group."""
    return lp.split_iname(t_unit, FLAT_INAME, INTEL_GROUP, outer_tag="g.0", inner_tag="l.0")


intel_rows = make_gpu_rows(INTEL_ROW_GROUP)
