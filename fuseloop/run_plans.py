"""Run plans: the kernels one evaluation enqueues, remembered per expression structure.

Evaluating an expression with reductions, views or several outputs decides a
lot before anything runs: which reductions run first, whether a target is
read through another index, whether a long reduction runs in two stages,
how dimensions coalesce, and then linearises each kernel's program.  All of
that is a function of the expression's *structure* (the prefix code of
:func:`fuseloop.expr.program.walk_structure`: operations, dtypes, shapes,
strides and offsets, which buffers and scalar nodes are the same) and of the
device, never of the data.

So the first evaluation of a structure is *recorded*: while it runs, every
kernel :func:`fuseloop.evaluate.launch` is asked for goes through the thread's
:class:`Recorder` (:meth:`Recorder.launch`), which notes it and launches it.
Its buffers and scalars are noted as slots of the structure (an input, a
target, or the n-th temporary: a buffer first seen as a launch's output).
Later evaluations of the same structure *replay* the record: allocate the same
sizes, enqueue the same programs with this call's buffers and scalars.  Views'
offsets and the lengths of shapes are not in the key but run-time values of the
plan (offsets substituted per call; lengths per :mod:`fuseloop.plan_lengths`).  The
counters of ``fl.stats()`` move as they would without the plan.  Gathers of
device indices are planned too: a replayed step's kernel reads its error flag as
any launch does (:mod:`fuseloop.flags`: once at the end of the evaluation, and
before a step that writes a target).  Scatters are planned too (their index
nodes walked like roots); nothing is while ``show_code`` captures sources.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from . import caches as _caches
from . import evaluate as _ev
from . import flags as _flags
from . import host_path as _host
from . import plan_free as _free_sigs
from . import plan_free_keys as _free_keys
from . import plan_lengths as _pl
from . import plan_steps as _steps
from . import plan_tables as _tables
from . import splits as _sp
from .expr import program as _prog
from .expr.ir import INT32_LIMIT
from .expr.nodes import (
    Node,
    Storage,
    c_strides,
    signature_of,
)
from .expr.overlap import views_disjoint
from .expr.program import Target, ViewOffsets, target_nodes, walk_structure
from .flags import check_pending
from .plan_free_keys import free_key
from .plan_growing import Growing, growing_for, run_grown
from .plan_moving import Moving, moving_for
from .plan_ready import ready_for
from .plan_records import Recorder, _Plan, _Step, recording
from .plan_records import install_recorder as install_recorder  # (the callers' names)
from .plan_records import recorder as recorder
from .plan_records import recording_threads as recording_threads
from .plan_records import restore_recorder as restore_recorder
from .recipe_state import current as _recipes_current
from .runtime.devices import Device
from .signed_keys import _free_views, _signed_key, signed_of
from .stats import tallies as _tallies

_tally_record, _tally_replay, _tally_walk = (
    _tallies[name].__next__ for name in ("plans_recorded", "plans_replayed", "plans_walked"))
_plans: OrderedDict[tuple, _Plan | str | None] = OrderedDict()
PLANS_MAX = 1024  # entries each table of plans keeps (see fuseloop.plan_tables)
# the value of a key whose plan depends on its offsets' values: looked up by the key
# with the offsets appended (a launch read an offset the walk did not see)
_EXACT = "exact"
# the value of a key whose plans for two lengths did not follow one form (see
# fuseloop.plan_lengths): looked up by the key with the lengths appended
_EXACT_LENGTHS = "exact lengths"


def _get(key: tuple) -> _Plan | str | Literal[False] | None:
    """The plan of ``key`` (False: none), now the most recently used."""
    plan: _Plan | str | Literal[False] | None = _plans.get(key, False)
    if plan is not False:
        _tables.touch(_plans, key)
    return plan


def _put(key: tuple, plan: _Plan | str | None) -> None:
    _tables.keep(_plans, key, plan, PLANS_MAX)


# (key, lengths) -> a key's plan at lengths other than its plan's own (see _at_lengths):
# kept apart from _plans (and admitted as plan_tables says), so that a loop over more
# lengths than PLANS_MAX drops these, not the plans they are made from
_at: OrderedDict[tuple, _Plan] = OrderedDict()
_at_dropped: OrderedDict[tuple, bool] = OrderedDict()  # (keys whose plans _at dropped)


# per device: (recipes token, device, the thresholds read, the key's head fields)
_heads: dict[int, tuple[object, Device, tuple, tuple]] = {}


def _key_head(device: Device) -> tuple:
    """The fields of every key on ``device`` that follow from its recipes and the split
    thresholds: recipe_for is asked again only when the recipes token changed."""
    token = _recipes_current[0]
    known = _heads.get(device.index)
    # (the split thresholds as splits.py reads them: evaluate's names are copies)
    fields = (_sp.TWO_STAGE_MIN_LENGTH, _sp.TWO_STAGE_MAX_ROWS, _ev.ONE_ROW_MAX_LENGTH,
              _sp.ONE_LAUNCH, _sp.COLUMN_FOLD)
    if known is not None and known[0] is token and token is not None \
            and known[1] is device and known[2] == fields:
        return known[3]
    # (the reduction recipe decides column-like reductions' splits, the contraction
    # recipe split-K)
    head = (*fields, _ev.column_params(device), _sp.column_narrow(device),
            _sp.column_wide(device), _ev.split_param(device))
    if token is not None:
        _heads[device.index] = (token, device, fields, head)
    return head


def _key(roots: Sequence[Node], out_shape: tuple[int, ...],
         targets: Sequence[Target | Storage | None] | None, device: Device
         ) -> tuple[tuple, list[Storage], list[np.generic], dict[Any, int], ViewOffsets] | None:
    """The structure key of an evaluation, with the views' offsets left out: each
    leaf or target says only whether its offset is 0 and which of the distinct offsets
    it has, and each target how it meets every view of its buffer (the same view,
    disjoint, overlapping: what decides temporaries), so ``A[i, 1:] += A[i, :-1]``
    has one key for every ``i``."""
    _tally_walk()
    offs = ViewOffsets()
    head: list[Any] = ["run", device.index, offs.shape(out_shape), len(roots),
                       *_key_head(device)]
    # masks (Target.mask) and scatters' index nodes are walked like roots (their buffers
    # are inputs; a scatter's axis, lengths, checks and atomic operation are the key's)
    masks, index_nodes, scattered = target_nodes(targets)
    head.append(len(masks))
    head.append(scattered)
    walked = walk_structure([*roots, *masks, *index_nodes] if masks or index_nodes else roots,
                            head, offs)
    if walked is None:
        return None
    toks, slots, storages, scalars = walked
    if targets is not None:
        for t in targets:
            if t is None:
                toks.append(None)
                continue
            if isinstance(t, Storage):
                t = Target(t, None, 0)
            s = t.storage
            k = slots.get(s)
            if k is None:
                k = slots[s] = len(storages)
                storages.append(s)
            written = (out_shape, t.strides if t.strides is not None else c_strides(out_shape),
                       t.offset)
            meets = []
            for slot, leaf in offs.views:
                if slot == k:
                    view = (leaf.shape, leaf.view_strides(), leaf.offset)
                    meets.append(0 if view == written else 1 if views_disjoint(written, view)
                                 else 2)  # (the same view, disjoint, overlapping)
            toks.append(("T", k, t.strides, offs.cls(t.offset, t.strides), tuple(meets),
                         t.mask is not None, t.scatter is not None, t.atomic))
    if offs.values or offs.lengths:
        for s in storages:
            if s.nbytes > INT32_LIMIT:
                # (an offset or length may then decide the index type: keep them in the key)
                toks.append(("O", tuple(offs.values), tuple(offs.lengths)))
                offs.values.clear()
                offs.lengths.clear()
                break
    if offs.bound > INT32_LIMIT and offs.lengths:  # (likewise)
        toks.append(("N", tuple(offs.lengths)))
        offs.lengths.clear()
    return tuple(toks), storages, scalars, slots, offs


# {{{ plans by signature

# A plan found by the walk's key is also remembered under the roots' signatures (see
# fuseloop.expr.nodes: reductions, gathers and remaps have them too) and the pattern of
# repeated operands, and for an evaluation into targets (an assignment to a view, no
# mask or scatter) each target's buffer, strides, offset and how it meets every view:
# the next evaluation of that structure (``s[1:-1] = 0.5 * (s[:-2] + s[2:])`` in a time
# loop) finds it without a walk.  Signatures are free of the views' offsets and say
# which offsets are equal (as the walk's key does; ``expr.nodes``), so
# a loop over rows or elements (``A[i] -= A[i].mean()``, ``x[i] = d[i] - x[i-1]``)
# finds its plan on its second statement, and the offsets are this call's, bound as
# the walk's are.  Equal signatures are equal computations of the operands, so a plan
# recorded for one expression is right for every other of its signature (``t * t``
# with ``t`` built once or twice: at worst one kernel more or less than a fresh
# decision would take).
# signed key (see _signed_key) -> (plan, view offsets (None: the call's), operand
# picker, key head, held: None, or where a buffer was past int32 byte indexing the view
# offsets its plan holds (the walk's key keeps them then: they may decide the index
# type); an entry replays buffers of its own class only, a wide one at its held offsets
# only and never through the plan's int32 Ready: one array split over two GPUs at
# 2**30 float32 has 2 GiB parts, and their every call walked)
_signed: OrderedDict[tuple, tuple[_Plan, tuple[int, ...] | None, Any, tuple,
                                  tuple[int, ...] | None]] = OrderedDict()
# free signatures of the first roots of evaluations into targets met before -> whether
# to look them up by signature: only those met before are (the first meeting costs a
# dict look-up, not the signed key), and not those whose plan holds its most
# signatures already
_target_sigs: OrderedDict[Any, bool] = OrderedDict()
# signatures one plan is remembered under, at most: a plan that the walk finds under
# ever new signatures is walked rather than remembered again for each one
SIGNED_PER_PLAN = 8


def pick_common(entry: tuple, signed: tuple, device: Device) -> Any:
    """The operands of a plan remembered by signature (``entry``, not held) in the common
    case: ``(plan, storages, scalars, offsets)`` with every buffer on ``device`` and within
    int32 indexing; None where the operands or the recipes no longer match the entry;
    False where a buffer is elsewhere or wide (:func:`signed_pick` decides)."""
    plan, bind, take, head, _ = entry
    picked = take(signed[1])
    known = _key_head(device)
    if picked is None or (known is not head and known != head):
        return None
    storages, scalars = picked
    if signed[2]:  # (into targets: their buffers appended, as the walk appends them)
        storages = storages + signed[2]
    for s in storages:
        if s.nbytes > INT32_LIMIT or s.device is not device:
            return False
    return plan, storages, scalars, signed[3] if bind is None else bind


def _signed_replay(signed: tuple, device: Device) -> list[Storage] | None:
    """The replay of the plan remembered under ``signed`` (:func:`_signed_key`, or a
    pair (key, operands) of a plan without offsets), or None (none remembered, or its
    buffers need the walk: see :func:`_key`).  The common call (buffers on ``device``,
    none past int32 indexing, :func:`pick_common`): its Ready or Moving, else the general
    replay; anything else as :func:`signed_pick` says."""
    entry = _signed.get(signed[0])
    if entry is None:
        return None
    held = entry[4]
    if held is None:
        common = pick_common(entry, signed, device)
        if common is None:
            return None
        if common:
            plan, storages, scalars, offsets = common
            done = run_prepared(plan, storages, scalars, device, offsets)
            if done is not None:
                return done
            return _replay_signed(plan, storages, scalars, device, offsets, False, True)
    hit = signed_pick(entry, signed[1], device, signed[2], signed[3])
    if hit is None:
        return None
    plan, offsets, storages, scalars = hit
    if offsets is None:
        offsets = signed[3]
    return _replay_signed(plan, storages, scalars, device, offsets, held is not None)


def _remember_signed(signed: tuple | None, plan: _Plan,
                     storages: list[Storage], scalars: list[np.generic],
                     offsets: Sequence[int], device: Device) -> None:
    """Remember ``plan``, found or recorded by the walk, under its signed key (when the
    operands pick the walk's buffers and scalars, and the views' offsets are the walk's,
    as they always should: a plan that holds its offsets' values (the walk's key then
    holds them) is not remembered)."""
    if signed is None:
        return
    key, operands, extra, bound, into = signed
    if plan.signed >= SIGNED_PER_PLAN:
        if into:  # (this first root's signature not looked up again)
            first = key[1]
            while type(first) is tuple:  # (several roots: their signatures, in order)
                first = first[0]
            _target_sigs[first] = False
        return
    plan.signed += 1
    take = _prog.operand_picker(operands, key[3])
    picked = take(operands)
    if picked is not None and extra:
        picked = (picked[0] + extra, picked[1])
    wide = _wide(storages)
    # (over a wide buffer the walk keeps the offsets in its key and gives none to bind:
    # the plan holds them, and the entry serves those offsets only)
    if picked is None or len(picked[0]) != len(storages) or len(picked[1]) != len(scalars) \
            or any(a is not b for a, b in zip(picked[0], storages)) \
            or any(a is not b for a, b in zip(picked[1], scalars)) \
            or (offsets if wide else bound != tuple(offsets)):
        return
    _tables.keep(_signed, key, (plan, () if wide or not bound else None, take,
                                _key_head(device), bound if wide else None), PLANS_MAX)


def _wide(storages: Sequence[Storage]) -> bool:
    """Whether a buffer is past int32 byte indexing (its launches index in int64)."""
    for s in storages:
        if s.nbytes > INT32_LIMIT:
            return True
    return False


def _check_signed(signed: tuple, storages: list[Storage],
                  scalars: list[np.generic], offsets: Sequence[int]) -> None:
    """Checking (``CHECK_STRUCTURE_CACHE``): a plan remembered under ``signed`` would be
    replayed with the walk's buffers, scalars and view offsets."""
    hit = _signed.get(signed[0])
    if hit is None:
        return
    picked = hit[2](signed[1])
    if picked is not None and signed[2]:
        picked = (picked[0] + signed[2], picked[1])
    assert picked is not None and len(picked[0]) == len(storages) \
        and len(picked[1]) == len(scalars) \
        and all(a is b for a, b in zip(picked[0], storages)) \
        and all(a is b for a, b in zip(picked[1], scalars)) \
        and (signed[3] if hit[1] is None else hit[1]) == tuple(offsets), (
            "plan by signature differs from the walk's", signed[0])


