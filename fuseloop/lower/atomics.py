"""How an atomic update (``fl.add.at``: ``Target.atomic``) is written for a device.

Loopy's OpenCL target writes every atomic update as a compare-and-swap loop on the
element's bits: a load, the operation, an ``atomic_cmpxchg`` and a retry when
another work-item wrote in between.  On a GPU each update is then two round trips
to L2 (the load, the swap) instead of one fire-and-forget reduction, and a retry
under contention is a third: on an H100 ``fl.add.at`` of 2^24 float32 into 2^20
bins ran at 0.2x of torch's ``index_add_``.

An addition (``add``, ``subtract``) is written with the device's own atomic add
where the device has one:

* int32: ``atomic_add`` (OpenCL 1.1, every device);
* int64: ``atom_add`` (``cl_khr_int64_base_atomics``, which the compare-and-swap
  loop's ``atom_cmpxchg`` needs already);
* float32 (and float64 from compute capability 6.0) on NVIDIA's OpenCL: the PTX
  reduction ``red.global.add`` in inline assembly, which NVIDIA's OpenCL compiler
  accepts.  OpenCL C 1.2 has no float atomic add, and NVIDIA's driver offers no
  ``cl_ext_float_atomics`` (which would also need OpenCL C 2.0 for the whole
  program), so this is behind a check of the device's vendor (and
  ``FUSELOOP_PTX_ATOMICS=0`` turns it off: the compare-and-swap loop again, for
  kernels built from then on).

Everything else (``maximum``/``minimum``, float adds elsewhere, PoCL's CPU
device: x86 has no float atomic add, LLVM would write the same loop) keeps
Loopy's compare-and-swap loop.  (Imports Loopy: imported by the code generator only.)
"""

from __future__ import annotations

import os
from typing import Any

import loopy as lp
import numpy as np
from cgen import Statement
from loopy.target.opencl import OpenCLCASTBuilder
from loopy.types import NumpyType
from pymbolic.mapper.stringifier import PREC_NONE
from pymbolic.primitives import Sum

#: the float dtypes whose add an NVIDIA device reduces in memory, by the least
#: compute capability (major) that has the PTX instruction
#: (capability, PTX type, asm operand constraint, C type)
_PTX_FLOAT_ADD: dict[np.dtype, tuple[int, str, str, str]] = {
    np.dtype(np.float32): (2, "f32", "f", "float"),
    np.dtype(np.float64): (6, "f64", "d", "double")}


def _nvidia_capability(device: Any) -> int:
    """The device's CUDA compute capability (major) when it is NVIDIA's OpenCL
    device, else 0."""
    if getattr(device, "backend", "opencl") != "opencl":
        return 0
    if "nvidia" not in f"{device.vendor} {device.platform}".lower():
        return 0
    try:  # (cl_nv_device_attribute_query)
        return int(device.cl_device.compute_capability_major_nv)
    except Exception:  # no such query: assume the oldest the driver still supports
        return 2


def float_add_flavor(device: Any, dtype: np.dtype) -> str | None:
    """``"ptx"`` when a float add of ``dtype`` is reduced in memory on ``device`` by
    inline PTX, else None (the compare-and-swap loop)."""
    need = _PTX_FLOAT_ADD.get(np.dtype(dtype))
    if need is None or os.environ.get("FUSELOOP_PTX_ATOMICS", "1").strip().lower() in (
            "0", "off", "false", "no"):
        return None
    return "ptx" if _nvidia_capability(device) >= need[0] else None


def native_target(target: Any, device: Any) -> Any:
    """``target`` (Loopy's OpenCL target) made to write additions as native atomics
    on ``device``; other targets (CUDA's writes ``atomicAdd`` itself) as they are."""
    if type(target) is not lp.OpenCLTarget:
        return target
    return NativeAtomicsTarget(tuple(sorted(
        str(dt) for dt in _PTX_FLOAT_ADD if float_add_flavor(device, dt))))


class NativeAtomicsBuilder(OpenCLCASTBuilder):
    """Loopy's OpenCL code builder writing ``x = x + v`` atomics natively."""

    def emit_atomic_update(self, codegen_state: Any, lhs_atomicity: Any, lhs_var: Any,
                           lhs_expr: Any, rhs_expr: Any, lhs_dtype: Any,
                           rhs_type_context: Any) -> Any:
        native = self._native_add(codegen_state, lhs_expr, rhs_expr, lhs_dtype,
                                  rhs_type_context)
        if native is not None:
            return native
        return super().emit_atomic_update(codegen_state, lhs_atomicity, lhs_var, lhs_expr,
                                          rhs_expr, lhs_dtype, rhs_type_context)

    def _native_add(self, codegen_state: Any, lhs_expr: Any, rhs_expr: Any, lhs_dtype: Any,
                    rhs_type_context: Any) -> Any:
        """The statement adding natively, or None (not ``x = x + v``, or no native add
        of this dtype here)."""
        dtype = np.dtype(lhs_dtype.numpy_dtype)
        ptx = str(dtype) in getattr(self.target, "ptx_floats", ())
        if not (ptx or dtype in (np.int32, np.int64)):
            return None
        terms = rhs_expr.children if isinstance(rhs_expr, Sum) else ()
        rest = tuple(c for c in terms if c != lhs_expr)
        if len(rest) != len(terms) - 1 or not rest:
            return None
        ecm = self.get_expression_to_code_mapper(codegen_state)
        place = ecm(lhs_expr, prec=PREC_NONE, type_context=None)
        value = ecm(rest[0] if len(rest) == 1 else Sum(rest), prec=PREC_NONE,
                    type_context=rhs_type_context, needed_dtype=NumpyType(dtype))
        if dtype == np.int32:
            return Statement(f"atomic_add((volatile __global int *) &({place}), {value})")
        if dtype == np.int64:
            return Statement(f"atom_add((volatile __global long *) &({place}), {value})")
        _, suffix, constraint, ctype = _PTX_FLOAT_ADD[dtype]
        # (a reduction: no value comes back, so the work-item does not wait for it)
        return Statement(f'asm volatile("red.global.add.{suffix} [%0], %1;" :: '
                         f'"l"((ulong) &({place})), "{constraint}"(({ctype}) ({value})) '
                         ': "memory")')


class NativeAtomicsTarget(lp.OpenCLTarget):
    """Loopy's OpenCL target with native atomic adds (see the module); ``ptx_floats``:
    the float dtypes (names) added by inline PTX."""

    # (the code this module writes is part of the hash: Loopy's own code cache, used
    # when fuseloop's disk cache is off, keys generated code by the target's hash)
    code_version = "2"
    hash_fields = (*lp.OpenCLTarget.hash_fields, "ptx_floats", "code_version")
    comparison_fields = (*lp.OpenCLTarget.comparison_fields, "ptx_floats", "code_version")

    def __init__(self, ptx_floats: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.ptx_floats = ptx_floats

    def get_device_ast_builder(self) -> Any:
        return NativeAtomicsBuilder(self)
