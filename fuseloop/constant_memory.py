"""Constants: ``fl.constant(scalar)`` literals and arrays in constant memory.

``fl.constant(2.5)`` is a :class:`~fuseloop.array.Constant`, a scalar compiled into the
kernel source; ``fl.constant(array)`` a copy in OpenCL's ``__constant`` space.

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

from .array import Array, Constant, apply_op
from .errors import ConstantMemoryError
from .runtime.devices import Device


def constant(value: Any, dtype: Any = None, device: Any = None) -> Any:
    """A literal compiled into the kernel instead of passed as an argument (promoted
    like the Python scalar it wraps, NEP 50); given an array, a copy of it in constant
    memory on ``device`` (:func:`fuseloop.constant_memory.constant_array`)."""
    if isinstance(value, Array | list | tuple) or (isinstance(value, np.ndarray) and value.ndim):
        return constant_array(value, dtype, device)
    return Constant(value, dtype)


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


def _constant_binary(op: str, reflected: bool) -> Any:
    def method(self: Constant, other: Any) -> Any:
        return apply_op(op, other, self) if reflected else apply_op(op, self, other)
    return method


for _name, _op in [("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                   ("truediv", "true_divide"), ("floordiv", "floor_divide"),
                   ("mod", "remainder"), ("pow", "power")]:
    setattr(Constant, f"__{_name}__", _constant_binary(_op, False))
    setattr(Constant, f"__r{_name}__", _constant_binary(_op, True))
