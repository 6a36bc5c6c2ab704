"""numpy's dispatch protocols (``__array_ufunc__``, ``__array_function__``) for
fuseloop arrays, DLPack, and zero-copy exchange with ``pyopencl.array.Array``.

``np.sin(x)`` or ``np.concatenate([x, y])`` on fuseloop arrays run fuseloop's function
of the same name (lazily, on the device); host operands (numpy arrays, lists) are
uploaded.  A numpy function or ufunc that fuseloop lacks raises
:class:`~fuseloop.errors.NoEquivalentError` instead of copying to the host silently;
``np.asarray(x)`` (``__array__``) stays the explicit way to the host.
"""

from __future__ import annotations

import inspect
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import DeviceError, NoEquivalentError, ShapeError

if TYPE_CHECKING:
    from .array import Array

# {{{ numpy ufuncs (__array_ufunc__)

_HOST_HINT = "call .get() (or np.asarray(x)) to compute it on the host with numpy"
# ufunc.reduce: the fuseloop reduction of each ufunc
_REDUCTIONS = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min",
               "logical_and": "all", "logical_or": "any"}
# ufunc.accumulate: the fuseloop scan of each ufunc (whichever spelling exists)
_SCANS = {"add": ("cumulative_sum", "cumsum"), "multiply": ("cumulative_prod", "cumprod")}


def _fl() -> Any:
    import fuseloop

    return fuseloop


def _fl_name(name: str) -> Any:
    """``fuseloop.<name>`` or None (its ``__getattr__``, which raises for unknown names, is
    asked only for the names it loads on first use)."""
    fl = _fl()
    found = vars(fl).get(name)
    if found is None and name in fl._ON_FIRST_USE:
        found = getattr(fl, name)
    return found


def _operand_ok(x: Any) -> bool:
    from .array import Array, Constant
    from .trace_hooks import ScalarStandIn  # (fl.fuse's traced scalars)

    return isinstance(x, Array | Constant | ScalarStandIn | np.ndarray | np.generic | int
                      | float | complex | bool | list | tuple) or x is None


def _plain_where(where: Any) -> bool:
    return where is True or (isinstance(where, np.bool_) and bool(where))


def _write_out(result: Any, target: Any, casting: str, name: str, where: Any = True) -> Any:
    """Write ``result`` into the ``out=`` array ``target`` (fuseloop or numpy) with
    numpy's casting rule, only where ``where`` holds."""
    from .array import Array
    from .assignment import compute_into

    if isinstance(result, Array):
        src = result.dtype
    else:
        src = np.asarray(result).dtype
    if not np.can_cast(src, target.dtype, casting=casting):  # type: ignore[arg-type]
        from .errors import DTypeError

        raise DTypeError(f"Cannot cast ufunc {name!r} output from {src!r} to "
                         f"{target.dtype!r} with casting rule {casting!r}")
    if np.broadcast_shapes(np.shape(result), target.shape) != target.shape:
        raise ShapeError(f"{name}: out= has shape {target.shape}, but the result has shape "
                         f"{np.shape(result)} (which does not broadcast to it)")
    if isinstance(target, np.ndarray):  # an explicit host target: its values are copied
        host = result.get() if isinstance(result, Array) else np.asarray(result)
        np.copyto(target, host, casting="unsafe", where=where)
        return target
    if not isinstance(result, Array) or result.dtype != target.dtype:
        result = _fl().asarray(result, device=target.device) if not isinstance(
            result, Array) else result
        result = result.astype(target.dtype)
    if result.shape != target.shape:
        result = _fl().broadcast_to(result, target.shape)
    if not _plain_where(where):
        # only the masked elements are computed and written (fl.compute's where=)
        compute_into((result,), (target,), where, held=(False,), where_held=True)
        return target
    compute_into((result,), (target,))
    return target


def _split_out(out: Any, nout: int, name: str) -> tuple:
    if out is None:
        return (None,) * nout
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != nout:
        raise ValueError(f"{name}: out= needs {nout} array(s), got {len(out)}")
    from .array import Array

    for o in out:
        if o is not None and not isinstance(o, Array | np.ndarray):
            raise TypeError(f"{name}: out= takes fuseloop or numpy arrays, not "
                            f"{type(o).__name__}")
    return out


