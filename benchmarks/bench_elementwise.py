"""Element-wise benchmark: fused fuseloop expressions against copy bandwidth and other libraries.

Measured in one run, on one device.  Every bandwidth case is timed two ways: ``time`` is the
median over ``--repeat`` runs of one call followed by a synchronize (what one isolated
evaluation costs, host work included); ``pipelined`` is the median over a few runs of
``--batch`` calls back to back followed by one synchronize, divided by ``--batch`` (the
throughput of a loop, where a call's host work overlaps the previous kernel).  The cases:

* copy bandwidth: a fuseloop copy kernel (``out[...] = x``) and a raw OpenCL buffer copy
  (``pyopencl.enqueue_copy``); on a GPU also ``torch`` ``copy_`` when torch is importable;
* CPU devices: ``2*x + x*y - 3*y`` with fuseloop (into a preallocated ``out`` and via
  ``.eval()``), numpy, and numexpr when importable; the ratio fuseloop/numpy is reported;
* GPU devices: ``2*x - sin(y) + x*y`` with fuseloop, and torch eager, torch.compile,
  cupy.fuse and jax.jit when importable; reported as a fraction of the copy bandwidth
  (the larger of the copy figures, named in the output);
* host overhead: a cached 5-operation expression on 1000 elements, built and enqueued with
  ``.eval()`` each call, synchronizing every 100 calls; the median over ``--overhead-loops``
  timed loops is the figure, with the fastest loop and the calling thread's CPU time per
  call beside it; ``fl.stats()`` around the timed loops shows that nothing was lowered or
  compiled there.  numpy's loop of the same expression runs after each of ours, so the
  ratio of each pair shows the overhead apart from how fast the (shared) machine ran;
  then a loop calling a prebuilt pyopencl ``ElementwiseKernel`` of the same expression
  (a new pooled output each call, on the same queue): the least per call of a Python
  library that launches through pyopencl.
  The same loop with a scalar that changes every call is timed after it.

Bandwidth counts the bytes each expression must move: 3 float32 arrays (2 read, 1 written)
for the expressions, 2 for a copy. Timings are reported, never asserted.

Usage::

    python benchmarks/bench_elementwise.py [--device SPEC] [--size LOG2] [--repeat N]
                                           [--batch K] [--calls N] [--overhead-loops L]
                                           [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time, short_reason

F32 = 4  # bytes per element


BATCH = 20  # calls per pipelined run (--batch)


def timed(fn: Callable[[], Any], sync: Callable[[], Any], repeat: int,
          warmup: int = 2) -> dict[str, float]:
    """Both timings of a bandwidth case: ``seconds`` (per call) and ``pipelined_seconds``.

    Pipelined: median over runs of ``BATCH`` calls of ``fn`` and one ``sync``, per call.
    """
    return {"seconds": median_time(fn, sync, repeat, warmup),
            "pipelined_seconds": median_time(fn, sync, max(3, repeat // 2), warmup=1,
                                             batch=BATCH)}


class Results:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, group: str, case: str, seconds: float | dict[str, float] | None,
            nbytes: int | None, note: str = "", **extra: Any) -> dict[str, Any]:
        pipelined = None
        if isinstance(seconds, dict):
            seconds, pipelined = seconds["seconds"], seconds["pipelined_seconds"]
        row: dict[str, Any] = {"group": group, "case": case, "seconds": seconds, "note": note}
        if seconds is not None and nbytes is not None:
            row["gb_per_s"] = nbytes / seconds / 1e9
        else:
            row["gb_per_s"] = None
        row["pipelined_seconds"] = pipelined
        row["pipelined_gb_per_s"] = (nbytes / pipelined / 1e9
                                     if pipelined is not None and nbytes is not None else None)
        row.update(extra)
        self.rows.append(row)
        return row

    def skip(self, group: str, case: str, reason: str) -> None:
        self.add(group, case, None, None, note=f"skipped: {reason}")


def check_close(name: str, got: np.ndarray, want: np.ndarray) -> bool:
    ok = bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))
    if not ok:
        bad = np.argmax(np.abs(got - want))
        print(f"WARNING: {name} result differs from numpy (at {bad}: {got[bad]} vs {want[bad]})",
              file=sys.stderr)
    return ok


# --------------------------------------------------------------------------------------------
# copy bandwidth


def bench_copy(res: Results, x: fl.Array, out: fl.Array, n: int, repeat: int) -> None:
    nbytes = 2 * F32 * n

    def fl_copy():
        out[...] = x

    t = timed(fl_copy, fl.synchronize, repeat)
    res.add("copy", "fuseloop copy kernel (out[...] = x)", t, nbytes)

    try:
        import pyopencl as cl

        queue = fl.get_device().queue
        src, dst = x.data, out.data

        def raw_copy():
            cl.enqueue_copy(queue, dst, src, byte_count=F32 * n)

        t = timed(raw_copy, queue.finish, repeat)
        res.add("copy", "pyopencl enqueue_copy (buffer to buffer)", t, nbytes)
    except Exception as e:  # the raw buffer API may be unavailable
        res.skip("copy", "pyopencl enqueue_copy (buffer to buffer)", short_reason(e, 120))


def bench_torch_copy(res: Results, xh: np.ndarray, repeat: int) -> None:
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda is not available")
        tx = torch.from_numpy(xh).cuda()
        to = torch.empty_like(tx)
        t = timed(lambda: to.copy_(tx), torch.cuda.synchronize, repeat)
        res.add("copy", "torch copy_ (CUDA)", t, 2 * F32 * xh.size)
    except Exception as e:
        res.skip("copy", "torch copy_ (CUDA)", short_reason(e, 120))


def best_copy(res: Results, key: str = "gb_per_s") -> tuple[float | None, str]:
    copies = [r for r in res.rows if r["group"] == "copy" and r.get(key)]
    if not copies:
        return None, "none"
    best = max(copies, key=lambda r: r[key])
    return best[key], best["case"]


# --------------------------------------------------------------------------------------------
# CPU: 2*x + x*y - 3*y


def bench_cpu(res: Results, x, y, out, xh, yh, repeat: int) -> None:
    n = xh.size
    nbytes = 3 * F32 * n
    want = 2 * xh + xh * yh - 3 * yh
    group = "expr"

    def fl_out():
        out[...] = 2 * x + x * y - 3 * y

    t = timed(fl_out, fl.synchronize, repeat)
    ok = check_close("fuseloop out[...] =", out.get(), want)
    res.add(group, "fuseloop: out[...] = 2*x + x*y - 3*y", t, nbytes, correct=ok)

    holder: list[fl.Array] = []

    def fl_eval():
        holder[:] = [(2 * x + x * y - 3 * y).eval()]

    t = timed(fl_eval, fl.synchronize, repeat)
    ok = check_close("fuseloop .eval()", holder[0].get(), want)
    res.add(group, "fuseloop: (2*x + x*y - 3*y).eval()", t, nbytes, correct=ok)
    holder.clear()

    t = timed(lambda: 2 * xh + xh * yh - 3 * yh, lambda: None, repeat)
    res.add(group, "numpy: 2*x + x*y - 3*y", t, nbytes)

    try:
        import numexpr as ne

        ne_out = np.empty_like(xh)
        env = {"x": xh, "y": yh}
        t = timed(lambda: ne.evaluate("2*x + x*y - 3*y", local_dict=env, out=ne_out),
                  lambda: None, repeat)
        ok = check_close("numexpr", ne_out, want)
        res.add(group, f"numexpr ({ne.detect_number_of_cores()} threads): out=", t, nbytes,
                correct=ok)
    except Exception as e:
        res.skip(group, "numexpr", short_reason(e, 120))

    numpy_row = next(r for r in res.rows if r["case"].startswith("numpy:"))
    for r in res.rows:
        if r["group"] == group and r["seconds"]:
            r["vs_numpy"] = numpy_row["seconds"] / r["seconds"]


# --------------------------------------------------------------------------------------------
# GPU: 2*x - sin(y) + x*y


def bench_gpu(res: Results, x, y, out, xh, yh, repeat: int) -> None:
    n = xh.size
    nbytes = 3 * F32 * n
    want = 2 * xh - np.sin(yh) + xh * yh
    group = "expr"

    def fl_out():
        out[...] = 2 * x - fl.sin(y) + x * y

    t = timed(fl_out, fl.synchronize, repeat)
    ok = check_close("fuseloop out[...] =", out.get(), want)
    res.add(group, "fuseloop: out[...] = 2*x - sin(y) + x*y", t, nbytes, correct=ok)

    holder: list[fl.Array] = []

    def fl_eval():
        holder[:] = [(2 * x - fl.sin(y) + x * y).eval()]

    t = timed(fl_eval, fl.synchronize, repeat)
    ok = check_close("fuseloop .eval()", holder[0].get(), want)
    res.add(group, "fuseloop: (2*x - sin(y) + x*y).eval()", t, nbytes, correct=ok)
    holder.clear()

    # torch eager and torch.compile
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda is not available")
        tx, ty = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).cuda()

        def torch_expr(a, b):
            return 2 * a - torch.sin(b) + a * b

        t = timed(lambda: torch_expr(tx, ty), torch.cuda.synchronize, repeat)
        res.add(group, "torch eager (CUDA)", t, nbytes)
        try:
            compiled = torch.compile(torch_expr)
            t = timed(lambda: compiled(tx, ty), torch.cuda.synchronize, repeat, warmup=3)
            ok = check_close("torch.compile", compiled(tx, ty).cpu().numpy(), want)
            res.add(group, "torch.compile (CUDA)", t, nbytes, correct=ok)
        except Exception as e:
            res.skip(group, "torch.compile", short_reason(e, 120))
    except Exception as e:
        res.skip(group, "torch", short_reason(e, 120))

    # cupy.fuse
    try:
        import cupy as cp

        cx, cy = cp.asarray(xh), cp.asarray(yh)

        @cp.fuse()
        def cupy_expr(a, b):
            return 2 * a - cp.sin(b) + a * b

        sync = cp.cuda.Device().synchronize
        t = timed(lambda: cupy_expr(cx, cy), sync, repeat)
        ok = check_close("cupy.fuse", cp.asnumpy(cupy_expr(cx, cy)), want)
        res.add(group, "cupy.fuse", t, nbytes, correct=ok)
    except Exception as e:
        res.skip(group, "cupy.fuse", short_reason(e, 120))

    # jax.jit (wall clock including dispatch)
    try:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.numpy as jnp

        jx, jy = jnp.asarray(xh), jnp.asarray(yh)
        jitted = jax.jit(lambda a, b: 2 * a - jnp.sin(b) + a * b)
        box: list[Any] = [None]

        def run_jax():
            box[0] = jitted(jx, jy)

        t = timed(run_jax, lambda: box[0].block_until_ready(), repeat)
        ok = check_close("jax.jit", np.asarray(box[0]), want)
        backend = jax.default_backend()
        res.add(group, f"jax.jit ({backend})", t, nbytes, correct=ok)
    except Exception as e:
        res.skip(group, "jax.jit", short_reason(e, 120))


# --------------------------------------------------------------------------------------------
# host overhead


def _pyopencl_peer(x: fl.Array, y: fl.Array, xh: np.ndarray, yh: np.ndarray,
                   calls: int) -> tuple[Callable[[], None] | None, Any]:
    """The host-overhead loop with pyopencl's ElementwiseKernel (None and why if not)."""
    import pyopencl as cl
    import pyopencl.array as cl_array
    from pyopencl.elementwise import ElementwiseKernel

    try:
        dev = fl.get_device()
        queue = dev.queue  # (fuseloop's deferred launches are enqueued first)
        pool = dev.allocator
        kernel = ElementwiseKernel(dev.context, "float *z, const float *x, const float *y",
                                   "z[i] = ((x[i] * 2 + y[i]) * x[i] - y[i]) / 3")
        n = x.shape[0]
        xa = cl_array.Array(queue, (n,), np.float32, data=x.data)
        ya = cl_array.Array(queue, (n,), np.float32, data=y.data)
        out = cl_array.empty(queue, (n,), np.float32, allocator=pool)
        kernel(out, xa, ya)
        ok = check_close("pyopencl peer", out.get(), ((xh * 2 + yh) * xh - yh) / 3)
    except cl.Error as e:
        return None, short_reason(e, 120)

    def peer_loop() -> None:
        for i in range(calls):
            z = cl_array.empty(queue, (n,), np.float32, allocator=pool)
            kernel(z, xa, ya)
            if i % 100 == 99:
                fl.synchronize()

    return peer_loop, ok


