"""Iteration over an array (``for b in data``): a 1-D array's elements as values held here.

numpy yields a 1-D array's elements one at a time and CuPy yields 0-d device arrays.
As 0-d views of the buffer, every element a loop tests (``if b & 1:``, crc16's bit
tests) cost a kernel launch and a read back on a GPU.  Here a 1-D array's elements are
read to the host a block at a time (one read each, blocks doubling from
``FIRST_BLOCK`` to ``MOST_BLOCK`` elements, so a loop that stops early reads little)
and yielded as 0-d arrays holding their values (Scalar nodes: no buffer).  Operators on
such values and Python scalars are numpy scalars' work on the host, on any device
(:func:`fuseloop.host_ops.binary0`), and their truth is read from the node.

Coherence: a block holds what the array held when it was read.  A lazy copy of the
block's elements (the watch) is one of the buffer's readers, so anything that writes
into those elements computes it first (:class:`fuseloop.expr.readers.Storage`); when
it has been computed, the next ``FIRST_BLOCK`` elements are read one at a time, each
just before its turn, then blocks again: numpy's next element shows the write.  A 0-d
array raises numpy's TypeError; a larger one yields its views ``a[i]``, as do other
array types (split arrays, HostArrays), traced functions and captured or recorded
runs (no read back there).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import evaluate as _evaluate
from . import trace_hooks as _trace
from .array import Array
from .host_held import held

FIRST_BLOCK = 128
MOST_BLOCK = 1 << 16



def iterate(a: Array) -> Iterator[Any]:
    """``iter(a)``: numpy's order; 1-D arrays' elements as values held on the host."""
    shape = a.shape
    if not shape:
        raise TypeError(f"iteration over a 0-d array (shape {shape}, dtype {a.dtype})")
    if len(shape) > 1 or type(a) is not Array or _trace.trace_checks \
            or _evaluate.capturing_threads[0] or _evaluate.recording_threads[0]:
        return (a[i] for i in range(shape[0]))
    return _elements(a, shape[0])


def _elements(a: Array, n: int) -> Iterator[Array]:
    device, dtype = a.device, a.dtype
    start, block, single = 0, FIRST_BLOCK, 0
    while start < n:
        if single:  # (after a write: each element read just before its turn, no watch)
            single -= 1
            value: Any = a[start].get()[()]
            yield _held(value, dtype, device)
            start += 1
            continue
        stop = min(n, start + block)
        view = a[start:stop]
        # (the watch is entered among the buffer's readers before the read: a write
        # after the read computes it, and we see that)
        watch = Array._lazy(view._node, device)
        values = view.get()
        k = start
        while k < stop:
            if watch._storage is not None:  # (written since the read: read the rest)
                break
            yield _held(values[k - start], dtype, device)
            k += 1
        # (a loop writing into the array as it goes would compute a watch at each
        # write: the next FIRST_BLOCK elements are read one at a time instead)
        single, block = (FIRST_BLOCK, FIRST_BLOCK) if k < stop else \
            (0, min(2 * block, MOST_BLOCK))
        start = k


def _held(value: np.generic, dtype: np.dtype, device: Any) -> Array:
    """A 0-d array holding ``value`` (:class:`fuseloop.host_held.Held`: its operators
    with Python scalars and other such values are numpy scalars' at once)."""
    return held(value, dtype, device)


# (Array's method, set here as host_products sets HostArray's: this module is imported
# by the package, after fuseloop.array)
setattr(Array, "__iter__", iterate)  # noqa: B010
