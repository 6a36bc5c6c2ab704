"""Complex matrices in ``fl.linalg``, on the device.

Most complex problems are solved exactly through a real problem twice the size,
with the real device algorithms of :mod:`fuseloop.linalg_factor`:

* ``solve`` and ``inv`` through the real embedding ``E(A) = [[Re, -Im], [Im, Re]]``
  (2n x 2n): ``E(A) [Re x; Im x] = [Re b; Im b]`` holds exactly when ``A x = b``,
  and ``E(A)`` is singular exactly when ``A`` is (``det E(A) = |det A|^2``), so the
  real blocked LU with pivoting and its solves give the complex solution and numpy's
  error.
* ``cholesky`` through the same embedding with its rows and columns interleaved
  (each entry ``z`` a 2 x 2 block ``[[Re z, -Im z], [Im z, Re z]]``): the embedding
  of the complex factor ``L`` is lower triangular with a positive diagonal and
  ``E(L) E(L)^T = E(L L^H)``, so it is *the* real Cholesky factor of the interleaved
  embedding, which is positive definite exactly when ``A`` is.
* ``eigh`` / ``eigvalsh`` / ``svd``: see :mod:`fuseloop.linalg_complex_eig`.

Determinants need the complex phase, which no real matrix built from ``A`` has:
``det`` and ``slogdet`` use a blocked complex LU with partial pivoting (one
hand-written kernel a block column factors the panel, exchanges whole rows and
solves the block row; the trailing update is a hand-written tiled complex product,
:func:`gemm`, also the complex QR's).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import caches as _caches
from . import launching
from .array import Array
from .cache import KernelPlan, SourceKernel
from .creation import empty, zeros
from .linalg_kernels import PRELUDE as _k_prelude
from .linalg_kernels import buffer as _buf
from .linalg_kernels import contiguous_copy as _copy
from .mathfuncs import imag, real
from .ops.shape import concatenate, reshape, stack, tril


def conj(a: Array) -> Array:
    """The complex conjugate (lazy)."""
    from .ufuncs import FUNCTIONS

    return FUNCTIONS["conjugate"](a)


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The real dtype of a complex one's parts."""
    return np.dtype(np.float32 if dtype == np.complex64 else np.float64)


def combine(re: Array, im: Array, dtype: np.dtype) -> Array:
    """``re + 1j * im`` as ``dtype`` (lazy)."""
    return re.astype(dtype) + im.astype(dtype) * 1j


def embed(a: Array) -> Array:
    """``[[Re a, -Im a], [Im a, Re a]]`` of (a stack of) matrices (lazy)."""
    re, im = real(a), imag(a)
    return concatenate([concatenate([re, -im], axis=-1), concatenate([im, re], axis=-1)],
                       axis=-2)


def embed_interleaved(re: Array, im: Array) -> Array:
    """The n x n matrix ``re + i im`` as a 2n x 2n real one, entry (i, j) the 2 x 2 block
    ``[[re, -im], [im, re]]`` at rows and columns 2i, 2j (lazy)."""
    n, m = re.shape
    blocks = stack([stack([re, -im], axis=-1), stack([im, re], axis=-1)], axis=-2)
    # (n, m, 2, 2) -> (n, 2, m, 2)
    return reshape(blocks.swapaxes(1, 2), (2 * n, 2 * m))


def cholesky(a: Array) -> Array:
    """The lower Cholesky factor of one Hermitian n x n complex matrix (its lower
    triangle read, the diagonal's imaginary parts ignored, as LAPACK's)."""
    from .linalg_factor import _cholesky2

    im = tril(imag(a), -1)  # (the strict lower triangle is all that the embedding's
    # lower triangle takes from it, besides the diagonal's, which is ignored)
    lm = _cholesky2(_copy(embed_interleaved(real(a), im)))
    return combine(lm[0::2, 0::2], lm[1::2, 0::2], a.dtype)


def solve(a: Array, b: Array, vector: bool) -> Array:
    """``x`` with ``a @ x == b``, ``a`` (..., n, n), ``b`` (..., n, k) (or (n,) with
    ``vector``), one of them complex: through the real embedding (or, for a real
    ``a``, the real and imaginary parts of ``b`` side by side)."""
    from .linalg_factor import solve as real_solve

    dt = np.result_type(a.dtype, b.dtype)
    if dt.kind != "c":
        dt = np.result_type(dt, np.complex64)
    rt = real_dtype(dt)
    n = a.shape[-1]
    bb = reshape(b, (n, 1)) if vector else b
    k = bb.shape[-1]
    if a.dtype.kind != "c":
        x = real_solve(a.astype(rt), concatenate([real(bb).astype(rt), imag(bb).astype(rt)],
                                                 axis=-1))
        out = combine(x[..., :k], x[..., k:], dt)
    else:
        x = real_solve(embed(a.astype(dt)),
                       concatenate([real(bb).astype(rt), imag(bb).astype(rt)], axis=-2))
        out = combine(x[..., :n, :], x[..., n:, :], dt)
    return reshape(out, out.shape[:-1]) if vector else out


