"""Derived figures and the three outputs of a suite run: JSON, Markdown and a PNG plot."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

COPY_LIBRARY = "opencl enqueue_copy"


def annotate(doc: dict[str, Any]) -> None:
    """Add the copy bandwidth per size, fraction of copy, speed-ups and the mismatch list."""
    results = doc["results"]
    copy = {r["size"]: r["throughput"] for r in results
            if r["workload"] == "copy" and r["library"] == COPY_LIBRARY and r["throughput"]}
    doc["copy_gb_per_s"] = {str(k): v for k, v in sorted(copy.items())}
    for r in results:
        ok = r["throughput"] and r["unit"] == "GB/s" and r["size"] in copy
        r["fraction_of_copy"] = r["throughput"] / copy[r["size"]] if ok else None
    for r in results:
        if r["library"] != "fuseloop":
            continue
        r["speedup_vs"] = {
            p["library"]: p["median_s"] / r["median_s"]
            for p in results
            if p["workload"] == r["workload"] and p["size"] == r["size"]
            and p["library"] not in ("fuseloop", COPY_LIBRARY) and p["median_s"]
            and r["median_s"]
        }
    doc["mismatches"] = [
        f"{r['workload']} {r['size_label']} {r['library']}: {r.get('detail', '')}"
        for r in results if r.get("correct") is False
    ]


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")


def _num(v: float | None, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def _ms(sec: float | None) -> str:
    if sec is None:
        return "-"
    return f"{sec * 1e3:.3f}" if sec < 1 else f"{sec * 1e3:.0f}"


def _thr(r: dict[str, Any]) -> str:
    return "-" if r["throughput"] is None else f"{r['throughput']:.3g} {r['unit']}"


def _spread(r: dict[str, Any]) -> str:
    t = r["times_s"]
    if not t or not r["median_s"]:
        return "-"
    return f"{len(t)} ({100 * (max(t) - min(t)) / r['median_s']:.0f}%)"


def _pct(r: dict[str, Any]) -> str:
    f = r.get("fraction_of_copy")
    return "-" if f is None else f"{100 * f:.0f}%"


def _note(r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"{r['status']}: {r['reason']}".replace("|", "\\|")
    if r.get("correct") is False:
        return f"**MISMATCH** ({r.get('detail', '')})".replace("|", "\\|")
    if r.get("correct"):
        return f"ok (err {r['max_rel_err']:.1e})"
    return ""


def markdown(doc: dict[str, Any]) -> str:
    """The report: header, per-workload summary for fuseloop, then every library's row."""
    dev, s = doc["device"], doc["settings"]
    peers = doc["peers"]
    lines = [
        f"# fuseloop benchmark suite: {dev['name']}",
        "",
        f"- device: {dev['name']} ({dev['type']}, {dev['platform']}, driver "
        f"{dev['driver_version']}); host: {doc['host']['machine']}, "
        f"{doc['host']['cpu_count']} CPUs; load average (1/5/15 min) at start "
        f"{doc['host'].get('load_average_start')}, at end {doc['host'].get('load_average_end')}",
        f"- date: {doc['date']}; fuseloop commit {doc['git'].get('commit', '?')}"
        + (" (uncommitted changes in the tree)" if doc["git"].get("dirty") else ""),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()),
        f"- timing: median of up to {s['repeat']} runs after {s['warmup']} warm-up runs "
        f"(fewer once {s['budget_s']:g} s are spent), each followed by that library's "
        "synchronisation; every result checked once against a float64 numpy reference "
        "(err: largest absolute error over the largest reference magnitude)",
        "- peers: " + (", ".join(peers) or "none")
        + "".join(f"; {k} not measured ({v})" for k, v in doc["peers_skipped"].items()),
        "- copy reference (OpenCL `enqueue_copy`, buffer to buffer, same device): "
        + (", ".join(f"{_size_pow(int(k))}: {v:.3g} GB/s"
                     for k, v in doc["copy_gb_per_s"].items()) or "not measured"),
        "",
    ]
    if doc.get("interrupted"):
        lines += ["**The run was interrupted; the tables are incomplete.**", ""]
    if doc["mismatches"]:
        lines += [f"**{len(doc['mismatches'])} RESULT MISMATCH(ES) against numpy:**", ""]
        lines += [f"- {m}" for m in doc["mismatches"]] + [""]
    else:
        lines += ["Every result that ran matched the numpy reference.", ""]
    lines += [
        "GB/s counts the bytes a workload must move at least (every input read once, every "
        "output written once); % of copy divides by the copy reference at the same element "
        "count. `vs X` is X's median time over fuseloop's: above 1, fuseloop is faster.",
        "",
        "## fuseloop",
        "",
        "| workload | size | ms | throughput | % of copy | "
        + " | ".join(f"vs {p}" for p in peers) + (" | " if peers else "") + "check |",
        "| --- | --- | ---: | ---: | ---: | " + "---: | " * len(peers) + "--- |",
    ]
    results = doc["results"]
    for r in results:
        if r["library"] != "fuseloop":
            continue
        vs = [_num(r.get("speedup_vs", {}).get(p), ".2f") for p in peers]
        lines.append(f"| {r['workload']} | {r['size_label']} | {_ms(r['median_s'])} | "
                     f"{_thr(r)} | {_pct(r)} | " + "".join(f"{v} | " for v in vs)
                     + f"{_note(r)} |")
    lines += ["", "## All libraries", "",
              "`runs (spread)`: timed runs, and (slowest - fastest) / median over them.", "",
              "| workload | size | library | ms | runs (spread) | throughput | % of copy | check |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        lines.append(f"| {r['workload']} | {r['size_label']} | {r['library']} | "
                     f"{_ms(r['median_s'])} | {_spread(r)} | {_thr(r)} | {_pct(r)} | "
                     f"{_note(r)} |")
    lines += ["", "## Workloads", ""]
    lines += [f"- `{w['name']}` ({w['group']}, {w['unit']}): {w['label']}"
              for w in doc["workloads"]]
    return "\n".join(lines) + "\n"


