"""Issue 29 figures: one array split over several devices against one device, same run.

Workloads (float32, inputs made on the devices by ``fl.random``, nothing uploaded):

* ``2*x - sin(y) + x*y`` over ``2**log2n`` elements: GB/s counting two reads and one
  write; each part is one fused kernel on its device.
* ``fl.sum(x*y)``: GB/s counting two reads; partial sums per device, copied to the
  first device and added there (CUDA peer copies, OpenCL devices of one context), else
  read and added on the host.  Timed with the result read (``.get()``, on one device
  too: what a user of the sum waits for; ``--no-read``: ``.eval()`` only, as before
  session 8).
* a 2-D 5-point stencil step ``u + 0.1 * laplacian(u)`` on a ``2**grid_log2`` square
  grid: GB/s counting one read and one write; with several devices each step copies
  the halo rows (one above and one below each inner boundary): peer to peer between
  CUDA devices, on the source's queue between OpenCL devices of one context, else
  through the host.
* ten such steps, each on the last one's result, with one wait at the end (``stencil
  ... x10 steps``): what a time-stepping loop sees, the host enqueueing a step while
  the devices run the one before (where nothing makes it wait: see ``+chained``).

Each is timed on the first listed device alone (an ordinary array) and on all listed
devices (a ``fl.MultiArray``), and the ratio of throughputs is printed.  Devices:
``--devices`` (device sets separated by ``;``, each comma-separated specs as
``fl.device`` takes them; one may repeat), default one set per backend: every GPU of
that backend ``fl.devices(type="gpu")`` lists (so CUDA and OpenCL are measured in one
run, one table).  Where CuPy is installed the table has CuPy's figure on the first GPU
too (unfused: ``2*x - cp.sin(y) + x*y``, ``cp.sum(x*y)``), the peer.  OpenCL GPUs get a
context each unless ``FUSELOOP_OPENCL_SHARED_CONTEXT=1`` (one context per platform:
partial sums and halos copied between the devices); ``--other-contexts`` runs the OpenCL
sets again in a child process with the other rule, for the comparison.  On a
CPU, ``--devices 0,0`` shows the machinery works: the parts share one device, so the
figures say nothing about speed-up (``POCL_DEVICES="pthread pthread"`` gives two PoCL
devices of one platform).  Usage::

    python benchmarks/bench_multigpu.py [--devices SETS] [--log2n 30] [--grid-log2 14]
        [--repeat 5] [--weights equal|measure] [--trace] [--other-contexts] [--variants]
        [--no-read] [--sync devices|all] [--out FILE.json]

    # every GPU, through CUDA and through OpenCL, one table (+ OpenCL with the other context rule):
    python benchmarks/bench_multigpu.py --trace --other-contexts
    # 2 of the GPUs, both backends:
    python benchmarks/bench_multigpu.py --devices "cuda:0,cuda:1;opencl:0,opencl:1"

``--variants`` times each split workload again with each of the split path's
selectable mechanisms off in turn, then all off (rows ``-pinned``, ``-deferred``,
``-calls``, ``-all``; see :data:`VARIANTS`), with those off by default on
(``+chained``), then
with all on again (``again``: the drift), in the same run, against the same one-device time.

``--trace`` then shows where a split call's time goes, per workload: the host time to
build the expression and to enqueue every part, when each part was enqueued, when
each device finished (markers polled on every device in turn), and each part's work
timed alone on its device.  With parts of equal work, the wall time should be the
last enqueue plus one part's alone time; a device finishing late, or enqueued late,
names the serialisation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.runtime.devices import find_device

LAPLACE = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
#: stencil steps of the pipelined stencil workload (one wait at the end)
STEPS = 10


def _inputs(shape: Any, where: Any) -> tuple[Any, Any]:
    """x, y on one device (``where`` a Device) or split (``where`` a list)."""
    with fl.device(where):
        x = fl.random.uniform(shape, dtype=np.float32, key=1).eval()
        y = fl.random.uniform(shape, dtype=np.float32, key=2).eval()
    return x, y


def _sample(a: Any, rows: int = 4096) -> np.ndarray:
    """The first rows (split or not) as a numpy array."""
    return a[:rows].get()


#: what a timed call waits for after it: ``"devices"``, the devices its arrays are on;
#: ``"all"``: ``fl.synchronize()``, every device the process opened (``--sync``)
SYNC = "devices"


def _sync_for(arrays: tuple) -> Callable[[], None]:
    """The wait after a timed call on ``arrays``: every device they are on, each handed
    its queue before the first is waited for (as ``fl.synchronize`` does, but not the
    devices of the other sets and backends the run opened, which are idle: on 8 GPUs a
    wait apiece added to every call of either side)."""
    if SYNC == "all":
        return fl.synchronize
    from fuseloop.expr.nodes import register_readers
    from fuseloop.runtime.devices import _runtime
    from fuseloop.runtime.transfer import finish

    found: dict[int, Any] = {}
    for a in arrays:
        for d in a.devices if isinstance(a, fl.MultiArray) else (a.device,):
            found.setdefault(d.index, d)
    devices = list(found.values())

    def sync() -> None:
        register_readers()  # (unheld lazy arrays' buffers let go, as fl.synchronize)
        for d in devices:
            rt = _runtime(d)
            rt.flush()
            rt.submit(rt.queue)
        for d in devices:
            finish(d)

    return sync


def _time(fn: Callable[[], Any], repeat: int, arrays: tuple = ()) -> float:
    return median_time(fn, _sync_for(arrays) if arrays else fl.synchronize, repeat)


class Workload:
    """One workload: ``nbytes`` moved per call; ``inputs(where)`` makes its arrays,
    ``build(*arrays)`` its expression (lazy, or a reduction's result), and
    ``part(k, *arrays)`` what part ``k`` of a split call computes on its own device when
    ``build`` is not lazy (None: part ``k`` of the lazy split expression); ``read``: a
    call reads its result (``.get()``), else evaluates it (``.eval()``)."""

    def __init__(self, name: str, nbytes: int, inputs: Callable[[Any], tuple],
                 build: Callable[..., Any], part: Callable[..., Any] | None = None,
                 read: bool = False) -> None:
        self.name, self.nbytes, self.inputs, self.build, self.part, self.read = \
            name, nbytes, inputs, build, part, read

    def call(self, arrays: tuple) -> Any:
        r = self.build(*arrays)
        return r.get() if self.read else r.eval()


#: the split path's selectable mechanisms (module, attribute: the value that turns it
#: off), by the name of the ``--variants`` row that times the split call without it
VARIANTS: dict[str, list[tuple[str, str, Any]]] = {
    # OpenCL GPUs' partial sums and halo rows read into page-locked slots (into
    # ordinary memory instead: NVIDIA's driver may finish each read before returning)
    "-pinned": [("fuseloop.backends.opencl_staging", "PINNED_READS", "0")],
    # halo uploads through the host waited for in the stencil call (on GPUs they are
    # left to each device's deferred work, the wait taken at each part's launch)
    "-deferred": [("fuseloop.multi.uploads", "DEFERRED_UPLOADS", "0")],
    # a full reduction's partials copied to the first device and combined there by a
    # kernel (where copies need no host: CUDA peers) instead of read behind each kernel
    "-devicecombine": [("fuseloop.multi.reduce", "HOST_COMBINE", "0")],
}
# a split call's parts staged from its kept call in one look-up, and a kept combine on
# the first device (each part looked up on its own instead: no call found or kept)
VARIANTS["-calls"] = [("fuseloop.multi.calls", "found", lambda tag, parts: (None, None, None))]
VARIANTS["-all"] = [item for items in list(VARIANTS.values()) for item in items]
# (a mechanism off by default, turned on: not part of -all)
# halo rows through the host written by writes the GPUs hold back until the reads are
# done (OpenCL, a context per device): the host waits for no halo read
VARIANTS["+chained"] = [("fuseloop.backends.opencl_staging", "HALO_EVENTS", "auto")]
VARIANTS["again"] = []  # (every mechanism on, timed last: the drift over the variants)


def _with_settings(settings: list[tuple[str, str, Any]], fn: Callable[[], Any]) -> Any:
    """``fn()`` with the module attributes set as ``settings`` say, then restored."""
    import importlib

    saved = []
    for module, name, value in settings:
        m = importlib.import_module(module)
        saved.append((m, name, getattr(m, name)))
        setattr(m, name, value)
    try:
        return fn()
    finally:
        for m, name, value in saved:
            setattr(m, name, value)


def _measure(w: Workload, arrays: tuple, repeat: int) -> tuple[float, np.ndarray]:
    """Seconds per call of ``w`` on ``arrays``, and a sample of its result."""
    t = _time(lambda: w.call(arrays), repeat, arrays)
    r = w.build(*arrays).eval()
    return t, np.asarray(r.get() if r.ndim == 0 else _sample(r), np.float64)


def run_case(w: Workload, devs: list[Any], repeat: int, weights: Any,
             trace: bool, variants: bool = False) -> dict[str, Any]:
    """One workload on the first device, then on all of them; the results compared
    (``variants``: the split call timed again per :data:`VARIANTS` entry)."""
    t1, check1 = _measure(w, w.inputs(devs[0]), repeat)
    fl.synchronize()
    with fl.device(devs, weights=weights) as dset:
        arrays = w.inputs(dset)
    tk, checkk = _measure(w, arrays, repeat)
    ok = np.allclose(check1, checkk, rtol=1e-4, atol=1e-4)
    row = dict(workload=w.name, one=w.nbytes / t1 / 1e9, all=w.nbytes / tk / 1e9, ok=bool(ok),
               one_ms=t1 * 1e3, all_ms=tk * 1e3)
    row["ratio"] = row["all"] / row["one"]
    if variants:
        row["variants"] = {}
        for name, settings in VARIANTS.items():
            tv, checkv = _with_settings(settings,
                                        lambda a=arrays: _measure(w, a, repeat))
            row["variants"][name] = dict(
                all=w.nbytes / tv / 1e9, all_ms=tv * 1e3, ratio=t1 / tv,
                ok=bool(np.allclose(check1, checkv, rtol=1e-4, atol=1e-4)))
    if trace:
        row["trace"] = trace_case(w, arrays, repeat)
    del arrays
    fl.synchronize()
    return row


# {{{ --trace: where a split call's time goes


def _done_times(devices: list[Any]) -> dict[int, float]:
    """perf_counter() at which each device's queue was seen empty (a marker polled on
    every device in turn: no device's completion waits for another's)."""
    from fuseloop.runtime.devices import _runtime

    markers = {}
    for d in devices:
        rt = _runtime(d)
        rt.flush()
        markers[d.index] = (rt, rt.marker(rt.queue))
        rt.submit(rt.queue)
    done: dict[int, float] = {}
    while len(done) < len(markers):
        for index, (rt, event) in markers.items():
            if index not in done and rt.event_status(event) <= 0:
                done[index] = time.perf_counter()
    return done


def trace_case(w: Workload, arrays: tuple, repeat: int) -> dict[str, Any]:
    """One split call traced (host time to build and enqueue, each part's enqueue time,
    each device's completion), and each part's work timed alone on its device."""
    from fuseloop.multi import trace
    from fuseloop.runtime.transfer import finish

    split = next(a for a in arrays if isinstance(a, fl.MultiArray))
    devices = list({d.index: d for d in split.devices}.values())
    fl.synchronize()
    with trace.tracing() as events:
        t0 = time.perf_counter()
        out = w.build(*arrays)
        built = time.perf_counter()
        out.eval()
        enqueued = time.perf_counter()
        done = _done_times(devices)
    del out
    alone = []
    for k, d in enumerate(split.devices):
        times = []
        for _ in range(max(2, repeat)):
            # the split call's own part k (its halos already copied) where the call is
            # lazy; a reduction's partial result on the part otherwise
            lazy = w.build(*arrays) if w.part is None else None
            fl.synchronize()
            s = time.perf_counter()
            if lazy is not None:
                lazy.parts[k].eval()
            else:
                w.part(k, *arrays)
            finish(d)
            times.append(time.perf_counter() - s)
            del lazy
        alone.append(float(np.median(times[1:])))
    fl.synchronize()
    ms = 1e3
    return dict(
        build_ms=(built - t0) * ms, enqueue_ms=(enqueued - t0) * ms,
        wall_ms=(max(done.values()) - t0) * ms,
        parts=[dict(part=k, device=d.index, rows=hi - lo, alone_ms=alone[k] * ms,
                    enqueued_ms=next(((t - t0) * ms for e, p, _, t in events
                                      if e == "enqueued" and p == k), None),
                    done_ms=(done[d.index] - t0) * ms)
               for k, (d, lo, hi) in enumerate(zip(split.devices, split.bounds,
                                                   split.bounds[1:]))],
        events=[(e, p, i, (t - t0) * ms) for e, p, i, t in events])


def print_trace(name: str, tr: dict[str, Any]) -> None:
    print(f"\ntrace of one split call: {name} (ms from the call's start)")
    print(f"  host: expression built {tr['build_ms']:.3f}, every part enqueued "
          f"{tr['enqueue_ms']:.3f}; last device done {tr['wall_ms']:.3f}")
    print(f"  {'part':>4s} {'device':>6s} {'rows':>11s} {'enqueued':>9s} {'done':>9s} "
          f"{'alone':>9s}")
    for p in tr["parts"]:
        enq = "-" if p["enqueued_ms"] is None else f"{p['enqueued_ms']:.3f}"
        print(f"  {p['part']:4d} {p['device']:6d} {p['rows']:11d} {enq:>9s} "
              f"{p['done_ms']:9.3f} {p['alone_ms']:9.3f}")
    phases = [e for e in tr["events"] if e[1] < 0]  # (a split stencil's phases)
    if phases:
        print("  phases: " + ", ".join(f"{e} at {t:.3f}" for e, _, _, t in phases))
    reads = [e for e in tr["events"] if e[0].startswith("read")]
    if reads:
        print("  reads: " + ", ".join(f"{e} part {p} at {t:.3f}" for e, p, _, t in reads))


# }}}


def _cupy_peer(n: int, repeat: int, read: bool = True) -> dict[str, float]:
    """CuPy's GB/s on its current GPU for the first two workloads (empty: no CuPy/GPU);
    ``read``: the sum read as fuseloop's is."""
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
    except Exception:  # (no CuPy, or no CUDA device)
        return {}
    def ew(x: Any, y: Any) -> Any:
        return 2 * x - cp.sin(y) + x * y

    def dot(x: Any, y: Any) -> Any:
        return cp.sum(x * y).get() if read else cp.sum(x * y)

    def timed(fn: Callable[..., Any]) -> float:  # (the inputs die on return)
        x, y = cp.random.random(n, dtype=cp.float32), cp.random.random(n, dtype=cp.float32)
        return median_time(lambda: fn(x, y), cp.cuda.runtime.deviceSynchronize, repeat)

    t_ew, t_dot = timed(ew), timed(dot)
    cp.get_default_memory_pool().free_all_blocks()
    return {"2*x - sin(y) + x*y": 12 * n / t_ew / 1e9, "sum(x*y)": 8 * n / t_dot / 1e9}


def _device_sets(spec: str | None) -> list[list[Any]]:
    if spec:
        return [[find_device(s.strip()) for s in group.split(",")]
                for group in spec.split(";") if group.strip()]
    gpus = fl.devices(type="gpu")
    by_backend: dict[str, list[Any]] = {}
    for d in gpus:
        by_backend.setdefault(d.backend, []).append(d)
    return list(by_backend.values())


def _other_contexts(sets: list[list[Any]], argv: list[str]) -> None:
    """The OpenCL sets again, in a child process with the other context rule
    (``FUSELOOP_OPENCL_SHARED_CONTEXT`` flipped: a shared context copies partial results
    and halos between the GPUs, a context per device through the host)."""
    import os
    import subprocess

    opencl = [s for s in sets if all(d.backend == "opencl" for d in s)
              and len({d.index for d in s}) > 1]
    if not opencl:
        print("\n(--other-contexts: no OpenCL set of several devices)")
        return
    specs = ";".join(",".join(str(d.index) for d in s) for s in opencl)
    rest, skip = [], False
    for a in argv:  # (the same options, but these sets, no cupy peer, no recursion)
        if skip:
            skip = False
            continue
        if a in ("--devices", "--out"):
            skip = True
            continue
        if a.startswith(("--devices=", "--out=")) or a == "--other-contexts":
            continue
        rest.append(a)
    from fuseloop.backends.opencl import shared_contexts

    flipped = "0" if shared_contexts() else "1"
    print(f"\nOpenCL with FUSELOOP_OPENCL_SHARED_CONTEXT={flipped}:", flush=True)
    env = dict(os.environ, FUSELOOP_OPENCL_SHARED_CONTEXT=flipped)
    subprocess.run([sys.executable, __file__, "--devices", specs, "--no-peer", *rest],
                   env=env, check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default=None,
                   help="device sets separated by ';', each comma-separated device specs "
                        "(default: every GPU, one set per backend)")
    p.add_argument("--log2n", type=int, default=30)
    p.add_argument("--grid-log2", type=int, default=14)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--weights", choices=("equal", "measure"), default="equal")
    p.add_argument("--out", default=None)
    p.add_argument("--trace", action="store_true",
                   help="after timing, trace one split call per workload: host time to "
                        "build and enqueue, each part's enqueue time, each device's "
                        "completion, each part's work timed alone on its device")
    p.add_argument("--other-contexts", action="store_true",
                   help="then run the OpenCL sets again with the other context rule "
                        "(shared / one per device)")
    p.add_argument("--no-peer", action="store_true", help="no CuPy figure")
    p.add_argument("--variants", action="store_true",
                   help="time each split workload again with each selectable mechanism "
                        "of the split path off, then all off (same run)")
    p.add_argument("--sync", choices=("devices", "all"), default="devices",
                   help="after each timed call wait for the devices its arrays are on "
                        "(default), or for every device the run opened (fl.synchronize, "
                        "as before session 10)")
    p.add_argument("--no-read", action="store_true",
                   help="time the sum without reading its result (.eval() only)")
    args = p.parse_args(argv)
    global SYNC
    SYNC = args.sync
    sets = _device_sets(args.devices)
    if not sets:
        print("no GPU found; list devices with --devices (e.g. --devices 0,0 on a CPU)")
        return 2
    weights = "measure" if args.weights == "measure" else None
    n, g = 1 << args.log2n, 1 << args.grid_log2

    def two(where: Any) -> tuple:
        return _inputs(n, where)

    def grid(where: Any) -> tuple:
        return (_inputs((g, g), where)[0],)

    def stencil_step(u: Any) -> Any:
        return u + np.float32(0.1) * fl.stencil(u, LAPLACE)

    def stencil_steps(u: Any) -> Any:
        # (each step evaluated, nothing waited for: the host enqueues the next step's
        # halo copies and parts while the devices run this one)
        for _ in range(STEPS - 1):
            u = stencil_step(u).eval()
        return stencil_step(u)

    workloads = [
        Workload("2*x - sin(y) + x*y", 12 * n, two, lambda x, y: 2 * x - fl.sin(y) + x * y),
        Workload("sum(x*y)", 8 * n, two, lambda x, y: fl.sum(x * y),
                 lambda k, x, y: fl.sum(x.parts[k] * y.parts[k]).eval(),
                 read=not args.no_read),
        Workload(f"5-point stencil {g}^2", 8 * g * g, grid, stencil_step),
        Workload(f"stencil {g}^2 x{STEPS} steps", 8 * g * g * STEPS, grid, stencil_steps),
    ]
    peer = {} if args.no_peer else _cupy_peer(n, args.repeat, not args.no_read)
    rows = []
    for devs in sets:
        print(f"devices: {', '.join(str(d) for d in devs)}")
        if len({d.index for d in devs}) < len(devs):
            print("(a device listed more than once: its parts share it, so the ratios are "
                  "meaningless as speed-ups; this run shows the split path works)")
        label = f"{devs[0].backend} x{len(devs)}"
        for w in workloads:
            row = run_case(w, devs, args.repeat, weights, args.trace, args.variants)
            row["set"] = label
            row["cupy"] = peer.get(w.name)
            rows.append(row)
    print(f"\n(each timed call then waits for "
          f"{'its devices' if SYNC == 'devices' else 'every device opened'}: --sync)")
    print(f"\n{'set':10s} {'workload':24s} {'1 device GB/s':>14s} {'parts GB/s':>11s} "
          f"{'ratio':>6s} {'1 dev ms':>9s} {'parts ms':>9s} {'cupy 1 GPU':>11s}  check")
    for r in rows:
        cupy = "-" if r["cupy"] is None else f"{r['cupy']:.1f}"
        print(f"{r['set']:10s} {r['workload']:24s} {r['one']:14.1f} {r['all']:11.1f} "
              f"{r['ratio']:6.2f} {r['one_ms']:9.3f} {r['all_ms']:9.3f} {cupy:>11s}  "
              f"{'ok' if r['ok'] else 'MISMATCH'}")
        for name, v in r.get("variants", {}).items():
            print(f"{'':10s} {'  ' + name:24s} {'':14s} {v['all']:11.1f} {v['ratio']:6.2f} "
                  f"{'':9s} {v['all_ms']:9.3f} {'':>11s}  {'ok' if v['ok'] else 'MISMATCH'}")
    for r in rows:
        if "trace" in r:
            print_trace(f"{r['set']}: {r['workload']}", r["trace"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(sets=[[str(d) for d in s] for s in sets], sync=SYNC,
                           log2n=args.log2n,
                           grid_log2=args.grid_log2, rows=rows), f, indent=1)
    if args.other_contexts:
        sys.stdout.flush()
        _other_contexts(sets, list(sys.argv[1:] if argv is None else argv))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
