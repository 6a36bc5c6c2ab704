"""A lazy call of the broad suite's workloads that lose to torch eager (issue 25) against
torch eager in the same process: the suite's own inputs, expressions and sizes.

Per case and size, after warm-up, microseconds per call (median of ``--repeat``):

* ``lat``: the expression built, ``.eval()``-ed, then ``fl.synchronize()`` (what the
  broad suite times);
* ``host``: the wall time until ``.eval()`` returns (the host's part before the wait);
* ``loop``: ``--batch`` calls then one synchronize, over the count;
* ``torch``: torch eager's ``lat`` (``torch.cuda.synchronize()``), where torch sees a
  CUDA device; ``t/lat`` >= 1: ours is as fast;

and per call the kernels launched, the run plans replayed and the plans walked
(``fl.stats()``).  Each result is checked once against numpy (``NO`` where it differs).
Reported, never asserted.  One fuseloop per process, the one ``import fuseloop`` finds
(compare revisions by ``PYTHONPATH``); ``--fake-gpu`` presents the CPU device as a
132-unit GPU (with ``FUSELOOP_HOST_PATH=0``: the device path a GPU's host takes);
``--defer-max 0`` enqueues every launch at once (small ones are otherwise deferred to the
next synchronize: does a lone call's kernel gain by starting before the host's tail?).

``--ab REV ...`` instead compares revisions (git revisions, folders holding ``fuseloop/``,
``WT``) in one process (``compare_host_overhead.import_revisions``), rounds interleaved:
per case, the thread's CPU microseconds per call of the build, the ``.eval()`` and the
``synchronize()`` (the least over ``--rounds`` rounds of ``--batch`` calls) and the kernels.

    PYTHONPATH=$PWD python benchmarks/probes/lazy_host_cases.py --device cuda:0
    FUSELOOP_HOST_PATH=0 python benchmarks/probes/lazy_host_cases.py --fake-gpu --size 65536
    FUSELOOP_HOST_PATH=0 python benchmarks/probes/lazy_host_cases.py --fake-gpu --size 65536 \
        --ab 9c3dcfa WT
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from lazy_call_ab import _times as times  # (its sibling's timing: lat, host, loop)

CASES = ("small-matvec,vecmat,matmul-8rows,matmul-64rows,matmul-8cols,argmin-all,"
         "sum-all-keepdims,argmax-rows,int-max-cols,small-softmax,sum-middle,sum-axes02")


def _torch(wl: Any, inputs: dict[str, np.ndarray], repeat: int, batch: int) -> float | None:
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
    return times(lambda: wl.peer(ops, *args), torch.cuda.synchronize, repeat, batch)[0]


def case(fl: Any, wl: Any, size: int, repeat: int, batch: int) -> dict[str, Any]:
    """One workload at one size: the figures of the module's docstring."""
    from fuseloop.bench.peers import FuseloopOps

    inputs = wl.make_inputs(size, np.random.default_rng(0))
    args = [fl.asarray(inputs[k]) for k in wl.inputs]
    ops = FuseloopOps(fl)

    def call() -> Any:
        return wl.peer(ops, *args).eval()

    want = wl.reference(*[inputs[k] for k in wl.inputs])
    ok = bool(np.allclose(np.asarray(call().get()), want, rtol=max(wl.rtol, 1e-3),
                          atol=max(wl.atol, 1e-3 * float(np.abs(want).max()))))
    fl.synchronize()
    fl.reset_stats()
    for _ in range(4):
        call()
        fl.synchronize()
    st = {k: v / 4 for k, v in fl.stats().items()}
    lat, host, loop = times(call, fl.synchronize, repeat, batch)
    return {"lat": lat, "host": host, "loop": loop, "ok": ok, "torch": _torch(
        wl, inputs, repeat, batch), "kernels": st["kernels_launched"],
        "replayed": st["plans_replayed"], "walked": st["plans_walked"]}


