"""``fl.tune``: search recipe parameter spaces on the device, store winners per kernel.

The kernels of an evaluation are found by a dry recording (as ``fl.explain``
finds them); they are then run for real once, in order, with the registry's
recipes (so temporaries hold their values).  For each kernel the candidates are
combinations of the recipe's declared spaces (:attr:`Recipe.tunable`, filtered
by its ``valid`` hook) over the parameters the kernel reads (:func:`_read_names`):
the default first, the rest in a random order, until the kernel's share of
``budget_s`` is spent.  Each candidate is built, its output checked against the
default's (the kernel's outputs are restored before each check, since a kernel
may read what it writes), then timed: the median of ``repeat`` synchronised launches after a
warm-up; a candidate with one run over :data:`SLOW_CUTOFF` times the best so far
is not timed further (it cannot win, and a pathological one would spend the
whole budget on its repeats).  Failures (build errors, wrong results) are
counted and skipped.  A
best candidate at least :data:`MIN_GAIN` faster than the default is timed again
against it, interleaved, and stored in the tuning database
(:mod:`fuseloop.tuning`) only if it is still that much faster.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import evaluate as _ev
from . import run_plans as _rp
from . import tuning
from .array import Array
from .explain import _record
from .launching import recipe_kind
from .recipes import recipe_for, use
from .runtime.devices import Device
from .runtime.transfer import finish, read

__all__ = ["KernelTuning", "TuneReport", "tune"]

#: a winner must beat the default by this fraction (timing noise on a busy machine)
MIN_GAIN = 0.03
#: relative tolerance of a candidate's floating-point results against the default's
#: (absolute: the same times the largest finite magnitude of the default's output)
TOLERANCE = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4,
             np.dtype(np.float64): 1e-9}
#: candidates per kernel at most (the budget usually ends a search first)
MAX_CANDIDATES = 256
#: spaces of at most this many combinations are enumerated; larger ones are sampled,
#: with at most SAMPLE_DRAWS draws
ENUMERATED_MAX = 1 << 16
SAMPLE_DRAWS = 64 * MAX_CANDIDATES
#: a candidate one of whose runs takes this many times the best time so far is a loser
SLOW_CUTOFF = 2.0


@dataclass
class KernelTuning:
    """What tuning one kernel found."""

    index: int
    recipe: str
    size_bucket: str
    default_s: float | None = None
    best_s: float | None = None
    best: dict[str, Any] = field(default_factory=dict)  # the winner's values; {}: default
    candidates: int = 0  # tried, the default included
    failed: int = 0  # did not build or run
    wrong: int = 0  # results differ from the default's
    same_code: int = 0  # generated the code of an earlier candidate: not run again
    seconds: float = 0.0
    stored: bool = False
    note: str = ""

    @property
    def speedup(self) -> float:
        if not self.default_s or not self.best_s:
            return 1.0
        return self.default_s / self.best_s

    def as_text(self) -> str:
        head = f"[{self.index}] {self.recipe} (sizes {self.size_bucket}): "
        if self.default_s is None:
            return head + (self.note or "not tuned")
        best = ", ".join(f"{n}={v!r}" for n, v in self.best.items()) or "the default"
        best_s = self.best_s if self.best_s is not None else self.default_s
        return (head + f"default {self.default_s * 1e3:.3f} ms, best {best_s * 1e3:.3f} ms "
                f"({self.speedup:.2f}x: {best}); {self.candidates} tried, {self.failed} "
                f"failed, {self.wrong} wrong, {self.same_code} same code; {self.seconds:.1f} s"
                + ("; stored" if self.stored else "") + (f"; {self.note}" if self.note else ""))


@dataclass
class TuneReport:
    """``fl.tune``'s result: one :class:`KernelTuning` per distinct kernel."""

    device: Device
    kernels: list[KernelTuning]
    seconds: float

    def as_text(self) -> str:
        lines = [f"tuned {len(self.kernels)} kernel(s) on {self.device.name} in "
                 f"{self.seconds:.1f} s"]
        return "\n".join(lines + [k.as_text() for k in self.kernels])

    __str__ = as_text


# ----------------------------------------------------------------------- finding kernels

