"""The GPU reduction recipe's layouts (``gpu-rows``), by rule against each forced one.

For each broad-suite workload whose reductions the layout rule touches, times
fuseloop with the rule (``layout="auto"``, the default) and with each layout forced
(``"group"`` is the layout every contiguous row had before the rule), and torch on the
same device as the peer, in one run; every result is checked against the suite's
float64 numpy reference first.  Prints one table of milliseconds (median of
``--repeat`` calls after two warm-up calls, each synchronised).

Usage::

    python benchmarks/bench_row_layouts.py [--size 16777216] [--repeat 10]
                                           [--workloads distances,softmax-128,...]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench import broad
from fuseloop.bench.runner import median_time
from fuseloop.recipes import gpu_rows

WORKLOADS = ("distances,softmax-128,cross-entropy,batchnorm-stats,argmin-all,argmax-rows,"
             "colstat,layernorm,sum-all-keepdims,logsumexp-rows,small-softmax,int-max-cols")
LAYOUTS = ("auto", "group", "slice", "short")


def _torch_runner(w: Any, inputs: dict[str, np.ndarray]) -> Any:
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        from fuseloop.bench.peers import TorchOps
    except ImportError:
        return None
    ops = TorchOps(torch)
    args = [torch.as_tensor(inputs[k]).cuda() for k in w.inputs]
    return lambda: w.peer(ops, *args), torch.cuda.synchronize


def _check(w: Any, got: Any, want: Any) -> None:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g.get()), r, rtol=w.rtol, atol=w.atol)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--workloads", default=WORKLOADS)
    a = ap.parse_args()
    suite = {w.name: w for w in broad.BROAD}
    rng = np.random.default_rng(0)
    print(f"device: {fl.get_device().name}; size {a.size}; ms, median of {a.repeat}")
    print("| workload | " + " | ".join(f"layout={v}" for v in LAYOUTS) + " | torch |")
    print("| --- |" + " ---: |" * (len(LAYOUTS) + 1))
    for name in a.workloads.split(","):
        w = suite[name]
        size = w.sizes[-1] if w.sizes else a.size
        inputs = w.make(size, rng)
        arrays = [fl.asarray(inputs[k]) for k in w.inputs]
        want = w.reference(*[inputs[k] for k in w.inputs])
        cells = []

        def run(w: Any = w, arrays: list[fl.Array] = arrays) -> Any:
            out = w.peer(broad.FL_OPS, *arrays)
            return fl.compute(*out) if isinstance(out, tuple) else out.eval()

        for layout in LAYOUTS:
            with fl.recipes.use(gpu_rows.with_params(layout=layout)):
                try:
                    _check(w, run(), want)
                    t = median_time(run, fl.synchronize, a.repeat)
                    cells.append(f"{t * 1e3:.3f}")
                except Exception as exc:  # a forced layout may not build: say so
                    cells.append(type(exc).__name__)
        peer = _torch_runner(w, inputs)
        cells.append(f"{median_time(peer[0], peer[1], a.repeat) * 1e3:.3f}" if peer else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
