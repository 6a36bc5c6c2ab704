"""The keys of run plans remembered by signature (see ``run_plans``' plans by
signature): an evaluation's roots' signatures (free of their views' offsets, which
say which offsets are equal: ``expr.nodes``), the pattern of repeated operands and,
into targets, each target's place, strides, offset and how it meets every view; with
the offsets to bind (the roots' ``offs``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import caches as _caches
from .expr import program as _prog
from .expr.nodes import (
    SIG_TABLE_MAX,
    Node,
    Storage,
    _fields_before,
    _sig_fields,
    c_strides,
    merge_offs,
    signature_of,
)
from .expr.overlap import views_disjoint
from .expr.program import Target
from .runtime.devices import Device

# where the child signatures begin in the fields of the kinds with children
_CHILDREN_AT = {"A": 4, "G": 4, "K": 4, "M": 4, "R": 5}
# kinds without children and without views (a scalar argument, a literal, an iota)
_NO_VIEWS = frozenset(("S", "C", "I"))
# signature -> sig_views' answer
_views: dict[int, tuple[tuple, int] | None] = {}


def sig_views(sig: int) -> tuple[tuple, int] | None:
    """The views ``sig`` reads in the walk's order, ((shape, strides, k), ...) per
    buffer leaf (strides None: a whole buffer, ``k`` -1; else ``k``: which of the
    node's ``offs`` it is at) and how many ``offs`` a node of it has; None where a
    part's fields are not known (a kind signed elsewhere, a signature made before
    the table was cleared, a very deep chain).  Once per signature."""
    known = _views.get(sig, _views)
    if known is not _views:
        return known  # type: ignore[return-value]
    try:
        got = _views_of(_sig_fields.get(sig) or _fields_before[0].get(sig))
    except RecursionError:
        got = None
    if len(_views) >= SIG_TABLE_MAX:
        _views.clear()
    _views[sig] = got
    return got


def _views_of(fields: tuple | None, wheres: tuple = ()) -> tuple[tuple, int] | None:
    if fields is None:
        return None
    kind = fields[0]
    if kind == "L" or kind == "LC":
        return ((fields[2], None, -1),), 0
    if kind == "V":
        return ((fields[3], fields[4], 0),), 1
    if kind in _NO_VIEWS:
        return (), 0
    if kind == "J":
        return sig_views(fields[1])
    if kind == "O":
        return _views_of(_sig_fields.get(fields[1]) or _fields_before[0].get(fields[1]),
                         fields[2])
    at = _CHILDREN_AT.get(kind)
    if at is None:
        return None
    views: list = []
    n = 0
    for j, child in enumerate(fields[at:]):
        got = sig_views(child)
        if got is None:
            return None
        where = wheres[j - 1] if 0 < j <= len(wheres) else None
        if where is None:  # (appended in order)
            views.extend([v if v[2] < 0 else (v[0], v[1], v[2] + n) for v in got[0]])
            n += got[1]
        else:
            views.extend([v if v[2] < 0 else (v[0], v[1], where[v[2]]) for v in got[0]])
            n = max(n, max(where, default=-1) + 1)
    return tuple(views), n


def _free_views(roots: Sequence[Node]) -> tuple[Any, tuple, tuple, tuple] | None:
    """The signature(s) of ``roots`` (with where a later root's offsets land among the
    earlier ones', where not appended), their views (``nodes.sig_views``), distinct view
    offsets and operands; None for a root without a signature (a concatenation, a
    pointer, too many operands) or whose views are not known."""
    if len(roots) == 1:
        root = roots[0]
        sig = root.sig or signature_of(root)
        operands = root.operands
        if not sig or operands is None:
            return None
        views = sig_views(sig)
        offs = root.offs
        if views is None or views[1] != len(offs):
            return None
        return sig, views[0], offs, operands
    sigs = []
    wheres: list[Any] = []
    offs = ()
    operands = ()
    for root in roots:
        sig = root.sig or signature_of(root)
        more = root.operands
        if not sig or more is None or (views := sig_views(sig)) is None \
                or views[1] != len(root.offs):
            return None
        sigs.append(sig)
        offs, where = merge_offs(offs, root.offs)
        wheres.append(where)
        operands += more
    key: Any = tuple(sigs)
    if any(w is not None for w in wheres):
        key = (key, tuple(wheres))
    all_views = _roots_views.get(key)
    if all_views is None:
        all_views = _joined_views(sigs, wheres)
        if len(_roots_views) >= SIG_TABLE_MAX:
            _roots_views.clear()
        _roots_views[key] = all_views
    return key, all_views, offs, operands


# (signatures of several roots, where each one's offsets land) -> their views, joined
_roots_views: dict[Any, tuple] = {}


def _joined_views(sigs: list[int], wheres: list[Any]) -> tuple:
    """The views of roots of signatures ``sigs`` (known), each root's offsets landing
    at ``wheres`` (None: appended) among the earlier roots'."""
    out: tuple = ()
    n = 0
    for sig, where in zip(sigs, wheres):
        views, count = sig_views(sig)  # type: ignore[misc]
        out += tuple([v if v[2] < 0 else (v[0], v[1], v[2] + n if where is None
                                          else where[v[2]]) for v in views])
        n = n + count if where is None else max(n, max(where, default=-1) + 1)
    return out


def _signed_key(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
                targets: Sequence[Target | Storage | None] | None = None,
                free: tuple | None = None
                ) -> tuple[tuple, tuple, list[Storage], tuple[int, ...], bool] | None:
    """The key of ``roots`` in ``_signed`` (evaluated into ``targets``: buffers, or views
    of them without a mask or scatter; None: new buffers), or None (see
    :func:`_free_views`), with the operands, the target buffers that are not operands
    (in order: the walk appends them so), the view offsets to bind (as the walk's
    ``ViewOffsets.values``: distinct, first met first) and whether there are targets.
    Each target's buffer (its place among the operands or the other targets' buffers),
    strides, offset (which of the views' it is) and how it meets every view (the same,
    disjoint, overlapping) are in the key: they decide temporaries as the walk's key
    says.  ``free``: :func:`_free_views` of one root, known already."""
    got = free if free is not None and len(roots) == 1 else _free_views(roots)
    if got is None:
        return None
    sig, views, offsets, operands = got
    key: tuple = (device.index, sig, out_shape, _prog.firsts(operands))
    extra: list[Storage] = []
    if targets is None:
        return key, operands, extra, offsets, False
    bound = offsets  # (the offsets to bind: a target's own appended where new)
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
            if off in bound:
                k = bound.index(off)
            else:
                k = len(bound)
                bound += (off,)
        where.append((at, t.strides, k, _target_meets(views, offsets, out_shape, t.strides,
                                                      off), t.atomic))
    return (*key, tuple(where)), operands, extra, bound, True


def signed_of(sig: int, operands: tuple, offs: tuple, out_shape: tuple[int, ...],
              device: Device) -> tuple | None:
    """:func:`_signed_key` of one root of signature ``sig`` with ``operands`` and view
    offsets ``offs`` (for :func:`_signed_replay` and ``_signed.get(...[0])``), or None."""
    views = sig_views(sig)
    if views is None or views[1] != len(offs):
        return None
    return (device.index, sig, out_shape, _prog.firsts(operands)), operands, [], offs, False


# (view shape, strides, offset less the target's, target shape, strides) -> how the
# target meets that view: the same for every translation of both (a time loop meets one
# key per view, a loop over rows or elements a few)
_meets_memo: dict[tuple, int] = {}
MEETS_MAX = 1 << 14  # (a growing loop: a key per view and length; see plan_free.FREE_MAX)
# (id of a sig_views tuple, offsets, target shape, strides, offset) -> (the tuple, how
# the target meets each view): a statement made again (a stencil of many views, each
# call) looks its answer up once, not view by view
_all_meets: dict[tuple, tuple[tuple, tuple[int, ...]]] = {}
ALL_MEETS_MAX = 1024
ALL_MEETS_VIEWS = 8  # (fewer views: looked up one by one, as a loop's statements' are)


def _target_meets(views: tuple, offsets: tuple, shape: tuple[int, ...],
                  strides: tuple[int, ...] | None, off: int) -> tuple[int, ...]:
    """How a target (``shape``, ``strides``, ``off``) meets each of ``views`` (see
    ``nodes.sig_views``; their offsets ``offsets``): 0 the same view, 1 disjoint, 2
    overlapping (as if of one buffer: the walk compares only those)."""
    if len(views) < ALL_MEETS_VIEWS:
        return _each_meets(views, offsets, shape, strides, off)
    key = (id(views), offsets, shape, strides, off)
    hit = _all_meets.get(key)
    if hit is not None and hit[0] is views:
        return hit[1]
    got = _each_meets(views, offsets, shape, strides, off)
    if len(_all_meets) >= ALL_MEETS_MAX:
        _all_meets.clear()
    _all_meets[key] = (views, got)
    return got


def _each_meets(views: tuple, offsets: tuple, shape: tuple[int, ...],
                strides: tuple[int, ...] | None, off: int) -> tuple[int, ...]:
    """:func:`_target_meets`, view by view."""
    out = []
    get = _meets_memo.get
    for shape_v, strides_v, k in views:
        at = 0 if k < 0 else offsets[k]
        memo = (shape_v, strides_v, at - off, shape, strides)
        got = get(memo)
        if got is None:
            written = (shape, c_strides(shape) if strides is None else strides, off)
            got = _meets(written, (shape_v, strides_v, at))
            if len(_meets_memo) >= MEETS_MAX:
                _meets_memo.clear()
            _meets_memo[memo] = got
        out.append(got)
    return tuple(out)


def _meets(written: tuple, view: tuple) -> int:
    shape, strides, off = view
    view = (shape, c_strides(shape) if strides is None else strides, off)
    if view == written:
        return 0
    if len(shape) <= 1 and len(written[0]) <= 1:
        # (0-d and 1-D views, a growing loop's, each length a new memo key: by their
        # extents)
        n, step = (shape[0], view[1][0]) if shape else (1, 0)
        m, wstep = (written[0][0], written[1][0]) if written[0] else (1, 0)
        at = written[2]
        if not n or not m:
            return 1
        low, high = (off, off + (n - 1) * step) if step >= 0 else (off + (n - 1) * step, off)
        wlow, whigh = (at, at + (m - 1) * wstep) if wstep >= 0 else \
            (at + (m - 1) * wstep, at)
        if high < wlow or whigh < low:
            return 1
        if -1 <= step <= 1 and -1 <= wstep <= 1:
            return 2  # (each holds every element of its extent: they share one)
    return 1 if views_disjoint(written, view) else 2


_caches.register("signed_keys.views", _views.clear, lambda: len(_views), SIG_TABLE_MAX)
_caches.register("signed_keys.roots_views", _roots_views.clear, lambda: len(_roots_views),
                 SIG_TABLE_MAX)
_caches.register("signed_keys.meets", _meets_memo.clear, lambda: len(_meets_memo), MEETS_MAX)
_caches.register("signed_keys.all_meets", _all_meets.clear, lambda: len(_all_meets),
                 ALL_MEETS_MAX)
