"""Compare the host overhead of fuseloop revisions in one process, loops interleaved.

On a shared machine the speed of the same work drifts by up to 2x over seconds, so two
processes run one after the other can disagree more than two versions do.  This script
copies the ``fuseloop`` package of each git revision (``WT`` for the working tree) under
its own name, imports them all into one process and times a loop in turn: A, B, A, B, ...
Each version therefore sees the same phases of the machine.  Timings are reported, never
asserted.  The loop (``--case``), on 1000 float32 elements, synchronizing every 100 calls:

* ``overhead``: the host-overhead loop of ``bench_elementwise.py``, a 5-operation
  expression built and ``.eval()``-ed each call;
* ``scalar``: the same with a scalar that changes every call (``x * s``, 7 values);
* ``mask``: ``(x[x > 0.5] * 2).eval()`` (a compaction and its count read every call);
* ``center``: ``(x - x.mean()).eval()`` (a full reduction fused into its consumer).

Usage::

    python benchmarks/compare_host_overhead.py REV [REV ...] [--case NAME] [--rounds N]
                                               [--calls N] [--device SPEC] [--out F]
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def copy_package(rev: str, name: str, into: Path) -> None:
    """``fuseloop/`` at ``rev`` (the working tree for ``WT``; a folder holding a
    ``fuseloop`` package, for a machine without the git history) as the package ``name``."""
    target = into / name
    if rev == "WT":
        shutil.copytree(ROOT / "fuseloop", target)
        return
    if (Path(rev) / "fuseloop").is_dir():
        shutil.copytree(Path(rev) / "fuseloop", target)
        return
    archive = into / f"{name}.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", rev, "fuseloop"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / f"{name}-src", filter="data")
    (into / f"{name}-src" / "fuseloop").rename(target)


SCALES = [float(k) for k in range(2, 9)]
# name -> (the loop's expression of x, y and the call's number; numpy's value of it)
CASES: dict[str, tuple[Any, Any]] = {
    "overhead": (lambda x, y, i: ((x * 2 + y) * x - y) / 3,
                 lambda x, y, i: ((x * 2 + y) * x - y) / 3),
    "scalar": (lambda x, y, i: ((x * SCALES[i % 7] + y) * x - y) / 3,
               lambda x, y, i: ((x * SCALES[i % 7] + y) * x - y) / 3),
    "mask": (lambda x, y, i: x[x > 0.5] * 2, lambda x, y, i: x[x > 0.5] * 2),
    "center": (lambda x, y, i: x - x.mean(), lambda x, y, i: x - x.mean()),
}


def copy_packages(revs: list[str], stem: str) -> tuple[Path, list[str]]:
    """Each of ``revs`` as a package of its own (:func:`copy_package`) in a new temporary
    folder put first on ``sys.path``: the folder and the packages' names, in order."""
    tmp = Path(tempfile.mkdtemp(prefix=f"fuseloop-{stem}-"))
    names = [f"fuseloop_{stem}{k}" for k in range(len(revs))]
    for rev, name in zip(revs, names):
        copy_package(rev, name, tmp)
    sys.path.insert(0, str(tmp))
    return tmp, names


def import_revisions(revs: list[str], stem: str, device: str | None = None) -> list[Any]:
    """Each of ``revs`` copied (:func:`copy_packages`) and imported, in order; with
    ``device``, each set to it."""
    mods = [importlib.import_module(name) for name in copy_packages(revs, stem)[1]]
    if device:
        for fl in mods:
            fl.set_device(device)
    return mods


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="+",
                    help="git revisions (WT: the working tree; or a folder holding fuseloop/)")
    ap.add_argument("--case", choices=sorted(CASES), default="overhead")
    ap.add_argument("--rounds", type=int, default=40, help="timed loops per version")
    ap.add_argument("--calls", type=int, default=300, help="calls per timed loop")
    ap.add_argument("--device", default="cpu", help="device spec (default: cpu)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()

    tmp, names = copy_packages(args.revs, "compare")

    rng = np.random.default_rng(1)
    xh = rng.random(1000, dtype=np.float32)
    yh = rng.random(1000, dtype=np.float32) + 1
    body, reference = CASES[args.case]
    loops = []
    for name in names:
        fl = importlib.import_module(name)
        fl.set_device(args.device)
        x, y = fl.asarray(xh), fl.asarray(yh)

        def loop(calls: int, fl=fl, x=x, y=y) -> None:
            for i in range(calls):
                body(x, y, i).eval()
                if i % 100 == 99:
                    fl.synchronize()
            fl.synchronize()

        for i in (0, 3):
            np.testing.assert_allclose(body(x, y, i).get(), reference(xh, yh, i),
                                       rtol=1e-5, atol=1e-5)
        loop(args.calls)  # warm: compiles once, fills the caches
        loops.append(loop)

    times: list[list[float]] = [[] for _ in names]
    for _ in range(args.rounds):
        for k, loop in enumerate(loops):
            t0 = time.perf_counter()
            loop(args.calls)
            times[k].append((time.perf_counter() - t0) / args.calls * 1e6)

    rows = []
    print(f"{args.case}: us per call ({args.rounds} interleaved loops of {args.calls} calls)")
    print("| revision | fastest | 10th percentile | median | median paired ratio to the first |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for rev, ts in zip(args.revs, times):
        ratio = statistics.median(t / t0 for t, t0 in zip(ts, times[0]))
        s = sorted(ts)
        row = {"revision": rev, "fastest": s[0], "p10": s[len(s) // 10],
               "median": statistics.median(s), "paired_ratio": ratio, "loops": ts}
        rows.append(row)
        print(f"| {rev} | {row['fastest']:.1f} | {row['p10']:.1f} | {row['median']:.1f} "
              f"| {ratio:.3f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"case": args.case, "rounds": args.rounds, "calls": args.calls,
                       "rows": rows}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
