"""The device kernels of ``fl.fft``: one Stockham pass of radix 2, 3, 4, 5, 8, 16 or 256.

A transform of length ``n = R1 * R2 * ...`` over the contiguous rows of a buffer is one
launch per factor, alternating between two buffers (Stockham's autosort form: no
bit-reversal pass, every pass reads and writes whole rows in natural order).  Pass
``p`` with radix ``R`` and ``ns`` (the product of the radices before it) has one
work-item per ``R`` elements: it reads ``x[j + r n/R]``, multiplies by the twiddles
``w^(r (j mod ns))`` of length ``ns R``, does a length-``R`` DFT in registers and writes
``y[(j / ns) ns R + j mod ns + r ns]``.  The direction is a scalar (``sign``: -1
forward, +1 inverse) and the last pass multiplies by ``scale`` (the norm's factor), so
the kernels are built once per radix, element type and index type.  A work-item's
twiddle comes from ``cospi``/``sinpi`` of an exact integer ratio (no table to read),
its powers from at most 14 products, which keeps float64 results within a few ulps.

A radix-256 pass (on GPUs: :func:`wide_passes`) is 16 x 16 by a work-group of 16 x JJ
work-items that exchange values through local memory, so a GPU goes through global
memory half as often as with radix 16.

Compiled through the kernel cache as :class:`fuseloop.cache.SourceKernel`s and
launched with :func:`fuseloop.launching.enqueue`, like the mask compaction's kernels.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import caches as _caches
from .. import launching
from ..cache import KernelPlan, SourceKernel
from ..expr.nodes import Storage
from ..runtime.devices import Device

#: the radices a pass can do, largest first (fewer passes: fewer trips through memory)
RADICES = (16, 8, 4, 2, 3, 5)

_SOURCE = r"""
#if IS_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double T;
typedef double2 T2;
#else
typedef float T;
typedef float2 T2;
#endif

