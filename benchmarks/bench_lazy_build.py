"""Host cost of building and keying lazy expressions, this tree against earlier ones.

Issue 26 ("Small arrays"): building a 400-node expression cost ~6 us per node on every
call, and 10 iterations of ``r = fl.sin(r) * 0.5 + r * 0.25`` on 1000 float32 elements
took 315 us per call on the H200 host (torch.compile 46 us, cupy eager 389 us).  This
script copies the ``fuseloop`` package of each revision under its own name (see
``compare_host_overhead.py``), imports them all into one process and times them in
interleaved rounds (A, B, A, B, ...), so each sees the same phases of a shared machine:

* ``build chain`` / ``build tree``: microseconds per node to build a 400-node
  expression: ``r = r * 0.999 + y`` 200 times, and a balanced sum of 200 products
  ``x_k * c_k`` (no evaluation);
* ``key chain`` / ``key tree``: microseconds to find a built expression's cached
  structure (``expr.program.structure_entry``, the key or signature look-up that
  ``.eval()`` does before its launch), warm; for a version that does not cache the
  structure (too large for it), the time of linearising it, which its ``.eval()`` does;
* ``eval chain`` / ``eval tree``: build, ``.eval()``, per call (synchronized every
  ``--sync`` calls);
* ``chain10``: the issue's 10-iteration chain, built and ``.eval()``-ed, per call.

On a CPU device, small work runs in numpy on the host (``fuseloop.host_path``, not in
the baseline): set ``FUSELOOP_HOST_PATH=off`` to time the kernels.  The peers time
``chain10`` in the same run: torch eager and ``torch.compile`` and cupy
on a CUDA GPU, numpy on the CPU.  Timings are reported (fastest and median over the
rounds), never asserted.

Usage::

    python benchmarks/bench_lazy_build.py                      # WT and .baseline
    python benchmarks/bench_lazy_build.py WT /path/to/tree_with_fuseloop --device cpu
    python benchmarks/bench_lazy_build.py --rounds 30 --n 1000 --out build.json
    python benchmarks/bench_lazy_build.py /work/main WT --device "pocl 3.0" --cpu-clock
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_host_overhead import copy_packages

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".baseline"  # the round's starting code (07ce141), where present


def chain(fl: Any, x: Any, y: Any) -> Any:
    """400 nodes: a scalar product and a sum per step, the previous step read once."""
    r = x
    for _ in range(200):
        r = r * 0.999 + y
    return r


def tree(fl: Any, x: Any, y: Any) -> Any:
    """399 nodes: 200 products with distinct scalars, summed pairwise."""
    xs = (x, y)
    t = [xs[k % 2] * float(k + 2) for k in range(200)]
    while len(t) > 1:
        t = [t[i] + t[i + 1] if i + 1 < len(t) else t[i] for i in range(0, len(t), 2)]
    return t[0]


def chain10(fl: Any, x: Any, y: Any) -> Any:
    """The issue's chain: 40 nodes, each step read twice by the next."""
    r = x
    for _ in range(10):
        r = fl.sin(r) * 0.5 + r * 0.25
    return r


# the clock of fuseloop's samples: wall time, or with --cpu-clock this process's CPU time
# (on a shared machine other work then counts less; the peers keep wall time)
_clock = time.perf_counter


def _timed(fn: Callable[[], Any], reps: int) -> float:
    t0 = _clock()
    for _ in range(reps):
        fn()
    return (_clock() - t0) / reps * 1e6


def version_cases(fl: Any, xh: np.ndarray, yh: np.ndarray, sync: int
                  ) -> dict[str, tuple[Callable[[], float], int]]:
    """name -> (one timed sample in us, the nodes it is divided by) for one version."""
    prog = importlib.import_module(fl.__name__ + ".expr.program")
    x, y = fl.asarray(xh), fl.asarray(yh)
    # checked against numpy once, and warm: compiled, cached
    for f in (chain, tree, chain10):
        want = f(np, xh, yh)
        np.testing.assert_allclose(f(fl, x, y).get(), want, rtol=1e-4, atol=1e-5)
    # (their nodes kept: an evaluated array's node becomes its result's leaf)
    built = {"chain": chain(fl, x, y), "tree": tree(fl, x, y)}
    nodes = {name: (e._node, e.shape) for name, e in built.items()}
    for e in built.values():
        e.eval()
    fl.synchronize()

    def key(name: str) -> Callable[[], float]:
        node, shape = nodes[name]
        if prog.structure_entry([node], shape) is None:  # not cached: linearised each time
            return lambda: _timed(lambda: prog.linearize([node], shape), 5)
        return lambda: _timed(lambda: prog.structure_entry([node], shape), 20)

    def evals(f: Callable[..., Any]) -> Callable[[], float]:
        def sample() -> float:
            t0 = _clock()
            for _ in range(sync):
                f(fl, x, y).eval()
            fl.synchronize()
            return (_clock() - t0) / sync * 1e6
        return sample

    return {
        "build chain": (lambda: _timed(lambda: chain(fl, x, y), 5), 400),
        "build tree": (lambda: _timed(lambda: tree(fl, x, y), 5), 399),
        "key chain": (key("chain"), 1),
        "key tree": (key("tree"), 1),
        "eval chain": (evals(chain), 1),
        "eval tree": (evals(tree), 1),
        "chain10": (evals(chain10), 1),
    }


