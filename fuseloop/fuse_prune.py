"""The record of a traced function made minimal (``fl.fuse``): fewer steps, the same
results.

A traced function's record (:class:`fuseloop.tracing.Trace`'s steps) holds every
launch and host step the function asked for, in order.  Two rules drop what no result
needs, once, when the trace ends (:func:`prune`):

* **Folding a fill into its readers.**  A buffer remade per call by a fill (``fl.zeros``,
  ``fl.full``, ``zeros_like``: one element's bytes repeated) holds that element
  everywhere until something writes it.  Every kernel reading it before then reads that
  element, wherever it reads: its loads of the buffer become a literal
  (``out = zeros_like(x); out[x > t] = 3`` is ``where(x > t, 3, out)`` over the whole
  array: ``where(x > t, 3, 0)``); a masked write into it (``fl.compute(v, out=out,
  where=m)``) becomes ``where(m, v, 0)`` over the whole array.  Done only where it lets
  the fill go (the next rule): each fold is a kernel of its own to compile.
* **Dropping dead writes.**  A step whose every output a later step overwrites whole
  before any step reads it (a fill, or a kernel without error flags or atomic updates)
  is dropped: ``out = zeros(n); out[:] = x * 2`` is one launch.  Host steps (hand-written
  kernels, flag reads) are taken to read everything they touch.

What a step writes whole: a kernel's plain (contiguous, unmasked) output of as many bytes
as the buffer holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import run_plans as _rp
from .expr.ir import Lit, Op
from .expr.nodes import Storage
from .tracing import HostStep, Trace

Ref = tuple[str, int]
# entry kinds naming input buffers otherwise than by a plain load (their programs are
# left as they are)
_OTHER_SLOT_KINDS = frozenset(("ptr", "cmem", "sparse"))


def prune_trace(trace: Trace, results: Sequence[Storage | None]) -> None:
    """Make ``trace``'s finished record minimal (see the module): its steps, and its
    temporaries no step uses any more (``results``: the buffers the function returns)."""
    nbytes = ref_sizes(trace.placeholder_list, trace.temps, trace.consts)
    refs = trace.refs
    returned = {refs[id(s)] for s in results if s is not None and id(s) in refs}
    dead = {("t", k) for k in range(len(trace.temps))} - returned
    trace.steps = prune(trace.steps, nbytes, dead)
    _drop_unused_temps(trace, returned)


def prune(steps: list[Any], nbytes: dict[Ref, int], dead: set[Ref] | None = None
          ) -> list[Any]:
    """``steps`` with fills folded into their readers and dead writes dropped (see the
    module); ``nbytes``: each ref's buffer size; ``dead``: the refs no one reads after
    the last step (the temporaries not returned)."""
    steps = _fold_fills(steps, nbytes)
    return _drop_dead(steps, nbytes, set(dead or ()))


def entry_dtype(entries: Sequence[Any], ref: int) -> str:
    """The dtype character of entry ``ref`` of a program."""
    e = entries[ref]
    while True:
        kind = e.kind
        if kind in ("op", "call"):
            return e.loop[-1]
        if kind == "gather":
            e = entries[e.child]
        elif kind == "concat":
            e = entries[e.refs[0]]
        else:
            return e.dtype


def covered(step: Any, nbytes: dict[Ref, int]) -> set[Ref]:
    """The refs a step writes whole (none for a host step)."""
    if type(step) is HostStep:
        return set()
    program = step.program
    if program.mask is not None or program.chunked or program.first is not None:
        return set()
    size = math.prod(step.out_shape)
    whole = set()
    for ref, out, spec in zip(step.out_refs, program.outputs, program.out_specs):
        if spec == () and size * np.dtype(entry_dtype(program.entries, out)).itemsize \
                == nbytes[ref]:
            whole.add(ref)
    return whole


def _reads(step: Any) -> set[Ref]:
    """What a step reads: its inputs; a host step's outputs too (a hand-written kernel
    may update them), and a kernel's atomically updated outputs."""
    reads = set(step.storage_refs)
    if type(step) is HostStep:
        if step.contents is None:
            reads.update(step.out_refs)
    else:
        reads.update(r for r, spec in zip(step.out_refs, step.program.out_specs)
                     if len(spec) == 4)
    return reads