# free key (the signed key with its lengths as symbols, plan_free) -> (the walk's key,
# where each of its lengths is among the free key's, operand picker, key head, the
# key's plan where it has a Growing and no split: replayed without the key's look-up)
_free: OrderedDict[tuple, tuple[tuple, tuple[int, ...], Any, tuple, _Plan | None]] = \
    OrderedDict()
def _free_pick(signed: tuple, out_shape: tuple[int, ...], device: Device) -> Any:
    """(free key and lengths, its entry, storages, scalars, the walk's lengths) of
    ``signed`` where a free entry takes its operands, else None."""
    got = free_key(signed, out_shape)
    entry = None if got is None else _free.get(got[0])
    if entry is None or got is None:
        return None
    picked = entry[2](signed[1])
    known, head = _key_head(device), entry[3]
    if picked is None or (known is not head and known != head):
        return None
    storages, scalars = picked
    if signed[2]:
        storages = storages + signed[2]
    if _wide(storages):
        return None
    return got, entry, storages, scalars, tuple(map(got[1].__getitem__, entry[1]))


def replay_grown(signed: tuple, out_shape: tuple[int, ...], device: Device
                 ) -> list[Storage] | None:
    """The replay of ``signed`` by the Growing its free entry keeps (see
    :func:`_free_replay`), or None (``plan_into``'s statement into a view: no flags'
    scope, the Growing's kernels read no flag)."""
    found = _free_pick(signed, out_shape, device)
    grown = None if found is None else found[1][4]
    if grown is None or grown.variants:
        return None
    return run_grown(grown, found[2], found[3], device, signed[3], found[4])


