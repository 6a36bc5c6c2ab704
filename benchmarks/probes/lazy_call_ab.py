"""Wall time per lazy call (issue 25) of fuseloop revisions, each in its own process,
against torch eager in the same process: the broad suite's cases that lose to torch.

For each revision (a git revision, a folder holding ``fuseloop/``, or ``WT`` for the
working tree) and each device spec (``--devices``, e.g. ``nvidia`` for the OpenCL GPU,
``cuda:0``), a child process imports that revision's ``fuseloop`` and, per case, after
warm-up, reports in microseconds per call:

* ``lat``: one lazy call (``.eval()``) and ``fl.synchronize()``, median of ``--repeat``
  (how the broad suite times a call);
* ``host``: the wall time until the call returns (the host's part before the wait);
* ``loop``: ``--batch`` calls then one synchronize, over the count (the larger of the
  host's and the device's time per call);
* ``torch``: the same call in torch eager with ``torch.cuda.synchronize()`` (``lat``),
  when torch sees a CUDA device; ``torch/lat`` >= 1 means ours is as fast.

Each case's result is checked once against numpy (``NO`` in the table where it differs)
and the kernels launched per call are counted (``fl.stats()``).  Reported, never asserted.

    python benchmarks/probes/lazy_call_ab.py a87f94d 31e14fb WT --devices nvidia,cuda:0
    FUSELOOP_HOST_PATH=0 python benchmarks/probes/lazy_call_ab.py a87f94d WT --devices cpu \
        --n 65536 --cases small-softmax-1k,small-softmax-4k,vecmat
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _softmax(m: Any, x: Any) -> Any:
    e = m.exp(x - m.max(x, -1, True))
    return e / m.sum(e, -1, True)


def _xent(m: Any, x: Any, rows: Any, labels: Any) -> Any:
    mx = m.max(x, 1, True)
    return m.mean(mx[:, 0] + m.log(m.sum(m.exp(x - mx), 1, False)) - x[rows, labels])


class Ops:
    """The cases' operations spelled for fuseloop or numpy (``xp``)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def __getattr__(self, name: str) -> Any:
        return getattr(self.xp, name)

    def max(self, x: Any, axis: Any, keepdims: bool) -> Any:
        return self.xp.max(x, axis=axis, keepdims=keepdims)

    def sum(self, x: Any, axis: Any, keepdims: bool) -> Any:
        return self.xp.sum(x, axis=axis, keepdims=keepdims)

    def scatter_add(self, v: Any, idx: Any) -> Any:
        out = self.xp.zeros(v.shape[0] // 16, dtype=v.dtype)
        self.xp.add.at(out, idx, v)
        return out


class TorchOps(Ops):
    def max(self, x: Any, axis: Any, keepdims: bool) -> Any:
        return x.amax(dim=axis, keepdim=keepdims)

    def sum(self, x: Any, axis: Any, keepdims: bool) -> Any:
        return x.sum(dim=axis, keepdim=keepdims)

    def argmax(self, x: Any, axis: int) -> Any:
        return x.argmax(dim=axis)

    def scatter_add(self, v: Any, idx: Any) -> Any:
        return self.xp.zeros(v.shape[0] // 16, dtype=v.dtype,
                             device=v.device).index_add_(0, idx, v)


def _inputs(name: str, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The case's inputs at ``n`` elements (2^24: the broad suite's GPU size)."""
    s = math.isqrt(n)
    f = np.float32
    if name.startswith("small-softmax"):
        k = 32 if name.endswith("1k") else 64
        return [rng.random((k, k), dtype=f)]
    if name == "small-matvec":
        return [rng.random((64, 64), dtype=f), rng.random(64, dtype=f)]
    if name == "softmax-128":
        return [rng.random((n // 128, 128), dtype=f)]
    if name == "vecmat":
        return [rng.random(s, dtype=f), rng.random((s, s), dtype=f)]
    if name == "matmul-8rows":
        return [rng.random((8, s), dtype=f), rng.random((s, s), dtype=f)]
    if name == "cross-entropy":
        return [(rng.random((s, s), dtype=f) - 0.5) * 8, np.arange(s),
                rng.integers(0, s, s)]
    if name == "sum-all-keepdims":
        c = round(n ** (1 / 3))
        return [rng.random((c, c, c), dtype=f)]
    if name == "sum-middle":
        return [rng.random((s // 8, s * 8 // 64, 64), dtype=f)]
    if name == "int-max-cols":
        return [rng.integers(-1000, 1000, (s, s), dtype=np.int32)]
    if name == "scatter-add":
        return [rng.random(n, dtype=f), rng.integers(0, n // 16, n)]
    return [rng.random((s, s), dtype=f)]  # (argmax-rows)


CASES: dict[str, Callable[..., Any]] = {
    "small-softmax-1k": _softmax,
    "small-softmax-4k": _softmax,
    "small-matvec": lambda m, a, b: a @ b,
    "softmax-128": _softmax,
    "vecmat": lambda m, a, b: a @ b,
    "matmul-8rows": lambda m, a, b: a @ b,
    "argmax-rows": lambda m, x: m.argmax(x, axis=1),
    "cross-entropy": _xent,
    "sum-all-keepdims": lambda m, x: m.sum(x, (0, 1, 2), True),
    "sum-middle": lambda m, x: m.sum(x, 1, False),
    "int-max-cols": lambda m, x: m.max(x, 0, False),
    "scatter-add": lambda m, v, idx: m.scatter_add(v, idx),
}


def _times(call: Callable[[], Any], sync: Callable[[], None], repeat: int,
           batch: int) -> tuple[float, float, float]:
    """(lat, host, loop) in microseconds per call (see the module's docstring)."""
    for _ in range(5):
        call()
        sync()
    lat, host = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = call()
        t1 = time.perf_counter()
        sync()
        lat.append(time.perf_counter() - t0)
        host.append(t1 - t0)
        del r
    loops = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(batch):
            call()
        sync()
        loops.append((time.perf_counter() - t0) / batch)
    return (statistics.median(lat) * 1e6, statistics.median(host) * 1e6, min(loops) * 1e6)


def _torch_case(name: str, host: list[np.ndarray], repeat: int, batch: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    args = [torch.as_tensor(a, device="cuda") for a in host]
    ops = TorchOps(torch)
    return _times(lambda: CASES[name](ops, *args), torch.cuda.synchronize, repeat, batch)[0]


def child(device: str, names: list[str], n: int, repeat: int, batch: int) -> None:
    """In the revision's process: one JSON line per case."""
    import fuseloop as fl

    fl.set_device(device)
    ops = Ops(fl)
    for name in names:
        host = _inputs(name, n, np.random.default_rng(0))
        args = [fl.asarray(a) for a in host]
        fn = CASES[name]

        def call(fn: Any = fn, args: list = args) -> Any:
            return fn(ops, *args).eval()

        want = fn(Ops(np), *[a.astype(np.float64) if a.dtype.kind == "f" else a
                             for a in host])
        got = np.asarray(call().get())
        ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, float(
            np.abs(want).max()))))
        fl.synchronize()
        fl.reset_stats()
        call()
        fl.synchronize()
        kernels = fl.stats()["kernels_launched"]
        lat, hst, loop = _times(call, fl.synchronize, repeat, batch)
        torch_lat = _torch_case(name, host, repeat, batch)
        print(json.dumps({"case": name, "lat": lat, "host": hst, "loop": loop, "ok": ok,
                          "kernels": kernels, "torch": torch_lat}), flush=True)


