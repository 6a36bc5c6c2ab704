"""Products with a short side (issue 25): fuseloop against its peers, as a fraction of copy.

Cases (float32, ``--n`` 4096): 1, 8 and 64 rows times an n x n matrix, ``x @ A``
(vecmat), ``A @ x`` (matvec, a row reduction), 8 columns (``A @ B[:, :8]``) and 8
rows times a transposed matrix (``X @ B.T``).  Each is bound by reading its long
operand once, so next to the times the table prints the fraction of the device's
copy bandwidth (read + write of a buffer copy, measured in the same run) that
``bytes moved / time`` reaches: operands and result once, split-K's partial
products not counted.  fuseloop is timed with the contraction recipe's defaults
("rule") and, on a GPU, with ``stream=0`` (the kernels before the streaming one:
split_lanes or tiles), a few variants of the streaming kernel's parameters and the
lanes kernel without its staging (``no stage``) or its unrolled walk (``lanes u1``);
peers in the same run: torch, torch.compile and cupy on a GPU, numpy on the CPU.
Every result is checked against numpy (float64).  Times are medians in microseconds;
``x peer`` is the best peer's time over fuseloop's default time.

    python benchmarks/probes/skinny_probe.py [--n 4096] [--repeat 20] [--no-variants]
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fuseloop as fl
from fuseloop.bench.peers import make_peers
from fuseloop.bench.runner import copy_bandwidth, median_time
from fuseloop.recipes import recipe_for
from fuseloop.splits import two_stage_split

#: variants of the GPU recipe timed next to its defaults (name, parameters)
VARIANTS = (("stream=0", {"stream": 0}), ("per 1", {"stream_per": 1}),
            ("per 2", {"stream_per": 2}), ("unroll 4", {"stream_unroll": 4}),
            ("unroll 16", {"stream_unroll": 16}), ("group 64", {"stream_group": 64}),
            ("group 256", {"stream_group": 256}), ("split 16", {"split_k": 16}),
            ("no stage", {"skinny_stage": False}), ("lanes u1", {"skinny_unroll": 1}))


def _matmul(ops, a, b):
    return ops.matmul(a, b) if hasattr(ops, "matmul") else a @ b


def _matmul_bt(ops, a, b):
    bt = ops.transpose(b) if hasattr(ops, "transpose") and not hasattr(b, "T") else b.T
    return _matmul(ops, a, bt)


def cases(n: int, rng: np.random.Generator) -> list[tuple[str, dict[str, np.ndarray], object]]:
    def f32(*shape):
        return rng.random(shape, dtype=np.float32) - 0.5

    shapes = [("1-row", (1, n), (n, n), _matmul), ("8-row", (8, n), (n, n), _matmul),
              ("64-row", (64, n), (n, n), _matmul), ("vecmat", (n,), (n, n), _matmul),
              ("matvec", (n, n), (n,), _matmul), ("8-col", (n, n), (n, 8), _matmul),
              ("8-row B.T", (8, n), (n, n), _matmul_bt)]
    return [(name, {"a": f32(*sa), "b": f32(*sb)}, body) for name, sa, sb, body in shapes]


def reference(name: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    a, b = inputs["a"].astype(np.float64), inputs["b"].astype(np.float64)
    return a @ (b.T if name.endswith("B.T") else b)


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


def time_peers(peers, name, inputs, body, want, repeat) -> tuple[list[float | str], bool]:
    out: list[float | str] = []
    ok = True
    for p in peers:
        wl = types.SimpleNamespace(name=name, inputs=list(inputs),
                                   peer=lambda ops, *a, body=body: body(ops, *a))
        try:
            run = p.prepare(wl, inputs)
            ok &= _close(np.asarray(p.to_numpy(run()), np.float64), want)
            out.append(median_time(run, lambda p=p: p.sync(None), repeat))
        except Exception as exc:  # a peer without this form: say so, go on
            out.append(type(exc).__name__[:12])
        p.release()
    return out, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-variants", action="store_true")
    args = ap.parse_args()
    device = fl.get_device()
    base = recipe_for(device, "contraction")
    variants = [] if args.no_variants or "stream" not in base.values else list(VARIANTS)
    peers, skipped = make_peers(device.type)
    peers = [p for p in peers if not p.name.startswith("numexpr")]  # (no form of these)
    copy = copy_bandwidth(4 * args.n * args.n, args.repeat)
    print(f"device: {device.name} ({device.type}, {device.compute_units} units); contraction "
          f"recipe {base.name}; copy bandwidth {copy:.0f} GB/s; peers: "
          + ", ".join(p.name for p in peers) + (f"; skipped: {skipped}" if skipped else ""))
    cols = ["rule"] + [v for v, _ in variants]
    print(f"{'case':10s} {'pieces':>6s} {'kern':>4s} " + " ".join(f"{c:>9s}" for c in cols)
          + "".join(f" {p.name:>13s}" for p in peers)
          + f" {'x peer':>6s} {'fl %copy':>8s} {'peer %copy':>10s}  ok")
    rng = np.random.default_rng(0)
    for name, inputs, body in cases(args.n, rng):
        want = reference(name, inputs)
        arrays = [fl.asarray(v) for v in inputs.values()]
        nbytes = sum(v.nbytes for v in inputs.values()) + want.size * 4
        e = body(fl, *arrays)
        split = two_stage_split([e._node], e.shape, device)
        pieces = str(split.pieces if split is not None else 1)
        times: list[float] = []
        all_ok, kernels = True, -1
        for col in cols:
            params = dict(variants)[col] if col != "rule" else {}
            with fl.recipes.use(base.with_params(**params) if params else base):
                t, ok, k = time_fuseloop(body, arrays, want, args.repeat)
            all_ok &= ok
            kernels = k if col == "rule" else kernels
            times.append(t)
        peer_times, ok = time_peers(peers, name, inputs, body, want, args.repeat)
        all_ok &= ok
        best_peer = min((t for t in peer_times if isinstance(t, float)), default=float("nan"))

        def frac(t: float, nbytes: int = nbytes) -> str:
            return f"{nbytes / t / 1e9 / copy:.0%}" if t == t else "-"

        print(f"{name:10s} {pieces:>6s} {kernels:4d} "
              + " ".join(f"{t * 1e6:9.1f}" for t in times)
              + "".join(f" {t * 1e6:13.1f}" if isinstance(t, float) else f" {t:>13s}"
                        for t in peer_times)
              + f" {best_peer / times[0]:6.2f} {frac(times[0]):>8s} {frac(best_peer):>10s}"
              + f"  {'yes' if all_ok else 'NO'}")


if __name__ == "__main__":
    main()
