"""Arrays in constant memory: ``fl.constant(array)`` (OpenCL's ``__constant`` space).

A constant array is a copy on the device whose storage is marked ``constant``:
every kernel reading it declares that argument ``__constant`` (its loads, gathers
and user-function pointer arguments alike; the mark is in each leaf's structure
token and in the program's entries, so it is part of the kernel cache key).  GPUs
serve such reads from a small cached memory, worthwhile for a table every work-item
reads (coefficients, a lookup table); its size is limited per device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .array import Array
from .errors import ConstantMemoryError
from .runtime.devices import Device


def constant_array(value: Any, dtype: Any = None, device: Any = None) -> Array:
    """A device copy of ``value`` read from constant memory by every kernel.

    Raises :class:`~fuseloop.errors.ConstantMemoryError` when it is larger than the
    device's constant buffer (``Device.max_constant_buffer_size``).
    """
    from .creation import asarray

    if isinstance(value, Array) and device is None:
        device = value.device
    # (a fresh contiguous copy: the mark belongs to this buffer alone)
    src = asarray(value, dtype=dtype, device=device, copy=True)
    check_size(src.nbytes, src.shape, src.dtype, src.device)
    arr = src.eval()
    if not arr.is_contiguous:
        arr = arr.copy().eval()
    storage = arr._storage
    assert storage is not None
    storage.constant = True
    return Array._concrete(storage, arr.dtype, arr.shape)


def check_size(nbytes: int, shape: tuple[int, ...], dtype: np.dtype, device: Device) -> None:
    """Refuse an array the device cannot hold in constant memory, saying what to do."""
    limit = device.max_constant_buffer_size
    if nbytes > limit:
        raise ConstantMemoryError(
            f"fl.constant: an array of shape {shape} and dtype {dtype} takes {nbytes} bytes, "
            f"more than the constant buffer of {device.name} ({limit} bytes); keep it an "
            "ordinary array (fl.asarray) and, for a user function, declare its parameter "
            "'global const ... *' instead of 'constant ... *'")
