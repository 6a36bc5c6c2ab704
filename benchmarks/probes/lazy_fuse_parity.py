"""The kernels lazy ``.eval()`` and ``fl.fuse`` run for each broad-suite workload (issue 25).

For every workload of ``fuseloop.bench.broad`` (or ``--case``), the same function is run
lazily (``.eval()``, or ``fl.compute`` for several results, as the suite's runner does) and
under ``fl.fuse``; the third call of each is recorded at the OpenCL backend: every kernel
enqueued (its generated source, global and local size, the bytes of the buffers bound to
it: an upper bound of what it moves, a view or a pooled buffer counting whole), the
kernels ``fl.stats()`` counts, the bytes the call allocated and its copies to the host
(each a wait for the device); "fuse eager": ``fl.fuse`` runs the function as Python on
each call (it writes into a fill, or uses a sort or scan).  Then the calling thread's CPU
time per call of each path (median of 7; on a CPU device a read's wait polls, and
counts).  The table says whether the two paths run the same kernels, in order.

On the CPU the GPU recipes (``gpu-coalesced``, ``gpu-rows`` of 256, ``gpu-tiled``) are
registered for it, as ``lazy_front_half.py`` does; ``--fake-gpu`` goes further: the CPU
device is presented as a 132-unit GPU to every rule (recipes by the registry's GPU
default, splits by compute units, the hand-written GPU scatters), still run by PoCL.
Sizes: ``--n`` elements (default 2^16, computed and checked against numpy), or ``--big``:
the suite's 2^24 elements (matrix order 4096) with every kernel enqueue replaced by a
no-op, so nothing is computed and results are not checked (kernels and sizes are those
of the GPU run).  ``--source CASE`` prints the two paths' sources where they differ.

    python benchmarks/probes/lazy_fuse_parity.py --big --fake-gpu [--case ...]
    python benchmarks/probes/lazy_fuse_parity.py --device gpu --big      (GPU host)
    python benchmarks/probes/lazy_fuse_parity.py --device gpu --n 16777216 --walls 30

``--walls R`` times R interleaved runs of each path as the suite does (call, then
``fl.synchronize()``): the wall time of both and until the call returns.  Where the
kernels are the same, a lazy-minus-fuse gap of the first larger than that of the second
is GPU time the host's work does not explain (the device idling between launches).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
os.environ.setdefault("FUSELOOP_HOST_PATH", "0")

import fuseloop as fl
from fuseloop import cache as _cache
from fuseloop.backends import opencl as _ocl
from fuseloop.bench.broad import BROAD, FL_OPS
from fuseloop.runtime.devices import _runtime

# {{{ the recorder (installed before any kernel object or launcher is made)

_sources: dict[int, tuple[str, str]] = {}  # id(kernel object) -> (name, source)
_bound: dict[int, dict[int, int]] = {}  # id(kernel object) -> {argument: buffer bytes}
_keep: list[Any] = []  # (kernel objects stay alive, so their ids stay theirs)
log: list[tuple[str, str, tuple, tuple, int]] | None = None  # launches of the call
allocated = [0]
reads = [0]  # copies to the host (each one a wait for the device) within the call
stamps: list[float] | None = None  # thread CPU time of each enqueue of a timed call
RUN_KERNELS = [True]
TIMED = 7


def _install() -> None:
    new_kernel = _cache.CompiledKernel.new_kernel
    set_arg, enqueue = _ocl._set_arg, _ocl._enqueue_nd_range
    backend = _ocl.OpenCLBackend
    enqueue_read = backend.enqueue_read

    def recording_new_kernel(self: Any, consts: Any = ()) -> Any:
        k = new_kernel(self, consts)
        _keep.append(k)
        _sources[id(k)] = (self.plan.name, self.plan.source)
        return k

    def recording_set_arg(k: Any, i: int, value: Any) -> Any:
        nbytes = getattr(value, "size", None) if value is not None else None
        if isinstance(nbytes, int) and not isinstance(value, np.generic):
            _bound.setdefault(id(k), {})[i] = nbytes
        return set_arg(k, i, value)

    def recording_enqueue(queue: Any, k: Any, g: Any, loc: Any, *rest: Any) -> Any:
        if stamps is not None:
            stamps.append(time.thread_time())
        if log is not None:
            name, src = _sources.get(id(k), ("?", ""))
            log.append((name, src, tuple(g), tuple(loc or ()),
                        sum(_bound.get(id(k), {}).values())))
        if RUN_KERNELS[0]:
            return enqueue(queue, k, g, loc, *rest)
        return None

    def recording_read(self: Any, *a: Any, **k: Any) -> Any:
        if log is not None:
            reads[0] += 1
        return enqueue_read(self, *a, **k)

    backend.enqueue_read = recording_read  # type: ignore[method-assign]
    _cache.CompiledKernel.new_kernel = recording_new_kernel  # type: ignore[method-assign]
    _ocl._set_arg = recording_set_arg
    _ocl._enqueue_nd_range = recording_enqueue


def _count_allocations() -> None:
    """Wrap the default device memory's ``pooled``, which its ``allocate`` and the hot
    paths' own allocation call (before any fused signature keeps it)."""
    memory = _runtime(fl.get_device()).pool
    pooled = memory.pooled

    def counting(nbytes: int) -> Any:
        if log is not None:
            allocated[0] += nbytes
        return pooled(nbytes)

    memory.pooled = counting