inline T2 cmul(T2 a, T2 b) { return (T2)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
/* a * (s i) */
inline T2 mul_si(T2 a, T s) { return (T2)(-s * a.y, s * a.x); }

/* in-place DFTs of v[0..R-1] with exp(s 2 pi i jk / R) */
inline void dft2(T2 *a, T2 *b) { T2 t = *a; *a = t + *b; *b = t - *b; }

inline void dft4(T2 *a, T2 *b, T2 *c, T2 *d, T s)
{
    T2 t0 = *a + *c, t1 = *a - *c, t2 = *b + *d, t3 = mul_si(*b - *d, s);
    *a = t0 + t2; *b = t1 + t3; *c = t0 - t2; *d = t1 - t3;
}

/* 16 = 4 x 4: DFT4s over n2 (stride 4), twiddles W16^(n1 k2), DFT4s over n1; X[4 k1 +
   k2] ends in v[4 k2 + k1] (the callers undo the transposition) */
inline void dft16(T2 *v, T s)
{
    for (int a = 0; a < 4; ++a)
        dft4(&v[a], &v[a + 4], &v[a + 8], &v[a + 12], s);
    /* cos and sin of 2 pi e / 16 for the exponents e = a b <= 9 met below */
    const T p = (T)0.92387953251128675613, q = (T)0.38268343236508977173;
    const T h = (T)0.70710678118654752440;
    const T cw[10] = {(T)1, p, h, q, (T)0, -q, -h, -p, (T)-1, -p};
    const T sw[10] = {(T)0, q, h, p, (T)1, p, h, q, (T)0, -q};
    for (int a = 1; a < 4; ++a)
        for (int b = 1; b < 4; ++b) {
            const int e = a * b;
            v[a + 4 * b] = cmul(v[a + 4 * b], (T2)(cw[e], s * sw[e]));
        }
    for (int b = 0; b < 4; ++b)
        dft4(&v[4 * b], &v[4 * b + 1], &v[4 * b + 2], &v[4 * b + 3], s);
}

#if R != 256
inline void dft_r(T2 *v, T s)
{
#if R == 2
    dft2(&v[0], &v[1]);
#elif R == 4
    dft4(&v[0], &v[1], &v[2], &v[3], s);
#elif R == 8
    dft4(&v[0], &v[2], &v[4], &v[6], s);
    dft4(&v[1], &v[3], &v[5], &v[7], s);
    const T h = (T)0.70710678118654752440;
    v[3] = cmul(v[3], (T2)(h, s * h));
    v[5] = mul_si(v[5], s);
    v[7] = cmul(v[7], (T2)(-h, s * h));
    /* even half in v[0,2,4,6], odd in v[1,3,5,7] (k = 0..3 in that order) */
    T2 e0 = v[0], e1 = v[2], e2 = v[4], e3 = v[6];
    T2 o0 = v[1], o1 = v[3], o2 = v[5], o3 = v[7];
    v[0] = e0 + o0; v[4] = e0 - o0;
    v[1] = e1 + o1; v[5] = e1 - o1;
    v[2] = e2 + o2; v[6] = e2 - o2;
    v[3] = e3 + o3; v[7] = e3 - o3;
#elif R == 16
    dft16(v, s);
#elif R == 3
    const T c = (T)-0.5, d = (T)0.86602540378443864676;
    T2 t = v[1] + v[2], u = mul_si(v[1] - v[2], s * d), m = v[0] + c * t;
    v[0] = v[0] + t; v[1] = m + u; v[2] = m - u;
#elif R == 5
    const T c1 = (T)0.30901699437494742410, c2 = (T)-0.80901699437494742410;
    const T s1 = (T)0.95105651629515357212, s2 = (T)0.58778525229247312917;
    T2 a1 = v[1] + v[4], b1 = v[1] - v[4], a2 = v[2] + v[3], b2 = v[2] - v[3];
    T2 m1 = v[0] + c1 * a1 + c2 * a2, m2 = v[0] + c2 * a1 + c1 * a2;
    T2 n1 = mul_si(s1 * b1 + s2 * b2, s), n2 = mul_si(s2 * b1 - s1 * b2, s);
    v[0] = v[0] + a1 + a2;
    v[1] = m1 + n1; v[4] = m1 - n1;
    v[2] = m2 + n2; v[3] = m2 - n2;
#else
#error "unsupported radix"
#endif
}
#endif

#if R != 256
__kernel void fuseloop_fft_pass(__global T2 *restrict y, __global const T2 *restrict x,
                                const long n_, const long ns_, const long items_,
                                const T sign, const T scale)
{
    const IDX gid = (IDX)get_global_id(0);
    const IDX n = (IDX)n_, ns = (IDX)ns_, m = n / R;
    if (gid >= (IDX)items_)
        return;
    const IDX row = gid / m, j = gid - row * m, k = j % ns;
    x += row * n;
    y += row * n;
    T2 v[R];
    for (int r = 0; r < R; ++r)
        v[r] = x[j + r * m];
    if (ns > 1) {
        /* w = exp(sign 2 pi i k / (ns R)) from the exact ratio, its powers by products
           (at most 6: a few ulps; a cospi/sinpi per power cost PoCL twice the time) */
        const T f = (T)(2 * k) / (T)(ns * R);
        const T2 w = (T2)(cospi(f), sign * sinpi(f));
        T2 wr = w;
        for (int r = 1; r < R; ++r) {
            v[r] = cmul(v[r], wr);
            wr = cmul(wr, w);
        }
    }
    dft_r(v, sign);
    const IDX base = (j - k) * R + k;
#if R == 16
    for (int r = 0; r < R; ++r)
        y[base + r * ns] = v[4 * (r % 4) + r / 4] * scale;
#else
    for (int r = 0; r < R; ++r)
        y[base + r * ns] = v[r] * scale;
#endif
}
#else
/* Radix 256 = 16 x 16 by a group of 16 x JJ work-items: JJ neighbouring butterflies
   (consecutive j: coalesced loads and stores), 16 work-items each; work-item t loads
   v[t + 16 r2], does a DFT16 over r2, multiplies by W256^(t q1) and passes its values
   through local memory to work-item q1, which does the DFT16 over t. */
__kernel __attribute__((reqd_work_group_size(16 * JJ, 1, 1)))
void fuseloop_fft_pass(__global T2 *restrict y, __global const T2 *restrict x,
                       const long n_, const long ns_, const long items_,
                       const T sign, const T scale)
{
    __local T2 buf[JJ * 256];
    const int lid = get_local_id(0), jj = lid % JJ, t = lid / JJ;
    const IDX n = (IDX)n_, ns = (IDX)ns_, m = n / 256;
    const IDX slot = (IDX)get_group_id(0) * JJ + jj;
    const IDX row = slot / m, j = slot - row * m, k = j % ns;
    x += row * n;
    y += row * n;
    T2 v[16];
    for (int r = 0; r < 16; ++r)
        v[r] = x[j + (t + 16 * r) * m];
    if (ns > 1) {  /* w^(t + 16 r), w = exp(sign 2 pi i k / (256 ns)) */
        const IDX len = ns * 256;
        const T f1 = (T)(2 * ((k * t) % len)) / (T)len;
        const T f16 = (T)(2 * ((k * 16) % len)) / (T)len;
        T2 w = (T2)(cospi(f1), sign * sinpi(f1));
        const T2 w16 = (T2)(cospi(f16), sign * sinpi(f16));
        for (int r = 0; r < 16; ++r) {
            v[r] = cmul(v[r], w);
            w = cmul(w, w16);
        }
    }
    dft16(v, sign);
    {   /* W256^(t q1) by products of g = W256^t */
        const T f = (T)t / (T)128;
        const T2 g = (T2)(cospi(f), sign * sinpi(f));
        T2 gq = (T2)(1, 0);
        for (int q = 0; q < 16; ++q) {
            buf[jj * 256 + q * 16 + t] = cmul(v[4 * (q % 4) + q / 4], gq);
            gq = cmul(gq, g);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < 16; ++r)
        v[r] = buf[jj * 256 + t * 16 + r];
    dft16(v, sign);
    const IDX base = (j - k) * 256 + k;
    for (int q = 0; q < 16; ++q)
        y[base + (t + 16 * q) * ns] = v[4 * (q % 4) + q / 4] * scale;
}
#endif
"""

_kernels: dict[tuple[int, str, str, int], SourceKernel] = {}
_lock = threading.Lock()
_caches.register("ops.fft_kernels.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per radix, element type, index type and work-group size")


def wide_passes(device: Device) -> bool:
    """Whether radix-256 passes (local memory, groups of 256 or 128) are used: on GPUs,
    where each pass is a trip through global memory; on a CPU the radix-16 pass is as
    fast and needs no barrier."""
    if device.type == "cpu":
        return False
    local = getattr(device.cl_device, "local_mem_size", 0) or 0
    return local >= 32 * 1024 and device.max_work_group_size >= 256


def group_rows(dtype: np.dtype) -> int:
    """JJ: the butterflies per group of a radix-256 pass (32 KiB of local memory)."""
    return 8 if dtype == np.complex128 else 16


def plan(n: int, dtype: np.dtype, device: Device) -> list[int] | None:
    """:func:`factor`, with radix-256 passes first where the device takes them and
    ``n / 256`` is a multiple of their group's butterflies."""
    radices = factor(n)
    if radices is None or not wide_passes(device) or (n // 256) % group_rows(dtype):
        return radices
    out: list[int] = []
    rest = n
    while rest % 256 == 0:
        out.append(256)
        rest //= 256
    return [*out, *(factor(rest) or [])]


def factor(n: int) -> list[int] | None:
    """The radices of a Stockham transform of length ``n`` (16s first, an 8, 4 or 2
    for what remains of the power of two, then 3s and 5s), or None when ``n`` has
    another prime factor (Bluestein's algorithm then)."""
    out: list[int] = []
    rest = n
    for r in RADICES:
        while rest % r == 0:
            out.append(r)
            rest //= r
    return out if rest == 1 else None


def group_size(device: Device) -> int:
    if device.type == "cpu":
        return 16
    return min(128, device.max_work_group_size)


def _kernel(radix: int, dtype: np.dtype, index: str, wg: int) -> SourceKernel:
    if radix == 256:
        wg = 16 * group_rows(dtype)
    key = (radix, dtype.name, index, wg)
    found = _kernels.get(key)
    if found is None:
        plan = KernelPlan(
            name="fuseloop_fft_pass", source=_SOURCE,
            arg_names=["out0", "in0", "s0", "s1", "s2", "s3", "s4"],
            gsize=["p[0]"], lsize=[str(wg)],
            build_options=[f"-DR={radix}", f"-DIDX={index}", f"-DJJ={wg // 16}",
                           f"-DIS_DOUBLE={int(dtype == np.complex128)}"],
            arg_dtypes=[None, None, "int64", "int64", "int64",
                        *(["float64"] * 2 if dtype == np.complex128 else ["float32"] * 2)])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def stockham(a: Storage, b: Storage, rows: int, n: int, dtype: np.dtype, sign: int,
             scale: float, device: Device) -> bool:
    """Transform the ``rows`` contiguous rows of length ``n`` (``factor(n)`` must
    exist) held in ``a``, using ``b`` as the other buffer; the last pass multiplies by
    ``scale``.  Returns True when the result is in ``b``, False when in ``a``."""
    radices = plan(n, dtype, device)
    assert radices is not None
    wg = group_size(device)
    real = np.float64 if dtype == np.complex128 else np.float32
    index = "int" if rows * n < 2**31 - 8 * wg else "long"
    src, dst = a, b
    ns = 1
    for i, radix in enumerate(radices):
        items = rows * (n // radix)
        # one group per JJ butterflies of a radix-256 pass (n / 256 is a multiple of JJ)
        groups = items // group_rows(dtype) if radix == 256 else max(1, -(-items // wg))
        compiled = _kernel(radix, dtype, index, wg).get(device)
        launch = launching.plan_for(compiled, (groups,), 0, 0, device)
        assert launch is not None
        s = scale if i == len(radices) - 1 else 1.0
        args: list[Any] = [np.int64(n), np.int64(ns), np.int64(items), real(sign), real(s)]
        launching.enqueue(launch, [dst], [src], args, False, device)
        src, dst = dst, src
        ns *= radix
    return src is b


__all__ = ["RADICES", "factor", "group_rows", "group_size", "plan", "stockham",
           "wide_passes"]
