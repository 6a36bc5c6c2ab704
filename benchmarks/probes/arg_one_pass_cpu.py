"""Where a one-pass (value, index) argmax kernel on the CPU device would beat numpy (issue 25).

For ``X.argmax(axis=1)`` of square float32 matrices and ``x.argmax()`` of vectors, at
each size, in one process, rounds interleaved, CPU and wall clocks (medians):

* ``numpy``: numpy's argmax of a host array;
* ``fl eager``: fuseloop with the host path on (a concrete array: numpy's argmax at once,
  ``host_products.arg_reduce``, up to ``ARG_NOW_MAX`` elements);
* ``fl kernel``: fuseloop's kernel, the host path off (on a CPU: the two passes, the
  extreme, then the first position holding it, over each row in cache; a whole array as
  pieces of rows, then the least of their (value, position) keys);
* ``one-pass``: a prototype written here: each row (a whole array: each of 64 pieces,
  combined by numpy, a few microseconds) reduced by one work-item in one pass, holding
  ``--lanes`` x ``--accumulators`` (value, position) pairs in vector registers (OpenCL
  vector types and operators: PoCL 3.0 calls its library for ``isgreater``/``select``
  on vectors, 2-3x slower), launched through pyopencl (no fuseloop overhead: its
  figure is a floor for an integrated kernel).

Hand-written OpenCL lives in this probe only: Loopy stays fuseloop's code generator.
Results are checked against numpy (first index; the first NaN); reported, never asserted.

    python benchmarks/probes/arg_one_pass_cpu.py [--sizes 2^14 2^16 ...] [--reps 9]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl
from fuseloop import host_path, host_products

PIECES = 64  # (a whole array's pieces: rows of the one-pass kernel)


def _source(lanes: int, accs: int) -> str:
    """The one-pass row argmax: accumulator ``a``'s lane ``k`` holds the best of the
    row's positions ``j`` with ``j % (lanes * accs) == a * lanes + k`` (strictly
    greater takes: each lane keeps its first maximum; a NaN beats every number), then
    the lanes, then the row's tail, are combined by (value, position)."""
    vt, it = f"float{lanes}", f"int{lanes}"
    step = lanes * accs
    order = ", ".join(str(k) for k in range(lanes))
    init = "\n".join(f"  {vt} bv{a} = vload{lanes}(0, x + {a * lanes}); "
                     f"{it} bi{a} = lane + {a * lanes};" for a in range(accs))
    body = "\n".join(
        f"    {{ {vt} v = vload{lanes}(0, x + j + {a * lanes});\n"
        f"      {it} take = (v > bv{a}) | ((v != v) & (bv{a} == bv{a}));\n"
        f"      bv{a} = take ? v : bv{a}; bi{a} = take ? ix + {a * lanes} : bi{a}; }}"
        for a in range(accs))
    combine = "\n".join(
        f"  for (int l = 0; l < {lanes}; ++l) BETTER(((float *) &bv{a})[l], "
        f"((int *) &bi{a})[l]);" for a in range(accs))
    return f"""
#define BETTER(W, K) {{ float w_ = (W); int k_ = (K); int vn = v != v, wn = w_ != w_; \\
  int t_ = wn ? (!vn || k_ < i) : (!vn && (w_ > v || (w_ == v && k_ < i))); \\
  v = t_ ? w_ : v; i = t_ ? k_ : i; }}
__kernel void __attribute__((reqd_work_group_size(1, 1, 1)))
argmax_rows(__global int *out, __global const float *in, int n) {{
  __global const float *x = in + get_group_id(0) * (long) n;
  const {it} lane = ({it})({order});
{init}
  int whole = n / {step} * {step};
  {it} ix = lane + {step};
  for (int j = {step}; j < whole; j += {step}, ix += {step}) {{
{body}
  }}
  float v = ((float *) &bv0)[0]; int i = ((int *) &bi0)[0];
{combine}
  for (int j = whole; j < n; ++j) BETTER(x[j], j);
  out[get_group_id(0)] = i;
}}
"""


