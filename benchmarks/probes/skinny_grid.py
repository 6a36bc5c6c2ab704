"""Few-row products on a GPU (issue 25): device time, wall time and host time per call,
over a grid of shapes x the streaming kernel's parameters, a base revision and the peers.

Cases: ``x @ A`` at 4096, 8192, 16384 (float32) and 8192 (float64); ``R x 8192 @ 8192 x
8192`` for R = 1, 2, 4, 8, 16, 32, 64; NPBench mlp's ``8 x 30000 @ 30000 x 10000`` and
``8 x 10000 @ 10000 x 10000``; ``A @ X`` with X of 8 columns at 4096 and 8192.
Configurations: the bases (``--base``: git revisions or folders holding ``fuseloop/``,
each imported as its own package in this process, defaults only, labelled by name),
``rule`` (this tree's defaults) and the parameter sets of ``--variants`` (this tree, streamed
cases only).  For each configuration four figures per call, in microseconds:

* ``dev``: device time: ``--held`` evaluations enqueued behind a held queue (OpenCL: a
  marker waiting on a user event), then released; the time from the release to the
  queue's finish over the count (the host's work is not in it).  ``-`` on a backend that
  cannot hold its queue (CUDA: then read ``wall``);
* ``wall``: the median of batches of ``--batch`` evaluations and one synchronize (what a
  loop of calls sees: the larger of host and device time);
* ``host``: the host CPU time per evaluation in those batches (``time.process_time``);
* ``lat``: one evaluation and a synchronize, median (how the broad suite times a call).

The first table prints all four for the bases and ``rule``, the peers' wall times (torch,
cupy) and the kernels and split-K pieces per evaluation; the second the device time of each
variant (``*``: the fastest of the row).  Every result is checked against numpy (float64):
a wrong one prints ``NO`` at the row's end.  Variants stop after ``--budget`` seconds.

    python benchmarks/probes/skinny_grid.py [--base bdc485f,.b13] [--only xA-4096,8-row]
        [--variants "p1:stream_per=1;u16:stream_unroll=16"] [--budget 150]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: the variants timed by default (name: recipe parameters)
VARIANTS = ("p1:stream_per=1; p4:stream_per=4,stream_accumulators=64; "
            "p8:stream_per=8,stream_accumulators=64; u4:stream_unroll=4; u16:stream_unroll=16; "
            "g256:stream_group=256; b32k:stream_bytes=32768; b256k:stream_bytes=262144; "
            "pc64:stream_pieces=64,stream_bytes=262144; s64:stream=64,stream_accumulators=64; "
            "one:stream_lanes=4; one4:stream_lanes=4,stream_unroll=4; "
            "one512:stream_lanes=4,stream_lanes_group=512; lanes:stream=0; "
            "L1k:stream=0,skinny_group=1024,skinny_lanes=32,skinny_unroll=4,skinny_stage=0,"
            "split_k=1")


def cases(scale: int = 1) -> list[tuple[str, tuple[int, ...], tuple[int, ...], str]]:
    """``(name, shape of the left operand, of the right one, dtype)``; long extents
    divided by ``scale`` (a CPU's run of the same shapes, smaller)."""
    def s(v: int) -> int:
        return max(64, v // scale)

    n8 = s(8192)

    def rows(r: int) -> tuple[str, tuple[int, ...], tuple[int, ...], str]:
        return (f"{r}-row", (r, n8), (n8, n8), "f")

    # (the cases that decide the rule first: a run cut short by --budget has them; names
    # are the unscaled shapes')
    return [("xA-4096", (s(4096),), (s(4096), s(4096)), "f"), rows(8), rows(16),
            ("mlp-30000", (8, s(30000)), (s(30000), s(10000)), "f"),
            ("xA-16384", (s(16384),), (s(16384), s(16384)), "f"), rows(1), rows(2),
            rows(4), ("xA-8192", (n8,), (n8, n8), "f"),
            ("mlp-10000", (8, s(10000)), (s(10000), s(10000)), "f"), rows(32),
            rows(64), ("xA-8192-f64", (n8,), (n8, n8), "d"),
            ("8-col-4096", (s(4096), s(4096)), (s(4096), 8), "f"),
            ("8-col", (n8, n8), (n8, 8), "f")]


def _value(name: str, text: str) -> int | bool:
    return bool(int(text)) if name == "skinny_stage" else int(text)


def parse_variants(text: str) -> list[tuple[str, dict[str, int]]]:
    out = []
    for item in filter(None, (t.strip() for t in text.split(";"))):
        name, _, body = item.partition(":")
        params = {k.strip(): _value(k.strip(), v) for k, v in
                  (kv.split("=") for kv in body.split(","))}
        out.append((name.strip(), params))
    return out


def applies(params: dict[str, int | bool], sa: tuple[int, ...], sb: tuple[int, ...]) -> bool:
    """Whether a variant can change the kernel of ``sa @ sb`` (C order): for few rows,
    the streaming kernel's parameters up to 16 rows (``stream``'s default), a larger
    ``stream`` above, the lanes kernel (``stream=0``, ``stream_lanes``) up to 4 rows; for few
    columns (the long operand contiguous along the sum) the lanes kernel's (``stream=0``)."""
    stream = params.get("stream", 16)
    if len(sa) == 2 and sa[0] > 64:
        return stream == 0
    rows = 1 if len(sa) == 1 else sa[0]
    if stream == 0 or "stream_lanes" in params:
        return rows <= 4
    return rows > 16 if stream > 16 else rows <= 16


def held_time(pkg, run, count: int, patience: float = 20.0) -> float | None:
    """Device seconds per call of ``run``: ``count`` calls enqueued behind a held queue,
    then released (None: the backend cannot hold its queue, or a call waited on the
    queue, e.g. a host path reading a buffer back: a watchdog releases it after
    ``patience`` seconds)."""
    from importlib import import_module

    devices = import_module(f"{pkg.__name__}.runtime.devices")
    rt = devices._runtime(pkg.get_device())
    gate = rt.hold(rt.context, rt.queue)
    if gate is None:
        return None
    lock, done, stuck = threading.Lock(), threading.Event(), []

    def release(by_watchdog: bool = False) -> None:
        with lock:
            if not done.is_set():
                done.set()
                stuck.extend([True] if by_watchdog else [])
                gate()

    watchdog = threading.Timer(patience, release, (True,))
    watchdog.daemon = True
    watchdog.start()
    try:
        outs = [run() for _ in range(count)]
        rt.flush()
    finally:
        t0 = time.perf_counter()
        release()
        watchdog.cancel()
    rt.finish()
    t = (time.perf_counter() - t0) / count
    del outs
    return None if stuck else t


def measure(pkg, run, batch: int, repeat: int, held: int) -> tuple:
    """(device, wall, host, latency) seconds per call; latency: one call and a synchronize
    (as the broad suite times a call)."""
    lats = []
    for _ in range(2 + repeat):
        t0 = time.perf_counter()
        run()
        pkg.synchronize()
        lats.append(time.perf_counter() - t0)
    walls, hosts = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(batch):
            run()
        c1 = time.process_time()
        pkg.synchronize()
        walls.append((time.perf_counter() - t0) / batch)
        hosts.append((c1 - c0) / batch)
    devs = [d for d in (held_time(pkg, run, held) for _ in range(3)) if d is not None]
    dev = min(devs) if devs else None
    return dev, statistics.median(walls), statistics.median(hosts), statistics.median(lats[2:])


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    scale = max(1.0, float(np.abs(want).max()))
    return bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale))


