"""Factorisations and solvers of ``fl.linalg``, on the device.

Cholesky and LU are blocked, right-looking algorithms with O(n / block) launches:
per block column small hand-written kernels (:mod:`fuseloop.linalg_kernels`)
factor the diagonal block in local memory (Cholesky) or choose the panel's pivot
rows by a tournament (LU), solve the panel's and the block row's triangular
systems in local memory, and the trailing matrix, where nearly all the flops are,
is updated in place by one kernel: a fuseloop contraction on CPUs, a hand-written
tiled ``C -= A B`` on GPUs (:func:`update_kernel`: the contraction's host work per
block was most of a GPU's time).  ``solve``, ``inv``,
``det`` and ``slogdet`` are built on the LU factors (blocked triangular solves, the
off-diagonal updates again by contractions; determinants as device reductions over
the diagonal and the pivots).  A failure (a pivot that is not positive, a zero
pivot) is flagged on the device and read once per matrix.

Leading (batch) axes are handled by a Python loop over the matrices.  The SVD and
the symmetric eigenproblem (with what needs them: ``pinv``, ``matrix_rank``, the 2-
and nuclear norms) are one-sided Jacobi sweeps (:mod:`fuseloop.linalg_jacobi`), QR
blocked Householder (:mod:`fuseloop.linalg_qr`).  Complex matrices run on the device
too (:mod:`fuseloop.linalg_complex`, :mod:`fuseloop.linalg_complex_eig`,
:mod:`fuseloop.linalg_qr_complex`: mostly the real algorithms on a real embedding);
only empty input runs on the host through numpy, and warns with
:class:`~fuseloop.errors.HostFallbackWarning`.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import host_linalg as _host_linalg
from . import linalg_complex as _cplx
from . import linalg_complex_eig as _cplx_eig
from . import linalg_jacobi as _jacobi
from . import linalg_kernels as _k
from . import linalg_panel as _panel
from .array import Array, _coerce
from .creation import asarray, empty
from .errors import DTypeError, HostFallbackWarning
from .evaluate import upload
from .expr.nodes import Gather
from .linalg_kernels import buffer as _buf
from .linalg_kernels import contiguous_copy as _copy
from .ops import reductions as _r
from .ops.linalg import _contract
from .ops.shape import diagonal, reshape, stack, tril

#: numpy's class: ``except numpy.linalg.LinAlgError`` catches fuseloop's too
LinAlgError = np.linalg.LinAlgError


def block_size(device: Any) -> int:
    """The block width of the blocked factorisations on ``device``: the trailing
    update's product is faster with more columns, the sequential panel slower."""
    return 128 if device.type == "cpu" else 64


#: Cholesky's block width instead of :func:`cholesky_block`'s rule (0: the rule);
#: FUSELOOP_CHOLESKY_BLOCK, for tuning on a GPU
CHOLESKY_BLOCK = int(os.environ.get("FUSELOOP_CHOLESKY_BLOCK", "0") or 0)


def cholesky_block(device: Any, dtype: np.dtype) -> int:
    """Cholesky's block width: :func:`block_size`, halved until its largest work-group's
    local memory (the diagonal block's, ``nb x (nb + 1)``) fits the device's.  Not
    ``fit_block``'s rule: that one fits the LU's pivot tournament, twice the size, and
    halves float64 blocks on GPUs to 32, doubling the launches a factorisation takes."""
    nb = CHOLESKY_BLOCK or block_size(device)
    limit = _k.local_limit(device)
    while nb > 8 and nb * (nb + 1) * dtype.itemsize > limit:
        nb //= 2
    return nb


#: the trailing updates' kernel: "auto" (:func:`update_kernel`'s rule), "kernel" (the
#: hand-written ``C -= A B``) or "contraction" (fuseloop's); FUSELOOP_LINALG_UPDATE
UPDATE = os.environ.get("FUSELOOP_LINALG_UPDATE", "auto").strip().lower()