def inv(a: Array) -> Array:
    """The inverse of a stack of complex matrices: the first n columns of the inverse
    of the embedding (a solve against ``[I; 0]``)."""
    from .linalg_factor import _eye
    from .linalg_factor import solve as real_solve

    n, rt = a.shape[-1], real_dtype(a.dtype)
    eye = _eye(n, rt, a.device)
    rhs = concatenate([eye, eye * 0], axis=0)
    m = embed(a)
    if a.ndim > 2:
        from .ops.shape import broadcast_to

        rhs = broadcast_to(rhs, (*a.shape[:-2], 2 * n, n))
    x = real_solve(m, rhs)
    return combine(x[..., :n, :], x[..., n:, :], a.dtype)


# {{{ complex LU (determinants)

_PRELUDE = _k_prelude  # (the fp64 pragma; no barriers in groups of one)

# One block column of a right-looking complex LU with partial pivoting, in place on
# the row-major n x n a (as 2 n^2 reals RT, each entry's real then imaginary part:
# no complex type, so that the source also builds as CUDA C++), by
# one work-group: per column of the panel (columns k..k+b) the pivot (the largest
# |re| + |im| at or below the diagonal, the first of equals, as LAPACK's izamax) by
# a group reduction, the whole rows exchanged, the column below scaled and the rest
# of the panel updated; then the block row right of the panel solved against the
# panel's unit lower triangle.  A zero pivot column is left unscaled and its
# (1-based) index stored in flag[0] if that is still 0.
_PANEL = r"""
#define RE(i, j) a[2 * ((long)(i) * n + (j))]
#define IM(i, j) a[2 * ((long)(i) * n + (j)) + 1]
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void fuseloop_clu_panel(__global RT *a, __global long *piv, __global long *flag,
                        const long n_, const long k_, const long b_)
{
    __local RT best[WG];
    __local int where[WG];
    const int lid = get_local_id(0), n = (int)n_, k = (int)k_, k2 = (int)(k_ + b_);
    for (int j = k; j < k2; ++j) {
        RT m = (RT)-1;
        int at = j;
        for (int i = j + lid; i < n; i += WG) {
            const RT v = fabs(RE(i, j)) + fabs(IM(i, j));
            if (v > m) {
                m = v;
                at = i;
            }
        }
        best[lid] = m;
        where[lid] = at;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = WG / 2; s > 0; s /= 2) {
            if (lid < s && (best[lid + s] > best[lid]
                            || (best[lid + s] == best[lid] && where[lid + s] < where[lid]))) {
                best[lid] = best[lid + s];
                where[lid] = where[lid + s];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const int p = where[0];
        const RT pm = best[0];
        barrier(CLK_LOCAL_MEM_FENCE);  /* (all read them before the next column's) */
        if (lid == 0)
            piv[j] = p;
        if (p != j)
            for (int c = lid; c < n; c += WG) {
                const RT tr = RE(j, c), ti = IM(j, c);
                RE(j, c) = RE(p, c);
                IM(j, c) = IM(p, c);
                RE(p, c) = tr;
                IM(p, c) = ti;
            }
        barrier(CLK_GLOBAL_MEM_FENCE);
        /* (a zero pivot: its column, all zeros, left as it is, and the update below
           subtracts nothing; no barrier in a branch) */
        const int ok = pm > (RT)0;
        if (ok) {
            const RT dr = RE(j, j), di = IM(j, j), d2 = dr * dr + di * di;
            const RT rr = dr / d2, ri = -di / d2;  /* 1 / d */
            for (int i = j + 1 + lid; i < n; i += WG) {
                const RT xr = RE(i, j), xi = IM(i, j);
                RE(i, j) = xr * rr - xi * ri;
                IM(i, j) = xr * ri + xi * rr;
            }
        } else if (lid == 0 && flag[0] == 0) {
            flag[0] = j + 1;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        const int w = ok ? k2 - j - 1 : 0;
        for (long e = lid; e < (long)(n - j - 1) * w; e += WG) {
            const int i = j + 1 + (int)(e / w), c = j + 1 + (int)(e % w);
            const RT lr = RE(i, j), li = IM(i, j), ur = RE(j, c), ui = IM(j, c);
            RE(i, c) -= lr * ur - li * ui;
            IM(i, c) -= lr * ui + li * ur;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
    for (int c = k2 + lid; c < n; c += WG)
        for (int i = k + 1; i < k2; ++i) {
            RT sr = RE(i, c), si = IM(i, c);
            for (int t = k; t < i; ++t) {
                const RT lr = RE(i, t), li = IM(i, t), ur = RE(t, c), ui = IM(t, c);
                sr -= lr * ur - li * ui;
                si -= lr * ui + li * ur;
            }
            RE(i, c) = sr;
            IM(i, c) = si;
        }
}
#undef RE
#undef IM
"""