def _free_replay(roots: Sequence[Node], signed: tuple, out_shape: tuple[int, ...],
                 device: Device) -> list[Storage] | None:
    """The replay of the plan of the walk's key that ``signed`` has at any lengths (see
    :mod:`fuseloop.plan_free`), at this call's lengths; None where there is none (no
    free key known, a plan to record, buffers past int32 indexing: the walk decides)."""
    found = _free_pick(signed, out_shape, device)
    if found is None:
        return None
    got, entry, storages, scalars, lengths = found
    key, _, take, head, grown = entry
    if grown is not None and not grown.variants:
        done = run_grown(grown, storages, scalars, device, signed[3], lengths)
        if done is not None:
            return done
    plan = _get(key)
    if plan == _EXACT_LENGTHS:
        key = (key, lengths)
        plan = _get(key)
    if not isinstance(plan, _Plan):
        return None
    owner = _pl.owner_at(plan, roots, out_shape, device, lengths)
    done = run_grown(owner, storages, scalars, device, signed[3], lengths)
    if done is not None:  # (its replay at any lengths: nothing made or kept per length)
        if owner is not None and owner is plan and owner.split is None and grown is not owner:
            _free[got[0]] = (*entry[:4], owner)
        return done
    if plan.lengths != lengths:
        plan = _plan_at(key, plan, lengths, owner)
        if plan is None:
            return None
    if owner is None or type(owner.growing) is not Growing:
        # (and under the signature with these lengths, as _remember_signed would: a loop
        # over them again finds it there, and keeps it while the plans at lengths go;
        # made ready there, as after a walk, not for lengths met once)
        _tables.keep(_signed, signed[0], (plan, None, take, head, None), PLANS_MAX)
    return _replay_sized(plan, owner, storages, scalars, device, signed[3])


