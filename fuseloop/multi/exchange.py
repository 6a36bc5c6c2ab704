"""Rows a part does not hold: halo exchange for stencils and shifted slices.

A part needing rows of another part gets them device to device where the backend can
(``Backend.copy_from``: CUDA's peer copy, ordered after the source's work; OpenCL
devices of one context: a copy on the source's queue; a device listed twice: a copy on
its own queue), else through the host (the rows read with ``get()``, then uploaded: the
path for two OpenCL devices each in a context of its own).
On one device listed twice it is still a copy, so the parts keep their own buffers
and the exchange is exercised as on several devices.  :data:`EXCHANGED` counts what
was copied (rows, bytes, copies; ``through_host``: the copies that went through the
host) for tests and benchmarks.

Within one stencil or realignment the copies through the host are batched
(:func:`batch`): every piece's read is enqueued and its device's queue submitted
before the host waits for any, then each destination gets its upload: one wait per
piece, all after every read was under way, rather than a blocking read and a
blocking upload per piece in turn.  A stencil's part gets its halo rows in one buffer
by one upload (:class:`_Arena`), enqueued without a wait on GPUs (:func:`_upload`); the
host's wait for the reads may itself be left to the destination device's deferred work
(:mod:`fuseloop.multi.uploads`), so it comes at the part's launch, not in the stencil.

A stencil does not compute over an extended part and slice the result (the slice
pushed through the whole lazy stencil cost more host time than the stencil itself):
each part's stencil reads *row windows*, its own rows shifted by a row offset along
the split axis (the part itself at offset 0; a lazy concatenation of halo rows and
its own rows otherwise), and applies the boundary rule along the other axes only.
The windows are view nodes and signed concatenations, so a part's run plan is found by
signature; parts after the first of a window structure make again only the first's
nodes that read a window (:mod:`fuseloop.multi.windows`).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

# (fuseloop is loaded before fuseloop.multi: these import at module level, each call
# saves the per-call imports' look-ups, a microsecond apiece on a halo's path)
from .. import caches as _caches
from ..array import Array
from ..backends import backend_for
from ..creation import empty, full
from ..evaluate import allocate, run
from ..expr.nodes import Leaf, c_strides
from ..ops.shape import broadcast_to, concatenate
from ..ops.stencil import _check
from ..runtime.devices import _runtime
from ..runtime.transfer import wait, write
from . import steps as _steps
from . import trace
from . import uploads as _uploads
from .array import MultiArray, staging
from .windows import Window, _row_view, _ShiftedRows, _Templates

#: rows and bytes copied between parts since the process started
EXCHANGED = {"rows": 0, "bytes": 0, "copies": 0, "through_host": 0}


def _transfer(piece: Array, device: Any) -> Array:
    """``piece`` (rows of a part) copied to ``device``."""
    EXCHANGED["rows"] += piece.shape[0] if piece.ndim else 1
    EXCHANGED["bytes"] += piece.nbytes
    EXCHANGED["copies"] += 1
    source = piece.device
    backend = backend_for(device)
    # (asked first: a buffer allocated for a copy the backend then refuses is wasted)
    if source.backend == device.backend and piece.nbytes \
            and backend.copies_between(device, source):
        node = piece._node
        if type(node) is not Leaf or (node.strides is not None
                                      and node.strides != c_strides(node.shape)):
            node = piece.copy().eval()._node  # (one contiguous run of bytes)
        assert type(node) is Leaf
        offset = node.offset * piece.itemsize
        out = allocate(piece.nbytes, device)
        if source is device:
            backend.copy(device, out.buffer, node.storage.buffer, piece.nbytes, offset)
            return Array._concrete(out, piece.dtype, piece.shape)
        if backend.copy_from(device, out.buffer, source, node.storage.buffer, piece.nbytes,
                             offset):
            return Array._concrete(out, piece.dtype, piece.shape)
    EXCHANGED["through_host"] += 1
    open_batch = getattr(_local, "batch", None)
    if open_batch is not None:
        return open_batch.add(piece, device)
    alone = _HostBatch()  # (its read from the piece's place: no copy kernel first)
    got = alone.add(piece, device)
    alone.finish()
    return got


def _contiguous_run(piece: Array) -> tuple[Any, int] | None:
    """(the storage, the byte offset) where ``piece``'s elements lie in C order in one
    buffer (a part's rows: a view at an offset), or None (lazy, or strided)."""
    node = piece._node
    if type(node) is not Leaf or (node.strides is not None
                                  and node.strides != c_strides(node.shape)):
        return None
    return node.storage, node.offset * piece.itemsize


class _Arena:
    """One buffer on a device for the rows a stencil's part gets through the host (its
    halos above and below): read into one host array, uploaded by one write.  The host
    array is a page-locked slot of the device where the backend has one (OpenCL GPUs:
    a write from ordinary memory may hold the host until done), given back once the
    upload completed (:func:`_settle_uploads`)."""

    __slots__ = ("device", "dtype", "host", "row_shape", "rows", "slot", "storage", "used")

    def __init__(self, device: Any, rows: int, row_shape: tuple[int, ...],
                 dtype: np.dtype) -> None:
        self.device, self.rows, self.row_shape, self.dtype = device, rows, row_shape, dtype
        self.host: np.ndarray | None = None  # (both made at the first piece)
        self.storage: Any = None
        self.slot: Any = None
        self.used = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype, device: Any
             ) -> tuple[np.ndarray, Array] | None:
        """(the host rows to read rows of ``shape`` into, their array on the device), or
        None where they do not fit (another device, dtype or row shape, or no room)."""
        n = shape[0] if shape else 0
        if device is not self.device or dtype != self.dtype \
                or shape[1:] != self.row_shape or self.used + n > self.rows:
            return None
        if self.host is None:
            whole = (self.rows, *self.row_shape)
            nbytes = math.prod(whole) * self.dtype.itemsize
            slot, stage = staging(device, nbytes)
            if slot is None or stage is None:
                self.host = np.empty(whole, self.dtype)
            else:
                self.slot, self.host = slot, stage.view(self.dtype).reshape(whole)
            self.storage = allocate(nbytes, device)
        at, self.used = self.used, self.used + n
        row = self.host[0].size
        view = Leaf(self.storage, self.dtype, shape, c_strides(shape), at * row)
        return self.host[at:at + n], Array._lazy(view, device)

    def upload(self) -> None:
        if self.host is not None and self.used:
            _upload(self.storage.buffer, self.host[:self.used], self.device, self.slot)
        elif self.slot is not None:
            self.slot.release()


