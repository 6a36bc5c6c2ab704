"""Where the time of NPBench M's one-statement benchmarks goes on a GPU (issues 25/26):
fuseloop's lazy call, its host part, the same function under ``fl.fuse`` and CuPy.

NPBench M on an H100 puts fuseloop at a fraction of CuPy on benchmarks that are one
statement or a few (hdiff 0.185, gemver 0.359, mlp 0.342, 3mm 0.464), although each is
one fused kernel or a few.  This probe says whether that is the kernels or the host: per
case, the median of ``--repeat`` warm calls (each call then a synchronize, new outputs as
NPBench makes them) of

- ``cupy``: the same code run by CuPy (when importable);
- ``lazy``: fuseloop as NPBench runs it (expressions built, evaluated, synchronized);
- ``host``: the part of ``lazy`` before its synchronize (building, planning, enqueueing);
- ``fuse``: the function under ``fl.fuse`` (no expression building: replayed kernels),
  the floor the kernels set (NPBench's kernels write into their arguments, which a fused
  function may not: they write into copies made inside it, one copy kernel each);
- ``queued``: ``fuse``'s calls enqueued back to back, one synchronize after ``--repeat``
  of them: per call, the kernels' time where the host keeps ahead of the device;
- ``launches``: fuseloop's kernels launched per lazy call.

``lazy`` near ``host`` and ``fuse`` near CuPy or below: the host is the cost, not the
kernels.  The stencil-of-stencil cases (not taken from NPBench: a 2-D biharmonic of
5-point Laplacians, a 3-D 7-point Laplacian of a Laplacian, a 5 x 5 box of a box) also run
with the inner stencil evaluated first (``mat``: an ``.eval()`` of the inner value), so
the fused kernel's recomputation of the inner stencil at each neighbour is timed against
materialising it once, and with the stencil-of-stencil rule off (``one``: one fused kernel;
``fuseloop.passes.shifted_views``, which evaluates the inner value once its windows'
recomputation passes a budget: it decides ``lazy`` for box5-of-box5, a 5 x 5 box sum of
another, and leaves the two Laplacian cases fused).  ``relu8@W`` is mlp's second layer
(``relu(h + b) @ W``, 8 x 30000 @ 30000 x 10000 float32): ``mat`` evaluates the short
operand's producer first, which the streamed skinny recipe otherwise applies in every
work-item at every step (``one`` equals ``lazy`` there).  Results are checked against the
first framework's.

    python benchmarks/probes/gpu_single_statements.py [--device nvidia] [--npbench .npbench]
        [--repeat 20] [--only hdiff biharmonic-2d] [--small]

NPBench (not part of this repository) is read from ``--npbench`` (default ``.npbench`` in
the repository root); its cases are skipped when it is missing.  Timings are reported,
never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import fuseloop as fl  # noqa: E402

try:
    import cupy
except ImportError:  # (a machine without CuPy: fuseloop's columns only)
    cupy = None
try:
    from fuseloop.passes import shifted_views
except ImportError:  # (a revision without the rule: no ``one`` column)
    shifted_views = None


@contextlib.contextmanager
def _rule_off() -> Any:
    """The stencil-of-stencil rule off: every window recomputes (one fused kernel)."""
    budget = shifted_views.RECOMPUTE_BUDGET
    shifted_views.RECOMPUTE_BUDGET = 1 << 60
    try:
        yield
    finally:
        shifted_views.RECOMPUTE_BUDGET = budget


class Case:
    """One workload: ``make(xp, mat)`` returns ``(fn, fresh)``: ``fresh()`` makes one
    call's arguments (new outputs, inputs made once in ``xp``'s arrays) and ``fn(*args)``
    runs the workload on them, returning what to compare.  ``inner`` (stencil-of-stencil
    cases): ``mat`` True evaluates the inner stencil first."""

    def __init__(self, name: str, make: Callable[[Any, bool], tuple[Callable, Callable]],
                 inner: bool = False, npbench: bool = False) -> None:
        self.name, self.make, self.inner, self.npbench = name, make, inner, npbench


def _sync(xp: Any) -> None:
    if xp is fl:
        fl.synchronize()
    else:
        xp.cuda.get_current_stream().synchronize()


def _as_numpy(value: Any) -> np.ndarray:
    if isinstance(value, tuple | list):
        return np.concatenate([_as_numpy(v).ravel() for v in value])
    return np.asarray(value.get())


def _force(value: Any) -> None:
    for v in value if isinstance(value, tuple | list) else (value,):
        if hasattr(v, "eval") and hasattr(v, "is_lazy"):
            v.eval()


def _materialised(xp: Any, value: Any, mat: bool) -> Any:
    """``value`` computed now when ``mat`` (fuseloop's ``eval``; CuPy computes at once)."""
    return value.eval() if mat and xp is fl else value


def _biharmonic_2d(xp: Any, mat: bool, n: int = 4096) -> tuple[Callable, Callable]:
    # the 5-point Laplacian of the 5-point Laplacian of u, on the interior
    u = xp.asarray(np.random.default_rng(1).random((n, n), dtype=np.float32))

    def fn(u: Any) -> Any:
        lap = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
               - 4.0 * u[1:-1, 1:-1])
        lap = _materialised(xp, lap, mat)
        return (lap[:-2, 1:-1] + lap[2:, 1:-1] + lap[1:-1, :-2] + lap[1:-1, 2:]
                - 4.0 * lap[1:-1, 1:-1])
    return fn, lambda: (u,)