def update_kernel(device: Any) -> bool:
    """Whether the blocked algorithms update their trailing matrices with the
    hand-written ``C -= A B`` kernel (:func:`fuseloop.linalg_kernels.gemm_update`)
    rather than a fuseloop contraction: on GPUs, where the contraction's host work
    per block (building, assigning, looking up its plan: ~0.15 ms) is more than the
    GPU's; not on CPUs, where fuseloop's CPU matmul is faster and the host is not
    the limit.  :data:`UPDATE` overrides the rule."""
    if UPDATE in ("kernel", "contraction"):
        return UPDATE == "kernel"
    return device.type != "cpu" and device.max_work_group_size >= _k.GEMM_GROUP


def _float_dtype(a: Array, name: str, complex_ok: bool = False) -> np.dtype:
    kind = a.dtype.kind
    if kind == "c" and complex_ok:
        return a.dtype
    if kind == "c":
        raise DTypeError(f"fl.linalg.{name}: complex input ({a.dtype}, shape {a.shape}) is "
                         "not supported; only float32 and float64 matrices")
    if kind not in "biuf":
        raise DTypeError(f"fl.linalg.{name}: unsupported dtype {a.dtype}")
    if a.dtype == np.float32 or a.dtype == np.float64:
        return a.dtype
    return np.dtype(np.float32 if a.dtype == np.float16 else np.float64)  # ints: as numpy


def _matrices(x: Any, name: str, square: bool = True, complex_ok: bool = False) -> Array:
    """``x`` as a float array of (a stack of) matrices, checked as numpy checks;
    ``complex_ok``: complex ones stay complex (else: ``DTypeError``)."""
    a = _coerce(x)
    if a.ndim < 2:
        raise LinAlgError(f"fl.linalg.{name}: {a.ndim}-dimensional array given (shape "
                          f"{a.shape}). Array must be at least two-dimensional")
    if square and a.shape[-1] != a.shape[-2]:
        raise LinAlgError(f"fl.linalg.{name}: Last 2 dimensions of the array must be square "
                          f"(shape {a.shape})")
    dt = _float_dtype(a, name, complex_ok)
    return a if a.dtype == dt else a.astype(dt)


def _flag(device: Any) -> Array:
    return Array._concrete(upload(np.zeros(1, np.int64), device), np.dtype(np.int64), (1,))


def _read_flag(flag: Array) -> int:
    return int(flag.get()[0])


def _product(a: Array, b: Array, b_transposed: bool = False) -> Array:
    """``a @ b`` (``a @ b.T``) of two matrices, lazily: the contraction itself, without
    matmul's broadcasting and operand checks (a third of its host time, once per block)."""
    (n, k), m = a.shape, b.shape[0 if b_transposed else 1]
    return _contract([(a, "ik"), (b, "jk" if b_transposed else "kj")], "ij",
                     {"i": n, "j": m, "k": k})


def _batched(fn: Callable[[Array], Any], a: Array) -> Any:
    """``fn`` over the matrices of ``a`` (its last two axes), results stacked."""
    if a.ndim == 2:
        return fn(a)
    batch = a.shape[:-2]
    if not math.prod(batch):
        return _empty_batch(fn, a)
    flat = reshape(a, (math.prod(batch), *a.shape[-2:]))
    results = [fn(flat[i]) for i in range(flat.shape[0])]
    if isinstance(results[0], tuple):
        return tuple(reshape(stack(list(r)), (*batch, *r[0].shape)) for r in zip(*results))
    return reshape(stack(results), (*batch, *results[0].shape))


def _empty_batch(fn: Callable[[Array], Any], a: Array) -> Any:
    """``fn`` over an empty stack of matrices, as numpy: empty results whose shapes and
    dtypes are those ``fn`` gives one matrix (an identity-like one, computed once)."""
    m, n = a.shape[-2:]
    probe = asarray(np.eye(m, n, dtype=a.dtype), device=a.device)
    one = fn(probe)

    def none_of(r: Array) -> Array:
        return empty((*a.shape[:-2], *r.shape), dtype=r.dtype, device=a.device)

    if isinstance(one, tuple):
        out = [none_of(r) for r in one]
        named: Any = type(one)  # (numpy's named results keep their names)
        return named(*out) if hasattr(one, "_fields") else tuple(out)
    return none_of(one)


# {{{ Cholesky

