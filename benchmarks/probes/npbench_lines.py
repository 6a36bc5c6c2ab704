"""Host time and launches per source line of NPBench's CuPy kernels run with fuseloop
as ``cupy`` (issue 26): which statements of a loop cost what.

Loads benchmarks the way ``benchmarks/npbench_swap.py`` does (NPBench is not part of
this repository: pass a checkout with ``--npbench``), runs each once to warm (kernels
built, plans made), then ``--repeats`` times while a thread samples which line of the
kernel's frame the main thread is on (every ``--every`` seconds, the interpreter's
switch interval shortened to match): a line's share of the samples times the runs'
time, divided by the times the line ran, is its time per run.  A line tracer (its own
cost in no figure) counts the runs of each line and ``fl.stats()``'s launches and
plans (recorded, walked) and kernels lowered per line in one more run
(``--count-first``: in the first, cold, run instead).  ``--clock cpu`` (the default) takes
``time.process_time`` for the runs' time; ``wall`` is ``time.perf_counter`` with the
device synchronised at the end of each run (on a GPU the host time per statement, as
cupy's loop would see it).  Reported, never asserted.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/npbench_lines.py \\
        --npbench /tmp/npbench cholesky lu ludcmp durbin [--preset S] [--clock wall]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import npbench_swap as swap

import fuseloop as fl


def _bench(npbench: Path, name: str) -> dict[str, Any]:
    for p in sorted((npbench / "bench_info").glob("*.json")):
        b = json.loads(p.read_text())["benchmark"]
        if name in (b["short_name"], b["module_name"], p.stem):
            return b
    raise SystemExit(f"no NPBench benchmark named {name!r}")


_COUNTED = ("kernels_launched", "plans_recorded", "plans_walked", "kernels_lowered")


class _Counter:
    """A line tracer of the kernel's frame: each line's runs and ``fl.stats()`` deltas."""

    def __init__(self, code: Any) -> None:
        self.code = code
        self.runs: dict[int, int] = defaultdict(int)
        self.counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.line = 0
        self.stats: dict[str, int] = {}

    def _close(self) -> None:
        if self.line:
            self.runs[self.line] += 1
            after = fl.stats()
            for k in _COUNTED:
                self.counts[self.line][k] += after[k] - self.stats[k]
        self.stats = fl.stats()

    def global_trace(self, frame: Any, event: str, arg: Any) -> Any:
        return self.local_trace if frame.f_code is self.code else None

    def local_trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            self._close()
            self.line = frame.f_lineno
        elif event == "return":
            self._close()
            self.line = 0
        return self.local_trace


class _Sampler(threading.Thread):
    """Counts the line of ``code``'s frame the main thread is on, every ``every`` s."""

    def __init__(self, code: Any, every: float) -> None:
        super().__init__(daemon=True)
        self.code = code
        self.every = every
        self.main = threading.main_thread().ident or 0
        self.samples: dict[int, int] = defaultdict(int)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            frame = sys._current_frames().get(self.main)
            while frame is not None and frame.f_code is not self.code:
                frame = frame.f_back
            if frame is not None:
                self.samples[frame.f_lineno] += 1


def _one(args: argparse.Namespace, name: str, clock: Any) -> None:
    """Sample and count one benchmark's lines; print the table."""
    b = _bench(args.npbench, name)
    folder = args.npbench / "npbench" / "benchmarks" / b["relative_path"]
    module = b["module_name"]
    values = swap.bench_inputs(args.npbench / "npbench" / "benchmarks", b, args.preset)
    source = folder / f"{module}_cupy.py"
    kernel = getattr(swap._load(source, f"npb_{module}_fl"), b["func_name"])
    lines = source.read_text().splitlines()

    def run(tracer: _Counter | None = None) -> float:
        a = dict(values)
        for arg in b["array_args"]:
            a[arg] = fl.asarray(np.copy(values[arg]))
        fl.synchronize()
        t = clock()
        if tracer is not None:
            sys.settrace(tracer.global_trace)
        try:
            swap._force(kernel(*[a[n] for n in b["input_args"]]))
        finally:
            sys.settrace(None)
        fl.synchronize()
        return clock() - t

    counted = _Counter(kernel.__code__)
    if args.count_first:  # (the first run counted: its walks, records, builds per line)
        run(counted)
    else:
        run()  # (builds, plans)
    sampler = _Sampler(kernel.__code__, args.every)
    sampler.start()
    times = [run() for _ in range(args.repeats)]
    sampler.done.set()
    sampler.join()
    if not args.count_first:
        run(counted)
    per_run = sum(times) / len(times)
    print(f"\n{module}: {per_run * 1e3:.1f} ms per run (min {min(times) * 1e3:.1f}), "
          f"{sum(sampler.samples.values())} samples")
    print(f"  {'line':>4} {'runs':>6} {'us/run':>8} {'share':>6} {'launch/run':>10} "
          f"{'rec':>4} {'walk/run':>8} {'lowered':>7}  source")
    total = sum(sampler.samples.values()) or 1
    for ln in sorted(sampler.samples, key=sampler.samples.__getitem__,
                     reverse=True)[:args.top]:
        n = max(counted.runs.get(ln, 1), 1)
        share = sampler.samples[ln] / total
        c = counted.counts.get(ln, {})
        print(f"  {ln:4d} {n:6d} {share * per_run / n * 1e6:8.1f} {share:6.1%} "
              f"{c.get('kernels_launched', 0) / n:10.2f} {c.get('plans_recorded', 0):4d}"
              f" {c.get('plans_walked', 0) / n:8.2f} {c.get('kernels_lowered', 0):7d}"
              f"  {lines[ln - 1].strip()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npbench", type=Path, required=True)
    ap.add_argument("names", nargs="+", help="benchmarks (module or short names)")
    ap.add_argument("--preset", default="S")
    ap.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--every", type=float, default=0.0005)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--count-first", action="store_true",
                    help="count launches, records, walks and kernels lowered per line in "
                         "the first run (cold) rather than after the timed ones")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    sys.modules["cupy"] = swap._FuseloopAsCupy()
    sys.setswitchinterval(args.every / 2)
    print(f"device: {fl.get_device()}; clock: {args.clock}; preset {args.preset}")
    for name in args.names:
        _one(args, name, clock)


if __name__ == "__main__":
    main()
