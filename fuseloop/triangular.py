"""Triangular views (Stan's ``matrix_cl`` views): ``fl.tril_view``, ``fl.triu_view``,
and ``fl.linalg.solve_triangular``.

A view is a lazy ``fl.tril``/``fl.triu`` of its base matrix (no copy): every
operation sees zeros in the other triangle, computed in the kernel as a
conditional rather than read, so whatever the base holds there (garbage, NaN) is
never used.  What the view adds is knowing its triangle: ``.get()`` moves only the
triangle (packed on the device, unpacked on the host), a view of a host matrix
uploads only the triangle, and ``solve_triangular`` takes the triangle from it.
Packing and unpacking are user functions with pointer parameters
(:mod:`fuseloop.functions`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .array import Array, _coerce
from .dtypes import c_type_name
from .errors import NotSquareError, ShapeError
from .expr.nodes import RECENT_LAZY_MAX, Leaf, recent_lazy, register_readers
from .ops.shape import tril, triu


class TriangularView(Array):
    """A square matrix seen through its lower or upper triangle (zeros elsewhere)."""

    __slots__ = ("base", "lower")
    base: Array
    lower: bool

    @property
    def triangle(self) -> str:
        return "lower" if self.lower else "upper"

    def get(self) -> np.ndarray:
        """The matrix as numpy (zeros in the other triangle); only the triangle's
        ``n (n + 1) / 2`` elements are copied from the device."""
        n = self.shape[0]
        base = _contiguous(self.base)
        packed = _packer(self.dtype, self.lower, unpack=False)(
            _positions(n * (n + 1) // 2, base.device), n, base).get()
        host = np.zeros((n, n), self.dtype)
        host[np.tril_indices(n) if self.lower else np.triu_indices(n)] = packed
        return host

    def __repr__(self) -> str:
        return f"fl.{'tril' if self.lower else 'triu'}_view({Array.__repr__(self.base)})"


def _contiguous(a: Array) -> Array:
    a.eval()
    node = a._node
    if type(node) is Leaf and node.strides is None and node.offset == 0:
        return a
    return a.copy().eval()


_packers: dict[tuple, Any] = {}


def _packer(dtype: np.dtype, lower: bool, unpack: bool) -> Any:
    """The user function packing a triangle (element ``p`` of the packed vector, read
    from the n x n matrix ``a``) or unpacking it (element ``p`` of the matrix)."""
    key = (dtype.char, lower, unpack)
    f = _packers.get(key)
    if f is None:
        from .functions import function

        t = c_type_name(dtype)
        # packed position of (i, j): lower by rows, i (i + 1) / 2 + j; upper by rows,
        # i n - i (i - 1) / 2 + (j - i)
        at = ("i * (i + 1) / 2 + j" if lower else "i * n - i * (i - 1) / 2 + (j - i)")
        if unpack:
            inside = "j <= i" if lower else "j >= i"
            body = (f"long i = p / n, j = p % n;\n"
                    f"return {inside} ? a[{at}] : ({t})0;")
        else:
            # the row of packed position p: from a floating-point estimate, corrected
            # in integers (no fp64 needed, exact for any size)
            if lower:
                find = ("long i = (long)((sqrt(8.0f * (float)p + 1.0f) - 1.0f) / 2.0f);\n"
                        "while (i > 0 && i * (i + 1) / 2 > p) --i;\n"
                        "while ((i + 1) * (i + 2) / 2 <= p) ++i;\n"
                        "long j = p - i * (i + 1) / 2;\n")
            else:
                find = ("long i = 0;\n"
                        "{ float r = (float)(2 * n + 1);\n"
                        "  i = (long)((r - sqrt(r * r - 8.0f * (float)p)) / 2.0f); }\n"
                        "if (i < 0) i = 0;\n"
                        "if (i > n - 1) i = n - 1;\n"
                        "while (i > 0 && i * n - i * (i - 1) / 2 > p) --i;\n"
                        "while (i + 1 < n && (i + 1) * n - (i + 1) * i / 2 <= p) ++i;\n"
                        "long j = p - (i * n - i * (i - 1) / 2) + i;\n")
            body = f"{find}return a[i * n + j];"
        name = f"fl_{'un' if unpack else ''}pack_{'lower' if lower else 'upper'}"
        f = _packers[key] = function(f"{t} {name}(long p, long n, global const {t} *a)",
                                     body)
    return f


def _view(a: Any, lower: bool, name: str) -> TriangularView:
    if isinstance(a, np.ndarray):
        return _upload_triangle(a, lower, name)
    base = _coerce(a)
    if not isinstance(base, Array):
        raise TypeError(f"fl.{name} takes a matrix, got {type(a).__name__}")
    if base.ndim != 2:
        raise ShapeError(f"fl.{name} takes a matrix (2 dimensions), got shape {base.shape}")
    if base.shape[0] != base.shape[1]:
        raise NotSquareError(f"fl.{name} of a matrix of shape {base.shape}: a triangular view "
                             "needs a square matrix; use fl.tril/fl.triu for the numpy "
                             "result of any shape")
    if isinstance(base, TriangularView):
        base = base.base if base.lower == lower else base
    masked = (tril if lower else triu)(base)
    view = object.__new__(TriangularView)
    view._storage = None
    view._node = masked._node
    view.device = masked.device
    view.dtype = masked.dtype
    view._shape = masked.shape
    view.base = base
    view.lower = lower
    if masked._node.storages:  # (as every lazy array: a later write into base sees it)
        recent_lazy.append(view)
        if len(recent_lazy) >= RECENT_LAZY_MAX:
            register_readers()
    return view


def _upload_triangle(host: np.ndarray, lower: bool, name: str) -> TriangularView:
    """A view of a host matrix: only its triangle is copied to the device, then
    unpacked there into a matrix with zeros in the other triangle."""
    from .creation import asarray

    if host.ndim != 2 or host.shape[0] != host.shape[1]:
        err = NotSquareError if host.ndim == 2 else ShapeError
        raise err(f"fl.{name} of a host array of shape {host.shape}: a triangular view "
                  "needs a square matrix")
    n = host.shape[0]
    packed = host[np.tril_indices(n) if lower else np.triu_indices(n)]
    dev_packed = asarray(np.ascontiguousarray(packed))
    full = _packer(dev_packed.dtype, lower, unpack=True)(
        _positions(n * n, dev_packed.device), n, dev_packed).reshape(n, n).eval()
    return _view(full, lower, name)


def _positions(m: int, device: Any) -> Any:
    """0, 1, ..., m - 1 as a lazy array (no memory): the positions a kernel computes."""
    from .creation import arange

    return arange(m, dtype=np.int64, device=device)


def tril_view(a: Any) -> TriangularView:
    """``a`` (a square matrix) seen as lower triangular: numpy's ``tril(a)`` without a
    copy, which knows its triangle (packed ``.get()``, ``solve_triangular``); a numpy
    matrix is uploaded as its lower triangle only."""
    return _view(a, True, "tril_view")


def triu_view(a: Any) -> TriangularView:
    """The upper-triangular counterpart of :func:`tril_view`."""
    return _view(a, False, "triu_view")


__all__ = ["TriangularView", "solve_triangular", "tril_view", "triu_view"]


# {{{ triangular solves

def solve_triangular(a: Any, b: Any, trans: int | str = 0, lower: bool | None = None,
                     unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True) -> Array:
    """``scipy.linalg.solve_triangular``: ``x`` with ``a @ x == b`` (``trans=1``/``"T"``
    or ``2``/``"C"``: ``a.T @ x == b``), reading only ``a``'s lower (``lower=True``)
    or upper triangle.  ``lower`` defaults to scipy's ``False``, or to the triangle of
    an ``fl.tril_view``/``fl.triu_view``.  ``b`` is ``(n,)`` or ``(n, k)``.
    ``overwrite_b`` and ``check_finite`` are accepted for scipy's signature (``b`` is
    never overwritten; values are not checked).

    Blocked substitution: each diagonal block solved in local memory, the rows not
    yet solved updated by a matrix product (two launches per block; one, a
    hand-written kernel, for up to 4 columns of ``b``).
    """
    from . import linalg_factor as lf

    if isinstance(a, TriangularView):
        if lower is None:
            lower = a.lower
        a = a.base
    lower = bool(lower)
    transposed = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}.get(trans)
    if transposed is None:
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got "
                         f"{trans!r}")
    m = lf._matrices(a, "solve_triangular", complex_ok=True)
    if m.ndim != 2:
        raise ShapeError(f"solve_triangular: a must be a matrix, got shape {m.shape}")
    n = m.shape[0]
    bb = _coerce(b)
    if not isinstance(bb, Array) or bb.ndim not in (1, 2) or bb.shape[0] != n:
        shape = getattr(bb, "shape", ())
        raise ShapeError(f"solve_triangular: shapes of a {m.shape} and b {shape} are "
                         "incompatible (b must be (n,) or (n, k) with n = a's size)")
    dt = np.result_type(m.dtype, lf._float_dtype(bb, "solve_triangular", complex_ok=True))
    b2 = bb.astype(dt) if bb.dtype != dt else bb
    b2 = b2.reshape(n, -1) if b2.ndim == 1 else b2
    if n == 0 or b2.shape[1] == 0:
        return lf._copy(b2).reshape(bb.shape)
    if dt.kind == "c":
        conj = trans in (2, "C")
        return _complex_solve(m, b2, lower, unit_diagonal, transposed, conj).reshape(bb.shape)
    m = _contiguous(m.astype(dt) if m.dtype != dt else m)
    # a.T: the same buffer read with swapped strides (so its lower triangle is a's upper)
    x = lf.blocked_solve(m, lf._copy(b2), lower != transposed, unit_diagonal, transposed)
    return x.reshape(bb.shape)


def _complex_solve(m: Array, b: Array, lower: bool, unit: bool, transposed: bool,
                   conj: bool) -> Array:
    """:func:`solve_triangular` where ``m`` or ``b`` (n x k, complex) is complex, by
    the real blocked solve.  A real ``m``: the parts of ``b`` side by side.  A complex
    ``m``: its triangle divided by its diagonal (unit diagonal; ``b`` divided too), whose
    embedding with each entry ``z`` a 2 x 2 block ``[[Re z, -Im z], [Im z, Re z]]`` is
    then a real unit triangular matrix of size 2n (the diagonal blocks are identities),
    and ``b``'s rows interleaved as (Re, Im)."""
    from . import linalg_factor as lf
    from .linalg_complex import combine, embed_interleaved, real_dtype
    from .mathfuncs import imag, real
    from .ops.shape import concatenate, diagonal, stack

    n, k = b.shape
    dt = np.result_type(m.dtype, b.dtype)
    rt = real_dtype(dt)
    if m.dtype.kind != "c":
        t = _contiguous(m.astype(rt) if m.dtype != rt else m)
        parts = lf._copy(concatenate([real(b).astype(rt), imag(b).astype(rt)], axis=1))
        x = lf.blocked_solve(t, parts, lower != transposed, unit, transposed)
        return combine(x[:, :k], x[:, k:], dt)
    t = m.astype(dt) if m.dtype != dt else m
    if transposed:
        t = t.T.conj() if conj else t.T
    low = lower != transposed
    # the strict triangle (the other one is never read; the diagonal is the unit one)
    strict = tril(t, -1) if low else triu(t, 1)
    if not unit:
        d = diagonal(t)[:, None]
        strict, b = strict / d, b / d
    t = strict
    e = _contiguous(embed_interleaved(real(t).astype(rt), imag(t).astype(rt)))
    rows = lf._copy(stack([real(b), imag(b)], axis=1).astype(rt).reshape(2 * n, k))
    x = lf.blocked_solve(e, rows, low, True, False)
    return combine(x[0::2], x[1::2], dt)

# }}}