def time_config(pkg, inputs, want, params, args) -> tuple[tuple, int, str, bool]:
    """((dev, wall, host), kernels per call, pieces, correct) of one configuration."""
    from importlib import import_module

    base = pkg.recipes.recipe_for(pkg.get_device(), "contraction")
    recipe = base.with_params(**params) if params else base
    a, b = (pkg.asarray(v) for v in inputs)
    with pkg.recipes.use(recipe):
        def run():
            return (a @ b).eval()

        ok = _close(np.asarray(run().get(), np.float64), want)
        pkg.reset_stats()
        run()
        pkg.synchronize()
        kernels = pkg.stats()["kernels_launched"]
        e = a @ b
        splits = import_module(f"{pkg.__name__}.splits")
        split = splits.two_stage_split([e._node], e.shape, pkg.get_device())
        pieces = str(split.pieces if split is not None else 1)
        del e
        times = measure(pkg, run, args.batch, args.repeat, args.held)
    return times, kernels, pieces, ok


def time_peers(peers, name, inputs, want, repeat, batch) -> tuple[list[float | str], bool]:
    from fuseloop.bench.runner import median_time

    out: list[float | str] = []
    ok = True
    for p in peers:
        wl = types.SimpleNamespace(name=name, inputs=[f"x{k}" for k in range(len(inputs))],
                                   peer=lambda ops, x, y: ops.matmul(x, y))
        try:
            run = p.prepare(wl, {f"x{k}": v for k, v in enumerate(inputs)})
            ok &= _close(np.asarray(p.to_numpy(run()), np.float64), want)
            out.append(median_time(run, lambda p=p: p.sync(None), repeat, batch=batch))
        except Exception as exc:  # a peer without this form: say so, go on
            out.append(type(exc).__name__[:10])
        p.release()
    return out, ok


