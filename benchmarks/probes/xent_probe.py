"""Cross-entropy and row logsumexp: what fuseloop runs, and its time beside its peers.

The broad suite's forms (``fuseloop.bench.broad``): ``logsumexp-rows``,
``max + log(sum(exp(X - max)))`` over the rows of ``X``, and ``cross-entropy``,
``mean(logsumexp(X) - X[rows, labels])`` with device index arrays (float32 logits, 4096 x
4096 by default).  First ``fl.explain(..., run=True)`` of each: the kernels, their
grids, what each reads and writes, and each kernel's time alone.  Then one table, every
row checked against numpy (float64):

* ``fuseloop``: the lazy form as the suite times it (build the expression, ``.eval()``,
  ``fl.synchronize()``), median microseconds per call, kernels per call, and whether the
  call replayed a run plan (``plan``: nothing linearised or looked up again);
* ``pipelined``: the same calls back to back, one wait per ``--batch`` calls, per call:
  where this is far below the first column, the host's wait and launch latency is what
  the first column measures;
* the parts of cross-entropy, to tell where time goes: the row logsumexp alone, its
  mean (two kernels, no gather), the gather ``X[rows, labels]`` alone, and
  cross-entropy with numpy index arrays (checked on the host: no error flag);
* the peers of the device in the same run (torch, torch.compile, cupy, jax.jit and
  ``fl.fuse`` on a GPU; numpy on the CPU).

    python benchmarks/probes/xent_probe.py [--rows 4096] [--cols 4096] [--repeat 30]
"""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fuseloop as fl
from fuseloop import run_plans
from fuseloop.bench.broad import cross_entropy, logsumexp_rows
from fuseloop.bench.peers import make_peers
from fuseloop.bench.runner import median_time
from fuseloop.recipes import recipe_for


def reference(name: str, a: dict[str, np.ndarray]) -> np.ndarray:
    x = a["x"].astype(np.float64)
    m = x.max(axis=1)
    lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
    if name == "logsumexp-rows":
        return lse
    if name == "mean-logsumexp":
        return np.asarray(lse.mean())
    picked = x[a["rows"], a["labels"]]
    if name == "gather":
        return picked
    return np.asarray((lse - picked).mean())


def forms() -> list[tuple[str, str, Callable[..., Any]]]:
    """(row name, inputs, body(m, *arrays)) of every row of the table."""
    return [
        ("cross-entropy", "x,rows,labels", cross_entropy),
        ("logsumexp-rows", "x", logsumexp_rows),
        ("mean-logsumexp", "x", lambda m, x: m.mean(logsumexp_rows(m, x))),
        ("gather", "x,rows,labels", lambda m, x, rows, labels: x[rows, labels]),
    ]


def close(got: Any, want: np.ndarray) -> bool:
    got = np.asarray(got, np.float64)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))


def time_fuseloop(body: Callable[..., Any], args: list[Any], want: np.ndarray, repeat: int,
                  batch: int) -> tuple[float, float, int, bool, bool]:
    """(median s per call with a wait each, per call pipelined, kernels per call,
    replayed from a run plan, correct)."""
    def run() -> Any:
        return body(fl, *args).eval()

    ok = close(run().get(), want)
    fl.synchronize()
    fl.reset_stats()
    before = len(run_plans._plans)
    run()
    fl.synchronize()
    stats = fl.stats()
    planned = stats["kernels_lowered"] == 0 and len(run_plans._plans) == before and before > 0
    t = median_time(run, fl.synchronize, repeat)
    tp = median_time(run, fl.synchronize, max(3, repeat // 5), batch=batch)
    return t, tp, stats["kernels_launched"], planned, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--no-explain", action="store_true")
    args = ap.parse_args()
    device = fl.get_device()
    rng = np.random.default_rng(0)
    inputs = {"x": rng.uniform(-4, 4, (args.rows, args.cols)).astype(np.float32),
              "rows": np.arange(args.rows, dtype=np.int64),
              "labels": rng.integers(0, args.cols, args.rows, dtype=np.int64)}
    on_device = {k: fl.asarray(v) for k, v in inputs.items()}
    only = None if device.type == "cpu" else \
        ["torch", "torch.compile", "cupy", "jax.jit", "fuseloop.fuse"]
    peers, skipped = make_peers(device.type, only)
    peers = [p for p in peers if not p.name.startswith("numexpr")]  # (no form of these)
    print(f"device: {device.name} ({device.type}, {device.compute_units} units); "
          f"reduction recipe {recipe_for(device, 'reduction').name}; "
          f"{args.rows} x {args.cols} float32; peers: {', '.join(p.name for p in peers)}"
          + (f"; skipped: {skipped}" if skipped else ""))

    if not args.no_explain:
        x, rows, labels = on_device["x"], on_device["rows"], on_device["labels"]
        for name, expr in (("cross-entropy", cross_entropy(fl, x, rows, labels)),
                           ("logsumexp-rows", logsumexp_rows(fl, x))):
            print(f"\n# fl.explain({name}, run=True)")
            print(fl.explain(expr, run=True).as_text())

    print()
    cols = ["fuseloop", "pipelined", "kernels", "plan"] + [p.name for p in peers]
    print(f"{'case':22s}" + "".join(f" {c:>14s}" for c in cols) + "  best peer/fuseloop  ok")
    cases = [(n, names, body, False) for n, names, body in forms()]
    cases.append(("xent, host indices", "x,rows,labels", cross_entropy, True))
    for name, names, body, host_index in cases:
        keys = names.split(",")
        want = reference("cross-entropy" if host_index else name, inputs)
        fl_args = [inputs[k] if host_index and k != "x" else on_device[k] for k in keys]
        t, tp, kernels, planned, ok = time_fuseloop(body, fl_args, want, args.repeat,
                                                    args.batch)
        cells = [f"{t * 1e6:14.1f}", f"{tp * 1e6:14.1f}", f"{kernels:14d}",
                 f"{'yes' if planned else 'no':>14s}"]
        best = float("inf")
        for p in peers:
            if host_index:
                cells.append(f"{'':>14s}")
                continue
            wl = types.SimpleNamespace(name=name, inputs=keys,
                                       peer=lambda ops, *a, body=body: body(ops, *a))
            try:
                run = p.prepare(wl, inputs)  # type: ignore[arg-type]
                ok &= close(p.to_numpy(run()), want)
                tpeer = median_time(run, lambda p=p: p.sync(None), args.repeat)
                best = min(best, tpeer)
                cells.append(f"{tpeer * 1e6:14.1f}")
            except Exception as exc:  # a peer without this form: say so, go on
                cells.append(f"{type(exc).__name__[:14]:>14s}")
            p.release()
        ratio = f"{best / t:18.2f}" if best < float("inf") else f"{'-':>18s}"
        print(f"{name:22s}" + " ".join(["", *cells]) + f"  {ratio}  {'yes' if ok else 'NO'}")
    print("\nmicroseconds per call, median; 'pipelined': calls back to back, one wait per "
          f"{args.batch}")


if __name__ == "__main__":
    main()
