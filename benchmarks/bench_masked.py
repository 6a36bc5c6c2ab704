"""Masked writes: ``fl.compute(expr, out=y, where=mask)`` (the kernel skips masked-out
elements) against ``y[...] = fl.where(mask, expr, y)`` (computes everything) and a peer.

Two expressions over float32 vectors: ``arith`` (``2*x + x*x - 3``, memory-bound) and
``math`` (``exp(sin(x)) * cos(x) + log1p(x)``, compute-bound); masks: random at 10% and
50%, the first 10% of the elements (whole blocks skipped), and all elements.  Peers, same
run: numpy's ufuncs with ``out=, where=`` (the math expression as a chain of them, each
masked) on a CPU device; ``torch.where`` on a GPU.  Times are medians of ``--repeat``
calls; the last columns are fl.where's time and the peer's over ``where=``'s.  Usage::

    python benchmarks/bench_masked.py [--device SPEC] [--log2 N] [--repeat K]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time

EXPRS: dict[str, Callable[[Any], Any]] = {
    "arith": lambda x: 2 * x + x * x - 3,
    "math": lambda x: fl.exp(fl.sin(x)) * fl.cos(x) + fl.log1p(x),
}


def _masks(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {"random 10%": rng.random(n) < 0.1, "random 50%": rng.random(n) < 0.5,
            "first 10%": np.arange(n) < n // 10, "all": np.ones(n, bool)}


def _numpy_peer(name: str, a: np.ndarray, m: np.ndarray, repeat: int) -> float:
    out, tmp = np.zeros_like(a), np.empty_like(a)

    def arith() -> None:
        np.multiply(a, a, out=tmp, where=m)
        np.add(tmp, 2 * a, out=tmp, where=m)  # (2 * a is computed in full, as numpy would)
        np.subtract(tmp, 3, out=out, where=m)

    def math() -> None:
        np.sin(a, out=tmp, where=m)
        np.exp(tmp, out=tmp, where=m)
        np.multiply(tmp, np.cos(a, where=m, out=np.empty_like(a)), out=tmp, where=m)
        np.add(tmp, np.log1p(a, where=m, out=np.empty_like(a)), out=out, where=m)

    fn = arith if name == "arith" else math
    return median_time(fn, lambda: None, repeat)


def _torch_peer(name: str, a: np.ndarray, m: np.ndarray, repeat: int) -> float:
    import torch

    x, mt = torch.from_numpy(a).cuda(), torch.from_numpy(m).cuda()
    y = torch.zeros_like(x)

    def run() -> None:
        v = 2 * x + x * x - 3 if name == "arith" else \
            torch.exp(torch.sin(x)) * torch.cos(x) + torch.log1p(x)
        torch.where(mt, v, y, out=y)

    return median_time(run, torch.cuda.synchronize, repeat)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--log2", type=int, default=None, help="2**LOG2 elements "
                   "(default 26 on a GPU, 22 on a CPU)")
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args(argv)
    if args.device:
        fl.set_device(args.device)
    dev = fl.get_device()
    gpu = dev.type == "gpu"
    n = 1 << (args.log2 or (26 if gpu else 22))
    a = np.random.default_rng(6).random(n, dtype=np.float32)
    x, y = fl.asarray(a), fl.zeros(n, np.float32)
    peer_name = "torch.where" if gpu else "numpy where="
    print(f"device: {dev.name} ({dev.type}); n = 2^{n.bit_length() - 1} float32")
    print(f"\n{'expr':6s} {'mask':11s} {'where= ms':>10s} {'fl.where ms':>12s} "
          f"{peer_name + ' ms':>16s} {'fl.where/where=':>16s} {'peer/where=':>12s}")
    for ename, expr in EXPRS.items():
        for mname, m in _masks(n).items():
            md = fl.asarray(m)

            def masked() -> None:
                fl.compute(expr(x), out=y, where=md)  # noqa: B023  (called in this loop)

            def both() -> None:
                y[...] = fl.where(md, expr(x), y)  # noqa: B023

            masked()
            ref = np.where(m, y.get(), 0)
            both()
            ok = np.allclose(np.where(m, y.get(), 0), ref, rtol=1e-5, atol=1e-6)
            t_m = median_time(masked, fl.synchronize, args.repeat)
            t_w = median_time(both, fl.synchronize, args.repeat)
            try:
                t_p: float | None = (_torch_peer if gpu else _numpy_peer)(
                    ename, a, m, args.repeat)
            except Exception:  # a missing peer is reported as such, not fatal
                t_p = None
            peer = f"{1e3 * t_p:16.2f}" if t_p else f"{'-':>16s}"
            ratio = f"{t_p / t_m:12.2f}" if t_p else f"{'-':>12s}"
            print(f"{ename:6s} {mname:11s} {1e3 * t_m:10.2f} {1e3 * t_w:12.2f} {peer} "
                  f"{t_w / t_m:16.2f} {ratio}{'' if ok else '  MISMATCH'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
