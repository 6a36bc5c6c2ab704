"""NPBench's CuPy kernels run unchanged with fuseloop in place of CuPy.

What a porting user does: take code written for a drop-in GPU array library and
import fuseloop under its name.  NPBench (https://github.com/spcl/npbench) is not part
of this repository: pass a checkout with ``--npbench``.  For each benchmark, in a
process of its own (a hang or a crash costs that benchmark only), this script runs
NPBench's NumPy kernel and its CuPy kernel with ``cupy`` bound to fuseloop (or, with
``--peer cupy``, also real CuPy), checks the outputs against NumPy's, and reports the
median time of each and the ratio ``reference time / fuseloop time``.

    python benchmarks/npbench_swap.py --npbench /tmp/npbench --preset S --json out.json

The fuseloop timed is the current directory's checkout (run it from the repository
root), not an installed copy.  ``--numpy-loops`` also times the CuPy kernel run by
numpy itself (its Python loops of small statements as written: the measure of "a loop
of small statements within 3x of numpy's").  ``--baseline DIR`` times another checkout's fuseloop
too (e.g. ``git archive HEAD~3 | tar -x -C DIR``), interleaved with this one's, each
benchmark in processes of their own, with its own kernel cache
(``$FUSELOOP_CACHE_DIR-baseline``): before/after figures from one run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop; spawned workers inherit it)


def _load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _FuseloopAsCupy(types.ModuleType):
    """``import cupy`` inside the loaded kernels: fuseloop's namespace."""

    def __init__(self) -> None:
        super().__init__("cupy")
        import fuseloop

        self._fl = fuseloop

    def __getattr__(self, name: str) -> Any:
        if name == "cuda":  # `with cupy.cuda.Device(0):` in a few kernels: one device here
            return types.SimpleNamespace(Device=lambda index=0: contextlib.nullcontext())
        # kept as the module's own attribute: later look-ups are a dict's, as they are
        # for a user's ``import fuseloop as cupy`` (this method cost each ``np.minimum``
        # of a loop a Python call)
        value = self.__dict__[name] = getattr(self._fl, name)
        return value


class _NumpyAsCupy(types.ModuleType):
    """``import cupy`` inside the loaded kernels: numpy's namespace (``--numpy-loops``:
    the CuPy kernel's own statements, a Python loop of small ones included, run by
    numpy; the floor a loop of small statements can be measured against)."""

    def __init__(self) -> None:
        super().__init__("cupy")

    def __getattr__(self, name: str) -> Any:
        if name == "cuda":
            return types.SimpleNamespace(Device=lambda index=0: contextlib.nullcontext())
        value = self.__dict__[name] = np.asarray if name == "asnumpy" else getattr(np, name)
        return value


def _force(value: Any) -> None:
    """Evaluate lazy fuseloop results (CuPy's are computed when returned)."""
    if isinstance(value, tuple | list):
        for v in value:
            _force(v)
    elif hasattr(value, "eval") and hasattr(value, "is_lazy"):
        value.eval()


def _synchronize(framework: str) -> None:
    if framework == "fuseloop":
        import fuseloop

        fuseloop.synchronize()
    elif framework == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _to_host(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_to_host(v) for v in value]
    if hasattr(value, "get") and not isinstance(value, np.ndarray | dict):
        return np.asarray(value.get())
    return value


def _compare(ref: Any, got: Any, rtol: float, norm_error: float = 0.0) -> str | None:
    """None when ``got`` matches ``ref``; else what differs.  As NPBench's own validation
    does, values not close element by element still match when their relative error
    norm ``|got - ref| / |ref|`` is below the benchmark's ``norm_error`` (set in its
    bench_info for simulations whose rounding differences grow, e.g. nbody's 0.1)."""
    if isinstance(ref, list):
        if not isinstance(got, list) or len(got) != len(ref):
            return "output count differs"
        for r, g in zip(ref, got):
            why = _compare(r, g, rtol, norm_error)
            if why:
                return why
        return None
    r, g = np.asarray(ref), np.asarray(got)
    if r.shape != g.shape:
        return f"shape {g.shape} != {r.shape}"
    if r.size == 0:
        return None
    if r.dtype.kind in "fc" or g.dtype.kind in "fc":
        scale = max(1.0, float(np.nanmax(np.abs(r))))
        if not np.allclose(g, r, rtol=rtol, atol=rtol * scale, equal_nan=True):
            norm = float(np.linalg.norm(r))
            relative = float(np.linalg.norm(g - r)) / norm if norm else float("inf")
            if relative < norm_error:
                return None
            err = float(np.nanmax(np.abs(g - r)))
            return (f"max abs error {err:.3g} (scale {scale:.3g}; relative error norm "
                    f"{relative:.2g}, NPBench's bound {norm_error:g})")
        return None
    return None if np.array_equal(r, g) else "integer values differ"