def _cholesky2(a: Array) -> Array:
    """Right-looking blocked Cholesky: per block column three launches (the diagonal
    block, the panel's triangular solve, the trailing update as a matrix product).
    Where the update is the hand-written kernel (GPUs), the diagonal block's kernel
    also inverts its factor and the panel is solved as a product with the inverse: a
    substitution's ``nb`` steps one after another were most of the launch's time."""
    n, dev = a.shape[0], a.device
    w = _copy(a)
    s = _buf(w)
    flag = _flag(dev)
    nb = cholesky_block(dev, a.dtype)
    # the solved panel, also written here: the trailing update reads it from a
    # buffer other than the one it writes, so that it is one fused kernel
    panel_buf = empty((max(n - nb, 0) * nb,), a.dtype, dev) if n > nb else None
    hand = update_kernel(dev)
    inv_held = empty((nb * nb,), a.dtype, dev) if hand and n > nb else None
    inv = None if inv_held is None else _buf(inv_held)
    for k in range(0, n, nb):
        b = min(nb, n - k)
        k2 = k + b
        _k.potrf(s, _buf(flag), k * n + k, n, b, k, nb, a.dtype, dev,
                 inv if k2 < n else None)
        if k2 < n:
            assert panel_buf is not None
            m = n - k2
            # L21 = A21 L11^-T: each row of the panel solved against L11
            if inv is not None:
                _k.trmm_inverse(s, _buf(panel_buf), inv, b, m, (k2 * n + k, 1, n), (0, 1, b),
                                nb, a.dtype, dev)
            else:
                _k.trsm_blocks(s, s, b, m, (k * n + k, n, 1), (k2 * n + k, 1, n), True,
                               False, nb, a.dtype, dev, copy=(_buf(panel_buf), 0, 1, b))
            if hand:  # (its lower half: the rest is not read)
                _k.gemm_update(s, _buf(panel_buf), _buf(panel_buf), m, m, b, (k2 * n + k2, n, 1),
                               (0, b, 1), (0, 1, b), True, a.dtype, dev)
                continue
            panel = reshape(panel_buf[:m * b], (m, b))
            # the whole trailing square (only its lower triangle is read later)
            w[k2:, k2:] -= _product(panel, panel, True)
    if _read_flag(flag):
        raise LinAlgError("Matrix is not positive definite")
    return tril(w)


def cholesky(x: Any, upper: bool = False) -> Array:
    """``numpy.linalg.cholesky``: the lower factor ``L`` (``L @ L.T == x``; complex
    Hermitian ``x``: ``L @ L^H``); with ``upper=True`` the upper one.  Only the lower
    triangle of ``x`` is read."""
    a = _matrices(x, "cholesky", complex_ok=True)
    out = _batched(_cplx.cholesky if a.dtype.kind == "c" else _cholesky2, a)
    if not upper:
        return out
    # (numpy's upper factor is L^H)
    return _cplx.conj(out).swapaxes(-1, -2) if a.dtype.kind == "c" else out.swapaxes(-1, -2)


# }}}

# {{{ LU

class _LU(NamedTuple):
    """An LU factorisation with partial (tournament) pivoting, LAPACK's layout."""

    lu: Array  #: L (unit, below the diagonal) and U packed
    piv: Array  #: int64, LAPACK's: row k was swapped with row piv[k]
    rows: Array  #: int64, the swaps' net effect: row i of L U is row rows[i] of A
    bad: int  #: the 1-based column of the first zero pivot, or 0