def _replay_sized(plan: _Plan, owner: _Plan | None, storages: list[Storage],
                  scalars: list[np.generic], device: Device, offsets: Sequence[int]
                  ) -> list[Storage]:
    """:func:`_replay` of ``plan`` (``owner``'s, or its key's at other lengths), then
    ``owner``'s Growing made or taught by it."""
    outs = _replay(plan, storages, scalars, device, offsets)
    if owner is not None and owner.forms is not None:
        growing_for(owner, plan, len(storages), device, _steps.temporaries)
    return outs


def _remember_free(signed: tuple, out_shape: tuple[int, ...], key: tuple,
                   lengths: tuple[int, ...], storages: list[Storage],
                   scalars: list[np.generic], offsets: Sequence[int], device: Device) -> None:
    """Remember the walk's ``key`` under ``signed``'s free key (see :func:`_free_replay`)
    where its operands pick the walk's buffers and scalars and its offsets are the
    walk's (as :func:`_remember_signed` asks)."""
    got = free_key(signed, out_shape)
    if got is None:
        return
    fkey, lens = got
    known = _free.get(fkey)
    if known is not None:
        # (equal free keys are one walk key: checking, the tests say so)
        assert not _prog.CHECK_STRUCTURE_CACHE or (
            known[0] == key and tuple(lens[p] for p in known[1]) == lengths), (
            "free key differs from the walk's", fkey)
        return
    where = _free_sigs.places(lengths, lens)
    take = _prog.operand_picker(signed[1], signed[0][3])
    picked = take(signed[1])
    if where is None or picked is None or signed[3] != tuple(offsets) or _wide(storages):
        return
    mine = picked[0] + signed[2] if signed[2] else picked[0]
    if len(mine) != len(storages) or len(picked[1]) != len(scalars) \
            or any(a is not b for a, b in zip(mine, storages)) \
            or any(a is not b for a, b in zip(picked[1], scalars)):
        return
    _tables.keep(_free, fkey, (key, where, take, _key_head(device), None), PLANS_MAX)


