"""``fl.__array_namespace_info__()``: the Array API's inspection namespace.

Capabilities, devices and dtypes of fuseloop as the standard asks for them.  The
default floating dtype depends on the device: float64 where it has fp64, else float32.
There is no complex dtype yet, so no "complex floating" default.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import SUPPORTED_DTYPES
from .runtime.devices import Device, devices, find_device, get_device


def _device(device: Any) -> Device:
    return get_device() if device is None else find_device(device)


def default_float(device: Any = None) -> np.dtype:
    """float64 on a device with fp64, else float32 (the default of ``zeros``, ``eye``...)."""
    return np.dtype(np.float64 if _device(device).has_fp64 else np.float32)


class Info:
    """What ``fl.__array_namespace_info__()`` returns."""

    __slots__ = ()

    def capabilities(self) -> dict[str, Any]:
        # boolean masks and nonzero give data-dependent shapes (stream compaction);
        # the number of dimensions has no fixed limit
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": None}

    def default_device(self) -> Device:
        return get_device()

    def devices(self) -> list[Device]:
        """The devices fuseloop can build kernels for."""
        return [d for d in devices() if d.usable]

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        real = default_float(device)
        return {"real floating": real,
                "complex floating": np.dtype(np.complex128 if real == np.float64
                                             else np.complex64),
                "integral": np.dtype(np.int64), "indexing": np.dtype(np.int64)}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype]:
        """The dtypes ``device`` supports (float64 and complex128 only with fp64), of
        ``kind`` if given."""
        from .dtype_api import isdtype

        fp64 = _device(device).has_fp64
        found = {str(d): d for d in SUPPORTED_DTYPES
                 if fp64 or d not in (np.float64, np.complex128)}
        if kind is None:
            return found
        return {name: d for name, d in found.items() if isdtype(d, kind)}


def __array_namespace_info__() -> Info:
    """The Array API inspection namespace of fuseloop."""
    return Info()
