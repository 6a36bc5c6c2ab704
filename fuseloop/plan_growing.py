"""A run plan's replay at any lengths of its key, bound once (issue 26: statements whose
slices grow every iteration).

A loop over slices of changing length (durbin's ``y[:k] += alpha * flip(y[:k])``,
trisolv's ``x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]``) meets a new length at every
statement.  Its key's plan knows how its sizes follow the lengths (its
:class:`~fuseloop.plan_lengths.Forms`), and the general way made a plan at each length
(``run_plans._at_lengths``: steps, launch plans, a launcher with every constant bound),
kept in a table that a loop over more lengths than it holds misses every pass; each
launch then set all of the kernel's constants again.

:class:`Growing` keeps, per step, what does not change with the lengths: the parameters
that no length or offset moves, the forms of the others and of the output's rows and
size, the inputs', outputs' and scalars' getters, and per kernel (the size class a
length may choose) the constants it sets once per kernel object and the positions of
the values each launch appends to its scalars (the moved lengths, view offsets, rows
and row length), with a launcher per grid.  A replay at new lengths computes the moved
values from this call's lengths and offsets, the grid where it follows them, the size
class where the recipe has one, and keeps them by lengths (:class:`_Prepared`, up to
``PREPARED_MAX``): a loop meeting those lengths again (the next pass, another row of a
loop over rows) takes them with its offsets patched in, where no kernel's grid or size
class names an offset, and enqueues: the launcher sets only the arguments that changed.
It is made after a general replay of the plan at other lengths (whose launch plans
confirm each step's kernel under the current recipes) and learns a size class's kernel
the same way (a replay meeting an unknown class returns None: the general replay runs
it, and teaches it).  Only where a kernel's choice is the size class's alone: no
tuning database entries for its recipe (``tuning.tuned`` would choose per size bucket).
Counted as the general replay counts (a replay, and per launch a memory-cache hit and a
launch).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter, itemgetter
from typing import Any

from . import launching as _launching
from . import tuning as _tuning
from .backends import LaunchSpec
from .expr.nodes import Storage
from .expr.program import INT32_LIMIT, with_row_loops
from .flags import check_pending
from .plan_lengths import Form
from .plan_moving import _exact
from .recipe_state import current as _recipes_current
from .runtime import devices as _devices
from .runtime.devices import Device, _runtime
from .stats import cached_launches, tallies

DEFER_MAX = _launching.DEFER_MAX
_tally = cached_launches.__next__  # one memory-cache hit and one launch
_tally_replay = tallies["plans_replayed"].__next__
_nbytes = attrgetter("nbytes")
# general replays at other lengths after which no Growing is tried again
GROWING_TRIES = 4
# launchers a kernel keeps per grid (the oldest dropped beyond)
GRIDS_MAX = 64
# lengths a Growing keeps its launches prepared for (none kept beyond: see _prepare)
PREPARED_MAX = 1024
_SMALL = 4 * _launching.DEFER_MAX_ELEMENTS  # (plan_steps.launch_step's bound)

#: a form with at most two symbols, ``c * L[a] * L[b]`` with ``L`` the lengths and a
#: last 1 (``a`` or ``b`` -1 for no symbol): one expression, no loop
Flat = tuple[int, int, int]


def _flat(form: Form) -> Flat | None:
    c, ks = form
    if len(ks) > 2:
        return None
    a, b = (*ks, -1, -1)[:2]
    return c, a, b


def _product(forms: Sequence[Form]) -> Form:
    c, ks = 1, list[int]()
    for fc, fks in forms:
        c *= fc
        ks += fks
    return c, tuple(sorted(ks))


class _Kernel:
    """One kernel of a step (one size class): its fixed constants, the positions of
    the moved values among ``(*params, rows, row length)``, and a launcher per grid."""

    __slots__ = ("compiled", "consts", "families", "go", "grid_moves", "patches", "pick",
                 "spec")
    compiled: Any
    consts: Any  # (position, value) of the constants no length or offset moves
    families: dict[tuple, Any]  # (group counts, local size) -> launcher
    go: Any  # the launcher where the grid does not move (else None)
    grid_moves: bool
    # (moved value's position, offset's index) per view offset among the moved values;
    # None where the grid or the size class names an offset (new ones may need another)
    patches: tuple[tuple[int, int], ...] | None
    pick: Any  # itemgetter of the moved values (None: none)
    spec: LaunchSpec  # the launch spec but its grid


class _GStep:
    """One step: its parameters' template (moved places 0), the moved ones' forms
    (``(place, c, a, b)``) and offsets (``(place, k)``), its rows' and size's forms,
    getters, its kernels by size class (``fixed``: the recipe has no size class)."""

    __slots__ = ("fixed", "g_in", "g_out", "g_sc", "kernels", "moved", "n_scalars", "offs",
                 "offset_at", "program", "recipe", "rows", "size", "template", "writes")
    fixed: bool
    g_in: Any
    g_out: Any
    g_sc: Any
    kernels: dict[str, _Kernel]
    moved: frozenset[int]  # the places of moved parameters (lengths' and offsets')
    n_scalars: int
    offs: tuple[tuple[int, int], ...]
    offset_at: dict[int, int]  # offset's place -> its index among the view offsets
    program: Any
    recipe: Any
    rows: Flat | None  # (None: no row axes, one row per element, as launching.rows_of says)
    size: Flat
    template: list[int]
    writes: bool


#: a step's launch at some lengths: its kernel, grid and moved values, and what a
#: replay needs of the step (whether it writes a caller's buffer, its getters)
_Launch = tuple[bool, Any, Any, Any, Any, Any, Any, bool]


class _Prepared:
    """A Growing's launches at some lengths and view offsets (``launches``: per step
    ``(writes, inputs' getter, outputs', scalars', compiled kernel, launcher, moved
    values, whether its sizes and parameters are small enough to defer)``; ``bases``:
    per step, itself, its kernel and its biggest size or parameter but the offsets)."""

    __slots__ = ("allocs", "bases", "compiled", "launches", "offsets", "patchable")
    compiled: tuple[Any, ...]  # (each kernel once: all checked before the first launch)
    patchable: bool  # (no kernel's grid or size class names an offset)

    def __init__(self, offsets: tuple[int, ...], launches: list[_Launch],
                 bases: list[tuple[_GStep, _Kernel, int]], allocs: list[int],
                 known: _Prepared | None = None) -> None:
        """(``known``: these launches' at other offsets, whose kernels they share)"""
        self.offsets, self.launches, self.bases, self.allocs = offsets, launches, bases, allocs
        if known is not None:
            self.compiled, self.patchable = known.compiled, known.patchable
        else:
            self.compiled = tuple({k.compiled: None for _, k, _ in bases})
            self.patchable = all(k.patches is not None for _, k, _ in bases)


def _launch(gs: _GStep, kern: _Kernel, go: Any, moved: tuple, biggest: int) -> _Launch:
    return (gs.writes, gs.g_in, gs.g_out, gs.g_sc, kern.compiled, go, moved,
            biggest <= _SMALL)


def _patched(known: _Prepared, offsets: tuple[int, ...]) -> _Prepared | None:
    """``known`` at other view offsets: its kernels read them only as arguments."""
    launches = []
    for launch, (gs, kern, base) in zip(known.launches, known.bases):
        moved = launch[6]
        if kern.patches:
            values = list(moved)
            for t, k in kern.patches:
                values[t] = offsets[k]
            moved = tuple(values)
        biggest = max(base, *[offsets[k] for _, k in gs.offs]) if gs.offs else base
        if biggest > INT32_LIMIT:
            return None
        launches.append(_launch(gs, kern, launch[5], moved, biggest))
    return _Prepared(offsets, launches, known.bases, known.allocs, known)


class Growing:
    """One plan's replay at any lengths its forms hold for, and any view offsets."""

    __slots__ = ("allocs", "device", "forms", "n_inputs", "pins", "prepared", "results",
                 "runtime", "steps", "temporaries", "token", "varying")
    allocs: list[Flat]
    device: Device
    forms: Any
    n_inputs: int
    pins: tuple[tuple[int, int], ...]
    # lengths -> their launches, made once, at the offsets of the last call there
    prepared: dict[tuple[int, ...], _Prepared]
    results: Any
    runtime: Any
    steps: list[_GStep]
    temporaries: Any
    token: object
    varying: list[list[tuple[int, int, int, int]]]  # per step (place, c, a, b)

    @classmethod
    def make(cls, plan: Any, sized: Any, n_inputs: int, device: Device, temporaries: Any
             ) -> Growing | None:
        """``plan`` (with forms) made a :class:`Growing` from ``sized`` (a plan of its
        key at other lengths, just replayed in full on ``device``), or None where a
        step is not ready (see :func:`_step_of`) or a form has more than two symbols."""
        self = cls.__new__(cls)
        self.token = token = _recipes_current[0]
        forms = plan.forms
        if token is None or forms is None:
            return None
        allocs = [_flat(f) for f in forms.allocs]
        if None in allocs:
            return None
        self.allocs = allocs  # type: ignore[assignment]
        self.forms, self.pins, self.n_inputs = forms, forms.pins, n_inputs
        self.steps, self.varying, self.prepared = [], [], {}
        for k, (step, at) in enumerate(zip(plan.steps, sized.steps)):
            made = _step_of(step, at, forms.params[k], forms.shapes[k], n_inputs, device,
                            token)
            if made is None:
                return None
            self.steps.append(made[0])
            self.varying.append(made[1])
        n = n_inputs
        self.results = _getter(tuple(k if kind == "i" else n + k for kind, k in plan.results))
        self.temporaries, self.device, self.runtime = temporaries, device, _runtime(device)
        return self

    def learn(self, sized: Any) -> bool:
        """Take the kernels of ``sized``'s steps (just replayed in full) for their size
        classes; False where one cannot serve (the caller makes a new Growing)."""
        if self.token is not _recipes_current[0]:
            return False
        self.prepared.clear()  # (they may hold a kernel a size class now replaces)
        for gs, at in zip(self.steps, sized.steps):
            lp = at.plan
            if lp is None or lp.stamp is not self.token or lp.recipe is not gs.recipe \
                    or lp.error_arg is not None or at.device is not self.device \
                    or not _untuned(gs.recipe, gs.program, self.device):
                return False
            _learn_kernel(gs, lp, at.out_shape)
        return True

    def run(self, storages: list[Storage], scalars: list[Any], device: Device,
            offsets: Sequence[int], lengths: tuple[int, ...]) -> list[Storage] | None:
        """The plan's results at ``lengths`` and view ``offsets``, its launches enqueued;
        None when the general replay must run it (nothing was enqueued then)."""
        if self.token is not _recipes_current[0] or len(storages) != self.n_inputs \
                or device is not self.device or _devices._blocked is not None:
            return None
        prep = self.prepared.get(lengths)
        if prep is None or prep.offsets != offsets:
            prep = self._prepare(prep, offsets, lengths)
            if prep is None:
                return None
        for compiled in prep.compiled:  # (all before the first enqueue)
            if not compiled.in_cache:
                return None
        _tally_replay()
        allocs = prep.allocs
        pool = storages + self.temporaries(allocs, device) if allocs else storages
        rt = self.runtime
        deferred = rt.deferred
        for writes, g_in, g_out, g_sc, compiled, go, moved, small in prep.launches:
            if writes:  # (it writes a caller's buffer: earlier gathers' flags first)
                check_pending()
            try:
                kernel, last = compiled.plan_threads.state
            except AttributeError:  # (this thread's first launch of the kernel)
                compiled.plan_threads.state = kernel, last = compiled.thread_state()
            st = g_in(pool) if g_in else ()
            sc = (*g_sc(scalars), *moved) if g_sc else moved
            if small and st:
                small = max(map(_nbytes, st)) <= _SMALL
            args = (g_out(pool), st, sc, kernel, last)
            if small:
                deferred.append((go, args))
                if len(deferred) >= DEFER_MAX:
                    rt.flush()
            else:
                with rt.launch_lock:  # (after the deferred ones, amid no other flush)
                    if deferred:
                        rt.flush()
                    go(*args, rt.queue)
            _tally()
        return list(self.results(pool))

    def _prepare(self, known: _Prepared | None, offsets: Sequence[int],
                 lengths: tuple[int, ...]) -> _Prepared | None:
        """The launches at ``lengths`` and ``offsets``: ``known`` (made at these lengths
        and other offsets) with the offsets patched in where its kernels read offsets
        only as arguments, else made from the forms; kept while the table has room."""
        offsets = tuple(offsets)
        if known is not None and known.offsets == offsets:
            return known
        if known is not None and known.patchable:
            prep = _patched(known, offsets)
        else:
            prep = self._made(offsets, lengths)
        if prep is not None and (known is not None or len(self.prepared) < PREPARED_MAX):
            # (the table full, new lengths are not kept: a loop over more lengths than
            # it holds would drop each before its next pass, keeping none it meets again)
            self.prepared[lengths] = prep
        return prep

    def _made(self, offsets: tuple[int, ...], lengths: tuple[int, ...]) -> _Prepared | None:
        """The launches at ``lengths`` and ``offsets`` from the forms: parameters, size
        classes' kernels, grids and moved values (None: the general replay runs it)."""
        for k, n in self.pins:
            if lengths[k] != n:
                return None
        L = (*lengths, 1)
        launches, bases = list[_Launch](), list[tuple[_GStep, _Kernel, int]]()
        for gs, varying in zip(self.steps, self.varying):
            params = gs.template.copy()
            for j, c, a, b in varying:
                params[j] = c * L[a] * L[b]
            for j, k in gs.offs:
                params[j] = offsets[k]
            c, a, b = gs.size
            size = c * L[a] * L[b]
            rows = gs.rows
            if rows is None:  # (no row axes: launching.rows_of's one row per element)
                n_rows, n_elem = size, 1
            else:
                c, a, b = rows
                n_rows = c * L[a] * L[b]
                n_elem = size // n_rows if n_rows > 1 else size
            biggest = max(size, *params) if params else size
            if biggest > INT32_LIMIT:
                return None
            kern = gs.kernels.get("" if gs.fixed else _launching.size_class_of(
                gs.recipe, gs.program, params, n_rows, n_elem))
            if kern is None:
                return None  # (a size class not met yet: the general replay learns it)
            compiled = kern.compiled
            go = kern.go
            if go is None:
                go = _launcher(kern, compiled.gsize(n_rows, n_elem, params),
                               compiled.lsize(n_rows, n_elem, params))
            pick = kern.pick
            moved = pick((*params, n_rows, n_elem)) if pick is not None else ()
            base = max([size] + [p for j, p in enumerate(params) if j not in gs.offset_at])
            launches.append(_launch(gs, kern, go, moved, biggest))
            bases.append((gs, kern, base))
        allocs = []
        for c, a, b in self.allocs:
            nbytes = c * L[a] * L[b]
            if nbytes > INT32_LIMIT:
                return None
            allocs.append(nbytes)
        return _Prepared(offsets, launches, bases, allocs)


def _getter(refs: tuple[int, ...]) -> Any:
    """``refs``' items as a tuple in one C call (None for none; one ref picked twice:
    launchers read by position, never the length)."""
    return itemgetter(*refs, refs[0]) if refs else None


def _step_of(step: Any, at: Any, pforms: tuple, sforms: tuple, n: int, device: Device,
             token: object) -> tuple[_GStep, list[tuple[int, int, int, int]]] | None:
    """A :class:`_GStep` of ``step`` (the plan's) from ``at`` (the sized plan's, just
    replayed), with its moved parameters' forms; None where its launch plan is not one
    kept under ``token`` on ``device`` with int32 indexing and no error flag, its
    recipe's kernel may be tuned per size, or a form has more than two symbols."""
    lp = at.plan
    if lp is None or lp.stamp is not token or at.device is not device \
            or lp.error_arg is not None or lp.index_dtype is not _launching.INDEX_INT32 \
            or len(lp.params) != len(step.params):
        return None
    recipe = lp.recipe
    if not _untuned(recipe, step.program, device):
        return None
    gs = _GStep()
    gs.program, gs.recipe = step.program, recipe
    gs.fixed = recipe.size_class is None and step.program.first is None
    at_offsets = dict(step.offsets)
    varying, template = [], []
    for j, (p, form) in enumerate(zip(step.params, pforms)):
        if form is None or not form[1]:  # (an offset's place, or a fixed value)
            template.append(0 if j in at_offsets else p if form is None else form[0])
            continue
        flat = _flat(form)
        if flat is None:
            return None
        varying.append((j, *flat))
        template.append(0)
    row_dims = (with_row_loops(step.program) if recipe.row_loops else step.program).row_dims
    size = _product(sforms)
    rows = size if row_dims is None else _product([sforms[d] for d in row_dims])
    flat_rows, flat_size = _flat(rows), _flat(size)
    if flat_rows is None or flat_size is None:
        return None
    gs.template, gs.size = template, flat_size
    gs.rows = None if row_dims is None else flat_rows
    gs.offs = tuple(step.offsets)
    gs.offset_at = dict(gs.offs)
    gs.moved = frozenset([j for j, *_ in varying] + list(at_offsets))
    ins = tuple(k if kind == "i" else n + k for kind, k in step.storage_refs)
    outs = tuple(k if kind == "i" else n + k for kind, k in step.out_refs)
    gs.g_in, gs.g_out = _getter(ins), _getter(outs)
    gs.g_sc, gs.n_scalars = _exact(tuple(step.scalar_refs)), len(step.scalar_refs)
    gs.writes = step.writes_input
    gs.kernels = {}
    _learn_kernel(gs, lp, at.out_shape)
    return gs, varying


def _untuned(recipe: Any, program: Any, device: Device) -> bool:
    """Whether ``tuning.tuned`` answers ``recipe`` itself for ``program`` at every size
    (no database entry for its structure), so its size class alone picks its kernel."""
    db = _tuning.entries(device)
    if recipe.explicit or _tuning._suspended[0] or not db:
        return True
    head = _tuning.entry_key(recipe, _tuning.structure_key(program, _launching.INDEX_INT32),
                             "")
    return not any(key.startswith(head) for key in db)


def _moves(gs: _GStep) -> tuple[bool, bool]:
    """Whether the rows (N) and the row length (NE) of ``gs`` follow the lengths."""
    size = gs.size
    rows = size if gs.rows is None else gs.rows  # (no row axes: NE is 1)
    rows_ks = sorted(k for k in rows[1:] if k >= 0)
    size_ks = sorted(k for k in size[1:] if k >= 0)
    return bool(rows_ks), rows_ks != size_ks


def _learn_kernel(gs: _GStep, lp: Any, out_shape: tuple[int, ...]) -> None:
    """Keep ``lp``'s kernel (a general replay's launch plan of ``gs`` at some lengths)
    under its size class."""
    compiled = lp.compiled
    params = list(lp.params)
    n_rows, n_elem = _launching.rows_of(gs.program, out_shape, gs.recipe)
    sizes = "" if gs.fixed else _launching.size_class_of(gs.recipe, gs.program, params,
                                                          n_rows, n_elem)
    known = gs.kernels.get(sizes)
    if known is not None and known.compiled is compiled:
        return
    outs, bufs, scals, const_args, error_arg = _launching.arg_layout(compiled)
    rows_move, elem_moves = _moves(gs)
    moved, consts, picks = [], [], []
    n_params = len(params)
    for i, kind, idx, T in const_args:
        if (kind == 3 and idx in gs.moved) or (kind == 4 and rows_move) \
                or (kind == 5 and elem_moves):
            moved.append((i, T))
            picks.append(idx if kind == 3 else n_params if kind == 4 else n_params + 1)
        else:
            consts.append((i, T(params[idx] if kind == 3 else n_rows if kind == 4
                                else n_elem)))
    first = gs.n_scalars  # (the moved values follow the launch's own scalars)
    kern = _Kernel()
    kern.compiled = compiled
    kern.consts = tuple(consts)
    kern.pick = _exact(tuple(picks))
    kern.spec = LaunchSpec(outs, bufs, scals + tuple((i, first + t, T)
                                                     for t, (i, T) in enumerate(moved)),
                           kern.consts, (), (), False, error_arg)
    kern.families = {}
    kern.grid_moves = _names_moved(compiled, gs.moved, rows_move, elem_moves)
    kern.patches = None
    offset_picks = [(t, gs.offset_at[j]) for t, j in enumerate(picks) if j in gs.offset_at]
    if not _names_offsets(compiled, sizes, gs):
        kern.patches = tuple(offset_picks)
    kern.go = None
    if not kern.grid_moves:
        kern.go = _launcher(kern, compiled.gsize(n_rows, n_elem, params),
                            compiled.lsize(n_rows, n_elem, params))
    gs.kernels[sizes] = kern


def _names_moved(compiled: Any, moved: frozenset[int], rows: bool, elem: bool) -> bool:
    """Whether the kernel's grid expressions name a moved parameter, N or NE."""
    for e in (*compiled.plan.gsize, *compiled.plan.lsize):
        if any(int(k) in moved for k in re.findall(r"\bp\[(\d+)\]", e)):
            return True
        if (rows and re.search(r"\bN\b", e)) or (elem and re.search(r"\bNE\b", e)):
            return True
    return False


def _names_offsets(compiled: Any, sizes: str, gs: _GStep) -> bool:
    """Whether the kernel's grid or size class names a view offset's place (as
    ``launching.offset_consts`` asks; two stages' class numbers each one's own)."""
    if not gs.offs:
        return False
    if gs.program.first is not None:
        return True
    named = {int(k) for e in (*compiled.plan.gsize, *compiled.plan.lsize)
             for k in re.findall(r"\bp\[(\d+)\]", e)}
    named.update(int(k) for k in re.findall(r"\bp(\d+)\b", sizes))
    return any(j in named for j in gs.offset_at)


def _launcher(kern: _Kernel, groups: tuple[int, ...], local: tuple[int, ...]) -> Any:
    """The kernel's launcher for this grid (group counts, local size), made on first use."""
    key = (groups, local)
    go = kern.families.get(key)
    if go is None:
        glob = tuple(g * w for g, w in zip(groups, local))
        spec = replace(kern.spec, global_size=glob, local_size=local)
        go = kern.compiled.backend.launcher_family(spec)(kern.consts)
        if len(kern.families) >= GRIDS_MAX:
            kern.families.pop(next(iter(kern.families)), None)
        kern.families[key] = go
    return go


def growing_for(plan: Any, sized: Any, n_inputs: int, device: Device, temporaries: Any
                ) -> Growing | None:
    """``plan``'s :class:`Growing`, made (or taught ``sized``'s kernels) after a general
    replay of ``sized`` (a plan of its key at other lengths); after ``GROWING_TRIES``
    replays that could not make one, none is tried again (``plan.growing``: the Growing,
    or the replays that tried)."""
    known = plan.growing
    if type(known) is Growing:
        # (one that cannot learn from ``sized`` is made again only where the recipes
        # changed: a plan replayed on two devices keeps the first one's)
        if known.learn(sized) or known.token is _recipes_current[0]:
            return known
        known = None
    tries = known or 0
    if tries >= GROWING_TRIES:
        return None
    made = Growing.make(plan, sized, n_inputs, device, temporaries)
    plan.growing = made if made is not None else tries + 1
    return made


def run_grown(plan: Any, storages: list[Storage], scalars: list[Any], device: Device,
              offsets: Sequence[int], lengths: tuple[int, ...]) -> list[Storage] | None:
    """``plan``'s (None: none) :meth:`Growing.run` where it has one, else None."""
    grow = plan.growing if plan is not None else None
    if type(grow) is Growing:
        return grow.run(storages, scalars, device, offsets, lengths)
    return None