class _HostBatch:
    """Copies through the host, waited for together (see :func:`batch`)."""
    def __init__(self) -> None:
        # (the read's event, its device, the storage read (kept until read), the host
        # rows, what the read fills (they, or a staging slot's bytes), the slot or None,
        # the device the rows go to)
        self.pending: list[tuple[Any, Any, Any, np.ndarray, np.ndarray, Any, Any]] = []
        self.uploads: list[tuple[np.ndarray, Any]] = []  # (host rows, their storage)
        self.arenas: list[_Arena] = []
        #: where the pieces added now go if they fit (see :meth:`arena`), else a buffer each
        self.current: _Arena | None = None
        #: notes each read for a step plan while a split stencil records one
        self.recorder: _steps.Recorder | None = None

    def arena(self, device: Any, rows: int, row_shape: tuple[int, ...],
              dtype: np.dtype) -> None:
        """Pieces added from now on for ``device`` share one buffer of ``rows`` rows (one
        allocation, one upload) while they fit; :meth:`close_arena` ends it."""
        self.current = _Arena(device, rows, row_shape, dtype)
        self.arenas.append(self.current)

    def close_arena(self) -> None:
        """Pieces added from now on get a buffer each."""
        self.current = None

    def add(self, piece: Array, device: Any) -> Array:
        """``piece`` read without waiting; an array on ``device`` that :meth:`finish`
        fills before anything can read it."""
        # rows of a part are read where they lie (a read from an offset), not copied
        # to a buffer of their own by a kernel first
        run_ = _contiguous_run(piece)
        if run_ is None:
            piece = piece.eval()
            run_ = _contiguous_run(piece)
        if run_ is None:  # (strided: gathered by a kernel)
            run_ = run([piece._node], piece.shape, piece.device)[0], 0
        return self.add_run(run_[0], run_[1], piece.shape, piece.dtype, piece.device, device)

    def add_run(self, storage: Any, offset: int, shape: tuple[int, ...], dtype: np.dtype,
                source: Any, device: Any) -> Array:
        """:meth:`add` of the elements of ``shape`` lying in C order from byte ``offset``
        of ``storage`` on ``source``."""
        current = self.current
        placed = current.take(shape, dtype, device) if current is not None else None
        if self.recorder is not None:
            self.recorder.read(storage, offset, shape, placed is not None, source)
        if placed is None:
            host = np.empty(shape, dtype)
            out = allocate(host.nbytes, device)
            self.uploads.append((host, out))
            got = Array._concrete(out, dtype, shape)
        else:
            host, got = placed
        rt = _runtime(source)
        if rt.deferred:
            rt.flush()
        # (into page-locked memory where the backend has it: a read into ordinary
        # memory may hold the host until done, GPUs, before the next piece's starts)
        slot, stage = staging(source, host.nbytes)
        into = host if stage is None else stage
        event = rt.enqueue_read(rt.queue, into, storage.buffer, None, False, offset)
        if slot is not None:
            slot.event = event
        rt.submit(rt.queue)
        self.pending.append((event, source, storage, host, into, slot, device))
        return got

    def finish(self) -> None:
        """Wait for the reads (all enqueued before the first wait; once per source
        device, for its last read: its queue runs in order), copy the staged
        ones out, then upload: a write per arena and per piece outside one.  Where every
        destination's rows may go up by a write its device holds back until their reads
        are done (:func:`_chains`), nothing waits: see :meth:`_finish_chained`."""
        if self.pending and _chains(self):
            self._finish_chained()
            return
        if self.pending and _uploads.defers(
                [out.device for _, out in self.uploads] + [a.device for a in self.arenas]):
            self._finish_deferred()
            return
        last = {id(source): (event, source) for event, source, *_ in self.pending
                if event is not None}
        for event, source in last.values():
            wait(event, source)
        for _, _, _, host, into, slot, _ in self.pending:
            if into is not host:
                host.reshape(-1).view(np.uint8)[...] = into
            if slot is not None:
                slot.release()
        _settle_uploads()  # (the last batch's: done long since)
        for host, out in self.uploads:
            _upload(out.buffer, host, out.device)
        for arena in self.arenas:
            arena.upload()
        self._clear()

    def _clear(self) -> None:
        self.pending.clear()
        self.uploads.clear()
        self.arenas.clear()
        self.current = None

    def _finish_chained(self) -> None:
        """Each destination's write enqueued at once, held back on its device until the
        reads of this batch have completed (``opencl_staging.uploads_after``: their
        completion callback copies the staged rows into the writes' host rows); the
        kernels enqueued after a write wait there, not the host.  The host rows and
        slots are let go as :func:`_upload`'s are (once their writes completed)."""
        from ..backends.opencl_staging import uploads_after

        _settle_uploads()  # (the last batch's that completed)
        reads = [(event, _copier(host, into, slot, storage, event))
                 for event, _, storage, host, into, slot, _ in self.pending]
        ups = [(host, out.buffer, out.device, None) for host, out in self.uploads]
        for arena in self.arenas:
            if arena.host is not None and arena.used:
                ups.append((arena.host[:arena.used], arena.storage.buffer, arena.device,
                            arena.slot))
            elif arena.slot is not None:
                arena.slot.release()
        self._clear()
        writes = uploads_after([(device, buffer, host) for host, buffer, device, _ in ups],
                               reads)
        for done, (host, _, device, slot) in zip(writes, ups):
            _runtime(device).submit(device.queue)
            if slot is not None:
                slot.event = done  # (not handed out again before the write completed)
            _in_flight().append((done, device, host, slot))


    def _finish_deferred(self) -> None:
        """Each destination's uploads left to its device's deferred work
        (:class:`~fuseloop.multi.uploads.DeferredUpload`): done, its reads waited for,
        when its queue is next used (the part's launch, a read, ``fl.synchronize()``),
        not here."""
        _settle_uploads()  # (the last batch's that completed)
        by_device: dict[int, _uploads.DeferredUpload] = {}
        in_flight = _in_flight()

        def upload_for(device: Any) -> _uploads.DeferredUpload:
            got = by_device.get(id(device))
            if got is None:
                got = by_device[id(device)] = _uploads.DeferredUpload(device, in_flight)
            return got

        for item in self.pending:
            upload_for(item[6]).reads.append(item)
        for host, out in self.uploads:
            upload_for(out.device).writes.append((host, out.buffer, None))
        for arena in self.arenas:
            if arena.host is not None and arena.used:
                upload_for(arena.device).writes.append(
                    (arena.host[:arena.used], arena.storage.buffer, arena.slot))
            elif arena.slot is not None:
                arena.slot.release()
        self._clear()
        for up in by_device.values():
            _runtime(up.device).deferred.append((up, ()))


