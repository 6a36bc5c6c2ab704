"""Host copies of small integer arrays whose elements Python reads one at a time.

A loop over CSR rows (``A_col[A_row[i]:A_row[i + 1]]``, NPBench's spmv) reads two
index elements to Python per slice: on a GPU each is a blocking read of 4 bytes, and
the gather ``x[cols]`` reads its error flag back as well.  Rule: once the host has
read two elements of a concrete integer buffer of at most ``MIRROR_MAX_BYTES``, the
whole buffer is read once and kept here (a *mirror*); later element reads are served
from it, and a gather whose indices are a contiguous view of it is checked here (its
values' range), so its kernel neither checks nor reads a flag back.

Coherence is :mod:`fuseloop.iteration`'s: a lazy copy of the whole buffer (the
watch) is one of the buffer's readers, so anything that writes into the buffer
computes it first; a computed watch drops the mirror.  A buffer written after being
mirrored must be read ``2 ** (k + 1)`` times (``k``: the writes seen so far, up to
``BACKOFF_MAX``) before it is mirrored again, so a loop that writes and reads one
array alternately does not copy it at every step.  The mirrors' watches hold their
buffers: at most ``MIRRORS_MAX`` mirrors are kept, the least recently made dropped
first, and a mirror whose buffer nothing else holds is dropped when another is made.
Not used where the host path reads buffers in place (``host_path.scalar``), nor
while tracing, capturing or recording.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import caches as _caches
from .. import evaluate as _evaluate
from .. import host_path as _host
from ..expr.nodes import Leaf, Storage
from ..host_path import host_device
from ..host_path import scalar as _host_scalar
from ..runtime.transfer import read

MIRROR_MAX_BYTES = 1 << 20
MIRRORS_MAX = 16
BACKOFF_MAX = 10


class _Mirror:
    __slots__ = ("host", "watch")

    def __init__(self, host: np.ndarray, watch: Any) -> None:
        self.host = host  # the buffer's elements when read, 1-D
        self.watch = watch  # a lazy copy of the buffer: computed once it is written


# id(storage) -> its mirror (insertion order: oldest first)
_mirrors: dict[int, _Mirror] = {}
# id(storage) -> [element reads since the last write seen, writes seen]; kept for
# buffers not mirrored yet (dropped with the mirrors' table when it is cleared)
_reads: dict[int, list[int]] = {}
READS_MAX = 4096

# references to a buffer that its mirror's watch makes (the leaf's storage, operands
# and storages), the table's look-up and getrefcount's argument
_OWN_REFS = 3 + 2


def _usable(leaf: Any, device: Any) -> bool:
    return (type(leaf) is Leaf and leaf.dtype.kind in "iu"
            and 0 < leaf.storage.nbytes <= MIRROR_MAX_BYTES
            and not (_host.HOST_MAX_WORK and host_device(device))
            and not _evaluate.capturing_threads[0] and not _evaluate.recording_threads[0])


def _valid(storage: Storage) -> _Mirror | None:
    """The mirror of ``storage`` if it still holds the buffer's contents."""
    m = _mirrors.get(id(storage))
    if m is None:
        return None
    if m.watch._storage is None:  # (then it holds the buffer: the id is this one's)
        return m
    del _mirrors[id(storage)]  # written: mirrored again after more reads
    seen = _reads.setdefault(id(storage), [0, 0])
    seen[0], seen[1] = 0, min(seen[1] + 1, BACKOFF_MAX)
    return None


def scalar(array: Any) -> Any:
    """``host_path.scalar``'s value of the size-1 ``array``, else :func:`element`'s."""
    got = _host_scalar(array)
    return got if got is not None else element(array)


def element(array: Any) -> Any:
    """The value of the size-1 concrete integer ``array`` as a Python scalar, from its
    buffer's mirror (made here on the read that earns one, see above), or None."""
    leaf = array._node
    if array._storage is None or not _usable(leaf, array.device):
        return None
    storage = leaf.storage
    m = _valid(storage)
    if m is None:
        m = _mirror_after_reads(leaf, array.device)
        if m is None:
            return None
    return m.host[leaf.offset].item()


def values(array: Any) -> np.ndarray | None:
    """The elements of the concrete contiguous 1-D integer view ``array`` (a gather's
    indices) from its buffer's mirror (a view of it: not to be written), or None."""
    leaf = array._node
    if array._storage is None or type(leaf) is not Leaf or len(leaf.shape) != 1 \
            or leaf.strides not in (None, (1,)) or not _usable(leaf, array.device):
        return None
    # (a gather of device indices reads its error flag back: counted as an element read)
    m = _valid(leaf.storage) or _mirror_after_reads(leaf, array.device)
    return None if m is None else m.host[leaf.offset:leaf.offset + leaf.shape[0]]


def _mirror_after_reads(leaf: Leaf, device: Any) -> _Mirror | None:
    storage = leaf.storage
    key = id(storage)
    seen = _reads.get(key)
    if seen is None:
        if len(_reads) >= READS_MAX:
            _reads.clear()
        seen = _reads[key] = [0, 0]
    seen[0] += 1
    if seen[0] < 2 << seen[1]:
        return None
    from ..array import Array

    n = storage.nbytes // leaf.dtype.itemsize
    # (the watch first: a write after the read below computes it, and is seen)
    watch = Array._lazy(Leaf(storage, leaf.dtype, (n,)), device)
    host = np.empty(n, leaf.dtype)
    read(host, storage.buffer, device)
    _prune()
    m = _mirrors[key] = _Mirror(host, watch)
    return m


def _prune() -> None:
    """Drop the mirrors of buffers nothing else holds, then the oldest beyond the bound."""
    for key, m in list(_mirrors.items()):
        if sys.getrefcount(m.watch._node.storage) <= _OWN_REFS:
            del _mirrors[key]
    while len(_mirrors) >= MIRRORS_MAX:
        del _mirrors[next(iter(_mirrors))]


def clear() -> None:
    _mirrors.clear()
    _reads.clear()


_caches.register("ops.host_mirror", clear, lambda: len(_mirrors) + len(_reads),
                 MIRRORS_MAX + READS_MAX)
