"""Values reached through several views, computed once (``fuseloop.sharing``) or per view.

Workloads (one table, one run):

* ``cov``: ``d.T @ d`` with ``d = x - x.mean(axis=0)`` (the means through two views);
* ``attention``: ``softmax(Q @ K.T / 8) @ V`` (the scores through three views);
* ``xtx+sum``: ``x.T @ x + x.sum(0)`` (the column sums broadcast over the product's rows);
* ``outer-mean``: ``m[:, None] * m[None, :]`` of the column means.

Columns: fuseloop with sharing (``SHARE_VIEWS = True``, the default), fuseloop without
it (``False``: each view computed on its own, as before), and the peers: cupy and torch
on a GPU, numpy on a CPU.  Each result is checked against numpy in float64.  Times are
medians of ``--repeat`` calls, each waited for: CPU time of this process
(``time.process_time``, the PoCL threads included) on a CPU device, wall time on a GPU.
Kernels launched per call are shown for fuseloop.  Usage::

    python benchmarks/bench_shared_views.py [--device SPEC] [--dtype float32|float64]
        [--scale K] [--repeat N]

On the GPU: ``FUSELOOP_HOST_PATH=0`` is irrelevant there (no host path); on a CPU run it
with ``FUSELOOP_HOST_PATH=0`` too to time the kernel path at small sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's fuseloop

import fuseloop as fl  # noqa: E402
from fuseloop import sharing  # noqa: E402


def _softmax(m: Any, s: Any) -> Any:
    if hasattr(m, "rowmax"):  # (torch: its max returns indices too)
        e = m.exp(s - m.rowmax(s))
        return e / m.rowsum(e)
    e = m.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _cov(m: Any, x: Any) -> Any:
    d = x - x.mean(axis=0)
    return d.T @ d


def _outer_mean(m: Any, x: Any) -> Any:
    mu = x.mean(axis=0)
    return mu[:, None] * mu[None, :]


WORKLOADS: dict[str, tuple[Callable[..., Any], str]] = {
    "cov": (_cov, "x"),
    "attention": (lambda m, q, k, v: _softmax(m, q @ k.T / 8.0) @ v, "qkv"),
    "xtx+sum": (lambda m, x: x.T @ x + x.sum(0), "x"),
    "outer-mean": (_outer_mean, "x"),
}


def _inputs(gpu: bool, scale: int, dtype: str) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    n, p = (16384, 1024) if gpu else (4096, 256)
    t, dh = (4096, 64) if gpu else (1024, 64)
    x = rng.standard_normal((n * scale, p)).astype(dtype)
    qkv = [rng.standard_normal((t * scale, dh)).astype(dtype) for _ in range(3)]
    return {"x": [x], "qkv": qkv}


def _time(fn: Callable[[], Any], sync: Callable[[], None], repeat: int, clock: Callable[[], float]
          ) -> tuple[float, Any]:
    got = fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = clock()
        got = fn()
        sync()
        times.append(clock() - t0)
    return statistics.median(times), got


def _peers(gpu: bool) -> list[tuple[str, Any, Callable[[Any], Any], Callable[[], None]]]:
    if not gpu:
        return [("numpy", np, np.asarray, lambda: None)]
    out = []
    try:
        import cupy as cp

        out.append(("cupy", cp, cp.asarray, cp.cuda.Device().synchronize))
    except ImportError:
        pass
    try:
        import torch

        class _T:  # the numpy names the workloads use, on torch tensors
            exp = staticmethod(torch.exp)

            @staticmethod
            def rowmax(s: Any) -> Any:
                return torch.amax(s, dim=-1, keepdim=True)

            @staticmethod
            def rowsum(s: Any) -> Any:
                return torch.sum(s, dim=-1, keepdim=True)

        out.append(("torch", _T, lambda a: torch.as_tensor(a, device="cuda"),
                    torch.cuda.synchronize))
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    dev = fl.get_device() if args.device is None else fl.set_device(args.device)
    gpu = dev.type != "cpu"
    clock = time.perf_counter if gpu else time.process_time
    data = _inputs(gpu, args.scale, args.dtype)
    rtol = 1e-3 if args.dtype == "float32" else 1e-9
    rows: dict[str, dict[str, str]] = {}
    for name, (fn, which) in WORKLOADS.items():
        hs = data[which]
        want = fn(np, *[h.astype(np.float64) for h in hs])
        xs = [fl.asarray(h) for h in hs]
        row = rows.setdefault(name, {})
        for label, on in (("shared", True), ("per view", False)):
            sharing.SHARE_VIEWS = on
            fl.clear_caches()  # (run plans remember what was decided)
            t, got = _time(lambda fn=fn, xs=xs: fn(fl, *xs).eval(), fl.synchronize, args.repeat,
                           clock)
            np.testing.assert_allclose(np.asarray(got.get(), np.float64), want, rtol=rtol,
                                       atol=rtol * np.abs(want).max())
            fl.reset_stats()
            fn(fl, *xs).eval()
            fl.synchronize()
            row[label] = f"{t * 1e3:.3f} ({fl.stats()['kernels_launched']})"
        sharing.SHARE_VIEWS = True
        fl.clear_caches()
        for pname, lib, conv, sync in _peers(gpu):
            ps = [conv(h) for h in hs]
            try:
                t = _time(lambda fn=fn, lib=lib, ps=ps: fn(lib, *ps), sync, args.repeat,
                          clock)[0]
            except Exception as exc:  # (a peer without one of the names: no column entry)
                print(f"{pname} failed on {name}: {exc}", file=sys.stderr)
                continue
            row[pname] = f"{t * 1e3:.3f}"
    cols = ["shared", "per view"] + [p[0] for p in _peers(gpu)]
    shapes = {k: [h.shape for h in v] for k, v in data.items()}
    print(f"{dev.name}, {args.dtype}, inputs {shapes}; median ms per call of {args.repeat} "
          f"({'wall' if gpu else 'process CPU'} time), fuseloop's kernels per call in ()")
    print(f"{'workload':<12}" + "".join(f"{c:>16}" for c in cols))
    for name, by in rows.items():
        print(f"{name:<12}" + "".join(f"{by.get(c, '-'):>16}" for c in cols))


if __name__ == "__main__":
    main()
