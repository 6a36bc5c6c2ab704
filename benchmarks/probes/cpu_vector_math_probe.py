"""Probe: OpenCL math builtins on scalars against the same builtins on float8 vectors.

fuseloop's CPU recipe gives each work-item a contiguous chunk and loops over it one
element at a time; the compiler vectorises such a loop when its body is arithmetic,
but not when it calls a math builtin (``exp``, ``sin``, ``log``).  This probe times
hand-written kernels of the same shape (one work-item per 4096 elements) that call
the builtin on one float at a time and on a ``float8`` at a time, beside fuseloop's
own ``out[...] = fl.exp(x)`` (and ``sin``, ``log``, ``sqrt``, ``floor``: PoCL 3.0 calls
its library for these exact ones too) and numpy, and checks every
result against numpy in float64 (largest error in float32 ulps).  It measures; it
changes nothing.

With ``--lanes`` it instead checks every builtin that the CPU recipe applies to
vectors, in the form it uses (float32 sin, cos and tan through double8), and
the float8 sin, cos and tan that it does not use, on vectors whose lanes
hold unrelated values: random bit patterns of float32 and float64 (every
magnitude, subnormals, infinities, NaN), and small arguments with one large lane
per vector.  It reports, per builtin, the largest distance in representable values
between the vector and the scalar builtin.

Usage::

    python benchmarks/probes/cpu_vector_math_probe.py [--device SPEC] [--size LOG2] [--out F]
    python benchmarks/probes/cpu_vector_math_probe.py --lanes [--device SPEC] [--out F]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
import pyopencl as cl

import fuseloop as fl
from fuseloop.bench.runner import median_time

CHUNK = 4096
SOURCE = """
#define CHUNK 4096
__kernel void scalar_F(__global float *o, __global const float *x, int n)
{
    const int first = get_group_id(0) * CHUNK;
    for (int i = 0; i < CHUNK; ++i)
        if (first + i < n)
            o[first + i] = F(ARG(x[first + i]));
}
__kernel void vector8_F(__global float *o, __global const float *x, int n)
{
    const int first = get_group_id(0) * CHUNK;  /* (n is a multiple of CHUNK here) */
    for (int i = 0; i < CHUNK; i += 8)
        vstore8(F(ARG(vload8(0, x + first + i))), 0, o + first + i);
}
"""
FUNCTIONS = {"exp": ("x", np.exp), "sin": ("x", np.sin),
             "log": ("fabs(x)", lambda v: np.log(np.abs(v))),
             "sqrt": ("fabs(x)", lambda v: np.sqrt(np.abs(v))), "floor": ("x", np.floor)}


def ulps(got: np.ndarray, want: np.ndarray) -> float:
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - want) / spacing))


LANES_SOURCE = """
__kernel void scalar_F(__global T *o, __global const T *x, __global const T *y)
{
    const int i = get_global_id(0);
    o[i] = SCALAR(x[i], y[i]);
}
__kernel void vector_F(__global T *o, __global const T *x, __global const T *y)
{
    const int i = get_global_id(0);
    VSTORE(VECTOR(VLOAD(i, x), VLOAD(i, y)), i, o);
}
"""


def values_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in representable values per element (NaN against NaN: 0)."""
    ints = {4: np.int32, 8: np.int64}[a.itemsize]
    sign = 1 << (8 * a.itemsize - 1)
    far = np.zeros(a.shape, dtype=object)
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    for k in np.flatnonzero(differ):  # (few: exact integers only where needed)
        la, lb = int(a[k:k + 1].view(ints)[0]), int(b[k:k + 1].view(ints)[0])
        la = -(la + sign) if la < 0 else la
        lb = -(lb + sign) if lb < 0 else lb
        far[k] = 1 << 62 if np.isnan(a[k]) != np.isnan(b[k]) else abs(la - lb)
    return far


