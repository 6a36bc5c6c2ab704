"""Time to first result for a new expression: cold, disk-warm and memory-warm.

Each sample runs the evaluation in a new Python process (``sys.executable``),
so the import and the OpenCL set-up are paid as a user would pay them:

* cold: an expression no cache has seen (a fresh ``FUSELOOP_CACHE_DIR`` and a
  literal unique to the sample, so the OpenCL driver has not seen the source
  either): Loopy code generation, compilation, launch.
* disk-warm: the same expression in a new process, with the cache directory the
  cold run filled.
* memory-warm: the same structure evaluated again in the same process (new
  scalar value, so new kernel arguments).

Phases measured in the child, in this order:

* ``import``: ``import fuseloop`` (includes numpy and pyopencl);
* ``context``: device discovery, OpenCL context, queue and memory pool;
* ``upload``: two small input arrays copied to the device;
* ``first_launch``: from building the expression to the kernel being enqueued
  (``.eval()`` returned).  Split into ``driver_build`` (time inside
  ``pyopencl.Program.build``: the OpenCL compiler, or the driver loading a
  binary) and ``overhead`` (everything else: fuseloop's own work plus creating
  the ``cl.Kernel`` object);
* ``get``: waiting for the kernel and copying the result back.

Usage::

    python benchmarks/bench_latency.py                 # default device, 5 samples
    python benchmarks/bench_latency.py --device cpu --repeat 7 --out latency.json
    python benchmarks/bench_latency.py --profile       # cProfile of one disk-warm run
    # compare source trees (each prepended to PYTHONPATH), samples interleaved:
    python benchmarks/bench_latency.py --variant before=/tmp/old --variant after=.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import fuseloop as fl
t1 = time.perf_counter()
loopy_after_import = "loopy" in sys.modules
import numpy as np
import pyopencl as cl

build_time = [0.0]
_build = cl.Program.build


def timed_build(self, *args, **kwargs):
    t = time.perf_counter()
    try:
        return _build(self, *args, **kwargs)
    finally:
        build_time[0] += time.perf_counter() - t


cl.Program.build = timed_build
literal = float(sys.argv[1])
profile = sys.argv[2] == "1"
dev = fl.get_device()
dev.context, dev.queue, dev.allocator
t2 = time.perf_counter()
n = 4096
xh = np.linspace(0, 1, n, dtype=np.float32)
yh = np.linspace(1, 2, n, dtype=np.float32)
x, y = fl.asarray(xh), fl.asarray(yh)
fl.synchronize()
t3 = time.perf_counter()
fl.reset_stats()
if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
z = (2 * x - fl.sin(y) * fl.constant(literal) + x * y).eval()
t4 = time.perf_counter()
if profile:
    prof.disable()
r = z.get()
t5 = time.perf_counter()
stats = fl.stats()
ok = bool(np.allclose(r, 2 * xh - np.sin(yh) * np.float32(literal) + xh * yh, rtol=1e-5,
                      atol=1e-5))
loopy_at_launch = "loopy" in sys.modules
warm = []
for k in range(20):
    t = time.perf_counter()
    w = (3.0 * x - fl.sin(y) * fl.constant(literal) + x * y).eval()
    t_launch = time.perf_counter()
    w.get()
    warm.append(((t_launch - t) * 1e3, (time.perf_counter() - t) * 1e3))
ok = ok and bool(np.allclose(w.get(), 3 * xh - np.sin(yh) * np.float32(literal) + xh * yh,
                             rtol=1e-5, atol=1e-5))
print(json.dumps({
    "import": (t1 - t0) * 1e3, "context": (t2 - t1) * 1e3, "upload": (t3 - t2) * 1e3,
    "first_launch": (t4 - t3) * 1e3, "driver_build": build_time[0] * 1e3,
    "overhead": (t4 - t3 - build_time[0]) * 1e3, "get": (t5 - t4) * 1e3,
    "first_result": (t5 - t3) * 1e3,
    "warm_launch": min(a for a, _ in warm), "warm_result": min(b for _, b in warm),
    "stats": stats, "ok": ok, "loopy_after_import": loopy_after_import,
    "loopy_at_launch": loopy_at_launch, "device": str(dev)}))
if profile:
    import pstats
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
"""

PHASES = ("import", "context", "upload", "first_launch", "driver_build", "overhead", "get",
          "first_result", "process_wall")


