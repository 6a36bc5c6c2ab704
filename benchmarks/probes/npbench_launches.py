"""Kernels built, launches and host reads per statement of NPBench's CuPy kernels (issue 26).

The GPU path's cost is launches per statement x host cost per launch, plus builds (a new
kernel per loop iteration is a disaster): this probe measures those counts on any device.
Run it with ``FUSELOOP_HOST_PATH=0`` or ``--not-host`` on the CPU to see what a GPU run
does.  For each
benchmark (loaded as ``benchmarks/npbench_swap.py`` does; NPBench is not part of this
repository: pass a checkout with ``--npbench``) it runs the kernel twice in this process
and prints, per run: kernels lowered (new structures: a count that grows with the size
means something is baked into kernels per iteration), kernels launched, the lines of the
kernel's own source executed (its statements; loop headers included), launches per
statement, values read back to Python (``float(a)``, ``bool(a)``, ``int(a)``, ``.get()``), the
device-to-host copies made (``dev rd``: conversions served on the host make none),
run plans recorded (a count that grows with the size means plans per length), walked
(statements whose plan was not found by signature) and the CPU time.  Reported, never
asserted.  Use an empty ``FUSELOOP_CACHE_DIR`` to see
cold counts; ``--gpu-recipes`` applies the GPU recipes on the CPU device (the kernels,
size classes included, that a GPU run builds).

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/npbench_launches.py \
        --npbench /tmp/npbench lu cholesky
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import npbench_swap as swap

import fuseloop as fl

_READS = {"n": 0, "depth": 0, "device": 0}


def _count_reads() -> None:
    """Count conversions of device values to Python (each a wait for the device)."""
    for name in ("__float__", "__bool__", "__int__", "__index__", "get", "item", "tolist"):
        original = getattr(fl.Array, name, None)
        if original is None:
            continue

        def counted(self: Any, *a: Any, _f: Any = original, **k: Any) -> Any:
            _READS["depth"] += 1  # (one read: float() calls .get() itself)
            try:
                if _READS["depth"] == 1:
                    _READS["n"] += 1
                return _f(self, *a, **k)
            finally:
                _READS["depth"] -= 1

        setattr(fl.Array, name, counted)


def _count_device_reads() -> None:
    """Count the device-to-host copies themselves (what a GPU waits for): conversions
    served from a copy on the host make none (OpenCL backends only)."""
    from fuseloop.backends.opencl import OpenCLBackend

    original = OpenCLBackend.enqueue_read

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        _READS["device"] += 1
        return original(self, *a, **k)

    OpenCLBackend.enqueue_read = counted  # type: ignore[method-assign]


def _load(npbench: Path, name: str, preset: str) -> tuple[Any, dict, dict, str]:
    info = next(i for p in sorted((npbench / "bench_info").glob("*.json"))
                if (i := json.loads(p.read_text()))["benchmark"]["short_name"] == name)
    b = info["benchmark"]
    folder = npbench / "npbench" / "benchmarks" / b["relative_path"]
    module = b["module_name"]
    values = swap.bench_inputs(npbench / "npbench" / "benchmarks", b, preset)
    sys.modules["cupy"] = swap._FuseloopAsCupy()
    path = (folder / f"{module}_cupy.py").resolve()  # (code objects name it so)
    kernel = getattr(swap._load(path, f"npb_{module}_fl"), b["func_name"])
    return kernel, b, values, str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npbench", type=Path, required=True)
    ap.add_argument("names", nargs="+", help="benchmarks' short names (bench_info/*.json)")
    ap.add_argument("--preset", default="S")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--gpu-recipes", action="store_true",
                    help="the GPU recipes on this (CPU) device: the kernels a GPU run builds")
    ap.add_argument("--not-host", action="store_true",
                    help="this (CPU) device's buffers taken as not host memory, as a GPU's: "
                         "no element read in place, small work on the device (the host "
                         "path's limits kept, unlike FUSELOOP_HOST_PATH=0)")
    args = ap.parse_args()
    if args.not_host:
        from fuseloop import host_path

        host_path._host_devices[fl.asarray(np.zeros(1)).device.index] = False
    if args.gpu_recipes:
        from fuseloop import recipes

        for r in (recipes.gpu_coalesced, recipes.gpu_rows, recipes.gpu_tiled,
                  recipes.gpu_sparse_rows):
            fl.register_recipe("cpu", r, name=f"probe-{r.name}")
    _count_reads()
    _count_device_reads()
    print(f"{'benchmark':10} run {'lowered':>8} {'compiled':>8} {'launched':>9} {'stmts':>8} "
          f"{'launch/st':>9} {'reads':>7} {'dev rd':>7} {'recorded':>8} {'cpu s':>8}")
    for name in args.names:
        kernel, b, values, source = _load(args.npbench, name, args.preset)
        lines = {"n": 0}

        def tracer(frame: Any, event: str, arg: Any, source: str = source,
                   lines: dict = lines) -> Any:
            if frame.f_code.co_filename != source:
                return None

            def local(frame: Any, event: str, arg: Any) -> Any:
                if event == "line":
                    lines["n"] += 1
                return local
            return local

        for run in range(args.runs):
            a = dict(values)
            for n in b["array_args"]:
                a[n] = fl.asarray(np.copy(values[n]))
            fl.synchronize()
            fl.reset_stats()
            lines["n"] = 0
            _READS["n"] = _READS["device"] = 0
            t = time.process_time()
            sys.settrace(tracer)
            try:
                swap._force(kernel(*[a[n] for n in b["input_args"]]))
            finally:
                sys.settrace(None)
            fl.synchronize()
            cpu = time.process_time() - t
            s = fl.stats()
            st = max(1, lines["n"])
            print(f"{name:10} {run:3} {s['kernels_lowered']:8} {s['kernels_compiled']:8} "
                  f"{s['kernels_launched']:9} {lines['n']:8} "
                  f"{s['kernels_launched'] / st:9.2f} {_READS['n']:7} {_READS['device']:7} "
                  f"{s['plans_recorded']:8} {s['plans_walked']:7} "
                  f"{cpu:8.3f}", flush=True)


if __name__ == "__main__":
    main()
