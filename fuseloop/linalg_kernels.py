"""The hand-written OpenCL kernels of the device factorisations (``linalg_factor``).

Each kernel works in place on a row-major matrix buffer through element offsets
and strides passed as scalars, so that one compiled kernel serves every block of
every size.  They do the small, sequential parts of the blocked algorithms (the
diagonal block of a Cholesky factorisation, an LU panel with its pivot search,
row swaps, triangular solves of a block); the trailing updates, where the flops
are, are fuseloop's own matrix products.  Compiled through the kernel cache as
:class:`fuseloop.cache.SourceKernel`s and launched with
:func:`fuseloop.launching.enqueue`, like the mask compaction's kernels.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import caches as _caches
from . import launching
from .cache import KernelPlan, SourceKernel
from .expr.nodes import Storage
from .runtime.devices import Device

# FL_T: the element type; WG: work-items per group of the column-parallel kernels
_PRELUDE = r"""
#if IS_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
"""

# Unblocked Cholesky (lower) of the nb x nb block at a[off], row stride ld, by one
# work-group of WG work-items (a power of two; the rows below a pivot are shared
# out).  flag[0] is set to the (1-based) global column of the first pivot that is
# not positive (or NaN); the factorisation stops there.
_POTRF = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_potrf(__global FL_T *a, __global long *flag, const long off,
                    const long ld, const long nb, const long col0)
{
    const int lid = get_local_id(0);
    __local FL_T pivot[1];
    /* read by all before work-item 0 may set it: the group returns as one */
    const long failed = flag[0];
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (failed != 0)
        return;
    for (long j = 0; j < nb; ++j) {
        __global FL_T *rj = a + off + j * ld;
        if (lid == 0) {
            FL_T d = rj[j];
            for (long p = 0; p < j; ++p)
                d -= rj[p] * rj[p];
            if (d > (FL_T)0) {
                d = sqrt(d);
                rj[j] = d;
            } else {
                flag[0] = col0 + j + 1;
            }
            pivot[0] = d;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        const FL_T d = pivot[0];
        if (!(d > (FL_T)0))
            return;  /* (every work-item: d is the group's) */
        for (long i = j + 1 + lid; i < nb; i += WG) {
            __global FL_T *ri = a + off + i * ld;
            FL_T s = ri[j];
            for (long p = 0; p < j; ++p)
                s -= ri[p] * rj[p];
            ri[j] = s / d;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    }
}
"""

# Solve FL_T X = B in place of B for each of ncols columns (one work-item each): FL_T is
# n x n, lower or upper, with a unit diagonal or not; FL_T[i,j] = t[toff + i*ts0 +
# j*ts1], B[i,c] = b[boff + i*bs0 + c*bs1].  FL_T and B may share a buffer.
_TRSM = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_trsm(__global FL_T *b, __global const FL_T *t, const long n, const long ncols,
                   const long toff, const long ts0, const long ts1,
                   const long boff, const long bs0, const long bs1,
                   const long lower, const long unit)
{
    const long c = get_global_id(0);
    if (c >= ncols)
        return;
    __global FL_T *bc = b + boff + c * bs1;
    for (long s = 0; s < n; ++s) {
        const long i = lower ? s : n - 1 - s;
        FL_T v = bc[i * bs0];
        const long lo = lower ? 0 : i + 1, hi = lower ? i : n;
        for (long p = lo; p < hi; ++p)
            v -= t[toff + i * ts0 + p * ts1] * bc[p * bs0];
        if (!unit)
            v /= t[toff + i * ts0 + i * ts1];
        bc[i * bs0] = v;
    }
}
"""

# LU with partial pivoting of the panel a[k:rows, k:k+nb] (row stride ld), by one
# work-group of WG work-items (a power of two): the pivot search is a reduction
# over the group, the row updates are shared out.  piv[k + j] = the row swapped
# with row k + j (the first largest |a|, as LAPACK); rows are swapped within the
# panel only (fuseloop_laswp does the other columns).  A zero pivot sets flag[0]
# to its 1-based column (the first one) and the factorisation goes on, as
# LAPACK's getrf does.
_GETF2 = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_getf2(__global FL_T *a, __global long *piv, __global long *flag,
                    const long k, const long ld, const long rows, const long nb)
{
    const int lid = get_local_id(0);
    __local FL_T best_v[WG];
    __local long best_i[WG];
    for (long j = k; j < k + nb; ++j) {
        FL_T best = (FL_T)-1;
        long p = j;
        for (long i = j + lid; i < rows; i += WG) {
            const FL_T v = fabs(a[i * ld + j]);
            if (v > best) {
                best = v;
                p = i;
            }
        }
        best_v[lid] = best;
        best_i[lid] = p;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int w = WG / 2; w > 0; w >>= 1) {
            if (lid < w) {
                const FL_T o = best_v[lid + w];
                const long oi = best_i[lid + w];
                if (o > best_v[lid] || (o == best_v[lid] && oi < best_i[lid])) {
                    best_v[lid] = o;
                    best_i[lid] = oi;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        p = best_i[0];
        if (lid == 0)
            piv[j] = p;
        if (p != j)
            for (long c = k + lid; c < k + nb; c += WG) {
                const FL_T x = a[j * ld + c];
                a[j * ld + c] = a[p * ld + c];
                a[p * ld + c] = x;
            }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        const FL_T d = a[j * ld + j];
        if (d == (FL_T)0) {
            if (lid == 0 && flag[0] == 0)
                flag[0] = j + 1;
            continue;  /* (every work-item: d is the same for all) */
        }
        const FL_T r = (FL_T)1 / d;
        for (long i = j + 1 + lid; i < rows; i += WG) {
            __global FL_T *ri = a + i * ld;
            const FL_T l = ri[j] * r;
            ri[j] = l;
            for (long c = j + 1; c < k + nb; ++c)
                ri[c] -= l * a[j * ld + c];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}
"""

