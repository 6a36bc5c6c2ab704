"""Find what limits row softmax on a GPU: hand-written kernels against fuseloop's.

Row softmax of a 2^14 x 2^13 float32 matrix (one work-group per row, each
work-item keeping its share of the row in registers) in several hand-written
OpenCL variants that differ in one thing each: how the work-items' partial
results are combined (a local-memory tree, or two barriers through 32
lanes), whether ``exp`` is computed once per element (kept in registers) or
twice, ``exp`` or ``native_exp``, and the work-group size.  fuseloop's own
kernels run in the same process with the tree and the lanes combination.
Each is timed pipelined (``--batch`` launches, one wait) and per call, as a
fraction of the buffer-copy bandwidth measured in the same run.  On NVIDIA's
OpenCL the build log (``-cl-nv-verbose``) gives each kernel's register count.

    python benchmarks/probes/gpu_softmax_probe.py [--rows-log2 14] [--cols-log2 13]
"""

from __future__ import annotations

import argparse
import re

import numpy as np
import pyopencl as cl

import fuseloop as fl
from fuseloop.bench.runner import copy_bandwidth, median_time, wall_times
from fuseloop.recipes.rows import make_gpu_rows

KERNEL = r"""
#define G {group}
#define K {items}
#define LANES 32
#define EXP {exp}

inline float combine_max(float a, float b) {{ return a >= b ? a : b; }}
inline float combine_sum(float a, float b) {{ return a + b; }}

#define TREE(OP, x, scratch) \
  scratch[l] = x; barrier(CLK_LOCAL_MEM_FENCE); \
  for (int s = G / 2; s > 0; s >>= 1) {{ \
    if (l < s) scratch[l] = OP(scratch[l], scratch[l + s]); \
    barrier(CLK_LOCAL_MEM_FENCE); }} \
  x = scratch[0];

#define LANES2(OP, x, scratch, lanes) \
  scratch[l] = x; barrier(CLK_LOCAL_MEM_FENCE); \
  if (l < LANES) {{ float a = scratch[l]; \
    _Pragma("unroll") for (int k = 1; k < G / LANES; ++k) a = OP(a, scratch[l + LANES * k]); \
    lanes[l] = a; }} \
  barrier(CLK_LOCAL_MEM_FENCE); \
  x = lanes[0]; \
  _Pragma("unroll") for (int m = 1; m < LANES; ++m) x = OP(x, lanes[m]);

__kernel __attribute__((reqd_work_group_size(G, 1, 1)))
void softmax(__global float *restrict out, __global const float *restrict in)
{{
  __local float s_max[G], s_sum[G], l_max[LANES], l_sum[LANES];
  const int l = get_local_id(0);
  const long base = (long)get_group_id(0) * (G * K);
  float v[K];
  #pragma unroll
  for (int k = 0; k < K; ++k) v[k] = in[base + l + k * G];
  float m = v[0];
  #pragma unroll
  for (int k = 1; k < K; ++k) m = combine_max(m, v[k]);
  {combine_max}
  float s = 0.0f;
  #pragma unroll
  for (int k = 0; k < K; ++k) {{ float e = EXP(v[k] - m); {keep} s += e; }}
  {combine_sum}
  #pragma unroll
  for (int k = 0; k < K; ++k) out[base + l + k * G] = {final} / s;
}}
"""


def build_variant(ctx: cl.Context, group: int, items: int, combine: str, exp: str,
                  keep_exp: bool) -> cl.Program:
    if combine == "tree":
        cmax, csum = "TREE(combine_max, m, s_max)", "TREE(combine_sum, s, s_sum)"
    else:
        cmax = "LANES2(combine_max, m, s_max, l_max)"
        csum = "LANES2(combine_sum, s, s_sum, l_sum)"
    src = KERNEL.format(group=group, items=items, exp=exp, combine_max=cmax,
                        combine_sum=csum, keep="v[k] = e;" if keep_exp else "",
                        final="v[k]" if keep_exp else "EXP(v[k] - m)")
    return cl.Program(ctx, src).build(options=["-cl-nv-verbose"]
                                      if "NVIDIA" in ctx.devices[0].platform.name else [])