# }}}


def _size(wl: Any, big: bool, n: int) -> int:
    if wl.sizes:
        return wl.sizes[-1]
    if wl.kind == "matmul":
        return 4096 if big else max(64, round(n ** 0.5))
    return (1 << 24) if big else n


def _call(fn: Any) -> dict[str, Any]:
    """One call of ``fn`` recorded (launches, fl.stats()'s count, bytes allocated, reads
    to the host), then the thread CPU time of further calls (median; us): in all, and
    from the call's start to its first enqueue and from there to its last (where the
    launches are enqueued within the call, not deferred to the synchronize)."""
    global log, stamps
    fl.synchronize()
    fl.reset_stats()
    log, allocated[0], reads[0] = [], 0, 0
    try:
        result = fn()
        counted = fl.stats()["kernels_launched"]
        fl.synchronize()  # (deferred small launches are enqueued here)
    finally:
        launches, log = log, None
    times, first, spans = [], [], []
    for _ in range(TIMED):
        stamps = []
        t0 = time.thread_time()
        try:
            fn()
            t1 = time.thread_time()
        finally:
            got, stamps = stamps, None
        times.append(t1 - t0)
        if got:
            first.append(got[0] - t0)
            spans.append(got[-1] - got[0])
        fl.synchronize()
    return {"launches": launches, "counted": counted, "alloc": allocated[0],
            "reads": reads[0], "result": result, "us": statistics.median(times) * 1e6,
            "first": statistics.median(first) * 1e6 if first else None,
            "span": statistics.median(spans) * 1e6 if spans else None}


def _fetch(r: Any) -> Any:
    if isinstance(r, tuple):
        return tuple(np.asarray(v.get()) for v in r)
    return np.asarray(r.get() if hasattr(r, "get") else r)


def _walls(paths: list[Any], rounds: int) -> list[tuple[float, float]]:
    """Per path, the median wall time (us) of a call and the synchronize after it, and
    until the call returns; paths interleaved, as the suite times each run."""
    got: list[list[tuple[float, float]]] = [[] for _ in paths]
    for _ in range(rounds):
        for k, fn in enumerate(paths):
            t0 = time.perf_counter()
            r = fn()
            t1 = time.perf_counter()
            fl.synchronize()
            got[k].append(((time.perf_counter() - t0) * 1e6, (t1 - t0) * 1e6))
            del r
    return [(statistics.median(w for w, _ in g), statistics.median(h for _, h in g))
            for g in got]


