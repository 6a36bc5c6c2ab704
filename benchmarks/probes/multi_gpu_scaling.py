"""Issue 29's scaling figures in one call on a host of several GPUs: ``2*x - sin(y) + x*y``
and ``fl.sum(x*y)`` (read back) over ``2**log2n`` float32 elements, one 5-point stencil
step ``u + 0.1 * laplacian(u)`` and ten pipelined steps on a ``2**grid_log2`` square, each
on 1 GPU (an ordinary array) and split over the first 2 and 4 GPUs of each backend
(``--counts``), timed in the same run (``bench_multigpu``'s workloads, waits and checks).
Per case: ms per call, GB/s, the ratio to one GPU (issue 29's targets: >= 1.8x on 2 GPUs
and >= 3.4x on 4 for the elementwise and the sum) and, for a split call, when its parts
were launched (``fuseloop.multi.trace``'s events; for ten steps, the last step): the
host microseconds from the call's start until its known parts began to be staged (the
expression built, the reduction dispatched, a stencil's halos copied), staging them
(plans found, buffers allocated, arguments listed), launching them (part 0's first
enqueue to the last part's submit), each part's enqueue after part 0's, and one part's
own enqueues and submit (what still separates two parts), and the phase after the last
part's submit until the call returns (``after``: its kernel, a reduction's reads and
combine; ``reads``: until the last partial was read; ``sync``: the wait on every device
after the call, which the timed calls include); medians over ``--traced`` calls.
The last part starts after the three phases before it: they are the split call's host
cost on top of one part's device time; ``part 0 ms``, part 0's call alone on its own
device (an ordinary array, the same workload), is what the split call would take
without them.
A split stencil whose halo rows go through the host (OpenCL GPUs with a context each, the
default) is timed again with the host waiting for the halo reads in the stencil call
(``-deferred``: ``FUSELOOP_MULTI_DEFERRED_UPLOADS=0``; by default GPUs leave the uploads to
their deferred work).  Cases stop being started once ``--budget-s``
seconds have passed (the skipped ones are listed); workloads are run in the order
above, each on every backend, so the targets' two come first.  Usage::

    python benchmarks/probes/multi_gpu_scaling.py [--backends cuda,opencl] [--counts 1,2,4]
        [--log2n 30] [--grid-log2 15] [--repeat 10] [--traced 5] [--budget-s 180]
        [--out FILE.json]
    # the machinery on a CPU (four PoCL devices: the ratios say nothing about speed-up):
    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_HOST_PATH=0 python \\
        benchmarks/probes/multi_gpu_scaling.py --type cpu --log2n 20 --grid-log2 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (bench_multigpu)

import bench_multigpu as bm

import fuseloop as fl
from fuseloop.backends import backend_for
from fuseloop.multi import trace, uploads

#: issue 29's targets (ratio to one GPU) by workload and GPU count
TARGETS = {("2*x - sin(y) + x*y", 2): 1.8, ("2*x - sin(y) + x*y", 4): 3.4,
           ("sum(x*y)", 2): 1.8, ("sum(x*y)", 4): 3.4}


def workloads(n: int, g: int) -> list[bm.Workload]:
    def two(where: Any) -> tuple:
        return bm._inputs(n, where)

    def grid(where: Any) -> tuple:
        return (bm._inputs((g, g), where)[0],)

    def step(u: Any) -> Any:
        return u + np.float32(0.1) * fl.stencil(u, bm.LAPLACE)

    def steps(u: Any) -> Any:
        for _ in range(bm.STEPS - 1):
            u = step(u).eval()
        return step(u)

    return [
        bm.Workload("2*x - sin(y) + x*y", 12 * n, two, lambda x, y: 2 * x - fl.sin(y) + x * y),
        bm.Workload("sum(x*y)", 8 * n, two, lambda x, y: fl.sum(x * y), read=True),
        bm.Workload(f"stencil step {g}^2", 8 * g * g, grid, step),
        bm.Workload(f"stencil {g}^2 x{bm.STEPS} steps", 8 * g * g * bm.STEPS, grid, steps),
    ]


def launch_offsets(w: bm.Workload, arrays: tuple, calls: int) -> dict[str, Any]:
    """Medians over ``calls`` traced calls (each after the devices are idle) of the last
    split launch in the call (a ten-step stencil's last step): us from its start (the
    call's, or the previous step's last enqueue) until its parts' staging began, the
    staging, the launches (part 0's first enqueue to the last part's submit), each
    part's enqueue after part 0's, and a part's own enqueues and submit."""
    sync = bm._sync_for(arrays)
    got: dict[str, list[Any]] = {k: [] for k in ("to_staging_us", "staging_us", "launches_us",
                                                  "offsets_us", "launch_us", "after_us",
                                                  "reads_us", "sync_us")}
    for _ in range(calls):
        sync()
        with trace.tracing() as events:
            t0 = time.perf_counter()
            w.call(arrays)
            t1 = time.perf_counter()
        sync()
        got["sync_us"].append((time.perf_counter() - t1) * 1e6)
        stagings = [i for i, e in enumerate(events) if e[0] == "staging begun"]
        at = stagings[-1] if stagings else 0
        start = max([t for what, _, _, t in events[:at] if what == "enqueued"], default=t0)
        begun: dict[int, float] = {}
        done: dict[int, float] = {}
        for what, part, _, t in events[at:]:
            if what == "enqueue begun":
                begun.setdefault(part, t)
            elif what == "enqueued" and part >= 0:
                done.setdefault(part, t)
        if 0 not in done:
            continue
        us = 1e6
        if stagings and 0 in begun:
            staged_at = events[at][3]
            got["to_staging_us"].append((staged_at - start) * us)
            got["staging_us"].append((begun[0] - staged_at) * us)
            got["launches_us"].append((max(done.values()) - begun[0]) * us)
        got["offsets_us"].append([(done[k] - done[0]) * us for k in sorted(done)])
        last = max(done.values())
        got["after_us"].append((t1 - last) * us)
        reads = [t for what, _, _, t in events[at:] if what == "read done"]
        if reads:
            got["reads_us"].append((max(reads) - last) * us)
        got["launch_us"] += [(done[k] - begun[k]) * us for k in begun if k in done]
    sync()
    out: dict[str, Any] = {k: statistics.median(v) for k, v in got.items()
                           if v and k != "offsets_us"}
    if got["offsets_us"]:
        width = min(len(o) for o in got["offsets_us"])
        out["offsets_us"] = [statistics.median(o[k] for o in got["offsets_us"])
                             for k in range(width)]
    return out


