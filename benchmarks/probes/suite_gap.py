"""Issue 25's broad-suite cases below torch.compile: fuseloop (``fl.fuse`` and lazy), a base
checkout, this tree's variants and the peers, in one table.

Cases: the broad suite's ``scatter-add``, ``horner-16``, ``chain-32``, ``black-scholes``,
``gather`` (element counts ``--sizes``, default 2^22, 2^24, 2^26), ``vecmat`` (``x @ A``,
orders 2048, 4096, 8192) and ``einsum-attn`` (q = k = 1024, 2048, 4096), the inputs the
suite makes.  Each
source runs in a process of its own (two fuseloop copies in one process crashed NVIDIA's
OpenCL driver): ``--base`` (folders holding ``fuseloop/``, or git revisions archived into a
temporary folder: defaults only), this tree (its defaults and :data:`VARIANTS`), and the
peers (torch, torch.compile, cupy).  A variant is ``mode/name:setting,...`` where ``mode`` is
``fuse`` or ``lazy`` and a setting is ``KIND.param=value`` (a recipe parameter, e.g.
``elementwise.items=4``) or ``ENV=value`` (an environment variable set around the call).

Each figure: microseconds per call, the median of ``--repeat`` batches of ``--batch``
calls and one synchronize (the wait is in it, as in the suite; a batch hides the host's
time behind the device's).  Every result is checked against numpy (float64): ``!`` after a
figure marks a wrong one.  ``tc/fuse``, ``tc/best``: torch.compile's time over this
tree's ``fl.fuse`` and over the best of this tree's configurations.

    python benchmarks/probes/suite_gap.py [--base /tmp/base-a87f94d] [--only horner-16]
        [--sizes 22,24,26] [--peers torch,torch.compile,cupy] [--budget 150]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
_EW = ("fuse/i1:elementwise.items=1; fuse/i2:elementwise.items=2; fuse/i4:elementwise.items=4; "
       "fuse/i8:elementwise.items=8; fuse/g256i4:elementwise.group=256,elementwise.items=4")
#: the variants per workload (see the module docstring)
VARIANTS = {
    "scatter-add": "lazy/gate:FUSELOOP_SCATTER=gate; lazy/narrow:FUSELOOP_SCATTER=narrow; "
                   "lazy/backup:FUSELOOP_SCATTER=backup; lazy/expr:FUSELOOP_SCATTER=expr; "
                   "lazy/i1:FUSELOOP_SCATTER_ITEMS=1; lazy/i16:FUSELOOP_SCATTER_ITEMS=16; "
                   "lazy/defer:FUSELOOP_SCATTER_WAIT=defer; "
                   "lazy/bdefer:FUSELOOP_SCATTER=backup,FUSELOOP_SCATTER_WAIT=defer",
    "horner-16": _EW, "chain-32": _EW, "black-scholes": _EW,
    "gather": "fuse/i1:elementwise.items=1; fuse/i2:elementwise.items=2; "
              "fuse/i8:elementwise.items=8",
    "vecmat": "fuse/lanes4:contraction.stream_lanes=4; "
              "fuse/lanes4u4:contraction.stream_lanes=4,contraction.stream_unroll=4",
    "einsum-attn": "",
}
MATMUL_SIZES = {"vecmat": (2048, 4096, 8192), "einsum-attn": (1024, 2048, 4096)}


def parse(text: str) -> list[tuple[str, str, dict[str, dict[str, str]]]]:
    """``(mode, name, {kind or "env": {key: value}})`` of each variant in ``text``."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(";"))):
        head, _, body = item.partition(":")
        mode, _, name = head.partition("/")
        settings: dict[str, dict[str, str]] = {}
        for kv in filter(None, body.split(",")):
            key, _, value = kv.partition("=")
            kind, dot, param = key.strip().partition(".")
            settings.setdefault(kind if dot else "env", {})[param if dot else kind] = value
        out.append((mode, name, settings))
    return out