def _launches(expr_or_fn: Any, args: Sequence[Any]) -> tuple[list[Any], Device]:
    """The recorded launches ``(program, bindings, outs, device)`` of the evaluation."""
    if isinstance(expr_or_fn, Array):
        exprs = [expr_or_fn, *args]
        if not all(isinstance(e, Array) for e in exprs):
            raise TypeError("fl.tune(expr, *more) takes arrays, or a function and its "
                            "arguments")
        rec, _, device = _record(exprs)
        return rec.launches, device
    if not callable(expr_or_fn):
        raise TypeError(f"fl.tune takes an array expression or a function, not "
                        f"{type(expr_or_fn).__name__}")
    from .explain import _DryRecorder

    rec = _DryRecorder()
    with _rp.recording(rec):
        result = expr_or_fn(*args)
        results = result if isinstance(result, (tuple, list)) else [result]
        for r in results:  # a lazy result: its evaluation's kernels too
            if isinstance(r, Array) and r._storage is None:
                r.eval()
    if not rec.launches:
        raise ValueError("fl.tune: the function launched no kernel (return a lazy array, "
                         "or evaluate arrays inside it)")
    return rec.launches, rec.launches[0][3]


# --------------------------------------------------------------------- running one kernel

def _out_dtype(program: Any, k: int) -> np.dtype | None:
    e = program.entries[program.outputs[k]]
    ch = e.loop[-1] if e.kind in ("op", "call") else getattr(e, "dtype", None)
    return np.dtype(ch) if isinstance(ch, str) else None


def _snapshot(outs: Sequence[Any], device: Device) -> list[np.ndarray]:
    host = []
    for s in outs:
        h = np.empty(s.nbytes, np.uint8)
        read(h, s.buffer, device)
        host.append(h)
    return host


def _restore(outs: Sequence[Any], saved: Sequence[np.ndarray], device: Device) -> None:
    from .backends import backend_for

    backend = backend_for(device)
    for s, h in zip(outs, saved):
        backend.upload(device, s.buffer, h, blocking=True)


def _run(launch: Any, recipe: Any) -> None:
    program, bindings, outs, device = launch
    with use(recipe):
        _ev.launch_now(program, bindings, outs, device)


def _one_run(launch: Any, recipe: Any) -> float:
    """Seconds of one synchronised launch."""
    t0 = time.perf_counter()
    _run(launch, recipe)
    finish(launch[3])
    return time.perf_counter() - t0


def _timed(launch: Any, recipe: Any, repeat: int, cutoff: float = float("inf")) -> float:
    """The median of ``repeat`` runs after a warm-up run; the first run (warm-up
    included) longer than ``cutoff`` seconds ends the timing and is returned."""
    t = _one_run(launch, recipe)  # warm-up (and the build, on a first use)
    if t > cutoff:
        return t
    times = []
    for _ in range(repeat):
        times.append(t := _one_run(launch, recipe))
        if t > cutoff:
            return t
    return statistics.median(times)


def _same(got: np.ndarray, want: np.ndarray, dtype: np.dtype | None) -> bool:
    if dtype is None or dtype.kind not in "fc" or got.nbytes % dtype.itemsize:
        return bool(np.array_equal(got, want))
    g, w = got.view(dtype), want.view(dtype)
    tol = TOLERANCE.get(np.dtype(dtype.char.lower() if dtype.kind == "c" else dtype), 1e-4)
    finite = np.abs(w[np.isfinite(w)])
    scale = float(finite.max()) if finite.size else 0.0
    return bool(np.allclose(g, w, rtol=tol, atol=tol * scale, equal_nan=True))


def _code(launch: Any, recipe: Any) -> tuple[Any, ...]:
    """What ``recipe`` builds for the launch: its source, launch sizes and build options
    (built, not run)."""
    program, bindings, _, device = launch
    with use(recipe):
        index_dtype, chosen, _, _ = _ev.launch_choice(program, bindings, device)
        plan = _ev.plan_launch(program, bindings.params, bindings.out_shape, index_dtype,
                               chosen, device)
    assert plan is not None
    kp = plan.compiled.plan
    return kp.source, tuple(kp.gsize), tuple(kp.lsize), tuple(kp.build_options)


def _results(launch: Any, recipe: Any, saved: list[np.ndarray]) -> list[np.ndarray]:
    _, _, outs, device = launch
    _restore(outs, saved, device)
    _run(launch, recipe)
    finish(device)
    return _snapshot(outs, device)


# -------------------------------------------------------------------------- candidates