def through_host(devs: list[Any]) -> bool:
    """Whether a split over ``devs`` copies halo rows through the host."""
    backend = backend_for(devs[0])
    return not all(backend.copies_between(devs[0], d) for d in devs[1:])


def run_case(w: bm.Workload, devs: list[Any], repeat: int, traced: int,
             deferred: bool = True) -> dict[str, Any]:
    """One workload on ``devs`` (one device: an ordinary array; more: split), timed."""
    saved = uploads.DEFERRED_UPLOADS
    uploads.DEFERRED_UPLOADS = "auto" if deferred else "0"  # (auto: the default)
    try:
        if len(devs) == 1:
            arrays = w.inputs(devs[0])
        else:
            with fl.device(devs):
                arrays = w.inputs(devs)
        t, sample = bm._measure(w, arrays, repeat)
        row: dict[str, Any] = dict(ms=t * 1e3, gbs=w.nbytes / t / 1e9)
        if len(devs) > 1:
            row.update(launch_offsets(w, arrays, traced))
            # (part 0's call alone: the split call without its host phases and other parts)
            alone = tuple(a.parts[0] for a in arrays)
            row["part_ms"] = bm._time(lambda: w.call(alone), repeat, alone) * 1e3
        del arrays
        fl.synchronize()
        return row | {"sample": sample}
    finally:
        uploads.DEFERRED_UPLOADS = saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default=None,
                   help="comma-separated backends (default: every backend with a device)")
    p.add_argument("--type", default="gpu", help="device type to split over (gpu, cpu)")
    p.add_argument("--counts", default="1,2,4")
    p.add_argument("--log2n", type=int, default=30)
    p.add_argument("--grid-log2", type=int, default=15)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--traced", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=180.0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    start = time.perf_counter()
    counts = [int(c) for c in args.counts.split(",")]
    by_backend: dict[str, list[Any]] = {}
    for d in fl.devices(type=args.type):
        by_backend.setdefault(d.backend, []).append(d)
    if args.backends:
        by_backend = {b: by_backend.get(b, []) for b in args.backends.split(",")}
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    usable: dict[str, list[int]] = {}
    for backend, devs in by_backend.items():
        print(f"{backend}: " + "; ".join(str(d) for d in devs), flush=True)
        usable[backend] = [c for c in counts if c <= len(devs)]
        if len(usable[backend]) < len(counts):
            print(f"{backend}: {len(devs)} devices, counts {usable[backend]} only")
    # (workload by workload, every backend's counts for each: the targets' workloads,
    # first, are measured on every backend before the budget runs out)
    for w in workloads(1 << args.log2n, 1 << args.grid_log2):
        for backend, devs in by_backend.items():
            one: dict[str, Any] | None = None
            for count in usable[backend]:
                variants = [True]
                if count > 1 and "stencil" in w.name and through_host(devs[:count]):
                    variants.append(False)
                for deferred in variants:
                    label = f"{backend} {w.name} x{count}{'' if deferred else ' -deferred'}"
                    if time.perf_counter() - start > args.budget_s:
                        skipped.append(label)
                        continue
                    row = run_case(w, devs[:count], args.repeat, args.traced, deferred)
                    row.update(backend=backend, workload=w.name, gpus=count,
                               deferred=deferred)
                    if count == 1:
                        one = row
                    if one is not None:
                        row["ratio"] = one["ms"] / row["ms"]
                        row["ok"] = bool(np.allclose(one["sample"], row["sample"],
                                                     rtol=1e-4, atol=1e-4))
                    print(f"{label}: {row['ms']:.3f} ms, {row['gbs']:.1f} GB/s, ratio "
                          f"{row.get('ratio', float('nan')):.2f}", flush=True)
                    rows.append(row)
    print(f"\n{'backend':8s} {'workload':34s} {'gpus':>4s} {'ms':>9s} {'GB/s':>8s} "
          f"{'ratio':>6s} {'target':>6s}  {'before/staging/launches us':>26s} "
          f"{'a launch us':>11s}  {'part offsets us':22s} {'after/reads/sync us':>19s} "
          f"{'part 0 ms':>9s} check")
    for r in rows:
        target = TARGETS.get((r["workload"], r["gpus"]))
        name = r["workload"] + ("" if r["deferred"] else " -deferred")
        offs = " ".join(f"{o:.0f}" for o in r.get("offsets_us", []))
        phases = "-" if "staging_us" not in r else \
            f"{r['to_staging_us']:.0f} / {r['staging_us']:.0f} / {r['launches_us']:.0f}"
        launch = f"{r['launch_us']:.1f}" if "launch_us" in r else "-"
        check = "-" if "ok" not in r else "ok" if r["ok"] else "MISMATCH"
        after = "-" if "after_us" not in r else f"{r['after_us']:.0f} / " + \
            ("-" if "reads_us" not in r else f"{r['reads_us']:.0f}") + f" / {r['sync_us']:.0f}"
        part = f"{r['part_ms']:.3f}" if "part_ms" in r else "-"
        print(f"{r['backend']:8s} {name:34s} {r['gpus']:4d} {r['ms']:9.3f} {r['gbs']:8.1f} "
              f"{r.get('ratio', float('nan')):6.2f} "
              f"{'-' if target is None else f'{target:.1f}':>6s}  {phases:>26s} {launch:>11s}  "
              f"{offs:22s} {after:>19s} {part:>9s} {check}")
    if skipped:
        print(f"\nnot run (past --budget-s {args.budget_s:.0f}): " + "; ".join(skipped))
    print(f"\n{time.perf_counter() - start:.0f} s in all")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(log2n=args.log2n, grid_log2=args.grid_log2,
                           devices={b: [str(d) for d in ds] for b, ds in by_backend.items()},
                           rows=[{k: v for k, v in r.items() if k != "sample"} for r in rows],
                           skipped=skipped), f, indent=1)
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
