"""Each CPU OpenCL runtime present, measured against numpy: which should be the default?

The script lists the CPU devices fuseloop sees (pip's PoCL, the system's PoCL, Intel's
CPU runtime from ``fuseloop[intel-cpu]``, ...) and measures each one in a process of its
own (``--worker``), with an empty kernel cache, so no runtime's compiler, threads or
caches touch another's figures. Per runtime:

* ``2*x + x*y - 3*y`` on 2^24 float32 elements, into an existing array;
* float32 ``sin``, ``exp`` and ``power`` (2^22 elements);
* ``fl.sum(x*y)`` (2^24 elements);
* row softmax of a 2048x2048 float32 matrix;
* host overhead: ``((x*2 + y)*x - y)/3`` on 1000 elements, built and ``.eval()``-ed each
  call, synchronizing every 100 calls (microseconds per call);
* cold compile: the first evaluation of the demo's kernel ``2*x + x*y - 3*y`` in a new
  process with empty fuseloop, loopy and pyopencl caches (generation, OpenCL build and
  run), then the first evaluation of a second new kernel in the same process.

Each case alternates fuseloop's and numpy's runs (numpy's math functions into a
preallocated array, its expressions as written), so both see the same phase of a shared
machine; ``numpy/fuseloop`` is the ratio of their medians (above 1: fuseloop is faster).
Every result is checked against numpy once. Timings are reported, never asserted.
``--quick`` uses 2^20 elements, a 1024x1024 matrix and fewer repeats (a check that the
script works, not a measurement).

Usage::

    python benchmarks/bench_cpu_runtimes.py [--quick] [--repeat N] [--only SUBSTRING]
                                            [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RNG_SEED = 0
# (name, fuseloop and numpy function name, range of x, range of y or None)
MATH = [("sin", (-100, 100), None), ("exp", (-10, 10), None), ("power", (0.1, 10), (-3, 3))]


# ------------------------------------------------------------------------- worker side


def _interleaved(fl_run: Callable[[], Any], np_run: Callable[[], Any], sync: Callable[[], Any],
                 repeat: int, warmup: int = 2) -> tuple[list[float], list[float]]:
    """Wall times of ``fl_run(); sync()`` and of ``np_run()``, taken in turn."""
    for _ in range(warmup):
        fl_run()
        sync()
        np_run()
    fl_times, np_times = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fl_run()
        sync()
        fl_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        np_run()
        np_times.append(time.perf_counter() - t0)
    return fl_times, np_times


def _record(fl_times: list[float], np_times: list[float], correct: bool,
            **extra: Any) -> dict[str, Any]:
    fl_s, np_s = statistics.median(fl_times), statistics.median(np_times)
    return {"fuseloop_s": fl_s, "numpy_s": np_s, "numpy_over_fuseloop": np_s / fl_s,
            "fuseloop_times_s": fl_times, "numpy_times_s": np_times, "correct": correct,
            **extra}


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    return bool(np.allclose(got, want, rtol=rtol, atol=atol))


def _cold_compile(fl: Any) -> dict[str, Any]:
    """First evaluations in this (new) process; the caches are empty (see _run_worker)."""
    rng = np.random.default_rng(RNG_SEED)
    xh, yh = rng.random(1024, dtype=np.float32), rng.random(1024, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)
    fl.synchronize()
    t0 = time.perf_counter()
    got = (2 * x + x * y - 3 * y).get()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    got2 = fl.sqrt(x * x + y * y + 1).get()
    second = time.perf_counter() - t0
    ok = (_close(got, 2 * xh + xh * yh - 3 * yh, 1e-5, 1e-6)
          and _close(got2, np.sqrt(xh * xh + yh * yh + 1), 1e-5, 1e-6))
    return {"first_kernel_s": first, "second_kernel_s": second, "correct": ok}


def _elementwise(fl: Any, n: int, repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(RNG_SEED)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, y, out = fl.asarray(xh), fl.asarray(yh), fl.empty(n, np.float32)

    def fl_run() -> None:
        out[...] = 2 * x + x * y - 3 * y

    def np_run() -> None:  # as the demo (fuseloop demo) times it
        2 * xh + xh * yh - 3 * yh

    fl_run()
    ok = _close(out.get(), 2 * xh + xh * yh - 3 * yh, 1e-5, 1e-6)
    return _record(*_interleaved(fl_run, np_run, fl.synchronize, repeat), ok,
                   elements=n, gb_moved=3 * 4 * n / 1e9)


def _math(fl: Any, name: str, xr: tuple, yr: tuple | None, n: int,
          repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(RNG_SEED)
    args_h = [rng.uniform(*xr, n).astype(np.float32)]
    if yr is not None:
        args_h.append(rng.uniform(*yr, n).astype(np.float32))
    args = [fl.asarray(a) for a in args_h]
    out, res = fl.empty(n, np.float32), np.empty(n, np.float32)
    fl_fn, np_fn = getattr(fl, name), getattr(np, name)

    def fl_run() -> None:
        out[...] = fl_fn(*args)

    def np_run() -> None:
        np_fn(*args_h, out=res)

    fl_run()
    want = np_fn(*(a.astype(np.float64) for a in args_h))
    ok = _close(out.get(), want, 1e-5, 1e-6 * max(1.0, float(np.max(np.abs(want)))))
    return _record(*_interleaved(fl_run, np_run, fl.synchronize, repeat), ok, elements=n)


def _sum(fl: Any, n: int, repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(RNG_SEED)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)
    box: list[Any] = [None]

    def fl_run() -> None:
        box[0] = fl.sum(x * y).eval()

    def np_run() -> None:
        np.sum(xh * yh)

    fl_run()
    ok = _close(box[0].get(), np.sum(xh.astype(np.float64) * yh), 1e-4, 0)
    return _record(*_interleaved(fl_run, np_run, fl.synchronize, repeat), ok, elements=n)


def _softmax(fl: Any, rows: int, cols: int, repeat: int) -> dict[str, Any]:
    from fuseloop.bench.workloads import softmax

    rng = np.random.default_rng(RNG_SEED)
    xh = rng.random((rows, cols), dtype=np.float32)
    x, out = fl.asarray(xh), fl.empty((rows, cols), np.float32)

    def fl_run() -> None:
        out[...] = softmax(fl, x)

    def np_run() -> None:
        softmax(np, xh)

    fl_run()
    ok = _close(out.get(), softmax(np, xh.astype(np.float64)), 1e-4, 1e-7)
    return _record(*_interleaved(fl_run, np_run, fl.synchronize, repeat), ok,
                   shape=[rows, cols])


def _overhead(fl: Any, calls: int, loops: int) -> dict[str, Any]:
    """The host-overhead loop of bench_elementwise.py, numpy's loop after each of ours."""
    rng = np.random.default_rng(RNG_SEED)
    xh = rng.random(1000, dtype=np.float32)
    yh = rng.random(1000, dtype=np.float32) + 1
    x, y = fl.asarray(xh), fl.asarray(yh)

    def fl_loop() -> None:
        for i in range(calls):
            (((x * 2 + y) * x - y) / 3).eval()
            if i % 100 == 99:
                fl.synchronize()

    def np_loop() -> None:
        for _ in range(calls):
            ((xh * 2 + yh) * xh - yh) / 3

    ok = _close((((x * 2 + y) * x - y) / 3).get(), ((xh * 2 + yh) * xh - yh) / 3, 1e-5, 1e-6)
    fl_times, np_times = _interleaved(fl_loop, np_loop, fl.synchronize, loops, warmup=1)
    rec = _record(fl_times, np_times, ok, calls_per_loop=calls)
    rec["fuseloop_us_per_call"] = rec["fuseloop_s"] / calls * 1e6
    rec["numpy_us_per_call"] = rec["numpy_s"] / calls * 1e6
    return rec


