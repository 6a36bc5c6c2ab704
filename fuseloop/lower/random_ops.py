"""OpenCL C of the counter-based random numbers (``fuseloop.random``).

Each random value is a function of its element's flat index, a 64-bit key and a
64-bit counter, computed where it is consumed: no buffer of random numbers exists
unless the result is stored.  The generators are Random123's Philox4x32-10 and
Threefry4x64-20 from the headers pyopencl ships (``pyopencl/cl/pyopencl-random123``),
inlined into the helper's source so that the kernel source is complete (the disk
cache and the compile workers see every byte).

Element ``i`` of ``uniform``/``normal``/``integers`` uses one block: counter
``(i, counter)`` (Philox: four 32-bit words, low word first; Threefry:
``(i, counter, 0, 0)``) and key ``key`` (Philox: two 32-bit words; Threefry:
``(key, 0, 0, 0)``).  Of the block's 128 or 256 bits it uses the first 64 (``w0``)
and, for ``normal``, the next 64 (``w1``).  ``bits`` is the raw stream instead:
element ``i`` is word ``i % 4`` of block ``(i // 4, counter)``.
"""

from __future__ import annotations

import os
import re
from functools import cache

import numpy as np

from .. import caches as _caches
from ..dtypes import c_type_name

_INCLUDE = re.compile(r'^\s*#\s*include\s+"[^"]+"\s*$', re.M)


@cache
def r123_source(method: str) -> str:
    """Random123's header for ``method`` with the headers it includes, inlined
    (each keeps its include guard, so helpers may repeat it)."""
    import pyopencl

    folder = os.path.join(os.path.dirname(pyopencl.__file__), "cl", "pyopencl-random123")
    # (read as C on CUDA too: their C++ branch needs the standard library, which NVRTC
    # does not have)
    parts = ['#ifdef __CUDACC__\n#pragma push_macro("__cplusplus")\n#undef __cplusplus\n#endif']
    for name in ("openclfeatures.h", "array.h", f"{method}.cl"):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            parts.append(_INCLUDE.sub("", f.read()))
    parts.append('#ifdef __CUDACC__\n#pragma pop_macro("__cplusplus")\n#endif')
    return "\n".join(parts) + "\n"


def _block(method: str, index: str) -> str:
    """Statements computing block ``r`` for counter (``index``, c) and key k."""
    if method == "philox":
        return ("philox4x32_ctr_t cb = {{(uint)" + index + ", (uint)((ulong)" + index
                + " >> 32), (uint)c, (uint)(c >> 32)}};\n"
                "  philox4x32_key_t kb = {{(uint)k, (uint)(k >> 32)}};\n"
                "  philox4x32_ctr_t r = philox4x32(cb, kb);\n")
    return ("threefry4x64_ctr_t cb = {{(ulong)" + index + ", c, 0, 0}};\n"
            "  threefry4x64_key_t kb = {{k, 0, 0, 0}};\n"
            "  threefry4x64_ctr_t r = threefry4x64(cb, kb);\n")


def _words64(method: str) -> str:
    """Statements making 64-bit words ``w0`` and ``w1`` of block ``r``."""
    if method == "philox":
        return ("ulong w0 = (ulong)r.v[0] | ((ulong)r.v[1] << 32);\n"
                "  ulong w1 = (ulong)r.v[2] | ((ulong)r.v[3] << 32);\n")
    return "ulong w0 = r.v[0];\n  ulong w1 = r.v[1];\n"


def random_helper_body(op: str, loop: tuple[np.dtype, ...]) -> str:
    """Body of the helper for ``op`` (in :data:`RANDOM_OPS`); parameters: a (the
    element's flat index), b (key), c (counter), and for integers d (low), e (range)."""
    _, kind, method = op.split("_")
    out = loop[-1]
    T = c_type_name(out)
    head = "long i = a; ulong k = b;\n  "
    if kind == "bits":
        return head + _block(method, "(i >> 2)") + "  return r.v[i & 3];"
    body = head + _block(method, "i") + "  " + _words64(method)
    if kind == "integers":
        # the high half of a * range: in [0, range), bias below range / 2**64
        # (unsigned: wraps as two's complement where long would overflow)
        return body + f"  return ({T})((ulong)d + mul_hi(w0, e));"
    if out == np.float32:
        bits, scale = 40, "0x1.0p-24f"  # 24 random bits: every float in [0, 1) of them
    else:
        bits, scale = 11, "0x1.0p-53"
    if kind == "uniform":
        return body + f"  return ({T})(w0 >> {bits}) * {scale};"
    # Box-Muller on u1 in (0, 1] and u2 in [0, 1): one of its two normals
    return body + (f"  {T} u1 = (({T})(w0 >> {bits}) + 1) * {scale};\n"
                   f"  {T} u2 = ({T})(w1 >> {bits}) * {scale};\n"
                   f"  return sqrt(-2 * log(u1)) * cospi(2 * u2);")


_caches.register_function("lower.random_ops.r123_source", r123_source,
                          why="one per generator (Philox, Threefry)")


def random_preamble(op: str) -> str:
    """What the helper of ``op`` needs before it: Random123's header."""
    return r123_source(op.rsplit("_", 1)[1])
