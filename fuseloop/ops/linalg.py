"""Contractions (matmul, tensordot, einsum, dot) and vector norms.

A contraction is a broadcast product summed over the contracted axes: the
operands are viewed (no copies) into one index space and multiplied inside the
reduction loop, so elementwise producers (``A * 2``) fuse into the loads and
consumers (``fl.tanh(A @ B + c)``) into the store.  Chains of several operands
are contracted pairwise, each intermediate materialised once.

A fused producer is computed once per *read* of the operand element, and each
element is read by every output it contributes to (the tiled GPU recipe reads
it once per block of 128 outputs).  Cheap producers (arithmetic, comparisons,
casts) cost nothing measurable that way; an operand whose expression holds a
transcendental function or a user function and whose elements are each used by
at least ``MATERIALISE_REUSE`` outputs is evaluated into a buffer first (on an
H200, ``sin(A) @ B`` at 4096^3 ran at 11.5 TFLOP/s fused against 23.7 with
``sin(A)`` materialised; ``(A * 2) @ B`` fused ran as fast as ``A @ B``).  So is a lazy
short matrix operand of a large product whatever its producer: the skinny recipes read it
in every work-item, each applying the producer (mlp's ``relu(h + b) @ W``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..array import Array, _coerce, _lazy_array
from ..errors import ShapeError
from ..expr.nodes import Reduce, broadcast_shapes
from ..expr.templates import composite_of
from ..host_eager import HostArray
from ..host_ops import matmul as host_matmul
from ..host_products import matmul as eager_matmul
from .reductions import _reduce, _sum_dtype
from .reductions import max as _max
from .reductions import min as _min
from .reductions import sum as _sum
from .shape import broadcast_to, moveaxis, normalize_axis, ravel, reshape, view

#: an expensive operand read by at least this many outputs per element is
#: evaluated first (4 blocks of 128 outputs in the tiled GPU recipe)
MATERIALISE_REUSE = 512
#: a lazy operand of at most 1/SHORT_RATIO of the other operand's elements, that one of
#: at least SHORT_OTHER_MIN, is evaluated first even when its producer is cheap (the
#: skinny recipes apply it in every work-item; its own pass is small beside the product)
SHORT_RATIO = 64
SHORT_OTHER_MIN = 1 << 22
# producers that cost about as much as the load they follow: always fused
_CHEAP_OPS = frozenset({
    "add", "subtract", "multiply", "true_divide", "negative", "positive", "absolute",
    "square", "cast", "minimum", "maximum", "fmin", "fmax", "where", "sign", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
    "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "invert", "isnan", "isinf", "isfinite", "copysign", "floor", "ceil", "trunc", "rint",
})


def _expensive(node: Any) -> bool:
    """Whether an elementwise operand expression calls a costly function."""
    from ..expr.nodes import Apply, UserCall

    seen: set[int] = set()
    stack = [node]
    while stack:  # iterative: producer chains can be deep
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        cls = type(n)
        if cls is UserCall or (cls is Apply and n.op not in _CHEAP_OPS):
            return True
        if cls is Apply:
            stack.extend(n.args)
        elif getattr(n, "pieces", None) is not None:  # a concatenation
            stack.extend(n.pieces)
        elif getattr(n, "child", None) is not None:
            stack.append(n.child)
    return False


def _materialise_costly(x: Array, reuse: int, other: int = 0) -> Array:
    """``x`` evaluated first when its producer is widely reused and costly, or when ``x``
    is the short operand of a large product (``other``: the other operand's elements)."""
    if reuse >= MATERIALISE_REUSE and x._storage is None and (
            _expensive(x._node) or _short_operand(x, other)):
        return x.eval()
    return x


def _short_operand(x: Array, other: int) -> bool:
    """Whether ``x`` is a short matrix operand (at most 1/``SHORT_RATIO`` of the other's
    elements, two or more rows and columns) of a product whose other operand has at least
    ``SHORT_OTHER_MIN``: the skinny recipes read it in every work-item at every step,
    applying even a cheap producer (``relu(h + b) @ W``) once per work-item, where its own
    pass costs little beside reading the long operand.  A vector keeps its producer
    (gemver's ``beta * y @ A`` on an H200 was slower with it evaluated first)."""
    shape = x._shape
    return other >= SHORT_OTHER_MIN and len(shape) >= 2 and min(shape[-2:]) > 1 \
        and math.prod(shape) * SHORT_RATIO <= other


def _align(x: Array, letters: str, space: str, sizes: dict[str, int]) -> Array:
    """View ``x`` (axes named by ``letters``) in the index space ``space``.

    Repeated letters take a diagonal; letters of ``space`` that ``x`` lacks are
    broadcast (stride 0).
    """
    if letters == space:  # (the operand's own axes, in order: no view to make)
        return x
    m = len(space)
    shape = tuple(sizes[c] for c in space)
    coeffs = [[1 if space[d] == c else 0 for d in range(m)] for c in letters]
    off = [0] * len(letters)
    for c in letters:
        if c not in space:
            raise AssertionError(c)
    v = view(x, shape, off, coeffs)
    return v


def _contract(ops: list[tuple[Array, str]], out: str, sizes: dict[str, int]) -> Array:
    """Sum over the letters not in ``out`` of the product of the operands."""
    summed = "".join(dict.fromkeys(c for _, s in ops for c in s if c not in out))
    space = out + summed
    prod = None
    for x, letters in ops:
        v = _align(x, letters, space, sizes)
        prod = v if prod is None else prod * v
    assert prod is not None
    if not summed:
        return prod
    axes = tuple(range(len(out), len(space)))
    # numpy's einsum and matmul keep the operands' type (int32 @ int32 is int32,
    # wrapping like numpy); only booleans are counted in a wider integer here
    dtype = _sum_dtype(prod.dtype, None) if prod.dtype == np.bool_ else prod.dtype
    return _reduce("sum", prod, axes, False, dtype)


def einsum(subscripts: str, *operands: Any) -> Array:
    """``numpy.einsum`` with explicit (``'ij,jk->ik'``) or implicit output."""
    arrs = [_coerce(o) for o in operands]
    if arrs and type(subscripts) is str and all(type(a) is Array for a in arrs):
        # (built once per subscripts and operand structures, then copied, as matmul)
        return composite_of("einsum", tuple(arrs), lambda: _einsum(subscripts, arrs),
                            subscripts)
    return _einsum(subscripts, arrs)


def _einsum(subscripts: str, arrs: list[Any]) -> Array:
    """:func:`einsum` of the coerced operands, built."""
    spec = subscripts.replace(" ", "")
    if "..." in spec:
        raise NotImplementedError("einsum with '...' is not supported; name every axis")
    if "->" in spec:
        ins, out = spec.split("->")
    else:
        ins = spec
        counts: dict[str, int] = {}
        for c in ins.replace(",", ""):
            counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    terms = ins.split(",")
    if len(terms) != len(arrs):
        raise ValueError(f"einsum: {len(terms)} operand subscripts in {subscripts!r} but "
                         f"{len(arrs)} operands")
    sizes: dict[str, int] = {}
    for t, a in zip(terms, arrs):
        if not t.isalpha() and t:
            raise ValueError(f"einsum: invalid subscript {t!r} (letters only)")
        if len(t) != a.ndim:
            raise ShapeError(f"einsum: subscript {t!r} has {len(t)} letters but its operand "
                             f"has shape {a.shape} ({a.ndim} dimensions)")
        for c, n in zip(t, a.shape):
            if sizes.setdefault(c, n) != n:
                if n == 1 or sizes[c] == 1:
                    sizes[c] = max(n, sizes[c])
                    continue
                raise ShapeError(f"einsum: axis {c!r} has lengths {sizes[c]} and {n}")
    for c in out:
        if c not in sizes:
            raise ValueError(f"einsum: output letter {c!r} does not appear in the inputs")
    if len(set(out)) != len(out):
        raise ValueError(f"einsum: output subscript {out!r} repeats a letter")
    if len(arrs) > 1:
        arrs = [_materialise_costly(a, math.prod(sizes[c] for c in out if c not in t))
                for t, a in zip(terms, arrs)]
    # broadcast length-1 operand axes up to the common length
    ops = []
    for t, a in zip(terms, arrs):
        target = tuple(sizes[c] for c in t)
        ops.append((broadcast_to(a, target) if target != a.shape else a, t))
    # pairwise, left to right; an intermediate keeps the letters still needed
    while len(ops) > 2:
        (a, sa), (b, sb) = ops[0], ops[1]
        later = out + "".join(s for _, s in ops[2:])
        keep = "".join(dict.fromkeys(c for c in sa + sb if c in later))
        ops = [(_contract([(a, sa), (b, sb)], keep, sizes).eval(), keep), *ops[2:]]
    return _contract(ops, out, sizes)


def tensordot(a: Any, b: Any, axes: Any = 2) -> Array:
    a, b = _coerce(a), _coerce(b)
    if isinstance(axes, int | np.integer):
        n = int(axes)
        if n < 0 or n > min(a.ndim, b.ndim):
            raise ShapeError(f"tensordot: cannot contract {n} axes of shapes {a.shape} and "
                             f"{b.shape}")
        ax_a, ax_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, int | np.integer) else list(ax_a)  # type: ignore[list-item]
        ax_b = [ax_b] if isinstance(ax_b, int | np.integer) else list(ax_b)  # type: ignore[list-item]
        if len(ax_a) != len(ax_b):
            raise ShapeError("tensordot: the two axes lists must have the same length")
        ax_a = [normalize_axis(x, a.ndim) for x in ax_a]
        ax_b = [normalize_axis(x, b.ndim) for x in ax_b]
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"tensordot: shape-mismatch for sum: axis {i} of {a.shape} vs "
                             f"axis {j} of {b.shape}")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    la = [next(letters) for _ in range(a.ndim)]
    lb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = "".join(c for k, c in enumerate(la) if k not in ax_a) + \
        "".join(c for k, c in enumerate(lb) if k not in ax_b)
    return einsum(f"{''.join(la)},{''.join(lb)}->{out}", a, b)