def _us(t: float | str | None) -> str:
    if isinstance(t, str):
        return f"{t:>10s}"
    return f"{t * 1e6:10.1f}" if t is not None else f"{'-':>10s}"


_OUT: list = []


def say(line: str) -> None:
    """Print ``line`` and append it to ``--out`` (when given) at once."""
    print(line, flush=True)
    for f in _OUT:
        f.write(line + "\n")
        f.flush()


def inputs_of(index: int, sa: tuple[int, ...], sb: tuple[int, ...], char: str):
    """The case's operands (the same in every worker: seeded by the case's index) and
    numpy's float64 product."""
    rng = np.random.default_rng(index)
    dt = np.dtype(char)
    inputs = [(rng.random(s, dtype=dt) - 0.5) for s in (sa, sb)]
    return inputs, np.asarray(inputs[0].astype(np.float64) @ inputs[1].astype(np.float64))


def worker(args, emit) -> None:
    """One configuration source in this process: ``args.worker`` is ``WT`` (this tree:
    its defaults, then the variants), ``peers`` (torch, cupy) or a base (a revision or
    folder, imported as its own package: defaults only).  ``emit`` gets a record a
    measurement."""
    start = time.perf_counter()
    only = set(filter(None, args.only.split(",")))
    spec = args.worker
    if spec == "peers":
        import fuseloop as fl
        from fuseloop.bench.peers import make_peers

        peers, _ = make_peers(fl.get_device().type)
        peers = [p for p in peers if p.name in set(args.peers.split(","))]
    elif spec == "WT":
        import fuseloop as pkg
    else:
        from compare_host_overhead import import_revisions

        pkg = import_revisions([spec], "grid")[0]
    variants = parse_variants(args.variants) if spec == "WT" else []
    if spec != "peers":
        d = pkg.get_device()
        emit({"device": f"{d.name} ({d.type}, {d.compute_units} units, {d.platform})"})
    for index, (name, sa, sb, char) in enumerate(cases(args.scale)):
        if only and name not in only:
            continue
        inputs, want = inputs_of(index, sa, sb, char)
        if spec == "peers":
            times, ok = time_peers(peers, name, inputs, want, args.repeat, args.batch)
            for p, t in zip(peers, times):
                emit({"case": name, "config": p.name, "wall": t, "ok": ok})
            continue
        for vname, params in [("default", {}), *variants]:
            if params and (not applies(params, sa, sb)
                           or time.perf_counter() - start > args.budget):
                continue
            times, kernels, pieces, ok = time_config(pkg, inputs, want, params, args)
            emit({"case": name, "config": vname, "times": times, "kernels": kernels,
                  "pieces": pieces, "ok": ok})