def _copier(host: np.ndarray, into: np.ndarray, slot: Any, storage: Any, event: Any
            ) -> Callable[[int], None]:
    """What a chained read's completion does (on the callback's thread): its staged
    bytes copied into ``host``, its slot given back; ``storage``, the buffer read, and
    ``event``, the read's, held until then: pyopencl's event of a copy into host memory
    waits for the copy when it is let go, holding the interpreter's lock, so one let go
    while its read queues behind a held-back write (the last step's, whose opening
    callback needs that lock) would never return."""
    def then(status: int) -> None:
        if status >= 0 and into is not host:
            host.reshape(-1).view(np.uint8)[...] = into
        if slot is not None:
            slot.release()
        del keep[:]

    keep = [storage, event]
    return then


def _chains(batch: _HostBatch) -> bool:
    """Whether ``batch``'s uploads may wait for their reads on their devices: chaining
    on (``opencl_staging.chains_for`` of every destination), every read an OpenCL event
    between OpenCL devices (which devices chain: ``FUSELOOP_MULTI_HALO_EVENTS``, see
    ``opencl_staging.HALO_EVENTS``)."""
    from ..backends.opencl_staging import chains_for

    for event, source, *_ in batch.pending:
        if event is None or source.backend != "opencl":
            return False
    devices = [out.device for _, out in batch.uploads] + [a.device for a in batch.arenas]
    return all(d.backend == "opencl" and chains_for(d) for d in devices)



