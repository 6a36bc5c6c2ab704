"""Sparse matrices on the device: ``fl.sparse.csr_matrix`` and ``fl.sparse.ell_matrix``.

After VexCL's ``sparse::csr`` and ``sparse::ell``.  A matrix holds device arrays
(CSR: ``data``, ``indices``, ``indptr``; ELL: ``data`` and ``indices`` of shape
``(width, rows)``, column-major, padding marked by the column index -1).  ``A @ x``
is a lazy 1-D array (a :class:`~fuseloop.expr.nodes.SparseProduct` node) that
fuses with the expression around it: ``2 * (A @ x) - b`` is one kernel, one
work-item per row (see docs/api.md, "Sparse matrices").

Indices are checked when a matrix is built (on the host for host arrays, by small
reductions on the device for device arrays), so the product reads ``x`` without
per-element checks.  scipy is optional: it is imported only to read or make a
``scipy.sparse`` matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .array import Array
from .creation import asarray
from .errors import DeviceError, DTypeError, ShapeError
from .expr.nodes import Leaf, SparseProduct

__all__ = ["csr_matrix", "ell_matrix", "issparse"]

_DATA_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def issparse(obj: Any) -> bool:
    """Whether ``obj`` is a fuseloop sparse matrix."""
    return isinstance(obj, _SparseMatrix)


def _is_scipy_sparse(obj: Any) -> bool:
    # (duck-typed: scipy is not imported unless the caller already has a scipy matrix)
    return hasattr(obj, "tocsr") and hasattr(obj, "nnz") and hasattr(obj, "shape")


def _check_dtypes(data: Any, indices: Any, indptr: Any | None) -> None:
    if np.dtype(data.dtype) not in _DATA_DTYPES:
        raise DTypeError(f"sparse matrix data must be float32 or float64, got "
                         f"{np.dtype(data.dtype)}; convert with .astype(np.float32) or "
                         ".astype(np.float64) first")
    for name, arr in (("indices", indices), ("indptr", indptr)):
        if arr is not None and np.dtype(arr.dtype) not in _INDEX_DTYPES:
            raise DTypeError(f"sparse matrix {name} must be int32 or int64, got "
                             f"{np.dtype(arr.dtype)}; convert with .astype(np.int32) first")


def _host_or_device(arr: Any, what: str) -> Any:
    """``arr`` as a fuseloop array (kept) or a host numpy array (converted)."""
    if isinstance(arr, Array):
        if arr.ndim != 1 and what != "ell":
            raise ShapeError(f"sparse matrix arrays must be 1-D, got shape {arr.shape}")
        return arr
    return np.asarray(arr)


def _device_of(arrays: list[Any], device: Any) -> Any:
    devs = {id(a.device): a.device for a in arrays if isinstance(a, Array)}
    if len(devs) > 1:
        names = ", ".join(d.name for d in devs.values())
        raise DeviceError(f"sparse matrix arrays live on different devices ({names}); "
                          "move them with fl.asarray(x, device=...) first")
    if devs and device is None:
        return next(iter(devs.values()))
    return device


def _upload(arr: Any, device: Any) -> Array:
    return _contiguous(asarray(arr, device=device))


def _contiguous(arr: Array) -> Array:
    """A concrete array filling its own buffer (the kernel reads it whole)."""
    arr.eval()
    return arr if arr.is_contiguous else arr.copy().eval()


class _SparseMatrix:
    """What CSR and ELL matrices share: shape, dtype, device, products."""

    format = ""
    shape: tuple[int, int]
    data: Array
    indices: Array

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def device(self) -> Any:
        return self.data.device

    @property
    def ndim(self) -> int:
        return 2

    def __repr__(self) -> str:
        return (f"<fuseloop {self.format} matrix of shape {self.shape}, {self.dtype}, "
                f"{self.nnz} stored entries, on {self.device.name}>")

    def _product(self, x: Any) -> Array:
        if isinstance(x, _SparseMatrix):
            raise ShapeError("sparse @ sparse is not supported: multiply by a 1-D vector")
        if not isinstance(x, Array):
            x = asarray(x, device=self.device)
        if x.ndim != 1:
            raise ShapeError(f"matmul: a {self.format} matrix of shape {self.shape} multiplies "
                             f"a 1-D vector, got an operand of shape {x.shape}")
        if x.shape[0] != self.shape[1]:
            raise ShapeError(f"matmul: a {self.format} matrix of shape {self.shape} and a "
                             f"vector of shape {x.shape}: the vector needs {self.shape[1]} "
                             "elements (the matrix's columns)")
        if x.device is not self.device:
            raise DeviceError(f"the matrix lives on {self.device.name} but the vector on "
                              f"{x.device.name}; move one with fl.asarray(x, device=...)")
        dtype = np.result_type(self.dtype, x.dtype)
        if dtype not in _DATA_DTYPES:
            raise DTypeError(f"matmul: a {self.dtype} matrix and a {x.dtype} vector give "
                             f"{dtype}; sparse products compute in float32 or float64")
        # numpy evaluates x first; gathering a lazy expression would also compute it
        # once per stored entry, so it is evaluated into a buffer (a view stays a view)
        x.eval()
        node = self._node(x._node, dtype)
        return Array._lazy(node, self.device)

    def _node(self, x: Any, dtype: np.dtype) -> SparseProduct:
        raise NotImplementedError

    @property
    def nnz(self) -> int:
        raise NotImplementedError

    def __matmul__(self, x: Any) -> Array:
        return self._product(x)

    def dot(self, x: Any) -> Array:
        """``A @ x`` for a 1-D ``x`` (a fuseloop array, lazy expression or host array)."""
        return self._product(x)

    def get(self) -> np.ndarray:
        """The matrix as a dense numpy array (repeated entries add up, as in scipy)."""
        rows, cols, vals = self._coo()
        out = np.zeros(self.shape, dtype=self.dtype)
        np.add.at(out, (rows, cols), vals)
        return out

    toarray = get

    def _coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def to_scipy(self) -> Any:
        """The matrix as a ``scipy.sparse.csr_matrix`` (needs scipy)."""
        import scipy.sparse

        if isinstance(self, csr_matrix):
            return scipy.sparse.csr_matrix(
                (self.data.get(), self.indices.get(), self.indptr.get()), shape=self.shape)
        rows, cols, vals = self._coo()
        return scipy.sparse.csr_matrix((vals, (rows, cols)), shape=self.shape)


class csr_matrix(_SparseMatrix):
    """A compressed sparse row matrix on a device.

    ``csr_matrix((data, indices, indptr), shape=(m, n))`` from host (numpy) or
    fuseloop arrays, ``csr_matrix(scipy_matrix)``, or ``csr_matrix(dense_2d)``.
    Row ``i``'s entries are ``data[indptr[i]:indptr[i + 1]]`` at the columns
    ``indices[...]``.  ``data``: float32 or float64; ``indices``/``indptr``: int32
    or int64.  Without ``shape`` the columns are ``max(indices) + 1``.
    """

    format = "csr"
    indptr: Array

    def __init__(self, arg: Any, shape: tuple[int, int] | None = None, *,
                 device: Any = None) -> None:
        if isinstance(arg, csr_matrix):
            self.data, self.indices, self.indptr = arg.data, arg.indices, arg.indptr
            self.shape = arg.shape
            return
        if _is_scipy_sparse(arg):
            m = arg.tocsr()
            shape = m.shape if shape is None else shape
            arg = (m.data, m.indices, m.indptr)
        elif isinstance(arg, np.ndarray | list) or (isinstance(arg, Array) and arg.ndim == 2):
            dense = arg.get() if isinstance(arg, Array) else np.asarray(arg)
            if dense.ndim != 2:
                raise ShapeError(f"csr_matrix of a dense array needs 2 dimensions, got shape "
                                 f"{dense.shape}")
            rows, cols = np.nonzero(dense)
            counts = np.bincount(rows, minlength=dense.shape[0])
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
            shape = dense.shape if shape is None else shape
            arg = (dense[rows, cols], cols.astype(np.int32), indptr)
        if not (isinstance(arg, tuple) and len(arg) == 3):
            raise TypeError("csr_matrix takes (data, indices, indptr), a scipy.sparse matrix "
                            f"or a dense 2-D array, got {type(arg).__name__}")
        data, indices, indptr = (_host_or_device(a, "csr") for a in arg)
        device = _device_of([data, indices, indptr], device)
        _check_dtypes(data, indices, indptr)
        self.shape = _check_csr(data, indices, indptr, shape)
        self.data = _upload(data, device)
        self.indices = _upload(indices, self.data.device)
        self.indptr = _upload(indptr, self.data.device)

    @property
    def nnz(self) -> int:
        """The number of stored entries."""
        return self.data.shape[0]

    def _node(self, x: Any, dtype: np.dtype) -> SparseProduct:
        return SparseProduct("csr", _leaf(self.data), _leaf(self.indices), _leaf(self.indptr),
                             x, self.shape[0], 0, dtype)

    def _coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        indptr = self.indptr.get()
        rows = np.repeat(np.arange(self.shape[0]), np.diff(indptr))
        return rows, self.indices.get(), self.data.get()

    def toell(self) -> ell_matrix:
        """This matrix in ELL format (converted on the host)."""
        return ell_matrix(self)


class ell_matrix(_SparseMatrix):
    """An ELLPACK matrix on a device: every row stores ``width`` entries.

    ``ell_matrix((data, indices), shape=(m, n))`` with host arrays of shape
    ``(m, width)`` (row ``i``'s entries; column index -1 marks padding, whose
    value is ignored), ``ell_matrix(csr)`` (fuseloop CSR, converted on the host),
    or ``ell_matrix(scipy_matrix)``.  On the device ``data`` and ``indices`` have
    shape ``(width, m)`` (column-major: neighbouring rows' k-th entries are
    neighbours), so GPU work-items load them coalesced.  Efficient when rows have
    similar lengths (stencils); one long row makes every row that long.
    """

    format = "ell"

    def __init__(self, arg: Any, shape: tuple[int, int] | None = None, *,
                 device: Any = None) -> None:
        if isinstance(arg, csr_matrix) or _is_scipy_sparse(arg):
            if isinstance(arg, csr_matrix):
                device = arg.device if device is None else device
                src, shape = arg, arg.shape if shape is None else shape
                indptr, indices, values = src.indptr.get(), src.indices.get(), src.data.get()
            else:
                m = arg.tocsr()
                shape = m.shape if shape is None else shape
                indptr, indices, values = m.indptr, m.indices, m.data
            _check_dtypes(values, indices, indptr)
            data, cols = _csr_to_ell(values, indices, indptr, shape[0])
            arg = (data, cols)
        if not (isinstance(arg, tuple) and len(arg) == 2):
            raise TypeError("ell_matrix takes (data, indices) of shape (rows, width), a fuseloop "
                            f"csr_matrix or a scipy.sparse matrix, got {type(arg).__name__}")
        data, indices = (a.get() if isinstance(a, Array) else np.asarray(a) for a in arg)
        device = _device_of(list(arg), device)
        _check_dtypes(data, indices, None)
        if data.ndim != 2 or data.shape != indices.shape:
            raise ShapeError(f"ell_matrix needs data and indices of one 2-D shape (rows, "
                             f"width), got {data.shape} and {indices.shape}")
        rows = data.shape[0]
        ncols = shape[1] if shape is not None else int(indices.max(initial=-1)) + 1
        if shape is not None and shape[0] != rows:
            raise ShapeError(f"ell_matrix: shape {tuple(shape)} has {shape[0]} rows but "
                             f"data has {rows} (data shape {data.shape})")
        if indices.size and (indices.min() < -1 or indices.max() >= ncols):
            bad = indices[(indices < -1) | (indices >= ncols)][0]
            raise ShapeError(f"ell_matrix: column index {bad} out of range for {ncols} "
                             "columns (-1 marks padding)")
        self.shape = (rows, ncols)
        self.width = data.shape[1]
        # column-major on the device: padded values are stored as 0
        self.data = _upload(np.ascontiguousarray(np.where(indices >= 0, data, 0).T), device)
        self.indices = _upload(np.ascontiguousarray(indices.T), self.data.device)

    @property
    def nnz(self) -> int:
        """The number of stored entries, padding included (``rows * width``)."""
        return self.shape[0] * self.width

    def _node(self, x: Any, dtype: np.dtype) -> SparseProduct:
        return SparseProduct("ell", _leaf(self.data), _leaf(self.indices), None, x,
                             self.shape[0], self.width, dtype)

    def _coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cols = self.indices.get()
        keep = cols >= 0
        rows = np.broadcast_to(np.arange(self.shape[0]), cols.shape)
        return rows[keep], cols[keep], self.data.get()[keep]


def _leaf(arr: Array) -> Leaf:
    """The whole buffer of a contiguous array as a flat leaf (ELL's 2-D arrays too)."""
    arr = _contiguous(arr)
    assert arr._storage is not None
    return Leaf.plain(arr._storage, arr.dtype, (arr.size,))


def _check_csr(data: Any, indices: Any, indptr: Any,
               shape: tuple[int, int] | None) -> tuple[int, int]:
    """The matrix's shape, after checking the arrays (numpy or fuseloop: on the device,
    a few small reductions whose values are read back)."""
    xp: Any = np if isinstance(indptr, np.ndarray) else __import__("fuseloop")
    for name, arr in (("data", data), ("indices", indices), ("indptr", indptr)):
        if arr.ndim != 1:
            raise ShapeError(f"csr_matrix: {name} must be 1-D, got shape {arr.shape}")
    if indptr.shape[0] < 1:
        raise ShapeError("csr_matrix: indptr needs at least one element (rows + 1)")
    rows = indptr.shape[0] - 1
    nnz = data.shape[0]
    if indices.shape[0] != nnz:
        raise ShapeError(f"csr_matrix: data and indices differ in length ({nnz} and "
                         f"{indices.shape[0]})")
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0 or last != nnz:
        raise ShapeError(f"csr_matrix: indptr must start at 0 and end at len(data) = {nnz}, "
                         f"got {first} and {last}")
    if rows and not bool(xp.all(indptr[1:] >= indptr[:-1])):
        raise ShapeError("csr_matrix: indptr must be non-decreasing (row i's entries are "
                         "data[indptr[i]:indptr[i+1]])")
    low = int(xp.min(indices)) if nnz else 0
    high = int(xp.max(indices)) if nnz else -1
    ncols = high + 1 if shape is None else int(shape[1])
    if shape is not None and int(shape[0]) != rows:
        raise ShapeError(f"csr_matrix: shape {tuple(shape)} has {shape[0]} rows but indptr "
                         f"has {indptr.shape[0]} elements ({rows} rows)")
    if low < 0 or high >= ncols:
        bad = low if low < 0 else high
        raise ShapeError(f"csr_matrix: column index {bad} out of range for shape "
                         f"({rows}, {ncols})")
    return rows, ncols


def _csr_to_ell(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                rows: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays as ELL's row-major ``(rows, width)`` arrays (padding: column -1)."""
    lengths = np.diff(indptr)
    width = int(lengths.max(initial=0))
    row_of = np.repeat(np.arange(rows), lengths)
    slot = np.arange(len(data)) - np.repeat(indptr[:-1], lengths)
    vals = np.zeros((rows, width), dtype=data.dtype)
    cols = np.full((rows, width), -1, dtype=indices.dtype)
    vals[row_of, slot] = data
    cols[row_of, slot] = indices
    return vals, cols