class OnePass:
    """The prototype kernel on fuseloop's CPU device's OpenCL device."""

    def __init__(self, lanes: int, accs: int) -> None:
        dev = next(d for p in cl.get_platforms() for d in p.get_devices()
                   if d.type & cl.device_type.CPU)
        self.ctx = cl.Context([dev])
        self.queue = cl.CommandQueue(self.ctx)
        self.kernel = cl.Kernel(cl.Program(self.ctx, _source(lanes, accs)).build(),
                                "argmax_rows")
        self.min_row = lanes * accs

    def runner(self, x: np.ndarray) -> Callable[[], np.ndarray]:
        """A call computing ``argmax`` of ``x`` (2-D: of each row; 1-D: of all)."""
        rows = x.reshape(PIECES, -1) if x.ndim == 1 else x
        flags = cl.mem_flags
        buf = cl.Buffer(self.ctx, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=rows)
        out = cl.Buffer(self.ctx, flags.WRITE_ONLY, rows.shape[0] * 4)
        host = np.empty(rows.shape[0], np.int32)
        n = np.int32(rows.shape[1])

        def run() -> np.ndarray:
            self.kernel(self.queue, (rows.shape[0],), (1,), out, buf, n)
            cl.enqueue_copy(self.queue, host, out)  # (blocking: waits for the kernel)
            if x.ndim == 2:
                return host
            pos = host + np.arange(PIECES, dtype=np.int64) * rows.shape[1]
            vals = x[pos]
            nan = np.isnan(vals)
            return np.asarray(pos[np.argmax(nan)] if nan.any() else pos[np.argmax(vals)])

        return run


def _size(text: str) -> int:
    return 2 ** int(text[2:]) if text.startswith("2^") else int(text)


def _clock(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        fn()
    return ((time.process_time() - c0) / calls * 1e6, (time.perf_counter() - w0) / calls * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["2^14", "2^16", "2^18", "2^20", "2^22"])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--lanes", type=int, default=16)
    ap.add_argument("--accumulators", type=int, default=2)
    args = ap.parse_args()
    proto = OnePass(args.lanes, args.accumulators)
    rng = np.random.default_rng(0)
    limit, arg_max = host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX
    print("us per call, CPU clock (wall clock); median of", args.reps, "interleaved rounds")
    check = rng.standard_normal((16, 2048)).astype(np.float32)
    check[3, [700, 1500]] = np.nan  # (the first NaN's position)
    check[4] = 1.0  # (every element ties: the first)
    check[5, -1] = np.nan  # (in the tail of a lane)
    if not np.array_equal(proto.runner(check)(), check.argmax(axis=1)):
        print("one-pass: MISMATCH with numpy on ties and NaNs")
    for n in map(_size, args.sizes):
        side = round(n ** 0.5)
        for shape, what in (((side, side), "rows"), ((n,), "all")):
            h = rng.standard_normal(shape).astype(np.float32)  # (no NaN: numpy stops at one)
            cases = _cases(h, 1 if what == "rows" else None, proto, limit)
            want = np.asarray(h.argmax(axis=1 if what == "rows" else None))
            for name, fn in cases.items():
                got = np.asarray(fn())
                if not np.array_equal(got, want):
                    print(f"  {name}: MISMATCH at {np.nonzero(got != want)}")
            calls = max(1, (1 << 20) // n)
            times: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
            for _ in range(args.reps):
                for name, fn in cases.items():
                    times[name].append(_clock(fn, calls))
            host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX = limit, arg_max
            mid = args.reps // 2
            cols = "  ".join(
                f"{k} {sorted(c for c, _ in v)[mid]:7.1f} ({sorted(w for _, w in v)[mid]:7.1f})"
                for k, v in times.items())
            print(f"2^{n.bit_length() - 1:<3} {what:4} {cols}")


def _cases(h: np.ndarray, axis: int | None, proto: OnePass, limit: int
           ) -> dict[str, Callable[[], object]]:
    """The timed calls of one case (see the module)."""
    d = fl.asarray(h)

    def fl_call() -> np.ndarray:
        return np.asarray(d.argmax(axis=axis).eval().get())

    def eager() -> np.ndarray:
        host_path.HOST_MAX_WORK, host_products.ARG_NOW_MAX = limit or 4096, 1 << 40
        return fl_call()

    def kernel() -> np.ndarray:
        host_path.HOST_MAX_WORK = 0
        return fl_call()

    cases: dict[str, Callable[[], object]] = {
        "numpy": lambda: h.argmax(axis=axis), "fl eager": eager, "fl kernel": kernel}
    if h.shape[-1] >= proto.min_row * (PIECES if h.ndim == 1 else 1):
        cases["one-pass"] = proto.runner(h)
    return cases


if __name__ == "__main__":
    main()