def run_child(cache: str, literal: float, device: str | None, profile: bool = False,
              pythonpath: str | None = None) -> dict:
    env = dict(os.environ, FUSELOOP_CACHE_DIR=cache)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.abspath(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])])
    if device is not None:
        env["FUSELOOP_DEVICE"] = device
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, repr(literal), "1" if profile else "0"],
                         env=env, capture_output=True, text=True)
    wall = (time.perf_counter() - t) * 1e3
    if out.returncode != 0:
        raise RuntimeError(f"child failed ({out.returncode}):\n{out.stderr}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_wall"] = wall
    if profile:
        res["profile"] = out.stderr
    if not res["ok"]:
        raise RuntimeError(f"wrong result in child: {res}")
    return res


def summarize(samples: list[dict]) -> dict:
    return {p: {"median": statistics.median(s[p] for s in samples),
                "min": min(s[p] for s in samples)} for p in PHASES}


def run_variant(samples: dict, name: str, path: str | None, tmp: str, literal: float,
                device: str | None) -> None:
    r = len(samples["cold"])
    cache = os.path.join(tmp, f"{name}-cache{r}")
    samples["cold"].append(run_child(cache, literal, device, pythonpath=path))
    samples["disk"].append(run_child(cache, literal, device, pythonpath=path))
    c, d = samples["cold"][-1], samples["disk"][-1]
    print(f"{name} sample {r}: cold {c['first_result']:.1f} ms, disk-warm "
          f"{d['first_result']:.1f} ms (overhead {d['overhead']:.1f} ms, "
          f"driver {d['driver_build']:.1f} ms)", file=sys.stderr)


def report(name: str, samples: dict, repeat: int) -> dict:
    cold, disk = samples["cold"], samples["disk"]
    for s in disk:
        assert s["stats"]["kernels_lowered"] == 0 and s["stats"]["disk_cache_hits"] == 1, s
    for s in cold:
        assert s["stats"]["kernels_lowered"] == 1, s
    result = {
        "device": cold[0]["device"], "python": sys.version.split()[0], "repeat": repeat,
        "cold": summarize(cold), "disk_warm": summarize(disk),
        "memory_warm": {k: {"median": statistics.median(s[k] for s in cold + disk),
                            "min": min(s[k] for s in cold + disk)}
                        for k in ("warm_launch", "warm_result")},
        "loopy_imported_by_import": disk[0]["loopy_after_import"],
        "loopy_imported_on_disk_hit": disk[0]["loopy_at_launch"],
        "samples": {"cold": cold, "disk_warm": disk},
    }
    print(f"\n## {name}\n\ndevice: {result['device']}, {repeat} samples each, "
          "medians (min) in ms\n")
    print("| phase | cold | disk-warm |")
    print("| --- | --- | --- |")
    for p in PHASES:
        c, d = result["cold"][p], result["disk_warm"][p]
        print(f"| {p} | {c['median']:.1f} ({c['min']:.1f}) | {d['median']:.1f} ({d['min']:.1f}) |")
    mw = result["memory_warm"]
    print(f"\nmemory-warm (same process, second evaluation): launch "
          f"{mw['warm_launch']['median']:.2f} ms, result {mw['warm_result']['median']:.2f} ms "
          "(medians of each process's best of 20)")
    print(f"loopy imported by `import fuseloop`: {result['loopy_imported_by_import']}; "
          f"after a disk-cache hit: {result['loopy_imported_on_disk_hit']}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="FUSELOOP_DEVICE for the children")
    ap.add_argument("--repeat", type=int, default=5, help="samples of each kind")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--profile", action="store_true",
                    help="print a cProfile of one disk-warm first evaluation")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=PATH",
                    help="a source tree to measure (prepended to PYTHONPATH); repeatable, "
                    "samples of the variants are interleaved")
    args = ap.parse_args(argv)
    variants = [tuple(v.split("=", 1)) for v in args.variant] or [("current", None)]

    samples = {name: {"cold": [], "disk": []} for name, _ in variants}
    profiles = {}
    with tempfile.TemporaryDirectory(prefix="fuseloop-latency-") as tmp:
        base = 1.0 + (time.time_ns() % 10**6) * 1e-7  # unique per run: nothing is cached
        literals = {}
        for r in range(args.repeat):
            for v, (name, path) in enumerate(variants):
                # a new source for every sample, so the driver's own cache is cold too
                literals[name, r] = base + r * 1e-3 + v * 1e-5
                run_variant(samples[name], name, path, tmp, literals[name, r], args.device)
        if args.profile:
            for name, path in variants:
                profiles[name] = run_child(os.path.join(tmp, f"{name}-cache0"),
                                           literals[name, 0], args.device, True, path)["profile"]

    results = {name: report(name, samples[name], args.repeat) for name, _ in variants}
    for name, text in profiles.items():
        print(f"\n## cProfile of a disk-warm first evaluation ({name})\n\n{text}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"variants": {name: {"path": path, **results[name]}
                                    for name, path in variants}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
