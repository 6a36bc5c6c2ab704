"""Complex Hermitian eigenproblems and complex SVDs on the device, through the real
Jacobi algorithms (:mod:`fuseloop.linalg_jacobi`) on the real embedding.

For a complex ``A``, ``E(A) = [[Re A, -Im A], [Im A, Re A]]`` is real (symmetric when
``A`` is Hermitian), has each eigenvalue (singular value) of ``A`` twice, and
commutes with ``J = [[0, -I], [I, 0]]``: the real vectors of a doubled value span a
``J``-invariant plane, and any unit ``q = (x; y)`` in it gives the unit complex
eigenvector (singular vector) ``x + iy`` of ``A``.  So of each pair of sorted values
one value and one vector are kept.  Where values of ``A`` repeat (within a few
rounding errors of the largest: a *cluster* of k values, 2k real vectors), the
2k complex vectors span the k-dimensional eigenspace without being independent; k
orthonormal ones are picked from them by Gram-Schmidt with column pivoting (the 2k
vectors ``Z`` satisfy ``Z Z^H = 2 P`` for the space's projector ``P``, so the
largest remaining residual never falls below ``1/k``: the picks are well
conditioned).  The SVD picks ``V``'s vectors so and applies the same combinations to
``U``'s (``A V = U S`` holds column by column, so it still does); its columns of
zero singular values, and ``full_matrices``' extra ones, are picked from the
embedding's complete orthonormal complement (``J``-invariant as a whole).

The clusters are found from the values read to the host (one read of 2n values);
the picks cost a read and a few launches per vector of a cluster, nothing where
no value repeats.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import linalg_jacobi as _jacobi
from .array import Array
from .linalg_complex import combine, conj, embed, real_dtype
from .linalg_kernels import contiguous_copy as _copy
from .mathfuncs import imag, real
from .ops import reductions as _r
from .ops.shape import concatenate, reshape, tril, triu

#: values of A closer than this many rounding errors of the largest are one cluster
CLUSTER_EPS = 1000


def _clusters(values: np.ndarray, dtype: np.dtype) -> list[tuple[int, int]]:
    """(start, count) of the runs of ``values`` (sorted) that repeat, count > 1."""
    big = float(np.abs(values).max()) if values.size else 0.0
    tol = CLUSTER_EPS * float(np.finfo(dtype).eps) * (big or 1.0)
    runs: list[tuple[int, int]] = []
    start = 0
    for j in range(1, len(values) + 1):
        if j == len(values) or abs(float(values[j]) - float(values[j - 1])) > tol:
            if j - start > 1:
                runs.append((start, j - start))
            start = j
    return runs


def _column_norms2(z: Array) -> np.ndarray:
    from .ufuncs import FUNCTIONS

    mag = FUNCTIONS["absolute"](z)
    return _r.sum(mag * mag, axis=0).get()


def pick(z: Array, count: int, other: Array | None = None) -> tuple[Array, Array | None]:
    """``count`` orthonormal columns spanning (most of) the columns of the complex
    ``z`` by Gram-Schmidt with column pivoting; ``other``'s columns combined alike."""
    z = _copy(z)
    other = _copy(other) if other is not None else None
    picked: list[Array] = []
    also: list[Array] = []
    for _ in range(count):
        norms = _column_norms2(z)
        p = int(np.argmax(norms))
        scale = float(np.sqrt(norms[p]))
        q = (z[:, p] / scale).eval()
        coef = reshape(_r.sum(reshape(conj(q), (-1, 1)) * z, axis=0), (1, -1))
        z = (z - reshape(q, (-1, 1)) * coef).eval()
        picked.append(reshape(q, (-1, 1)))
        if other is not None:
            qo = (other[:, p] / scale).eval()
            other = (other - reshape(qo, (-1, 1)) * coef).eval()
            also.append(reshape(qo, (-1, 1)))
    out = concatenate(picked, axis=1)
    return out, (concatenate(also, axis=1) if other is not None else None)