def _run_worker(index: int, quick: bool, repeat: int | None) -> dict[str, Any]:
    import fuseloop as fl

    dev = fl.set_device(index)
    reps = repeat or (5 if quick else 15)
    big = 2**20 if quick else 2**24
    mid = 2**20 if quick else 2**22
    side = 1024 if quick else 2048
    results: dict[str, Any] = {"cold_compile": _cold_compile(fl)}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("2*x + x*y - 3*y", lambda: _elementwise(fl, big, reps)),
        *[(f"float32 {name}", lambda a=(name, xr, yr): _math(fl, *a, mid, reps))
          for name, xr, yr in MATH],
        ("fl.sum(x*y)", lambda: _sum(fl, big, reps)),
        ("row softmax", lambda: _softmax(fl, side, side, reps)),
        ("host overhead", lambda: _overhead(fl, 200 if quick else 1000, 3 if quick else 9)),
    ]
    for label, step in steps:
        try:
            results[label] = step()
        except Exception as exc:  # one failing case must not hide the others' figures
            results[label] = {"error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
    return {"device": {"index": dev.index, "name": dev.name, "platform": dev.platform,
                       "runtime": dev.runtime, "driver_version": dev.driver_version,
                       "compute_units": dev.compute_units},
            "results": results}


def _list_cpus() -> list[dict[str, Any]]:
    import fuseloop as fl

    return [{"index": d.index, "name": d.name, "runtime": d.runtime, "usable": d.usable,
             "problem": d.problem} for d in fl.devices(type="cpu")]


# ------------------------------------------------------------------------- parent side


def _child(args: list[str], env: dict[str, str], timeout: float) -> Any:
    """Run this script with ``args`` in a new process; its last stdout line is JSON."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"exit code {proc.returncode}: " + " | ".join(tail))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fresh_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    # empty fuseloop, loopy and pyopencl caches: the cold compile is cold
    env["FUSELOOP_CACHE_DIR"] = str(tmp / "kernels")
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    env.pop("FUSELOOP_DEVICE", None)
    # the parent's root first on the path, so a checkout's fuseloop is the one measured
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _ratio_cell(rec: dict[str, Any] | None) -> str:
    if not rec:
        return "-"
    if "error" in rec:
        return "error"
    flag = "" if rec.get("correct", True) else " WRONG"
    if "fuseloop_us_per_call" in rec:
        return (f"{rec['fuseloop_us_per_call']:.1f} us ({rec['numpy_over_fuseloop']:.2f}x)"
                + flag)
    return f"{rec['numpy_over_fuseloop']:.2f}x ({rec['fuseloop_s'] * 1e3:.1f} ms){flag}"


def table(doc: dict[str, Any]) -> str:
    """Markdown: one column per runtime, numpy/fuseloop (fuseloop's median) per case."""
    runs = [r for r in doc["runtimes"] if "results" in r]
    if not runs:
        return "no CPU runtime could be measured"
    labels = [k for k in runs[0]["results"] if k != "cold_compile"]
    head = "| case | " + " | ".join(r["device"]["runtime"] for r in runs) + " |"
    lines = [head, "|" + " --- |" * (len(runs) + 1)]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(
            _ratio_cell(r["results"].get(label)) for r in runs) + " |")
    cells = []
    for r in runs:
        c = r["results"].get("cold_compile", {})
        cells.append("error" if "error" in c or not c else
                     f"{c['first_kernel_s']:.2f} s, then {c['second_kernel_s']:.2f} s")
    lines.append("| cold compile (demo kernel, then another) | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("numpy/fuseloop: numpy's median time over fuseloop's (above 1: fuseloop is "
                 "faster); host overhead: fuseloop's us per call (numpy's loop over ours).")
    for r in doc["runtimes"]:
        if "error" in r:
            lines.append(f"- {r['device']['runtime'] or r['device']['name']}: {r['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    p.add_argument("--repeat", type=int, default=None, help="timed runs per case")
    p.add_argument("--only", default=None,
                   help="measure only runtimes whose label contains this (case-insensitive)")
    p.add_argument("--out", default=None, help="write the JSON here")
    p.add_argument("--timeout", type=float, default=None, help="seconds per runtime")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.list:
        print(json.dumps(_list_cpus()))
        return 0
    if args.worker is not None:
        print(json.dumps(_run_worker(args.worker, args.quick, args.repeat)))
        return 0

    timeout = args.timeout or (300 if args.quick else 900)
    with tempfile.TemporaryDirectory(prefix="fuseloop-cpu-runtimes-") as tmp:
        cpus = _child(["--list"], _fresh_env(Path(tmp) / "list"), timeout)
        doc: dict[str, Any] = {
            "host": {"machine": platform.platform(), "processor": platform.processor(),
                     "cpu_count": os.cpu_count(), "python": platform.python_version(),
                     "load_average_start": list(os.getloadavg())},
            "quick": args.quick, "runtimes": []}
        for cpu in cpus:
            if args.only and args.only.lower() not in cpu["runtime"].lower():
                continue
            entry: dict[str, Any] = {"device": cpu}
            if not cpu["usable"]:
                entry["error"] = f"not usable: {cpu['problem']}"
            else:
                print(f"measuring {cpu['runtime']} ({cpu['name']}) ...", file=sys.stderr)
                worker = ["--worker", str(cpu["index"])] + (["--quick"] if args.quick else [])
                if args.repeat:
                    worker += ["--repeat", str(args.repeat)]
                try:
                    entry.update(_child(worker, _fresh_env(Path(tmp) / str(cpu["index"])),
                                        timeout))
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    entry["error"] = str(exc)[:500]
            doc["runtimes"].append(entry)
        doc["host"]["load_average_end"] = list(os.getloadavg())
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    print(table(doc))
    if not doc["runtimes"]:
        print("no CPU OpenCL runtime found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