_local = threading.local()  # (.batch: this thread's open batch; .in_flight: see _upload)

def _async_upload(device: Any) -> bool:
    """Whether halo rows go up to ``device`` without the host waiting for the write
    (GPUs: the kernels reading them are enqueued after it on the same queue; the host
    rows are kept until this thread's next batch, which waits for the writes, done long
    since, before letting them go); a CPU device's write blocks (the host path writes
    pooled buffers through mapped memory, outside the queue)."""
    return device.type != "cpu"


def _upload(buffer: Any, host: np.ndarray, device: Any, slot: Any = None) -> None:
    """``host`` written into ``buffer`` on ``device``'s queue (see :func:`_async_upload`);
    ``slot``, the staging slot ``host`` lies in, given back once it is written."""
    if not _async_upload(device):
        write(buffer, host, device)
        if slot is not None:
            slot.release()
        return
    queue = device.queue  # (its deferred launches enqueued first, as write() has them)
    rt = _runtime(device)
    event = rt.enqueue_write(queue, buffer, host, None, False)
    rt.submit(queue)
    if slot is not None:
        slot.event = event  # (not handed out again before the write completed)
    _in_flight().append((event, device, host, slot))


def _in_flight() -> _uploads.InFlight:
    got = getattr(_local, "in_flight", None)
    if got is None:
        got = _local.in_flight = _uploads.InFlight()
    return got


