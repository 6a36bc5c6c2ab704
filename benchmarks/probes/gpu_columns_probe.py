"""Column and middle-axis reductions on a GPU: the narrow-column rule against the old one,
in one process, with torch eager and torch.compile as peers (issue 25).

Variants (both use the registry's ``gpu-rows`` but for the parameters named):

* ``new``: the defaults: a row with fewer outputs than ``column_group`` gets groups of
  ``w`` outputs by ``column_slices`` slices of the reduced axis (0: ``max(group,
  column_group) / w``), the split's pieces counted with those slices, and a column mean
  nested in a split column reduction runs its first stage only (``splits.COLUMN_FOLD``).
* ``old``: ``column_slices=1`` (in a first stage or middle axis, a work-item per output
  and piece: the old rule's piece count and walk per work-item, in groups of ``w``
  where the old layout put ``column_group / w`` pieces in a group; combines as before)
  and ``COLUMN_FOLD`` off (the nested mean's two stages first).
* ``items=K`` (``--items``): the new rule with ``column_items=K`` work-items wanted per
  compute unit (more or fewer pieces).

Each case is timed lazily (``.eval()``/``fl.compute`` then synchronize) and under
``fl.fuse`` (median of ``--repeat`` calls, each synchronised), with the kernels launched
per call, the result checked against numpy (float64); "of copy" is the time of a copy
of the input (the copy bandwidth, read + write, measured in the same run) over the
case's; ``tc/fl`` is torch.compile's time over fuseloop's (above 1: fuseloop faster).

    python benchmarks/probes/gpu_columns_probe.py [--n-log2 24] [--cases bn,colstat]
        [--items 2048,4096] [--no-torch] [--out probe.json]
    python benchmarks/probes/gpu_columns_probe.py --device cpu --target cpu --n-log2 16 \
        --no-torch --repeat 3          (the GPU recipes on the CPU: a check, not a timing)
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
import fuseloop.splits as splits
from fuseloop.bench.runner import copy_bandwidth, median_time
from fuseloop.recipes import gpu_coalesced
from fuseloop.recipes.rows import gpu_rows


def _bn(m: Any, x: Any) -> tuple:
    mean = m.mean(x, axis=0)
    return mean, m.mean((x - m.mean(x, axis=0)) ** 2, axis=0)


def _sq(n: int) -> tuple[int, int]:
    side = 1 << (int(math.log2(n)) // 2)
    return side, n // side


def _mid(n: int) -> tuple[int, int, int]:
    a, b = _sq(n // 64)
    return a, b, 64


# name: (shape for n elements, dtype, function of (module, x)); the module is fl, numpy
# or torch, each spelled alike (torch's ``amax``/``dim`` through _T)
CASES: dict[str, tuple[Callable[[int], tuple[int, ...]], Any, Callable[..., Any]]] = {
    "bn": (lambda n: (n // 64, 64), np.float32, _bn),
    "colstat": (_sq, np.float32, lambda m, x: m.mean((x - m.mean(x, axis=0)) ** 2, axis=0)),
    "col-sum": (_sq, np.float32, lambda m, x: m.sum(x, axis=0)),
    "int-max-cols": (_sq, np.int32, lambda m, x: m.max(x, axis=0)),
    "narrow-8": (lambda n: (n // 8, 8), np.float32, lambda m, x: m.sum(x, axis=0)),
    "sum-middle": (_mid, np.float32, lambda m, x: m.sum(x, axis=1)),
    "sum-axes02": (_mid, np.float32, lambda m, x: m.sum(x, axis=(0, 2))),
    "f64-colvar": (lambda n: (n // 128, 64), np.float64,
                   lambda m, x: m.mean((x - m.mean(x, axis=0)) ** 2, axis=0)),
}


class _T:
    """torch spelled as numpy for these cases."""

    def __init__(self, torch: Any) -> None:
        self.t = torch

    def mean(self, x: Any, axis: Any) -> Any:
        return self.t.mean(x, dim=axis)

    def sum(self, x: Any, axis: Any) -> Any:
        return self.t.sum(x, dim=axis)

    def max(self, x: Any, axis: Any) -> Any:
        return self.t.amax(x, dim=axis)


def _variant(name: str) -> Any:
    """The reduction recipe and COLUMN_FOLD of a variant (see the module docstring)."""
    if name == "old":
        return gpu_rows.with_params(column_slices=1), False
    if name.startswith("items="):
        return gpu_rows.with_params(column_items=int(name[6:])), True
    return gpu_rows, True


def _check(got: Any, want: Any, dtype: Any) -> bool:
    tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
    gots = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    return all(np.allclose(np.asarray(g.get()), w, rtol=tol, atol=tol * np.abs(w).max())
               for g, w in zip(gots, wants))


def _fl_runners(fn: Callable[..., Any], x: Any) -> dict[str, Callable[[], Any]]:
    def lazy() -> Any:
        r = fn(fl, x)
        return fl.compute(*r) if isinstance(r, tuple) else r.eval()

    fused = fl.fuse(lambda a: fn(fl, a))
    return {"lazy": lazy, "fuse": lambda: fused(x)}


def _launches(run: Callable[[], Any]) -> int:
    run()
    fl.synchronize()
    fl.reset_stats()
    run()
    fl.synchronize()
    return fl.stats()["kernels_launched"]


def _torch_times(fn: Callable[..., Any], h: np.ndarray, repeat: int) -> dict[str, float]:
    import torch

    t = torch.from_numpy(h).cuda()
    ops = _T(torch)
    compiled = torch.compile(lambda a: fn(ops, a), dynamic=False)
    out = {}
    for label, run in (("torch", lambda: fn(ops, t)), ("torch.compile", lambda: compiled(t))):
        out[label] = median_time(run, torch.cuda.synchronize, repeat, warmup=3)
    torch._dynamo.reset()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default=None)
    ap.add_argument("--n-log2", type=int, default=24)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--items", default="", help="column_items values to try (new rule)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--target", default="gpu", help="the device type the recipes "
                    "are registered for (cpu: the GPU recipes on a CPU device)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    if args.target != "gpu":
        fl.register_recipe(args.target, gpu_coalesced, name="probe-coalesced")
    n = 1 << args.n_log2
    copy = copy_bandwidth(4 * n, args.repeat, warmup=3)
    print(f"device: {dev.name}; copy (read + write) {copy:.0f} GB/s", flush=True)
    variants = ["old", "new", *(f"items={k}" for k in args.items.split(",") if k)]
    rows = []
    rng = np.random.default_rng(0)
    for case in args.cases.split(","):
        shape_of, dtype, fn = CASES[case]
        shape = shape_of(n if np.dtype(dtype).itemsize == 4 else n // 2)
        h = (rng.integers(-1000, 1000, shape).astype(dtype) if np.dtype(dtype).kind == "i"
             else rng.random(shape).astype(dtype))
        ref = fn(np, h.astype(np.float64) if h.dtype.kind == "f" else h)
        x = fl.asarray(h)
        peers = {} if args.no_torch else _torch_times(fn, h, args.repeat)
        for name in variants:
            recipe, fold = _variant(name)
            fl.register_recipe(args.target, recipe, name=f"probe-{name}", kind="reduction")
            splits.COLUMN_FOLD = fold
            for mode, run in _fl_runners(fn, x).items():
                ok = _check(run(), ref, dtype)
                t = median_time(run, fl.synchronize, args.repeat, warmup=3)
                r = dict(case=case, shape=shape, variant=name, mode=mode, ms=t * 1e3,
                         launches=_launches(run), copy_frac=2 * h.nbytes / t / 1e9 / copy,
                         correct=ok, **{f"{k}_ms": v * 1e3 for k, v in peers.items()})
                if "torch.compile" in peers:
                    r["tc_over_fl"] = peers["torch.compile"] / t
                rows.append(r)
                print(f"{case:13s} {shape!s:18s} {name:11s} {mode:5s} {t * 1e3:8.3f} ms "
                      f"{r['launches']} kernels {100 * r['copy_frac']:5.1f}% of copy"
                      + (f"  tc/fl {r['tc_over_fl']:.2f}" if "tc_over_fl" in r else "")
                      + ("" if ok else "  MISMATCH"), flush=True)
        if peers:
            print(f"{case:13s} torch {peers['torch'] * 1e3:.3f} ms, torch.compile "
                  f"{peers['torch.compile'] * 1e3:.3f} ms", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=dev.name, copy_gbs=copy, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
