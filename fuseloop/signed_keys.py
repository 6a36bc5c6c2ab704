"""The keys of run plans remembered by signature (see ``run_plans``' plans by
signature): an evaluation's roots' signatures without their views' offsets
(``nodes.free_signature``), which of those offsets are equal, the pattern of repeated
operands and, into targets, each target's place, strides, offset and how it meets
every view; with the offsets to bind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import caches as _caches
from .expr import program as _prog
from .expr.nodes import Node, Storage, _free, c_strides, free_signature, signature_of
from .expr.overlap import views_disjoint
from .expr.program import Target
from .runtime.devices import Device


def _free_views(roots: Sequence[Node]) -> tuple[Any, tuple, tuple, tuple, tuple] | None:
    """The free signature(s) of ``roots``, their views, offset pattern and distinct
    offsets (``nodes.free_signature``) and operands, or None (a root without a
    signature: a concatenation, a pointer, too many operands; or one whose structure
    free_signature does not read)."""
    if len(roots) == 1:
        root = roots[0]
        sig = root.sig or signature_of(root)
        operands = root.operands
        if not sig or operands is None:
            return None
        free = _free.get(sig) or free_signature(sig)
        return None if free is None else (*free, operands)
    sigs = []
    views: tuple = ()
    operands = ()
    for root in roots:
        sig = root.sig or signature_of(root)
        more = root.operands
        if not sig or more is None or (free := free_signature(sig)) is None:
            return None
        sigs.append(free[0])
        views += free[1]
        operands += more
    index: dict[int, int] = {}
    pattern = tuple([index.setdefault(o, len(index)) for _, st, o in views if st is not None])
    return tuple(sigs), views, pattern, tuple(index), operands


def _signed_key(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
                targets: Sequence[Target | Storage | None] | None = None
                ) -> tuple[tuple, tuple, list[Storage], tuple[int, ...], bool] | None:
    """The key of ``roots`` in ``_signed`` (evaluated into ``targets``: buffers, or views
    of them without a mask or scatter; None: new buffers), or None (see
    :func:`_free_views`), with the operands, the target buffers that are not operands
    (in order: the walk appends them so), the view offsets to bind (as the walk's
    ``ViewOffsets.values``: distinct, first met first) and whether there are targets.
    The key holds which offsets are equal; each target's buffer (its place among the
    operands or the other targets' buffers), strides, offset (which of the views' it
    is) and how it meets every view (the same, disjoint, overlapping), which decide
    temporaries as the walk's key says."""
    got = _free_views(roots)
    if got is None:
        return None
    sig, views, pattern, offsets, operands = got
    key: tuple = (device.index, sig, out_shape, _prog.firsts(operands))
    if pattern:
        key = (*key, pattern)
    extra: list[Storage] = []
    if targets is None:
        return key, operands, extra, offsets, False
    index: dict[int, int] | None = None
    where: list[Any] = []
    for t in targets:
        if t is None:
            where.append(None)
            continue
        if isinstance(t, Storage):
            t = Target(t, None, 0)
        elif t.mask is not None or t.scatter is not None:
            return None
        buf = t.storage
        try:  # (buffers compare by identity)
            at = operands.index(buf)
        except ValueError:  # -1 - its place among the target buffers that are not operands
            if buf not in extra:
                extra.append(buf)
            at = -1 - extra.index(buf)
        off = t.offset
        k = -1
        if t.strides is not None:  # (which of the offsets it is, a new one appended)
            if index is None:
                index = {o: j for j, o in enumerate(offsets)}
            k = index.setdefault(off, len(index))
        where.append((at, t.strides, k, _target_meets(sig, views, out_shape, t.strides, off),
                      t.atomic))
    return (*key, tuple(where)), operands, extra, offsets if index is None else tuple(index), \
        True


def signed_of(sig: int, operands: tuple, out_shape: tuple[int, ...], device: Device
              ) -> tuple | None:
    """:func:`_signed_key` of one root of signature ``sig`` with ``operands`` (for
    :func:`_signed_replay` and ``_signed.get(...[0])``), or None."""
    free = _free.get(sig) or free_signature(sig)
    if free is None:
        return None
    key: tuple = (device.index, free[0], out_shape, _prog.firsts(operands))
    if free[2]:
        key = (*key, free[2])
    return key, operands, [], free[3], False


# (view shape, strides, offset less the target's, target shape, strides) -> how the
# target meets that view: the same for every translation of both (a time loop meets one
# key per view, a loop over rows or elements a few)
_meets_memo: dict[tuple, int] = {}
MEETS_MAX = 4096


def _target_meets(sig: Any, views: tuple, shape: tuple[int, ...],
                  strides: tuple[int, ...] | None, off: int) -> tuple[int, ...]:
    """How a target (``shape``, ``strides``, ``off``) meets each of the ``views`` of a
    free signature ``sig``: 0 the same view, 1 disjoint, 2 overlapping (as if of one
    buffer: the walk compares only those)."""
    out = []
    for v in views:
        memo = (v[0], v[1], v[2] - off, shape, strides)
        got = _meets_memo.get(memo)
        if got is None:
            written = (shape, c_strides(shape) if strides is None else strides, off)
            got = _meets(written, v)
            if len(_meets_memo) >= MEETS_MAX:
                _meets_memo.clear()
            _meets_memo[memo] = got
        out.append(got)
    return tuple(out)


def _meets(written: tuple, view: tuple) -> int:
    shape, strides, off = view
    view = (shape, c_strides(shape) if strides is None else strides, off)
    return 0 if view == written else 1 if views_disjoint(written, view) else 2


_caches.register("signed_keys.meets", _meets_memo.clear, lambda: len(_meets_memo), MEETS_MAX)
