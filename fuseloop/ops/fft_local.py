"""``fl.fft``'s multi-stage passes: a whole sub-FFT of up to a few thousand points per
work-group, its radix stages in local memory, so a transform makes few trips to memory.

A transform of length ``n = L1 * L2 * ... * Lp`` (each ``Li`` at most
:attr:`FFTParams.max_sub`, 2-3-5-smooth) is ``p`` launches over all rows (the four-step /
six-step scheme in Stockham's autosort form).  Pass ``i`` with ``ns = L1 ... L(i-1)``
treats each row as ``m = n / Li`` columns: column ``j`` (``k = j mod ns``) reads
``x[j + r m]`` for ``r < Li``, multiplies by the twiddle ``w^(r k)`` with
``w = exp(sign 2 pi i / (ns Li))``, transforms those ``Li`` points in local memory (a
Stockham sequence of radix 16, 8, 4, 2, 3, 5 stages, ``T`` work-items per column) and
writes them to ``y[(j - k) Li + k + q ns]``.  A group holds ``JJ`` neighbouring columns,
so its loads (and, once ``ns >= JJ``, its stores) are runs of ``JJ`` contiguous
elements; its first pass stores whole runs of ``Li`` (``ns = 1``).  The pass's local
memory is ``JJ * Li`` elements (plus ``pad``'s).  A 2^24 transform takes 2 or 3
launches (by the device's rule, :func:`params`), rows of 1024 one launch.

The knobs are :class:`FFTParams`, chosen per device by :func:`params`;
``FUSELOOP_FFT`` (``"max_sub=1024,jj=4,per_item=16"``; ``legacy=1``: the one-launch-
per-radix passes of :mod:`fuseloop.ops.fft_kernels`) or :func:`set_override` replace
them, so a benchmark can compare variants in one run.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import caches as _caches
from .. import launching
from ..cache import KernelPlan, SourceKernel
from ..expr.nodes import Storage
from ..runtime.devices import Device
from . import fft_kernels as _radix


@dataclass(frozen=True)
class FFTParams:
    """How a device runs the passes (one place, so variants can be compared)."""

    #: the largest sub-FFT one launch does (points of a column in local memory)
    max_sub: int
    #: the most neighbouring columns per group (the length of contiguous load runs)
    jj: int
    #: the fewest columns per group when choosing ``max_sub``'s pass count (a run of
    #: this many elements fills a memory transaction; local memory bounds ``jj * L``)
    min_jj: int
    #: points per work-item (a column of ``L`` points has ``ceil(L / per_item)`` items)
    per_item: int
    #: the local memory a group may use, bytes
    local_bytes: int
    #: the most work-items in a group
    max_items: int
    #: the largest radix of the local stages (16, 8 or 4; then 2, 3, 5)
    max_radix: int = 16
    #: one padding element per ``pad`` points of a column in local memory (0: none):
    #: a radix-16 stage's stores, 16 points apart, then fall in different banks
    pad: int = 0
    #: the old passes, one launch per radix (for comparison)
    legacy: bool = False
    #: local-memory passes also for lengths over ``max_sub`` (several passes); else
    #: those take the one-launch-per-radix passes
    multi_pass: bool = True

    def local_for(self, n: int) -> bool:
        """Whether a length-``n`` transform runs the local-memory passes."""
        return not self.legacy and (self.multi_pass or n <= self.max_sub)


_override: dict[str, int] = {}


def _env_override() -> dict[str, int]:
    text = os.environ.get("FUSELOOP_FFT", "").strip()
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if key not in FFTParams.__dataclass_fields__:
            raise ValueError(f"FUSELOOP_FFT: unknown knob {key!r} in {text!r}; the knobs "
                             f"are {', '.join(FFTParams.__dataclass_fields__)}")
        out[key] = int(value)
    return out


def set_override(**knobs: int) -> None:
    """Replace :func:`params`' choices by these knobs (none: the device's rule again)."""
    bad = set(knobs) - set(FFTParams.__dataclass_fields__)
    if bad:
        raise ValueError(f"unknown FFT knobs {sorted(bad)}")
    _override.clear()
    _override.update(knobs)


def params(device: Device, dtype: np.dtype) -> FFTParams:
    """The device's rule.  GPUs (NVIDIA: 48 KiB of local memory per group, 1024
    items): columns of 4+ neighbours (a 32-byte sector of complex64 per load) and
    sub-FFTs up to ``local / (min_jj * itemsize)`` points, 16 points per item.  CPUs
    (PoCL: a group is a loop on one core, local memory a cache-resident array, and a
    local stage costs about what a whole pass through the caches does): sub-FFTs of up
    to 4096 points, for the fewest stages, a length over that by the one-launch-per-radix
    passes (there they took 0.6-0.7 of the local passes' time: 2^20, 2^22, rows of
    2^14; rows of 1024, one launch, 1.25x faster).  No padding of the local columns on
    GPUs: an H200 ran 2^24 in 0.50 ms without it, 0.64 with one element per 16."""
    item = np.dtype(dtype).itemsize
    knobs: dict[str, Any] = {**_env_override(), **_override}
    for flag in ("legacy", "multi_pass"):
        if flag in knobs:
            knobs[flag] = bool(knobs[flag])
    if device.type == "cpu":
        p = FFTParams(max_sub=4096, jj=16, min_jj=1, per_item=16, local_bytes=256 * 1024,
                      max_items=256, multi_pass=False)
        return replace(p, **knobs)
    local = getattr(device.cl_device, "local_mem_size", 0) or 16 * 1024
    p = FFTParams(max_sub=0, jj=16, min_jj=4, per_item=16, local_bytes=min(local, 48 * 1024),
                  max_items=min(256, device.max_work_group_size))
    p = replace(p, **knobs)
    if "max_sub" not in knobs:  # (after the knobs: min_jj or local_bytes may be given)
        padded = item * (1 + 1 / p.pad if p.pad else 1)
        p = replace(p, max_sub=1 << int(math.log2(p.local_bytes // (p.min_jj * padded))))
    return p


def split(n: int, max_sub: int) -> list[int] | None:
    """``n`` as the fewest 2-3-5-smooth factors of at most ``max_sub``, the largest
    first; None when ``n`` has another prime factor.  Of the ways to share the factor
    2s among them, the one with the fewest local stages (radix 16 where it can: 2^20
    as 4096 x 256, 5 stages, rather than 1024 x 1024, 6), the most balanced one
    otherwise (the 3s and 5s placed first, each on the smallest product so far)."""
    if max_sub < 16:
        raise ValueError(f"FFT knob max_sub={max_sub}: it must be at least 16")
    found = _split(n, max_sub)
    return None if found is None else list(found)


@functools.lru_cache(maxsize=256)  # (a search over the 2s' shares: once per length)
def _split(n: int, max_sub: int) -> tuple[int, ...] | None:
    if _radix.factor(n) is None:
        return None
    primes: list[int] = []
    rest = n
    for p in (5, 3, 2):
        while rest % p == 0:
            primes.append(p)
            rest //= p
    count = max(1, math.ceil(math.log(n) / math.log(max_sub) - 1e-9)) if n > 1 else 1
    while True:
        parts = [1] * count
        for p in primes:
            i = min(range(count), key=lambda i: parts[i])
            parts[i] *= p
        if max(parts) <= max_sub:
            break
        count += 1
    best = parts
    if 1 < count <= 3:
        odd = [1] * count
        for p in primes:
            if p != 2:
                i = min(range(count), key=lambda i: odd[i])
                odd[i] *= p
        twos = primes.count(2)
        cost = _stage_count(best)
        for head in itertools.product(range(twos + 1), repeat=count - 1):
            last = twos - sum(head)
            cand = [o << e for o, e in zip(odd, (*head, last))] if last >= 0 else []
            if cand and max(cand) <= max_sub and _stage_count(cand) < cost:
                best, cost = cand, _stage_count(cand)
    # the largest first: later passes have ns >= JJ (contiguous stores)
    return tuple(sorted((q for q in best if q > 1), reverse=True)) or (1,)


def _stage_count(parts: list[int]) -> int:
    return sum(len(_stages(q, 16)) for q in parts)


@dataclass(frozen=True)
class PassShape:
    """One launch: sub-FFT length ``sub``, ``jj`` columns of ``t`` items per group,
    its local stages' radices."""

    sub: int
    jj: int
    t: int
    stages: tuple[int, ...]
    pad: int = 0

    @property
    def items(self) -> int:
        return self.jj * self.t


