"""Scatters, scatter-adds and gathers: what fuseloop runs, and its time beside its peers.

The broad suite's forms (``fuseloop.bench.broad``): ``scatter`` (``out[perm] = v``,
distinct positions), ``scatter-add`` (``np.add.at(out, idx, v)``, n/16 bins, random
idx), ``gather`` (``x.take(idx)``) and ``gather-rows`` (``X.take(idx, axis=0)``, rows of
64), float32, device index arrays (int64).  Printed, in one run:

1. the device and what its atomics can be: the extensions naming atomics, NVIDIA's
   compute capability, and the atomic add fuseloop's code generator chose per dtype
   (``fuseloop.lower.atomics``: ``ptx`` is ``red.global.add``, else a compare-and-swap
   loop; int32/int64 use ``atomic_add``/``atom_add`` everywhere);
2. the OpenCL source of the scatter kernel of one ``fl.add.at`` (float32 and int32;
   the index check before it: its signature), and the kernels launched per call of
   each form (``fl.stats``);
3. ``fl.explain(..., run=True)`` of the gathers;
4. one table: each form's median time (a wait per call) for fuseloop and the device's
   peers (torch, torch.compile, cupy, jax.jit and ``fl.fuse`` on a GPU; numpy on the
   CPU), each result checked against numpy, and best peer / fuseloop; and fuseloop's
   host CPU time per call (its Python and launches: a floor under its time on a GPU).

    python benchmarks/probes/scatter_probe.py [--log2 24] [--repeat 20] [--no-code]
        [--forms scatter,scatter-add]
        [--variants expr,gate,backup,partition,partition/span=8388608,gate/defer]

``--variants``: fuseloop is timed once per variant of ``fuseloop.ops.scatter_kernel``
(``name[/items][/defer][/span=BYTES]``: ``FUSELOOP_SCATTER=name``,
``FUSELOOP_SCATTER_ITEMS=items``, ``FUSELOOP_SCATTER_WAIT=defer``,
``FUSELOOP_SCATTER_SPAN=BYTES``), one row each, the peers once per form; besides the
median with a wait per call, each row has the time per call of 10 calls back to back
with one wait (where a deferred check gains).

(``SCATTER_PROBE_CHECKOUT=<another checkout>`` measures that checkout's fuseloop
instead: the baseline, e.g. ``git worktree add /tmp/base <commit>``.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# this checkout's fuseloop, or the one named by SCATTER_PROBE_CHECKOUT (a baseline)
sys.path.insert(0, os.environ.get("SCATTER_PROBE_CHECKOUT")
                or str(Path(__file__).resolve().parents[2]))

import fuseloop as fl
from fuseloop import evaluate
from fuseloop.bench.broad import BROAD
from fuseloop.bench.peers import make_peers
from fuseloop.bench.runner import median_time

try:
    from fuseloop.lower import atomics
except ImportError:  # (a checkout before native atomics: the baseline)
    atomics = None  # type: ignore[assignment]

FORMS = ("scatter", "scatter-add", "gather", "gather-rows")


def atomics_report(device: Any) -> None:
    handle = device.cl_device
    extensions = getattr(handle, "extensions", "") or ""
    wanted = [e for e in extensions.split() if "atomic" in e or "float" in e]
    print(f"atomic extensions: {' '.join(wanted) or '(none listed)'}")
    try:
        features = [f.name for f in handle.opencl_c_features if "atomic" in f.name]
        print(f"OpenCL C atomic features: {' '.join(features) or '(none)'}")
    except Exception as exc:  # (OpenCL < 3.0 or not an OpenCL device)
        print(f"OpenCL C features: unavailable ({type(exc).__name__})")
    if atomics is None:
        print("fuseloop.lower.atomics absent: compare-and-swap loops everywhere")
        return
    print(f"NVIDIA compute capability (major): {atomics._nvidia_capability(device) or '-'}")
    for dt in (np.float32, np.float64):
        flavor = atomics.float_add_flavor(device, np.dtype(dt))
        print(f"fl.add.at {np.dtype(dt).name}: {flavor or 'compare-and-swap loop'}")


def show_scatter_code(device: Any) -> None:
    rng = np.random.default_rng(1)
    for dt in (np.float32, np.int32):
        idx = fl.asarray(rng.integers(-64, 64, 4096))
        v = fl.asarray(rng.integers(0, 9, 4096).astype(dt))
        out = fl.zeros(64, dt).eval()
        fl.synchronize()
        with evaluate.capturing_sources() as sources:
            fl.add.at(out, idx, v)
        print(f"\n# the kernels of fl.add.at(out, idx, v), {np.dtype(dt).name}: "
              f"{len(sources)} built")
        for s in sources[:-1]:  # (the check: a reduction; its signature only)
            print(next(line for line in s.splitlines() if "__kernel" in line))
        print(sources[-1])  # the scatter


def inputs_of(name: str, n: int) -> dict[str, np.ndarray]:
    wl = next(w for w in BROAD if w.name == name)
    assert wl.make is not None
    return wl.make(n, np.random.default_rng(0))


def host_time(run: Any, repeat: int) -> float:
    """CPU seconds of this process per call, calls enqueued back to back (one wait at
    the end): the host's share, which a GPU's time per call cannot go below.  (On PoCL
    the kernels run in this process' threads and count too.)"""
    fl.synchronize()
    t0 = time.process_time()
    for _ in range(repeat):
        run()
    fl.synchronize()
    return (time.process_time() - t0) / repeat


def set_variant(spec: str) -> None:
    """``name[/items][/defer][/span=BYTES]``: the environment ``scatter_kernel`` reads."""
    parts = spec.split("/")
    os.environ["FUSELOOP_SCATTER"] = parts[0]
    os.environ["FUSELOOP_SCATTER_ITEMS"] = next((p for p in parts[1:] if p.isdigit()), "4")
    os.environ["FUSELOOP_SCATTER_WAIT"] = "defer" if "defer" in parts[1:] else "after"
    span = next((p[5:] for p in parts[1:] if p.startswith("span=")), None)
    if span is None:
        os.environ.pop("FUSELOOP_SCATTER_SPAN", None)
    else:
        os.environ["FUSELOOP_SCATTER_SPAN"] = span


def time_fuseloop(wl: Any, arrays: list[Any], want: np.ndarray, repeat: int
                  ) -> tuple[float, int, bool, float, float]:
    run, fetch = wl.fuseloop(*arrays)
    run()
    ok = bool(np.allclose(fetch(), want, rtol=wl.rtol, atol=wl.atol))
    fl.synchronize()
    fl.reset_stats()
    run()
    fl.synchronize()
    kernels = fl.stats()["kernels_launched"]
    back_to_back = median_time(run, fl.synchronize, max(3, repeat // 4), batch=10)
    return (median_time(run, fl.synchronize, repeat), kernels, ok, host_time(run, repeat),
            back_to_back)


def show_variant_code(device: Any) -> None:
    """The hand-written kernels' sources (float32 add, int64 indices) of each variant."""
    from fuseloop.ops import scatter_kernel as sk

    i64, f32 = np.dtype(np.int64), np.dtype(np.float32)
    update = sk._update("add", f32, device)
    for mode, names in (("gate", ("check", "store")), ("narrow", ("check", "store")),
                        ("backup", ("copy", "store"))):
        print(f"\n# FUSELOOP_SCATTER={mode}: the {' and the '.join(names)} kernels "
              f"(-DITEMS=4: FUSELOOP_SCATTER_ITEMS)")
        for name in names:
            kernel = sk._kernel(f"fuseloop_scatter_{name}", mode, i64, f32,
                                update if name == "store" else "", 4)
            print(f"// build options: {' '.join(kernel.plan.build_options)}")
            print(kernel.plan.source if name != "copy" else "(in the store's source)")
    part = sk._partition_kernel("fuseloop_scatter_count", i64, f32, 4)
    print("\n# FUSELOOP_SCATTER=partition: count and partition kernels, then the narrow "
          f"store; build options {' '.join(part.plan.build_options)}")
    print(part.plan.source)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=24, help="elements: 2^log2")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-code", action="store_true", help="skip the sources and explain")
    ap.add_argument("--forms", default=",".join(FORMS), help="comma-separated subset")
    ap.add_argument("--variants", default="expr",
                    help="comma-separated FUSELOOP_SCATTER variants: name[/items][/defer][/span=B]")
    ap.add_argument("--hand-on-cpu", action="store_true",
                    help="the hand-written variants on a CPU device too (a dry run)")
    args = ap.parse_args()
    if args.hand_on_cpu:
        from fuseloop.ops import scatter_kernel

        scatter_kernel.ON_CPU = True
    device = fl.get_device()
    n = 1 << args.log2
    only = None if device.type == "cpu" else \
        ["torch", "torch.compile", "cupy", "jax.jit", "fuseloop.fuse"]
    peers, skipped = make_peers(device.type, only)
    peers = [p for p in peers if not p.name.startswith("numexpr")]  # (no form of these)
    print(f"device: {device.name} ({device.type}, {device.vendor}, {device.runtime}, "
          f"{device.compute_units} units); 2^{args.log2} float32; peers: "
          f"{', '.join(p.name for p in peers)}" + (f"; skipped: {skipped}" if skipped else ""))
    atomics_report(device)
    variants = args.variants.split(",")
    if not args.no_code:
        set_variant("expr")
        show_scatter_code(device)
        if any(v.split("/")[0] != "expr" for v in variants):
            show_variant_code(device)
    for name in () if args.no_code else ("gather", "gather-rows"):
        a = inputs_of(name, n)
        x, idx = fl.asarray(a["x"]), fl.asarray(a["idx"])
        print(f"\n# fl.explain({name}, run=True)")
        print(fl.explain(fl.take(x, idx, axis=None if name == "gather" else 0),
                         run=True).as_text())

    print()
    cols = ["fuseloop", "10 back2back", "host cpu", "kernels"] + [p.name for p in peers]
    print(f"{'form':14s} {'variant':>16s}" + "".join(f" {c:>14s}" for c in cols)
          + "  best peer/fuseloop  ok")
    for name in args.forms.split(","):
        wl = next(w for w in BROAD if w.name == name)
        a = inputs_of(name, n)
        want = np.asarray(wl.reference(*[a[k] for k in wl.inputs]))
        arrays = [fl.asarray(a[k]) for k in wl.inputs]
        rows = []
        for spec in variants:
            set_variant(spec)
            t, kernels, ok, host, b2b = time_fuseloop(wl, arrays, want, args.repeat)
            rows.append((spec, t, ok, [f"{t * 1e6:14.1f}", f"{b2b * 1e6:14.1f}",
                                       f"{host * 1e6:14.1f}", f"{kernels:14d}"]))
        set_variant("expr")
        cells: list[str] = []
        ok = True
        best = float("inf")
        for p in peers:
            try:
                run = p.prepare(wl, a)
                ok &= bool(np.allclose(p.to_numpy(run()), want, rtol=wl.rtol, atol=wl.atol))
                tp = median_time(run, lambda p=p: p.sync(None), args.repeat)
                best = min(best, tp)
                cells.append(f"{tp * 1e6:14.1f}")
            except Exception as exc:  # a peer without this form: say so, go on
                cells.append(f"{type(exc).__name__[:14]:>14s}")
            p.release()
        for spec, t, fl_ok, mine in rows:
            ratio = f"{best / t:18.2f}" if best < float("inf") else f"{'-':>18s}"
            print(f"{name:14s} {spec:>16s}" + " ".join(["", *mine, *cells])
                  + f"  {ratio}  {'yes' if ok and fl_ok else 'NO'}")
    print("\nmicroseconds per call, median, a wait after each call; '10 back2back': per "
          "call, 10 calls then one wait; 'host cpu': fuseloop's CPU time per call, calls "
          "back to back; 'kernels': launches per fuseloop call; peers' columns repeated "
          "on each variant's row")


if __name__ == "__main__":
    main()