def _cast_inputs(inputs: tuple, dtype: Any) -> tuple:
    from .array import Array

    dt = np.dtype(dtype)
    return tuple(x.astype(dt) if isinstance(x, Array) and x.dtype != dt
                 else np.asarray(x).astype(dt) if isinstance(x, np.ndarray | list | tuple)
                 else x for x in inputs)


def _call(ufunc: np.ufunc, inputs: tuple, kwargs: dict) -> Any:
    name = ufunc.__name__
    f = _fl_name(name)
    if f is None or not callable(f):
        raise NoEquivalentError(f"fuseloop has no equivalent of the ufunc numpy.{name}; "
                                f"{_HOST_HINT}")
    if not kwargs and ufunc.nout == 1:  # (later plain calls go straight to f)
        from .array_protocol import DIRECT_UFUNCS

        DIRECT_UFUNCS[ufunc] = f
    out = _split_out(kwargs.pop("out", None), ufunc.nout, name)
    where = kwargs.pop("where", True)
    dtype = kwargs.pop("dtype", None)
    casting = kwargs.pop("casting", "same_kind")
    if kwargs.pop("order", "K") not in ("K", "A", "C") or not kwargs.pop("subok", True):
        raise NotImplementedError(f"numpy.{name} on fuseloop arrays: order= other than "
                                  "'K' and subok=False are not supported")
    if kwargs:
        raise TypeError(f"numpy.{name} on fuseloop arrays: fuseloop does not support the "
                        f"argument(s) {', '.join(sorted(kwargs))}")
    if not _plain_where(where) and any(o is None for o in out):
        raise NotImplementedError(
            f"numpy.{name}(..., where=mask) on fuseloop arrays needs out= (the elements "
            f"where mask is False are those of out); or use fl.where(mask, "
            f"fl.{name}(...), other)")
    if dtype is not None:
        inputs = _cast_inputs(inputs, dtype)
    result = f(*inputs)
    results = result if isinstance(result, tuple) else (result,)
    if dtype is not None:
        results = tuple(r.astype(dtype) if hasattr(r, "astype") and r.dtype != np.bool_
                        and r.dtype != np.dtype(dtype) else r for r in results)
    written = tuple(r if o is None else _write_out(r, o, casting, name, where)
                    for r, o in zip(results, out))
    return written if ufunc.nout > 1 else written[0]


def _reduce(ufunc: np.ufunc, x: Any, kwargs: dict) -> Any:
    from .array_protocol import _finish

    name = ufunc.__name__
    red = _REDUCTIONS.get(name)
    if red is None:
        raise NoEquivalentError(f"fuseloop has no reduction for numpy.{name}.reduce; "
                                f"{_HOST_HINT}")
    if not _plain_where(kwargs.get("where", True)):
        raise NotImplementedError(f"numpy.{name}.reduce: where= other than True is not "
                                  "supported; mask the input with fl.where first")
    fl = _fl()
    x = fl.asarray(x) if not isinstance(x, fl.Array) else x
    args: dict[str, Any] = {"axis": kwargs.get("axis", 0),
                            "keepdims": kwargs.get("keepdims", False)}
    if kwargs.get("dtype") is not None:
        if red not in ("sum", "prod"):
            raise NotImplementedError(f"numpy.{name}.reduce: dtype= is not supported")
        args["dtype"] = kwargs["dtype"]
    result = getattr(fl, red)(x, **args)
    if "initial" in kwargs and kwargs["initial"] is not np._NoValue:
        result = _fl_name(name)(result, kwargs["initial"])
    return _finish(result, kwargs.get("out"), f"{name}.reduce")


