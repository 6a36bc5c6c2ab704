"""Split-K on contractions with few outputs, and cross-entropy: fuseloop against its peers.

For each matrix product with few output tiles (8 and 64 rows, ``x @ A``, 8 columns;
float32, 4096) fuseloop is timed with the contraction recipe's ``split_k`` at 1 (no
split), 0 (the rule of :mod:`fuseloop.split_k`; the pieces it picks are printed) and a
few fixed values, next to the peers of the device in the same run (torch, torch.compile
and cupy on a GPU; numpy on the CPU, where the CPU recipe has no split_k and only
``rule`` is timed).  Cross-entropy (``mean(logsumexp(X) - X[rows, labels])``, 4096 x
4096 float32 logits, the broad suite's workload) is timed once, with its kernel count.
Every result is checked against numpy (float64).  Times are medians in microseconds;
``x peer`` columns are the best peer's time over fuseloop's best (higher is better).

    python benchmarks/probes/split_k_probe.py [--n 4096] [--repeat 20] [--splits 2,4,8,16]
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fuseloop as fl
from fuseloop.bench.broad import cross_entropy
from fuseloop.bench.peers import make_peers
from fuseloop.bench.runner import median_time
from fuseloop.recipes import recipe_for
from fuseloop.splits import two_stage_split


def _matmul(ops, a, b):
    return ops.matmul(a, b) if hasattr(ops, "matmul") else a @ b


def cases(n: int, rng: np.random.Generator) -> list[tuple[str, dict[str, np.ndarray], object]]:
    def f32(*shape):
        return (rng.random(shape, dtype=np.float32) - 0.5)

    mm = [("8-row", (8, n), (n, n)), ("64-row", (64, n), (n, n)), ("vecmat", (n,), (n, n)),
          ("8-col", (n, n), (n, 8))]
    out: list[tuple[str, dict[str, np.ndarray], object]] = [
        (name, {"a": f32(*sa), "b": f32(*sb)}, _matmul) for name, sa, sb in mm]
    logits = rng.uniform(-4, 4, (n, n)).astype(np.float32)
    out.append(("cross-entropy", {"x": logits, "rows": np.arange(n, dtype=np.int64),
                                  "labels": rng.integers(0, n, n, dtype=np.int64)},
                cross_entropy))
    return out


def reference(name: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    if name == "cross-entropy":
        x = inputs["x"].astype(np.float64)
        m = x.max(axis=1)
        lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
        return np.asarray((lse - x[inputs["rows"], inputs["labels"]]).mean())
    return inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    scale = max(1.0, float(np.abs(want).max()))
    return bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale))


def time_fuseloop(body, arrays, want, repeat: int) -> tuple[float, bool, int]:
    """(median seconds, result correct, kernels launched per evaluation)."""
    def run():
        return body(fl, *arrays).eval()

    ok = _close(np.asarray(run().get(), np.float64), want)
    fl.reset_stats()
    run()
    fl.synchronize()
    kernels = fl.stats()["kernels_launched"]
    return median_time(run, fl.synchronize, repeat), ok, kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--splits", default="2,4,8,16")
    args = ap.parse_args()
    device = fl.get_device()
    base = recipe_for(device, "contraction")
    has_split = "split_k" in base.values
    fixed = [int(s) for s in args.splits.split(",") if s] if has_split else []
    peers, skipped = make_peers(device.type)
    peers = [p for p in peers if not p.name.startswith("numexpr")]  # (no form of these)
    print(f"device: {device.name} ({device.type}, {device.compute_units} units); "
          f"contraction recipe {base.name}; peers: {', '.join(p.name for p in peers)}"
          + (f"; skipped: {skipped}" if skipped else ""))
    rng = np.random.default_rng(0)
    cols = (["split 1", "rule"] if has_split else ["rule"]) + [f"split {s}" for s in fixed]
    head = f"{'case':14s} {'pieces':>6s} " + " ".join(f"{c:>10s}" for c in cols) \
        + "".join(f" {p.name:>14s}" for p in peers) + f" {'x peer':>7s}  kernels  ok"
    print(head)
    for name, inputs, body in cases(args.n, rng):
        want = reference(name, inputs)
        arrays = [fl.asarray(v) for v in inputs.values()]
        pieces = "-"
        if name != "cross-entropy":
            e = body(fl, *arrays)
            split = two_stage_split([e._node], e.shape, device)
            pieces = str(split.pieces if split is not None else 1)
        times: list[str] = []
        best = float("inf")
        kernels, all_ok = -1, True
        for col in cols:
            value = {"split 1": 1, "rule": 0}.get(col) if col in ("split 1", "rule") \
                else int(col.split()[1])
            if name == "cross-entropy" and col != "rule":
                times.append(f"{'':>10s}")
                continue
            recipe = base.with_params(split_k=value) if has_split else base
            with fl.recipes.use(recipe):
                t, ok, k = time_fuseloop(body, arrays, want, args.repeat)
            all_ok &= ok
            if col == "rule":
                kernels = k
            best = min(best, t)
            times.append(f"{t * 1e6:10.1f}")
        peer_times = []
        best_peer = float("inf")
        for p in peers:
            wl = types.SimpleNamespace(name=name, inputs=list(inputs),
                                       peer=lambda ops, *a, body=body: body(ops, *a))
            try:
                run = p.prepare(wl, inputs)
                got = p.to_numpy(run())
                all_ok &= _close(np.asarray(got, np.float64), want)
                t = median_time(run, lambda p=p: p.sync(None), args.repeat)
                best_peer = min(best_peer, t)
                peer_times.append(f" {t * 1e6:14.1f}")
            except Exception as exc:  # a peer without this form: say so, go on
                peer_times.append(f" {type(exc).__name__[:14]:>14s}")
            p.release()
        ratio = best_peer / best if best_peer < float("inf") else float("nan")
        print(f"{name:14s} {pieces:>6s} " + " ".join(times) + "".join(peer_times)
              + f" {ratio:7.2f}  {kernels:7d}  {'yes' if all_ok else 'NO'}")


if __name__ == "__main__":
    main()
