"""Host copies of small integer arrays whose elements Python reads one at a time.

A loop over CSR rows (``A_col[A_row[i]:A_row[i + 1]]``, NPBench's spmv) reads two
index elements to Python per slice: on a GPU each is a blocking read of 4 bytes, and
the gather ``x[cols]`` reads its error flag back as well.  Rule: once the host has
read two elements of a concrete integer buffer of at most ``MIRROR_MAX_BYTES``, the
whole buffer is read once and kept here (a *mirror*); later element reads, and 0-d
integer expressions of its elements (Python's ``max`` of two: NPBench's nussinov),
are served from it, and a gather whose indices are a contiguous view of it is checked here (its
values' range), so its kernel neither checks nor reads a flag back.

Coherence is :mod:`fuseloop.iteration`'s: a lazy copy of the whole buffer (the
watch) is one of the buffer's readers, so anything that writes into the buffer
computes it first; a computed watch drops the mirror.  A mirror that served
``PAID_OFF`` reads before the write is made again at the next read; otherwise the
reads that earn one double (up to ``2 ** BACKOFF_MAX``), so a loop that writes and
reads one array alternately does not copy it at every step.  The mirrors' watches
hold their buffers: at most ``MIRRORS_MAX`` mirrors are kept, the least recently made dropped
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
from ..expr.nodes import Apply, Leaf, Literal, Scalar, Storage
from ..host_path import host_device
from ..host_path import scalar as _host_scalar
from ..runtime.transfer import read

MIRROR_MAX_BYTES = 1 << 20
MIRRORS_MAX = 16
BACKOFF_MAX = 10


class _Mirror:
    __slots__ = ("host", "served", "watch")

    def __init__(self, host: np.ndarray, watch: Any) -> None:
        self.host = host  # the buffer's elements when read, 1-D
        self.watch = watch  # a lazy copy of the buffer: computed once it is written
        self.served = 0  # reads served from it


# id(storage) -> its mirror (insertion order: oldest first)
_mirrors: dict[int, _Mirror] = {}
# id(storage) -> [reads since the last write seen, reads that earn a mirror]; kept for
# buffers not mirrored now (dropped when READS_MAX is reached)
_reads: dict[int, list[int]] = {}
READS_MAX = 4096
# a mirror that served this many reads before a write is made again at the next read
PAID_OFF = 4

# references to a buffer that its mirror's watch makes (the leaf's storage, operands
# and storages) and _prune's look-up (getrefcount's argument and the attribute's value;
# tests/test_host_mirror.py sees a dropped buffer's mirror go)
_OWN_REFS = 3 + 2

# operations computed here on numpy scalars of their loop's dtypes (numpy's scalar
# operators, as host_path's; integer ones that cannot raise or divide)
_OPS = frozenset(("add", "subtract", "multiply", "bitwise_and", "bitwise_or", "bitwise_xor",
                  "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                  "negative", "absolute", "invert"))


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
        m.served += 1
        return m
    _mirrors.pop(id(storage), None)  # written: mirrored again at once if it paid off
    _reads[id(storage)] = [0, 1 if m.served >= PAID_OFF else
                           min(2 * _reads.get(id(storage), (0, 2))[1], 1 << BACKOFF_MAX)]
    return None


def scalar(array: Any) -> Any:
    """``host_path.scalar``'s value of the size-1 ``array``, else one from mirrors
    (:func:`element`, :func:`expression`), else None."""
    got = _host_scalar(array)
    if got is not None:
        return got
    return element(array) if array._storage is not None else expression(array)


def element(array: Any) -> Any:
    """The value of the size-1 concrete integer ``array`` as a Python scalar, from its
    buffer's mirror (made here on the read that earns one, see above), or None."""
    leaf = array._node
    if not _usable(leaf, array.device):
        return None
    m = _valid(leaf.storage) or _mirror_after_reads(leaf, array.device)
    if m is None or m.host.dtype != leaf.dtype:
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
    if m is None or m.host.dtype != leaf.dtype:
        return None
    return m.host[leaf.offset:leaf.offset + leaf.shape[0]]


def expression(array: Any) -> Any:
    """The value of the lazy 0-d elementwise integer ``array`` whose leaves are elements
    of mirrored buffers (``bool(t[i, k] + t[k + 1, j] > t[i, j])``, Python's ``max`` of
    two elements in NPBench's nussinov), computed here; None when it is not (each
    buffer's read then counts towards its mirror)."""
    node = array._node
    if type(node) is not Apply or node.shape or node.fancy or not node.storages \
            or _host._QUIET is None:
        return None
    device = array.device
    leaves: list[Leaf] = []
    if not _leaves(node, leaves, set()):
        return None
    mirrors = {}
    for leaf in leaves:
        storage = leaf.storage
        if id(storage) not in mirrors:
            if not _usable(leaf, device):
                return None
            mirrors[id(storage)] = _valid(storage) or _mirror_after_reads(leaf, device)
    if not all(mirrors.values()):
        return None
    token = _host._errors.set(_host._QUIET)  # (wrapping integers, as kernels do)
    try:
        return _value(node, mirrors).item()
    except _Reinterpreted:
        return None
    finally:
        _host._errors.reset(token)


def _leaves(node: Any, out: list[Leaf], seen: set[int]) -> bool:
    """Collect the 0-d leaves of the 0-d integer operations ``node``; False when it
    holds anything else (a literal and a scalar argument are read as they are)."""
    if id(node) in seen:
        return True
    seen.add(id(node))
    cls = type(node)
    if cls is Leaf:
        out.append(node)
        return not node.shape
    if cls is Scalar or cls is Literal:
        return True
    return cls is Apply and node.op in _OPS and not node.shape and all(
        c in "bBhHiIlLqQ?" for c in node.loop_key) and \
        _host.scalar_fn(node.op, node.loop_key) is not None and all(
            _leaves(a, out, seen) for a in node.args)


def _value(node: Any, mirrors: dict[int, Any]) -> Any:
    cls = type(node)
    if cls is Leaf:
        host = mirrors[id(node.storage)].host
        if host.dtype != node.dtype:
            raise _Reinterpreted
        return host[node.offset]
    if cls is not Apply:
        return node.value
    loop = node.loop
    args = [v if (v := _value(a, mirrors)).dtype == dt else dt.type(v)
            for a, dt in zip(node.args, loop)]
    out = _host.scalar_fn(node.op, node.loop_key)(*args)
    return out if out.dtype == loop[-1] else loop[-1].type(out)


class _Reinterpreted(Exception):
    """A leaf reads its buffer as another dtype than its mirror holds."""


def _mirror_after_reads(leaf: Leaf, device: Any) -> _Mirror | None:
    storage = leaf.storage
    key = id(storage)
    seen = _reads.get(key)
    if seen is None:
        if len(_reads) >= READS_MAX:
            _reads.clear()
        seen = _reads[key] = [0, 2]
    seen[0] += 1
    if seen[0] < seen[1]:
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
            _mirrors.pop(key, None)  # (pop: another thread may have dropped it)
    while len(_mirrors) >= MIRRORS_MAX:
        _mirrors.pop(next(iter(_mirrors)), None)


def clear() -> None:
    _mirrors.clear()
    _reads.clear()


_caches.register("ops.host_mirror", clear, lambda: len(_mirrors) + len(_reads),
                 MIRRORS_MAX + READS_MAX)