def matmul(a: Any, b: Any) -> Array:
    """``a @ b`` with numpy's rules: 1-D promotion and broadcast batch axes."""
    if type(a) is not Array or type(b) is not Array:
        from ..sparse import issparse

        if issparse(a):  # (fl.matmul(A, x): the sparse product)
            return a @ b
        if issparse(b):
            raise ShapeError(f"matmul: a dense operand of shape {getattr(a, 'shape', ())} times a "
                             f"sparse matrix of shape {b.shape} is not supported (a transposed "
                             "product); compute A @ x with the sparse matrix on the left")
        a, b = _coerce(a), _coerce(b)
    if isinstance(a, Array) and isinstance(b, Array) and (got := host_matmul(a, b)) is not None:
        return got  # (small, on a CPU device: computed by numpy at once)
    if type(a) is Array and type(b) is Array:
        sa = a._shape
        if len(sa) == 1 and sa == b._shape and a.device is b.device:
            return _vector_dot(a, b)
        # the views, product and sum depend on the operands' structures alone: built
        # once per pair of signatures, then copied (8 x 4096 @ 4096 x 4096 on a CPU
        # host: 5 us, against 18 built)
        return composite_of("matmul", (a, b), lambda: _matmul(a, b))
    return _matmul(a, b)


def _vector_dot(a: Array, b: Array) -> Array:
    """``a @ b`` of two 1-D arrays of one device and length: the nodes :func:`_contract`
    builds (the product, summed in its dtype), without its letters, views and template
    look-ups, which cost a loop's ``L[i, :i] @ x[:i]`` most of its build: the views
    move every iteration, so their signatures, and the template keys, are new."""
    prod = a * b
    dtype = prod.dtype
    if type(prod) is not Array or prod._storage is not None or dtype == np.bool_:
        # (a product computed at once, or booleans, counted in a wider integer)
        return _reduce("sum", prod, (0,), False, _sum_dtype(dtype, None)
                       if dtype == np.bool_ else dtype)
    return _lazy_array(Reduce("sum", prod._node, (0,), dtype), a.device)