def _laplacian_squared_3d(xp: Any, mat: bool, n: int = 256) -> tuple[Callable, Callable]:
    # the 7-point Laplacian of the 7-point Laplacian of u, times a coefficient field
    rng = np.random.default_rng(2)
    u = xp.asarray(rng.random((n, n, n)))
    c = xp.asarray(rng.random((n - 4, n - 4, n - 4)))

    def lap7(a: Any) -> Any:
        return (a[:-2, 1:-1, 1:-1] + a[2:, 1:-1, 1:-1] + a[1:-1, :-2, 1:-1]
                + a[1:-1, 2:, 1:-1] + a[1:-1, 1:-1, :-2] + a[1:-1, 1:-1, 2:]
                - 6.0 * a[1:-1, 1:-1, 1:-1])

    def fn(u: Any, c: Any) -> Any:
        return c * lap7(_materialised(xp, lap7(u), mat))
    return fn, lambda: (u, c)


def _box_of_box_2d(xp: Any, mat: bool, n: int = 4096, k: int = 5) -> tuple[Callable, Callable]:
    # a k x k box sum of a k x k box sum: k * k windows of an inner value of k * k - 1 adds
    u = xp.asarray(np.random.default_rng(3).random((n, n), dtype=np.float32))

    def box(a: Any) -> Any:
        m = a.shape[0] - (k - 1)
        s = a[:m, :m]
        for i, j in np.ndindex(k, k):
            if i or j:
                s = s + a[i:i + m, j:j + m]
        return s

    def fn(u: Any) -> Any:
        return box(_materialised(xp, box(u), mat))
    return fn, lambda: (u,)


def _skinny_with_producer(xp: Any, mat: bool, k: int = 30000,
                          n: int = 10000) -> tuple[Callable, Callable]:
    # mlp's second layer: relu(8 x K) @ (K x N), the relu (and bias) a producer of the
    # short operand, which the streamed recipe applies in every work-item at every step
    rng = np.random.default_rng(4)
    h = xp.asarray(rng.random((8, k), dtype=np.float32) - 0.5)
    b = xp.asarray(rng.random(k, dtype=np.float32) - 0.5)
    w = xp.asarray(rng.random((k, n), dtype=np.float32))

    def fn(h: Any, b: Any, w: Any) -> Any:
        return _materialised(xp, xp.maximum(h + b, 0), mat) @ w
    return fn, lambda: (h, b, w)


def _npbench_case(npbench: Path, short: str, preset: str) -> Callable:
    """An NPBench CuPy kernel run as ``benchmarks/npbench_swap.py`` runs it (new copies of
    the array arguments per call, made before the timer), with ``cupy`` bound to the
    framework inside it; it returns its result, or its outputs when it returns None."""
    import npbench_swap as swap

    info = json.loads((npbench / "bench_info" / f"{short}.json").read_text())["benchmark"]
    bench_dir = npbench / "npbench" / "benchmarks"
    values = swap.bench_inputs(bench_dir, info, preset)
    folder = bench_dir / info["relative_path"]
    names = info["input_args"]
    outputs = [names.index(a) for a in info["output_args"]]

    def make(xp: Any, mat: bool) -> tuple[Callable, Callable]:
        sys.modules["cupy"] = swap._FuseloopAsCupy() if xp is fl else cupy
        module = swap._load(folder / f"{info['module_name']}_cupy.py",
                            f"probe_{short}_{'fl' if xp is fl else 'cupy'}")
        kernel = getattr(module, info["func_name"])

        def fn(*args: Any, copy: bool = False) -> Any:
            if copy:  # (fl.fuse does not write into arguments: into copies, returned)
                args = tuple(a.copy() if i in outputs else a for i, a in enumerate(args))
            result = kernel(*args)
            return result if result is not None else [args[i] for i in outputs]

        def fresh() -> tuple:
            return tuple(xp.asarray(np.copy(values[a])) if a in info["array_args"]
                         else values[a] for a in names)
        return fn, fresh
    return make


def _timed(fn: Callable, fresh: Callable, xp: Any, repeat: int) -> tuple[float, float, Any]:
    """Median seconds of a call then a synchronize, and of the call alone (the host's
    part); the last call's result."""
    whole, host = [], []
    out = None
    for k in range(repeat + 2):  # (two warm-up calls: kernels built, plans recorded)
        args = fresh()
        _sync(xp)
        t0 = time.perf_counter()
        out = fn(*args)
        if xp is fl:
            _force(out)
        t1 = time.perf_counter()
        _sync(xp)
        t2 = time.perf_counter()
        if k >= 2:
            whole.append(t2 - t0)
            host.append(t1 - t0)
    return statistics.median(whole), statistics.median(host), out


