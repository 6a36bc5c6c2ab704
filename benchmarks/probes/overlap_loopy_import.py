"""Does importing Loopy on a background thread, started when the first array is made,
shorten a cold first result?  (Issue 26: the GIL decides.)

Each run is a new Python process with empty fuseloop, Loopy and PoCL caches, timing
``2*x - sin(y) + x*y`` from the first ``fl.asarray`` to the first result, in two
modes, alternately: ``serial`` (fuseloop as it is: Loopy is imported at the first
kernel cache miss) and ``thread`` (a thread imports Loopy, started just before the
first ``fl.asarray``, so that it runs while the device is discovered and started
and the inputs are copied).  Printed per run: wall and CPU seconds of the arrays
(discovery, start, copies) and of the first result.  Also printed once: how much of
the driver's own discovery (``get_platforms``, the devices, a context and queue) left
the GIL to other threads (a spinning thread's progress during it), the part that a
background import can overlap.  Timings are reported, never asserted.

Usage::

    python benchmarks/probes/overlap_loopy_import.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import os, sys, threading, time
import numpy as np
import fuseloop as fl
mode = sys.argv[1]
rng = np.random.default_rng(0)
xh, yh = rng.random(1 << 16, dtype=np.float32), rng.random(1 << 16, dtype=np.float32)
c0, t0 = time.process_time(), time.perf_counter()
if mode == "thread":
    def _import():
        import loopy  # noqa: F401
    threading.Thread(target=_import, daemon=True).start()
x, y = fl.asarray(xh), fl.asarray(yh)
fl.synchronize()
c1, t1 = time.process_time(), time.perf_counter()
(2 * x - fl.sin(y) + x * y).get()
c2, t2 = time.process_time(), time.perf_counter()
print(f"{t1 - t0:.3f} {c1 - c0:.3f} {t2 - t1:.3f} {c2 - c1:.3f} {t2 - t0:.3f}")
"""

_GIL = """
import threading, time
import pyopencl as cl
count, stop = [0], [False]
def spin():
    while not stop[0]:
        count[0] += 1
th = threading.Thread(target=spin, daemon=True)
th.start()
time.sleep(0.2)
c = count[0]; time.sleep(0.2); rate = (count[0] - c) / 0.2
t, c = time.perf_counter(), count[0]
devs = [d for p in cl.get_platforms() for d in p.get_devices()]
queues = [cl.CommandQueue(cl.Context([d])) for d in devs]
dt, done = time.perf_counter() - t, (count[0] - c) / rate
stop[0] = True
print(f"driver discovery ({len(devs)} devices, a context and queue each): {dt:.3f} s wall, "
      f"of which other threads ran {done:.3f} s (the GIL released)")
"""


def _env(tmp: str) -> dict[str, str]:
    return dict(os.environ, FUSELOOP_CACHE_DIR=f"{tmp}/fl", XDG_CACHE_HOME=f"{tmp}/xdg",
                POCL_CACHE_DIR=f"{tmp}/pocl", FUSELOOP_COMPILE="inline",
                FUSELOOP_PROGRESS="0",
                PYTHONPATH=os.pathsep.join(
                    p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # (byte-compiled first, as an installed package is; see cold_compile.py)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", f"{ROOT}/fuseloop"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", _GIL], env=_env(tmp), text=True,
                             capture_output=True, cwd=tmp)
        print(out.stdout.strip() or out.stderr[-2000:])
    runs: dict[str, list[list[float]]] = {"serial": [], "thread": []}
    for _ in range(args.rounds):
        for mode in runs:  # alternately: the machine's load hits both alike
            with tempfile.TemporaryDirectory() as tmp:
                out = subprocess.run([sys.executable, "-c", _CHILD, mode], env=_env(tmp),
                                     text=True, capture_output=True, cwd=tmp)
                if not out.stdout.strip():
                    sys.exit(f"{mode}: failed\n{out.stderr[-2000:]}")
                runs[mode].append([float(v) for v in out.stdout.split()])
    print(f"median of {args.rounds} runs (s) | arrays wall | arrays CPU | first result wall "
          "| first result CPU | both wall")
    for mode, rows in runs.items():
        cells = [statistics.median(r[k] for r in rows) for k in range(5)]
        print(f"{mode:28s} | " + " | ".join(f"{c:.3f}" for c in cells))


if __name__ == "__main__":
    main()
