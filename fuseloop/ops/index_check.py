"""The index check of a scatter whose indices are a computed device array.

A scatter must not write before it fails, so its device indices are checked by a
kernel of their own first.  That kernel used to gather the wrapped positions from
``arange(n)`` into a new int64 array (a checked gather: 8 bytes read, 8 written and
8 read again by the scatter per index, with an error flag read back).  Here it reads
each index once for its minimum and maximum (a reduction of all the index arrays in
one evaluation, two numbers read back each), and the scatter's kernel wraps the
negative ones itself, reading the indices it would read anyway.  Only when a value is
out of range are the indices read to the host, for numpy's message naming the first.
"""

from __future__ import annotations

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
    from ..assignment import compute
    from .indexing import _host_wrapped
    from .reductions import max as _max
    from .reductions import min as _min

    # (int64 first, as the gathers wrap: uint64 values above its range are negative)
    wide = [k.astype(_INT64) for k, _, _ in indices]
    bounds = compute(*[r for w in wide for r in (_min(w), _max(w))])
    for j, (k, n, src) in enumerate(indices):
        lo, hi = int(bounds[2 * j].get()), int(bounds[2 * j + 1].get())
        if lo < -n or hi >= n:
            _host_wrapped(k.get(), n, src)  # (raises, naming the first)
    return [ufuncs.where(w < 0, w + n, w)._node for w, (_, n, _) in zip(wide, indices)]
