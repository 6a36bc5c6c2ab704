"""The index check of a scatter whose indices are a computed device array.

A scatter must not write before it fails, so its device indices are checked by a
kernel of their own first.  That kernel used to gather the wrapped positions from
``arange(n)`` into a new int64 array (a checked gather: 8 bytes read, 8 written and
8 read again by the scatter per index, with an error flag read back).  Here it reads
each index once to find whether any is out of range (one evaluation for all the index
arrays of a key, one value read back), and the scatter's kernel wraps the
negative ones itself, reading the indices it would read anyway.  Only when a value is
out of range are the indices read to the host, for numpy's message naming the first.

A scatter does not wait for that value before its launch (:func:`gated_in_range`):
the check's answer stays on the device, as a one-element "in range" array that masks
every store of the scatter's kernel (``Target.mask``), and is read back once after
the scatter is enqueued.  Nothing is written when an index is out of range, and the
host waits once per scatter instead of once between the check and the scatter.  Not
on a CPU device (unless :data:`GATE_ON_CPU`): there a round trip costs little, small
checks are computed on the host anyway (:mod:`fuseloop.host_path`), and a wait after
the scatter would keep the host from preparing the next statement while it runs.
Not while ``fl.fuse`` traces: the answer read back would be the traced call's, so
the checked gather (whose flag each replay reads) is used then.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array import Array
from ..expr.nodes import Node

_INT64 = np.dtype(np.int64)
#: whether a CPU device's scatters are gated by their check (see the module; tests)
GATE_ON_CPU = False


def gates(device: Any) -> bool:
    """Whether a scatter on ``device`` masks its stores with its check's device answer
    (:func:`gated_in_range`) rather than waiting for it before its launch."""
    return GATE_ON_CPU or device.type != "cpu"


def _outside(indices: list[tuple[Array, int, int]]) -> tuple[list[Array], Any]:
    """Each ``k`` as int64 (lazy), and whether any value is outside ``[-n, n)``: a lazy
    0-d boolean (one evaluation for all of them)."""
    from .reductions import any as _any

    # (int64 first, as the gathers wrap: uint64 values above its range are negative)
    wide = [k.astype(_INT64) for k, _, _ in indices]
    outside: Any = None
    for w, (_, n, _) in zip(wide, indices):
        found = _any((w < -n) | (w >= n))
        outside = found if outside is None else outside | found
    return wide, outside


def raise_first(indices: list[tuple[Array, int, int]]) -> None:
    """Raise numpy's :class:`~fuseloop.errors.IndexOutOfBoundsError` naming the first
    value out of range (the indices read to the host; called once one is known to be)."""
    from .indexing import _host_wrapped

    for k, n, src in indices:
        _host_wrapped(k.get(), n, src)  # (raises, naming the first)


def check_in_range(indices: list[tuple[Array, int, int]]) -> list[Array]:
    """Raise numpy's :class:`~fuseloop.errors.IndexOutOfBoundsError` (naming the
    first value out of range) unless every value of each ``(k, n, src)`` (a computed
    integer device array ``k`` indexing source axis ``src`` of length ``n``) is in
    ``[-n, n)``; return each ``k`` as int64 (lazy).  One evaluation for all of them,
    one value read back."""
    wide, outside = _outside(indices)
    if bool(outside):
        raise_first(indices)
    return wide


def _wrapped(wide: list[Array], indices: list[tuple[Array, int, int]]) -> list[Node]:
    from .. import ufuncs

    return [ufuncs.where(w < 0, w + n, w)._node for w, (_, n, _) in zip(wide, indices)]


def wrapped_in_range(indices: list[tuple[Array, int, int]]) -> list[Node]:
    """Each ``(k, n, src)`` of :func:`check_in_range`, checked, as ``k`` wrapped into
    ``[0, n)``: an int64 expression (computed by its reader)."""
    return _wrapped(check_in_range(indices), indices)


def gated_in_range(indices: list[tuple[Array, int, int]]) -> tuple[list[Node], Array]:
    """Each ``(k, n, src)`` of :func:`check_in_range` as ``k`` wrapped into ``[0, n)``
    (an int64 expression computed by its reader), unchecked, and ``ok``: a computed
    0-d boolean device array, true when every value is in range (its kernels are
    enqueued, nothing is read back).  The caller writes only where ``ok`` holds and
    then calls :func:`confirm`."""
    wide, outside = _outside(indices)
    ok = (~outside).eval()
    return _wrapped(wide, indices), ok


def confirm(ok: Array, indices: list[tuple[Array, int, int]]) -> None:
    """Read ``ok`` of :func:`gated_in_range` back (waits for the kernels before it);
    raise as :func:`check_in_range` when an index was out of range."""
    if not bool(ok):
        raise_first(indices)