def _droppable(step: Any) -> bool:
    """Whether dropping ``step`` loses nothing but its outputs: a fill, or a kernel
    without error flags (checked gathers, scatters' checks) or atomic updates."""
    if type(step) is HostStep:
        return step.contents is not None
    program = step.program
    return not any(e.kind == "gather" for e in program.entries) and \
        all(len(spec) < 3 for spec in program.out_specs)


def _drop_dead(steps: list[Any], nbytes: dict[Ref, int], dead: set[Ref]) -> list[Any]:
    """Backwards: a ref is dead where a later step writes it whole before any read (or
    none reads it after: ``dead`` at the end).  A kernel's dead outputs are dropped from
    it; a step all of whose outputs are dead, with them."""
    kept: list[Any] = []
    for step in reversed(steps):
        outs = set(step.out_refs)
        if outs and outs <= dead and _droppable(step):
            continue
        if outs & dead and type(step) is not HostStep:
            step = _without_outputs(step, dead)
        reads = _reads(step)
        dead -= reads
        dead |= covered(step, nbytes) - reads
        kept.append(step)
    kept.reverse()
    return kept


def _without_outputs(step: Any, dead: set[Ref]) -> Any:
    """``step`` without its plain outputs in ``dead`` (a value computed beside the one
    the function uses: a mask the evaluation kept); as it is where it checks indices (a
    dropped output's gather must still report)."""
    program = step.program
    if program.chunked or program.first is not None or program.contraction is not None \
            or any(e.kind == "gather" for e in program.entries):
        return step
    keep = [k for k, (ref, spec) in enumerate(zip(step.out_refs, program.out_specs))
            if ref not in dead or len(spec) >= 3]
    if len(keep) == len(step.out_refs):
        return step
    program = program._replace(outputs=tuple(program.outputs[k] for k in keep),
                               out_specs=tuple(program.out_specs[k] for k in keep))
    return _rp._Step(program, step.params, step.out_shape, step.storage_refs,
                     tuple(step.out_refs[k] for k in keep), step.scalar_refs)


def _drop_unused_temps(trace: Trace, returned: set[Ref]) -> None:
    """Renumber ``trace``'s temporaries to those its steps still name or it returns."""
    used = {r for st in trace.steps for r in (*st.storage_refs, *st.out_refs) if r[0] == "t"}
    used |= {r for r in returned if r[0] == "t"}
    if len(used) == len(trace.temps):
        return
    order = sorted(k for _, k in used)
    new = {("t", k): ("t", j) for j, k in enumerate(order)}
    trace.temps = [trace.temps[k] for k in order]
    for key, ref in list(trace.refs.items()):
        if ref[0] == "t":
            if ref in new:
                trace.refs[key] = new[ref]
            else:
                del trace.refs[key]
    for st in trace.steps:
        st.storage_refs = tuple(new.get(r, r) for r in st.storage_refs)
        st.out_refs = tuple(new.get(r, r) for r in st.out_refs)


def _fold_fills(steps: list[Any], nbytes: dict[Ref, int]) -> list[Any]:
    """Each fill's readers up to the first step writing its buffer take the fill's
    element as a literal, where all of them can (kernels reading it by plain loads) and
    that step writes it whole (or can: a masked write whose mask's else is the fill)."""
    steps = list(steps)
    for k, fill in enumerate(steps):
        if type(fill) is not HostStep or fill.contents is None or \
                fill.contents.pattern is None:
            continue
        ref, pattern = fill.out_refs[0], fill.contents.pattern
        end, readers = _first_write(steps, k, ref)
        if end is None:
            continue
        changed = {j: steps[j] for j in (*readers, end)}
        if ref not in covered(steps[end], nbytes):
            changed[end] = _unmasked(steps[end], ref, pattern)
            if changed[end] is None or ref not in covered(changed[end], nbytes):
                continue
        for j in readers:
            changed[j] = _folded(changed[j], ref, pattern)
        if all(f is not None for f in changed.values()):
            for j, f in changed.items():
                steps[j] = f
    return steps