def _settle_uploads() -> None:
    """Let this thread's earlier asynchronous uploads (see :func:`_async_upload`) that
    have completed give their host rows and slots back; one that failed raises its
    error here.  Those still running are kept (a chained write waits on its device for
    reads behind the last step's kernels: the host does not wait for it), up to
    :data:`IN_FLIGHT_MAX`, beyond which the oldest are waited for."""
    pending = getattr(_local, "in_flight", None)
    if pending:
        pending.settle(IN_FLIGHT_MAX)


#: asynchronous uploads whose host rows a thread keeps before it waits for the oldest
IN_FLIGHT_MAX = 64


@contextmanager
def batch() -> Iterator[None]:
    """Within it, this thread's copies through the host are read without waiting and
    uploaded when it ends (one wait per piece, after every read was enqueued).  The
    arrays :func:`rows` returns meanwhile must not be read before it ends (they are read
    by kernels enqueued later)."""
    if getattr(_local, "batch", None) is not None:  # (nested: the outer one finishes)
        yield
        return
    _local.batch = mine = _HostBatch()
    try:
        yield
        mine.finish()
    finally:
        _local.batch = None


def rows(x: Any, lo: int, hi: int, k: int) -> Array:
    """Rows ``lo:hi`` of the split array ``x`` as an array on part ``k``'s device: its
    own rows as a view, the others' copied (a lazy concatenation of the pieces)."""
    device = x.devices[k]
    pieces = []
    for j, (a, b) in enumerate(zip(x.bounds, x.bounds[1:])):
        s, e = max(lo, a), min(hi, b)
        if s >= e:
            continue
        piece = _part_rows(x.parts[j], s - a, e - a)
        pieces.append(piece if j == k else _transfer(piece, device))
    if not pieces:
        return empty((0, *x.shape[1:]), x.dtype, device=device)
    return pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=0)


def _part_rows(part: Array, s: int, e: int) -> Array:
    """Rows ``s:e`` of ``part``: itself, or a view of its buffer made here (indexing's
    checks cost more than the view), or through indexing where it is lazy."""
    if (s, e) == (0, part.shape[0]):
        return part
    if type(part._node) is not Leaf:
        return part[s:e]
    return Array._lazy(_row_view(part, s, e), part.device)


def realign(x: Any, bounds: tuple[int, ...]) -> list[Array]:
    """The parts of ``x`` split at ``bounds`` instead of its own."""
    with batch():
        return [rows(x, lo, hi, k) for k, (lo, hi) in enumerate(itertools.pairwise(bounds))]


def _wrapped_rows(x: Any, lo: int, hi: int, k: int) -> Array:
    """Rows ``lo:hi`` of ``x`` taken modulo its row count (periodic boundary)."""
    n = x.shape[0]
    pieces = []
    r = lo
    while r < hi:
        start = r % n
        take = min(hi - r, n - start)
        pieces.append(rows(x, start, start + take, k))
        r += take
    return pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=0)


def _edge_rows(x: Any, count: int, top: bool, k: int, boundary: str, cval: Any,
               dtype: np.dtype) -> Array:
    """``count`` rows beyond the first (``top``) or last row of ``x`` by the rule."""
    shape = (count, *x.shape[1:])
    if boundary == "constant":
        return _constant_rows(shape, cval, dtype, x.devices[k])
    n = x.shape[0]
    edge = rows(x, 0, 1, k) if top else rows(x, n - 1, n, k)
    edge = edge.astype(dtype) if edge.dtype != dtype else edge
    return edge if count == 1 else broadcast_to(edge, shape)  # (one row: itself)


def _constant_rows(shape: tuple[int, ...], cval: Any, dtype: np.dtype, device: Any) -> Array:
    """Rows of ``cval``: filled once per shape, value and device, then the same buffer
    (only ever read: it is a halo, no function hands it out), so a stencil step
    enqueues no fill and allocates nothing for its ends, and its ends' windows have the
    middle parts' structure (one expression for every part, :class:`_Templates`)."""
    key = (shape, dtype.str, np.asarray(cval, dtype).tobytes(), device.index)
    hit = _CONSTANT_ROWS.get(key)
    if hit is not None and hit[0] is device:
        return hit[1]
    rows_ = full(shape, cval, dtype, device=device)
    if len(_CONSTANT_ROWS) >= CONSTANT_ROWS_MAX:
        _CONSTANT_ROWS.clear()
    _CONSTANT_ROWS[key] = (device, rows_)
    return rows_