def _matmul(a: Array, b: Array) -> Array:
    """:func:`matmul` of two arrays, built."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: input operand does not have enough dimensions "
                         "(scalars are not allowed; use *)")
    if a.ndim <= 2 and b.ndim <= 2:
        return _matmul_unbatched(a, b)
    a2 = reshape(a, (1, *a.shape)) if a.ndim == 1 else a
    b2 = reshape(b, (*b.shape, 1)) if b.ndim == 1 else b
    n, k = a2.shape[-2:]
    k2, m = b2.shape[-2:]
    if k != k2:
        raise ShapeError(f"matmul: mismatch in the core dimension: {a.shape} @ {b.shape} "
                         f"({k} != {k2})")
    # before broadcasting: a costly producer is evaluated at its own size
    a2, b2 = (_materialise_costly(a2, m, math.prod(b2.shape)),
              _materialise_costly(b2, n, math.prod(a2.shape)))
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a3 = broadcast_to(a2, (*batch, n, k))
    b3 = broadcast_to(b2, (*batch, k, m))
    nb = len(batch)
    lb = "".join("ABCDEFGHIJKLMNOP"[i] for i in range(nb))
    out = einsum(f"{lb}ik,{lb}kj->{lb}ij", a3, b3)
    shape = out.shape
    if a.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if b.ndim == 1:
        shape = shape[:-1]
    return reshape(out, shape) if shape != out.shape else out


def _matmul_unbatched(a: Array, b: Array) -> Array:
    """``a @ b`` for 1-D and 2-D operands: the contraction einsum would make, without
    its reshapes to 2-D, broadcasts and subscript parsing, which cost a loop of small
    products (``L[i, :i] @ x[:i]``) most of each statement's host time."""
    k, k2 = a.shape[-1], b.shape[0]
    if k != k2:
        raise ShapeError(f"matmul: mismatch in the core dimension: {a.shape} @ {b.shape} "
                         f"({k} != {k2})")
    # (numpy's 1-D promotion: a vector's missing axis is simply not in the output)
    la, lb = "ik"[2 - a.ndim:], "kj"[:b.ndim]
    sizes = {"k": k}
    n = m = 1
    if a.ndim == 2:
        sizes["i"] = n = a.shape[0]
    if b.ndim == 2:
        sizes["j"] = m = b.shape[1]
    a, b = (_materialise_costly(a, m, math.prod(b._shape)),
            _materialise_costly(b, n, math.prod(a._shape)))
    return _contract([(a, la), (b, lb)], la[:-1] + lb[1:], sizes)