# The row swaps piv[k:k+nb] applied, in order, to the columns c < lo or c >= hi of
# the ncols columns of a (row stride ld): one work-item per column.
_LASWP = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_laswp(__global FL_T *a, __global const long *piv, const long k, const long nb,
                    const long ld, const long ncols, const long lo, const long hi)
{
    const long c = get_global_id(0);
    if (c >= ncols || (c >= lo && c < hi))
        return;
    for (long j = k; j < k + nb; ++j) {
        const long p = piv[j];
        if (p != j) {
            const FL_T x = a[j * ld + c];
            a[j * ld + c] = a[p * ld + c];
            a[p * ld + c] = x;
        }
    }
}
"""

# name -> (source, buffer arguments, number of int64 scalars, column-parallel: one
# work-item per column, else one work-group)
_KERNELS: dict[str, tuple[str, list[str], int, bool]] = {
    "fuseloop_potrf": (_POTRF, ["out0", "out1"], 4, False),
    "fuseloop_trsm": (_TRSM, ["out0", "in0"], 10, True),
    "fuseloop_getf2": (_GETF2, ["out0", "out1", "out2"], 4, False),
    "fuseloop_laswp": (_LASWP, ["out0", "in0"], 6, True),
}

_kernels: dict[tuple[str, str, int], SourceKernel] = {}
_lock = threading.Lock()
_caches.register("linalg_kernels.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per kernel, element type and work-group size")


def group_size(device: Device, parallel: bool) -> int:
    """Work-items per group: of the column-parallel kernels (``parallel``), else of
    the one work-group that factors a block.  On a CPU one work-item per group
    (PoCL runs a group's work-items on one core: no gain from sharing a block out);
    on a GPU a power of two within the device's limit."""
    if device.type == "cpu":
        return 1
    want = 64 if parallel else 256
    while want > device.max_work_group_size:
        want //= 2
    return want


def _kernel(name: str, dtype: np.dtype, wg: int) -> SourceKernel:
    key = (name, dtype.name, wg)
    found = _kernels.get(key)
    if found is None:
        source, bufs, n_scalars, _ = _KERNELS[name]
        ctype = "double" if dtype == np.float64 else "float"
        plan = KernelPlan(
            name=name, source=_PRELUDE + source,
            arg_names=[*bufs, *(f"s{i}" for i in range(n_scalars))],
            gsize=["p[0]"], lsize=[str(wg)],
            build_options=[f"-DFL_T={ctype}", f"-DWG={wg}",
                           f"-DIS_DOUBLE={int(dtype == np.float64)}"],
            arg_dtypes=[*([None] * len(bufs)), *(["int64"] * n_scalars)])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def launch(name: str, dtype: np.dtype, outs: list[Storage], ins: list[Storage],
           scalars: list[int], device: Device, columns: int = 1) -> None:
    """Run kernel ``name`` now (after any deferred launches) on ``device``;
    ``columns``: the work-items of a column-parallel kernel."""
    parallel = _KERNELS[name][3]
    wg = group_size(device, parallel)
    groups = max(1, -(-columns // wg)) if parallel else 1
    compiled = _kernel(name, dtype, wg).get(device)
    plan = launching.plan_for(compiled, (groups,), 0, 0, device)
    assert plan is not None
    args: list[Any] = [np.int64(s) for s in scalars]
    launching.enqueue(plan, outs, ins, args, False, device)


__all__ = ["group_size", "launch"]