def shapes(n: int, dtype: np.dtype, p: FFTParams) -> list[PassShape] | None:
    """The launches of a length-``n`` transform under ``p`` (None: not 2-3-5-smooth)."""
    subs = split(n, p.max_sub)
    if subs is None:
        return None
    item = np.dtype(dtype).itemsize
    out = []
    for sub in subs:
        t = max(1, -(-sub // p.per_item))
        jj = 1
        m = n // sub
        padded = sub + (sub // p.pad if p.pad else 0)
        while (jj * 2 <= min(p.jj, m) and jj * 2 * padded * item <= p.local_bytes
               and jj * 2 * t <= p.max_items):
            jj *= 2
        out.append(PassShape(sub, jj, t, _stages(sub, p.max_radix), p.pad))
    return out


def _stages(sub: int, max_radix: int) -> tuple[int, ...]:
    """The local stages' radices of a ``sub``-point column: the largest first."""
    out = []
    for r in (16, 8, 4, 2, 3, 5):
        while (r <= max_radix or r in (3, 5)) and sub % r == 0:
            out.append(r)
            sub //= r
    if sub != 1:
        raise ValueError(f"FFT knob max_radix={max_radix}: it must be 2, 4, 8 or 16")
    return tuple(out)


_DFTS = r"""
inline void dft_2(T2 *v, T s) { dft2(&v[0], &v[1]); }
inline void dft_4(T2 *v, T s) { dft4(&v[0], &v[1], &v[2], &v[3], s); }
inline void dft_8(T2 *v, T s)
{
    dft4(&v[0], &v[2], &v[4], &v[6], s);
    dft4(&v[1], &v[3], &v[5], &v[7], s);
    const T h = (T)0.70710678118654752440;
    v[3] = cmul(v[3], (T2)(h, s * h));
    v[5] = mul_si(v[5], s);
    v[7] = cmul(v[7], (T2)(-h, s * h));
    T2 e0 = v[0], e1 = v[2], e2 = v[4], e3 = v[6];
    T2 o0 = v[1], o1 = v[3], o2 = v[5], o3 = v[7];
    v[0] = e0 + o0; v[4] = e0 - o0;
    v[1] = e1 + o1; v[5] = e1 - o1;
    v[2] = e2 + o2; v[6] = e2 - o2;
    v[3] = e3 + o3; v[7] = e3 - o3;
}
inline void dft_16(T2 *v, T s)
{   /* dft16 leaves X[4 k1 + k2] in v[4 k2 + k1]: put it back */
    dft16(v, s);
    T2 u[16];
    for (int r = 0; r < 16; ++r)
        u[r] = v[4 * (r % 4) + r / 4];
    for (int r = 0; r < 16; ++r)
        v[r] = u[r];
}
inline void dft_3(T2 *v, T s)
{
    const T c = (T)-0.5, d = (T)0.86602540378443864676;
    T2 t = v[1] + v[2], u = mul_si(v[1] - v[2], s * d), m = v[0] + c * t;
    v[0] = v[0] + t; v[1] = m + u; v[2] = m - u;
}
inline void dft_5(T2 *v, T s)
{
    const T c1 = (T)0.30901699437494742410, c2 = (T)-0.80901699437494742410;
    const T s1 = (T)0.95105651629515357212, s2 = (T)0.58778525229247312917;
    T2 a1 = v[1] + v[4], b1 = v[1] - v[4], a2 = v[2] + v[3], b2 = v[2] - v[3];
    T2 m1 = v[0] + c1 * a1 + c2 * a2, m2 = v[0] + c2 * a1 + c1 * a2;
    T2 n1 = mul_si(s1 * b1 + s2 * b2, s), n2 = mul_si(s2 * b1 - s1 * b2, s);
    v[0] = v[0] + a1 + a2;
    v[1] = m1 + n1; v[4] = m1 - n1;
    v[2] = m2 + n2; v[3] = m2 - n2;
}

/* a column's point p in local memory: buf[LPOS(p) JJ + jj] */
#if PAD > 0
#define LPOS(p) ((p) + (p) / PAD)
#else
#define LPOS(p) (p)
#endif

/* a column with one item (TT = 1) needs no barrier between its stages */
#if TT > 1
#define LBARRIER barrier(CLK_LOCAL_MEM_FENCE)
#else
#define LBARRIER
#endif

/* one local Stockham stage of radix RS over the L points of each column (buf[r JJ +
   jj]); NSL is the product of the stages before it */
#define STAGE(RS, NSL, NBI) { \
    const int nb = L / RS; \
    T2 v[NBI * RS]; \
    for (int i = 0; i < NBI; ++i) { \
        const int b = t + i * TT; \
        if (b < nb) \
            for (int r = 0; r < RS; ++r) \
                v[i * RS + r] = buf[LPOS(b + r * nb) * JJ + jj]; \
    } \
    LBARRIER; \
    for (int i = 0; i < NBI; ++i) { \
        const int b = t + i * TT; \
        if (b < nb) { \
            const int k = b % NSL; \
            if (NSL > 1) { \
                const T f = (T)(2 * k) / (T)(NSL * RS); \
                const T2 w = (T2)(cospi(f), sign * sinpi(f)); \
                T2 wr = w; \
                for (int r = 1; r < RS; ++r) { \
                    v[i * RS + r] = cmul(v[i * RS + r], wr); \
                    wr = cmul(wr, w); \
                } \
            } \
            dft_##RS(&v[i * RS], sign); \
            const int base = (b - k) * RS + k; \
            for (int r = 0; r < RS; ++r) \
                buf[LPOS(base + r * NSL) * JJ + jj] = v[i * RS + r]; \
        } \
    } \
    LBARRIER; \
}
"""

_KERNEL = r"""
__kernel __attribute__((reqd_work_group_size(JJ * TT, 1, 1)))
void fuseloop_fft_local(__global T2 *restrict y, __global const T2 *restrict x,
                        const long n_, const long ns_, const long cols_,
                        const T sign, const T scale)
{
    __local T2 buf[JJ * LPOS(L)];
    const int lid = get_local_id(0), jj = lid % JJ, t = lid / JJ;
    const IDX n = (IDX)n_, ns = (IDX)ns_, m = n / L, cols = (IDX)cols_;
    const IDX first = (IDX)get_group_id(0) * JJ;
    {   /* item (c, r0) loads r = r0, r0 + TT, ...: its twiddles w^(k r) from cospi/sinpi
           every 16th point and by products of w^(k TT) between (PoCL's cospi is slow;
           16 products keep float64 within a few ulps) */
        const int c = lid % JJ, r0 = lid / JJ;
        const IDX slot = first + c;
        const bool valid = slot < cols;
        const IDX row = valid ? slot / m : 0, j = valid ? slot - row * m : 0;
        __global const T2 *src = x + row * n + j;
        const IDX len = ns * L, k = j % ns;
        T2 w = (T2)(1, 0), step = (T2)(1, 0);
        if (ns > 1) {
            const T fs = (T)(2 * ((k * TT) % len)) / (T)len;
            step = (T2)(cospi(fs), sign * sinpi(fs));
        }
        for (int r = r0, i = 0; r < L; r += TT, ++i) {
            T2 val = valid ? src[r * m] : (T2)(0, 0);
            if (ns > 1) {
                if (i % 16 == 0) {
                    const T f = (T)(2 * ((k * r) % len)) / (T)len;
                    w = (T2)(cospi(f), sign * sinpi(f));
                }
                val = cmul(val, w);
                w = cmul(w, step);
            }
            buf[LPOS(r) * JJ + c] = val;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
STAGES
    barrier(CLK_LOCAL_MEM_FENCE);  /* (the store reads other items' columns) */
    if (ns >= JJ) {  /* neighbouring items store neighbouring columns */
        const int c = lid % JJ, q0 = lid / JJ;
        const IDX slot = first + c;
        if (slot < cols) {
            const IDX row = slot / m, j = slot - row * m, k = j % ns;
            __global T2 *dst = y + row * n + (j - k) * L + k;
            for (int q = q0; q < L; q += TT)
                dst[q * ns] = buf[LPOS(q) * JJ + c] * scale;
        }
    } else {  /* (a first pass, ns = 1) neighbouring items store along q */
        for (int e = lid; e < JJ * L; e += JJ * TT) {
            const int c = e / L, q = e % L;
            const IDX slot = first + c;
            if (slot < cols) {
                const IDX row = slot / m, j = slot - row * m, k = j % ns;
                y[row * n + (j - k) * L + k + q * ns] = buf[LPOS(q) * JJ + c] * scale;
            }
        }
    }
}
"""

_kernels: dict[tuple[PassShape, str, str], SourceKernel] = {}
_lock = threading.Lock()
_caches.register("ops.fft_local.kernels", _kernels.clear, lambda: len(_kernels),
                 why="one per sub-FFT shape, element type and index type")


def _source(shape: PassShape) -> str:
    stage_lines = []
    nsl = 1
    for rs in shape.stages:
        nbi = -(-(shape.sub // rs) // shape.t)
        stage_lines.append(f"    STAGE({rs}, {nsl}, {nbi})")
        nsl *= rs
    # the per-radix passes' prelude: T/T2 by IS_DOUBLE, cmul, mul_si, dft2, dft4, dft16
    head = _radix._SOURCE.split("#if R != 256")[0]
    return head + _DFTS + _KERNEL.replace("STAGES", "\n".join(stage_lines))


def _kernel(shape: PassShape, dtype: np.dtype, index: str) -> SourceKernel:
    key = (shape, dtype.name, index)
    found = _kernels.get(key)
    if found is None:
        real = "float64" if dtype == np.complex128 else "float32"
        plan = KernelPlan(
            name="fuseloop_fft_local", source=_source(shape),
            arg_names=["out0", "in0", "s0", "s1", "s2", "s3", "s4"],
            gsize=["p[0]"], lsize=[str(shape.items)],
            build_options=[f"-DL={shape.sub}", f"-DJJ={shape.jj}", f"-DTT={shape.t}",
                           f"-DPAD={shape.pad}",
                           f"-DIDX={index}", f"-DIS_DOUBLE={int(dtype == np.complex128)}"],
            arg_dtypes=[None, None, "int64", "int64", "int64", real, real])
        with _lock:
            found = _kernels.setdefault(key, SourceKernel(plan))
    return found


def launches(n: int, dtype: np.dtype, device: Device) -> int:
    """How many launches a length-``n`` transform takes (0: Bluestein's)."""
    p = params(device, dtype)
    if not p.local_for(n):
        return len(_radix.plan(n, dtype, device) or [])
    return len(shapes(n, dtype, p) or [])


def transform(src: Storage, dst: Storage, spare: Callable[[], Storage], rows: int, n: int,
              dtype: np.dtype, sign: int, scale: float, device: Device) -> Storage:
    """Transform ``rows`` contiguous rows of length ``n`` (2-3-5-smooth, ``params``
    not legacy) read from ``src``, which is left unchanged unless ``spare()`` returns
    it; the passes write ``dst``, then the buffer ``spare()`` returns and ``dst`` in
    turn.  Returns the buffer holding the result, times ``scale``."""
    passes = shapes(n, dtype, params(device, dtype))
    assert passes is not None
    real = np.float64 if dtype == np.complex128 else np.float32
    index = "int" if 2 * rows * n < 2**31 - 1 else "long"  # (twice: twiddle ratios)
    current, other = src, None
    ns = 1
    for i, s in enumerate(passes):
        if i == 0:
            target = dst
        else:
            if other is None:
                other = spare()
            target = other if i % 2 else dst
        cols = rows * (n // s.sub)
        compiled = _kernel(s, dtype, index).get(device)
        launch = launching.plan_for(compiled, (-(-cols // s.jj),), 0, 0, device)
        assert launch is not None
        last = i == len(passes) - 1
        args: list[Any] = [np.int64(n), np.int64(ns), np.int64(cols), real(sign),
                           real(scale if last else 1.0)]
        launching.enqueue(launch, [target], [current], args, False, device)
        current = target
        ns *= s.sub
    return current


__all__ = ["FFTParams", "PassShape", "launches", "params", "set_override", "shapes",
           "split", "transform"]