def _accumulate(ufunc: np.ufunc, x: Any, kwargs: dict) -> Any:
    from .array_protocol import _finish

    name = ufunc.__name__
    scan = next((f for n in _SCANS.get(name, ()) if (f := _fl_name(n)) is not None), None)
    if scan is None:
        raise NoEquivalentError(f"fuseloop has no scan for numpy.{name}.accumulate; "
                                f"{_HOST_HINT}")
    args = {"axis": kwargs.get("axis", 0)}
    if kwargs.get("dtype") is not None:
        args["dtype"] = kwargs["dtype"]
    return _finish(scan(x, **args), kwargs.get("out"), f"{name}.accumulate")


def _outer(ufunc: np.ufunc, inputs: tuple, kwargs: dict) -> Any:
    fl = _fl()
    a, b = (x if isinstance(x, fl.Array) else fl.asarray(x) for x in inputs)
    a = fl.reshape(a, a.shape + (1,) * b.ndim)
    return _call(ufunc, (a, b), kwargs)


def _at(ufunc: np.ufunc, inputs: tuple, kwargs: dict) -> Any:
    name = ufunc.__name__
    f = _fl_name(name)
    at = getattr(f, "at", None)
    if at is None:
        raise NoEquivalentError(f"fuseloop has no numpy.{name}.at; {_HOST_HINT}")
    fl = _fl()
    if not isinstance(inputs[0], fl.Array):
        raise TypeError(f"numpy.{name}.at writes into its first operand in place: it must "
                        f"be a fuseloop array here, not {type(inputs[0]).__name__}")
    return at(*inputs, **kwargs)


def array_ufunc(self: Array, ufunc: np.ufunc, method: str, *inputs: Any,
                **kwargs: Any) -> Any:
    """numpy's ``__array_ufunc__``: the ufunc's fuseloop equivalent on the device."""
    if not all(_operand_ok(x) for x in inputs):
        return NotImplemented  # (another library's array: let it try)
    name = ufunc.__name__
    if method == "__call__":
        return _call(ufunc, inputs, kwargs)
    if method == "reduce":
        return _reduce(ufunc, inputs[0], kwargs)
    if method == "accumulate":
        return _accumulate(ufunc, inputs[0], kwargs)
    if method == "outer":
        return _outer(ufunc, inputs, kwargs)
    if method == "at":
        return _at(ufunc, inputs, kwargs)
    raise NotImplementedError(f"numpy.{name}.{method} is not supported on fuseloop arrays; "
                              f"{_HOST_HINT}")

# }}}


# {{{ numpy functions (__array_function__)

# numpy's own implementation is right for these: they return host values (shapes,
# dtypes, Python bools) or call the array's methods and fuseloop functions themselves
_NUMPY_IMPLEMENTATION = frozenset({
    "shape", "ndim", "size", "result_type", "can_cast", "min_scalar_type", "iscomplexobj",
    "isrealobj", "allclose", "array_equal", "array_equiv",
    # (numpy calls the methods, which take out= and where=)
    "sum", "prod", "max", "min", "amax", "amin", "mean", "var", "std", "any", "all",
    "argmax", "argmin",
})
# numpy submodule -> the fuseloop namespace holding its equivalents
_SUBMODULES = {"numpy": "", "numpy.linalg": "linalg", "numpy.fft": "fft"}
_table: dict[tuple[str, str], Any] = {}


def _lookup(func: Any) -> Any:
    """The fuseloop callable for the numpy function ``func`` (None: none)."""
    module, name = getattr(func, "__module__", ""), getattr(func, "__name__", "")
    key = (module, name)
    if key in _table:
        return _table[key]
    where = _SUBMODULES.get(module)
    target: Any = None
    if module == "numpy" and name in _NUMPY_IMPLEMENTATION:
        target = func._implementation
    elif module == "numpy" and name == "where":
        target = _where
    elif module == "numpy" and name == "copy":
        target = _copy
    elif where is not None:
        space = _fl() if where == "" else _fl_name(where)
        if space is not None and not name.startswith("_"):
            # (getattr, not dir(): fl.linalg loads its factorisations on first access)
            found = _fl_name(name) if where == "" else getattr(space, name, None)
            target = found if callable(found) and not isinstance(found, type) else None
    _table[key] = target
    return target


