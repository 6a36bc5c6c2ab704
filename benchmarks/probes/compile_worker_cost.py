"""What building kernels in compile workers costs: cold first results, inline vs process.

For each device (or ``--device``) and each mode of ``FUSELOOP_COMPILE`` (``inline``,
``process``), alternating, a new Python process with empty fuseloop, Loopy and PoCL
caches evaluates three new kernels one after the other (the demo's ``2*x + x*y - 3*y``,
``fl.sum(x*y)``, a row softmax) and reports the wall time of each first result.
Timings are reported, never asserted.

Usage::

    python benchmarks/probes/compile_worker_cost.py [--device SPEC] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import fuseloop as fl
imported = time.perf_counter() - t0
fl.set_device(sys.argv[1])
rng = np.random.default_rng(0)
x = fl.asarray(rng.random(2**16, dtype=np.float32))
y = fl.asarray(rng.random(2**16, dtype=np.float32))
m = fl.asarray(rng.random((256, 256), dtype=np.float32))
cases = {
    "demo 2*x + x*y - 3*y": lambda: (2 * x + x * y - 3 * y).get(),
    "sum(x*y)": lambda: fl.sum(x * y).get(),
    "row softmax": lambda: (fl.exp(m - m.max(axis=1, keepdims=True))
                            / fl.exp(m - m.max(axis=1, keepdims=True)).sum(axis=1,
                                                                          keepdims=True)).get(),
}
out = {"import": imported}
for name, run in cases.items():
    t = time.perf_counter()
    run()
    out[name] = time.perf_counter() - t
print(json.dumps(out))
"""


def _one(device: str, mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUSELOOP_COMPILE=mode, FUSELOOP_CACHE_DIR=f"{tmp}/fl",
                   XDG_CACHE_HOME=f"{tmp}/xdg", POCL_CACHE_DIR=f"{tmp}/pocl",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")])))
        proc = subprocess.run([sys.executable, "-c", _CHILD, device], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="device spec (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.device:
        specs = args.device
    else:
        sys.path.insert(0, str(ROOT))
        import fuseloop as fl

        specs = [str(d.index) for d in fl.devices() if d.usable]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for spec in specs:
        runs: dict[str, list[dict[str, float]]] = {"inline": [], "process": []}
        for _ in range(args.rounds):
            for mode in runs:
                runs[mode].append(_one(spec, mode))
        results[spec] = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                         for mode, rs in runs.items()}
        print(f"device {spec} (median of {args.rounds}, seconds):")
        for key in results[spec]["inline"]:
            i, p = results[spec]["inline"][key], results[spec]["process"][key]
            print(f"  {key:24s} inline {i:7.3f}  process {p:7.3f}  process/inline {p / i:5.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
