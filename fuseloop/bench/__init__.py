"""The fuseloop benchmark suite: ``fuseloop bench`` / ``python benchmarks/run_suite.py``.

Runs a fixed set of workloads (copy reference, element-wise chains, transcendental mixes,
reductions, row softmax, a slice stencil, matmul) at several sizes on one device, measures
the peer libraries in the same process, and writes ``<device>-<date>-suite.json``, ``.md``
and ``.png``. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import os
import platform
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import fuseloop as fl
from fuseloop.errors import FuseloopError

from . import report
from .peers import make_peers, versions
from .progress import Progress
from .runner import Settings, run_case
from .workloads import ALL, SUITES, Workload, by_name, size_label

__all__ = ["main"]

DEFAULT_SIZES = {"cpu": [2**16, 2**20, 2**24], "other": [2**20, 2**24, 2**27]}
DEFAULT_MATMUL = {"cpu": [128, 256, 512], "other": [1024, 2048, 4096]}
QUICK_SIZES, QUICK_MATMUL = [2**10, 2**12], [16, 32]
QUICK_BROAD_SIZES, QUICK_BROAD_MATMUL = [2**12], [32]  # ~40 workloads: one size each


def parse_sizes(text: str) -> list[int]:
    """``"2^16,2^20,1000000"`` -> ``[65536, 1048576, 1000000]``."""
    sizes = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        base, _, exp = part.partition("^")
        value = int(base) ** int(exp) if exp else int(float(base))
        if value < 3:
            raise argparse.ArgumentTypeError(f"size {part!r} is too small (at least 3)")
        sizes.append(value)
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sizes


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="fuseloop bench",
        description="fuseloop benchmark suite: fixed workloads at several sizes, with peer "
                    "libraries measured in the same run; writes JSON, Markdown and PNG.")
    ap.add_argument("--device", default=None,
                    help="device spec: cpu, gpu, an index or a name substring "
                         "(default: fuseloop's default device)")
    ap.add_argument("--sizes", type=parse_sizes, default=None,
                    help="element counts, e.g. 2^16,2^20,2^24 (default: 2^16,2^20,2^24 on a "
                         "CPU, 2^20,2^24,2^27 otherwise); 2-D workloads use a square shape")
    ap.add_argument("--matmul-sizes", type=parse_sizes, default=None,
                    help="square matmul orders (default: 128,256,512 on a CPU, "
                         "1024,2048,4096 otherwise)")
    ap.add_argument("--workloads", default=None,
                    help="comma-separated workload names or groups (default: all): "
                         + ", ".join(w.name for w in ALL))
    ap.add_argument("--suite", default="default", choices=SUITES,
                    help="default: the workloads above; broad: about 40 workloads from real "
                         "array code (reductions of every layout, normalisations, stencils, "
                         "pairwise, gathers, matmul shapes, einsum, long chains, small "
                         "arrays); all: both")
    ap.add_argument("--peers", default=None,
                    help="comma-separated peers to try (numpy, numexpr, torch, cupy, jax; "
                         "default: those for the device type; fuseloop.fuse, only when "
                         "named: the workload under fl.fuse)")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per case (median)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs before timing")
    ap.add_argument("--budget", type=float, default=10.0,
                    help="seconds of timed runs per library and case before stopping early "
                         "(at least 3 runs, unless one run alone takes longer)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes, 3 runs: checks that the suite works, not for figures")
    ap.add_argument("--out", default=None,
                    help="output directory (default: benchmarks/results/ under the current "
                         "directory)")
    ap.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--strict", action="store_true",
                    help="exit with status 1 when a result does not match numpy")
    return ap


def device_slug(dev: fl.Device) -> str:
    """``cpu-pthread-amd-epyc``, ``gpu-nvidia-h200``: file-name friendly."""
    name = re.sub(r"[^a-z0-9]+", "-", dev.name.lower()).strip("-")
    return f"{dev.type}-{name}"[:60]


def _git() -> dict[str, Any]:
    """Commit and dirty flag of the git checkout that the imported fuseloop comes from."""
    here = Path(fl.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                                capture_output=True, text=True, timeout=10, check=True)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=here, capture_output=True, text=True, timeout=10)
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {}


def _load() -> list[float] | None:
    """1, 5 and 15 minute load averages (other work on the host skews CPU figures)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _cases(workloads: list[Workload], sizes: list[int], msizes: list[int], quick: bool = False
           ) -> list[tuple[Workload, int]]:
    def of(w: Workload) -> list[int]:
        if w.sizes is not None:  # small fixed arrays
            return list(w.sizes[:1] if quick else w.sizes)
        return msizes if w.kind == "matmul" else sizes

    return [(w, s) for w in workloads for s in of(w)]


