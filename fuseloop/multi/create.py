"""Making split arrays: creation functions called in a ``with fl.device([...])`` block.

Filled and uninitialised arrays are allocated per part (an array too large for any
one device fits when its parts do); host data is uploaded row block by row block;
lazy generators (``arange``, ``linspace``, ``fl.random``) are made per part as the
rows of the whole generator, so nothing is allocated and the values are those one
device would give.  0-d arrays have nothing to split: they are made on the first device.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ..array import Array
from .array import MultiArray, is_multi
from .devset import DeviceSet

_FILLED = ("empty", "full", "zeros", "ones")
_LAZY = ("arange", "linspace", "_draw")


def create(func: Callable[..., Any], dset: DeviceSet, args: tuple, kwargs: dict) -> Any:
    """``func(*args, **kwargs)`` (a creation function called without a device) as an
    array split over ``dset``."""
    name = func.__name__
    bound = inspect.signature(func).bind(*args, **kwargs)
    params = dict(bound.arguments)
    params.pop("device", None)
    if name == "asarray":
        return _split_host(params, dset)
    if name in _LAZY:
        whole = func(**params, device=dset.devices[0])
        if whole.ndim == 0:
            return whole  # (0-d: nothing to split, made on the first device)
        bounds = dset.split(whole.shape[0], f"fl.{name.strip('_')}")
        return MultiArray([func(**params, device=d)[lo:hi] for d, lo, hi
                           in zip(dset.devices, bounds, bounds[1:])], bounds, dset)
    if name in _FILLED:
        if name == "full" and np.ndim(params["fill_value"]) != 0:
            host = np.full(params["shape"], params["fill_value"], params.get("dtype"))
            return _split_host({"obj": host}, dset)
        shape = _shape(params.pop("shape"))
        if not shape:
            return func(shape, **params, device=dset.devices[0])
        bounds = dset.split(shape[0], f"fl.{name} of shape {shape}")
        parts: list[Array] = []
        for d, lo, hi in zip(dset.devices, bounds, bounds[1:]):
            parts.append(func((hi - lo, *shape[1:]), **params, device=d))
            params["dtype"] = parts[0].dtype  # (every part of one dtype, whatever the device)
        return MultiArray(parts, bounds, dset)
    raise AssertionError(name)


def _shape(shape: Any) -> tuple[int, ...]:
    from ..creation import _shape as creation_shape

    return creation_shape(shape)


def _split_host(params: dict, dset: DeviceSet) -> Any:
    from ..creation import asarray

    obj, dtype = params["obj"], params.get("dtype")
    if is_multi(obj):
        if obj.device_set.same(dset):
            return obj if dtype is None or np.dtype(dtype) == obj.dtype else obj.astype(dtype)
        obj = obj.get()
    elif isinstance(obj, Array):
        obj = obj.get()
    host = np.asarray(obj, dtype=dtype)
    if host.ndim == 0:  # (a scalar: nothing to split, made on the first device)
        return asarray(host, device=dset.devices[0])
    bounds = dset.split(host.shape[0], f"an array of shape {host.shape}")
    parts = [asarray(host[lo:hi], device=d) for d, lo, hi in zip(dset.devices, bounds, bounds[1:])]
    return MultiArray(parts, bounds, dset)