def _where(condition: Any, *xy: Any) -> Any:
    fl = _fl()
    return fl.where(condition, *xy) if xy else fl.nonzero(condition)


def _copy(a: Any, order: str = "K", subok: bool = False) -> Any:
    return a.copy()


_signatures: dict[Any, inspect.Signature | None] = {}


def _unsupported_kwargs(f: Any, kwargs: dict) -> list[str]:
    if f not in _signatures:
        try:
            _signatures[f] = inspect.signature(f)
        except (TypeError, ValueError):
            _signatures[f] = None
    sig = _signatures[f]
    if sig is None:
        return []
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    return [k for k in kwargs if k not in params or params[k].kind is
            inspect.Parameter.POSITIONAL_ONLY]


def array_function(self: Array, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
    """numpy's ``__array_function__``: fuseloop's function of the same name."""
    from .array import Array

    if not all(issubclass(t, Array | np.ndarray) for t in types):
        return NotImplemented
    f = _lookup(func)
    module, name = getattr(func, "__module__", "numpy"), getattr(func, "__name__", str(func))
    if f is None:
        raise NoEquivalentError(f"fuseloop has no equivalent of {module}.{name}; "
                                f"{_HOST_HINT}")
    bad = _unsupported_kwargs(f, kwargs)
    if bad:
        # numpy's defaults given explicitly (out=None) change nothing: dropped
        if any(kwargs[k] is not None for k in bad):
            raise NoEquivalentError(
                f"{module}.{name} on fuseloop arrays: fuseloop's {name} does not support "
                f"the argument(s) {', '.join(bad)}; {_HOST_HINT}")
        kwargs = {k: v for k, v in kwargs.items() if k not in bad}
    return f(*args, **kwargs)

# }}}


# {{{ DLPack

_DL_CPU, _DL_OPENCL = 1, 4


def dlpack_device(self: Array) -> tuple[int, int]:
    """``__dlpack_device__``: (kDLCPU, 0) for a CPU OpenCL device (its buffers are host
    memory), else (kDLOpenCL, the device's index)."""
    if str(self.device.type).upper() == "CPU":
        return (_DL_CPU, 0)
    return (_DL_OPENCL, self.device.index)


def dlpack(self: Array, stream: Any = None, max_version: Any = None, dl_device: Any = None,
           copy: bool | None = None) -> Any:
    """``__dlpack__``: a DLPack capsule of a host copy of the values.

    fuseloop cannot hand out a host pointer into a device buffer safely (OpenCL maps
    end on unmap, not when a consumer lets go), so the export is always a copy:
    ``copy=False`` raises ``BufferError``, as the DLPack standard asks.
    """
    if copy is False:
        raise BufferError(
            f"a fuseloop array on {self.device.name} lives in OpenCL memory: DLPack can "
            "only export a host copy of it (copy=None or copy=True)")
    if dl_device is not None and dl_device[0] != _DL_CPU:
        raise BufferError(f"fuseloop exports DLPack only to the host (kDLCPU), not to "
                          f"device {dl_device}")
    if dl_device is None and dlpack_device(self)[0] != _DL_CPU:
        # (the array says kDLOpenCL: a consumer not asking for the host would get host
        # memory it did not expect)
        raise BufferError(
            f"a fuseloop array on {self.device.name} is in OpenCL memory, which DLPack "
            "consumers cannot read in place; ask for a host copy with "
            "np.from_dlpack(x, device='cpu') (dl_device=(1, 0)), or use x.get()")
    host = self.get()
    kwargs: dict[str, Any] = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    return host.__dlpack__(**kwargs)


def from_dlpack(obj: Any, /, *, device: Any = None, copy: bool | None = None) -> Array:
    """An array from any DLPack producer (numpy, torch, ...): its values are uploaded to
    ``device`` (default: the current device), so ``copy=False`` raises ``BufferError``.
    A fuseloop array is returned as is (or moved to ``device``)."""
    fl = _fl()
    if isinstance(obj, fl.Array):
        if copy:
            return fl.asarray(obj, device=device).copy()
        return fl.asarray(obj, device=device)
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"fl.from_dlpack takes an object with __dlpack__, not "
                        f"{type(obj).__name__}")
    where = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
    if where[0] == 2:  # kDLCUDA: CUDA memory, shared on a CUDA device
        from .creation import _device
        from .cuda_interop import from_dlpack as from_cuda_dlpack

        return from_cuda_dlpack(obj, _device(device), copy)
    if copy is False:
        raise BufferError("fl.from_dlpack copies the producer's values to the device: "
                          "copy=False cannot be honoured")
    host = np.from_dlpack(obj)
    return fl.asarray(host, device=device)

