"""argmax/argmin over rows and over everything, against a sum over the same rows.

Issue 25's broad suite had ``X.argmax(axis=1)`` (4096 x 4096 float32) at 0.437 ms
lazily on an H100 while ``fl.fuse`` ran it in 0.118 ms, its kernel alone in ~62 us
(``fl.explain``), torch eager in 0.056 and an int32 row sum in 0.069.  This probe
separates the parts, in one run, for each case:

* ``launches`` and ``kernels``: the kernels ``fl.explain`` plans and the sum of their
  times, each replayed alone (a launch and a wait);
* ``lazy``: ``expr().eval()`` then ``fl.synchronize()`` (the broad suite's figure);
* ``enqueue``: ``expr().eval()`` alone (fuseloop's Python and the driver's enqueue,
  the kernel left running; synchronised outside the clock);
* ``batch``: ``--batch`` lazy evaluations, one synchronisation, per call (the kernel's
  time once the host's cost overlaps it);
* ``fuse``: the same under ``fl.fuse`` (traced once, replayed);

and the peers in the same process: torch eager, ``torch.compile`` and cupy on a GPU,
numpy on the host.  Medians of ``--reps`` rounds after warm-up, milliseconds; every
result is checked once against numpy.  Reported, never asserted.

``--profile`` then shows where the host's time of 50 lazy ``argmax rows`` calls goes
(cProfile, by own time): the broad suite's lazy figure was 0.3 ms above the fused one.

    python benchmarks/probes/argmax_probe.py [--n 4096] [--reps 15] [--batch 20] [--profile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl

# name -> (input dtype, numpy's form); the fuseloop and peer forms follow the name
CASES: dict[str, tuple[type, Callable[[np.ndarray], Any]]] = {
    "argmax rows": (np.float32, lambda a: a.argmax(axis=1)),
    "argmin rows": (np.float32, lambda a: a.argmin(axis=1)),
    "argmin all": (np.float32, lambda a: a.argmin()),
    "max rows": (np.float32, lambda a: a.max(axis=1)),
    "sum rows f32": (np.float32, lambda a: a.sum(axis=1)),
    "sum rows i32": (np.int32, lambda a: a.sum(axis=1)),
}


def _check(got: Any, want: np.ndarray, name: str) -> None:
    """Indices and integer sums exactly; float sums to float32 accuracy."""
    got = np.asarray(got)
    if want.dtype.kind in "iu":
        assert np.array_equal(got, want), (name, got, want)
    else:
        scale = float(np.abs(want).max()) or 1.0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def _median(fn: Callable[[], Any], sync: Callable[[], Any], reps: int,
            batch: int = 1) -> float:
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(batch):
            fn()
        sync()
        times.append((time.perf_counter() - t) / batch)
    return statistics.median(times) * 1e3


def _enqueue_only(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        fl.synchronize()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    fl.synchronize()
    return statistics.median(times) * 1e3


def _fuseloop(name: str, x: fl.Array, want: np.ndarray, reps: int,
              batch: int) -> dict[str, float]:
    body = CASES[name][1]  # (the same method names exist on fuseloop arrays)

    def lazy() -> Any:
        return body(x).eval()

    _check(lazy().get(), want, name)
    fused = fl.fuse(lambda a: body(a))
    _check(fused(x).get(), want, name)
    ex = fl.explain(body(x), run=True, repeat=reps)
    kernels = sum(k.time_s or 0.0 for k in ex.kernels) * 1e3
    return {"kernels": kernels, "launches": float(len(ex.kernels)),
            "lazy": _median(lazy, fl.synchronize, reps),
            "enqueue": _enqueue_only(lazy, reps),
            "batch": _median(lazy, fl.synchronize, reps, batch),
            "fuse": _median(lambda: fused(x), fl.synchronize, reps)}


def _torch_peers(h: np.ndarray, name: str, want: np.ndarray, reps: int) -> dict[str, float]:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    t = torch.from_numpy(h).cuda()
    forms: dict[str, Callable[[Any], Any]] = {
        "argmax rows": lambda a: a.argmax(dim=1),
        "argmin rows": lambda a: a.argmin(dim=1),
        "argmin all": lambda a: a.argmin(),
        "max rows": lambda a: a.amax(dim=1),
        "sum rows f32": lambda a: a.sum(dim=1),
        "sum rows i32": lambda a: a.sum(dim=1, dtype=torch.int64),  # numpy's int64
    }
    eager = forms[name]
    out: dict[str, float] = {}
    torch._dynamo.reset()
    compiled = torch.compile(eager, dynamic=False)
    for label, f in (("torch", eager), ("torch.compile", compiled)):
        _check(f(t).cpu().numpy(), want, f"{label} {name}")
        out[label] = _median(lambda f=f: f(t), torch.cuda.synchronize, reps)
    return out


def _cupy_peer(h: np.ndarray, name: str, want: np.ndarray, reps: int) -> dict[str, float]:
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
    except Exception:  # (no cupy, or no CUDA device)
        return {}
    a = cp.asarray(h)
    body = CASES[name][1]
    _check(cp.asnumpy(body(a)), want, f"cupy {name}")
    sync = cp.cuda.get_current_stream().synchronize
    return {"cupy": _median(lambda: body(a), sync, reps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="rows and columns")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="cProfile lazy argmax rows")
    args = ap.parse_args()
    dev = fl.get_device()
    print(f"device: {dev}; {args.n} x {args.n}; medians of {args.reps}, ms")
    rng = np.random.default_rng(0)
    rows = []
    columns = ["launches", "kernels", "lazy", "enqueue", "batch", "fuse"]
    for name, (dtype, body) in CASES.items():
        h = (rng.standard_normal((args.n, args.n)) * 100).astype(dtype)
        want = np.asarray(body(h))
        res = _fuseloop(name, fl.asarray(h), want, args.reps, args.batch)
        peers = {**_torch_peers(h, name, want, args.reps),
                 **_cupy_peer(h, name, want, args.reps)}
        if not peers:
            peers = {"numpy": _median(lambda b=body, a=h: b(a), lambda: None, args.reps)}
        for k in peers:
            if k not in columns:
                columns.append(k)
        rows.append((name, {**res, **peers}))
    print("| case | " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for name, res in rows:
        print(f"| {name} | " + " | ".join(
            "-" if c not in res else f"{res[c]:.0f}" if c == "launches" else f"{res[c]:.3f}"
            for c in columns) + " |")
    if args.profile:
        _profile(args.n)


def _profile(n: int) -> None:
    import cProfile
    import pstats

    x = fl.asarray(np.random.default_rng(1).standard_normal((n, n)).astype(np.float32))
    for _ in range(3):
        x.argmax(axis=1).eval()
    fl.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(50):
        x.argmax(axis=1).eval()
        fl.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
