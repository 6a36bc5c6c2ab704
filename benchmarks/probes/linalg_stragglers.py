"""Where the time of NPBench's linear-algebra stragglers goes on a GPU (issue 26, preset M).

Three parts, each beside CuPy when it is importable (float64 throughout):

* ``cholesky``: ``fl.linalg.cholesky`` of an SPD ``n x n`` matrix (NPBench's cholesky2,
  ``n = 2200``) at its default block width and at others (``block_size`` and
  ``fit_block`` replaced): wall time per call (median of ``--reps``), launches, and per
  stage (diagonal block ``potrf``, panel solve ``trsm``, trailing update ``gemm``, the
  rest) the wall time with the device synchronised around every launch of the stage (so
  the sum exceeds the call's time by the launches' latency), next to ``cupy.linalg.cholesky``.
* ``gemver``: NPBench's gemver at ``n = 3000``, statement by statement: wall time and
  host CPU time per statement, launches, CuPy's time for the same statement; then
  ``fl.explain(run=True)`` of the two products (each kernel timed alone).
* ``syrk``: NPBench's syrk inner statement ``C[i, :i+1] += alpha * A[i, k] * A[:i+1, k]``
  (``A`` 200 x 150): wall and host CPU per statement over whole ``k`` loops.

* ``products``: atax's and bicg's products (``A`` 10000 x 12500) alone, and
  ``fl.explain(run=True)`` of ``r @ A``.
* ``split``: ``x @ A`` at covariance's and other shapes by the rule, by the lanes kernel
  (``split_k=1``) and by split-K (``stream_lanes=0``): per evaluation wall and host
  time, launches.

Reported, never asserted.

    python benchmarks/probes/linalg_stragglers.py [cholesky gemver syrk products] [--n 2200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop import linalg_factor as _lf
from fuseloop import linalg_kernels as _lk

try:
    import cupy
except ImportError:  # (no GPU peer on this host)
    cupy = None


def _cupy_sync() -> None:
    cupy.cuda.get_current_stream().synchronize()


def _median(fn: Callable[[], Any], sync: Callable[[], None], reps: int,
            inner: int = 1) -> tuple[float, float]:
    """(wall s, host CPU s) per call of ``fn``: medians over ``reps`` batches of ``inner``."""
    fn()
    sync()
    walls, cpus = [], []
    for _ in range(reps):
        sync()
        w, c = time.perf_counter(), time.process_time()
        for _ in range(inner):
            fn()
        c = time.process_time() - c
        sync()
        walls.append((time.perf_counter() - w) / inner)
        cpus.append(c / inner)
    return statistics.median(walls), statistics.median(cpus)


def cholesky(n: int, reps: int, blocks: tuple[int, ...] = (0, 16, 32, 48, 64, 128)) -> None:
    rng = np.random.default_rng(0)
    m = rng.random((n, n))
    spd = m @ m.T + n * np.eye(n)
    a = fl.asarray(spd)
    ref = np.linalg.cholesky(spd)
    if cupy is not None:
        ca = cupy.asarray(spd)
        cw, _ = _median(lambda: cupy.linalg.cholesky(ca), _cupy_sync, reps)
        print(f"cholesky n={n}: cupy {cw * 1e6:.0f} us")
    stages: dict[str, float] = defaultdict(float)
    wrapped = {}
    for name in ("potrf", "trsm_blocks", "trmm_inverse", "gemm_update"):
        original = getattr(_lk, name, None)
        if original is None:  # (an older tree's kernels)
            continue

        def timed(*args: Any, _f: Any = original, _n: str = name, **kw: Any) -> Any:
            fl.synchronize()
            t = time.perf_counter()
            out = _f(*args, **kw)
            fl.synchronize()
            stages[_n] += time.perf_counter() - t
            return out
        wrapped[name] = (original, timed)
    base_block, base_fit = _lf.block_size, _lk.fit_block
    base_env = getattr(_lf, "CHOLESKY_BLOCK", 0)
    for nb in blocks:
        if nb:  # (0: the default; else this width, unfitted: a build error says too wide)
            _lf.block_size = lambda device, nb=nb: nb  # type: ignore[assignment]
            _lf.CHOLESKY_BLOCK = 0  # type: ignore[attr-defined]
            _lk.fit_block = lambda device, nb, dtype: nb  # type: ignore[assignment]
        rule = getattr(_lf, "cholesky_block", None)  # (this tree's rule, else the LU's)
        used = (rule(a.device, a.dtype) if rule is not None
                else _lk.fit_block(a.device, _lf.block_size(a.device), a.dtype))
        try:
            got = fl.linalg.cholesky(a).get()
            err = float(np.abs(got - ref).max() / np.abs(ref).max())
            fl.reset_stats()
            fl.linalg.cholesky(a).eval()
            fl.synchronize()
            launches = fl.stats()["kernels_launched"]
            wall, cpu = _median(lambda: fl.linalg.cholesky(a).eval(), fl.synchronize, reps)
            for name, (_, timed) in wrapped.items():
                setattr(_lk, name, timed)
            stages.clear()
            fl.synchronize()
            t = time.perf_counter()
            fl.linalg.cholesky(a).eval()
            fl.synchronize()
            total = time.perf_counter() - t
        except Exception as e:  # (a width the device cannot build)
            print(f"  block {nb:3}: {type(e).__name__}: {str(e)[:200]}")
            continue
        finally:
            for name, (original, _) in wrapped.items():
                setattr(_lk, name, original)
            _lf.block_size = base_block  # type: ignore[assignment]
            _lf.CHOLESKY_BLOCK = base_env  # type: ignore[attr-defined]
            _lk.fit_block = base_fit  # type: ignore[assignment]
        parts = ", ".join(f"{k} {v * 1e6:.0f}" for k, v in stages.items())
        print(f"  block {nb:3} (used {used}): {wall * 1e6:.0f} us"
              f" wall, {cpu * 1e6:.0f} us host CPU, {launches} launches, err {err:.1e}; synced"
              f" stages us: {parts}, rest {(total - sum(stages.values())) * 1e6:.0f}",
              flush=True)


def _gemver_inputs(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    names = ("u1", "v1", "u2", "v2", "w", "x", "y", "z")
    vals = {k: rng.random(n) for k in names}
    vals["A"] = rng.random((n, n))
    return vals


def gemver(n: int, reps: int) -> None:
    alpha, beta = 1.5, 1.2
    vals = _gemver_inputs(n)
    statements: list[tuple[str, Callable[[Any, dict], Any]]] = [
        ("A += outer(u1,v1)+outer(u2,v2)",
         lambda xp, v: v["A"].__iadd__(xp.outer(v["u1"], v["v1"]) + xp.outer(v["u2"], v["v2"]))),
        ("x += beta * y @ A + z",
         lambda xp, v: v["x"].__iadd__(beta * v["y"] @ v["A"] + v["z"])),
        ("w += alpha * A @ x", lambda xp, v: v["w"].__iadd__(alpha * v["A"] @ v["x"])),
    ]
    fv = {k: fl.asarray(a) for k, a in vals.items()}
    cv = {k: cupy.asarray(a) for k, a in vals.items()} if cupy is not None else None
    print(f"gemver n={n}: statement, fuseloop wall us, host us, launches, cupy us")
    for name, st in statements:
        def run(st: Any = st) -> None:
            st(fl, fv)
            fl.synchronize()  # (as NPBench's timer: the device waited for)
        fl.reset_stats()
        run()
        launches = fl.stats()["kernels_launched"]
        wall, cpu = _median(run, fl.synchronize, reps, 10)
        line = f"  {name:32} {wall * 1e6:8.1f} {cpu * 1e6:8.1f} {launches:3}"
        if cv is not None:
            cw, _ = _median(lambda st=st: st(cupy, cv), _cupy_sync, reps, 10)
            line += f" {cw * 1e6:8.1f}"
        print(line, flush=True)
    print(fl.explain(beta * fv["y"] @ fv["A"] + fv["z"], run=True).as_text())
    print(fl.explain(alpha * fv["A"] @ fv["x"], run=True).as_text())


def products(reps: int) -> None:
    """atax's and bicg's products (A 10000 x 12500), each alone, beside cupy; explained."""
    rng = np.random.default_rng(3)
    ah, xh, rh = rng.random((10000, 12500)), rng.random(12500), rng.random(10000)
    cases: list[tuple[str, Callable[[Any, Any, Any, Any], Any]]] = [
        ("A @ x", lambda xp, a, x, r: a @ x),
        ("r @ A", lambda xp, a, x, r: r @ a),
        ("(A @ x) @ A", lambda xp, a, x, r: (a @ x) @ a),
    ]
    fa, fx, fr = fl.asarray(ah), fl.asarray(xh), fl.asarray(rh)
    cs = [cupy.asarray(v) for v in (ah, xh, rh)] if cupy is not None else []
    print("products (A 10000 x 12500): fuseloop wall us, host us, launches, cupy us")
    for name, fn in cases:
        def run(fn: Any = fn) -> None:
            fn(fl, fa, fx, fr).eval()
        fl.reset_stats()
        run()
        fl.synchronize()
        launches = fl.stats()["kernels_launched"]
        wall, cpu = _median(run, fl.synchronize, reps, 5)
        line = f"  {name:14} {wall * 1e6:8.1f} {cpu * 1e6:8.1f} {launches:3}"
        if cs:
            cw, _ = _median(lambda fn=fn: fn(cupy, *cs), _cupy_sync, reps, 5)
            line += f" {cw * 1e6:8.1f}"
        print(line, flush=True)
    print(fl.explain(fr @ fa, run=True).as_text())


def split(reps: int) -> None:
    """Vector-matrix products by the rule, by the lanes kernel in one launch (``split_k=1``)
    and by split-K's streaming kernel (``stream_lanes=0``): wall and host CPU per
    evaluation in batches of 20, launches."""
    from fuseloop.recipes import contraction as rc

    rng = np.random.default_rng(4)
    shapes = [(1800, 1400), (1800, 700), (1800, 100), (3000, 3000), (10000, 1000),
              (10000, 12500)]
    print("x @ A (k x n): the rule, lanes (split_k=1), split-K (stream_lanes=0); wall us,"
          " host us, launches (error)")
    for k, n in shapes:
        ah, xh = rng.random((k, n)), rng.random(k)
        fa, fx = fl.asarray(ah), fl.asarray(xh)
        line = f"  {k:6} x {n:6}"
        for name, recipe in (("rule", rc.gpu_tiled),
                             ("lanes", rc.gpu_tiled.with_params(split_k=1)),
                             ("split", rc.gpu_tiled.with_params(stream_lanes=0))):
            with fl.recipes.use(recipe):
                err = float(np.abs((fx @ fa).get() - xh @ ah).max() / (xh @ ah).max())
                fl.reset_stats()
                (fx @ fa).eval()
                fl.synchronize()
                launches = fl.stats()["kernels_launched"]
                wall, cpu = _median(lambda fx=fx, fa=fa: (fx @ fa).eval(), fl.synchronize,
                                    reps, 20)
            line += f" | {name} {wall * 1e6:7.1f} {cpu * 1e6:7.1f} {launches} ({err:.0e})"
        print(line, flush=True)


def syrk(reps: int) -> None:
    rng = np.random.default_rng(2)
    n, m = 200, 150
    ah, ch = rng.random((n, m)), rng.random((n, n))
    alpha = 1.5

    def loop(xp: Any, a: Any, c: Any, i: int) -> None:
        for k in range(m):
            c[i, :i + 1] += alpha * a[i, k] * a[:i + 1, k]

    fa, fc = fl.asarray(ah), fl.asarray(ch)
    ca, cc = (cupy.asarray(ah), cupy.asarray(ch)) if cupy is not None else (None, None)
    for i in (10, 100, 199):
        wall, cpu = _median(lambda i=i: loop(fl, fa, fc, i), fl.synchronize, reps)
        fl.reset_stats()
        loop(fl, fa, fc, i)
        fl.synchronize()
        s = fl.stats()
        line = (f"syrk row {i}: fuseloop {wall * 1e6 / m:.1f} us wall, {cpu * 1e6 / m:.1f} us"
                f" host CPU a statement, {s['kernels_launched'] / m:.2f} launches")
        if cupy is not None:
            cw, ccpu = _median(lambda i=i: loop(cupy, ca, cc, i), _cupy_sync, reps)
            line += f"; cupy {cw * 1e6 / m:.1f} us wall, {ccpu * 1e6 / m:.1f} host"
        print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", default=["cholesky", "gemver", "syrk", "products", "split"])
    ap.add_argument("--n", type=int, default=2200, help="cholesky's n")
    ap.add_argument("--gemver-n", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--blocks", default="0,16,32,48,64,128",
                    help="cholesky's block widths (0: the default rule's)")
    args = ap.parse_args()
    print(f"device: {fl.get_device()}")
    for part in args.parts:
        if part == "cholesky":
            cholesky(args.n, args.reps, tuple(int(b) for b in args.blocks.split(",")))
        elif part == "gemver":
            gemver(args.gemver_n, args.reps)
        elif part == "split":
            split(args.reps)
        elif part == "products":
            products(args.reps)
        elif part == "syrk":
            syrk(args.reps)


if __name__ == "__main__":
    main()
