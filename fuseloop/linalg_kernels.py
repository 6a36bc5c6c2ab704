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

# Cholesky (lower) of the nb x nb diagonal block at a[off] (row stride ld, nb <= NB),
# by one work-group of WG work-items in local memory: the block's lower triangle is
# read once, factored right-looking (per column: the column scaled, then the rank-1
# update of the trailing triangle shared out over the group) and written back.
# flag[0] is set to the (1-based) global column of the first pivot that is not
# positive (or NaN); the factorisation stops there, and a later block's kernel with
# the flag set returns at once.
_POTRF = r"""
#define T(i, j) t[(i) * (NB + 1) + (j)]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_potrf(__global FL_T *a, __global long *flag, const long off,
                    const long ld, const long nb_, const long col0)
{
    __local FL_T t[NB * (NB + 1)];
    const int lid = get_local_id(0), nb = (int)nb_;
    /* no work-item of this group writes the flag before the end: all see one value */
    if (flag[0] != 0)
        return;
    for (int e = lid; e < nb * nb; e += WG) {
        const int i = e / nb, j = e % nb;
        if (j <= i)
            T(i, j) = a[off + i * ld + j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int bad = 0;
    for (int j = 0; j < nb; ++j) {
        const FL_T d2 = T(j, j);  /* (the same value for the whole group) */
        if (!(d2 > (FL_T)0)) {
            bad = j + 1;
            break;
        }
        const FL_T d = sqrt(d2);
        for (int i = j + 1 + lid; i < nb; i += WG)
            T(i, j) /= d;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid == 0)
            T(j, j) = d;
        const int w = nb - j - 1;
        for (int e = lid; e < w * w; e += WG) {
            const int i = j + 1 + e / w, c = j + 1 + e % w;
            if (c <= i)
                T(i, c) -= T(i, j) * T(c, j);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < nb * nb; e += WG) {
        const int i = e / nb, j = e % nb;
        if (j <= i)
            a[off + i * ld + j] = T(i, j);
    }
    if (bad != 0 && lid == 0)
        flag[0] = col0 + bad;
}
#undef T
"""

# Triangular solves T x = b for nvec vectors at once, in place: T is n x n (n <= NB),
# lower or upper, with a unit diagonal or the stored one, T[i,j] = t[toff + i*ts0 +
# j*ts1] (only its triangle is read); element i of vector v is b[boff + i*bs0 +
# v*bs1].  Each work-group reads T and VPG vectors into local memory (along
# whichever stride of b is 1), solves them there (each work-item its own vectors: no
# barriers while solving) and writes them back; with ``copy`` also to c[coff + i*cs0
# + v*cs1] (a contiguous copy that the next matrix product reads).  The Cholesky
# panel's rows, a block row of right-hand sides and an LU block row's columns are
# all such vectors.
_TRSM_BLOCKS = r"""
#define TT(i, j) tt[(i) * (NB + 1) + (j)]
#define XX(i, v) xx[(i) * (VPG + 1) + (v)]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_trsm_blocks(__global FL_T *b, __global FL_T *c, __global const FL_T *t,
                          const long n_, const long nvec, const long toff, const long ts0,
                          const long ts1, const long boff, const long bs0, const long bs1,
                          const long coff, const long cs0, const long cs1,
                          const long lower, const long unit, const long copy)
{
    __local FL_T tt[NB * (NB + 1)];
    __local FL_T xx[NB * (VPG + 1)];
    const int lid = get_local_id(0), n = (int)n_;
    const long v0 = (long)get_group_id(0) * VPG;
    const int nv = nvec - v0 < VPG ? (int)(nvec - v0) : VPG;
    for (int e = lid; e < n * n; e += WG) {
        const int i = e / n, j = e % n;
        if (lower ? j <= i : j >= i)
            TT(i, j) = t[toff + i * ts0 + j * ts1];
    }
    if (bs0 == 1) {
        for (int e = lid; e < nv * n; e += WG) {
            const int v = e / n, i = e % n;
            XX(i, v) = b[boff + i + (v0 + v) * bs1];
        }
    } else {
        for (int e = lid; e < nv * n; e += WG) {
            const int i = e / nv, v = e % nv;
            XX(i, v) = b[boff + i * bs0 + (v0 + v) * bs1];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int v = lid; v < nv; v += WG) {
        for (int s = 0; s < n; ++s) {
            const int i = lower ? s : n - 1 - s;
            FL_T xi = XX(i, v);
            if (!unit) {
                xi /= TT(i, i);
                XX(i, v) = xi;
            }
            const int lo = lower ? i + 1 : 0, hi = lower ? n : i;
            for (int r = lo; r < hi; ++r)
                XX(r, v) -= TT(r, i) * xi;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (bs0 == 1) {
        for (int e = lid; e < nv * n; e += WG) {
            const int v = e / n, i = e % n;
            b[boff + i + (v0 + v) * bs1] = XX(i, v);
        }
    } else {
        for (int e = lid; e < nv * n; e += WG) {
            const int i = e / nv, v = e % nv;
            b[boff + i * bs0 + (v0 + v) * bs1] = XX(i, v);
        }
    }
    if (copy != 0) {
        if (cs0 == 1) {
            for (int e = lid; e < nv * n; e += WG) {
                const int v = e / n, i = e % n;
                c[coff + i + (v0 + v) * cs1] = XX(i, v);
            }
        } else {
            for (int e = lid; e < nv * n; e += WG) {
                const int i = e / nv, v = e % nv;
                c[coff + i * cs0 + (v0 + v) * cs1] = XX(i, v);
            }
        }
    }
}
#undef TT
#undef XX
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
# work-item per column, else work-groups of group_size(device, False))
_KERNELS: dict[str, tuple[str, list[str], int, bool]] = {
    "fuseloop_potrf": (_POTRF, ["out0", "out1"], 4, False),
    "fuseloop_trsm_blocks": (_TRSM_BLOCKS, ["out0", "out1", "in0"], 14, True),
    "fuseloop_getf2": (_GETF2, ["out0", "out1", "out2"], 4, False),
    "fuseloop_laswp": (_LASWP, ["out0", "in0"], 6, True),
}

#: local memory a work-group of the blocked kernels may use on a GPU (NVIDIA's and
#: CUDA's static limit is 48 KiB per group; some left for the compiler)
GPU_LOCAL_BYTES = 40 * 1024

_kernels: dict[tuple[str, str, int, int, int], SourceKernel] = {}
_lock = threading.Lock()
_caches.register("linalg_kernels.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per kernel, element type, work-group size and block size")


def group_size(device: Device, parallel: bool) -> int:
    """Work-items per group: of the column-parallel kernels and the blocks' triangular
    solves (``parallel``), else of the one work-group that factors a block.  On a CPU
    one work-item per group (PoCL runs a group's work-items on one core: no gain from
    sharing a block out); on a GPU a power of two within the device's limit."""
    if device.type == "cpu":
        return 1
    want = 64 if parallel else 256
    while want > device.max_work_group_size:
        want //= 2
    return want