# C = op(A) op(B) or C -= op(A) op(B) (flags bit 2) for complex m x kk A and kk x n B,
# each operand's element (i, j) at off + i * s0 + j * s1 (in complex elements; a
# transpose: the strides swapped), op conjugating A (flags bit 0) and B (bit 1).
# Tiles of TS x TS by work-groups of TS * TS (a work-item an element of C), the
# operands' tiles through local memory.  The complex factorisations' products: one
# build per element type for every shape (fuseloop's contractions are built per shape).
_GEMM = r"""
__kernel __attribute__((reqd_work_group_size(TS * TS, 1, 1)))
void fuseloop_cgemm(__global RT *c, __global const RT *a, __global const RT *b,
                    const long m, const long n, const long kk,
                    const long coff, const long cs0, const long cs1,
                    const long aoff, const long as0, const long as1,
                    const long boff, const long bs0, const long bs1, const long flags)
{
    __local RT ar[TS][TS + 1], ai[TS][TS + 1], br[TS][TS + 1], bi[TS][TS + 1];
    const long tiles_n = (n + TS - 1) / TS, g = get_group_id(0);
    const int lid = get_local_id(0), li = lid / TS, lj = lid % TS;
    const long i = (g / tiles_n) * TS + li, j = (g % tiles_n) * TS + lj;
    const RT sa = (flags & 1) ? (RT)-1 : (RT)1, sb = (flags & 2) ? (RT)-1 : (RT)1;
    RT sr = (RT)0, si = (RT)0;
    for (long p0 = 0; p0 < kk; p0 += TS) {
        const long pa = p0 + lj, pb = p0 + li;
        RT xr = (RT)0, xi = (RT)0, yr = (RT)0, yi = (RT)0;
        if (i < m && pa < kk) {
            const long at = 2 * (aoff + i * as0 + pa * as1);
            xr = a[at];
            xi = sa * a[at + 1];
        }
        if (pb < kk && j < n) {
            const long at = 2 * (boff + pb * bs0 + j * bs1);
            yr = b[at];
            yi = sb * b[at + 1];
        }
        ar[li][lj] = xr;
        ai[li][lj] = xi;
        br[li][lj] = yr;
        bi[li][lj] = yi;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = 0; q < TS; ++q) {
            sr += ar[li][q] * br[q][lj] - ai[li][q] * bi[q][lj];
            si += ar[li][q] * bi[q][lj] + ai[li][q] * br[q][lj];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < m && j < n) {
        const long at = 2 * (coff + i * cs0 + j * cs1);
        if (flags & 4) {
            c[at] -= sr;
            c[at + 1] -= si;
        } else {
            c[at] = sr;
            c[at + 1] = si;
        }
    }
}
"""

#: the complex products' tile (work-groups of GEMM_TILE^2 work-items)
GEMM_TILE = 16

#: the complex LU's block width
CLU_BLOCK = 32

_kernels: dict[tuple[str, str, int], SourceKernel] = {}
_lock = threading.Lock()
_caches.register("linalg_complex.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per kernel, element type and work-group size")


def _build(name: str, source: str, dtype: np.dtype, wg: int, bufs: list[str], scalars: int,
           options: list[str]) -> SourceKernel:
    key = (name, dtype.char, wg)
    found = _kernels.get(key)
    if found is None:
        double = dtype == np.complex128
        plan = KernelPlan(
            name=name, source=_PRELUDE + source,
            arg_names=[*bufs, *(f"s{i}" for i in range(scalars))],
            gsize=["p[0]"], lsize=[str(wg)],
            build_options=[f"-DRT={'double' if double else 'float'}", f"-DWG={wg}",
                           f"-DIS_DOUBLE={int(double)}", *options],
            arg_dtypes=[*([None] * len(bufs)), *(["int64"] * scalars)])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def _panel_kernel(dtype: np.dtype, wg: int) -> SourceKernel:
    return _build("fuseloop_clu_panel", _PANEL, dtype, wg, ["out0", "out1", "out2"], 3, [])