def _package(rev: str, into: Path) -> Path:
    """A folder holding ``rev``'s ``fuseloop`` package (``WT``: this checkout's)."""
    if rev == "WT":
        return ROOT
    if (Path(rev) / "fuseloop").is_dir():
        return Path(rev)
    home = into / rev.replace("/", "_")
    home.mkdir()
    archive = into / f"{home.name}.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", rev, "fuseloop"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(home, filter="data")
    return home


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*", default=["WT"])
    ap.add_argument("--devices", default="nvidia,cuda:0", help="comma-separated specs")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--n", type=int, default=1 << 24, help="elements of the large cases")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = args.cases.split(",")
    if args.child:
        child(args.child[0], names, args.n, args.repeat, args.batch)
        return
    tmp = Path(tempfile.mkdtemp(prefix="lazy-call-ab-"))
    homes = [_package(rev, tmp) for rev in args.revs]
    for device in args.devices.split(","):
        rows: dict[str, dict[str, dict]] = {name: {} for name in names}
        for rev, home in zip(args.revs, homes):
            # (prepended: the environment's own path may hold the dependencies)
            path = os.pathsep.join([str(home), *filter(None, [os.environ.get("PYTHONPATH")])])
            env = dict(os.environ, PYTHONPATH=path)
            out = subprocess.run(
                [sys.executable, __file__, "--child", device, "--cases", args.cases,
                 "--n", str(args.n), "--repeat", str(args.repeat), "--batch",
                 str(args.batch)], cwd=home, env=env, capture_output=True, text=True)
            if out.returncode:
                print(f"{rev} on {device} failed:\n{out.stderr[-3000:]}", file=sys.stderr)
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    got = json.loads(line)
                    rows[got["case"]][rev] = got
        print(f"\n{device}, n={args.n}: us per call, lat (call + sync) / host (until the "
              "call returns) / loop (batched) [kernels]; torch eager lat; torch/lat")
        print("| case | torch | " + " | ".join(args.revs) + " |")
        print("| --- | ---: |" + " ---: |" * len(args.revs))
        for name, per in rows.items():
            t = next((g["torch"] for g in per.values() if g["torch"]), None)
            cells = []
            for rev in args.revs:
                g = per.get(rev)
                if g is None:
                    cells.append("-")
                    continue
                ratio = f" ({t / g['lat']:.2f})" if t else ""
                cells.append(f"{g['lat']:.1f} / {g['host']:.1f} / {g['loop']:.1f} "
                             f"[{g['kernels']}]{ratio}{'' if g['ok'] else ' NO'}")
            print(f"| {name} | {'-' if t is None else f'{t:.1f}'} | " + " | ".join(cells)
                  + " |", flush=True)


if __name__ == "__main__":
    main()
