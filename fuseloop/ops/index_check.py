"""The index check of a scatter whose indices are a computed device array.

A scatter must not write before it fails, so its device indices are checked by a
kernel of their own first.  That kernel used to gather the wrapped positions from
``arange(n)`` into a new int64 array (a checked gather: 8 bytes read, 8 written and
8 read again by the scatter per index, with an error flag read back).  Here it reads
each index once to find whether any is out of range (one evaluation for all the index
arrays of a key, one value read back), and the scatter's kernel wraps the
negative ones itself, reading the indices it would read anyway.  Only when a value is
out of range are the indices read to the host, for numpy's message naming the first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..array import Array
from ..expr.nodes import Node

_INT64 = np.dtype(np.int64)


def wrapped_in_range(indices: list[tuple[Array, int, int]]) -> list[Node]:
    """For each ``(k, n, src)`` (a computed integer device array ``k`` indexing source
    axis ``src`` of length ``n``): ``k`` wrapped into ``[0, n)`` as an int64 expression
    (computed by its reader), once every value is checked to be in ``[-n, n)``.

    Raises :class:`~fuseloop.errors.IndexOutOfBoundsError` otherwise (numpy's message,
    naming the first value out of range, in numpy's order)."""
    from .. import ufuncs
    from .indexing import _host_wrapped
    from .reductions import any as _any

    # (int64 first, as the gathers wrap: uint64 values above its range are negative)
    wide = [k.astype(_INT64) for k, _, _ in indices]
    outside: Any = None
    for w, (_, n, _) in zip(wide, indices):
        found = _any((w < -n) | (w >= n))
        outside = found if outside is None else outside | found
    if bool(outside):  # (one evaluation, one value read back)
        for k, n, src in indices:
            _host_wrapped(k.get(), n, src)  # (raises, naming the first)
    return [ufuncs.where(w < 0, w + n, w)._node for w, (_, n, _) in zip(wide, indices)]