# }}}


def replay_signed(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device
                  ) -> list[Storage] | None:
    """The replay of the plan remembered for ``roots``' signature on ``device`` (what
    :func:`run` does first), or None: none remembered, or checking.  For callers that
    know the plan's structure is remembered (a split array's parts, one per device)."""
    signed = _signed_key(roots, out_shape, device)
    if signed is None or _prog.CHECK_STRUCTURE_CACHE:
        return None
    return _signed_replay(signed, device)


def signed_pick(entry: Any, operands: tuple, device: Device, extra: Sequence[Storage] = (),
                offsets: tuple[int, ...] = ()
                ) -> tuple[_Plan, tuple[int, ...], list[Storage], list[np.generic]] | None:
    """A plan remembered by signature (``entry`` of ``_signed``, or None) with this call's
    buffers and scalars taken from ``operands`` (``extra`` buffers after them):
    (plan, offsets, storages, scalars), or None where it does not apply (no entry,
    operands it cannot take, another recipe state, buffers past 32-bit indexing where
    the entry's were not, or the reverse, or at view ``offsets`` other than those a wide
    entry's plan holds: the walk decides those)."""
    if entry is None:
        return None
    plan, bind, take, head, held = entry
    picked = take(operands)
    known = _key_head(device)
    if picked is None or (known is not head and known != head):
        return None
    storages, scalars = picked
    if extra:
        storages = storages + list(extra)
    big = False
    for s in storages:  # (_wide, inline: every replay by signature asks)
        if s.nbytes > INT32_LIMIT:
            big = True
            break
    if big is not (held is not None) or (big and held != offsets):
        return None
    return plan, bind, storages, scalars


