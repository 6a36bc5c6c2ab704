"""Products of every shape on the CPU device, two checkouts interleaved (issue 25).

For each shape ``MxNxK`` with a dtype letter (``f`` float32, ``d`` float64; a trailing
``T``: the right operand a transposed view, ``X @ B.T``; M = 1: a vector, ``x @ A``),
the CPU time (``time.process_time``: every thread of the process, so PoCL's workers and
OpenBLAS's are counted; the least of a few runs) of one evaluation and a synchronize in
each checkout, numpy's (single-threaded OpenBLAS unless ``--blas-threads``) beside them,
and the result's largest error against float64.  Each checkout runs in its own process,
alternately, twice.  ``--host`` keeps the host path on (numpy for small work, BLAS for
concrete products); by default it is off, so the kernels are timed.

    python benchmarks/probes/cpu_products_ab.py /work/main . 8x2048x2048xf 2048x8x2048xf \\
        16x1024x1024xd 8x2048x2048xfT 1x4096x4096xd [--host] [--blas-threads]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, sys, time
import numpy as np
import fuseloop as fl

def least(f, reps):
    f(); f()
    best = 1e9
    for _ in range(reps):
        c0 = time.process_time(); f(); best = min(best, time.process_time() - c0)
    return best

out = {}
for spec in sys.argv[1:]:
    m, n, k, t = spec.split("x")
    m, n, k = int(m), int(n), int(k)
    dt = np.float32 if t[0] == "f" else np.float64
    rng = np.random.default_rng(1)
    a = (rng.random((m, k)) if m > 1 else rng.random(k)).astype(dt)
    bt = rng.random((n, k)).astype(dt)
    b = bt.T if t.endswith("T") else np.ascontiguousarray(bt.T)
    fa = fl.asarray(a)
    fb = fl.asarray(bt).T if t.endswith("T") else fl.asarray(b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs((fa @ fb).get() - want).max() / np.abs(want).max())

    def run():
        (fa @ fb).eval()
        fl.synchronize()

    reps = 5 if m * n * k < 2**27 else 3
    out[spec] = (least(run, reps), least(lambda: a @ b, reps), err)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--host", action="store_true", help="keep the host path on")
    ap.add_argument("--blas-threads", action="store_true", help="numpy's default threads")
    args = ap.parse_args()
    env = dict(os.environ)
    if not args.host:
        env["FUSELOOP_HOST_PATH"] = "0"
    if not args.blas_threads:
        env["OPENBLAS_NUM_THREADS"] = "1"
    res: dict[str, dict[str, list[float]]] = {}
    for _ in range(2):
        for name, path in (("before", args.before), ("after", args.after)):
            env["PYTHONPATH"] = os.path.abspath(path)
            done = subprocess.run([sys.executable, "-c", _CHILD, *args.shapes], env=env,
                                  capture_output=True, text=True, check=True)
            for spec, (t, t_np, err) in json.loads(done.stdout.splitlines()[-1]).items():
                r = res.setdefault(spec, {}).setdefault(name, [1e9, 1e9, 0.0])
                r[0], r[1], r[2] = min(r[0], t), min(r[1], t_np), max(r[2], err)
    print(f"{'shape':18s} {'before ms':>10s} {'after ms':>10s} {'numpy ms':>10s} "
          f"{'np/before':>10s} {'np/after':>9s}  err after")
    for spec, d in res.items():
        b, a = d["before"], d["after"]
        t_np = min(b[1], a[1])
        print(f"{spec:18s} {b[0] * 1e3:10.3f} {a[0] * 1e3:10.3f} {t_np * 1e3:10.3f} "
              f"{t_np / b[0]:10.2f} {t_np / a[0]:9.2f}  {a[2]:.1e}")


if __name__ == "__main__":
    main()
