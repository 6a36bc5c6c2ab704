"""``fl.explain``: the fusion plan of an evaluation, kernel by kernel, and how far each
kernel is from the device's limit.

The kernel list comes from a *dry recording* of the evaluation: the same code path as
``.eval()`` (:func:`fuseloop.evaluate.run`, which decides which reductions run first,
which run in two stages, how dimensions coalesce) runs with a recorder in place of the
launcher, the way :mod:`fuseloop.run_plans` records a plan, except that nothing is
enqueued.  Each recorded launch is then described from its program (what it computes),
its buffers (inputs, temporaries, results; bytes read and written), the recipe the
launch would use (its parameters and where each value comes from) and the compiled
kernel (name, grid).  With ``run=True`` the launches are replayed on the recorded
buffers and each one is timed on its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import evaluate as _ev
from . import run_plans as _rp
from .array import Array, _common_device
from .backends import backend_for
from .errors import ShapeError
from .expr.ir import operand_refs
from .expr.program import Bindings, Program
from .launching import kernel_for
from .runtime.devices import Device
from .runtime.transfer import finish
from .tuning import tuned

__all__ = ["Buffer", "Explanation", "KernelInfo", "explain"]

TEXT_LIMIT = 160  # characters of a kernel's expression text
_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/", "divide": "/",
          "power": "**", "greater": ">", "less": "<", "greater_equal": ">=",
          "less_equal": "<=", "equal": "==", "not_equal": "!=", "floor_divide": "//",
          "remainder": "%"}


def _median(values: Sequence[float]) -> float:
    from statistics import median  # (timings only: not loaded by import fuseloop)

    return median(values)
# no arithmetic: conversions, copies and selections count no flop
_NO_FLOP = frozenset({"cast", "copy", "positive", "where", "view"})


@dataclass(frozen=True)
class Buffer:
    """A buffer a kernel reads or writes: ``role`` is ``input`` (the expression's data),
    ``temporary`` (written by an earlier kernel of this evaluation) or ``result``."""

    name: str
    role: str
    nbytes: int
    reason: str = ""  # for a temporary written by this kernel: why it is materialised


@dataclass
class KernelInfo:
    """One kernel of the evaluation, in launch order."""

    index: int
    name: str
    kind: str  # "elementwise", "reduction", "contraction", "sparse"
    computes: list[str]  # one "name = expression" per output
    reads: list[Buffer]
    writes: list[Buffer]
    recipe: str
    params: dict[str, tuple[Any, str]]  # parameter -> (value, where the value comes from)
    size_class: str
    grid: tuple[tuple[int, ...], tuple[int, ...]]  # (global, local) work-items
    bytes_read: int
    bytes_written: int
    flops: int
    notes: list[str] = field(default_factory=list)
    # after explain(..., run=True)
    time_s: float | None = None
    gb_per_s: float | None = None
    gflop_per_s: float | None = None
    fraction_of_copy: float | None = None
    fraction_of_peak: float | None = None

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclass
class Explanation:
    """What ``fl.explain`` found: the kernels in launch order, and the device's copy
    bandwidth when the kernels were timed."""

    device: Device
    shape: tuple[int, ...]
    kernels: list[KernelInfo]
    timed: bool = False
    timing: str = ""
    copy_gb_per_s: float | None = None
    peak_gflop_per_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def temporaries(self) -> list[Buffer]:
        """The buffers materialised between kernels, with the reason for each."""
        return [b for k in self.kernels for b in k.writes if b.role == "temporary"]

    def as_text(self) -> str:
        lines = [f"{len(self.kernels)} kernel(s) on {self.device.name} for results of shape "
                 f"{self.shape}"]
        if self.timed:
            copy = "-" if self.copy_gb_per_s is None else f"{self.copy_gb_per_s:.3g} GB/s"
            peak = ("-" if self.peak_gflop_per_s is None
                    else f"{self.peak_gflop_per_s:.3g} GFLOP/s")
            lines.append(f"timing: {self.timing}; device copy bandwidth {copy}, float32 "
                         f"multiply-add peak {peak} (both measured)")
        for k in self.kernels:
            lines += _kernel_text(k)
        lines += self.notes
        return "\n".join(lines)

    __str__ = as_text


def _kernel_text(k: KernelInfo) -> list[str]:
    gl, lo = k.grid
    params = ", ".join(f"{n}={v!r} ({src})" for n, (v, src) in k.params.items())
    out = [f"[{k.index}] {k.name} ({k.kind}), recipe {k.recipe!r}, size class "
           f"{k.size_class or '-'}, grid global {gl} local {lo}"]
    out += [f"    computes {c}" for c in k.computes]
    out.append("    reads " + (", ".join(f"{b.name} ({b.role}, {b.nbytes} B)" for b in k.reads)
                             or "nothing"))
    for b in k.writes:
        why = f": {b.reason}" if b.reason else ""
        out.append(f"    writes {b.name} ({b.role}, {b.nbytes} B){why}")
    out.append(f"    parameters {params or '-'}")
    out.append(f"    {k.bytes_read} B read, {k.bytes_written} B written, ~{k.flops} flops")
    out += [f"    note: {n}" for n in k.notes]
    if k.time_s is not None:
        frac = ("" if k.fraction_of_copy is None
                else f", {100 * k.fraction_of_copy:.0f}% of copy bandwidth")
        if k.fraction_of_peak is not None:
            frac += f", {100 * k.fraction_of_peak:.1f}% of peak flops"
        out.append(f"    time {k.time_s * 1e6:.1f} us: {k.gb_per_s:.3g} GB/s, "
                   f"{k.gflop_per_s:.3g} GFLOP/s{frac}")
    return out


# ------------------------------------------------------------------------ the recording


class _DryRecorder(_rp.Recorder):
    """A run-plan recorder that notes launches and enqueues nothing."""

    def __init__(self) -> None:
        super().__init__([], [], {})
        self.launches: list[tuple[Program, Bindings, list[Any], Device]] = []

    def launch(self, program: Any, bindings: Bindings, outs: Sequence[Any],
               device: Device) -> None:
        self.launches.append((program, bindings, list(outs), device))


def _record(exprs: Sequence[Array]) -> tuple[_DryRecorder, list[Any], Device]:
    device = _common_device(list(exprs))
    shape = exprs[0].shape
    rec = _DryRecorder()
    with _rp.recording(rec):
        outs = _ev.run([e._node for e in exprs], shape, device)
    return rec, outs, device


# --------------------------------------------------------------------- one kernel's facts


def _param(value: Any, params: Sequence[int]) -> int:
    if isinstance(value, tuple) and value[:1] == ("p",):
        return int(params[value[1]])
    return int(value) if isinstance(value, (int, np.integer)) else 1


def _texts(prog: Program, names: dict[int, str], scalars: Sequence[Any]) -> list[str]:
    """``out<k> = expression`` per output, from the program's entries."""
    memo: dict[int, str] = {}
    e: Any
    for k, e in enumerate(prog.entries):
        kind = e[0]
        if kind == "load":
            memo[k] = names.get(e.slot, f"in{e.slot}")
        elif kind == "arg":
            memo[k] = repr(scalars[e.slot].item()) if e.slot < len(scalars) else f"s{e.slot}"
        elif kind == "lit":
            memo[k] = repr(e.value)
        elif kind == "iota":
            memo[k] = "index"
        elif kind == "ptr":  # a whole buffer passed to a user function's pointer parameter
            memo[k] = "&" + names.get(e.slot, f"in{e.slot}")
        elif kind == "cmem":  # (a marker: the buffer is read from constant memory)
            memo[k] = ""
        elif kind in ("op", "call"):
            args = [memo[r] for r in e.refs]
            name = e.name if kind == "op" else e.key
            if name in _INFIX and len(args) == 2:
                memo[k] = f"({args[0]} {_INFIX[name]} {args[1]})"
            elif name == "cast":
                memo[k] = f"{np.dtype(e.loop[-1]).name}({args[0]})"
            else:
                memo[k] = f"{name}({', '.join(args)})"
        elif kind == "reduce":
            part = " (partial: first stage)" if e.chunk is not None else ""
            memo[k] = f"{e.op}({memo[e.child]}){part}"
        elif kind == "gather":
            memo[k] = f"{memo[e.child]}[{memo[e.index]}]"
        elif kind == "sparse":
            mat = names.get(e.slots[0], f"in{e.slots[0]}")
            memo[k] = f"({e.fmt} {mat} @ {names.get(e.slots[3], f'in{e.slots[3]}')})"
        else:
            memo[k] = "concat(" + ", ".join(memo[r] for r in e.refs) + ")"
        if len(memo[k]) > TEXT_LIMIT:
            memo[k] = memo[k][:TEXT_LIMIT - 3] + "..."
    return [f"out{j} = {memo[o]}" for j, o in enumerate(prog.outputs)]


def _flops(prog: Program, params: Sequence[int], out_elems: int, n_rows: int
           ) -> tuple[int, list[str]]:
    """Arithmetic operations, each counted as often as its loop nest runs it: a reduction
    once per kept index (per row, or per output element of a contraction) and reduced
    element (per chunk element in a two-stage reduction's first stage).  Also a note per
    reduction nested in another's body (counted once per kept index, as if hoisted)."""
    entries: Any = prog.entries
    kept = out_elems if prog.contraction is not None else max(1, n_rows)
    trips = [0] * len(entries)
    for o in prog.outputs:
        trips[o] = max(trips[o], out_elems)
    total = 0
    notes = []
    inside = [False] * len(entries)  # in some reduction's body
    for k in range(len(entries) - 1, -1, -1):
        e, t = entries[k], trips[k]
        if not t:
            continue
        kind = e[0]
        kids = (e.child,) if kind == "reduce" else operand_refs(e)
        for r in kids:
            inside[r] = inside[r] or inside[k] or kind == "reduce"
        if kind == "reduce":
            n = _param(e.total if e.chunk is None else e.chunk[0], params)
            runs = min(t, kept) * n
            if inside[k] and t > kept:
                notes.append(f"{e.op} over {n} elements sits in another reduction's body: "
                             f"counted once per kept index; where the kernel recomputes it "
                             f"per outer element it does {t // kept}x that work")
            trips[e.child] = max(trips[e.child], runs)
            total += runs
        elif kind in ("op", "call"):
            if kind == "call" or e.name not in _NO_FLOP:
                total += t
            for r in e.refs:
                trips[r] = max(trips[r], t)
        elif kind == "gather":
            for r in (e.index, e.child):
                trips[r] = max(trips[r], t)
        elif kind == "concat":
            for r in e.refs:
                trips[r] = max(trips[r], t)
    return total, notes


def _why(prog: Program, later_readers: int) -> str:
    """Why a kernel's output is a temporary rather than a result."""
    entries: Any = prog.entries
    reduces = [e for e in entries if e[0] == "reduce"]
    if any(e.chunk is not None for e in reduces):
        return ("first stage of a two-stage reduction (partial results per chunk, combined "
                "by the next kernel)")
    if reduces and any(entries[o][0] != "reduce" for o in prog.outputs):
        return (f"values computed with reductions, reduced again by {later_readers} later "
                "kernel(s) (an enclosing reduction over them), so they run first")
    if reduces:
        return (f"a reduction read by {later_readers} later kernel(s) at other indices "
                "(broadcast against a larger shape), so it runs first")
    return "computed into a fresh buffer first (the target is read through another index)"


def _recipe_params(recipe: Any, device: Device) -> dict[str, tuple[Any, str]]:
    """Each parameter's value and where it comes from: database (``fl.tune``'s winner),
    explicit, device variant, derived (computed from the others), default."""
    from .recipes.core import Derived  # (loaded with the recipe: not by import fuseloop)

    variant: dict[str, Any] = {}
    best = -1
    for pred, vals in recipe.variants:
        if pred.matches(device) and pred.specificity >= best:
            variant, best = vals, pred.specificity
    out: dict[str, tuple[Any, str]] = {}
    tuned = recipe.__dict__.get("from_database", frozenset())
    for name, p in recipe.params.items():
        if name in ("size_class", "concat_chunk") and not recipe.values.get(name):
            continue
        if name in tuned:
            src = "database"
        elif name in recipe.explicit:
            src = "explicit"
        elif name in variant:
            src = "device variant"
        elif isinstance(p.default, Derived):
            src = "derived"
        else:
            src = "default"
        value = recipe.values[name]
        out[name] = (getattr(value, "__name__", value), src)
    return out


# ------------------------------------------------------------------------------- explain


def explain(*exprs: Array, run: bool = False, repeat: int = 5) -> Explanation:
    """The fusion plan of evaluating ``exprs`` together (arrays of one shape on one
    device), as :class:`Explanation`: each kernel with what it computes, the buffers it
    reads and writes (temporaries with the reason they are materialised), its recipe
    and parameters, bytes, a flop estimate and its grid.

    Runs nothing unless ``run``: then each kernel is replayed ``repeat`` times on its
    own and timed (wall time around a launch and a wait), giving GB/s, GFLOP/s and the
    fraction of the device's copy bandwidth (measured once per device).
    """
    if not exprs:
        raise TypeError("fl.explain needs at least one array expression")
    if not all(isinstance(e, Array) for e in exprs):
        kinds = sorted({type(e).__name__ for e in exprs if not isinstance(e, Array)})
        raise TypeError(f"fl.explain takes fuseloop arrays, not {', '.join(kinds)}")
    shapes = {e.shape for e in exprs}
    if len(shapes) != 1:
        raise ShapeError(f"fl.explain evaluates expressions of one shape; these differ: "
                         f"{sorted(shapes)}")
    if all(e._storage is not None for e in exprs):
        ex = Explanation(_common_device(list(exprs)), exprs[0].shape, [])
        ex.notes.append("the arrays are already computed: evaluating them runs no kernel")
        return ex
    rec, outs, device = _record(exprs)
    kernels = _describe(rec, outs, device)
    ex = Explanation(device, exprs[0].shape, kernels)
    if run:
        _time(ex, rec, max(1, repeat))
    return ex


def _describe(rec: _DryRecorder, outs: list[Any], device: Device) -> list[KernelInfo]:
    results = {id(o): f"result{k}" for k, o in enumerate(outs)}
    written: dict[int, str] = {}  # temporaries by buffer, named t<k>
    inputs: dict[int, str] = {}
    kernels = []
    for i, (prog, b, kouts, _) in enumerate(rec.launches):
        if prog.first is not None:  # (both stages of a split reduction in this launch)
            for s in kouts[prog.first.n_outputs:]:
                written.setdefault(id(s), f"t{len(written)}")
        reads = []
        for s in b.storages:
            if id(s) in written:
                reads.append(Buffer(written[id(s)], "temporary", s.nbytes))
            elif id(s) in results:
                reads.append(Buffer(results[id(s)], "result", s.nbytes))
            else:
                name = inputs.setdefault(id(s), f"x{len(inputs)}")
                reads.append(Buffer(name, "input", s.nbytes))
        later = rec.launches[i + 1:]
        writes = []
        n_own = len(kouts) if prog.first is None else prog.first.n_outputs
        for j, s in enumerate(kouts):
            if id(s) in results:
                writes.append(Buffer(results[id(s)], "result", s.nbytes))
                continue
            name = written.setdefault(id(s), f"t{len(written)}")
            n_later = sum(any(x is s for x in lb.storages) for _, lb, _, _ in later)
            why = _why(prog._replace(first=None), n_later) if j < n_own else _JOINED_PARTIALS
            writes.append(Buffer(name, "temporary", s.nbytes, why))
        kernels.append(_kernel_info(i, prog, b, reads, writes, device))
    return kernels


_JOINED_PARTIALS = ("first stage of a two-stage reduction (partial results per chunk, "
                    "combined in the same launch by the work-group that finishes last)")


def _stages(prog: Program, b: Bindings, reads: list[Buffer], writes: list[Buffer],
            n_rows: int) -> tuple[list[str], int, list[str]]:
    """What a launch computes, its flops and their notes; for both stages of a split
    reduction in one launch (``prog.first``), the first stage's lines (its outputs named
    by their temporaries) before the combining stage's."""
    names = {k: r.name for k, r in enumerate(reads)}
    first = prog.first
    if first is None:
        flops, notes = _flops(prog, b.params, math.prod(b.out_shape), n_rows)
        return _texts(prog, names, b.scalars), flops, notes
    combining = prog._replace(first=None)
    texts = _texts(combining, names, b.scalars[:first.n_scalars])
    flops, notes = _flops(combining, b.params[:first.n_params], math.prod(b.out_shape), 1)
    rows = first.n_params + first.first_params
    params1 = b.params[first.n_params:rows]
    names1 = {k - first.n_storages: n for k, n in names.items() if k >= first.n_storages}
    lines1 = _texts(first.program, names1, b.scalars[first.n_scalars:])
    partials = writes[first.n_outputs:]
    lines1 = [f"{t.name} = {line.split(' = ', 1)[1]}" for t, line in zip(partials, lines1)]
    pieces = b.params[rows]  # (the first stage's rows: one partial result each)
    flops1, notes1 = _flops(first.program, params1, pieces, pieces)
    return lines1 + texts, flops + flops1, notes1 + notes


def _kernel_info(i: int, prog: Program, b: Bindings, reads: list[Buffer],
                 writes: list[Buffer], device: Device) -> KernelInfo:
    index_dtype, recipe, n_rows, n_elem = _ev.launch_choice(prog, b, device)
    kernel = kernel_for(prog, index_dtype, device, recipe, b.params, n_rows, n_elem)
    # (kernel_for applies the tuning database's winner: show that recipe's parameters)
    recipe = tuned(recipe, prog, index_dtype, device, b.params, n_rows, n_elem)
    local = tuple(kernel.lsize(n_rows, n_elem, b.params))
    groups = kernel.gsize(n_rows, n_elem, b.params)
    sizes = recipe.size_class(prog, b.params, n_rows, n_elem) if recipe.size_class else ""
    computes, flops, notes = _stages(prog, b, reads, writes, n_rows)
    return KernelInfo(
        index=i, name=kernel.plan.name, kind=recipe.kind, computes=computes,
        reads=reads, writes=writes, recipe=recipe.name,
        params=_recipe_params(recipe, device), size_class=sizes,
        grid=(tuple(g * w for g, w in zip(groups, local)), local),
        bytes_read=sum(r.nbytes for r in reads), bytes_written=sum(w.nbytes for w in writes),
        flops=flops, notes=notes)


# -------------------------------------------------------------------------------- timing

_copy_bandwidth: dict[int, tuple[Device, float]] = {}


def copy_bandwidth(device: Device) -> float:
    """GB/s of a buffer-to-buffer copy on ``device`` (read plus write), measured on first
    use (median of 5 copies of up to 64 MiB) and kept for the process."""
    hit = _copy_bandwidth.get(device.index)
    if hit is not None and hit[0] is device:
        return hit[1]
    backend = backend_for(device)
    nbytes = int(min(64 << 20, device.global_mem_size // 16))
    a = backend.allocate(device, nbytes)
    c = backend.allocate(device, nbytes)
    times = []
    for k in range(7):
        t0 = time.perf_counter()
        backend.copy(device, c, a, nbytes)
        backend.finish(device)
        if k >= 2:  # two warm-up copies (first touch of the pages)
            times.append(time.perf_counter() - t0)
    gbs = 2 * nbytes / _median(times) / 1e9
    _copy_bandwidth[device.index] = (device, gbs)
    return gbs


# (explicit vectors: PoCL does not vectorise the loop across work-items; other backends'
# C has no vector arithmetic, so there the chains are scalars)
_PEAK_VECTOR = """
__kernel void fl_peak(__global float *out, float b, float c, int iters) {
    float8 a0 = (float8)(get_global_id(0) * 1e-9f), a1 = a0 + 1.0f, a2 = a0 + 2.0f;
    float8 a3 = a0 + 3.0f, a4 = a0 + 4.0f, a5 = a0 + 5.0f, a6 = a0 + 6.0f, a7 = a0 + 7.0f;
    for (int i = 0; i < iters; ++i) {
        a0 = a0 * b + c; a1 = a1 * b + c; a2 = a2 * b + c; a3 = a3 * b + c;
        a4 = a4 * b + c; a5 = a5 * b + c; a6 = a6 * b + c; a7 = a7 * b + c;
    }
    float8 s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    out[get_global_id(0)] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7;
}
"""
_PEAK_SCALAR = """
__kernel void fl_peak(__global float *out, float b, float c, int iters) {
    float a[16];
    for (int j = 0; j < 16; ++j)
        a[j] = get_global_id(0) * 1e-9f + j;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
            a[j] = a[j] * b + c;
    }
    float s = 0;
    for (int j = 0; j < 16; ++j)
        s += a[j];
    out[get_global_id(0)] = s;
}
"""
_peak: dict[int, tuple[Device, float]] = {}


def peak_gflops(device: Device) -> float:
    """GFLOP/s of float32 multiply-adds on ``device``: 64 (OpenCL: eight ``float8``) or 16
    independent chains per work-item over enough work-items to fill the device (median of
    5 runs), measured on first use and kept for the process.  A measured ceiling, not the
    data sheet's."""
    hit = _peak.get(device.index)
    if hit is not None and hit[0] is device:
        return hit[1]
    backend = backend_for(device)
    cpu = device.type == "cpu"
    items = max(1, device.compute_units) * (4 if cpu else 2048)
    local = None if cpu else (256,)
    iters = 65536 if cpu else 1024
    vector = backend.language == "opencl"
    program = backend.build_source(device, _PEAK_VECTOR if vector else _PEAK_SCALAR, [],
                                   ["fl_peak"])
    kernel = backend.kernel(program, "fl_peak")
    out = backend.allocate(device, 4 * items)
    args = [out, np.float32(0.999999), np.float32(1e-6), np.int32(iters)]
    times = []
    for k in range(7):
        t0 = time.perf_counter()
        backend.launch(device, kernel, (items,), local, args)
        backend.finish(device)
        if k >= 2:
            times.append(time.perf_counter() - t0)
    chains = 64 if vector else 16
    gflops = 2 * chains * iters * items / _median(times) / 1e9
    _peak[device.index] = (device, gflops)
    return gflops


def _time(ex: Explanation, rec: _DryRecorder, repeat: int) -> None:
    """Replay the launches in order (compiles, fills the temporaries), then time each."""
    device = ex.device
    for prog, b, kouts, _ in rec.launches:
        _ev.launch_now(prog, b, kouts, device)
    finish(device)
    copy = copy_bandwidth(device)
    peak = peak_gflops(device)
    for k, (prog, b, kouts, _) in zip(ex.kernels, rec.launches):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            _ev.launch_now(prog, b, kouts, device)
            finish(device)
            times.append(time.perf_counter() - t0)
        k.time_s = _median(times)
        k.gb_per_s = k.bytes_moved / k.time_s / 1e9
        k.gflop_per_s = k.flops / k.time_s / 1e9
        k.fraction_of_copy = k.gb_per_s / copy
        k.fraction_of_peak = k.gflop_per_s / peak
    ex.timed, ex.copy_gb_per_s, ex.peak_gflop_per_s = True, copy, peak
    ex.timing = (f"wall time of one launch and a wait, median of {repeat} (the queue has no "
                 "profiling; includes the host's launch overhead)")