#: the constant boundary's rows kept (by shape, dtype, value and device)
CONSTANT_ROWS_MAX = 64
_CONSTANT_ROWS: dict[tuple, tuple[Any, Array]] = {}
_caches.register("multi.constant_rows", _CONSTANT_ROWS.clear, lambda: len(_CONSTANT_ROWS),
                 CONSTANT_ROWS_MAX)


def _one_part_rows(x: Any, lo: int, hi: int, k: int, wrap: bool) -> Array | None:
    """Rows ``lo:hi`` of ``x`` (modulo its rows where ``wrap``) on part ``k``'s device
    where they lie in one part, a buffer in C order (a halo of a concrete array): as
    :func:`rows` gives them (copied on the devices where the backend can, else through
    this thread's open batch), without its walk over the parts, the views and arrays
    made on the way and :func:`_transfer`'s checks; None otherwise."""
    n = x.shape[0]
    if wrap and hi - lo <= n:
        lo, hi = lo % n, lo % n + (hi - lo)
    bounds = x.bounds
    if lo < 0 or hi > n:
        return None
    j = 0
    while bounds[j + 1] <= lo:
        j += 1
    if hi > bounds[j + 1]:
        return None
    part = x.parts[j]
    s, e = lo - bounds[j], hi - bounds[j]
    if j == k:
        return _part_rows(part, s, e)
    node = part._node
    if type(node) is not Leaf or (node.strides is not None
                                  and node.strides != c_strides(node.shape)):
        return None
    device, source = x.devices[k], part.device
    shape = (e - s, *part.shape[1:])
    itemsize = part.dtype.itemsize
    nbytes = math.prod(shape) * itemsize
    host_batch = getattr(_local, "batch", None)
    if not nbytes or source.backend != device.backend or host_batch is None:
        return None
    offset = (node.offset + s * math.prod(shape[1:])) * itemsize
    backend = backend_for(device)
    if backend.copies_between(device, source):  # (on the devices, as _transfer's)
        out = allocate(nbytes, device)
        if source is device:
            backend.copy(device, out.buffer, node.storage.buffer, nbytes, offset)
        elif not backend.copy_from(device, out.buffer, source, node.storage.buffer, nbytes,
                                   offset):
            return None
        got = Array._concrete(out, part.dtype, shape)
    else:
        EXCHANGED["through_host"] += 1
        got = host_batch.add_run(node.storage, offset, shape, part.dtype, source, device)
    EXCHANGED["rows"] += shape[0]
    EXCHANGED["bytes"] += nbytes
    EXCHANGED["copies"] += 1
    return got


def _halo(x: Any, lo: int, hi: int, k: int, boundary: str, cval: Any,
          dtype: np.dtype) -> Array | None:
    """Rows ``lo:hi`` (global, possibly beyond either end) of ``x`` extended by the
    boundary rule, on part ``k``'s device; None when empty."""
    if hi <= lo:
        return None
    n = x.shape[0]
    # (a halo lying in one part's buffer, a concrete array's: copied from there at once)
    ext = _one_part_rows(x, lo, hi, k, boundary == "wrap")
    if ext is not None:
        pass
    elif boundary == "wrap":
        ext = _wrapped_rows(x, lo, hi, k)
    else:
        pieces = []
        if lo < 0:
            pieces.append(_edge_rows(x, min(hi, 0) - lo, True, k, boundary, cval, dtype))
        if max(lo, 0) < min(hi, n):
            pieces.append(rows(x, max(lo, 0), min(hi, n), k))
        if hi > n:
            pieces.append(_edge_rows(x, hi - max(lo, n), False, k, boundary, cval, dtype))
        ext = pieces[0] if len(pieces) == 1 else concatenate(pieces, axis=0)
    return ext.astype(dtype) if ext.dtype != dtype else ext




#: the last split stencil's parts built through ``apply`` and parts substituted
LAST_TEMPLATES: list[int] = [0, 0]