def stages(fls: list[Any], wl: Any, size: int, rounds: int, batch: int) -> list[list[float]]:
    """Per revision (``fls``: their packages): CPU us per call of build, eval and sync
    (the least over the rounds, interleaved), then the kernels per call."""
    inputs = wl.make_inputs(size, np.random.default_rng(0))
    runs = []
    for fl in fls:
        ops = importlib.import_module(f"{fl.__name__}.bench.peers").FuseloopOps(fl)
        args = [fl.asarray(inputs[k]) for k in wl.inputs]
        for _ in range(5):
            wl.peer(ops, *args).eval()
            fl.synchronize()
        fl.reset_stats()
        wl.peer(ops, *args).eval()
        fl.synchronize()
        runs.append((fl, ops, args, fl.stats()["kernels_launched"]))
    best = [[float("inf")] * 3 for _ in fls]
    clock = time.thread_time
    for _ in range(rounds):
        for k, (fl, ops, args, _n) in enumerate(runs):
            spent = [0.0, 0.0, 0.0]
            for _ in range(batch):
                t0 = clock()
                x = wl.peer(ops, *args)
                t1 = clock()
                r = x.eval()
                t2 = clock()
                fl.synchronize()
                t3 = clock()
                spent[0] += t1 - t0
                spent[1] += t2 - t1
                spent[2] += t3 - t2
                del x, r
            best[k] = [min(b, v / batch * 1e6) for b, v in zip(best[k], spent)]
    return [[*b, run[3]] for b, run in zip(best, runs)]


def ab(revs: list[str], names: list[str], size: int, rounds: int, batch: int,
       fake: bool, defer_max: int | None) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from compare_host_overhead import import_revisions

    fls = import_revisions(revs, "lh")
    for fl in fls:
        if defer_max is not None:
            set_defer_max(fl, defer_max)
        if fake:
            fake_gpu(fl)
    broad = {wl.name: wl for wl in importlib.import_module(f"{fls[0].__name__}.bench.broad").BROAD}
    print("CPU us per call: build / eval / sync [kernels], per revision: " + " | ".join(revs))
    for name in names:
        wl = broad[name]
        for size_ in (round(size ** 0.5),) if wl.kind == "matmul" else wl.sizes or (size,):
            got = stages(fls, wl, size_, rounds, batch)
            print(f"{name:<17} {size_:>9} " + " | ".join(
                f"{b:6.1f} / {e:6.1f} / {s:6.1f} [{n:g}]" for b, e, s, n in got), flush=True)


def set_defer_max(fl: Any, elements: int) -> None:
    """Small launches deferred up to ``elements`` (``launching.DEFER_MAX_ELEMENTS``; 0:
    every launch enqueued at once), in every module holding a copy; before any call."""
    for name in ("launching", "plan_steps", "fuse"):
        mod = importlib.import_module(f"{fl.__name__}.{name}")
        if hasattr(mod, "DEFER_MAX_ELEMENTS"):
            mod.DEFER_MAX_ELEMENTS = elements


def fake_gpu(fl: Any) -> None:
    """The CPU device as a 132-unit GPU (a compile worker would find no such device)."""
    os.environ["FUSELOOP_COMPILE"] = "inline"
    cpu = fl.set_device("cpu")
    fl.set_device(dataclasses.replace(cpu, index=9132, type="gpu", compute_units=132,
                                      max_work_group_size=1024))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="device spec (default: fuseloop's)")
    ap.add_argument("--fake-gpu", action="store_true")
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--size", type=int, default=1 << 24,
                    help="elements (matrix order: its square root) of the large cases")
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--ab", nargs="+", help="revisions to compare in one process")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--defer-max", type=int, default=None,
                    help="launching.DEFER_MAX_ELEMENTS (0: no launch deferred)")
    args = ap.parse_args()
    if args.fake_gpu:
        os.environ["FUSELOOP_COMPILE"] = "inline"
    if args.ab:
        ab(args.ab, args.cases.split(","), args.size, args.rounds, args.batch, args.fake_gpu,
           args.defer_max)
        return
    import fuseloop as fl
    from fuseloop.bench.broad import BROAD

    if args.defer_max is not None:
        set_defer_max(fl, args.defer_max)
    if args.fake_gpu:
        fake_gpu(fl)
    elif args.device:
        fl.set_device(args.device)
    print(f"{fl.__file__} on {fl.get_device().name}: us per call, lat / host / loop "
          "[kernels, replays, walks]; torch eager lat (t/lat)", flush=True)
    by_name = {wl.name: wl for wl in BROAD}
    for name in args.cases.split(","):
        wl = by_name[name]
        if wl.kind == "matmul":
            sizes: tuple[int, ...] = (round(args.size ** 0.5),)
        else:
            sizes = wl.sizes or (args.size,)
        for size in sizes:
            g = case(fl, wl, size, args.repeat, args.batch)
            t = g["torch"]
            ratio = f"{t:7.1f} ({t / g['lat']:.2f})" if t else "-"
            print(f"{name:<17} {size:>9} {g['lat']:7.1f} / {g['host']:6.1f} / "
                  f"{g['loop']:6.1f} [{g['kernels']:g}, {g['replayed']:g}, {g['walked']:g}]"
                  f"  {ratio}{'' if g['ok'] else ' NO'}", flush=True)


if __name__ == "__main__":
    main()
