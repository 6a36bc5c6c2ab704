"""The parts of :class:`fuseloop.Array` that numpy and Python call: ``__array__``,
copying and pickling, ``shape`` assignment and the reduction methods numpy's
functions call (``np.sum(x)`` calls ``x.sum(axis=..., dtype=..., out=...)``).

A mixin, so that :mod:`fuseloop.array` keeps to the expression machinery.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ShapeError

if TYPE_CHECKING:
    from .array import Array

_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")

_COPY_REFUSED = (
    "Unable to avoid copy while creating an array as requested: a fuseloop array lives "
    "in device memory, so numpy always gets a copy.\nUse np.asarray(x) (or x.get()) to "
    "allow the copy.")


def _restore(host: np.ndarray) -> Array:
    """Unpickling: the host copy onto the current default device."""
    from .creation import asarray

    return asarray(host)


def _set_shape(self, shape: Any) -> None:
    """``x.shape = s``: numpy's in-place reshape, allowed only where no copy is needed."""
    from .expr.views import reshape_view
    from .ops.shape import resolve_shape

    new = resolve_shape(self, shape)
    node = reshape_view(self._node, new)
    if node is not None:  # (a concrete array's stays a view of its buffer: a Leaf)
        self._node = node
        self._shape = new
        return
    if self._storage is not None:
        raise AttributeError(
            f"Incompatible shape for in-place modification: the strides of this view "
            f"(shape {self.shape}) cannot show it as shape {new} without a copy. "
            "Use `.reshape()` to make a copy with the desired shape.")
    # a lazy array owns no buffer anyone else sees: its values, computed in C order
    storage = self.copy().eval()._storage
    self._shape = new
    self._become(storage)


def _finish(result: Array, out: Any, name: str) -> Any:
    """Write a reduction's ``result`` into ``out`` (numpy's ``out=``) and return it."""
    if out is None:
        return result
    from .array import Array

    if isinstance(out, tuple) and len(out) == 1:  # (numpy passes out=(arr,) at times)
        out = out[0]
    if not isinstance(out, Array | np.ndarray):
        raise TypeError(f"{name}: out= must be a fuseloop or numpy array, not "
                        f"{type(out).__name__}")
    if out.shape != result.shape:
        raise ShapeError(f"{name}: out= has shape {out.shape}, but the result has shape "
                         f"{result.shape}")
    # (numpy's reductions cast into out unsafely)
    out[...] = result if isinstance(out, Array) else result.get()
    return out


_reductions_module: list[Any] = []


def _reductions() -> Any:
    """:mod:`fuseloop.ops.reductions`, imported on the first reduction (it imports
    :mod:`fuseloop.array`, whose class this is part of): an import statement in each
    method cost every ``x.sum()`` or ``x.mean()`` ~0.9 us (measured)."""
    if not _reductions_module:
        from .ops import reductions

        _reductions_module.append(reductions)
    return _reductions_module[0]


def _plain_where(where: Any, name: str) -> None:
    if not (where is True or (isinstance(where, np.bool_) and bool(where))):
        raise NotImplementedError(
            f"{name}: where= other than True is not supported; mask the input instead, "
            f"e.g. fl.where(mask, x, identity).{name}()")


# ufunc -> fuseloop's function of its name, for a plain call whose operands are arrays and
# scalars (``a1 * x[:, j]`` with a numpy scalar ``a1``: NPBench's deriche); filled by
# fuseloop.interop's dispatch, whose checks and imports cost as much as the operation
DIRECT_UFUNCS: dict[Any, Any] = {}
_PLAIN_OPERANDS = (int, float, bool, np.generic)