def replay_one(root: Node, out_shape: tuple[int, ...], device: Device) -> Storage | None:
    """``evaluate.run([root], out_shape, device)[0]`` of a root whose plan is remembered
    under its signature, in one frame (``.eval()`` of ``A @ x``, ``x - x.mean()`` in a
    loop: what the host path's test, :func:`run` and :func:`_signed_replay` do in turn,
    written out); None when anything else applies (the caller runs it: the host path,
    no plan remembered, a walk needed, capturing, recording, checking)."""
    sig = root.sig or signature_of(root)
    operands = root.operands
    # (the host path's test only where the result is small enough for it)
    if not sig or operands is None or _ev.capturing_threads[0] or _ev.recording_threads[0] \
            or _prog.CHECK_STRUCTURE_CACHE or (math.prod(out_shape) <= _host.HOST_MAX_WORK
                                               and _host.eligible((root,), out_shape, device,
                                                                  None)):
        return None
    signed = signed_of(sig, operands, root.offs, out_shape, device)
    if signed is None:
        return None
    entry = _signed.get(signed[0])
    hit = signed_pick(entry, operands, device, (), signed[3])
    if hit is None or entry is None:
        return None
    plan, offsets, storages, scalars = hit
    if offsets is None:
        offsets = signed[3]
    readies = plan.ready
    wide = entry[4] is not None
    if readies and not wide and (ready := readies.get(offsets)):
        for s in storages:  # (the general replay reports a buffer on another device)
            if s.device is not device:
                return None
        done = ready.run(storages, scalars, device)
        if done is not None:
            return done[0]
    return _flags.deferring(_replay_signed, plan, storages, scalars, device, offsets,
                            wide, True)[0]


def run_prepared(plan: _Plan, storages: list[Storage], scalars: list[np.generic], device: Any,
                 offsets: Any) -> Any:
    """Runs ``plan`` by what it prepared: its Ready for these view offsets, else its
    :class:`~fuseloop.plan_moving.Moving` (a loop over rows or elements); the result, or
    None where neither applies or runs (the caller replays in general)."""
    readies = plan.ready
    ready = readies.get(offsets) if readies else None
    if ready:
        return ready.run(storages, scalars, device)
    moving = plan.moving
    if type(moving) is Moving:
        return moving.run(storages, scalars, device, offsets)
    return None


def _replay_signed(plan: _Plan, storages: list[Storage], scalars: list[np.generic],
                   device: Device, offsets: tuple[int, ...], wide: bool,
                   tried: bool = False) -> list[Storage]:
    """:func:`_replay` of a plan found by signature (with its ``offsets``): made ready
    (:mod:`fuseloop.plan_ready`) after its first general replay, replayed so from then on
    (``tried``: the caller found that replay unable to run this call), except over
    ``wide`` buffers (past int32 byte indexing: a Ready's launches are int32); at offsets
    without a Ready of their own, by its :class:`~fuseloop.plan_moving.Moving`."""
    if wide:
        return _replay(plan, storages, scalars, device, offsets)
    if not tried:
        for s in storages:  # (the general replay reports a buffer on another device)
            if s.device is not device:
                break
        else:
            done = run_prepared(plan, storages, scalars, device, offsets)
            if done is not None:
                return done
    outs = _replay(plan, storages, scalars, device, offsets)
    # (a Ready for its first offsets; at others, a Moving for all, where it can be made)
    if not plan.ready or moving_for(plan, len(storages), device, _steps.temporaries) is None:
        ready_for(plan, offsets, len(storages), device, _params, _steps.temporaries)
    return outs


