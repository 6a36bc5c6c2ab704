"""``import fuseloop`` and a disk-warm first result: wall and CPU seconds, checkouts compared.

Each sample is a new Python process.  ``import``: the child times ``import fuseloop``
(wall: ``time.perf_counter``; CPU: ``time.process_time``) and the parent the whole process
(interpreter start included).  ``warm``: the kernels of ``2*x - sin(y) + x*y`` and
``fl.sum(x*y)`` are in the disk cache (one priming run per checkout first); the child
times the import, the first result of each, and lists which of the modules that only a
cache miss needs it loaded.  Checkouts run alternately; printed: medians over
``--rounds`` samples.  Bytecode is cached (under the run's temporary directory, so the
checkouts stay clean), as it is for an installed package.  CPU seconds stay meaningful
on a loaded machine, where wall seconds do not.

Usage::

    python benchmarks/probes/import_time.py [--rounds 7] [--root DIR ...]

``--root`` names a checkout to import fuseloop from (default: this one); give two to
compare them (e.g. ``/work/main .``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# what a process whose kernels are all on disk should not need
MISS_ONLY = ("loopy", "islpy", "pymbolic", "fuseloop.lower", "fuseloop.recipes")

_IMPORT = """
import json, time
c0, t0 = time.process_time(), time.perf_counter()
import fuseloop
c1, t1 = time.process_time(), time.perf_counter()
print(json.dumps({"import": t1 - t0, "import_cpu": c1 - c0}))
"""

_WARM = """
import json, sys, time
cpu = time.process_time
c0, t0 = cpu(), time.perf_counter()
import numpy as np
import fuseloop as fl
c1, t1 = cpu(), time.perf_counter()
xh = np.linspace(0, 1, 1 << 14, dtype=np.float32)
x, y = fl.asarray(xh), fl.asarray(xh[::-1].copy())
c2, t2 = cpu(), time.perf_counter()
first = (2 * x - fl.sin(y) + x * y).get()
c3, t3 = cpu(), time.perf_counter()
total = fl.sum(x * y).get()
c4, t4 = cpu(), time.perf_counter()
assert np.allclose(first, 2 * xh - np.sin(xh[::-1]) + xh * xh[::-1], atol=1e-5)
print(json.dumps({"import": t1 - t0, "import_cpu": c1 - c0, "arrays": t2 - t1,
                  "arrays_cpu": c2 - c1, "first": t3 - t2, "first_cpu": c3 - c2,
                  "sum": t4 - t3, "sum_cpu": c4 - c3,
                  "lowered": fl.stats()["kernels_lowered"],
                  "loaded": sorted({m.split(".")[0] if not m.startswith("fuseloop")
                                    else ".".join(m.split(".")[:2]) for m in sys.modules
                                    if m.startswith(MISS_ONLY)})}))
""".replace("MISS_ONLY", repr(MISS_ONLY))


def _child(root: Path, script: str, cache: str) -> dict:
    env = dict(os.environ, FUSELOOP_CACHE_DIR=f"{cache}/fl", XDG_CACHE_HOME=f"{cache}/xdg",
               POCL_CACHE_DIR=f"{cache}/pocl", FUSELOOP_PROGRESS="0",
               # bytecode cached, as an installed package's is (the priming run writes it)
               PYTHONPYCACHEPREFIX=f"{cache}/pyc",
               PYTHONPATH=os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH"))
                                          if p))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script], env=env, text=True,
                         capture_output=True, cwd=root)
    if out.returncode:
        raise RuntimeError(f"{root}: child failed\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--root", action="append", type=Path)
    args = parser.parse_args()
    roots = [r.resolve() for r in args.root or [ROOT]]
    samples: dict[Path, dict[str, list]] = {r: {} for r in roots}
    with tempfile.TemporaryDirectory() as tmp:
        caches = {r: f"{tmp}/{k}" for k, r in enumerate(roots)}
        for r in roots:
            _child(r, _WARM, caches[r])  # primes the disk cache
        for _ in range(args.rounds):
            for r in roots:
                for case, script in (("import", _IMPORT), ("warm", _WARM)):
                    for key, value in _child(r, script, caches[r]).items():
                        samples[r].setdefault(f"{case} {key}", []).append(value)
    keys = ["import process", "import import", "import import_cpu", "warm import",
            "warm import_cpu", "warm arrays", "warm arrays_cpu", "warm first", "warm first_cpu",
            "warm sum", "warm sum_cpu"]
    print(f"medians of {args.rounds} processes, seconds (wall; CPU where named)")
    print(f"{'':22}" + "".join(f"{str(r)[-28:]:>30}" for r in roots))
    for key in keys:
        print(f"{key:22}" + "".join(f"{statistics.median(samples[r][key]):30.3f}"
                                    for r in roots))
    for r in roots:
        print(f"{r}: warm run lowered {samples[r]['warm lowered'][-1]} kernels; loaded "
              f"{samples[r]['warm loaded'][-1]}")


if __name__ == "__main__":
    main()