def _select(z: Array, runs: list[tuple[int, int]], count: int,
            other: Array | None = None) -> tuple[Array, Array | None]:
    """Columns 0, 2, 4, ... (``count`` of them) of ``z`` (and ``other``), the pairs of
    each cluster (start, k) replaced by k picked vectors."""
    if not runs:
        return z[:, 0:2 * count:2], (other[:, 0:2 * count:2] if other is not None else None)
    parts: list[Array] = []
    oparts: list[Array] = []
    j = 0
    for start, k in [*runs, (count, 0)]:
        if start > j:
            parts.append(z[:, 2 * j:2 * start:2])
            if other is not None:
                oparts.append(other[:, 2 * j:2 * start:2])
        if k:
            got, ogot = pick(z[:, 2 * start:2 * (start + k)], k,
                             other[:, 2 * start:2 * (start + k)] if other is not None else None)
            parts.append(got)
            if ogot is not None:
                oparts.append(ogot)
        j = start + k
    return concatenate(parts, axis=1), (concatenate(oparts, axis=1) if oparts else None)


def _complexify(q: Array, dtype: np.dtype) -> Array:
    """The columns ``(x; y)`` of the real 2p x c ``q`` as the complex ``x + iy``."""
    p = q.shape[0] // 2
    return combine(q[:p], q[p:], dtype)


def _hermitian_embedding(a: Array, lower: bool) -> Array:
    """``E(H)`` of the Hermitian ``H`` that the ``lower`` (else upper) triangle of ``a``
    defines (the diagonal's imaginary parts ignored, as LAPACK's)."""
    part = tril if lower else triu
    re, im = real(a), imag(a)
    r = part(re) + part(re, -1 if lower else 1).T
    s = part(im, -1 if lower else 1)
    return embed(combine(r, s - s.T, a.dtype))


def eigh(a: Array, lower: bool = True, vectors: bool = True) -> Any:
    """Eigenvalues (ascending, real) and, with ``vectors``, eigenvectors (columns) of
    one complex Hermitian n x n matrix."""
    n, dt = a.shape[0], a.dtype
    out = _jacobi.eigh(_copy(_hermitian_embedding(a, lower)), True, vectors)
    w2 = out[0] if vectors else out
    values = ((w2[0::2] + w2[1::2]) * 0.5).eval()
    if not vectors:
        return values
    runs = _clusters(values.get(), real_dtype(dt))
    z, _ = _select(_complexify(out[1], dt), runs, n)
    return values, _copy(z)


def svd(a: Array, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """The SVD of one complex m x n matrix, as numpy's: ``(U, S, Vh)`` (``S``
    descending, real) or ``S`` alone."""
    m, n = a.shape
    dt, rt = a.dtype, real_dtype(a.dtype)
    p = min(m, n)
    e = _copy(embed(a))
    if not compute_uv:
        s2 = _jacobi.svd(e, False, False)
        return ((s2[0::2] + s2[1::2]) * 0.5).eval()
    # the complete bases where the zero values' vectors may be needed: see below
    u2, s2, vh2 = _jacobi.svd(e, full_matrices, True)
    s = ((s2[0::2] + s2[1::2]) * 0.5).eval()
    sh = s.get()
    big = float(sh.max()) if sh.size else 0.0
    rank = int(np.count_nonzero(sh > CLUSTER_EPS * float(np.finfo(rt).eps) * (big or 1.0)))
    if rank < p and not full_matrices and m != n:
        # the reduced bases' columns beyond the rank are not a J-invariant space; the
        # complete ones' are
        u2, _, vh2 = _jacobi.svd(e, True, True)
    zu, zv = _complexify(u2, dt), _complexify(vh2.T, dt)
    runs = _clusters(sh[:rank], rt)
    v, u = _select(zv[:, :2 * rank], runs, rank, zu[:, :2 * rank])
    assert u is not None
    ku = m if full_matrices else p
    kv = n if full_matrices else p
    if ku > rank:
        u = concatenate([u, pick(zu[:, 2 * rank:], ku - rank)[0]], axis=1)
    if kv > rank:
        v = concatenate([v, pick(zv[:, 2 * rank:], kv - rank)[0]], axis=1)
    return _copy(u), s, _copy(conj(v).T)


__all__ = ["CLUSTER_EPS", "eigh", "pick", "svd"]