def _read_names(launch: Any, recipe: Any) -> set[str] | None:
    """The tunable parameters of ``recipe`` that this launch's kernel reads: those one of
    whose candidates, set alone, transforms the lowered kernel otherwise than the
    default does (a recipe transform each, no code generation or build; the GPU
    contraction recipe's streaming kernel reads 5 of its 18).  None: not found out (a
    kernel of two stages, or a transform that fails: every parameter is searched)."""
    program, bindings, _, device = launch
    if program.first is not None:
        return None
    from .launching import size_class_of, user_functions
    from .lower import codegen

    index_dtype, _, n_rows, n_elem = _ev.launch_choice(program, bindings, device)
    sizes = size_class_of(recipe, program, bindings.params, n_rows, n_elem)
    try:
        with codegen.loopy_section():
            lowered = codegen.lower(program, index_dtype, recipe, user_functions, sizes,
                                    device=device)
            default = codegen.apply_recipe(lowered, recipe, device)
            read = set()
            for name, param in recipe.tunable.items():
                for value in param.space.candidates:
                    if value == recipe.values[name]:
                        continue
                    other = recipe.with_params(**{name: value})
                    if not recipe.allows(other.values, device):
                        continue
                    try:
                        changed = codegen.apply_recipe(lowered, other, device) != default
                    except Exception:  # (a value the recipe refuses here: it reads it)
                        changed = True
                    if changed:
                        read.add(name)
                        break
    except Exception:  # the default's own transform failed: search everything
        return None
    return read


def _candidates(recipe: Any, device: Device, rng: random.Random,
                read: set[str] | None = None) -> list[dict[str, Any]]:
    """Combinations of the tunable parameters' candidates (of those in ``read`` only,
    the others at their values: see :func:`_read_names`), valid on ``device``, the
    default's first, the rest in a random order (a search cut short by its budget is a
    random sample), at most :data:`MAX_CANDIDATES` of them.  A space of more than
    :data:`ENUMERATED_MAX` combinations (the GPU reduction recipe's holds ~10^8) is
    sampled, not enumerated."""
    space = recipe.tunable
    names = sorted(n for n in space if read is None or n in read)
    default = {n: recipe.values[n] for n in names}
    choices = [tuple(space[n].space.candidates) for n in names]

    def valid(values: tuple[Any, ...]) -> bool:
        combo = dict(zip(names, values))
        return combo != default and recipe.allows({**recipe.values, **combo}, device)

    if math.prod(len(c) for c in choices) <= ENUMERATED_MAX:
        picked = [v for v in itertools.product(*choices) if valid(v)]
        rng.shuffle(picked)
    else:
        seen: set[tuple[Any, ...]] = set()
        picked = []
        for _ in range(SAMPLE_DRAWS):
            if len(picked) == MAX_CANDIDATES - 1:
                break
            values = tuple(rng.choice(c) for c in choices)
            if values not in seen:
                seen.add(values)
                if valid(values):
                    picked.append(values)
    return [default, *(dict(zip(names, v)) for v in picked[:MAX_CANDIDATES - 1])]


def _tune_kernel(index: int, launch: Any, budget_s: float, repeat: int, rng: random.Random,
                 progress: Any, store: bool) -> KernelTuning:
    program, bindings, outs, device = launch
    t0 = time.perf_counter()
    base = recipe_for(device, recipe_kind(program))
    index_dtype, _, n_rows, n_elem = _ev.launch_choice(program, bindings, device)
    size_bucket = tuning.bucket(bindings.params, n_rows, n_elem)
    info = KernelTuning(index, base.name, size_bucket)
    combos = _candidates(base, device, rng, _read_names(launch, base))
    if len(combos) == 1:
        info.note = "no parameter of the recipe's space changes this kernel"
        return info
    saved = _snapshot(outs, device)
    dtypes = [_out_dtype(program, k) for k in range(len(outs))]
    default = base.with_params(**combos[0])
    want = _results(launch, default, saved)
    info.default_s = _timed(launch, default, repeat)
    codes = {_code(launch, default)}
    info.candidates = 1
    best, best_s = None, info.default_s
    for combo in combos[1:]:
        if time.perf_counter() - t0 > budget_s:
            info.note = f"budget spent after {info.candidates} of {len(combos)}"
            break
        progress.describe(f"kernel {index} ({base.name}): {info.candidates}/{len(combos)}")
        info.candidates += 1
        try:
            cand = base.with_params(**combo)
            code = _code(launch, cand)
            if code in codes:  # (a parameter this kernel does not use)
                info.same_code += 1
                continue
            codes.add(code)
            got = _results(launch, cand, saved)
        except Exception:  # a build or recipe error: the candidate is out
            info.failed += 1
            continue
        if not all(_same(g, w, d) for g, w, d in zip(got, want, dtypes)):
            info.wrong += 1
            continue
        t = _timed(launch, cand, repeat, cutoff=SLOW_CUTOFF * best_s)
        if t < best_s:
            best, best_s = combo, t
    _restore(outs, saved, device)
    if best is not None and best_s < info.default_s * (1 - MIN_GAIN):
        # timed again, interleaved with the default: a lucky sample is not a winner
        cand = base.with_params(**best)
        d2, b2 = [], []
        for _ in range(3):
            d2.append(_timed(launch, default, repeat))
            b2.append(_timed(launch, cand, repeat))
        info.default_s, best_s = statistics.median(d2), statistics.median(b2)
        if best_s < info.default_s * (1 - MIN_GAIN):
            info.best, info.best_s = dict(best), best_s
    if info.best_s is None:
        info.best_s = info.default_s
    if info.best and store:
        key = tuning.entry_key(base, tuning.structure_key(program, index_dtype), size_bucket)
        tuning.store(device, key, {
            "recipe": base.name, "version": base.version, "bucket": size_bucket,
            "params": {n: base.params[n].to_json(v) for n, v in info.best.items()},
            "default_s": info.default_s, "best_s": info.best_s,
            "candidates": info.candidates})
        info.stored = True
    info.seconds = time.perf_counter() - t0
    return info