def _lu(a: Array) -> _LU:
    """The LU factors of the n x n matrix ``a``.

    Right-looking and blocked; each panel's pivot rows are chosen by a tournament
    (:func:`fuseloop.linalg_kernels.panel_pivots`: each of its launches factors slices
    of the panel with partial pivoting, in parallel, and keeps the pivot rows for the
    next), so that no launch needs the whole panel in one work-group; on GPUs by
    :func:`fuseloop.linalg_panel.panel_pivots_rows` (a row per work-item: one or two
    launches a panel).  The chosen
    rows are exchanged in the whole matrix, and its factored diagonal block written,
    by one launch; the panel below and the block row right of it are triangular
    solves (one launch for both), and the trailing matrix is updated by one kernel
    (see :func:`update_kernel`).
    """
    from .creation import arange

    n, dev = a.shape[0], a.device
    w = _copy(a)
    s = _buf(w)
    piv = empty((n,), np.int64, dev)
    rows = _copy(arange(n, dtype=np.int64, device=dev))
    flag = _flag(dev)
    nb = _k.fit_block(dev, block_size(dev), a.dtype)
    sets = -(-n // (2 * nb)) * nb
    cands = (_buf(empty((sets,), np.int64, dev)), _buf(empty((sets,), np.int64, dev)))
    diag = _buf(empty((nb * nb,), a.dtype, dev))
    perm = _buf(empty((1 + 4 * nb,), np.int64, dev))
    # the solved panel and block row, also written here (the trailing update reads
    # them from buffers other than the one it writes: one fused kernel)
    rest = max(n - nb, 1) * nb
    # (one buffer: both solves are one launch, which writes one copy buffer)
    both = empty((2 * rest,), a.dtype, dev)
    col_buf, row_buf = both[:rest], both[rest:]
    hand = update_kernel(dev)
    pivots = _panel.panel_pivots_rows if _panel.use_rows(dev, nb, a.dtype) \
        else _k.panel_pivots
    for k in range(0, n, nb):
        b = min(nb, n - k)
        k2 = k + b
        pivots(s, _buf(piv), _buf(flag), diag, perm, cands, k, n, n - k, b, nb, a.dtype, dev)
        _panel.exchange_rows(s, _buf(rows), perm, diag, k, b, n, n, nb, a.dtype, dev)
        if k2 < n:
            m = n - k2
            # one launch: L21 = A21 U11^-1 (each row of the panel below solved against
            # U11^T) and U12 = L11^-1 A12 (L11 unit lower: each column of the block row)
            _k.trsm_blocks(s, s, b, m, (k * n + k, 1, n), (k2 * n + k, 1, n), True, 2, nb,
                           a.dtype, dev, copy=(_buf(both), 0, 1, b),
                           second=(m, (k * n + k, n, 1), (k * n + k2, n, 1), (rest, m, 1), 1))
            if hand:
                _k.gemm_update(s, _buf(both), _buf(both), m, m, b, (k2 * n + k2, n, 1),
                               (0, b, 1), (rest, m, 1), False, a.dtype, dev)
                continue
            w[k2:, k2:] -= _product(reshape(col_buf[:m * b], (m, b)),
                                    reshape(row_buf[:b * m], (b, m)))
    return _LU(w, piv, rows, _read_flag(flag))


def _lu_solve(f: _LU, rhs: Array) -> Array:
    """``x`` with ``A x = rhs`` (``rhs`` n x m) from ``A``'s LU factors: the rows of
    ``rhs`` gathered in the pivots' order, then blocked substitutions."""
    # (a permutation computed here: in range, no bounds check)
    x = _copy(Array._lazy(Gather(rhs._node, f.rows._node, 0, checked=False), rhs.device))
    y = blocked_solve(f.lu, x, True, True, False)  # L y = P rhs, L unit lower
    return blocked_solve(f.lu, y, False, False, False)  # U x = y


def blocked_solve(t: Array, x: Array, lower: bool, unit: bool, transposed: bool) -> Array:
    """The solution of ``T X = x`` (``x`` n x m, contiguous; overwritten) for the
    triangle of the contiguous n x n ``t`` (``transposed``: of ``t.T``).

    Per block, the diagonal block solved in local memory, then the rows not yet
    solved updated: for up to ``FEW_RHS`` right-hand sides both in one hand-written
    kernel (one launch per block, the solution in a new array), otherwise by a
    contraction with the block's solution (two launches per block, in place).
    """
    n, m, dev = t.shape[0], x.shape[1], t.device
    st, sx = _buf(t), _buf(x)
    nb = _k.fit_block(dev, block_size(dev), x.dtype)
    view = t.T if transposed else t
    ts0, ts1 = (1, n) if transposed else (n, 1)
    starts = list(range(0, n, nb))
    few = m <= _k.FEW_RHS
    out = empty(x.shape, x.dtype, dev) if few else x
    solved = None if few else empty((min(nb, n) * m,), x.dtype, dev)
    hand = update_kernel(dev)
    for k in (starts if lower else reversed(starts)):
        k2 = min(n, k + nb)
        b = k2 - k
        if few:
            _k.trsv_step(sx, _buf(out), st, b, m, k, (ts0, ts1), (k2, n) if lower else (0, k),
                         lower, unit, nb, x.dtype, dev)
            continue
        assert solved is not None
        _k.trsm_blocks(sx, st, b, m, (k * ts0 + k * ts1, ts0, ts1), (k * m, m, 1), lower,
                       unit, nb, x.dtype, dev, copy=(_buf(solved), 0, m, 1))
        if hand:  # the rows below (lower) or above the block: x[r] -= T[r, k:k2] solved
            r0, rows = (k2, n - k2) if lower else (0, k)
            _k.gemm_update(sx, st, _buf(solved), rows, m, b, (r0 * m, m, 1),
                           (r0 * ts0 + k * ts1, ts0, ts1), (0, m, 1), False, x.dtype, dev)
            continue
        done = reshape(solved[:b * m], (b, m))
        if lower and k2 < n:
            x[k2:] -= _product(view[k2:, k:k2], done)
        elif not lower and k > 0:
            x[:k] -= _product(view[:k, k:k2], done)
    return out


def _solve2(a: Array, b: Array) -> Array:
    f = _lu(a)
    if f.bad:
        raise LinAlgError("Singular matrix")
    return _lu_solve(f, b)


def solve(a: Any, b: Any) -> Array:
    """``numpy.linalg.solve``: ``x`` with ``a @ x == b``; ``b`` a vector (shape
    ``(..., n)``, numpy 2's rule: only when 1-D) or matrices ``(..., n, k)``."""
    a = _matrices(a, "solve", complex_ok=True)
    bb = _coerce(b)
    complex_ = a.dtype.kind == "c" or bb.dtype.kind == "c"
    dt = np.result_type(a.dtype, _float_dtype(bb, "solve", complex_ok=complex_))
    a = a.astype(dt) if a.dtype != dt else a
    bb = bb.astype(dt) if bb.dtype != dt else bb
    n = a.shape[-1]
    vector = bb.ndim == 1
    if vector:
        bb = reshape(bb, (n, 1)) if bb.shape == (n,) else bb
    if bb.ndim < 2 or bb.shape[-2] != n:
        raise ValueError(f"fl.linalg.solve: b of shape {_coerce(b).shape} does not match a "
                         f"of shape {a.shape} (b needs {n} rows)")
    got = _host_linalg.solve(a, bb, dt)  # (a small system on a CPU: numpy's LAPACK)
    if got is not None:
        return reshape(got, got.shape[:-1]) if vector else got
    if complex_:  # (the real LU of an embedding: linalg_complex)
        return _cplx.solve(a, bb, vector)
    batch = np.broadcast_shapes(a.shape[:-2], bb.shape[:-2])
    if batch and not math.prod(batch):  # (an empty stack: numpy's empty result)
        out = empty((*batch, *bb.shape[-2:]), dtype=dt, device=a.device)
    elif batch:
        from .ops.shape import broadcast_to

        a3 = reshape(broadcast_to(a, (*batch, n, n)), (-1, n, n))
        b3 = reshape(broadcast_to(bb, (*batch, *bb.shape[-2:])), (-1, *bb.shape[-2:]))
        out = reshape(stack([_solve2(a3[i], b3[i]) for i in range(a3.shape[0])]),
                      (*batch, *bb.shape[-2:]))
    else:
        out = _solve2(a, bb)
    return reshape(out, out.shape[:-1]) if vector else out


def _eye(n: int, dtype: np.dtype, device: Any) -> Array:
    from .creation import arange

    i = arange(n, device=device)
    return (reshape(i, (n, 1)) == i).astype(dtype)


def _inv2(a: Array) -> Array:
    return _solve2(a, _eye(a.shape[0], a.dtype, a.device))


def inv(x: Any) -> Array:
    """``numpy.linalg.inv`` (LU, then the solves against the identity)."""
    a = _matrices(x, "inv", complex_ok=True)
    got = _host_linalg.inv(a)  # (a small matrix on a CPU: numpy's LAPACK)
    if got is not None:
        return got
    return _cplx.inv(a) if a.dtype.kind == "c" else _batched(_inv2, a)


def _slogdet2(a: Array) -> tuple[Array, Array]:
    from .creation import arange
    from .ufuncs import FUNCTIONS

    n = a.shape[0]
    lu, piv, _, bad = _lu(a)
    d = diagonal(lu)
    swaps = _r.count_nonzero(piv != arange(n, device=a.device))
    negative = _r.count_nonzero(d < 0)
    sign = (1 - 2 * ((swaps + negative) % 2)).astype(a.dtype)
    if bad:
        sign = sign * 0
    logabs = _r.sum(FUNCTIONS["log"](FUNCTIONS["absolute"](d)))
    return sign, logabs


class SlogdetResult(NamedTuple):
    """``slogdet``'s result (numpy's and the standard's field names)."""

    sign: Array
    logabsdet: Array


def slogdet(x: Any) -> SlogdetResult:
    """``numpy.linalg.slogdet``: (sign, log|det|) from the LU factors (complex: the
    sign a complex number of modulus 1); empty and 0 x 0 input through the host
    fallback."""
    a = _matrices(x, "slogdet", complex_ok=True)
    if a.size == 0:
        return SlogdetResult(*_host("slogdet", np.linalg.slogdet, a))
    return SlogdetResult(*_batched(_cplx.slogdet if a.dtype.kind == "c" else _slogdet2, a))


def _det2(a: Array) -> Array:
    from .creation import arange

    n = a.shape[0]
    lu, piv, _, _ = _lu(a)
    swaps = _r.count_nonzero(piv != arange(n, device=a.device))
    return _r.prod(diagonal(lu)) * (1 - 2 * (swaps % 2)).astype(a.dtype)


def det(x: Any) -> Array:
    """``numpy.linalg.det``: the product of the LU diagonal, signed by the pivots."""
    a = _matrices(x, "det", complex_ok=True)
    if a.shape[-1] == 0:
        raise NotImplementedError("fl.linalg.det of 0 x 0 matrices")
    return _batched(_cplx.det if a.dtype.kind == "c" else _det2, a)


def matrix_power(x: Any, n: int) -> Array:
    """``numpy.linalg.matrix_power``: by repeated squaring (``inv`` first for n < 0)."""
    if not isinstance(n, int | np.integer):
        raise TypeError(f"fl.linalg.matrix_power: exponent must be an integer, got {n!r}")
    a = _coerce(x)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        _matrices(a, "matrix_power")  # raises numpy's error
    n = int(n)
    if n == 0:
        eye = _eye(a.shape[-1], a.dtype, a.device)
        return eye + a * 0  # broadcast over the batch axes
    if n < 0:
        a, n = inv(a), -n
    result: Array | None = None
    base = a
    while True:
        if n & 1:
            result = base if result is None else (result @ base).eval()
        n >>= 1
        if not n:
            break
        base = (base @ base).eval()
    assert result is not None
    return result


# }}}

# {{{ norms and host fallbacks

def _host(name: str, fn: Callable[..., Any], *arrays: Array, **kw: Any) -> Any:
    """``fn`` (numpy's) on host copies of ``arrays``, results back on the device."""
    warnings.warn(f"fl.linalg.{name} runs on the host through numpy (copies to and from "
                  "the device): no device algorithm for it yet", HostFallbackWarning,
                  stacklevel=3)
    dev = arrays[0].device
    out = fn(*(x.get() for x in arrays), **kw)
    if isinstance(out, tuple):
        parts = [asarray(np.asarray(o), device=dev) for o in out]
        # numpy's named tuples (QRResult, EighResult, SVDResult, ...) keep their names
        named: Any = type(out)
        return named(*parts) if hasattr(out, "_fields") else tuple(parts)
    return asarray(np.asarray(out), device=dev)


def qr(x: Any, mode: str = "reduced") -> tuple[Array, Array] | Array:
    """``numpy.linalg.qr`` (modes "reduced", "complete", "r"): blocked Householder QR
    on the device (:mod:`fuseloop.linalg_qr`; complex: :mod:`fuseloop.linalg_qr_complex`),
    numpy's signs."""
    from . import linalg_qr
    from .linalg_qr_complex import qr_matrix_complex

    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"fl.linalg.qr: unknown mode {mode!r}; 'reduced', 'complete' or 'r'")
    a = _matrices(x, "qr", square=False, complex_ok=True)
    if a.ndim > 2 and math.prod(a.shape[:-2]) == 0:
        return linalg_qr.qr_empty_batch(a, mode)
    fn = qr_matrix_complex if a.dtype.kind == "c" else linalg_qr.qr_matrix
    out = _batched(lambda m: fn(m, mode), a)
    return out if mode == "r" else linalg_qr.QRResult(*out)


