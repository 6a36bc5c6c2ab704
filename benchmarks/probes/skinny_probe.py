"""Products with a short side (issue 25): fuseloop against its peers, as a fraction of copy.

``--set npbench`` (the default): NPBench mlp's two large products at preset M
(``8 x 30000 @ 30000 x 10000`` and ``8 x 10000 @ 10000 x 10000``, float32; the
first also as mlp's layer, ``relu(h @ W + b)``, with the defaults only), 3mm's
three products at preset M (float64, square-ish: the tiled kernel, for reference),
``x @ A`` at 4096 and 16384, and 8, 16 and 64 rows times an 8192 x 8192 matrix.
``--set square``: 1, 8 and 64 rows times an ``--n`` x ``--n`` matrix, ``x @ A``,
``A @ x``, 8 columns (``A @ B[:, :8]``) and 8 rows times a transposed matrix.
``--scale S`` divides every long extent by ``S`` (the CPU run: the same shapes
scaled down).

Each product is bound by reading its long operand once, so next to the times the
table prints the fraction of the device's copy bandwidth (read + write of a buffer
copy, measured in the same run) that ``bytes moved / time`` reaches: operands and
result once, split-K's partial products not counted.  fuseloop is timed with the
contraction recipe's defaults ("rule") and, on a GPU, for the streamed cases
(``x @ A`` and up to ``stream`` rows), with the parameter sets of
:data:`VARIANTS` (the streaming kernel's work-group, columns per work-item,
unroll, accumulators and split-K pieces; ``stream=0``: the kernel before it);
peers in the same run: torch and cupy on a GPU (``--peers``), numpy on the CPU.
Every result is checked against numpy (float64).  Times are medians in
microseconds of ``--batch`` evaluations queued before one synchronisation (the
per-call time when the host's work overlaps the device's); ``x peer`` is the
best peer's time over fuseloop's default time.  Variants stop once ``--budget``
seconds are spent (then ``-``), so the run fits its time on an H200.

    python benchmarks/probes/skinny_probe.py [--set npbench|square] [--scale 1]
        [--n 4096] [--repeat 10] [--batch 5] [--budget 110] [--no-variants]
        [--only mlp-30000,...] [--peers torch,cupy]
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fuseloop as fl
from fuseloop.bench.peers import make_peers
from fuseloop.bench.runner import copy_bandwidth, median_time
from fuseloop.recipes import recipe_for
from fuseloop.splits import two_stage_split

#: parameter sets of the GPU recipe timed next to its defaults on streamed cases
VARIANTS = (("stream=0", {"stream": 0}), ("per 1", {"stream_per": 1}),
            ("per 4", {"stream_per": 4}), ("per 8 a64", {"stream_per": 8,
                                                        "stream_accumulators": 64}),
            ("unroll 4", {"stream_unroll": 4}), ("unroll 16", {"stream_unroll": 16}),
            ("group 64", {"stream_group": 64}), ("group 256", {"stream_group": 256}),
            ("split 8", {"split_k": 8}), ("split 64", {"split_k": 64}),
            ("g256 p4 u16", {"stream_group": 256, "stream_per": 4, "stream_unroll": 16}))

Body = Callable[..., object]


def _matmul(ops, a, b):
    return ops.matmul(a, b) if hasattr(ops, "matmul") else a @ b


def _matmul_bt(ops, a, b):
    bt = ops.transpose(b) if hasattr(ops, "transpose") and not hasattr(b, "T") else b.T
    return _matmul(ops, a, bt)


def _layer(ops, a, w, b):
    h = _matmul(ops, a, w) + b
    return ops.where(h > 0, h, 0 * h)


def _three(ops, a, b, c, d):
    return _matmul(ops, _matmul(ops, _matmul(ops, a, b), c), d)


def shapes(which: str, n: int, scale: int) -> list[tuple[str, list[tuple[int, ...]], str, Body]]:
    """``(name, operand shapes, dtype, body)`` of each case."""
    def s(v: int) -> int:
        return max(32, v // scale)

    if which == "square":
        n = s(n)
        return [("1-row", [(1, n), (n, n)], "f", _matmul),
                ("8-row", [(8, n), (n, n)], "f", _matmul),
                ("64-row", [(64, n), (n, n)], "f", _matmul),
                ("vecmat", [(n,), (n, n)], "f", _matmul),
                ("matvec", [(n, n), (n,)], "f", _matmul),
                ("8-col", [(n, n), (n, 8)], "f", _matmul),
                ("8-row B.T", [(8, n), (n, n)], "f", _matmul_bt)]
    big, mid, sq = s(30000), s(10000), s(8192)
    ni, nj, nk, nl, nm = (s(v) for v in (2000, 2200, 2400, 2600, 2800))
    return [(f"mlp-{big}", [(8, big), (big, mid)], "f", _matmul),
            (f"mlp-{mid}", [(8, mid), (mid, mid)], "f", _matmul),
            (f"relu-{big}", [(8, big), (big, mid), (mid,)], "f", _layer),
            ("3mm-AB", [(ni, nk), (nk, nj)], "d", _matmul),
            ("3mm-ABC", [(ni, nj), (nj, nm)], "d", _matmul),
            ("3mm-all", [(ni, nk), (nk, nj), (nj, nm), (nm, nl)], "d", _three),
            (f"xA-{s(4096)}", [(s(4096),), (s(4096), s(4096))], "f", _matmul),
            (f"xA-{s(16384)}", [(s(16384),), (s(16384), s(16384))], "f", _matmul),
            (f"8-row-{sq}", [(8, sq), (sq, sq)], "f", _matmul),
            (f"16-row-{sq}", [(16, sq), (sq, sq)], "f", _matmul),
            (f"64-row-{sq}", [(64, sq), (sq, sq)], "f", _matmul)]


def reference(body: Body, inputs: list[np.ndarray]) -> np.ndarray:
    ops = types.SimpleNamespace(matmul=np.matmul, transpose=np.transpose, where=np.where)
    return np.asarray(body(ops, *(v.astype(np.float64) for v in inputs)))


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    scale = max(1.0, float(np.abs(want).max()))
    return bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale))


def streamed(shape_list: list[tuple[int, ...]], stream: int) -> bool:
    """Whether a two-operand product has a side of at most ``stream`` outputs (the cases
    the streaming kernel's parameters apply to)."""
    if len(shape_list) != 2 or not stream:
        return False
    a, b = shape_list
    return len(a) == 1 or a[0] <= stream or (len(b) == 2 and b[1] <= stream)


def time_fuseloop(body, arrays, want, repeat: int, batch: int) -> tuple[float, bool, int]:
    """(median seconds, result correct, kernels launched per evaluation)."""
    def run():
        return body(fl, *arrays).eval()

    ok = _close(np.asarray(run().get(), np.float64), want)
    fl.reset_stats()
    run()
    fl.synchronize()
    kernels = fl.stats()["kernels_launched"]
    return median_time(run, fl.synchronize, repeat, batch=batch), ok, kernels


def time_peers(peers, name, inputs, body, want, repeat, batch) -> tuple[list[float | str], bool]:
    out: list[float | str] = []
    ok = True
    for p in peers:
        wl = types.SimpleNamespace(name=name, inputs=list(inputs),
                                   peer=lambda ops, *a, body=body: body(ops, *a))
        try:
            run = p.prepare(wl, inputs)
            ok &= _close(np.asarray(p.to_numpy(run()), np.float64), want)
            out.append(median_time(run, lambda p=p: p.sync(None), repeat, batch=batch))
        except Exception as exc:  # a peer without this form: say so, go on
            out.append(type(exc).__name__[:12])
        p.release()
    return out, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("npbench", "square"), default="npbench")
    ap.add_argument("--n", type=int, default=4096, help="--set square's extent")
    ap.add_argument("--scale", type=int, default=1, help="divide long extents by this")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--budget", type=float, default=110.0,
                    help="seconds after which variants are skipped")
    ap.add_argument("--no-variants", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--peers", default="torch,cupy", help="GPU peers (torch, cupy, jax, "
                    "torch.compile)")
    args = ap.parse_args()
    start = time.perf_counter()
    device = fl.get_device()
    base = recipe_for(device, "contraction")
    variants = [] if args.no_variants or "stream" not in base.values else list(VARIANTS)
    peers, skipped = make_peers(device.type)
    keep = set(args.peers.split(","))
    peers = [p for p in peers if (device.type == "cpu" and p.name == "numpy")
             or p.name in keep]
    copy = copy_bandwidth(1 << 28, args.repeat)
    print(f"device: {device.name} ({device.type}, {device.compute_units} units); contraction "
          f"recipe {base.name} {base.version}; copy bandwidth {copy:.0f} GB/s; peers: "
          + ", ".join(p.name for p in peers) + (f"; skipped: {skipped}" if skipped else ""))
    cols = ["rule"] + [v for v, _ in variants]
    print(f"{'case':12s} {'pieces':>6s} {'kern':>4s} " + " ".join(f"{c:>11s}" for c in cols)
          + "".join(f" {p.name:>13s}" for p in peers)
          + f" {'x peer':>6s} {'fl %copy':>8s} {'peer %copy':>10s}  ok")
    rng = np.random.default_rng(0)
    only = set(filter(None, args.only.split(",")))
    for name, shape_list, char, body in shapes(args.set, args.n, args.scale):
        if only and name not in only:
            continue
        dt = np.dtype(char)
        inputs = {f"x{k}": (rng.random(sh, dtype=dt) - 0.5) for k, sh in enumerate(shape_list)}
        want = reference(body, list(inputs.values()))
        arrays = [fl.asarray(v) for v in inputs.values()]
        nbytes = sum(v.nbytes for v in inputs.values()) + want.size * dt.itemsize
        e = body(fl, *arrays)
        split = two_stage_split([e._node], e.shape, device)
        pieces = str(split.pieces if split is not None else 1)
        del e
        times: list[float | None] = []
        all_ok, kernels = True, -1
        stream = int(base.values.get("stream", 0))
        for col in cols:
            if col != "rule" and (not streamed(shape_list, stream)
                                  or time.perf_counter() - start > args.budget):
                times.append(None)
                continue
            params = dict(variants)[col] if col != "rule" else {}
            with fl.recipes.use(base.with_params(**params) if params else base):
                t, ok, k = time_fuseloop(body, arrays, want, args.repeat, args.batch)
            all_ok &= ok
            kernels = k if col == "rule" else kernels
            times.append(t)
        peer_times, ok = time_peers(peers, name, inputs, body, want, args.repeat, args.batch)
        all_ok &= ok
        best_peer = min((t for t in peer_times if isinstance(t, float)), default=float("nan"))
        rule = times[0] or float("nan")

        def frac(t: float, nbytes: int = nbytes) -> str:
            return f"{nbytes / t / 1e9 / copy:.0%}" if t == t else "-"

        print(f"{name:12s} {pieces:>6s} {kernels:4d} "
              + " ".join(f"{t * 1e6:11.1f}" if t is not None else f"{'-':>11s}" for t in times)
              + "".join(f" {t * 1e6:13.1f}" if isinstance(t, float) else f" {t:>13s}"
                        for t in peer_times)
              + f" {best_peer / rule:6.2f} {frac(rule):>8s} {frac(best_peer):>10s}"
              + f"  {'yes' if all_ok else 'NO'}", flush=True)
        del arrays
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
