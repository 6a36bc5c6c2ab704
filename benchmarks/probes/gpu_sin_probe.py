"""Where the time of ``2*x - sin(y) + x*y`` goes on a GPU: kernel shape, ``sin``, host launch.

Usage: python benchmarks/probes/gpu_sin_probe.py [log2 size] [--quick | --final]

``--final`` measures only the shipped recipe against its predecessors and a few shapes, adds
a 2^20 section and skips the accuracy sweep.

Measured in one process, on fuseloop's default device, next to the copy bandwidth:

* three timings of each case: ``wall`` (median of one call followed by a ``finish``, as
  benchmarks/bench_elementwise.py does), ``batch`` (20 calls back to back, then one
  ``finish``: the host work of a call overlaps the previous kernel) and, for raw kernels,
  ``event`` (the kernel's own duration from OpenCL profiling events);
* copy references: ``enqueue_copy`` and a hand-written copy kernel;
* hand-written OpenCL kernels of the expression (full tiles without bounds checks, a checked
  tail, float4 loads) with four ``sin`` variants: the builtin, fuseloop's float32 fast path,
  the fast path with a non-inlined fallback, and ``native_sin`` (inaccurate: a reference for
  what the arithmetic costs, not a candidate);
* fuseloop itself (``out[...] = expr``) with several recipes (registered through
  ``fl.register_recipe``) and ``sin`` variants (patched helper bodies), plus the event time of
  the same generated source launched directly;
* host cost of one call at 1024 elements (where the device time is negligible);
* accuracy of fuseloop's float32 sin/cos and of the builtin on this device, in ULPs against
  float64 numpy, over every 7th float32 in [0, 2^17] and a sample beyond.
"""

from __future__ import annotations

import statistics
import sys
import time

import loopy as lp
import numpy as np
import pyopencl as cl

import fuseloop as fl
import fuseloop.lower.kernel as fl_kernel
import fuseloop.lower.scalar_ops as fl_ops
import fuseloop.recipes as fl_recipes
from fuseloop.bench.runner import median_time

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
QUICK = "--quick" in sys.argv
FINAL = "--final" in sys.argv
LOG2 = int(ARGS[0]) if ARGS else 27
N = 2**LOG2
REPEAT = 7 if QUICK else 30
BATCH = 20


def log(*a: object) -> None:
    print(*a, flush=True)


dev = fl.get_device()
queue = dev.queue
ctx = dev.context
pq = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
kind = "nvidia" if dev.type == "gpu" and "nvidia" in dev.vendor.lower() else dev.type


def wall(fn, sync) -> float:
    return median_time(fn, sync, REPEAT, warmup=1)