def run_suite(args: argparse.Namespace) -> dict[str, Any]:
    """Run every case on the current device; return the annotated results document."""
    dev = fl.get_device()
    kind = "cpu" if dev.type == "cpu" else "other"
    broad = args.suite != "default"
    quick_sizes, quick_msizes = ((QUICK_BROAD_SIZES, QUICK_BROAD_MATMUL) if broad
                                 else (QUICK_SIZES, QUICK_MATMUL))
    sizes = args.sizes or (quick_sizes if args.quick else DEFAULT_SIZES[kind])
    msizes = args.matmul_sizes or (quick_msizes if args.quick else DEFAULT_MATMUL[kind])
    settings = Settings(repeat=3 if args.quick else args.repeat,
                        warmup=1 if args.quick else args.warmup, budget_s=args.budget)
    workloads = by_name(args.workloads.split(",") if args.workloads else None, args.suite)
    peers, peers_skipped = make_peers(dev.type, args.peers.split(",") if args.peers else None)
    cases = _cases(workloads, sizes, msizes, args.quick)
    doc: dict[str, Any] = {
        "suite": "fuseloop-bench", "schema": 1,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "device": {"name": dev.name, "type": dev.type, "platform": dev.platform,
                   "vendor": dev.vendor, "driver_version": dev.driver_version,
                   "index": dev.index, "global_mem_size": dev.global_mem_size},
        "host": {"machine": platform.platform(), "cpu_count": os.cpu_count(),
                 "python": platform.python_version(), "load_average_start": _load()},
        "versions": versions(peers), "git": _git(),
        "settings": {"sizes": sizes, "matmul_sizes": msizes, "repeat": settings.repeat,
                     "warmup": settings.warmup, "budget_s": settings.budget_s,
                     "quick": args.quick, "seed": 0, "suite": args.suite},
        "peers": [p.name for p in peers], "peers_skipped": peers_skipped,
        "workloads": [{"name": w.name, "group": w.group, "label": w.label, "unit": w.unit,
                       "kind": w.kind} for w in workloads],
        "results": [], "interrupted": False,
    }
    bar = Progress(len(cases), enabled=not args.no_progress)
    start = time.perf_counter()
    try:
        for wl, size in cases:
            label = f"{wl.name} {size_label(wl, size)}"
            recs = run_case(wl, size, peers, settings,
                            on_library=lambda lib, label=label: bar.describe(f"{label} {lib}"))  # type: ignore[misc]
            for r in recs:
                if r.get("correct") is False:
                    bar.write(f"WARNING: RESULT MISMATCH {label} {r['library']}: "
                              f"{r.get('detail', '')}")
            doc["results"].extend(recs)
            bar.describe(label)
            bar.step()
    except KeyboardInterrupt:
        doc["interrupted"] = True
    finally:
        bar.close()
    doc["total_seconds"] = time.perf_counter() - start
    doc["host"]["load_average_end"] = _load()
    report.annotate(doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``fuseloop bench``; returns the exit status."""
    args = _parser().parse_args(argv)
    spec: Any = args.device
    if spec is not None and spec.strip().isdigit():
        spec = int(spec)
    selected = contextlib.ExitStack()  # the device is the default one only inside it
    try:
        if spec is not None:
            selected.enter_context(fl.device(spec))
        by_name(args.workloads.split(",") if args.workloads else None, args.suite)
    except (FuseloopError, ValueError) as e:
        selected.close()
        print(f"fuseloop bench: error: {e}", file=sys.stderr)
        return 2
    with selected:
        dev = fl.get_device()
        print(f"fuseloop bench on {dev.name} ({dev.type}, {dev.platform})", file=sys.stderr)
        doc = run_suite(args)

    out = Path(args.out) if args.out else Path("benchmarks", "results")
    out.mkdir(parents=True, exist_ok=True)
    tag = "suite" if args.suite == "default" else args.suite
    stem = out / f"{device_slug(dev)}-{doc['date'][:10]}-{tag}"
    report.write_json(doc, stem.with_suffix(".json"))
    md = report.markdown(doc)
    stem.with_suffix(".md").write_text(md, encoding="utf-8")
    written = [stem.with_suffix(".json"), stem.with_suffix(".md")]
    if not args.no_plot:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if report.write_png(doc, stem.with_suffix(".png")):
                written.append(stem.with_suffix(".png"))
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)

    print(md.split("\n## All libraries")[0])
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    n_bad = len(doc["mismatches"])
    if n_bad:
        print(f"WARNING: {n_bad} result(s) did not match numpy; see the report", file=sys.stderr)
    if doc["interrupted"]:
        return 130
    return 1 if (args.strict and n_bad) else 0