def dot(a: Any, b: Any) -> Array:
    if type(a) is Array and type(b) is Array and len(a._shape) == 1 and a._shape == b._shape:
        return matmul(a, b)  # (numpy's dot of vectors is their matmul: its short path)
    if type(a) is HostArray and type(b) is HostArray and (got := eager_matmul(a, b)) is not None:
        return got  # (a loop's ``dot(A[i, :j], A[j, :j])``: numpy's at once, no detour)
    a, b = _coerce(a), _coerce(b)
    if isinstance(a, Array) and isinstance(b, Array) and (got := host_matmul(a, b)) is not None:
        return got  # (1-D and 2-D operands: numpy's dot is their matmul)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim == 1 and b.ndim == 1:
        if a.shape != b.shape:
            raise ShapeError(f"dot: shapes {a.shape} and {b.shape} not aligned")
        prod = a * b  # (numpy's dot keeps the operands' type: int32 . int32 is int32)
        return _sum(prod, dtype=None if prod.dtype == np.bool_ else prod.dtype)
    if b.ndim == 1:
        return tensordot(a, b, axes=([a.ndim - 1], [0]))
    return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 2]))


def vdot(a: Any, b: Any) -> Array:
    a, b = ravel(_coerce(a)), ravel(_coerce(b))
    if a.shape != b.shape:
        raise ShapeError(f"vdot: vectors of {a.shape[0]} and {b.shape[0]} elements")
    if a.dtype.kind == "c":  # numpy's vdot conjugates its first argument
        a = a.conj()
    return _sum(a * b)


def inner(a: Any, b: Any) -> Array:
    a, b = _coerce(a), _coerce(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 1]))


