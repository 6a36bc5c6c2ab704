"""``fuseloop tune --workloads``: tune benchmark workloads, default vs tuned times."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl

from .. import tuning
from ..tuner import tune
from .workloads import Workload, by_name, size_label


def _time(run: Callable[[], Any], repeat: int) -> float:
    """Median wall time of ``run()`` and a synchronisation, after a warm-up."""
    run()
    fl.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        fl.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tune_workload(wl: Workload, size: int, budget_s: float, repeat: int = 7,
                  progress: bool = True, rounds: int = 2) -> dict[str, Any]:
    """Time ``wl`` at ``size`` with the default parameters, tune it, time it again
    (then ``rounds`` more times each, alternately; medians)."""
    inputs = wl.make_inputs(size, np.random.default_rng(0))
    arrays = [fl.asarray(inputs[k]) for k in wl.inputs]
    run, fetch = wl.fuseloop(*arrays)
    with tuning.suspended():
        default_s = _time(run, repeat)
        want = np.asarray(fetch())
    report = tune(run, budget_s=budget_s, progress=progress)
    tuned_s = _time(run, repeat)
    got = np.asarray(fetch())
    # the machine's load drifts: default and tuned timed again, alternately
    defaults, tuned = [default_s], [tuned_s]
    for _ in range(rounds):
        with tuning.suspended():
            defaults.append(_time(run, repeat))
        tuned.append(_time(run, repeat))
    default_s, tuned_s = statistics.median(defaults), statistics.median(tuned)
    same = bool(np.allclose(got, want, rtol=wl.rtol, atol=wl.atol, equal_nan=True))
    return {"workload": wl.name, "size": size_label(wl, size), "default_s": default_s,
            "tuned_s": tuned_s, "tune_s": report.seconds, "same": same,
            "kernels": len(report.kernels), "stored": sum(k.stored for k in report.kernels),
            "report": report}


def main(names: list[str], size: int, matmul_size: int, budget_s: float, repeat: int,
         progress: bool = True) -> int:
    """Tune the named workloads (default and broad suites) and print a table."""
    from .workloads import COPY

    workloads = [w for w in by_name(names, "all") if w is not COPY or "copy" in names]
    rows = []
    for wl in workloads:
        n = wl.sizes[0] if wl.sizes else matmul_size if wl.kind == "matmul" else size
        rows.append(tune_workload(wl, n, budget_s, repeat, progress))
        print(rows[-1]["report"].as_text())
    print(f"{'workload':<24} {'size':<16} {'default ms':>10} {'tuned ms':>9} {'gain':>6} "
          f"{'tuning s':>8} stored  same")
    # (with no winner stored both columns ran the same kernels: their ratio is noise)
    for r in rows:
        print(f"{r['workload']:<24} {r['size']:<16} {r['default_s'] * 1e3:>10.3f} "
              f"{r['tuned_s'] * 1e3:>9.3f} {r['default_s'] / r['tuned_s']:>5.2f}x "
              f"{r['tune_s']:>8.1f} {r['stored']}/{r['kernels']:<4} {r['same']!s:<5}"
              + ("" if r["stored"] else " (same kernels: noise)"))
    return 0 if all(r["same"] for r in rows) else 1