#: the last split stencil's parts moved onto their buffers from kept templates (no
#: window built for them)
LAST_MOVED: list[int] = [0]
#: the last split stencil's templates came from an earlier call (1) or not (0)
LAST_PLAN_HIT: list[int] = [0]
_PLANS: dict[tuple, _Templates] = {}
PLANS_MAX = 64
_caches.register("multi.stencil_plans", _PLANS.clear, lambda: len(_PLANS), PLANS_MAX)


def _value_key(v: Any) -> Any:
    """``v`` as part of a key (arrays and scalars by bytes: NaN equals itself), or a
    :class:`TypeError` for anything else (a function may compute anything)."""
    if v is None or type(v) in (str, bool):
        return v
    if isinstance(v, np.ndarray):
        return ("a", v.shape, v.dtype.str, v.tobytes())
    if type(v) in (int, float, complex) or isinstance(v, np.generic):
        a = np.asarray(v)
        return ("s", a.dtype.str, a.tobytes())
    if isinstance(v, np.dtype):
        return ("d", v.str)
    raise TypeError(type(v).__name__)


def _plan_key(apply: Callable[..., Any], x: Any, width: tuple[int, ...], center: Any,
              boundary: str, cval: Any) -> tuple | None:
    """The key of a split stencil's kept templates: ``apply``'s code and the values it
    closes over (``fl.stencil``'s weights, dtype, boundary; a function closing over
    anything else, ``fl.stencil_function``'s body, is not kept), the partition and the
    rest of the call; None where it cannot be kept.  A split stencil's part expressions
    are kept so per (stencil, partition): every part of a later step is substituted,
    none built through ``apply``."""
    code = getattr(apply, "__code__", None)
    if code is None or getattr(apply, "__defaults__", None) or \
            getattr(apply, "__kwdefaults__", None):
        return None
    try:
        cells = tuple(_value_key(c.cell_contents) for c in apply.__closure__ or ())
        rest = (_value_key(cval), None if center is None else
                tuple(int(c) for c in np.atleast_1d(center)))
    except (TypeError, ValueError):
        return None
    return (code, cells, x.dtype.str, x.shape, x.bounds, x.device_set.key, tuple(width),
            boundary, *rest)


def stencil(apply: Callable[[Window, tuple[int, ...]], Array], x: Any, width: tuple[int, ...],
            center: Any, boundary: str, cval: Any, what: str) -> Any:
    """A stencil of ``width`` over the split ``x``: ``apply(window, center)`` per part
    (``center`` per axis, checked), where
    ``window(dr)`` is the part's rows shifted by ``dr`` along the split axis (``-before
    <= dr <= after``; rows beyond the part copied from its neighbours, or made by the
    boundary rule at the ends).
    Every halo's copy is under way (through the host: one batch) before any part's
    stencil is built, and the host builds the parts' stencils while the copies run.
    A step of a structure a step made before is replayed from its kept plan
    (:mod:`fuseloop.multi.steps`; its key holds everything :func:`_check` checks)."""
    plan_key = _plan_key(apply, x, width, center, boundary, cval)
    # (a step plan is made of kept templates moved onto buffers: not without them)
    step, full = _steps.find(plan_key, x)
    _steps.LAST_STEP_PLAN[0] = int(step is not None)
    if step is not None:
        return _replayed_step(step, x)
    return _general_step(apply, x, width, center, boundary, cval, what, plan_key, full)


def _replayed_step(step: _steps.StepPlan, x: Any) -> Any:
    """The stencil step ``step`` keeps, over ``x``'s buffers (see :func:`stencil`)."""
    with batch():
        arenas = step.enqueue_reads(x, _local.batch, EXCHANGED)
        if trace.events is not None:
            trace.note("halos enqueued", -1, x.devices[0])
        out = step.make_parts(x, arenas)
        if trace.events is not None:
            trace.note("parts built", -1, x.devices[0])
    if trace.events is not None:
        trace.note("halos uploaded", -1, x.devices[0])
    made = sum(o is not None for o in out)
    LAST_TEMPLATES[:] = [0, made]
    LAST_MOVED[0] = made
    LAST_PLAN_HIT[0] = 1
    return _split_result(out, x)