def outer(a: Any, b: Any) -> Array:
    a, b = ravel(_coerce(a)), ravel(_coerce(b))
    return reshape(a, (a.shape[0], 1)) * b


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Array:
    """Vector norms (``numpy.linalg.norm``); with ``axis=None`` the flattened array's.

    For 2-D input and ``axis=None`` this is the Frobenius norm, as in numpy.
    """
    from ..ufuncs import FUNCTIONS

    x = _coerce(x)
    if (isinstance(axis, tuple | list) and len(axis) == 2) or ord in ("fro", "nuc"):
        if ord not in (None, "fro"):
            raise NotImplementedError("only vector norms and the Frobenius norm are supported")
        ord = None
    absolute, sqrt = FUNCTIONS["absolute"], FUNCTIONS["sqrt"]
    if x.dtype.kind in "biu":
        x = x.astype(np.float64)
    elif x.dtype.kind == "c":  # every norm is one of the moduli (x * x is no |x|**2)
        x = absolute(x)
    if axis is None and not keepdims:
        x = ravel(x)
        axis = 0
    if ord is None or ord == 2:
        return sqrt(_sum(x * x, axis=axis, keepdims=keepdims))
    if ord == np.inf:
        return _max(absolute(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return _min(absolute(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        return _sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _sum(absolute(x), axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"invalid norm order {ord!r} for vectors")
    p = float(ord)
    s = _sum(absolute(x) ** x.dtype.type(p), axis=axis, keepdims=keepdims)
    return s ** s.dtype.type(1.0 / p)


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    from .shape import diagonal

    return _sum(diagonal(a, offset, axis1, axis2), axis=-1)


# {{{ numpy.linalg's (and the Array API's) spellings: the last two axes are the matrix


def _linalg_trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Array:
    """Sums of the ``offset`` diagonal of each matrix of the stack ``x`` (last two axes)."""
    from .shape import diagonal

    x = _coerce(x)
    if x.ndim < 2:
        raise ShapeError(f"linalg.trace needs at least two dimensions, got shape {x.shape}")
    return _sum(diagonal(x, offset, -2, -1), axis=-1, dtype=dtype)


def _linalg_diagonal(x: Any, /, *, offset: int = 0) -> Array:
    """The ``offset`` diagonal of each matrix of the stack ``x`` (a view)."""
    from .shape import diagonal

    x = _coerce(x)
    if x.ndim < 2:
        raise ShapeError(f"linalg.diagonal needs at least two dimensions, got shape {x.shape}")
    return diagonal(x, offset, -2, -1)


def _linalg_outer(x1: Any, x2: Any, /) -> Array:
    """The outer product of two 1-D arrays."""
    x1, x2 = _coerce(x1), _coerce(x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ShapeError(f"linalg.outer takes 1-D arrays, got shapes {x1.shape} and {x2.shape}")
    return outer(x1, x2)


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False,
                ord: Any = 2) -> Array:
    """The ``ord``-norm of the vectors along ``axis`` (all axes: the flattened array)."""
    from .shape import normalize_axes

    x = _coerce(x)
    axes = normalize_axes(axis, x.ndim)
    if len(axes) <= 1 and not (axis is None and keepdims):
        return norm(x, ord=ord, axis=axes[0] if axes else None, keepdims=keepdims)
    # several axes: one vector norm over them (not numpy.linalg.norm's matrix norm)
    moved = moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    flat = reshape(moved, (*moved.shape[:x.ndim - len(axes)], -1))
    out = norm(flat, ord=ord, axis=-1)
    if keepdims:
        out = reshape(out, tuple(1 if d in axes else n for d, n in enumerate(x.shape)))
    return out


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Array:
    """Cross products of 3-vectors along ``axis`` (after broadcasting)."""
    from .shape import stack

    x1, x2 = _coerce(x1), _coerce(x2)
    shape = broadcast_shapes(x1.shape, x2.shape)
    ax = normalize_axis(axis, len(shape))
    if shape[ax] != 3:
        raise ShapeError(f"linalg.cross needs vectors of length 3 along axis {axis}, got "
                         f"shapes {x1.shape} and {x2.shape}")
    u = moveaxis(broadcast_to(x1, shape), ax, -1)
    v = moveaxis(broadcast_to(x2, shape), ax, -1)
    u0, u1, u2 = (u[..., k] for k in range(3))
    v0, v1, v2 = (v[..., k] for k in range(3))
    out = stack([u1 * v2 - u2 * v1, u2 * v0 - u0 * v2, u0 * v1 - u1 * v0], axis=-1)
    return moveaxis(out, -1, ax)

# }}}


__all__ = ["cross", "dot", "einsum", "inner", "matmul", "norm", "outer", "tensordot", "trace",
           "vdot", "vector_norm"]


class _LinalgNamespace:
    """``fl.linalg``: the numpy.linalg functions fuseloop provides."""

    norm = staticmethod(norm)
    matmul = staticmethod(matmul)
    tensordot = staticmethod(tensordot)
    # numpy.linalg's (the Array API's): matrices are the last two axes
    trace = staticmethod(_linalg_trace)
    diagonal = staticmethod(_linalg_diagonal)
    outer = staticmethod(_linalg_outer)
    vector_norm = staticmethod(vector_norm)
    cross = staticmethod(cross)

    @staticmethod
    def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Array:
        from .manipulation import vecdot

        return vecdot(x1, x2, axis=axis)

    @staticmethod
    def matrix_transpose(x: Any, /) -> Array:
        from .manipulation import matrix_transpose

        return matrix_transpose(x)

    def __getattr__(self, name: str) -> Any:
        # the factorisations and solvers (fuseloop/linalg_factor.py), imported on first use
        from .. import linalg_factor

        if name in linalg_factor.__all__:
            return getattr(linalg_factor, name)
        if name == "solve_triangular":  # (scipy.linalg's; with the triangular views)
            from ..triangular import solve_triangular

            return solve_triangular
        raise AttributeError(f"fl.linalg has no attribute {name!r}")