def check_lanes(dev: Any, out_path: str | None) -> int:
    from fuseloop.recipes.cpu_vector import through_double_width, vector_builtins

    table = vector_builtins()
    through = through_double_width(dev)
    rng = np.random.default_rng(0)
    n = 1 << 18
    rows = []
    for ctype, dt, ints, tag in (("float", np.float32, np.uint32, "f32"),
                                 ("double", np.float64, np.uint64, "f64")):
        x = rng.integers(0, np.iinfo(ints).max, n, dtype=ints, endpoint=True).view(dt)
        y = rng.integers(0, np.iinfo(ints).max, n, dtype=ints, endpoint=True).view(dt)
        # small arguments with one large lane in each vector
        mixed = rng.uniform(1e-5, 1, n).astype(dt)
        mixed[::8] = np.exp(rng.uniform(np.log(1e6), np.log(1e30), n // 8)).astype(dt)
        cases = {}  # name -> (the scalar call, the vector call)
        for name, call in table.items():
            if name.endswith(tag):
                scalar = f"{call.builtin}({'a' if call.arity == 1 else 'a,b'})"
                cases[name] = (scalar, scalar if not call.through_double else
                               f"convert_float8({call.builtin}(convert_double8(a)))")
        if ctype == "float":  # the float8 forms that the recipe does not use
            cases.update({f"{op} on float8 (not used)": (f"{op}(a)", f"{op}(a)")
                          for op in ("sin", "cos", "tan")})
        mf = cl.mem_flags
        bufs = [cl.Buffer(dev.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
                for a in (x, y, mixed)]
        out = cl.Buffer(dev.context, mf.READ_WRITE, x.nbytes)
        for name, (scalar, vector) in cases.items():
            # the recipe's widths on this device (the float forms it does not use: 8)
            width = table[name].width(np.dtype(dt), through) if name in table else 8
            vector = vector.replace("8", str(width))
            program = cl.Program(dev.context, LANES_SOURCE).build(
                options=[f"-DT={ctype}", f"-DSCALAR(a,b)={scalar}", f"-DVECTOR(a,b)={vector}",
                         f"-DVLOAD=vload{width}", f"-DVSTORE=vstore{width}"])
            worst = {}
            for label, (xb, yb) in (("random bits", (bufs[0], bufs[1])),
                                    ("one large lane", (bufs[2], bufs[1]))):
                got = []
                for kind, items in (("scalar", n), ("vector", n // width)):
                    cl.Kernel(program, f"{kind}_F")(dev.queue, (items,), None, out, xb, yb)
                    host = np.empty_like(x)
                    cl.enqueue_copy(dev.queue, host, out)
                    got.append(host)
                far = values_apart(got[0], got[1])
                k = int(np.argmax(far))
                args = (x, y) if label == "random bits" else (mixed, y)
                worst[label] = {"values_apart": int(far[k]),
                                "at": [repr(args[0][k]), repr(args[1][k])],
                                "scalar": repr(got[0][k]), "vector": repr(got[1][k])}
            rows.append({"builtin": name, "width": width, **worst})
            w = worst["random bits"]
            print(f"{name:28s} vector against scalar, most values apart: random bits "
                  f"{w['values_apart']}, one large lane {worst['one large lane']['values_apart']}"
                  + (f"  (worst: f({', '.join(w['at'])}) = {w['scalar']} scalar, "
                     f"{w['vector']} vector)" if w["values_apart"] > 4 else ""))
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"device": dev.name, "elements": n, "rows": rows}, f, indent=1)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--size", type=int, default=22)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=None)
    ap.add_argument("--lanes", action="store_true",
                    help="check vector builtins against scalar ones in mixed lanes")
    args = ap.parse_args()
    fl.set_device(args.device)
    dev = fl.get_device()
    if args.lanes:
        return check_lanes(dev, args.out)
    n = 1 << args.size
    assert n % CHUNK == 0
    h = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x = fl.asarray(h)
    out = fl.empty_like(x)
    host_out = np.empty_like(h)
    rows: list[dict[str, Any]] = []
    for name, (arg, ref_fn) in FUNCTIONS.items():
        want = ref_fn(h.astype(np.float64))
        # one program per function: the builtin and its argument as macros
        program = cl.Program(dev.context, SOURCE).build(
            options=[f"-DF={name}", "-DARG(v)=" + arg.replace("x", "(v)")])
        for kind in ("scalar", "vector8"):
            kernel = cl.Kernel(program, f"{kind}_F")
            kernel.set_args(out.data, x.data, np.int32(n))

            def go(kernel: Any = kernel) -> None:
                cl.enqueue_nd_range_kernel(dev.queue, kernel, (n // CHUNK,), (1,))

            t = median_time(go, fl.synchronize, args.repeat)
            got = out.get()
            rows.append({"function": name, "kind": f"OpenCL {kind}", "ms": t * 1e3,
                         "max_ulps": ulps(got, want)})
        fused_expr = {"exp": lambda: fl.exp(x), "sin": lambda: fl.sin(x),
                      "log": lambda: fl.log(fl.abs(x)), "sqrt": lambda: fl.sqrt(fl.abs(x)),
                      "floor": lambda: fl.floor(x)}[name]

        def fused(fused_expr: Any = fused_expr) -> None:
            out[...] = fused_expr()

        fused()
        t = median_time(fused, fl.synchronize, args.repeat)
        rows.append({"function": name, "kind": "fuseloop out[...] = fl." + name,
                     "ms": t * 1e3, "max_ulps": ulps(out.get(), want)})
        np_fn = {"exp": lambda: np.exp(h, out=host_out), "sin": lambda: np.sin(h, out=host_out),
                 "log": lambda: np.log(np.abs(h), out=host_out),
                 "sqrt": lambda: np.sqrt(np.abs(h), out=host_out),
                 "floor": lambda: np.floor(h, out=host_out)}[name]
        t = median_time(np_fn, lambda: None, args.repeat)
        rows.append({"function": name, "kind": "numpy", "ms": t * 1e3,
                     "max_ulps": ulps(host_out, want)})
    print(f"{dev.name}: 2^{args.size} float32, median of {args.repeat}")
    for r in rows:
        print(f"{r['function']:4s} {r['kind']:32s} {r['ms']:8.2f} ms   max {r['max_ulps']:.2f} ulp")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev.name, "elements": n, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
