"""The index check of a scatter whose indices are a computed device array.

A scatter must not write before it fails, so its device indices are checked by a
kernel of their own first.  That kernel used to gather the wrapped positions from
``arange(n)`` into a new int64 array (a checked gather: 8 bytes read, 8 written and
8 read again by the scatter per index, with an error flag read back).  Here it reads
each index once to find whether any is out of range (one evaluation for all the index
arrays of a key, one value read back), and the scatter's kernel wraps the
negative ones itself, reading the indices it would read anyway.  Only when a value is
out of range are the indices read to the host, for numpy's message naming the first.
Not while ``fl.fuse`` traces: the answer read back would be the traced call's, so
the checked gather (whose flag each replay reads) is used then.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array import Array
from ..expr.nodes import Node

_INT64 = np.dtype(np.int64)


def check_in_range(indices: list[tuple[Array, int, int]]) -> list[Array]:
    """Raise numpy's :class:`~fuseloop.errors.IndexOutOfBoundsError` (naming the
    first value out of range) unless every value of each ``(k, n, src)`` (a computed
    integer device array ``k`` indexing source axis ``src`` of length ``n``) is in
    ``[-n, n)``; return each ``k`` as int64 (lazy).  One evaluation for all of them,
    one value read back."""
    from .indexing import _host_wrapped
    from .reductions import any as _any

    # (int64 first, as the gathers wrap: uint64 values above its range are negative)
    wide = [k.astype(_INT64) for k, _, _ in indices]
    outside: Any = None
    for w, (_, n, _) in zip(wide, indices):
        found = _any((w < -n) | (w >= n))
        outside = found if outside is None else outside | found
    if bool(outside):
        for k, n, src in indices:
            _host_wrapped(k.get(), n, src)  # (raises, naming the first)
    return wide


def wrapped_in_range(indices: list[tuple[Array, int, int]]) -> list[Node]:
    """Each ``(k, n, src)`` of :func:`check_in_range`, checked, as ``k`` wrapped into
    ``[0, n)``: an int64 expression (computed by its reader)."""
    from .. import ufuncs

    wide = check_in_range(indices)
    return [ufuncs.where(w < 0, w + n, w)._node for w, (_, n, _) in zip(wide, indices)]