def run(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
        targets: Sequence[Target | Storage | None] | None,
        signed: tuple | None = None) -> list[Storage]:
    """:func:`fuseloop.evaluate.run_unplanned`, replayed from a plan when one is known
    (``signed``: the signed key, made by the caller: ``plan_into``)."""
    look: bool | None = True
    if signed is not None:
        pass
    elif targets is None:
        signed = _signed_key(roots, out_shape, device)
    elif (free := _free_views(roots[:1])) is not None:
        look = _target_sigs.get(free[0])
        if look is None:  # (met first: remembered after the walk, looked up from now on)
            _tables.keep(_target_sigs, free[0], True, PLANS_MAX)
        if look is not False:
            signed = _signed_key(roots, out_shape, device, targets, free)
    if signed is not None and not _prog.CHECK_STRUCTURE_CACHE:
        done = _signed_replay(signed, device) if look is not None else None
        if done is None:  # (at lengths of its own: by the signature with them as symbols)
            done = _free_replay(roots, signed, out_shape, device)
        if done is not None:
            return done
    keyed = _key(roots, out_shape, targets, device)
    if keyed is None:
        return _ev.run_unplanned(roots, out_shape, device, targets)
    key, storages, scalars, _, offs = keyed
    plan: _Plan | str | Literal[False] | None = _get(key)
    lengths = tuple(offs.lengths)
    if signed is not None and lengths:
        _remember_free(signed, out_shape, key, lengths, storages, scalars, offs.values,
                       device)
    while plan == _EXACT or plan == _EXACT_LENGTHS:  # (the key goes on with their values)
        if plan == _EXACT:
            key = (key, tuple(offs.values))
            offs.values.clear()  # (the exact key holds them: nothing to substitute)
        else:
            key = (key, lengths)
        plan = _get(key)
    owner = None
    if isinstance(plan, _Plan) and plan.lengths != lengths:
        # recorded for other lengths: its replay at any lengths, else its plan at these,
        # made before or now where its forms are known, else recorded (which may learn
        # the forms)
        base, owner = plan, _pl.owner_at(plan, roots, out_shape, device, lengths)
        done = None if _prog.CHECK_STRUCTURE_CACHE else run_grown(
            owner, storages, scalars, device, offs.values, lengths)
        if done is not None:
            return done
        plan = _plan_at(key, base, lengths, owner)
        if plan is None:
            return _record(roots, out_shape, device, targets, keyed, signed, key, base)
    if plan is None or isinstance(plan, str):  # known not to record
        return _ev.run_unplanned(roots, out_shape, device, targets)
    if signed is not None and _prog.CHECK_STRUCTURE_CACHE:
        _check_signed(signed, storages, scalars, offs.values)
    if plan is not False and not _prog.CHECK_STRUCTURE_CACHE:
        _remember_signed(signed, plan, storages, scalars, offs.values, device)
        return _replay_sized(plan, owner, storages, scalars, device, offs.values)
    return _record(roots, out_shape, device, targets, keyed, signed, key, plan)


def _plan_at(key: tuple, base: _Plan, lengths: tuple[int, ...], owner: _Plan | None
             ) -> _Plan | None:
    """The plan of ``key`` (whose plan ``base`` has other lengths) at ``lengths``: made
    before, or now where the forms of ``owner`` (the key's plan that splits as these
    lengths do: ``plan_lengths.owner_at``) are known; None where a record is needed."""
    plan = _at.get((key, lengths))
    if plan is not None:
        _tables.touch(_at, (key, lengths))
        return plan
    plan = owner if owner is None or owner.lengths == lengths else _at_lengths(owner, lengths)
    if plan is not None:
        _tables.admit(_at, (key, lengths), plan, PLANS_MAX, _at_dropped)
    return plan


def _at_lengths(plan: _Plan, lengths: tuple[int, ...]) -> _Plan | None:
    """``plan`` at other lengths of its key, where its forms say (else None): its steps
    with their parameters and output shapes at ``lengths``, as a record there has them."""
    forms = plan.forms
    if forms is None or not _pl.fits(forms, lengths):
        return None
    sized = _pl.sized(forms, plan.steps, lengths)
    if sized is None:
        return None
    allocs, at = sized
    steps = [_Step(x.program, params, shape, x.storage_refs, x.out_refs, x.scalar_refs,
                   x.offsets) for x, (params, shape) in zip(plan.steps, at)]
    for step, x in zip(steps, plan.steps):
        step.kernel = x.kernel  # (its kernel may serve these lengths: plan_steps._new_plan)
    return _Plan(allocs, steps, plan.results, lengths, plan.split)