def batch(fn, sync) -> float:
    return median_time(fn, sync, max(3, REPEAT // 4), warmup=1, batch=BATCH)


def event(launch) -> float:
    launch().wait()
    ts = []
    for _ in range(REPEAT):
        ev = launch()
        ev.wait()
        ts.append((ev.profile.end - ev.profile.start) * 1e-9)
    return statistics.median(ts)


rng = np.random.default_rng(0)
xh = rng.random(N, dtype=np.float32)
yh = rng.random(N, dtype=np.float32)
want = 2 * xh - np.sin(yh) + xh * yh
x, y = fl.asarray(xh), fl.asarray(yh)
out = fl.empty_like(x)
fl.synchronize()
xb, yb, ob = x.data, y.data, out.data

log(f"{dev.name} ({dev.platform}, driver {dev.driver_version}); n = 2^{LOG2} float32")
COPY_BYTES = 8 * N
EXPR_BYTES = 12 * N
ref: dict[str, float] = {}


def report(name: str, nbytes: int, **times: float) -> None:
    parts = []
    for how, t in times.items():
        bw = nbytes / t / 1e9
        base = ref.get(how) or ref.get("wall")
        pct = f" = {bw / base:6.1%}" if base else ""
        parts.append(f"{how} {t * 1e3:7.4f} ms {bw:6.0f} GB/s{pct}")
    log(f"  {name:58s} " + " | ".join(parts))


# {{{ copy references

log("\n# copy (reference: % columns below are of the enqueue_copy figure measured the same way)")
copy_w = wall(lambda: cl.enqueue_copy(queue, ob, xb, byte_count=4 * N), queue.finish)
copy_b = batch(lambda: cl.enqueue_copy(queue, ob, xb, byte_count=4 * N), queue.finish)
copy_e = event(lambda: cl.enqueue_copy(pq, ob, xb, byte_count=4 * N))
ref.update(wall=COPY_BYTES / copy_w / 1e9, batch=COPY_BYTES / copy_b / 1e9,
           event=COPY_BYTES / copy_e / 1e9)
report("pyopencl enqueue_copy", COPY_BYTES, wall=copy_w, batch=copy_b, event=copy_e)

copy_src = """
__kernel void __attribute__((reqd_work_group_size(256, 1, 1)))
k(__global float *restrict o, __global const float *restrict a, int n)
{ int i = get_global_id(0); if (i < n) o[i] = a[i]; }
"""
kc = cl.Program(ctx, copy_src).build().k
gs = ((N + 255) // 256 * 256,)
report("raw copy kernel 256x1", COPY_BYTES,
       wall=wall(lambda: kc(queue, gs, (256,), ob, xb, np.int32(N)), queue.finish),
       batch=batch(lambda: kc(queue, gs, (256,), ob, xb, np.int32(N)), queue.finish),
       event=event(lambda: kc(pq, gs, (256,), ob, xb, np.int32(N))))


try:
    import torch

    tx = torch.from_numpy(xh).cuda()
    to = torch.empty_like(tx)
    report("torch copy_", COPY_BYTES, wall=wall(lambda: to.copy_(tx), torch.cuda.synchronize),
           batch=batch(lambda: to.copy_(tx), torch.cuda.synchronize))
except Exception as e:  # no torch / no CUDA
    log("  torch copy_: skipped:", type(e).__name__, str(e)[:80])

# }}}

# {{{ sin variants (helper bodies)

# An experimental float32 sin/cos (not shipped: on the H200 it measured no faster than
# the builtin once the recipe issues all loads first; kept here to reproduce that).
# Beyond this |x| (and for inf/nan) the builtin sin/cos is called: its exact
# (Payne-Hanek) reduction handles any argument.  Below it the reduction
# x - q*pi/2 with pi/2 = P1 + P2 + P3 (float32 parts, fma) is accurate: q*P1 is
# cancelled exactly and the nearest float32 to a multiple of pi/2 is far larger
# than the neglected q*(pi/2 - P1 - P2 - P3).  Measured below: at most 1.5 ULP on
# the H200 and over every float32 in [0, 2**17] on PoCL (against float64 numpy).
TRIG_F32_FAST_LIMIT = 131072.0  # 2**17

# minimax polynomials on |r| <= 0.8 (the reduced range plus the rounding of
# x*2/pi), fitted for relative error with float32 coefficients:
#   sin r = r + r^3 (S0 + S1 z + S2 z^2 + S3 z^3),        z = r^2
#   cos r = 1 - z/2 + z^2 (C0 + C1 z + C2 z^2)
_TRIG_F32_CONSTANTS = """\
  const float two_over_pi = 0.63661975f;
  const float pio2_1 = 1.5707964f, pio2_2 = -4.371139e-08f, pio2_3 = -1.7151245e-15f;
  const float s0 = -0.16666667f, s1 = 0.008333378f, s2 = -0.00019852068f, s3 = 2.8203547e-06f;
  const float c0 = 0.04166664f, c1 = -0.001388713f, c2 = 2.4412086e-05f;
"""


def fast_trig_body(op: str) -> str:
    """sin/cos of float32 ``a`` with numpy's accuracy at a fraction of the builtin's cost.

    Only |x| is reduced (so -0 keeps its sign and the quadrant is never negative);
    both polynomials are evaluated and the quadrant picks one, without branches.
    """
    if op == "sin":
        pick = "(k & 1) ? c : s"
        # sin(-x) = -sin(x); quadrants 2 and 3 negate
        sign = "((uint)(k & 2) << 30) ^ (as_uint(a) & 0x80000000u)"
    else:
        pick = "(k & 1) ? s : c"
        sign = "(uint)((k + 1) & 2) << 30"  # quadrants 1 and 2 negate
    return (
        "float ax = fabs(a);\n"
        f"  if (!(ax <= {TRIG_F32_FAST_LIMIT:.1f}f)) return {op}(a);\n"
        + _TRIG_F32_CONSTANTS +
        "  float q = rint(ax * two_over_pi);\n"
        "  float r = fma(q, -pio2_1, ax);\n"
        "  r = fma(q, -pio2_2, r);\n"
        "  r = fma(q, -pio2_3, r);\n"
        "  int k = (int)q;\n"
        "  float z = r * r;\n"
        "  float s = fma(r * z, fma(z, fma(z, fma(z, s3, s2), s1), s0), r);\n"
        "  float c = fma(z, fma(z, fma(z, fma(z, c2, c1), c0), -0.5f), 1.0f);\n"
        f"  float v = {pick};\n"
        f"  return as_float(as_uint(v) ^ ({sign}));"
    )



FAST = fast_trig_body


def body_builtin(op: str) -> str:
    return f"return {op}(a);"


def body_native(op: str) -> str:  # inaccurate reference only
    return f"return native_{op}(a);"


def body_fast_noinline(op: str) -> str:
    return FAST(op).replace(f"return {op}(a);", f"return fl_{op}_f32_slow(a);")


NOINLINE_PRE = ("__attribute__((noinline)) float fl_sin_f32_slow(float a) { return sin(a); }\n"
                "__attribute__((noinline)) float fl_cos_f32_slow(float a) { return cos(a); }\n")
SIN_VARIANTS = {"builtin": body_builtin, "fast": FAST, "fast-noinline": body_fast_noinline,
                "native(ref)": body_native}


def helper_source(op: str, variant: str) -> str:
    body = SIN_VARIANTS[variant](op)
    pre = NOINLINE_PRE if variant == "fast-noinline" else ""
    return f"{pre}static inline float fl_{op}_f32(float a)\n{{\n  {body}\n}}\n"


def sin_source(variant: str) -> str:
    return helper_source("sin", variant)


# }}}

# {{{ hand-written kernels

RAW_TEMPLATE = """
{helper}
__kernel void __attribute__((reqd_work_group_size({L}, 1, 1)))
k(__global float *restrict o, __global const float *restrict x, __global const float *restrict y,
  float a, int n)
{{
  int base = get_group_id(0) * {T} + get_local_id(0);
  if (base + {L} * ({U} - 1) < n) {{
    float xv[{U}], yv[{U}];
    #pragma unroll
    for (int u = 0; u < {U}; ++u) {{ xv[u] = x[base + {L} * u]; yv[u] = y[base + {L} * u]; }}
    #pragma unroll
    for (int u = 0; u < {U}; ++u)
      o[base + {L} * u] = a * xv[u] - fl_sin_f32(yv[u]) + xv[u] * yv[u];
  }} else {{
    for (int u = 0; u < {U}; ++u) {{
      int i = base + {L} * u;
      if (i < n) o[i] = a * x[i] - fl_sin_f32(y[i]) + x[i] * y[i];
    }}
  }}
}}
"""

RAW_VEC4 = """
{helper}
__kernel void __attribute__((reqd_work_group_size({L}, 1, 1)))
k(__global float *restrict o, __global const float *restrict x, __global const float *restrict y,
  float a, int n)
{{
  int i4 = get_global_id(0);
  if (4 * i4 + 3 < n) {{
    float4 xv = vload4(i4, x), yv = vload4(i4, y);
    float4 s = (float4)(fl_sin_f32(yv.s0), fl_sin_f32(yv.s1), fl_sin_f32(yv.s2),
                        fl_sin_f32(yv.s3));
    vstore4(a * xv - s + xv * yv, i4, o);
  }} else {{
    for (int i = 4 * i4; i < n; ++i) o[i] = a * x[i] - fl_sin_f32(y[i]) + x[i] * y[i];
  }}
}}
"""


def check(name: str) -> str:
    got = out.get()[::997]
    ok = np.allclose(got, want[::997], rtol=2e-6, atol=2e-6)
    return "" if ok else f"    ^ result differs from numpy beyond 2e-6 ({name})"


def raw_case(name: str, src: str, L: int, per: int, vec: bool = False) -> None:
    try:
        k = cl.Program(ctx, src).build().k
    except Exception as e:
        log(f"  {name}: build failed: {str(e).splitlines()[0][:100]}")
        return
    groups = -(-N // (L * per))
    g = (groups * L,)

    def go(qq):
        return k(qq, g, (L,), ob, xb, yb, np.float32(2), np.int32(N))

    t_w = wall(lambda: go(queue), queue.finish)
    t_b = batch(lambda: go(queue), queue.finish)
    t_e = event(lambda: go(pq))
    report(name, EXPR_BYTES, wall=t_w, batch=t_b, event=t_e)
    bad = check(name)
    if bad:
        log(bad)


log("\n# hand-written kernels of 2*x - sin(y) + x*y (full tiles unchecked, checked tail)")
shapes = [(128, 4), (256, 1), (256, 2), (256, 4), (128, 8), (512, 2)]
if QUICK:
    shapes = [(128, 4), (256, 1)]
if FINAL:
    shapes = [(128, 4)]
for variant in (["builtin", "fast"] if FINAL else SIN_VARIANTS):
    helper = sin_source(variant)
    for L, U in shapes:
        raw_case(f"raw {L}x{U} sin={variant}",
                 RAW_TEMPLATE.format(helper=helper, L=L, U=U, T=L * U), L, U)
    if not FINAL:
        raw_case(f"raw float4 256 sin={variant}", RAW_VEC4.format(helper=helper, L=256),
                 256, 4, vec=True)

# }}}

# {{{ fuseloop with recipes


def rec_split(L: int, U: int, slabs: bool):
    def recipe(t_unit, device):
        t_unit = lp.split_iname(t_unit, "i", L * U, outer_tag="g.0",
                                slabs=(0, 1) if slabs else (0, 0))
        if U == 1:
            return lp.tag_inames(t_unit, {"i_inner": "l.0"})
        return lp.split_iname(t_unit, "i_inner", L, outer_tag="unr", inner_tag="l.0")
    return recipe


def rec_gridstride(L: int, G: int):
    def recipe(t_unit, device):
        t_unit = lp.split_iname(t_unit, "i", L * G)
        return lp.split_iname(t_unit, "i_inner", L, outer_tag="g.0", inner_tag="l.0")
    return recipe


def rec_hoisted(L: int, U: int):
    """The shipped GPU recipe (slabs, loads first) with another tile shape."""
    return fl_recipes.gpu_coalesced.with_params(group=L, items=U).transform


RECIPES = {
    "shipped": fl.recipe_for(dev).transform,
    "128x4 nested": rec_split(128, 4, False),
    "128x4 slabs": rec_split(128, 4, True),
    "256x4 slabs": rec_split(256, 4, True),
    "128x8 slabs": rec_split(128, 8, True),
    "256x2 slabs": rec_split(256, 2, True),
    "256x1": rec_split(256, 1, False),
    "gridstride 256 x 2048 groups": rec_gridstride(256, 2048),
    "loads-first 256x4": rec_hoisted(256, 4),
    "loads-first 128x8": rec_hoisted(128, 8),
    "loads-first 256x2": rec_hoisted(256, 2),
}
FL_CASES = [(r, "builtin") for r in RECIPES] + [(r, "fast") for r in RECIPES]
FL_CASES += [("128x4 slabs", "fast-noinline"), ("256x4 slabs", "fast-noinline"),
             ("128x4 slabs", "native(ref)"), ("256x1", "native(ref)")]
if FINAL:
    FL_CASES = [("shipped", "builtin"), ("shipped", "fast"), ("128x4 nested", "builtin"),
                ("128x4 slabs", "builtin"), ("loads-first 256x4", "builtin"),
                ("loads-first 128x8", "builtin"), ("loads-first 256x2", "builtin"),
                ("shipped", "native(ref)")]
if QUICK:
    FL_CASES = [("shipped", "fast"), ("128x4 slabs", "builtin"), ("128x4 slabs", "fast"),
                ("gridstride 256 x 2048 groups", "fast"), ("128x4 slabs", "fast-noinline")]


def set_variant(variant: str):
    orig = fl_ops.make_helper

    def make_helper(op, loop):
        h = orig(op, loop)
        if op in ("sin", "cos") and all(d == np.float32 for d in loop):
            h = h._replace(source=helper_source(op, variant))
        return h
    fl_kernel.make_helper = make_helper


def fl_expr() -> None:
    out[...] = 2 * x - fl.sin(y) + x * y


def geometry(ck) -> tuple[tuple, tuple]:
    """Local size and groups per axis of a compiled kernel (both plan signatures)."""
    for args in ((N, 1, ()), (N, ())):
        try:
            return tuple(ck.lsize(*args)), tuple(ck.gsize(*args))
        except TypeError:
            continue
    raise RuntimeError("unknown launch plan signature")


def fl_copy_case() -> None:
    out[...] = x


def fl_case(rname: str, variant: str, stmt, show, event_args, nbytes: int, what: str) -> None:
    set_variant(variant)
    rec_name = f"probe {rname} {variant} {what}"
    fl.register_recipe(kind, RECIPES[rname], name=rec_name, version="0")
    label = f"fuseloop {what} {rname}" + (f" sin={variant}" if what == "expr" else "")
    try:
        src = fl.show_code(show())
        t_w = wall(stmt, fl.synchronize)
        t_b = batch(stmt, fl.synchronize)
        bad = check(label) if what == "expr" else ""
        # the same generated source and launch geometry, launched directly (event timing)
        kn = cl.Program(ctx, src).build().fuseloop_kernel
        from fuseloop.cache import _memory  # probe only: the launch geometry
        ck = next(v for key, v in _memory.items() if key[3][0] == rec_name)
        local, groups = geometry(ck)
        glob = tuple(g * w for g, w in zip(groups, local))
        t_e = event(lambda: kn(pq, glob, local, *event_args))
        report(label, nbytes, wall=t_w, batch=t_b, event=t_e)
        if bad:
            log(bad)
    except Exception as e:
        log(f"  {label}: failed: {type(e).__name__}: "
            f"{str(e).splitlines()[0][:120] if str(e) else ''}")
    finally:
        fl_kernel.make_helper = orig_make_helper


orig_make_helper = fl_kernel.make_helper
log("\n# fuseloop: out[...] = x, per recipe (event: the generated source launched directly)")
copy_recipes = ["shipped", "128x4 slabs", "256x4 slabs", "256x1", "gridstride 256 x 2048 groups"]
if QUICK or FINAL:
    copy_recipes = ["shipped", "128x4 nested", "128x4 slabs"]
for rname in copy_recipes:
    fl_case(rname, "fast", fl_copy_case, lambda: x, (ob, xb, np.int32(N)), COPY_BYTES, "copy")

log("\n# fuseloop: out[...] = 2*x - sin(y) + x*y, per recipe and sin variant"
    " (event: the same generated source launched directly)")
for rname, variant in FL_CASES:
    fl_case(rname, variant, fl_expr, lambda: 2 * x - fl.sin(y) + x * y,
            (ob, xb, yb, np.float32(2), np.int32(N)), EXPR_BYTES, "expr")
fl.register_recipe(kind, RECIPES["shipped"], name="probe shipped again", version="0")

# }}}

# {{{ 2^20 elements (where a call's host work is a large part of its time)

if FINAL and N >= 2**20:
    n20 = 2**20
    log("\n# n = 2^20 (% of the enqueue_copy figure at 2^20 measured the same way)")
    x20, y20 = fl.asarray(xh[:n20]), fl.asarray(yh[:n20])
    o20 = fl.empty_like(x20)
    fl.synchronize()
    saved = dict(ref)

    def copy20():
        return cl.enqueue_copy(queue, o20.data, x20.data, byte_count=4 * n20)

    def copy20_ev():
        return cl.enqueue_copy(pq, o20.data, x20.data, byte_count=4 * n20)

    c_w, c_b, c_e = wall(copy20, queue.finish), batch(copy20, queue.finish), event(copy20_ev)
    ref.update(wall=8 * n20 / c_w / 1e9, batch=8 * n20 / c_b / 1e9, event=8 * n20 / c_e / 1e9)
    report("pyopencl enqueue_copy", 8 * n20, wall=c_w, batch=c_b, event=c_e)
    k20 = cl.Program(ctx, RAW_TEMPLATE.format(helper=sin_source("builtin"), L=128, U=4,
                                              T=512)).build().k

    def raw20(qq):
        return k20(qq, (n20 // 4,), (128,), o20.data, x20.data, y20.data, np.float32(2),
                   np.int32(n20))

    report("raw 128x4 sin=builtin (expr)", 12 * n20, wall=wall(lambda: raw20(queue), queue.finish),
           batch=batch(lambda: raw20(queue), queue.finish), event=event(lambda: raw20(pq)))

    def fl_copy20():
        o20[...] = x20

    def fl_expr20():
        o20[...] = 2 * x20 - fl.sin(y20) + x20 * y20

    report("fuseloop out[...] = x (shipped)", 8 * n20, wall=wall(fl_copy20, fl.synchronize),
           batch=batch(fl_copy20, fl.synchronize))
    report("fuseloop out[...] = 2*x - sin(y) + x*y (shipped)", 12 * n20,
           wall=wall(fl_expr20, fl.synchronize), batch=batch(fl_expr20, fl.synchronize))
    ref.clear()
    ref.update(saved)

# }}}

# {{{ host cost per call at 1024 elements

log("\n# host cost per call, 1024 elements (batch of 2000 calls, one finish)")
xs, ys = fl.asarray(xh[:1024]), fl.asarray(yh[:1024])
os_ = fl.empty_like(xs)
fl.synchronize()


def per_call(fn, sync, calls=2000) -> float:
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t) / calls


def small_copy() -> None:
    os_[...] = xs


def small_expr() -> None:
    os_[...] = 2 * xs - fl.sin(ys) + xs * ys


def kc_small():
    return kc(queue, (1024,), (256,), os_.data, xs.data, np.int32(1024))


def small_enqueue_copy():
    return cl.enqueue_copy(queue, os_.data, xs.data, byte_count=4096)


def round_trip():
    kc_small()
    queue.finish()


for label, fn, sync in [("fuseloop out[...] = x", small_copy, fl.synchronize),
                        ("fuseloop out[...] = 2*x - sin(y) + x*y", small_expr, fl.synchronize),
                        ("pyopencl kernel call (raw copy kernel)", kc_small, queue.finish),
                        ("pyopencl enqueue_copy", small_enqueue_copy, queue.finish),
                        ("pyopencl kernel call + finish, each call", round_trip, queue.finish)]:
    log(f"  {label:42s} {per_call(fn, sync) * 1e6:6.1f} us")

# }}}

if FINAL:
    sys.exit(0)

# {{{ accuracy on this device

log("\n# accuracy in ULPs against float64 numpy (every 7th float32 in [0, 2^17], "
    "and a random sample of all finite float32)")
acc_src = (helper_source("sin", "fast") + helper_source("cos", "fast") + """
__kernel void k(__global const float *xin, __global float *r, int n)
{
  int i = get_global_id(0);
  if (i < n) {
    float a = xin[i];
    r[i] = fl_sin_f32(a); r[n + i] = fl_cos_f32(a); r[2 * n + i] = sin(a);
    r[3 * n + i] = cos(a);
  }
}
""")
ka = cl.Program(ctx, acc_src).build().k


def ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    r32 = np.abs(ref).astype(np.float32)
    e = np.floor(np.log2(np.maximum(r32, np.float32(2.0**-126)))).astype(np.int32)
    return np.abs(got.astype(np.float64) - ref) / np.ldexp(1.0, e - 23)


worst = {k: (0.0, 0.0) for k in ("fast sin", "fast cos", "builtin sin", "builtin cos")}
CH = 2**25
limit = 0x48000001
samples = [np.arange(s, min(s + 7 * CH, limit), 7, dtype=np.uint32)
           for s in range(0, limit, 7 * CH)]
if QUICK:
    samples = samples[::8]
bits = rng.integers(0, 0x7F800000, 2**22, dtype=np.uint32)
samples.append(bits)
samples.append(bits | np.uint32(0x80000000))
t0 = time.perf_counter()
with np.errstate(all="ignore"):
    for s in samples:
        xv = s.view(np.float32)
        n = xv.size
        xin = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=xv)
        rb = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 16 * n)
        ka(queue, (-(-n // 256) * 256,), (256,), xin, rb, np.int32(n))
        res = np.empty(4 * n, np.float32)
        cl.enqueue_copy(queue, res, rb)
        x64 = xv.astype(np.float64)
        rs, rc = np.sin(x64), np.cos(x64)
        for j, (name, refv) in enumerate(zip(worst, (rs, rc, rs, rc))):
            e = ulps(res[j * n:(j + 1) * n], refv)
            i = int(np.argmax(e))
            if e[i] > worst[name][0]:
                worst[name] = (float(e[i]), float(x64[i]))
for name, (e, at) in worst.items():
    log(f"  {name}: max {e:.3f} ulp (at x = {at!r})")
special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 3e38, -3e38,
                    131072.0, 131072.01, 1e5, 1e7], np.float32)
xin = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=special)
rb = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 16 * special.size)
ka(queue, (special.size,), None, xin, rb, np.int32(special.size))
res = np.empty(4 * special.size, np.float32)
cl.enqueue_copy(queue, res, rb)
res = res.reshape(4, -1)
for j, v in enumerate(special):
    with np.errstate(all="ignore"):
        ns, nc = np.sin(v), np.cos(v)
    log(f"  x={v!r:>14}: fast sin {res[0, j]!r} cos {res[1, j]!r} | builtin sin {res[2, j]!r} "
        f"cos {res[3, j]!r} | numpy sin {ns!r} cos {nc!r}")
log(f"  ({time.perf_counter() - t0:.0f} s)")

# }}}
