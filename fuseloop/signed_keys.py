"""The keys of run plans remembered by signature (see ``run_plans``' plans by
signature): an evaluation's roots' signatures without their views' offsets
(``nodes.free_signature``), which of those offsets are equal, the pattern of repeated
operands and, into targets, each target's place, strides, offset and how it meets
every view; with the offsets to bind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .expr import program as _prog
from .expr.nodes import Node, Storage, _free, c_strides, free_signature, signature_of
from .expr.overlap import views_disjoint
from .expr.program import Target
from .runtime.devices import Device


def _free_views(roots: Sequence[Node]) -> tuple[Any, tuple, tuple] | None:
    """The free signature(s) of ``roots``, their views (``nodes.free_signature``) and
    operands, or None (a root without a signature: a concatenation, a pointer, too many
    operands; or one whose structure free_signature does not read)."""
    if len(roots) == 1:
        root = roots[0]
        sig = root.sig or signature_of(root)
        operands = root.operands
        if not sig or operands is None:
            return None
        free = _free.get(sig) or free_signature(sig)
        return None if free is None else (free[0], free[1], operands)
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
    return tuple(sigs), views, operands


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
    sig, views, operands = got
    index: dict[int, int] = {}
    key = _free_key(sig, views, operands, out_shape, device, index)
    extra: list[Storage] = []
    if targets is None:
        return key, operands, extra, tuple(index), False
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
        written = (out_shape, t.strides if t.strides is not None else c_strides(out_shape), off)
        meets = tuple([_meets(written, v) for v in views])
        where.append((at, t.strides, -1 if t.strides is None else
                      index.setdefault(off, len(index)), meets, t.atomic))
    return (*key, tuple(where)), operands, extra, tuple(index), True


def _free_key(sig: Any, views: tuple, operands: tuple, out_shape: tuple[int, ...],
              device: Device, index: dict[int, int]) -> tuple:
    """The key of a free signature ``sig`` with ``views`` and ``operands``; ``index``
    gets the views' distinct offsets (each one's place in the key's pattern)."""
    key: tuple = (device.index, sig, out_shape, _prog.firsts(operands))
    if views:
        pattern = tuple([index.setdefault(o, len(index)) for _, st, o in views
                         if st is not None])
        if pattern:  # (none: the key of a plan without offsets, as multi.replay makes it)
            key = (*key, pattern)
    return key


def signed_of(sig: int, operands: tuple, out_shape: tuple[int, ...], device: Device
              ) -> tuple | None:
    """:func:`_signed_key` of one root of signature ``sig`` with ``operands`` (for
    :func:`_signed_replay` and ``_signed.get(...[0])``), or None."""
    free = _free.get(sig) or free_signature(sig)
    if free is None:
        return None
    index: dict[int, int] = {}
    key = _free_key(free[0], free[1], operands, out_shape, device, index)
    return key, operands, [], tuple(index), False


def _meets(written: tuple, view: tuple) -> int:
    """0: ``view`` (shape, strides or None, offset) is the view ``written``; 1: they are
    disjoint; 2: they overlap (as if of one buffer)."""
    shape, strides, off = view
    view = (shape, c_strides(shape) if strides is None else strides, off)
    return 0 if view == written else 1 if views_disjoint(written, view) else 2
