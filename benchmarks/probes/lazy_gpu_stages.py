"""Where a lazy call's wall time goes on a GPU, by stage, revisions side by side in one
process (issue 25: the broad suite's lazy calls slower than torch eager).

Per case (the broad suite's workloads at the GPU suite's sizes: ``--size`` elements,
matrix order its square root) and revision, wall microseconds per call, the median over
``--repeat`` calls, revisions interleaved call by call:

* ``build``: the expression built;
* ``eval``: its ``.eval()`` (signature look-up, replay, allocation; small launches are
  deferred, larger ones enqueued here);
* ``flush``: the deferred launches enqueued (``runtime.devices.flush_deferred``);
* ``wait``: ``fl.synchronize()`` after that (the device's work and the wake-up);
* ``lat``: the four together (what the broad suite times), and the kernels per call;

then torch eager's ``lat`` (its call, then ``torch.cuda.synchronize()``) and its host
part (until the call returns), where torch sees a CUDA device.  ``--profile``: instead,
``cProfile`` of ``--repeat`` calls of each case (the first revision), the functions
taking the most time themselves (C functions too: a driver's launch, a pool's malloc).
Reported, never asserted.

    PYTHONPATH=$PWD python benchmarks/probes/lazy_gpu_stages.py ../base WT --device nvidia
    FUSELOOP_HOST_PATH=0 python benchmarks/probes/lazy_gpu_stages.py WT --fake-gpu --size 65536
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_host_overhead import import_revisions
from lazy_host_cases import fake_gpu

CASES = ("small-matvec,vecmat,matmul-8rows,int-max-cols,sum-all-keepdims,argmin-all,"
         "sum-axes02,cross-entropy,logsumexp-rows,chain-32,small-softmax")
STAGES = ("build", "eval", "flush", "wait")


def _call(wl: Any, ops: Any, args: list[Any]) -> Any:
    out = wl.peer(ops, *args)
    return out if isinstance(out, tuple) else (out,)


def _eval(fl: Any, xs: tuple) -> None:
    """As the suite's runner: ``.eval()``, or ``fl.compute`` of several results."""
    if len(xs) == 1:
        xs[0].eval()
    else:
        fl.compute(*xs)


def _setup(fl: Any, wl: Any, inputs: dict[str, np.ndarray]) -> tuple[Any, list[Any], float]:
    ops = importlib.import_module(f"{fl.__name__}.bench.peers").FuseloopOps(fl)
    args = [fl.asarray(inputs[k]) for k in wl.inputs]
    for _ in range(6):
        _eval(fl, _call(wl, ops, args))
        fl.synchronize()
    fl.reset_stats()
    for _ in range(4):
        _eval(fl, _call(wl, ops, args))
        fl.synchronize()
    return ops, args, fl.stats()["kernels_launched"] / 4


def _stages(fl: Any, ops: Any, wl: Any, args: list[Any], flush: Any) -> list[float]:
    clock = time.perf_counter
    t0 = clock()
    xs = _call(wl, ops, args)
    t1 = clock()
    _eval(fl, xs)
    t2 = clock()
    flush(fl.get_device())
    t3 = clock()
    fl.synchronize()
    t4 = clock()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


def _torch(wl: Any, inputs: dict[str, np.ndarray], repeat: int) -> tuple[float, float] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from fuseloop.bench.peers import TorchOps

    torch.backends.cuda.matmul.allow_tf32 = False
    args = [torch.as_tensor(inputs[k], device="cuda") for k in wl.inputs]
    ops = TorchOps(torch)
    lat, host = [], []
    for k in range(repeat + 5):
        t0 = time.perf_counter()
        r = wl.peer(ops, *args)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        del r
        if k >= 5:
            lat.append(t2 - t0)
            host.append(t1 - t0)
    return statistics.median(lat) * 1e6, statistics.median(host) * 1e6


def profile(fl: Any, wl: Any, inputs: dict[str, np.ndarray], repeat: int) -> None:
    """cProfile of ``repeat`` lazy calls (build, evaluation, synchronize) of ``wl``."""
    import cProfile
    import io
    import pstats

    ops, args, _ = _setup(fl, wl, inputs)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(repeat):
        _eval(fl, _call(wl, ops, args))
        fl.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
    text = out.getvalue()
    print(f"## {wl.name}: {repeat} calls\n" + text[text.index("ncalls"):], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+", help="folders holding fuseloop/, git revisions, WT")
    ap.add_argument("--device", default=None)
    ap.add_argument("--fake-gpu", action="store_true")
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--size", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    fls = import_revisions(args.revs, "gs", args.device)
    if args.fake_gpu:
        for fl in fls:
            fake_gpu(fl)
    broad = {w.name: w for w in importlib.import_module(f"{fls[0].__name__}.bench.broad").BROAD}
    print(f"{fls[0].get_device().name}: wall us per call, median of {args.repeat}: "
          f"{' / '.join(STAGES)} = lat [kernels]; revisions: {' | '.join(args.revs)}; "
          "torch eager lat (host)")
    for name in args.cases.split(","):
        wl = broad[name]
        sizes = (round(args.size ** 0.5),) if wl.kind == "matmul" else wl.sizes or (args.size,)
        for size in sizes:
            inputs = wl.make_inputs(size, np.random.default_rng(0))
            if args.profile:
                profile(fls[0], wl, inputs, args.repeat)
                continue
            runs = []
            for fl in fls:
                ops, fargs, kernels = _setup(fl, wl, inputs)
                flush = importlib.import_module(f"{fl.__name__}.runtime.devices").flush_deferred
                runs.append((fl, ops, fargs, kernels, flush, []))
            for _ in range(args.repeat):
                for fl, ops, fargs, _k, flush, got in runs:
                    got.append(_stages(fl, ops, wl, fargs, flush))
            cells = []
            for *_, kernels, _f, got in runs:
                med = [statistics.median(g[k] for g in got) * 1e6 for k in range(4)]
                lat = statistics.median(sum(g) for g in got) * 1e6
                cells.append(" / ".join(f"{m:.1f}" for m in med) + f" = {lat:.1f} [{kernels:g}]")
            t = _torch(wl, inputs, args.repeat)
            peer = f"{t[0]:.1f} ({t[1]:.1f})" if t else "-"
            print(f"{name:<16} {size:>9}  " + " | ".join(cells) + f" | {peer}", flush=True)


if __name__ == "__main__":
    main()