def tune(expr_or_fn: Array | Callable[..., Any], *args: Any, budget_s: float = 30.0,
         progress: bool = True, repeat: int = 5, seed: int = 0,
         store: bool = True) -> TuneReport:
    """Search the recipe parameters of the kernels that evaluating ``expr_or_fn`` runs.

    ``expr_or_fn`` is a lazy array (``args``: more arrays evaluated with it) or a
    function called as ``fn(*args)`` under a dry recording (its lazy results are
    evaluated too).  Each distinct kernel (structure and size bucket) gets an equal
    share of ``budget_s`` seconds; every candidate's results must match the
    default's (floats within :data:`TOLERANCE`, others exactly).  Winners at least
    :data:`MIN_GAIN` faster are stored in the device's tuning database (unless
    ``store`` is false), which later evaluations and processes use without
    searching.  A progress bar goes to stderr when ``progress``.
    """
    t0 = time.perf_counter()
    launches, device = _launches(expr_or_fn, args)
    for launch in launches:  # for real, in order: temporaries hold their values
        _ev.launch_now(*launch)
    finish(device)
    seen, distinct = set(), []
    for k, (program, bindings, _, dev) in enumerate(launches):
        index_dtype, _, n_rows, n_elem = _ev.launch_choice(program, bindings, dev)
        key = (tuning.structure_key(program, index_dtype),
               tuning.bucket(bindings.params, n_rows, n_elem), recipe_kind(program))
        if key not in seen:
            seen.add(key)
            distinct.append((k, launches[k]))
    from .bench.progress import Progress  # (the bench package is not imported with fuseloop)

    bar = Progress(len(distinct), enabled=progress)
    rng = random.Random(seed)
    kernels = []
    try:
        for done, (k, launch) in enumerate(distinct):
            left = budget_s - (time.perf_counter() - t0)
            share = max(0.0, left) / (len(distinct) - done)
            bar.describe(f"kernel {k}")
            kernels.append(_tune_kernel(k, launch, share, max(1, repeat), rng, bar, store))
            bar.step()
    finally:
        bar.close()
        if any(k.stored for k in kernels):
            tuning.invalidate_plans()  # kept plans pick the winners up
    return TuneReport(device, kernels, time.perf_counter() - t0)


def show(device: Device) -> list[str]:
    """The tuning database's entries for ``device``, one line each."""
    lines = []
    for key, e in sorted(tuning.entries(device).items()):
        params = ", ".join(f"{n}={v!r}" for n, v in e.get("params", {}).items())
        gain = ""
        if e.get("default_s") and e.get("best_s"):
            gain = f" {e['default_s'] / e['best_s']:.2f}x"
        structure = key.split("|")[2][:12] if key.count("|") >= 3 else key
        lines.append(f"{e.get('recipe')} v{e.get('version')} kernel {structure} sizes "
                     f"{e.get('bucket')}: {params}{gain} ({e.get('stored_at', '?')})")
    return lines