def _size_pow(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def write_png(doc: dict[str, Any], path: Path) -> bool:
    """One panel per workload: throughput against size for every library. False if skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError:
        warnings.warn("matplotlib is not installed: no plot written "
                      "(pip install 'fuseloop[bench]')", stacklevel=2)
        return False
    names = [w["name"] for w in doc["workloads"]]
    libraries = list(dict.fromkeys(r["library"] for r in doc["results"]))
    colors = {lib: f"C{i % 10}" for i, lib in enumerate(libraries)}
    ncols = 4
    nrows = max(1, math.ceil(len(names) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        rows = [r for r in doc["results"] if r["workload"] == name]
        unit = rows[0]["unit"] if rows else ""
        for lib in libraries:
            pts = sorted((r["size"], r["throughput"]) for r in rows
                         if r["library"] == lib and r["throughput"])
            if pts:
                style = "--" if lib == COPY_LIBRARY else "-"
                lw = 2.4 if lib == "fuseloop" else 1.2
                ax.plot(*zip(*pts), style, marker="o", ms=3, lw=lw, color=colors[lib],
                        label=lib)
        if unit == "GB/s" and name != "copy" and doc["copy_gb_per_s"]:
            cp = sorted((int(k), v) for k, v in doc["copy_gb_per_s"].items())
            ax.plot(*zip(*cp), ":", color="grey", lw=1, label="copy reference")
        skipped = [r for r in rows if r["library"] == "fuseloop" and r["status"] != "ok"]
        if skipped:
            ax.text(0.03, 0.94, "fuseloop " + skipped[0]["status"], transform=ax.transAxes,
                    va="top", fontsize=8, color="red")
        wrong = sorted({r["library"] for r in rows if r.get("correct") is False})
        if wrong:
            ax.text(0.03, 0.80, "MISMATCH: " + ", ".join(wrong), transform=ax.transAxes,
                    va="top", fontsize=8, color="red", weight="bold")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(unit, fontsize=8)
        kind = next((w["kind"] for w in doc["workloads"] if w["name"] == name), "")
        ax.set_xlabel("N (matrix order)" if kind == "matmul" else "elements", fontsize=8)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.25)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(handles.values(), handles.keys(), loc="lower right", fontsize=9)
    fig.suptitle(f"fuseloop suite on {doc['device']['name']} ({doc['date'][:10]})")
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
