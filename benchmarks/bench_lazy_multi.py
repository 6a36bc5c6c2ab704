"""Host cost of lazy evaluations that run several kernels: lazy vs ``fl.fuse`` vs a peer.

Each case builds an expression of a few reductions and their consumers (two-stage
reductions, operands run first) and evaluates it with ``fl.compute``.  "lazy" builds and
evaluates the expression every call (structure key, run plan replay); "fuse" is the same
function under ``fl.fuse`` (recorded launches replayed, nothing built or keyed); the peer
is torch (``torch.compile`` when it works, else eager) on a CUDA device, numpy on the CPU.
The kernels are the same for lazy and fuse, so their difference is the lazy path's host
work.  Each call is followed by a wait (one call + wait), rounds interleaved, median us.
Reported, not asserted.

    PYTHONPATH=. python benchmarks/bench_lazy_multi.py [--device cuda:0] [--n 4096]
                                                       [--calls N] [--rounds R] [--case NAME]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl


def colstat(m: Any, X: Any, P: Any, V: Any) -> tuple:
    return (((X - X.mean(0)) ** 2).mean(0),)


def layernorm(m: Any, X: Any, P: Any, V: Any) -> tuple:
    mu = X.mean(axis=1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=1, keepdims=True)
    return ((X - mu) / m.sqrt(var + 1e-5),)


def logsumexp(m: Any, X: Any, P: Any, V: Any) -> tuple:
    top = X.max(axis=1, keepdims=True)
    top = top[0] if isinstance(top, tuple) else top  # (torch: values and indices)
    return (top[:, 0] + m.log(m.exp(X - top).sum(axis=1)),)


def nbody(m: Any, X: Any, P: Any, V: Any) -> tuple:
    d = P[None, :, :] - P[:, None, :]
    r2 = (d * d).sum(axis=2) + 0.01
    acc = (d * (r2 ** -1.5)[:, :, None]).sum(axis=1)
    return (P + 0.01 * acc,)


def minmax(m: Any, X: Any, P: Any, V: Any) -> tuple:
    return (V.min(), V.max(), V.sum(), (V * V).sum())


def argmax(m: Any, X: Any, P: Any, V: Any) -> tuple:
    return (X.argmax(1),)  # (a composite: max, compare, index, min; one kernel or two)


def argmin_all(m: Any, X: Any, P: Any, V: Any) -> tuple:
    return (X.argmin(),)


CASES: dict[str, Callable[..., tuple]] = {
    "colstat": colstat, "layernorm": layernorm, "logsumexp": logsumexp, "nbody": nbody,
    "minmax": minmax, "argmax": argmax, "argmin_all": argmin_all}


def _torch_peer(device: str, data: dict[str, np.ndarray]) -> tuple[Any, dict, Callable]:
    import torch

    td = {k: torch.as_tensor(v, device=device) for k, v in data.items()}
    return torch, td, torch.cuda.synchronize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--n", type=int, default=4096, help="X is n x n; V has n*n elements")
    ap.add_argument("--bodies", type=int, default=1024, help="n-body particles")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--case", choices=sorted(CASES), nargs="*", default=list(CASES))
    args = ap.parse_args()
    fl.set_device(args.device)
    rng = np.random.default_rng(0)
    data = {"X": rng.random((args.n, args.n), dtype=np.float32),
            "P": rng.random((args.bodies, 3), dtype=np.float32),
            "V": rng.random(args.n * args.n, dtype=np.float32)}
    fd = {k: fl.asarray(v) for k, v in data.items()}
    gpu = args.device.startswith("cuda") or "nvidia" in args.device.lower()
    peer_name = "numpy"
    if gpu:
        try:
            torch, td, tsync = _torch_peer("cuda", data)
            peer_name = "torch"
        except ImportError:
            gpu = False

    print(f"device {fl.get_device()}, X {args.n}x{args.n} float32, {args.bodies} bodies; "
          f"us per call + wait (median of {args.rounds} rounds of {args.calls})")
    peer_col = peer_name + ".compile" if gpu else peer_name
    print(f"{'case':<10} {'kernels':>7} {'lazy':>9} {'fuse':>9} {peer_col:>14}")
    for name in args.case:
        fn = CASES[name]

        def lazy(fn=fn) -> None:
            fl.compute(*fn(fl, fd["X"], fd["P"], fd["V"]))
            fl.synchronize()

        fused = fl.fuse(lambda X, P, V, fn=fn: fn(fl, X, P, V))

        def fuse(fused=fused) -> None:
            fused(fd["X"], fd["P"], fd["V"])
            fl.synchronize()

        want = fn(np, data["X"], data["P"], data["V"])
        for got in (fl.compute(*fn(fl, fd["X"], fd["P"], fd["V"])),
                    fused(fd["X"], fd["P"], fd["V"])):
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.asarray(g.get()), w, rtol=2e-3, atol=1e-3)
        before = fl.stats()["kernels_launched"]
        fl.compute(*fn(fl, fd["X"], fd["P"], fd["V"]))
        launches = (fl.stats()["kernels_launched"] - before)
        loops: dict[str, Callable[[], None]] = {"lazy": lazy, "fuse": fuse}
        if gpu:
            compiled = torch.compile(lambda X, P, V, fn=fn: fn(torch, X, P, V))
            try:
                compiled(td["X"], td["P"], td["V"])
            except Exception:  # (no compiler on the machine: eager torch)
                compiled = lambda X, P, V, fn=fn: fn(torch, X, P, V)  # noqa: E731

            def peer(compiled=compiled) -> None:
                compiled(td["X"], td["P"], td["V"])
                tsync()
        else:
            def peer(fn=fn) -> None:
                fn(np, data["X"], data["P"], data["V"])
        loops["peer"] = peer
        for loop in loops.values():  # warm
            for _ in range(10):
                loop()
        times: dict[str, list[float]] = {k: [] for k in loops}
        for _ in range(args.rounds):
            for k, loop in loops.items():
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    loop()
                times[k].append((time.perf_counter() - t0) / args.calls * 1e6)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name:<10} {launches:>7} {med['lazy']:>9.1f} {med['fuse']:>9.1f} "
              f"{med['peer']:>14.1f}")


if __name__ == "__main__":
    main()