class EighResult(NamedTuple):
    """``eigh``'s result (numpy's and the standard's field names)."""

    eigenvalues: Array
    eigenvectors: Array


class SVDResult(NamedTuple):
    """``svd``'s result (numpy's and the standard's field names)."""

    U: Array
    S: Array
    Vh: Array


def _uplo(UPLO: str) -> bool:
    """Whether ``UPLO`` names the lower triangle (numpy's check)."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"fl.linalg.eigh: UPLO argument must be 'L' or 'U', got {UPLO!r}")
    return UPLO == "L"


def _host_only(a: Array) -> bool:
    """Empty matrices: the host fallback's."""
    return a.size == 0


def eigh(x: Any, UPLO: str = "L") -> EighResult:
    """``numpy.linalg.eigh``: eigenvalues ascending, eigenvectors as columns, from the
    ``UPLO`` triangle; by Jacobi sweeps on the device (:mod:`fuseloop.linalg_jacobi`;
    complex ones on their real embedding, :mod:`fuseloop.linalg_complex_eig`)."""
    a = _matrices(x, "eigh", complex_ok=True)
    lower = _uplo(UPLO)
    if _host_only(a):
        return EighResult(*_host("eigh", np.linalg.eigh, a, UPLO=UPLO))
    fn = _cplx_eig.eigh if a.dtype.kind == "c" else _jacobi.eigh
    return EighResult(*_batched(lambda m: fn(m, lower), a))