def vectors_per_group(device: Device, nb: int, dtype: np.dtype, wg: int) -> int:
    """How many vectors a work-group of ``fuseloop_trsm_blocks`` solves (with a block of
    ``nb``): 64, or fewer where the triangle and the vectors would not fit the local
    memory a GPU group may use, but never fewer than the group's work-items."""
    limit = GPU_LOCAL_BYTES if device.type != "cpu" else 1 << 20
    vpg = max(64, wg)
    while vpg > wg and (nb * (nb + 1) + nb * (vpg + 1)) * dtype.itemsize > limit:
        vpg //= 2
    if (nb * (nb + 1) + nb * (vpg + 1)) * dtype.itemsize > limit:
        raise ValueError(f"fl.linalg: a block of {nb} {dtype} elements does not fit the "
                         f"{limit} bytes of local memory of a work-group on {device}; "
                         "set a smaller block size")
    return vpg


def _kernel(name: str, dtype: np.dtype, wg: int, nb: int, vpg: int) -> SourceKernel:
    key = (name, dtype.name, wg, nb, vpg)
    found = _kernels.get(key)
    if found is None:
        source, bufs, n_scalars, _ = _KERNELS[name]
        ctype = "double" if dtype == np.float64 else "float"
        plan = KernelPlan(
            name=name, source=_PRELUDE + source,
            arg_names=[*bufs, *(f"s{i}" for i in range(n_scalars))],
            gsize=["p[0]"], lsize=[str(wg)],
            build_options=[f"-DFL_T={ctype}", f"-DWG={wg}", f"-DNB={nb}", f"-DVPG={vpg}",
                           f"-DIS_DOUBLE={int(dtype == np.float64)}"],
            arg_dtypes=[*([None] * len(bufs)), *(["int64"] * n_scalars)])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def launch(name: str, dtype: np.dtype, outs: list[Storage], ins: list[Storage],
           scalars: list[int], device: Device, columns: int = 1, *, groups: int = 0,
           nb: int = 1, vpg: int = 1) -> None:
    """Run kernel ``name`` now (after any deferred launches) on ``device``;
    ``columns``: the work-items of a column-parallel kernel, or ``groups`` work-groups
    of it; ``nb``, ``vpg``: the block size and vectors per group it is built for."""
    parallel = _KERNELS[name][3]
    wg = group_size(device, parallel)
    if not groups:
        groups = max(1, -(-columns // wg)) if parallel else 1
    compiled = _kernel(name, dtype, wg, nb, vpg).get(device)
    plan = launching.plan_for(compiled, (groups,), 0, 0, device)
    assert plan is not None
    args: list[Any] = [np.int64(s) for s in scalars]
    launching.enqueue(plan, outs, ins, args, False, device)


def potrf(a: Storage, flag: Storage, off: int, ld: int, n: int, col0: int, nb: int,
          dtype: np.dtype, device: Device) -> None:
    """Cholesky factor of the n x n block at ``a[off]`` (row stride ``ld``) in place,
    by one work-group in local memory (``n <= nb``)."""
    launch("fuseloop_potrf", dtype, [a, flag], [], [off, ld, n, col0], device, nb=nb)


def trsm_blocks(b: Storage, t: Storage, n: int, nvec: int, t_at: tuple[int, int, int],
                b_at: tuple[int, int, int], lower: bool, unit: bool, nb: int,
                dtype: np.dtype, device: Device,
                copy: tuple[Storage, int, int, int] | None = None) -> None:
    """Solve ``T x = b`` in place for ``nvec`` vectors of ``n <= nb`` elements: ``T``'s
    (offset, row stride, column stride) in ``t`` is ``t_at``, vector ``v``'s element
    ``i`` is ``b[off + i * s0 + v * s1]`` for ``b_at = (off, s0, s1)``; ``copy``: a
    buffer and its (offset, s0, s1) that also receives the solution."""
    wg = group_size(device, True)
    vpg = vectors_per_group(device, nb, dtype, wg)
    c, *c_at = copy if copy is not None else (b, *b_at)
    launch("fuseloop_trsm_blocks", dtype, [b, c], [t],
           [n, nvec, *t_at, *b_at, *c_at, int(lower), int(unit), int(copy is not None)],
           device, groups=max(1, -(-nvec // vpg)), nb=nb, vpg=vpg)


__all__ = ["group_size", "launch", "potrf", "trsm_blocks", "vectors_per_group"]
