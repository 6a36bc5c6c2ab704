"""The README's first example, with checks against numpy.

Run: python examples/quickstart.py
"""

import numpy as np

import fuseloop as fl

n = 2**16  # the README uses 10**7; anything works
rng = np.random.default_rng(0)
xh = rng.random(n, dtype=np.float32)
yh = rng.random(n, dtype=np.float32)

print(f"device: {fl.get_device().name}")
x = fl.asarray(xh)
y = fl.asarray(yh)

# Building an expression runs nothing.
before = fl.stats()["kernels_launched"]
z = 2 * x - fl.sin(y) + x * y
assert fl.stats()["kernels_launched"] == before, "building an expression must not launch"
assert isinstance(z, fl.Array) and z.shape == (n,) and z.dtype == np.float32

# .get() evaluates: one kernel, a numpy array comes back.
zh = z.get()
assert isinstance(zh, np.ndarray)
assert fl.stats()["kernels_launched"] == before + 1, "one expression, one kernel"
np.testing.assert_allclose(zh, 2 * xh - np.sin(yh) + xh * yh, rtol=1e-5, atol=1e-6)
print("z = 2*x - sin(y) + x*y: one kernel, matches numpy")

# Two results from one kernel.
before = fl.stats()["kernels_launched"]
a, b = fl.compute(x + y, x - y)
assert fl.stats()["kernels_launched"] == before + 1
np.testing.assert_allclose(a.get(), xh + yh, rtol=1e-6)
np.testing.assert_allclose(b.get(), xh - yh, rtol=1e-6, atol=1e-7)
print("a, b = compute(x + y, x - y): one kernel for both")

# Writing into an existing buffer.
out = fl.empty_like(x)
out[...] = fl.exp(-x * x)
np.testing.assert_allclose(out.get(), np.exp(-xh * xh), rtol=1e-5)
print("out[...] = exp(-x*x): written into a preallocated array")

# In-place update. Pending lazy expressions that read x keep the value x had when they were
# built (fuseloop evaluates them before overwriting x).
x += 1
np.testing.assert_allclose(x.get(), xh + 1, rtol=1e-6)
np.testing.assert_allclose(z.get(), 2 * xh - np.sin(yh) + xh * yh, rtol=1e-5, atol=1e-6)
print("x += 1: in place; z still holds the value computed from the old x")

# The OpenCL source that would run.
print()
print(fl.show_code(2 * x - fl.sin(y)))

# Python scalars are kernel arguments: 3*x - sin(y) reuses the kernel compiled for 2*x - sin(y).
(2 * x - fl.sin(y)).eval()
s = fl.stats()
w = (3 * x - fl.sin(y)).get()
s2 = fl.stats()
assert s2["kernels_lowered"] == s["kernels_lowered"], "a new scalar value must not re-lower"
assert s2["kernels_compiled"] == s["kernels_compiled"], "a new scalar value must not recompile"
np.testing.assert_allclose(w, 3 * (xh + 1) - np.sin(yh), rtol=1e-5, atol=1e-6)
print("3*x - sin(y) reused the compiled kernel of 2*x - sin(y)")
print()
print("stats:", fl.stats())
print("quickstart: all checks passed")