def bench_inputs(bench_dir: Path, b: dict, preset: str) -> dict[str, Any]:
    """A benchmark's parameters at ``preset`` and the inputs its own ``initialize`` makes
    of them (numpy arrays), by argument name."""
    folder = bench_dir / b["relative_path"]
    module = b["module_name"]
    params = b["parameters"][preset]
    values = dict(params)
    if "init" in b:  # (a few benchmarks take their parameters only)
        init = _load(folder / f"{module}.py", f"npb_{module}_init")
        made = getattr(init, b["init"]["func_name"])(
            *[params[a] for a in b["init"]["input_args"]])
        values.update(zip(b["init"]["output_args"], made if isinstance(made, tuple) else (made,)))
    return values


def _run_one(bench_dir: Path, info: dict, preset: str, framework: str,
             repeats: int, budget_s: float, rtol: float, clock: str = "wall") -> dict:
    """Time one benchmark under one framework (in the current process).  ``clock``
    ``"cpu"``: the CPU time of the whole process (every thread: the OpenCL driver's
    workers, BLAS's), which a machine shared with other work distorts far less than
    the wall-clock time."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    b = info["benchmark"]
    folder = bench_dir / b["relative_path"]
    module = b["module_name"]
    values = bench_inputs(bench_dir, b, preset)
    if framework == "numpy-loops":  # (the CuPy kernel, run by numpy)
        sys.modules["cupy"] = _NumpyAsCupy()
        kernel_module = _load(folder / f"{module}_cupy.py", f"npb_{module}_numpy_loops")
    elif framework == "numpy":
        kernel_module = _load(folder / f"{module}_numpy.py", f"npb_{module}_numpy")
    else:
        if framework == "fuseloop":
            sys.modules["cupy"] = _FuseloopAsCupy()
        kernel_module = _load(folder / f"{module}_cupy.py", f"npb_{module}_{framework}")
    kernel = getattr(kernel_module, b["func_name"])
    copy = np.copy
    if framework == "fuseloop":
        import fuseloop

        copy = fuseloop.asarray
    elif framework == "cupy":
        import cupy

        copy = cupy.asarray
    times: list[float] = []
    result: Any = None
    args: dict[str, Any] = {}
    started = time.perf_counter()
    for k in range(repeats + 1):  # the first call compiles: not counted
        args = dict(values)
        for name in b["array_args"]:
            args[name] = copy(np.copy(values[name]))
        _synchronize(framework)
        t0 = now()
        result = kernel(*[args[a] for a in b["input_args"]])
        _force(result)
        _synchronize(framework)
        if k:
            times.append(now() - t0)
        if time.perf_counter() - started > budget_s and len(times) >= 1:
            break
    outputs = [args[name] for name in b["output_args"]]
    return {"time_s": float(np.median(times)) if times else math.nan,
            "outputs": _to_host(outputs), "result": _to_host(result), "calls": len(times)}


def timed_call(fl: Any, kernel: Any, b: dict, values: dict) -> float:
    """One call of ``kernel`` on new arrays of ``fl`` (a fuseloop module) holding
    ``values``: the process's CPU time, in seconds (the probes' measure)."""
    a = dict(values)
    for name in b["array_args"]:
        a[name] = fl.asarray(np.copy(values[name]))
    fl.synchronize()
    t = time.process_time()
    _force(kernel(*[a[n] for n in b["input_args"]]))
    fl.synchronize()
    return time.process_time() - t


def _worker(queue: Any, checkout: str | None, *job: Any) -> None:
    if checkout:  # (another checkout's fuseloop, with a kernel cache of its own)
        sys.path.insert(0, checkout)
        os.environ["FUSELOOP_CACHE_DIR"] = os.environ.get("FUSELOOP_CACHE_DIR") or \
            os.path.join(tempfile.gettempdir(), "fuseloop-npbench")
        os.environ["FUSELOOP_CACHE_DIR"] += "-baseline"
    try:
        queue.put(_run_one(*job))
    except BaseException as exc:  # reported, not raised: the parent goes on
        queue.put({"error": f"{type(exc).__name__}: {exc}"[:300]})


def _in_process(job: tuple, timeout_s: float, checkout: str | None = None) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_worker, args=(queue, checkout, *job))
    proc.start()
    try:
        return queue.get(timeout=timeout_s)
    except Exception:
        return {"error": f"did not finish in {timeout_s:.0f} s"}
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npbench", type=Path, required=True, help="an NPBench checkout")
    parser.add_argument("--preset", default="S", choices=["S", "M", "L", "paper"])
    parser.add_argument("--reference", default="numpy", choices=["numpy", "cupy"],
                        help="the framework whose time is divided by fuseloop's")
    parser.add_argument("--only", nargs="*", default=None,
                        help="benchmarks by NPBench's module name (covariance), short name "
                             "(covarian) or bench_info file name; commas or spaces between")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=10.0,
                        help="seconds of timed calls per benchmark and framework")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="wall-clock time, or the process's CPU time (all threads)")
    parser.add_argument("--numpy-loops", action="store_true",
                        help="also time the CuPy kernel run by numpy (numpy_loops_s; "
                             "loops_ratio: its time / fuseloop's)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout whose fuseloop is timed too (before/after)")
    ns = parser.parse_args()

    bench_dir = ns.npbench / "npbench" / "benchmarks"
    wanted = {w for arg in ns.only or () for w in arg.split(",") if w}
    rows = []
    for info_path in sorted((ns.npbench / "bench_info").glob("*.json")):
        info = json.loads(info_path.read_text())
        b = info["benchmark"]
        name = b["short_name"]
        folder = bench_dir / b["relative_path"]
        if wanted and not wanted & {name, b["module_name"], info_path.stem}:
            continue
        if not (folder / f"{b['module_name']}_cupy.py").exists():
            continue
        numpy_ref = _in_process((bench_dir, info, ns.preset, "numpy", ns.repeats, ns.budget,
                                 ns.rtol, ns.clock), ns.timeout)
        ref = numpy_ref if ns.reference == "numpy" else _in_process(
            (bench_dir, info, ns.preset, "cupy", ns.repeats, ns.budget, ns.rtol, ns.clock),
            ns.timeout)
        fl_job = (bench_dir, info, ns.preset, "fuseloop", ns.repeats, ns.budget, ns.rtol,
                  ns.clock)
        loops = _in_process((bench_dir, info, ns.preset, "numpy-loops", ns.repeats, ns.budget,
                             ns.rtol, ns.clock), ns.timeout) if ns.numpy_loops else {}
        base_run = _in_process(fl_job, ns.timeout, str(ns.baseline.resolve())) \
            if ns.baseline else {}
        fl_run = _in_process(fl_job, ns.timeout)
        row: dict[str, Any] = {"benchmark": name}
        if "error" in fl_run:
            row["status"] = fl_run["error"]
        elif "error" in numpy_ref:
            row["status"] = "numpy: " + numpy_ref["error"]
        else:
            bound = float(b.get("norm_error", 1e-5))  # (NPBench's default)
            why = _compare(numpy_ref["outputs"], fl_run["outputs"], ns.rtol, bound)
            if why is None and numpy_ref["result"] is not None:  # (some kernels return None
                # in one framework and their output array in another)
                why = _compare(numpy_ref["result"], fl_run["result"], ns.rtol, bound) \
                    if fl_run["result"] is not None else None
            row["status"] = "ok" if why is None else "wrong: " + why
            row["fuseloop_s"] = fl_run["time_s"]
            if "time_s" in ref:
                row[f"{ns.reference}_s"] = ref["time_s"]
                row["ratio"] = ref["time_s"] / fl_run["time_s"]
                if "time_s" in loops:  # (its outputs are not checked)
                    row["numpy_loops_s"] = loops["time_s"]
                    row["loops_ratio"] = loops["time_s"] / fl_run["time_s"]
                if "time_s" in base_run:  # (the baseline's outputs are not checked)
                    row["baseline_s"] = base_run["time_s"]
                    row["baseline_ratio"] = ref["time_s"] / base_run["time_s"]
        if "error" in base_run:
            row["baseline_status"] = base_run["error"]
        if "error" in ref:  # (the peer's own failure: its time is missing, not ours)
            row[f"{ns.reference}_status"] = ref["error"]
        rows.append(row)
        ratio = f"{row['ratio']:.3g}" if "ratio" in row else "-"
        before = f"{row['baseline_ratio']:.3g}" if "baseline_ratio" in row else "-"
        loop = f"{row['loops_ratio']:.3g}" if "loops_ratio" in row else "-"
        print(f"{name:28s} {ratio:>8s}  {before + '  ' if ns.baseline else ''}"
              f"{loop + '  ' if ns.numpy_loops else ''}{row['status']}"
              f"{'; ' + ns.reference + ': ' + ref['error'] if 'error' in ref else ''}", flush=True)
    geomean = _geomean(rows, "ratio")
    print(f"{sum(1 for r in rows if r.get('status') == 'ok')} of {len(rows)} ran and matched; "
          f"geometric mean of {ns.reference} time / fuseloop time over them: {geomean:.3g}")
    summary: dict[str, Any] = {"preset": ns.preset, "reference": ns.reference,
                               "clock": ns.clock, "geomean": geomean, "rows": rows}
    if ns.numpy_loops:
        summary["loops_geomean"] = _geomean(rows, "loops_ratio")
        print(f"the CuPy kernels run by numpy over fuseloop: {summary['loops_geomean']:.3g}")
    if ns.baseline:  # (over the benchmarks both ran)
        both = [r for r in rows if "baseline_ratio" in r]
        summary["geomean_both"] = _geomean(both, "ratio")
        summary["baseline_geomean_both"] = _geomean(both, "baseline_ratio")
        print(f"over the {len(both)} both ran: {summary['geomean_both']:.3g} "
              f"(baseline {ns.baseline}: {summary['baseline_geomean_both']:.3g})")
    if ns.json:
        ns.json.write_text(json.dumps(summary, indent=1))
    return 0


def _geomean(rows: list[dict], key: str) -> float:
    ok = [r[key] for r in rows if r.get("status") == "ok" and r.get(key)]
    return math.exp(sum(math.log(r) for r in ok) / len(ok)) if ok else math.nan


if __name__ == "__main__":
    sys.exit(main())
