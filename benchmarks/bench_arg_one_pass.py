"""argmin/argmax in one pass over (value, position) keys against the two passes.

``fuseloop.ops.reductions.ARG_ONE_PASS`` (``FUSELOOP_ARG_ONE_PASS`` at import; set here
per case): ``0`` the two passes (the extreme, then
the first position holding it: four launches reading the array twice for a whole
array), ``1`` one pass over packed uint64 keys (:mod:`fuseloop.lower.arg_keys`: two
launches, one read) along any axis.  The default, ``auto``, is ``1`` on GPUs for the
whole array, a 1-D one or an axis other than the last, and ``0`` otherwise (so "argmax
rows" here tells whether rows should join it).  Each case is timed under both settings, lazily
(``expr.eval()`` then a synchronisation: the host's cost included) and under
``fl.fuse`` (traced once per setting, replayed), with torch and cupy (GPU) or numpy
(CPU) in the same run.  Medians in milliseconds; every result is checked once against
numpy (exact indices).

    python benchmarks/bench_arg_one_pass.py [--log2 24] [--rows 4096] [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.ops import reductions as _reductions

# name -> (dtype, shape kind, numpy's form; the peers' forms follow the same call)
CASES: dict[str, tuple[type, str, Callable[[Any], Any]]] = {
    "argmin all f32": (np.float32, "vec", lambda x: x.argmin()),
    "argmax all f32": (np.float32, "vec", lambda x: x.argmax()),
    "argmax all i32": (np.int32, "vec", lambda x: x.argmax()),
    "argmin all 2-D f32": (np.float32, "mat", lambda x: x.argmin()),
    "argmax rows f32": (np.float32, "mat", lambda x: x.argmax(axis=1)),
    "argmin cols f32": (np.float32, "mat", lambda x: x.argmin(axis=0)),
    "argmin 8 cols f32": (np.float32, "tall", lambda x: x.argmin(axis=0)),
}


def _peers(gpu: bool) -> dict[str, tuple[Callable[[np.ndarray], Any], Callable[[], Any]]]:
    """name -> (upload, synchronise) of the peers that import."""
    out: dict[str, tuple[Callable[[np.ndarray], Any], Callable[[], Any]]] = {}
    if not gpu:
        out["numpy"] = (lambda h: h, lambda: None)
        return out
    try:
        import torch

        if torch.cuda.is_available():
            out["torch"] = (lambda h: torch.from_numpy(h).cuda(), torch.cuda.synchronize)
    except ImportError:
        pass
    try:
        import cupy

        out["cupy"] = (cupy.asarray, lambda: cupy.cuda.Device().synchronize())
    except ImportError:
        pass
    return out


def _data(dtype: type, kind: str, n: int, rows: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    shape = {"vec": (n,), "mat": (rows, n // rows), "tall": (n // 8, 8)}[kind]
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-1000, 1000, shape).astype(dtype)


def _with_mode(mode: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        _reductions.ARG_ONE_PASS = mode
        return fn()
    return run


def _fused(form: Callable[[Any], Any]) -> Any:
    return fl.fuse(lambda a: form(a))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=24, help="elements: 2^N (default 24)")
    ap.add_argument("--rows", type=int, default=4096, help="rows of the 2-D cases")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    default_mode = _reductions.ARG_ONE_PASS
    n = 1 << args.log2
    dev = fl.get_device()
    gpu = dev.type != "cpu"
    peers = _peers(gpu)
    print(f"device: {dev}; 2^{args.log2} elements; medians of {args.repeat} runs, ms")
    cols = ["lazy 2-pass", "lazy 1-pass", "fuse 2-pass", "fuse 1-pass", *peers]
    print(f"| case | {' | '.join(cols)} | 1-pass / 2-pass (fuse) |")
    print(f"| --- | {' | '.join('---:' for _ in cols)} | ---: |")
    for name, (dtype, kind, form) in CASES.items():
        h = _data(dtype, kind, n, args.rows)
        want = np.asarray(form(h))
        x = fl.asarray(h)
        times: dict[str, float] = {}
        for mode, label in (("0", "2-pass"), ("1", "1-pass")):
            _reductions.ARG_ONE_PASS = mode
            assert np.array_equal(np.asarray(form(x).get()), want), (name, mode)
            fused = _fused(form)  # (a trace of its own per setting)
            assert np.array_equal(np.asarray(fused(x).get()), want), (name, mode, "fuse")
            lazy = _with_mode(mode, lambda f=form, a=x: f(a).eval())
            times[f"lazy {label}"] = median_time(lazy, fl.synchronize, args.repeat)
            replay = _with_mode(mode, lambda f=fused, a=x: f(a))
            times[f"fuse {label}"] = median_time(replay, fl.synchronize, args.repeat)
        _reductions.ARG_ONE_PASS = default_mode
        for peer, (upload, sync) in peers.items():
            p = upload(h)
            got = form(p)
            got = got.cpu().numpy() if hasattr(got, "cpu") else np.asarray(
                got.get() if hasattr(got, "get") else got)
            assert np.array_equal(got, want), (name, peer)
            times[peer] = median_time(lambda p=p, f=form: f(p), sync, args.repeat)
        shown = " | ".join(f"{times[c] * 1e3:.3f}" for c in cols)
        ratio = times["fuse 1-pass"] / times["fuse 2-pass"]
        print(f"| {name} | {shown} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