def _queued(fn: Callable, fresh: Callable, repeat: int) -> float:
    """Seconds per call of ``repeat`` calls enqueued back to back, one synchronize at the
    end (up to 4 sets of inputs made first, used in turn: a fused function writes none):
    the kernels' time where the host enqueues faster than the device runs them."""
    sets = [fresh() for _ in range(min(repeat, 4))]
    outs = [fn(*sets[0])]  # (warm)
    fl.synchronize()
    t0 = time.perf_counter()
    outs = [fn(*sets[k % len(sets)]) for k in range(repeat)]
    fl.synchronize()
    del outs
    return (time.perf_counter() - t0) / repeat


def _launches(fn: Callable, fresh: Callable) -> int:
    args = fresh()
    fl.synchronize()
    before = fl.stats()["kernels_launched"]
    _force(fn(*args))
    fl.synchronize()
    return fl.stats()["kernels_launched"] - before


def _row(case: Case, repeat: int) -> dict[str, Any]:
    row: dict[str, Any] = {"case": case.name}
    ref = None
    runs = [("cupy", cupy, False), ("lazy", fl, False)] + ([("mat", fl, True), ("one", fl, False)]
                                                          if case.inner else [])
    for label, xp, mat in runs:
        if xp is None or (label == "one" and shifted_views is None):
            continue
        fn, fresh = case.make(xp, mat)
        with _rule_off() if label == "one" else contextlib.nullcontext():
            whole, host, out = _timed(fn, fresh, xp, repeat)
        row[label] = whole * 1e3
        if label == "lazy":
            row["host"] = host * 1e3
            row["launches"] = _launches(fn, fresh)
            try:
                fused = fl.fuse(functools.partial(fn, copy=True) if case.npbench else fn)
                row["fuse"] = _timed(fused, fresh, fl, repeat)[0] * 1e3
                row["queued"] = _queued(fused, fresh, repeat) * 1e3
            except Exception as exc:  # (reported: a function fl.fuse cannot trace)
                row["fuse_error"] = f"{type(exc).__name__}: {exc}"[:120]
        got = _as_numpy(out)
        if ref is None:
            ref = got
        elif not np.allclose(got, ref, rtol=1e-4, atol=1e-6 * float(np.abs(ref).max())):
            row[f"{label}_mismatch"] = float(np.abs(got - ref).max())
    if "cupy" in row:
        row["ratio"] = row["cupy"] / row["lazy"]
    return row


def _cases(npbench: Path, preset: str, small: bool) -> list[Case]:
    cases = []
    if (npbench / "bench_info").is_dir():
        for short, inner in (("hdiff", False), ("gemver", False), ("mlp", False),
                             ("k3mm", False)):
            cases.append(Case(short, _npbench_case(npbench, short, preset), inner, True))
    else:
        print(f"(no NPBench at {npbench}: its cases are skipped)")
    n2, n3 = (256, 40) if small else (4096, 256)
    cases.append(Case("biharmonic-2d", lambda xp, mat: _biharmonic_2d(xp, mat, n2), True))
    cases.append(Case("laplacian2-3d", lambda xp, mat: _laplacian_squared_3d(xp, mat, n3),
                      True))
    cases.append(Case("box5-of-box5", lambda xp, mat: _box_of_box_2d(xp, mat, n2), True))
    k, n = (3000, 1000) if small else (30000, 10000)
    cases.append(Case("relu8@W", lambda xp, mat: _skinny_with_producer(xp, mat, k, n), True))
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="fuseloop's device (nvidia, cuda:0, ...)")
    ap.add_argument("--npbench", type=Path, default=ROOT / ".npbench")
    ap.add_argument("--preset", default="M")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--small", action="store_true",
                    help="preset S and small own cases (a check that it runs, on a CPU)")
    ns = ap.parse_args()
    rows = []
    with fl.device(ns.device) if ns.device else contextlib.nullcontext():
        print(f"device: {fl.get_device()}; cupy: {'yes' if cupy is not None else 'no'}")
        print(f"{'case':15} {'cupy ms':>9} {'lazy ms':>9} {'host ms':>9} {'fuse ms':>9} "
              f"{'queued':>9} {'mat ms':>9} {'one ms':>9} {'launches':>8} {'ratio':>6}")
        for case in _cases(ns.npbench, "S" if ns.small else ns.preset, ns.small):
            if ns.only and case.name not in ns.only:
                continue
            row = _row(case, ns.repeat)
            rows.append(row)
            cells = [f"{row[k]:9.3f}" if k in row else f"{'-':>9}"
                     for k in ("cupy", "lazy", "host", "fuse", "queued", "mat", "one")]
            ratio = f"{row['ratio']:6.3f}" if "ratio" in row else f"{'-':>6}"
            print(f"{case.name:15} {' '.join(cells)} {row['launches']:8d} {ratio}",
                  {k: v for k, v in row.items() if k.endswith(("error", "mismatch"))} or "",
                  flush=True)
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