def bench_overhead(res: Results, calls: int, loops: int) -> dict[str, Any]:
    n = 1000
    rng = np.random.default_rng(1)
    xh = rng.random(n, dtype=np.float32)
    yh = rng.random(n, dtype=np.float32) + 1
    x, y = fl.asarray(xh), fl.asarray(yh)

    def expr():
        # 5 operations: *, +, *, -, /
        return ((x * 2 + y) * x - y) / 3

    ok = check_close("overhead expression", expr().eval().get(),
                     ((xh * 2 + yh) * xh - yh) / 3)
    fl.synchronize()

    def loop():
        for i in range(calls):
            expr().eval()
            if i % 100 == 99:
                fl.synchronize()

    def numpy_loop():
        for _ in range(calls):
            ((xh * 2 + yh) * xh - yh) / 3

    # the least a Python library can do per call on pyopencl: one prebuilt
    # ElementwiseKernel called on the same device buffers, a new pooled output each
    # call, on fuseloop's queue (so fl.synchronize() waits for it as for ours)
    peer_loop, peer_ok = _pyopencl_peer(x, y, xh, yh, calls)

    loop()  # warm (compiles once, fills the cache)
    fl.synchronize()
    numpy_loop()
    if peer_loop is not None:
        peer_loop()
        fl.synchronize()
    before = fl.stats()
    walls, cpus, numpy_walls, peer_walls = [], [], [], []
    for _ in range(loops):
        # (the calling thread's CPU time too: on a shared virtual machine the same
        # work sometimes takes twice the CPU time, which no waiting explains)
        c0, t0 = time.thread_time(), time.perf_counter()
        loop()
        fl.synchronize()
        walls.append((time.perf_counter() - t0) / calls * 1e6)
        cpus.append((time.thread_time() - c0) / calls * 1e6)
        # numpy's loop right after each of ours sees the same phase of the machine:
        # the ratio of the pair does not move with the machine's speed
        t0 = time.perf_counter()
        numpy_loop()
        numpy_walls.append((time.perf_counter() - t0) / calls * 1e6)
        if peer_loop is not None:
            t0 = time.perf_counter()
            peer_loop()
            fl.synchronize()
            peer_walls.append((time.perf_counter() - t0) / calls * 1e6)
    after = fl.stats()
    delta = {k: after[k] - before[k] for k in after if isinstance(after[k], int | float)}
    per_call_us = statistics.median(walls)
    res.add("overhead", "fuseloop: ((x*2 + y)*x - y)/3 on 1000 elements, build + .eval()",
            per_call_us / 1e6, None,
            note=(f"{per_call_us:.1f} us/call (median of {loops} loops of {calls}; "
                  f"fastest {min(walls):.1f}; calling thread's CPU time "
                  f"{statistics.median(cpus):.1f})"),
            us_per_call=per_call_us, us_per_call_min=min(walls),
            us_per_call_loops=walls, thread_cpu_us_per_call=statistics.median(cpus),
            correct=ok)

    # the same loop with a new scalar every call (x * s for s cycling through 7 values):
    # a scalar argument is then set for every launch
    scales = [float(k) for k in range(2, 9)]

    def varying_eval_loop():
        for i in range(calls):
            (((x * scales[i % 7] + y) * x - y) / 3).eval()
            if i % 100 == 99:
                fl.synchronize()

    ok_varying = check_close("overhead expression, other scalar",
                             (((x * scales[3] + y) * x - y) / 3).get(),
                             ((xh * scales[3] + yh) * xh - yh) / 3)
    varying_eval_loop()
    fl.synchronize()
    varying = []
    for _ in range(max(3, loops // 3)):
        t0 = time.perf_counter()
        varying_eval_loop()
        fl.synchronize()
        varying.append((time.perf_counter() - t0) / calls * 1e6)
    varying_us = statistics.median(varying)
    res.add("overhead", "fuseloop: ((x*s + y)*x - y)/3, s new every call, build + .eval()",
            varying_us / 1e6, None,
            note=f"{varying_us:.1f} us/call (median of {len(varying)} loops; fastest "
                 f"{min(varying):.1f})",
            us_per_call=varying_us, us_per_call_min=min(varying), us_per_call_loops=varying,
            correct=ok_varying)

    np_us = statistics.median(numpy_walls)
    ratio = statistics.median(w / v for w, v in zip(walls, numpy_walls))
    res.add("overhead", "numpy (host, for reference): same expression, loops interleaved",
            np_us / 1e6, None,
            note=(f"{np_us:.1f} us/call (fastest {min(numpy_walls):.1f}); fuseloop/numpy "
                  f"per pair of loops: median {ratio:.2f}x"),
            us_per_call=np_us, us_per_call_min=min(numpy_walls),
            us_per_call_loops=numpy_walls, fuseloop_over_numpy=ratio)
    name = "pyopencl ElementwiseKernel, prebuilt, called each call (loops interleaved)"
    if peer_loop is None:
        res.skip("overhead", name, peer_ok)
    else:
        peer_us = statistics.median(peer_walls)
        peer_ratio = statistics.median(w / v for w, v in zip(walls, peer_walls))
        res.add("overhead", name, peer_us / 1e6, None,
                note=(f"{peer_us:.1f} us/call (fastest {min(peer_walls):.1f}); "
                      f"fuseloop/pyopencl per pair of loops: median {peer_ratio:.2f}x"),
                us_per_call=peer_us, us_per_call_min=min(peer_walls),
                us_per_call_loops=peer_walls, fuseloop_over_pyopencl=peer_ratio,
                correct=peer_ok)
    return {"calls_per_run": calls, "stats_delta_in_timed_loops": delta,
            "fuseloop_over_numpy_median": ratio}


# --------------------------------------------------------------------------------------------
# report


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(res: Results, info: dict[str, Any], copy_bw: float | None, copy_name: str,
             pipe_bw: float | None = None, pipe_name: str = "none") -> str:
    lines = [
        f"Device: {info['device']['name']} ({info['device']['type']}, "
        f"{info['device']['platform']}); n = 2^{info['size_log2']} float32; "
        f"median of {info['repeat']}; pipelined: {info.get('batch', BATCH)} calls per "
        "synchronize",
        "",
        "| group | case | time (ms) | GB/s | speed-up vs numpy | % of copy | "
        "pipelined GB/s | pipelined % of copy | note |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in res.rows:
        sec = r["seconds"]
        if r["group"] == "overhead":
            time_s = fmt(sec * 1e3 if sec else None, ".4f")
        else:
            time_s = fmt(sec * 1e3 if sec else None, ".3f")
        gbs = r["gb_per_s"]
        pct = f"{100 * gbs / copy_bw:.0f}%" if (gbs and copy_bw) else "-"
        note = r["note"]
        if r.get("correct") is False:
            note = (note + "; " if note else "") + "RESULT MISMATCH"
        pgbs = r.get("pipelined_gb_per_s")
        ppct = f"{100 * pgbs / pipe_bw:.0f}%" if (pgbs and pipe_bw) else "-"
        lines.append(f"| {r['group']} | {r['case']} | {time_s} | {fmt(gbs, '.1f')} | "
                     f"{fmt(r.get('vs_numpy'), '.2f')} | {pct} | {fmt(pgbs, '.1f')} | {ppct} | "
                     f"{note} |")
    lines.append("")
    if copy_bw:
        lines.append(f"% of copy is relative to the best copy figure: {copy_name} "
                     f"({copy_bw:.1f} GB/s).")
    if pipe_bw:
        lines.append(f"Pipelined % of copy is relative to the best pipelined copy figure: "
                     f"{pipe_name} ({pipe_bw:.1f} GB/s).")
    return "\n".join(lines)


def parse_device(spec: str | None):
    if spec is None:
        return None
    return int(spec) if spec.strip().lstrip("-").isdigit() else spec


def main(argv: list[str] | None = None) -> int:
    global BATCH
    ap = argparse.ArgumentParser(description="fuseloop element-wise benchmark")
    ap.add_argument("--device", default=None,
                    help="device spec for fl.set_device: 'cpu', 'gpu', an index or a name "
                         "substring (default: fuseloop's default device)")
    ap.add_argument("--size", type=int, default=None,
                    help="log2 of the element count (default: 24 on a CPU, 27 otherwise)")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per case (median)")
    ap.add_argument("--batch", type=int, default=BATCH,
                    help="calls per synchronize in the pipelined timing")
    ap.add_argument("--calls", type=int, default=1000,
                    help="calls per timed run in the host-overhead loop")
    ap.add_argument("--overhead-loops", type=int, default=15,
                    help="timed loops in the host-overhead figure (median, fastest reported)")
    ap.add_argument("--out", default=None, help="write the results as JSON to this path")
    ap.add_argument("--show-code", action="store_true",
                    help="print the OpenCL source of the benchmarked expression")
    args = ap.parse_args(argv)

    spec = parse_device(args.device)
    if spec is not None:
        fl.set_device(spec)
    dev = fl.get_device()
    is_cpu = dev.type == "cpu"
    size = args.size if args.size is not None else (24 if is_cpu else 27)
    n = 2**size
    repeat = max(1, args.repeat)
    BATCH = max(1, args.batch)

    info: dict[str, Any] = {
        "device": {"name": dev.name, "type": dev.type, "platform": dev.platform,
                   "index": dev.index},
        "size_log2": size,
        "n": n,
        "dtype": "float32",
        "repeat": repeat,
        "batch": BATCH,
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "fuseloop": getattr(fl, "__version__", "unknown")},
    }
    print(f"fuseloop element-wise benchmark on {dev.name} ({dev.type}), n = 2^{size}",
          file=sys.stderr)

    rng = np.random.default_rng(0)
    xh = rng.random(n, dtype=np.float32)
    yh = rng.random(n, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)
    out = fl.empty_like(x)
    fl.synchronize()

    res = Results()
    bench_copy(res, x, out, n, repeat)
    if not is_cpu:
        bench_torch_copy(res, xh, repeat)
    copy_bw, copy_name = best_copy(res)
    pipe_bw, pipe_name = best_copy(res, "pipelined_gb_per_s")

    if is_cpu:
        bench_cpu(res, x, y, out, xh, yh, repeat)
        if args.show_code:
            print(fl.show_code(2 * x + x * y - 3 * y))
    else:
        bench_gpu(res, x, y, out, xh, yh, repeat)
        if args.show_code:
            print(fl.show_code(2 * x - fl.sin(y) + x * y))

    overhead = bench_overhead(res, args.calls, max(1, args.overhead_loops))

    for r in res.rows:
        if r["gb_per_s"] and copy_bw:
            r["fraction_of_copy"] = r["gb_per_s"] / copy_bw
        if r.get("pipelined_gb_per_s") and pipe_bw:
            r["pipelined_fraction_of_copy"] = r["pipelined_gb_per_s"] / pipe_bw
    print(markdown(res, info, copy_bw, copy_name, pipe_bw, pipe_name))
    delta = overhead["stats_delta_in_timed_loops"]
    print()
    print("fl.stats() change over the timed host-overhead loops: "
          + ", ".join(f"{k}={v}" for k, v in delta.items()))
    new_builds = delta.get("kernels_lowered", 0) + delta.get("kernels_compiled", 0)
    print("new kernels lowered/compiled in the timed loops: "
          f"{new_builds} ({'expected 0' if new_builds == 0 else 'UNEXPECTED, cache missed'})")

    if args.out:
        doc = {**info, "copy_reference": {"case": copy_name, "gb_per_s": copy_bw},
               "pipelined_copy_reference": {"case": pipe_name, "gb_per_s": pipe_bw},
               "rows": res.rows, "host_overhead": overhead, "stats": fl.stats()}
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
