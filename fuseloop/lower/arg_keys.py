"""OpenCL bodies of the (value, position) keys of one-pass argmin / argmax.

``argmin_key(x, i)`` packs an element and its position into one unsigned 64-bit key:
the high 32 bits order the values (smallest first for ``argmin_key``, largest first
for ``argmax_key``; NaN before everything, as numpy returns the first NaN), the low
32 bits hold the position.  The smallest key of a range is then its arg-extreme with
numpy's ties (the first position), and ``arg_key_index`` reads the position back.  A
plain ``min`` over the keys reuses every reduction layout (rows, columns, the
two-stage split) and reads the data once; the two-pass form (the extreme, then the
first position holding it) read it twice.

Values of at most 32 bits only (float32, integers and bool up to 32 bits): see
:func:`fuseloop.ops.reductions._one_pass_arg`.
"""

from __future__ import annotations

import numpy as np

ARG_KEY_OPS = frozenset({"argmin_key", "argmax_key", "arg_key_index"})


def _ordered(dt: np.dtype) -> str:
    """C statements setting ``uint k`` to ``a`` mapped to an order-preserving uint
    (NaN to 0; -0.0 and +0.0 to one value, since numpy finds them equal)."""
    if dt == np.float32:
        # (a union, not OpenCL's as_uint: the CUDA backend compiles this source too)
        # (-0.0 as +0.0 by its bits: a compare with 0 could flush subnormals to it)
        return ("union { float f; uint u; } bits;\n"
                "  bits.f = a;\n"
                "  uint u = (bits.u << 1) == 0u ? 0u : bits.u;\n"
                "  uint k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);\n")
    if dt.kind == "i":
        return "uint k = (uint)(int)a ^ 0x80000000u;\n"
    return "uint k = (uint)a;\n"  # unsigned and bool


def arg_key_body(op: str, loop: tuple[np.dtype, ...]) -> str | None:
    """Body of the helper for one of :data:`ARG_KEY_OPS` (else None); parameters a, b."""
    if op not in ARG_KEY_OPS:
        return None
    if op == "arg_key_index":
        return "return (long)(uint)a;"
    dt = loop[0]
    assert dt.itemsize <= 4 and dt.kind in "biuf" and dt != np.float16, loop
    body = "  " + _ordered(dt)
    if op == "argmax_key":  # (the largest value gets the smallest key)
        body += "  k = ~k;\n"
    if dt.kind == "f":
        body += "  k = (a != a) ? 0u : k;\n"
    return body.lstrip() + "  return ((ulong)k << 32) | (ulong)(uint)b;"