def _value(text: str) -> object:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def cases(only: set[str], sizes: list[int], div: int = 1) -> list[tuple[str, int]]:
    """(workload, size) pairs; matrix orders divided by ``div`` (a CPU's check)."""
    return [(name, s) for name in VARIANTS if not only or name in only
            for s in ([m // div for m in MATMUL_SIZES[name]] if name in MATMUL_SIZES
                      else [1 << k for k in sizes])]


def _timed(run, sync, args) -> float:
    ts = []
    for k in range(2 + args.repeat):
        t0 = time.perf_counter()
        for _ in range(args.batch):
            out = run()
        sync(out)
        if k >= 2:
            ts.append((time.perf_counter() - t0) / args.batch)
    return float(np.median(ts))


def _ok(got, want, wl) -> bool:
    from fuseloop.bench.runner import joined

    return bool(np.allclose(np.ravel(joined(got)), want, rtol=max(wl.rtol, 1e-4),
                            atol=max(wl.atol, 1e-3)))


def worker(spec: str, args, emit) -> None:
    """One source in this process (``WT``, ``peers`` or a base folder, first on the path)."""
    if spec not in ("WT", "peers"):
        sys.path.insert(0, spec)
    else:
        sys.path.insert(0, str(ROOT))
    import fuseloop as fl
    from fuseloop.bench.broad import BROAD
    from fuseloop.bench.peers import FuseloopOps, make_peers

    start, by_name = time.perf_counter(), {w.name: w for w in BROAD}
    peers = make_peers(fl.get_device().type)[0] if spec == "peers" else []
    peers = [p for p in peers if p.name in args.peers.split(",")]
    ops = FuseloopOps(fl)
    for name, size in cases(set(filter(None, args.only.split(","))), args.sizes,
                                args.matmul_div):
        wl = by_name[name]
        inputs = wl.make_inputs(size, np.random.default_rng(0))
        want = np.ravel(np.asarray(wl.reference(*(inputs[k] for k in wl.inputs)),
                                   dtype=np.float64))
        for p in peers:
            try:
                run = p.prepare(wl, inputs)
                t = _timed(run, p.sync, args)
                emit({"case": name, "size": size, "config": p.name, "t": t,
                      "ok": _ok(p.to_numpy(run()), want, wl)})
            except Exception as exc:  # (a peer without this form: say so, go on)
                emit({"case": name, "size": size, "config": p.name, "t": type(exc).__name__})
            p.release()
        if spec == "peers":
            continue
        arrays = [fl.asarray(inputs[k]) for k in wl.inputs]
        variants: list[tuple[str, str, dict[str, dict[str, str]]]] = [
            ("fuse", "fuse", {}), ("lazy", "lazy", {})]
        if spec == "WT":
            variants += parse(VARIANTS[name])
        for mode, vname, settings in variants:
            if settings and time.perf_counter() - start > args.budget:
                continue
            emit({"case": name, "size": size, "config": vname,
                  **time_fl(fl, ops, wl, arrays, want, mode, settings, args)})


def time_fl(fl, ops, wl, arrays, want, mode, settings, args) -> dict:
    from contextlib import ExitStack

    env = settings.get("env", {})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with ExitStack() as stack:
            for kind, params in settings.items():
                if kind != "env":
                    base = fl.recipes.recipe_for(fl.get_device(), kind)
                    stack.enter_context(fl.recipes.use(base.with_params(
                        **{k: _value(v) for k, v in params.items()})))
            body = wl.peer
            fn = fl.fuse(lambda *a: body(ops, *a)) if mode == "fuse" else None

            def run():
                if fn is not None:
                    return fn(*arrays)
                r = body(ops, *arrays)
                return r.eval() if hasattr(r, "eval") else r

            got = run()
            fl.reset_stats()
            run()
            fl.synchronize()
            kernels = fl.stats()["kernels_launched"]
            t = _timed(run, lambda _r: fl.synchronize(), args)
            return {"t": t, "kernels": kernels, "ok": _ok(np.asarray(got.get()), want, wl)}
    except Exception as exc:  # (a variant this checkout does not know)
        return {"t": f"{type(exc).__name__}: {exc}"[:60]}
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def base_folder(spec: str) -> str:
    """``spec`` when it is a folder, else the revision archived into a temporary one."""
    if Path(spec).is_dir():
        return str(Path(spec).resolve())
    dest = tempfile.mkdtemp(prefix=f"suite-gap-{spec}-")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", spec, "fuseloop"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="", help="comma-separated folders or git revisions")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")],
                    default=[22, 24, 26], help="log2 element counts")
    ap.add_argument("--matmul-div", type=int, default=1, help="divide matrix orders by this")
    ap.add_argument("--peers", default="torch,torch.compile,cupy")
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--budget", type=float, default=150.0,
                    help="seconds of this tree's worker after which variants are skipped")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        with open(args.json, "w") as out:
            def emit(record: dict) -> None:
                out.write(json.dumps(record) + "\n")
                out.flush()

            worker(args.worker, args, emit)
        return
    start = time.perf_counter()
    specs = [base_folder(b) for b in args.base.split(",") if b] + ["WT"] + (
        ["peers"] if args.peers else [])
    records = []
    passed = ["--only", args.only, "--sizes", ",".join(map(str, args.sizes)), "--peers",
              args.peers, "--batch", str(args.batch), "--repeat", str(args.repeat),
              "--budget", str(args.budget), "--matmul-div", str(args.matmul_div)]
    for spec in specs:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as f:
            done = subprocess.run([sys.executable, __file__, "--worker", spec, "--json", f.name,
                                   *passed])
            records += [json.loads(line) | {"source": spec} for line in f if line.strip()]
        if done.returncode:
            print(f"worker {spec}: exit {done.returncode} (its records so far are below)")
    report(records, specs)
    print(f"total {time.perf_counter() - start:.0f} s")