def run_workers(args, specs: list[str]) -> tuple[list[dict], list[str]]:
    """Each of ``specs`` in a process of its own (fuseloop copies side by side in one
    process crashed NVIDIA's OpenCL driver): their records, and a line per worker that
    failed."""
    records, failed = [], []
    passed = ["--only", args.only, "--variants", args.variants, "--batch", str(args.batch),
              "--repeat", str(args.repeat), "--held", str(args.held), "--budget",
              str(args.budget), "--peers", args.peers, "--scale", str(args.scale)]
    for spec in specs:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as f:
            cmd = [sys.executable, __file__, "--worker", spec, "--json", f.name, *passed]
            try:
                done = subprocess.run(cmd, timeout=args.worker_timeout)
                code: int | str = done.returncode
            except subprocess.TimeoutExpired:
                code = "timed out"
            records += [json.loads(line) | {"source": spec} for line in f if line.strip()]
        if code != 0:
            failed.append(f"{spec}: exit {code}")
    return records, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="bdc485f", help="comma-separated git revisions or "
                    "folders holding fuseloop/, each timed with its defaults ('': none)")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--variants", default=VARIANTS)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--held", type=int, default=10, help="calls per held-queue timing")
    ap.add_argument("--budget", type=float, default=200.0,
                    help="seconds of this tree's worker after which variants are skipped")
    ap.add_argument("--peers", default="torch,cupy", help="'' : none")
    ap.add_argument("--scale", type=int, default=1, help="divide long extents by this")
    ap.add_argument("--out", help="also write the tables to this file")
    ap.add_argument("--worker-timeout", type=float, default=420.0)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        with open(args.json, "w") as f:
            def emit(record: dict) -> None:
                f.write(json.dumps(record) + "\n")
                f.flush()
            worker(args, emit)
        return
    if args.out:
        _OUT.append(open(args.out, "w"))
    start = time.perf_counter()
    known = [c[0] for c in cases(args.scale)]
    only = set(filter(None, args.only.split(",")))
    if only - set(known):
        say(f"no case named {sorted(only - set(known))}; the cases: {', '.join(known)}")
    bases = [b for b in args.base.split(",") if b]
    specs = [*bases, "WT"] + (["peers"] if args.peers else [])
    records, failed = run_workers(args, specs)
    report(records, bases, [n for n, _ in parse_variants(args.variants)],
           [p for p in args.peers.split(",") if p], [c for c in known if not only or c in only])
    for line in failed:
        say(f"worker {line} (its records so far are above)")
    say(f"total {time.perf_counter() - start:.0f} s")


def report(records: list[dict], bases: list[str], variants: list[str], peers: list[str],
           names: list[str]) -> None:
    """The two tables (see the module docstring) from the workers' records."""
    device = next((r["device"] for r in records if "device" in r), "?")
    say(f"device: {device}; us per call: dev (held queue) / wall (batches) / host CPU / "
        "lat (one call and a synchronize)")
    labels = [(b, Path(b).name.lstrip(".")[:7] or b) for b in bases] + [("WT", "rule")]
    by = {(r["source"], r["case"], r.get("config")): r for r in records if r.get("case")}
    head = "".join(f" {lab + ' ' + c:>10s}" for _, lab in labels
                   for c in ("dev", "wall", "host", "lat"))
    say(f"{'case':12s} {'pieces':>11s} {'kern':>5s}{head}"
        + "".join(f" {p:>10s}" for p in peers) + "  ok")
    for name in names:
        rows = [by.get((src, name, "default")) for src, _ in labels]
        cells = [t for r in rows for t in (r["times"] if r else [None] * 4)]
        peer = [by.get(("peers", name, p)) for p in peers]
        ok = all(r["ok"] for r in rows + peer if r)
        say(f"{name:12s} {'/'.join(r['pieces'] if r else '?' for r in rows):>11s} "
            f"{'/'.join(str(r['kernels']) if r else '?' for r in rows):>5s}"
            + "".join(_us(c) for c in cells)
            + "".join(_us(r["wall"] if r else None) for r in peer) + f"  {'yes' if ok else 'NO'}")
    say("\ndevice us per call of this tree's variants (wall where the queue cannot be held); "
        "*: fastest")
    say(f"{'case':12s}" + "".join(f" {n:>9s}" for n in ["rule", *variants]))
    for name in names:
        row = []
        for v in ["default", *variants]:
            r = by.get(("WT", name, v))
            t = None if r is None else (r["times"][0] if r["times"][0] is not None
                                        else r["times"][1])
            row.append(t)
            if r is not None and not r["ok"]:
                say(f"  {name} {v}: WRONG RESULT")
        best = min((t for t in row if t is not None), default=None)
        say(f"{name:12s}" + "".join(
            f" {'-':>9s}" if t is None else f" {t * 1e6:8.1f}{'*' if t == best else ' '}"
            for t in row))


if __name__ == "__main__":
    main()