def _general_step(apply: Callable[[Window, tuple[int, ...]], Array], x: Any,
                  width: tuple[int, ...], center: Any, boundary: str, cval: Any, what: str,
                  plan_key: tuple | None, full: tuple | None) -> Any:
    """:func:`stencil` by walking the parts for each halo and window; where its parts
    all come from kept templates, what it did is kept as a step plan under ``full``."""
    cen = _check(x, tuple(width), center, boundary, what)
    before, after = cen[0], width[0] - 1 - cen[0]
    # (a constant's rows must hold cval as the single-device stencil's where() does)
    dtype = np.result_type(x.dtype, cval) if boundary == "constant" else x.dtype
    spans = list(itertools.pairwise(x.bounds))
    out: list[Array | None] = []
    kept = _PLANS.get(plan_key) if plan_key is not None else None
    templates = kept if kept is not None else _Templates()
    templates.counts = [0, 0]
    templates.moved = 0
    with batch():
        host_batch: _HostBatch | None = _local.batch
        rec = _steps.Recorder() if full is not None and kept is not None \
            and host_batch is not None and host_batch.recorder is None else None
        arenas: list[_Arena | None] = []
        halos: list[tuple[Array | None, Array | None]] = []
        if rec is not None:
            assert host_batch is not None
            host_batch.recorder = rec
        try:
            for k, (lo, hi) in enumerate(spans):
                if rec is not None:
                    rec.halos(hi == lo)
                if hi == lo:
                    halos.append((None, None))
                    arenas.append(None)
                    continue
                if host_batch is not None:  # (rows through the host: one buffer per part)
                    host_batch.arena(x.devices[k], before + after, x.shape[1:], x.dtype)
                arenas.append(host_batch.current if host_batch is not None else None)
                halos.append((_halo(x, lo - before, lo, k, boundary, cval, dtype),
                              _halo(x, hi, hi + after, k, boundary, cval, dtype)))
        finally:
            if rec is not None and host_batch is not None:
                host_batch.recorder = None
        if host_batch is not None:
            host_batch.close_arena()
        if trace.events is not None:
            trace.note("halos enqueued", -1, x.devices[0])
        # (lazy: nothing built here reads a halo before the batch has filled it)
        for k, (lo, hi) in enumerate(spans):
            if hi == lo:
                out.append(None)
                continue
            own = x.parts[k] if x.dtype == dtype else x.parts[k].astype(dtype)
            top, bottom = halos[k]
            pieces = [(-before, top), (0, own), (hi - lo, bottom)]
            present = [(f, a) for f, a in pieces if a is not None]
            window = _ShiftedRows(present, hi - lo, x.devices[k])
            out.append(templates.part(apply, window, range(-before, after + 1), cen,
                                      x.devices[k]))
            if rec is not None:
                rec.part(*templates.last_moved, arenas[k])
        if trace.events is not None:
            trace.note("parts built", -1, x.devices[0])
    if trace.events is not None:
        trace.note("halos uploaded", -1, x.devices[0])
    LAST_TEMPLATES[:] = templates.counts
    LAST_MOVED[0] = templates.moved
    LAST_PLAN_HIT[0] = int(kept is not None)
    if plan_key is not None and kept is None:
        detached = templates.detached()
        if detached is not None:
            if len(_PLANS) >= PLANS_MAX:
                _PLANS.clear()
            _PLANS[plan_key] = detached
    if rec is not None and full is not None:
        step = rec.plan(x, _CONSTANT_ROWS)
        if step is not None:
            _steps.keep(full, step)
    return _split_result(out, x)


def _split_result(out: list[Array | None], x: Any) -> Any:
    """The split result of a stencil's parts (None: an empty part)."""
    done = next(o for o in out if o is not None)
    parts = [o if o is not None else empty((0, *done.shape[1:]), done.dtype, device=d)
             for o, d in zip(out, x.devices)]
    return MultiArray(parts, x.bounds, x.device_set)