class ArrayProtocol:
    """numpy's and Python's protocols for :class:`fuseloop.Array` (a mixin)."""

    __slots__ = ()

    if TYPE_CHECKING:  # what the mixin uses of Array (declared for the type checker only)
        def get(self) -> np.ndarray: ...
        def copy(self) -> Array: ...
        def _scalar(self) -> Any: ...
        device: Any

    # {{{ numpy conversion

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """numpy 2's protocol: always a new host copy, so ``copy=False`` raises."""
        if copy is False:
            raise ValueError(_COPY_REFUSED)
        host = self.get()
        return host if dtype is None else host.astype(dtype, copy=False)

    # numpy's dispatch protocols and DLPack: fuseloop.interop holds them
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any,
                        **kwargs: Any) -> Any:
        """``np.sin(x)``, ``np.add.reduce(x)``, ...: fuseloop's equivalent (or an error)."""
        if method == "__call__" and not kwargs:
            f = DIRECT_UFUNCS.get(ufunc)
            if f is not None:
                for x in inputs:  # (a loop, not all() of a generator: ``alpha * A[i, j]``)
                    if type(x) is not type(self) and not isinstance(x, _PLAIN_OPERANDS):
                        break
                else:
                    return f(*inputs)
        from .interop import array_ufunc

        return array_ufunc(self, ufunc, method, *inputs, **kwargs)  # type: ignore[arg-type]

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """``np.concatenate([x, y])``, ...: fuseloop's function of that name (or an error)."""
        from .interop import array_function

        return array_function(self, func, types, args, kwargs)  # type: ignore[arg-type]

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        """DLPack export: on a CUDA device the array's own memory, else a host copy
        (``copy=False`` then raises ``BufferError``)."""
        if self.device.backend == "cuda" and (dl_device is None or dl_device[0] == 2):
            from . import cuda_interop

            return cuda_interop.dlpack(self, stream, max_version, dl_device, copy)  # type: ignore[arg-type]
        from .interop import dlpack

        return dlpack(self, stream, max_version, dl_device, copy)  # type: ignore[arg-type]

    def __dlpack_device__(self) -> tuple[int, int]:
        if self.device.backend == "cuda":
            from . import cuda_interop

            return cuda_interop.dlpack_device(self)  # type: ignore[arg-type]
        from .interop import dlpack_device

        return dlpack_device(self)  # type: ignore[arg-type]

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA's array interface (version 3) of an array on a CUDA device: its own
        memory, no copy (AttributeError on other devices)."""
        from . import cuda_interop

        return cuda_interop.cuda_array_interface(self)  # type: ignore[arg-type]

    def to_pyopencl(self) -> Any:
        """A ``pyopencl.array.Array`` over this array's buffer (no copy; see
        :func:`fuseloop.to_pyopencl`)."""
        from .interop import to_pyopencl

        return to_pyopencl(self)  # type: ignore[arg-type]

    # }}}

    # {{{ copying and pickling

    def __copy__(self) -> Array:
        # an independent array, as numpy's copy.copy gives (not one sharing the buffer)
        return self.copy()

    def __deepcopy__(self, memo: dict) -> Array:
        return self.copy()

    def __reduce__(self) -> tuple:
        # the values through the host; unpickled onto the default device of that time
        return _restore, (self.get(),)

    # }}}

    # {{{ Array API: namespace, devices, DLPack

    def __array_namespace__(self, /, *, api_version: str | None = None) -> Any:
        """The fuseloop module, the Array API namespace of its arrays."""
        if api_version is not None and api_version not in _API_VERSIONS:
            raise ValueError(f"fuseloop implements the Array API versions "
                             f"{', '.join(_API_VERSIONS)}, not {api_version!r}")
        import fuseloop

        return fuseloop

    def to_device(self, device: Any, /, *, stream: Any = None) -> Array:
        """This array on ``device`` (itself if it is there already; else a copy)."""
        from .creation import asarray

        if stream is not None:
            raise ValueError("fuseloop arrays take no stream= (each device has one queue)")
        return asarray(self, device=device)

    def __complex__(self) -> complex:
        # (a real value converts; fuseloop has no complex dtypes yet)
        return complex(self._scalar())

    # }}}

    shape = property(attrgetter("_shape"), _set_shape,
                     doc="The array's dimensions; assigning reshapes in place where no "
                         "copy is needed (as numpy), else raises AttributeError.")

    # {{{ reductions (numpy's method signatures: np.sum(x) calls x.sum(...))

    def sum(self, axis: Any = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False, where: Any = True) -> Any:
        f = _reductions().sum
        _plain_where(where, "sum")
        return _finish(f(self, axis=axis, dtype=dtype, keepdims=keepdims), out, "sum")

    def prod(self, axis: Any = None, dtype: Any = None, out: Any = None,
             keepdims: bool = False, where: Any = True) -> Any:
        prod = _reductions().prod
        _plain_where(where, "prod")
        return _finish(prod(self, axis=axis, dtype=dtype, keepdims=keepdims), out, "prod")

    def max(self, axis: Any = None, out: Any = None, keepdims: bool = False,
            where: Any = True) -> Any:
        f = _reductions().max
        _plain_where(where, "max")
        return _finish(f(self, axis=axis, keepdims=keepdims), out, "max")

    def min(self, axis: Any = None, out: Any = None, keepdims: bool = False,
            where: Any = True) -> Any:
        f = _reductions().min
        _plain_where(where, "min")
        return _finish(f(self, axis=axis, keepdims=keepdims), out, "min")

    def mean(self, axis: Any = None, dtype: Any = None, out: Any = None,
             keepdims: bool = False, where: Any = True) -> Any:
        mean = _reductions().mean
        _plain_where(where, "mean")
        return _finish(mean(self, axis=axis, dtype=dtype, keepdims=keepdims), out, "mean")

    def var(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
            keepdims: bool = False, where: Any = True, *, correction: Any = None) -> Any:
        var = _reductions().var
        _plain_where(where, "var")
        return _finish(var(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
                           correction=correction),
                       out, "var")

    def std(self, axis: Any = None, dtype: Any = None, out: Any = None, ddof: Any = 0,
            keepdims: bool = False, where: Any = True, *, correction: Any = None) -> Any:
        std = _reductions().std
        _plain_where(where, "std")
        return _finish(std(self, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
                           correction=correction),
                       out, "std")

    def any(self, axis: Any = None, out: Any = None, keepdims: bool = False,
            where: Any = True) -> Any:
        f = _reductions().any
        _plain_where(where, "any")
        return _finish(f(self, axis=axis, keepdims=keepdims), out, "any")

    def all(self, axis: Any = None, out: Any = None, keepdims: bool = False,
            where: Any = True) -> Any:
        f = _reductions().all
        _plain_where(where, "all")
        return _finish(f(self, axis=axis, keepdims=keepdims), out, "all")

    def argmax(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        argmax = _reductions().argmax
        return _finish(argmax(self, axis=axis, keepdims=keepdims), out, "argmax")

    def argmin(self, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        argmin = _reductions().argmin
        return _finish(argmin(self, axis=axis, keepdims=keepdims), out, "argmin")

    def cumsum(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        """numpy's method: running sums (``axis=None``: of the flattened array)."""
        from .numpy_stats import cumsum

        return cumsum(self, axis=axis, dtype=dtype, out=out)

    def cumprod(self, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        """numpy's method: running products (``axis=None``: of the flattened array)."""
        from .numpy_stats import cumprod

        return cumprod(self, axis=axis, dtype=dtype, out=out)

    # }}}