def eigvalsh(x: Any, UPLO: str = "L") -> Array:
    """``numpy.linalg.eigvalsh``: ``eigh``'s eigenvalues (no vectors accumulated)."""
    a = _matrices(x, "eigvalsh", complex_ok=True)
    lower = _uplo(UPLO)
    if _host_only(a):
        return _host("eigvalsh", np.linalg.eigvalsh, a, UPLO=UPLO)
    fn = _cplx_eig.eigh if a.dtype.kind == "c" else _jacobi.eigh
    return _batched(lambda m: fn(m, lower, vectors=False), a)


def svd(x: Any, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """``numpy.linalg.svd``: ``(U, S, Vh)`` with ``S`` descending (or ``S`` alone);
    real matrices by one-sided Jacobi on the device (:mod:`fuseloop.linalg_jacobi`:
    ``U``'s columns beyond the rank are completed to an orthonormal basis, as
    numpy's; complex ones on their real embedding, :mod:`fuseloop.linalg_complex_eig`)."""
    a = _matrices(x, "svd", square=False, complex_ok=True)
    if _host_only(a):
        out = _host("svd", np.linalg.svd, a, full_matrices=full_matrices,
                    compute_uv=compute_uv)
        return SVDResult(*out) if compute_uv else out
    fn = _cplx_eig.svd if a.dtype.kind == "c" else _jacobi.svd
    out = _batched(lambda m: fn(m, full_matrices, compute_uv), a)
    return SVDResult(*out) if compute_uv else out


def svdvals(x: Any) -> Array:
    """The singular values, descending (``numpy.linalg.svdvals``)."""
    return svd(x, compute_uv=False)


def _values(x: Any, like: Array) -> Array:
    """A tolerance (a number or an array of them, one per matrix) as an array in
    ``like``'s dtype on its device."""
    if isinstance(x, Array):
        return x.astype(like.dtype)
    return asarray(np.asarray(x, like.dtype), device=like.device)


def pinv(x: Any, rcond: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Array:
    """``numpy.linalg.pinv`` through the SVD: singular values at most ``rcond`` times
    the largest are dropped (default 1e-15, numpy's); ``rtol`` is the Array API's name
    for ``rcond``.  ``hermitian`` is accepted and changes nothing (the SVD is used)."""
    from .ops.shape import expand_dims

    if rcond is not None and rtol is not None:
        raise ValueError("fl.linalg.pinv: `rtol` and `rcond` can't be both set")
    a = _matrices(x, "pinv", square=False, complex_ok=True)
    if _host_only(a):
        kw = {} if rcond is None else {"rcond": rcond}
        if rtol is not None:
            kw["rtol"] = rtol
        return _host("pinv", np.linalg.pinv, a, hermitian=hermitian, **kw)
    rc = rcond if rcond is not None else rtol if rtol is not None else 1e-15
    u, s, vh = svd(a, full_matrices=False)
    cutoff = expand_dims(_values(rc, s), -1) * _r.max(s, axis=-1, keepdims=True)
    large = s > cutoff
    inv_s = large.astype(s.dtype) / (s + (~large).astype(s.dtype))
    if a.dtype.kind == "c":  # (V S^-1 U^H)
        vh, u = _cplx.conj(vh), _cplx.conj(u)
    return (vh.swapaxes(-1, -2) * expand_dims(inv_s.astype(a.dtype), -2)) @ u.swapaxes(-1, -2)


def matrix_rank(x: Any, tol: Any = None, hermitian: bool = False, *,
                rtol: Any = None) -> Array:
    """``numpy.linalg.matrix_rank``: the singular values above ``tol`` (default:
    ``rtol`` times the largest, ``rtol`` by default ``max(m, n) * eps``), counted;
    ``hermitian``: from the eigenvalues' magnitudes."""
    from .ops.shape import expand_dims
    from .ufuncs import FUNCTIONS

    if rtol is not None and tol is not None:
        raise ValueError("fl.linalg.matrix_rank: `tol` and `rtol` can't be both set")
    a = _coerce(x)
    if a.ndim < 2:
        return _r.count_nonzero(_r.any(a != 0)) if a.ndim else (a != 0).astype(np.int64)
    a = _matrices(a, "matrix_rank", False, complex_ok=True)
    if _host_only(a):
        return _host("matrix_rank", np.linalg.matrix_rank, a, tol=tol, hermitian=hermitian,
                     **({} if rtol is None else {"rtol": rtol}))
    s = FUNCTIONS["absolute"](eigvalsh(a)) if hermitian else svdvals(a)
    if tol is None:
        rel = max(a.shape[-2:]) * np.finfo(s.dtype).eps if rtol is None \
            else expand_dims(_values(rtol, s), -1)
        limit = _r.max(s, axis=-1, keepdims=True) * rel
    else:
        limit = expand_dims(_values(tol, s), -1)
    return _r.count_nonzero(s > limit, axis=-1)


def matrix_norm(x: Any, ord: Any = "fro", keepdims: bool = False) -> Array:
    """The norm of the matrices over the last two axes (array API's
    ``matrix_norm``): "fro", 1, -1, inf, -inf, and 2, -2 and "nuc" from the
    singular values (:func:`svdvals`)."""
    from .ufuncs import FUNCTIONS

    a = _matrices(x, "matrix_norm", square=False, complex_ok=True)
    absolute = FUNCTIONS["absolute"]
    if ord == "fro":
        mag = absolute(a) if a.dtype.kind == "c" else a
        out = FUNCTIONS["sqrt"](_r.sum(mag * mag, axis=(-2, -1)))
    elif ord in (1, -1):
        cols = _r.sum(absolute(a), axis=-2)
        out = _r.max(cols, axis=-1) if ord == 1 else _r.min(cols, axis=-1)
    elif ord in (np.inf, -np.inf):
        rows = _r.sum(absolute(a), axis=-1)
        out = _r.max(rows, axis=-1) if ord == np.inf else _r.min(rows, axis=-1)
    elif ord in (2, -2, "nuc"):
        s = svdvals(a)
        out = _r.max(s, axis=-1) if ord == 2 else _r.min(s, axis=-1) if ord == -2 \
            else _r.sum(s, axis=-1)
    else:
        raise ValueError(f"fl.linalg.matrix_norm: invalid norm order {ord!r}; one of 'fro', "
                         "'nuc', 1, -1, 2, -2, inf, -inf")
    return reshape(out, (*out.shape, 1, 1)) if keepdims else out


# }}}

__all__ = ["EighResult", "LinAlgError", "SVDResult", "cholesky", "det", "eigh", "eigvalsh",
           "inv", "matrix_norm", "matrix_power", "matrix_rank", "pinv", "qr", "slogdet",
           "solve", "svd", "svdvals"]