def registers(prg: cl.Program, dev: cl.Device) -> str:
    log = prg.get_build_info(dev, cl.program_build_info.LOG) or ""
    found = re.findall(r"Used (\d+) registers", log)
    return found[-1] if found else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows-log2", type=int, default=14)
    ap.add_argument("--cols-log2", type=int, default=13)
    ap.add_argument("--cols", type=int, default=0,
                    help="columns, any number (overrides --cols-log2)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--hand", action="store_true", help="also the hand-written variants")
    ap.add_argument("--fuseloop-variants", default="512:16:32,512:16:0,256:32:32,1024:8:32",
                    help="GROUP:CACHE_ITEMS:LANES (LANES 0: Loopy's tree)")
    ap.add_argument("--specialise", action="store_true",
                    help="also time fuseloop's source edited for a known row length")
    args = ap.parse_args()
    dev = fl.get_device()
    ctx, queue = dev.context, dev.queue
    cldev = ctx.devices[0]
    print(f"device: {dev.name}; sub-group extensions: "
          f"{[e for e in cldev.extensions.split() if 'subgroup' in e or 'sub_group' in e]}")
    r, c = 1 << args.rows_log2, args.cols or 1 << args.cols_log2
    copy = copy_bandwidth(4 * r * c, args.repeat, warmup=3)
    print(f"copy bandwidth (read + write) {copy:.0f} GB/s", flush=True)
    h = np.random.default_rng(0).random((r, c), dtype=np.float32)
    e64 = np.exp(h.astype(np.float64) - h.max(axis=-1, keepdims=True))
    want = e64 / e64.sum(axis=-1, keepdims=True)
    a = fl.asarray(h)
    out = fl.empty_like(a)
    nbytes = 2 * 4 * r * c

    def report(name: str, fn, regs: str = "") -> None:
        fn()
        fl.synchronize()
        ok = bool(np.allclose(out.get(), want, rtol=1e-5, atol=1e-9))
        t_call = median_time(fn, fl.synchronize, args.repeat, warmup=3)
        fl.synchronize()
        t_pipe = min(wall_times(fn, fl.synchronize, 5, warmup=0, batch=args.batch))
        print(f"{name:44s} regs {regs:>4s}  per call {nbytes / t_call / 1e9 / copy:6.1%}  "
              f"pipelined {nbytes / t_pipe / 1e9 / copy:6.1%}{'' if ok else '  MISMATCH'}",
              flush=True)

    for group, items in ((512, 16), (256, 32), (1024, 8)):
        if not args.hand or group * items != c:
            continue
        for combine in ("tree", "lanes"):
            for exp in ("exp", "native_exp"):
                for keep in (False, True):
                    prg = build_variant(ctx, group, items, combine, exp, keep)
                    knl = prg.softmax

                    def launch(knl=knl, group=group) -> None:
                        knl(queue, (r * group,), (group,), out.data, a.data)

                    report(f"hand {group}x{items} {combine} {exp}"
                           f"{' keep-exp' if keep else ''}", launch, registers(prg, cldev))

    def softmax_source() -> str:
        e = fl.exp(a - a.max(axis=-1, keepdims=True))
        return fl.show_code(e / e.sum(axis=-1, keepdims=True))

    def softmax() -> None:
        e = fl.exp(a - a.max(axis=-1, keepdims=True))
        out[...] = e / e.sum(axis=-1, keepdims=True)

    verbose = ["-cl-nv-verbose"] if "NVIDIA" in cldev.platform.name else []
    if args.specialise:
        fl.register_recipe("gpu", make_gpu_rows(), kind="reduction", name="probe-default")
        src = softmax_source()
        group = int(re.search(r"reqd_work_group_size\((\d+)", src).group(1))
        scalars = {"p0": np.int32(c), "N": np.int32(r), "NE": np.int32(c)}
        for label, edited in specialised_sources(src):
            prg = cl.Program(ctx, edited).build(options=verbose)
            knl = prg.fuseloop_rows
            params = re.search(r"fuseloop_rows\(([^)]*)\)", edited).group(1).split(",")
            names = [q.split()[-1].lstrip("*") for q in params]
            kargs = [out.data if n == "out0" else a.data if n == "in0" else scalars[n]
                     for n in names]

            def launch(knl=knl, kargs=kargs, group=group) -> None:
                knl(queue, (r * group,), (group,), *kargs)

            report(f"fuseloop source, {label}", launch, registers(prg, cldev))
    for group, items, lanes in args_variants(args.fuseloop_variants):
        name = f"probe-softmax-{group}-{items}-{lanes}"
        fl.register_recipe("gpu", make_gpu_rows(group, items, lanes),
                           kind="reduction", name=name)
        # the register count of the kernel just built, rebuilt from its source
        src = softmax_source()
        prg = cl.Program(ctx, src).build(options=verbose)
        report(f"fuseloop {group}x{items} lanes {lanes}", softmax, registers(prg, cldev))


def specialised_sources(src: str) -> list[tuple[str, str]]:
    """fuseloop's softmax source edited as if the row length were known.

    Valid only for rows that fit the cache (the probe's 2^13 columns): the
    tail loops never run there, and every bounds guard is true.
    """
    tails = re.compile(r"for \(int (\w+_t) = 0; [^;]*; \+\+\w+\)")
    no_tails = tails.sub(r"for (int \1 = 0; \1 < 0; ++\1)", src)
    guard = re.compile(r"^\s*if \([^\n]*(?:p0|NE) >= 0\)\s*$", re.M)
    return [("as generated", src), ("no tail loops", no_tails),
            ("no bounds guards", guard.sub("", src)),
            ("neither", guard.sub("", no_tails))]


def args_variants(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in part.split(":")) for part in text.split(",")]


if __name__ == "__main__":
    main()