def peer_cases(xh: np.ndarray, yh: np.ndarray, sync: int) -> dict[str, Callable[[], float]]:
    """chain10 by the peers available here: numpy always; torch and cupy on CUDA."""
    peers: dict[str, Callable[[], float]] = {
        "numpy": lambda: _timed(lambda: chain10(np, xh, yh), sync)}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        xt = torch.from_numpy(xh).cuda()

        def step(r: Any) -> Any:
            for _ in range(10):
                r = torch.sin(r) * 0.5 + r * 0.25
            return r

        compiled = torch.compile(step)
        for fn in (step, compiled):
            for _ in range(3):
                fn(xt)
        torch.cuda.synchronize()

        def torch_sample(fn: Callable[[Any], Any]) -> Callable[[], float]:
            def sample() -> float:
                t0 = time.perf_counter()
                for _ in range(sync):
                    fn(xt)
                torch.cuda.synchronize()
                return (time.perf_counter() - t0) / sync * 1e6
            return sample

        peers["torch eager"] = torch_sample(step)
        peers["torch.compile"] = torch_sample(compiled)
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no cupy, or no CUDA device
        cupy = None
    if cupy is not None:
        xc = cupy.asarray(xh)

        def cupy_sample() -> float:
            t0 = time.perf_counter()
            for _ in range(sync):
                chain10(cupy, xc, None)
            cupy.cuda.Device().synchronize()
            return (time.perf_counter() - t0) / sync * 1e6

        cupy_sample()
        peers["cupy eager"] = cupy_sample
    return peers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*", help="git revisions (WT: the working tree; or a "
                    "folder holding fuseloop/); default: WT and .baseline")
    ap.add_argument("--device", default=None, help="device spec (default: fuseloop's)")
    ap.add_argument("--n", type=int, default=1000, help="elements (float32)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sync", type=int, default=20, help="evaluations per synchronize")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="time fuseloop by this process's CPU time (a shared machine)")
    args = ap.parse_args()
    if args.cpu_clock:
        global _clock
        _clock = time.process_time
    revs = args.revs or (["WT", str(BASELINE)] if BASELINE.is_dir() else ["WT"])

    tmp, names = copy_packages(revs, "build")

    rng = np.random.default_rng(3)
    xh = rng.random(args.n, dtype=np.float32)
    yh = rng.random(args.n, dtype=np.float32)
    per_version = []
    device = None
    for name in names:
        fl = importlib.import_module(name)
        if args.device is not None:
            fl.set_device(args.device)
        device = device or str(fl.asarray(xh[:1]).device)
        per_version.append(version_cases(fl, xh, yh, args.sync))
    peers = peer_cases(xh, yh, args.sync)

    cases = list(per_version[0])
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for case in cases:
            for rev, table in zip(revs, per_version):
                sample, per = table[case]
                times.setdefault((case, rev), []).append(sample() / per)
        for peer, sample in peers.items():
            times.setdefault(("chain10", peer), []).append(sample())

    print(f"lazy building and keying on {device}, {args.n} float32 elements, "
          f"{args.rounds} interleaved rounds (us; build: per node)")
    print("| case | version or peer | fastest | median | median ratio to the first |")
    print("| --- | --- | ---: | ---: | ---: |")
    rows = []
    for case in cases:
        first = None
        for (c, who), ts in times.items():
            if c != case:
                continue
            med = statistics.median(ts)
            first = first or med
            row = {"case": case, "who": who, "fastest": min(ts), "median": med,
                   "ratio": med / first, "samples": ts}
            rows.append(row)
            print(f"| {case} | {who} | {row['fastest']:.3f} | {med:.3f} | "
                  f"{row['ratio']:.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": device, "n": args.n, "rounds": args.rounds, "rows": rows},
                      f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
