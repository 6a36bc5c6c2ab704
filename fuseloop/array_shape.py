"""Shape and contraction methods of :class:`fuseloop.Array` (a mixin).

The functions live in :mod:`fuseloop.ops.shape`, :mod:`fuseloop.ops.indexing` and
:mod:`fuseloop.ops.linalg`, which import :mod:`fuseloop.array`; they are bound here on
first use, as an import statement in each method cost every ``x.T``, ``x.reshape``
or ``a @ b`` about a microsecond.  ``x.T`` of a buffer (a concrete array or a view of
one) makes its reversed strides directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .expr.nodes import Leaf, c_strides

if TYPE_CHECKING:
    from .array import Array

_new = object.__new__


class _Ops:
    """The ops modules, bound by :func:`_ops` on first use."""

    shape: Any = None
    indexing: Any = None
    linalg: Any = None


def _ops() -> type[_Ops]:
    if _Ops.shape is None:
        from .ops import indexing, linalg, shape

        _Ops.indexing, _Ops.linalg, _Ops.shape = indexing, linalg, shape
    return _Ops


# fuseloop.host_products.transposed, bound on first use (as _ops)
_host_transposed: list[Any] = [None]


def _bind_host() -> Any:
    from .host_products import transposed

    _host_transposed[0] = transposed
    return transposed


class ShapeMethods:
    """Views, reshapes and contractions (see :mod:`fuseloop.ops.shape`)."""

    __slots__ = ()

    if TYPE_CHECKING:  # what the mixin uses of Array (declared for the type checker only)
        _node: Any
        _storage: Any
        _shape: tuple[int, ...]
        device: Any
        dtype: np.dtype

        def copy(self) -> Array: ...

    def reshape(self, *shape: Any, order: str = "C") -> Array:
        f = (_Ops.shape or _ops().shape).reshape
        return f(self, shape[0] if len(shape) == 1 else shape, order=order)

    def ravel(self) -> Array:
        return (_Ops.shape or _ops().shape).ravel(self)

    def flatten(self) -> Array:
        """A contiguous copy as a 1-D array (lazy: fuses with what follows)."""
        return (_Ops.shape or _ops().shape).ravel(self.copy())

    def transpose(self, *axes: Any) -> Array:
        if len(axes) == 1 and not isinstance(axes[0], int | np.integer):
            axes = axes[0]
        return (_Ops.shape or _ops().shape).transpose(self, axes or None)

    @property
    def T(self) -> Array:
        node = self._node
        if type(node) is not Leaf:
            return self.transpose()
        if self._storage is not None and (
                got := (_host_transposed[0] or _bind_host())(self)) is not None:
            return got  # (small, on a CPU device: a HostArray, as its small views are)
        # (affine_view's leaf view of the reversing map: the strides reversed)
        strides = node.strides
        return _leaf_transposed(self, node, node.shape[::-1],
                                (c_strides(node.shape) if strides is None else strides)[::-1])

    @property
    def mT(self) -> Array:
        return (_Ops.shape or _ops().shape).swapaxes(self, -1, -2)

    def swapaxes(self, axis1: int, axis2: int) -> Array:
        return (_Ops.shape or _ops().shape).swapaxes(self, axis1, axis2)

    def squeeze(self, axis: Any = None) -> Array:
        return (_Ops.shape or _ops().shape).squeeze(self, axis)

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
        return (_Ops.shape or _ops().shape).diagonal(self, offset, axis1, axis2)

    def take(self, indices: Any, axis: int | None = None) -> Array:
        return (_Ops.indexing or _ops().indexing).take(self, indices, axis)

    def dot(self, other: Any) -> Array:
        return (_Ops.linalg or _ops().linalg).dot(self, other)

    def __matmul__(self, other: Any) -> Array:
        return (_Ops.linalg or _ops().linalg).matmul(self, other)

    def __rmatmul__(self, other: Any) -> Array:
        return (_Ops.linalg or _ops().linalg).matmul(other, self)


def _leaf_transposed(arr: Any, node: Leaf, shape: tuple[int, ...],
                     strides: tuple[int, ...]) -> Array:
    """``arr.T`` of the buffer view ``node``: a concrete view for a concrete ``arr``
    (as :func:`fuseloop.ops.shape._wrap`), else a lazy one."""
    leaf = Leaf(node.storage, node.dtype, shape, strides, node.offset)
    if arr._storage is None:
        from .array import _lazy_array

        return _lazy_array(leaf, arr.device)
    view = _new(type(arr))
    view._storage, view._node, view.device = node.storage, leaf, arr.device
    view.dtype, view._shape = node.dtype, shape
    return view