def run_case(wl: Any, big: bool, n: int, walls: int = 0
             ) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(lazy record, fuse record, check) of workload ``wl``."""
    rng = np.random.default_rng(0)
    inputs = wl.make_inputs(_size(wl, big, n), rng)
    args = [fl.asarray(inputs[k]) for k in wl.inputs]
    expr = wl.peer

    def lazy() -> Any:
        res = expr(FL_OPS, *args)
        if isinstance(res, tuple):
            return fl.compute(*res)
        return res.eval() if hasattr(res, "eval") else res

    fused = fl.fuse(lambda *a: expr(FL_OPS, *a))
    records = []
    for fn in (lazy, lambda: fused(*args)):
        for _ in range(2):  # (records the plan or the trace, then replays it)
            fn()
        records.append(_call(fn))
    records[1]["eager"] = fused.eager_signatures  # (fl.fuse runs it as Python per call)
    if walls:
        for rec, wall in zip(records, _walls([lazy, lambda: fused(*args)], walls)):
            rec["wall"] = wall
    check = "-"
    if not big:
        want = wl.reference(*[inputs[k] for k in wl.inputs])
        want = want if isinstance(want, tuple) else (want,)
        bad = []
        for label, rec in zip(("lazy", "fuse"), records):
            got = _fetch(rec["result"])
            got = got if isinstance(got, tuple) else (got,)
            for g, w in zip(got, want):
                if not np.allclose(g, w, rtol=max(wl.rtol, 1e-3), atol=max(wl.atol, 1e-3)):
                    bad.append(label)
        check = "ok" if not bad else "BAD " + ",".join(bad)
    return records[0], records[1], check


def _same(a: dict[str, Any], b: dict[str, Any]) -> str:
    ka = [(s, g, loc) for _, s, g, loc, _ in a["launches"]]
    kb = [(s, g, loc) for _, s, g, loc, _ in b["launches"]]
    if ka == kb:
        return "same"
    if sorted(ka) == sorted(kb):
        return "same, reordered"
    sa, sb = {k[0] for k in ka}, {k[0] for k in kb}
    if sa == sb:
        return "same code, other grids"
    return f"differ ({len(sa - sb)} lazy-only, {len(sb - sa)} fuse-only)"


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _mb(x: float) -> str:
    return f"{x / 2**20:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs="*", default=[w.name for w in BROAD])
    ap.add_argument("--n", type=int, default=1 << 16, help="elements (matrix order: sqrt)")
    ap.add_argument("--big", action="store_true",
                    help="2^24 elements / order 4096, kernel enqueues replaced by a no-op")
    ap.add_argument("--device", default="cpu",
                    help="device spec (cpu: the GPU recipes registered for it)")
    ap.add_argument("--fake-gpu", action="store_true",
                    help="the CPU device as a 132-unit GPU (type, units, group size) for "
                         "every rule, still run by PoCL: the GPU's recipes by the registry")
    ap.add_argument("--walls", type=int, default=0,
                    help="also time this many interleaved runs of each path (not with "
                         "--big): wall us of call + synchronize | until the call returns")
    ap.add_argument("--source", help="print the differing sources of this case")
    args = ap.parse_args()
    _install()
    if args.device == "cpu" and not args.fake_gpu:
        from fuseloop.recipes import contraction, gpu_coalesced
        from fuseloop.recipes.rows import make_gpu_rows
        fl.register_recipe("cpu", gpu_coalesced, name="parity-gpu-coalesced")
        fl.register_recipe("cpu", make_gpu_rows(256), name="parity-gpu-rows",
                           kind="reduction")
        fl.register_recipe("cpu", contraction.gpu_tiled, name="parity-gpu-tiled",
                           kind="contraction")
    if args.fake_gpu:  # (its builds in this process: a compile worker finds no such device)
        os.environ["FUSELOOP_COMPILE"] = "inline"
        fl.set_device(dataclasses.replace(
            fl.set_device("cpu"), index=9132, type="gpu", compute_units=132,
            max_work_group_size=1024))
    else:
        fl.set_device(args.device)
    _count_allocations()
    by_name = {w.name: w for w in BROAD}
    cases = [args.source] if args.source else args.case
    print(f"device {fl.get_device().name}{' as a 132-unit GPU' if args.fake_gpu else ''}; "
          f"{'2^24 / 4096, enqueues no-ops' if args.big else f'n={args.n}'}; third call of "
          "each path. kernels: launches recorded (fl.stats count); MB: bytes bound to the "
          "launches' buffers (upper bound of moved) / allocated; reads: copies to the host "
          "within the call, lazy/fuse; host us: thread CPU per call, lazy/fuse; 1st: of it "
          "until the first enqueue; span: from the first enqueue to the last"
          + ("; then per path: wall us of call + synchronize | until the call returns"
             if args.walls and not args.big else ""))
    print(f"{'workload':<18} {'kernels lazy':>12} {'fuse':>7} {'MB lazy':>13} {'fuse':>13} "
          f"{'reads':>5} {'host us':>15} {'1st':>11} {'span':>11}  {'sources':<28} check")
    RUN_KERNELS[0] = not args.big
    for name in cases:
        wl = by_name[name]
        try:
            a, b, check = run_case(wl, args.big, args.n, 0 if args.big else args.walls)
        except Exception as exc:
            print(f"{name:<18} failed: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
            continue
        ka, kb = len(a["launches"]), len(b["launches"])
        ba, bb = sum(x[4] for x in a["launches"]), sum(x[4] for x in b["launches"])
        print(f"{name:<18} {ka:>7} ({a['counted']:>2}) {kb:>2} ({b['counted']:>2}) "
              f"{_mb(ba):>6}/{_mb(a['alloc']):>6} {_mb(bb):>6}/{_mb(b['alloc']):>6} "
              f"{a['reads']:>2}/{b['reads']:<2} {a['us']:>7.0f}/{b['us']:<7.0f} "
              f"{_us(a['first']):>5}/{_us(b['first']):<5} {_us(a['span']):>5}/{_us(b['span']):<5} "
              f"{_same(a, b) + (', fuse eager' if b['eager'] else ''):<28} {check}"
              + ("".join(f"  {label} {rec['wall'][0]:7.1f} | {rec['wall'][1]:6.1f}"
                         for label, rec in (("lazy", a), ("fuse", b))) if "wall" in a else ""),
              flush=True)
        if args.source:
            for label, rec in (("lazy", a), ("fuse", b)):
                print(f"--- {label}: " + ", ".join(
                    f"{nm} g={g} l={loc} {_mb(by)} MB" for nm, _, g, loc, by in rec["launches"]))
            for (na, sa, *_), (nb, sb, *_) in zip(a["launches"], b["launches"]):
                if sa != sb:
                    print(f"=== {na} (lazy) vs {nb} (fuse)")
                    sys.stdout.writelines(difflib.unified_diff(
                        sa.splitlines(True), sb.splitlines(True), "lazy", "fuse", n=2))
            for label, rec, other in (("lazy", a, b), ("fuse", b, a)):
                theirs = {x[1] for x in other["launches"]}
                for nm, src, *_ in rec["launches"]:
                    if src not in theirs and len(a["launches"]) != len(b["launches"]):
                        print(f"=== {label} only: {nm}\n{src}")


if __name__ == "__main__":
    main()