def _record(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
            targets: Sequence[Target | Storage | None] | None, keyed: tuple,
            signed: tuple | None, key: tuple, plan: _Plan | Literal[False]) -> list[Storage]:
    """:func:`run` of an evaluation without a plan for its key and lengths: recorded,
    remembered and replayed.  ``plan``: False (none), the key's plan for other lengths
    (learns how it follows them from this record, see :mod:`fuseloop.plan_lengths`), or
    a plan to check (``CHECK_STRUCTURE_CACHE``)."""
    _, storages, scalars, slots, offs = keyed
    lengths = tuple(offs.lengths)
    checking = plan is not False and plan.lengths == lengths
    # a new structure is recorded dry (nothing enqueued), its new kernels are built
    # together (fuseloop.prebuild), and the record is replayed; a check of a cached
    # plan records for real
    rec = Recorder(storages, scalars, slots, offs, dry=not checking)
    with recording(rec):
        outs = _ev.run_unplanned(roots, out_shape, device, targets)
    _tally_record()
    result_refs = tuple(rec.ref(o) for o in outs)
    fresh = None if rec.failed or None in result_refs else _Plan(
        rec.allocs, rec.steps, result_refs, lengths)
    if fresh is not None and not checking and _pl.splits(fresh):
        fresh.split = _pl.split_of(roots, out_shape, device)
    if checking:  # checking a cached plan against a fresh record
        assert plan is not False
        if rec.exact and fresh is not None:  # (stored without offset references)
            for step in fresh.steps:
                step.offsets = ()
        assert fresh is not None and _same(plan, fresh, offs.values), ("run plan differs",
                                                                        key)
        return outs
    if plan is not False:  # the key's plan for other lengths
        if fresh is not None and not rec.exact and _pl.learn(plan, fresh):
            # (its plan at these lengths: this record)
            _tables.admit(_at, (key, lengths), fresh, PLANS_MAX, _at_dropped)
            return _replay_new(fresh, keyed, signed, device)
        _put(key, _EXACT_LENGTHS)  # (one plan per lengths from now on)
        _put((key, plan.lengths), plan)
        key = (key, lengths)
    if fresh is None:  # not replayable: evaluated for real, unplanned from now on
        _put(key, None)
        return _ev.run_unplanned(roots, out_shape, device, targets)
    if rec.exact:
        # (this plan's parameters hold offsets that the walk did not see)
        _put(key, _EXACT)
        for step in fresh.steps:
            step.offsets = ()
        key = (key, tuple(offs.values))
        offs.values.clear()
    _put(key, fresh)
    return _replay_new(fresh, keyed, signed, device)


def _replay_new(fresh: _Plan, keyed: tuple, signed: tuple | None, device: Device
                ) -> list[Storage]:
    """The first replay of a plan just recorded (dry): its kernels built together."""
    from .prebuild import build_steps_ahead, forget

    _, storages, scalars, _, offs = keyed
    built = build_steps_ahead(fresh.steps, storages, fresh.allocs, offs.values, device)
    _remember_signed(signed, fresh, storages, scalars, offs.values, device)
    try:
        return _replay(fresh, storages, scalars, device, offs.values)
    finally:
        forget(built)


def _same(a: _Plan, b: _Plan, offsets: Sequence[int] = ()) -> bool:
    if a.allocs != b.allocs or a.results != b.results or len(a.steps) != len(b.steps):
        return False
    return all(repr(x.program) == repr(y.program) and _params(x, offsets) == y.params
               and x.offsets == y.offsets
               and x.out_shape == y.out_shape and x.storage_refs == y.storage_refs
               and x.out_refs == y.out_refs and x.scalar_refs == y.scalar_refs
               for x, y in zip(a.steps, b.steps))


def _params(step: _Step, offsets: Sequence[int]) -> list[int]:
    """The step's parameters with this evaluation's view offsets."""
    if not step.offsets:
        return step.params
    params = list(step.params)
    for j, k in step.offsets:
        params[j] = offsets[k]
    return params


def _replay(plan: _Plan, storages: list[Storage], scalars: list[np.generic],
            device: Device, offsets: Sequence[int] = ()) -> list[Storage]:
    _tally_replay()
    tmps = _steps.temporaries(plan.allocs, device)
    n = len(storages)
    # (the refs as positions in one pool, worked out once per step: a replay picks each
    # step's buffers by map in C, not by a comprehension's frame and test per buffer)
    pick = [*storages, *tmps].__getitem__
    for step in plan.steps:
        if step.writes_input:
            check_pending()
        picks = step.picks
        if picks is None or picks[0] != n:
            picks = step.picks = (n, _steps.pool_refs(step.storage_refs, n),
                                  _steps.pool_refs(step.out_refs, n))
        sc = list(map(scalars.__getitem__, step.scalar_refs)) if step.scalar_refs else []
        _steps.launch_step(step, list(map(pick, picks[1])), list(map(pick, picks[2])), sc,
                           device, _params(step, offsets))
    results = plan.picks
    if results is None or results[0] != n:
        results = plan.picks = (n, _steps.pool_refs(plan.results, n))
    return list(map(pick, results[1]))


def clear() -> None:
    """Forget every plan (tests; plans hold no buffers)."""
    _plans.clear()
    _at.clear()
    _at_dropped.clear()
    _signed.clear()
    _target_sigs.clear()
    _free.clear()
    _free_keys.clear()


_caches.register("run_plans.plans", clear,
                 lambda: len(_plans) + len(_at) + len(_at_dropped) + len(_signed)
                 + len(_target_sigs) + len(_free), 6 * PLANS_MAX)
