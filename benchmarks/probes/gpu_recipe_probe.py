"""Probe GPU elementwise launch shapes with raw loopy + pyopencl (used to pick the GPU recipe).

Times ``2*x - sin(y) + x*y`` on 2^27 float32 for several work splits, next to the
device copy bandwidth measured in the same run (pyopencl buffer copy and torch).
"""
import sys

import loopy as lp
import numpy as np
import pymbolic.primitives as p
import pyopencl as cl

from fuseloop.bench.runner import median_time

lp.set_caching_enabled(False)
plat = [pl for pl in cl.get_platforms() if "NVIDIA" in pl.name]
dev = (plat[0] if plat else cl.get_platforms()[0]).get_devices()[0]
ctx = cl.Context([dev])
q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
n = 2**27 if len(sys.argv) < 2 else int(sys.argv[1])
rng = np.random.default_rng(0)
xh = rng.random(n, dtype=np.float32)
yh = rng.random(n, dtype=np.float32)
mf = cl.mem_flags
x = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=xh)
y = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=yh)
o = cl.Buffer(ctx, mf.READ_WRITE, size=4 * n)


def timeit(fn, reps=30):
    return median_time(fn, q.finish, reps, warmup=1)


copy_t = timeit(lambda: cl.enqueue_copy(q, o, x, byte_count=4 * n))
copy_bw = 8 * n / copy_t / 1e9
print(f"opencl buffer copy: {copy_bw:.0f} GB/s")
try:
    import torch

    tx = torch.from_numpy(xh).cuda()
    ty = torch.from_numpy(yh).cuda()
    to = torch.empty_like(tx)

    def tt(fn, reps=30):
        return median_time(fn, torch.cuda.synchronize, reps, warmup=1)

    print(f"torch copy: {8 * n / tt(lambda: to.copy_(tx)) / 1e9:.0f} GB/s")
    f = torch.compile(lambda a, b: 2 * a - torch.sin(b) + a * b)
    print(f"torch.compile expr: {12 * n / tt(lambda: f(tx, ty)) / 1e9:.0f} GB/s")
except Exception as e:
    print("torch unavailable:", e)


def variant(lsize, per_item, opts=()):
    i = p.Variable("i")
    X, Y, OUT, a = (p.Variable(s) for s in ("x", "y", "out", "a"))
    e = a * X[i] - p.Variable("sin")(Y[i]) + X[i] * Y[i]
    knl = lp.make_kernel(
        "{[i]: 0<=i<n}", [lp.Assignment(OUT[i], e)],
        [lp.GlobalArg("x", np.float32, shape=("n",)),
         lp.GlobalArg("y", np.float32, shape=("n",)),
         lp.GlobalArg("out", np.float32, shape=("n",), is_output=True),
         lp.ValueArg("a", np.float32), lp.ValueArg("n", np.int32)],
        target=lp.OpenCLTarget(), lang_version=(2018, 2), name="k")
    if per_item == 1:
        knl = lp.split_iname(knl, "i", lsize, outer_tag="g.0", inner_tag="l.0")
    else:
        knl = lp.split_iname(knl, "i", lsize * per_item, outer_tag="g.0")
        knl = lp.split_iname(knl, "i_inner", lsize, outer_tag="unr", inner_tag="l.0")
    src = lp.generate_code_v2(knl).device_code()
    k = cl.Program(ctx, src).build(options=list(opts)).k
    groups = (n + lsize * per_item - 1) // (lsize * per_item)
    t = timeit(lambda: k(q, (groups * lsize,), (lsize,), x, y, o, np.float32(2), np.int32(n)))
    res = np.empty(n, np.float32)
    cl.enqueue_copy(q, res, o)
    ok = np.allclose(res, 2 * xh - np.sin(yh) + xh * yh, rtol=1e-5, atol=1e-5)
    bw = 12 * n / t / 1e9
    print(f"lsize={lsize} per_item={per_item} opts={opts}: {bw:.0f} GB/s = "
          f"{bw / copy_bw:.1%} of copy, ok={ok}")


for lsize, per in [(256, 1), (512, 1), (1024, 1), (128, 4), (256, 2), (256, 4), (256, 8),
                   (512, 4), (128, 8)]:
    variant(lsize, per)
variant(256, 4, ("-cl-fast-relaxed-math",))
variant(256, 4, ("-cl-mad-enable",))
