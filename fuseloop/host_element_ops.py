"""Operators of two 0-d values of :mod:`fuseloop.host_eager` (a loop's elements: nussinov's
``table[i, k] + table[k + 1, j]`` and the comparison of Python's ``max``, trisolv's
``(b[i] - s) / L[i, i]``), computed by an entry kept per operation and kinds of operand.

:func:`fuseloop.host_eager.binary` takes every operand through its general steps
(arrays, broadcasts, numpy scalars, conversions asked per call): for two elements those
steps cost more than the operation.  Here an entry of :data:`_entries`, made once from
``host_eager._ops``' entry, holds what a 0-d operation needs: its scalar function and
the conversions of each operand to the loop's dtypes.  The result is a value held here
(a Scalar node), as ``binary`` makes it; anything else returns None to ``binary``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import caches as _caches
from .array import Array, _weak_scalar
from .expr.nodes import _EMPTY, Scalar
from .host_eager import _F64, _NUMPY_SCALARS, HostArray, _op_entry, _ops, _runtimes, _sync
from .host_path import scalar_apply
from .stats import tallies as _tallies

_new = object.__new__
_count_operation = _tallies["host_operations"].__next__  # (stats.tally, bound)

# (op, kind of a, kind of b) -> (scalar function, a's conversion to the loop's dtype or
# None, b's or None, whether numpy's error state is switched off around it, the result's
# dtype), or False: not computed here (kinds: a dtype, or ``float``/``int`` for Python's)
_entries: dict[tuple, Any] = {}


def _conversion(kind: Any, dtype: np.dtype) -> Any:
    """An operand of ``kind`` converted to the loop's ``dtype`` (as host_eager.binary
    converts it), or None where it is used as it is."""
    if kind is dtype or (kind is float and dtype is _F64):  # (host_eager._F64's rule)
        return None
    if kind is float or kind is int:
        def weak(v: Any) -> Any:
            return _weak_scalar(v, dtype)
        return weak
    return dtype.type


def _entry(key: tuple) -> Any:
    """:data:`_entries`' entry for ``key``, made from host_eager's entry for it."""
    hit = _ops.get(key)
    if hit is None:
        hit = _ops[key] = _op_entry(key[0], key[1:])
    entry: Any = False
    if hit is not False and hit[2] is not None:  # (a scalar function: no complex, no bool)
        loop, pyfn = hit[0], hit[5]
        entry = (hit[2] if pyfn is None else pyfn, _conversion(key[1], loop[0]),
                 _conversion(key[2], loop[1]), bool(hit[4]) and pyfn is None, loop[-1])
    _entries[key] = entry
    return entry


def binary0(op: str, a: Any, b: Any, ta: type, tb: type) -> Array | None:
    """``a op b`` for 0-d ``a`` and ``b`` (types ``ta``, ``tb``), one a HostArray, each
    an element of a buffer or a value held here (HostArray, or an array of a Scalar
    node), a Python float or int or a numpy scalar: a value held here; None:
    host_eager.binary's general steps.  The caller has checked the host path's
    settings."""
    device: Any = None
    if ta is HostArray:
        if a._shape:
            return None
        ka, va, device = a.dtype, a._np, a.device
    elif ta is float or ta is int:
        ka, va = ta, a
    elif ta is Array and type(node := a._node) is Scalar:
        ka, va, device = a.dtype, node.value, a.device
    elif ta in _NUMPY_SCALARS:
        ka, va = a.dtype, a
    else:
        return None
    if tb is HostArray:
        if b._shape or (device is not None and b.device is not device):
            return None
        kb, vb, device = b.dtype, b._np, b.device
    elif tb is float or tb is int:
        kb, vb = tb, b
    elif tb is Array and type(node := b._node) is Scalar \
            and (device is None or b.device is device):
        kb, vb, device = b.dtype, node.value, b.device
    elif tb in _NUMPY_SCALARS:
        kb, vb = b.dtype, b
    else:
        return None
    key = (op, ka, kb)
    entry = _entries.get(key)
    if entry is None:
        entry = _entry(key)
    if not entry:
        return None
    fn, to_a, to_b, quiet, dtype = entry
    if type(va) is np.ndarray or type(vb) is np.ndarray:  # (a buffer's element)
        rt = _runtimes.get(device)  # (_sync, its commonest case inline: nothing deferred)
        if rt is None or rt.deferred:
            _sync(device)
        else:
            rt.finish()
        if type(va) is np.ndarray:
            va = va[0]  # (read once the kernels writing it are done)
        if type(vb) is np.ndarray:
            vb = vb[0]
    out = scalar_apply(fn, to_a, to_b, quiet, va, vb)
    if out is None:
        return None  # (the general steps compute it, or raise numpy's error)
    if type(out) is not dtype.type:  # (a Python float, or numpy's scalar of another type)
        out = dtype.type(out)
    _count_operation()
    node = _new(Scalar)  # (host_eager._scalar_array's fields, set here)
    node.value, node.dtype, node.shape, node.storages = out, dtype, (), _EMPTY
    held: Array = _new(Array)
    held._storage, held._node, held._shape, held.device, held.dtype = None, node, (), device, dtype
    return held


_caches.register("host_element_ops.entries", _entries.clear, lambda: len(_entries),
                 why="one per operation and kinds of its two operands")