def _gemm_kernel(dtype: np.dtype) -> SourceKernel:
    return _build("fuseloop_cgemm", _GEMM, dtype, GEMM_TILE * GEMM_TILE,
                  ["out0", "in0", "in1"], 13, [f"-DTS={GEMM_TILE}"])


def gemm(c: Array, a: Array, b: Array, m: int, n: int, kk: int, c_at: tuple[int, int, int],
         a_at: tuple[int, int, int], b_at: tuple[int, int, int], conj_a: bool = False,
         conj_b: bool = False, subtract: bool = False) -> None:
    """``C = op(A) op(B)`` (``subtract``: ``C -= ...``) for the complex contiguous arrays'
    elements at (offset, row stride, column stride) ``*_at``; ``op`` conjugates where
    asked (a conjugate transpose: ``conj_a`` with the strides swapped)."""
    if m <= 0 or n <= 0:
        return
    dev = c.device
    plan = launching.plan_for(_gemm_kernel(c.dtype).get(dev),
                              (-(-m // GEMM_TILE) * -(-n // GEMM_TILE),), 0, 0, dev)
    assert plan is not None
    flags = int(conj_a) | 2 * int(conj_b) | 4 * int(subtract)
    ins = [_buf(a), _buf(b)]
    launching.enqueue(plan, [_buf(c)], ins, [m, n, kk, *c_at, *a_at, *b_at, flags], False, dev)


def group_size(device: Any) -> int:
    """One work-item on a CPU (PoCL runs a group on one core), else up to 256."""
    if device.type == "cpu":
        return 1
    wg = 256
    while wg > device.max_work_group_size:
        wg //= 2
    return wg


def lu(a: Array) -> tuple[Array, Array, int]:
    """The packed LU factors of one complex n x n matrix, LAPACK's pivots (int64,
    0-based) and the 1-based column of the first zero pivot (0: none)."""
    from .linalg_factor import _flag, _read_flag

    n, dev = a.shape[0], a.device
    w = _copy(a)
    piv = empty((n,), np.int64, dev)
    flag = _flag(dev)
    wg = group_size(dev)
    compiled = _panel_kernel(a.dtype, wg).get(dev)
    plan = launching.plan_for(compiled, (1,), 0, 0, dev)
    assert plan is not None
    for k in range(0, n, CLU_BLOCK):
        k2 = min(n, k + CLU_BLOCK)
        launching.enqueue(plan, [_buf(w), _buf(piv), _buf(flag)], [], [n, k, k2 - k], False,
                          dev)
        if k2 < n:  # A22 -= L21 U12 (three disjoint parts of w)
            gemm(w, w, w, n - k2, n - k2, k2 - k, (k2 * n + k2, n, 1), (k2 * n + k, n, 1),
                 (k * n + k2, n, 1), subtract=True)
    return w, piv, _read_flag(flag)


def _parity(piv: Array) -> Array:
    from .creation import arange
    from .ops import reductions as _r

    swaps = _r.count_nonzero(piv != arange(piv.shape[0], device=piv.device))
    return 1 - 2 * (swaps % 2)


def det(a: Array) -> Array:
    """The determinant of one complex n x n matrix: the product of its LU diagonal,
    signed by the pivots."""
    from .ops import reductions as _r
    from .ops.shape import diagonal

    w, piv, _ = lu(a)
    return _r.prod(diagonal(w)) * _parity(piv).astype(a.dtype)


def slogdet(a: Array) -> tuple[Array, Array]:
    """(sign, log|det|) of one complex n x n matrix: the sign a complex number of
    modulus 1 (0 for a singular matrix, with log|det| -inf), as numpy's."""
    from .ops import reductions as _r
    from .ops.shape import diagonal
    from .ufuncs import FUNCTIONS

    w, piv, bad = lu(a)
    d = diagonal(w)
    mag = FUNCTIONS["absolute"](d)
    logabs = _r.sum(FUNCTIONS["log"](mag))
    if bad:  # (log|det|: the log of a zero pivot, -inf)
        return zeros((), a.dtype, a.device), logabs
    sign = _r.prod(d / mag.astype(a.dtype)) * _parity(piv).astype(a.dtype)
    return sign, logabs


# }}}

__all__ = ["CLU_BLOCK", "GEMM_TILE", "cholesky", "combine", "conj", "det", "embed",
           "embed_interleaved", "gemm", "inv", "lu", "real_dtype", "slogdet", "solve"]