# }}}


# {{{ pyopencl arrays without a copy

# a Storage over a pyopencl array's buffer -> that array, kept alive while it lives
_owners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def to_pyopencl(x: Array) -> Any:
    """A ``pyopencl.array.Array`` over ``x``'s own buffer, on the device's queue: no copy.

    ``x`` is evaluated first; a strided view is first copied into a buffer of its own.
    Both arrays then share memory: writes through either are seen by the other (in
    order on the device's queue; other queues must synchronise, e.g. ``queue.finish()``).
    The buffer stays alive while either array does.
    """
    import pyopencl.array as cla

    from .array import Array

    if not isinstance(x, Array):
        raise TypeError(f"fl.to_pyopencl takes a fuseloop array, not {type(x).__name__}")
    if x.device.backend != "opencl":
        raise DeviceError(f"fl.to_pyopencl needs an OpenCL device, not {x.device} "
                          f"({x.device.backend})")
    from .expr.nodes import SHARED_WITH_PYOPENCL

    x.eval()
    if not x.is_contiguous:
        x = x.copy().eval()
    storage = x._storage
    assert storage is not None
    SHARED_WITH_PYOPENCL.add(storage)
    queue = x.device.queue  # (enqueues deferred launches: pyopencl's commands follow them)
    return cla.Array(queue, x.shape, x.dtype, data=storage.buffer)


def from_pyopencl(src: Any, device: Any = None, copy: bool | None = None) -> Array:
    """A fuseloop array over the buffer of the ``pyopencl.array.Array`` ``src``.

    No copy when ``src`` is C-contiguous and lives in the device's context (``src`` is
    kept alive while the result is); writes through either array are seen by the
    other.  Otherwise (or with ``copy=True``) the values are copied
    (:func:`fuseloop.asarray`); ``copy=False`` then raises ``BufferError``.
    """
    from .array import Array
    from .creation import _device, _is_pyopencl_array, asarray
    from .dtypes import as_dtype
    from .expr.nodes import SHARED_WITH_PYOPENCL, Storage

    if not _is_pyopencl_array(src):
        raise TypeError(f"fl.from_pyopencl takes a pyopencl.array.Array, not "
                        f"{type(src).__name__}")
    dev = _device(device)
    why = ("it is copied: copy=True" if copy else
           f"its device is not OpenCL ({dev.backend})" if dev.backend != "opencl" else
           "it is in another context than the device's" if src.context != dev.context else
           "it is not C-contiguous" if not src.flags.c_contiguous else
           "it is empty" if not src.size else "")
    buffer = None
    if not why:
        buffer = src.base_data
        if src.offset:
            try:
                buffer = buffer.get_sub_region(src.offset, src.nbytes)
            except Exception as exc:  # (sub-buffers must be aligned: the driver says)
                why = f"its offset {src.offset} cannot start an OpenCL sub-buffer ({exc})"
    if why:
        if copy is False:
            raise BufferError(f"fl.from_pyopencl cannot share this array's buffer: {why}")
        return asarray(src, device=dev)
    # the writes already enqueued for src are complete before fuseloop's queue reads it
    if src.queue is not None and src.queue != dev.queue:
        src.queue.finish()
    elif src.events:
        for e in src.events:
            e.wait()
    dt = as_dtype(src.dtype)
    storage = Storage(buffer, src.nbytes, dev)
    _owners[storage] = src
    SHARED_WITH_PYOPENCL.add(storage)
    return Array._concrete(storage, dt, tuple(int(n) for n in src.shape))

# }}}