def report(records: list[dict], specs: list[str]) -> None:
    """One row per case and size: each source's configurations, microseconds per call."""
    def label(r: dict) -> str:
        src = r["source"]
        if src in ("WT", "peers"):
            return r["config"]
        name = Path(src).name
        return f"{name[10:17] if name.startswith('suite-gap-') else name[:7]}:{r['config']}"

    cols: list[str] = []
    for r in records:
        if label(r) not in cols:
            cols.append(label(r))
    rows: dict[tuple[str, int], dict[str, dict]] = {}
    for r in records:
        rows.setdefault((r["case"], r["size"]), {})[label(r)] = r
    print("us per call (batches of calls, one synchronize); kN: kernels per call")
    print(f"{'case':12s} {'size':>9s} {'tc/fuse':>7s} {'tc/best':>7s}"
          + "".join(f" {c[:12]:>12s}" for c in cols))
    for (name, size), row in rows.items():
        cells, ours = [], []
        for c in cols:
            r = row.get(c) or {}
            t = r.get("t")
            if isinstance(t, float):
                mark = "" if r.get("ok", True) else "!"
                k = f"k{r['kernels']}" if "kernels" in r else ""
                cells.append(f" {t * 1e6:8.1f}{k:>3s}{mark}".rjust(13))
                if r["source"] == "WT" and r.get("ok", True):
                    ours.append(t)
            else:
                cells.append(f" {str(t or '-')[:12]:>12s}")
        tc = row.get("torch.compile", {}).get("t")
        fuse = row.get("fuse", {}).get("t")
        ratio = " ".join(f"{tc / t:7.2f}" if isinstance(tc, float) and isinstance(t, float)
                         else f"{'-':>7s}" for t in (fuse, min(ours, default=None)))
        print(f"{name:12s} {size:9d} {ratio}" + "".join(cells))
    for r in records:
        if isinstance(r.get("t"), str) and r["source"] != "peers":
            print(f"  {label(r)} {r['case']} {r['size']}: {r['t']}")


if __name__ == "__main__":
    main()
