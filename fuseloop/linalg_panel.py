"""The LU panel's pivot tournament on GPUs (a row per work-item), and its row exchanges.

``fuseloop_tslu`` (:mod:`fuseloop.linalg_kernels`) keeps a slice of ``2 nb`` rows in
local memory, so a panel of m rows needs ``log2(m / 2 nb) + 1`` launches, each a
long chain of barriers (per column: the pivot search, the swap, the update).  On a
GPU those levels were most of an LU's time (issue 27: ~50 of 64 ms at n = 4096).
``fuseloop_tslu_rows`` instead gives each work-item one row of the panel, held in
private memory (registers: the column loop is unrolled with the block ``NB`` a
compile-time constant), so that a group takes ``WG`` rows (512 for float32) and the
candidates of ``WG / b`` sets at the later levels: a panel of up to ``WG`` rows is
one launch, of up to ``WG^2 / b`` rows two.  Per column the pivot is a group
reduction (each work-item its row's ``|a|``; LANES work-items combine a share each;
every work-item combines the LANES values), its row broadcast through local memory,
and each row updated in its own registers: three barriers, no swaps (a chosen row
is retired; positions are tracked to keep LAPACK's tie rule: the first largest
``|a|`` in the current row order).  ``fuseloop_rowperm`` (:func:`exchange_rows`)
then applies either tournament's row exchanges to the whole matrix.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .expr.nodes import Storage
from .runtime.devices import Device

# Arguments as fuseloop_tslu's (see linalg_kernels._TSLU) plus spg, the candidate sets
# a group of a later level merges.  The work-item's row: level 0 (nsets == 0) row
# g WG + lid of the panel; later levels entry g spg b + lid of cand_in (sets in order,
# each in its pivot order).  key_v orders rows as LAPACK's search: |a|, NaN below any
# number (-1), no row / a retired row below that (-2); ties to the lower position.
# A group with fewer than b rows stops when none is left (its other candidates -1).
# The final level's piv and perm come from the chosen rows idx by one work-item:
# only 2 b "slots" can move (panel positions 0..b-1, and the original positions of
# the chosen rows from below them), so each lookup is an index, not a search.
_TSLU_ROWS = r"""
#define LANES (WG >= 512 ? 32 : WG >= 128 ? 16 : WG >= 32 ? 8 : 1)
#define PER (WG / LANES)
#define CH (WG < 64 ? WG : 64)
#define BETTER(v, p, bv, bp) ((v) > (bv) || ((v) == (bv) && (p) < (bp)))
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_tslu_rows(__global long *cand_out, __global long *piv, __global long *flag,
                        __global FL_T *diag, __global long *perm, __global const FL_T *a,
                        __global const long *cand_in,
                        const long k, const long ld, const long m, const long b_,
                        const long nsets, const long spg, const long final)
{
    __local FL_T key_v[WG];
    __local int key_p[WG];
    __local FL_T part_v[LANES];
    __local int part_p[LANES];
    __local FL_T urow[NB];
    __local int idx[NB];
    __local int rowat[2 * NB], posof[2 * NB];
    __local FL_T stage[CH * (NB + 1)];
    __local int ridx[WG];
    const int lid = get_local_id(0), g = get_group_id(0), b = (int)b_;
    long r = -1;
    if (nsets == 0) {
        if ((long)g * WG + lid < m)
            r = (long)g * WG + lid;
    } else {
        const long e = (long)g * spg * b + lid;
        const long end = ((long)(g + 1) * spg < nsets ? (long)(g + 1) * spg : nsets) * b;
        if (lid < spg * b && e < end)
            r = cand_in[e];
    }
    /* the rows read CH at a time through local memory, along them (a work-item per
       element: the loads coalesce, where each work-item reading its own row would
       touch a cache line per work-item and load) */
    ridx[lid] = (int)r;
    barrier(CLK_LOCAL_MEM_FENCE);
    FL_T v[NB];
    for (int ch = 0; ch < WG / CH; ++ch) {
        for (int e = lid; e < CH * NB; e += WG) {
            const int rr = ridx[ch * CH + e / NB], c = e % NB;
            stage[(e / NB) * (NB + 1) + c] =
                rr >= 0 && c < b ? a[(k + rr) * ld + k + c] : (FL_T)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid / CH == ch) {
#pragma unroll
            for (int c = 0; c < NB; ++c)
                v[c] = stage[(lid % CH) * (NB + 1) + c];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    int active = r >= 0, pos = lid, steps = 0;
#pragma unroll
    for (int j = 0; j < NB; ++j) {
        if (j >= b)
            break;
        const FL_T x = v[j];
        key_v[lid] = active ? (isnan(x) ? (FL_T)-1 : fabs(x)) : (FL_T)-2;
        key_p[lid] = pos;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < LANES) {
            FL_T bv = key_v[lid];
            int bp = key_p[lid];
            for (int t = 1; t < PER; ++t) {
                const FL_T tv = key_v[lid + t * LANES];
                const int tp = key_p[lid + t * LANES];
                if (BETTER(tv, tp, bv, bp)) {
                    bv = tv;
                    bp = tp;
                }
            }
            part_v[lid] = bv;
            part_p[lid] = bp;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        FL_T bv = part_v[0];
        int bp = part_p[0];
        for (int l = 1; l < LANES; ++l) {
            const FL_T tv = part_v[l];
            const int tp = part_p[l];
            if (BETTER(tv, tp, bv, bp)) {
                bv = tv;
                bp = tp;
            }
        }
        if (bv < (FL_T)-1.5)  /* no row left (the same for the whole group) */
            break;
        if (active && pos == bp) {  /* the pivot row: broadcast, then retired */
#pragma unroll
            for (int c = 0; c < NB; ++c)
                urow[c] = v[c];
            idx[j] = (int)r;
            active = 0;
        } else if (active && pos == j) {
            pos = bp;  /* swapped with the pivot row */
        }
        steps = j + 1;
        barrier(CLK_LOCAL_MEM_FENCE);
        const FL_T d = urow[j];
        if (final != 0 && lid < b)
            diag[j * b + lid] = urow[lid];
        if (active && d != (FL_T)0) {
            const FL_T l = v[j] * ((FL_T)1 / d);
            v[j] = l;
#pragma unroll
            for (int c = j + 1; c < NB; ++c)
                v[c] -= l * urow[c];
        }
        if (d == (FL_T)0 && final != 0 && lid == 0 && flag[0] == 0)
            flag[0] = k + j + 1;
    }
    if (final == 0) {
        for (int j = lid; j < b; j += WG)
            cand_out[(long)g * b + j] = j < steps ? idx[j] : -1;
        return;
    }
    if (lid == 0)
        fl_panel_swaps(piv, perm, idx, rowat, posof, k, b);
}
#undef LANES
#undef PER
#undef CH
#undef BETTER
"""

# The LU panel's row exchanges applied to the ncols columns of a (row stride ld) and
# to the row permutation rowperm: row k + perm[1 + 2t] receives row k + perm[2 + 2t]
# for t < perm[0] (at most 2 NB rows: see fuseloop_tslu).  A work-item per column
# reads all its rows into private memory before it writes any, so that the loads are
# all issued at once (LAPACK's swaps one after another would wait on each other).
# Columns lo <= c < hi then get rows k..k+nb from diag (nb x (hi - lo), contiguous):
# the panel's factored diagonal block.
_ROWPERM = r"""
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_rowperm(__global FL_T *a, __global long *rowperm, __global const long *perm,
                      __global const FL_T *diag, const long k, const long nb, const long ld,
                      const long ncols, const long lo, const long hi)
{
    FL_T stage[2 * NB];
    __local long stage_rows[2 * NB];
    __local int from[2 * NB], to[2 * NB];
    const int lid = get_local_id(0), count = (int)perm[0];
    const long c = get_global_id(0);
    /* the exchanges into local memory first: each load of a then needs no load of
       perm before it, so that many are in flight at once */
    for (int t = lid; t < count; t += WG) {
        from[t] = (int)perm[2 + 2 * t];
        to[t] = (int)perm[1 + 2 * t];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (c < ncols) {
#pragma unroll 8
        for (int t = 0; t < count; ++t)
            stage[t] = a[(k + from[t]) * ld + c];
    }
    if (get_group_id(0) == 0)
        for (int t = lid; t < count; t += WG)
            stage_rows[t] = rowperm[k + from[t]];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (c < ncols) {
#pragma unroll 8
        for (int t = 0; t < count; ++t)
            a[(k + to[t]) * ld + c] = stage[t];
    }
    if (get_group_id(0) == 0)
        for (int t = lid; t < count; t += WG)
            rowperm[k + to[t]] = stage_rows[t];
    if (c < ncols && c >= lo && c < hi)
        for (long j = 0; j < nb; ++j)
            a[(k + j) * ld + c] = diag[j * (hi - lo) + c - lo];
}
"""

#: this module's kernels as ``linalg_kernels._KERNELS`` lists them (it imports them
#: from here: this module imports it only inside its functions)
KERNELS: dict[str, tuple[str, list[str], int, bool]] = {
    "fuseloop_tslu_rows": (_TSLU_ROWS, ["out0", "out1", "out2", "out3", "out4", "in0", "in1"],
                           7, False),
    "fuseloop_rowperm": (_ROWPERM, ["out0", "out1", "in0", "in1"], 6, True),
}

#: which panel kernel the LU uses: "auto" (:func:`use_rows`' rule), "rows"
#: (``fuseloop_tslu_rows``) or "tile" (``fuseloop_tslu``); FUSELOOP_LU_PANEL
PANEL = os.environ.get("FUSELOOP_LU_PANEL", "auto").strip().lower()


#: work-items of a ``fuseloop_tslu_rows`` group instead of :func:`rows_group_size`'s
#: rule (0: the rule); FUSELOOP_LU_ROWS_GROUP, for tuning on a GPU
ROWS_GROUP = int(os.environ.get("FUSELOOP_LU_ROWS_GROUP", "0") or 0)


def rows_group_size(device: Any, nb: int, dtype: np.dtype) -> int:
    """Work-items (rows) of a ``fuseloop_tslu_rows`` group: 512 while a row of ``nb``
    elements is at most 256 bytes (64 registers: 512 work-items may use 128 each on
    NVIDIA's GPUs), else 256; within the device's limit (:data:`ROWS_GROUP`
    overrides the rule, a power of two)."""
    want = ROWS_GROUP or (512 if nb * dtype.itemsize <= 256 else 256)
    while want > device.max_work_group_size:
        want //= 2
    return want


def rows_local_bytes(wg: int, nb: int, dtype: np.dtype) -> int:
    """The local memory of a ``fuseloop_tslu_rows`` group of ``wg`` work-items."""
    lanes = 32 if wg >= 512 else 16 if wg >= 128 else 8 if wg >= 32 else 1
    stage = min(wg, 64) * (nb + 1)
    return (wg + lanes + nb + stage) * dtype.itemsize + (2 * wg + lanes + 5 * nb) * 4


def use_rows(device: Any, nb: int, dtype: np.dtype) -> bool:
    """Whether the LU panels use ``fuseloop_tslu_rows``: on GPUs (on CPUs a group's
    work-items run one after another: ``fuseloop_tslu``'s groups of one are faster),
    where a group holds at least two blocks' rows (each level must shrink the
    candidates) within the local memory a group may use.  :data:`PANEL` overrides
    the first part."""
    from .linalg_kernels import local_limit

    wg = rows_group_size(device, nb, dtype)
    if PANEL == "tile" or wg < 2 * nb or rows_local_bytes(wg, nb, dtype) > local_limit(device):
        return False
    return PANEL == "rows" or device.type != "cpu"


def rows_levels(m: int, b: int, wg: int) -> list[int]:
    """The work-groups of each launch of ``fuseloop_tslu_rows`` for a panel of ``m``
    rows and ``b`` columns with groups of ``wg`` rows."""
    groups = [-(-m // wg)]
    while groups[-1] > 1:
        groups.append(-(-groups[-1] // (wg // b)))
    return groups


def exchange_rows(a: Storage, rowperm: Storage, perm: Storage, diag: Storage, k: int,
                  b: int, ld: int, ncols: int, nb: int, dtype: np.dtype,
                  device: Device) -> None:
    """The panel's row exchanges (``perm``, from either tournament) applied to the
    ``ncols`` columns of ``a`` and to ``rowperm``, and its factored diagonal block
    (``diag``, ``b x b``) written to ``a[k:k+b, k:k+b]``: one launch (``nb``: the
    block, at least ``b``)."""
    from . import linalg_kernels as _k

    _k.launch("fuseloop_rowperm", dtype, [a, rowperm], [perm, diag],
              [k, b, ld, ncols, k, k + b], device, ncols, nb=nb)


def panel_pivots_rows(a: Storage, piv: Storage, flag: Storage, diag: Storage, perm: Storage,
                      cands: tuple[Storage, Storage], k: int, ld: int, m: int, b: int,
                      nb: int, dtype: np.dtype, device: Device) -> int:
    """:func:`fuseloop.linalg_kernels.panel_pivots` by ``fuseloop_tslu_rows`` (the same
    buffers and results); returns the number of launches."""
    from . import linalg_kernels as _k

    wg = rows_group_size(device, nb, dtype)
    assert wg >= 2 * b, (wg, b)
    sets, src, dst = 0, cands[1], cands[0]
    levels = rows_levels(m, b, wg)
    for groups in levels:
        _k.launch("fuseloop_tslu_rows", dtype, [dst, piv, flag, diag, perm], [a, src],
                  [k, ld, m, b, sets, wg // b, int(groups == 1)], device, groups=groups,
                  nb=nb, wg=wg)
        sets, src, dst = groups, dst, src
    return len(levels)


__all__ = ["PANEL", "ROWS_GROUP", "exchange_rows", "panel_pivots_rows", "rows_group_size",
           "rows_levels", "rows_local_bytes", "use_rows"]