def _first_write(steps: list[Any], k: int, ref: Ref) -> tuple[int | None, list[int]]:
    """(the first kernel step after step ``k`` writing ``ref``, the kernel steps reading
    it up to that one, that one too where it reads it); (None, []) where a host step or
    an atomic update touches it first, or nothing writes it."""
    readers: list[int] = []
    for j in range(k + 1, len(steps)):
        st = steps[j]
        if ref not in st.storage_refs and ref not in st.out_refs:
            continue
        if type(st) is HostStep or ref in _reads(st) - set(st.storage_refs):
            return None, []
        if ref in st.storage_refs:
            readers.append(j)
        if ref in st.out_refs:
            return j, readers
    return None, []


def _unmasked(step: Any, ref: Ref, pattern: np.ndarray) -> Any:
    """A masked kernel writing ``ref`` alone (``fl.compute(..., out=, where=)``), as one
    writing it whole: ``where(mask, value, fill)``; None where it cannot (several
    outputs, checked gathers, which the mask guards, or reductions)."""
    program = step.program
    if program.mask is None or step.out_refs != (ref,) or program.out_specs != ((),) or \
            program.has_reduce or program.row_dims is not None or \
            any(e.kind == "gather" for e in program.entries):
        return None
    entries = list(program.entries)
    char = entry_dtype(entries, program.outputs[0])
    value = _literal(pattern, char)
    if value is None:
        return None
    entries.append(Lit(char, value))
    entries.append(Op("where", ("?", char, char, char),
                      (program.mask, program.outputs[0], len(entries) - 1)))
    program = program._replace(entries=tuple(entries), outputs=(len(entries) - 1,),
                               mask=None)
    return _rp._Step(program, step.params, step.out_shape, step.storage_refs,
                     step.out_refs, step.scalar_refs)


def _folded(step: Any, ref: Ref, pattern: np.ndarray) -> Any:
    """``step`` with its loads of ``ref`` read as the literal ``pattern`` (its bytes as
    the load's dtype), the buffer no longer among its inputs; None where it cannot."""
    program = step.program
    entries = list(program.entries)
    if program.contraction is not None or program.first is not None or \
            any(e.kind in _OTHER_SLOT_KINDS for e in entries):
        return None
    slots = [s for s, r in enumerate(step.storage_refs) if r == ref]
    for i, e in enumerate(entries):
        if e.kind == "load" and e.slot in slots:
            value = _literal(pattern, e.dtype)
            if value is None:
                return None
            entries[i] = Lit(e.dtype, value)
        elif e.kind == "load":  # (the slots after those gone)
            entries[i] = e._replace(slot=e.slot - sum(s < e.slot for s in slots))
    refs = tuple(r for r in step.storage_refs if r != ref)
    return _rp._Step(program._replace(entries=tuple(entries)), step.params, step.out_shape,
                     refs, step.out_refs, step.scalar_refs)


def _literal(pattern: np.ndarray, char: str) -> Any:
    """The fill's element read as dtype ``char`` (a Python number), None where the sizes
    differ or the value is not finite (no literal for it)."""
    dtype = np.dtype(char)
    raw = pattern.tobytes()
    if dtype.itemsize != len(raw):
        return None
    value = np.frombuffer(raw, dtype)[0]
    if dtype.kind == "f" and not np.isfinite(value):
        return None
    return value.item()


def ref_sizes(placeholders: list[Storage], temps: list[Storage], consts: list[Storage]
              ) -> dict[Ref, int]:
    """Each ref's buffer size."""
    sizes: dict[Ref, int] = {}
    for kind, storages in (("i", placeholders), ("t", temps), ("c", consts)):
        for k, s in enumerate(storages):
            sizes[(kind, k)] = s.nbytes
    return sizes
