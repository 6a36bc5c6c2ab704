"""VexCL's "vector expressions" examples, written with fuseloop.

Each VexCL statement is shown as a comment above its fuseloop form, evaluated on the default
device and checked against numpy. `X[...] = expr` writes into the existing array X, like
VexCL's `X = expr`; each such statement is one kernel.

Run: python examples/vector_expressions.py   (FUSELOOP_SHOW_KERNELS=1 prints every new kernel)
"""

import numpy as np

import fuseloop as fl

n = 2**16
dev = fl.get_device()
# VexCL's examples use double; fall back to float when the device has no fp64.
dtype = np.float64 if dev.has_fp64 else np.float32
ctype = "double" if dtype == np.float64 else "float"
rtol = 1e-12 if dtype == np.float64 else 1e-5
print(f"device: {dev.name}, dtype: {np.dtype(dtype).name}, n = {n}")

rng = np.random.default_rng(42)
x_h = rng.random(n).astype(dtype)
y_h = (rng.random(n) + 1).astype(dtype)  # in [1, 2), so 2*Y - sin(Z) > 0 below
z_h = rng.random(n).astype(dtype)
X, Y, Z = fl.asarray(x_h), fl.asarray(y_h), fl.asarray(z_h)


def check(name, arr, expected):
    np.testing.assert_allclose(arr.get(), expected, rtol=rtol, atol=rtol)
    print(f"ok  {name}")


def launched(before):
    return fl.stats()["kernels_launched"] - before


# --- Vector expressions --------------------------------------------------------------------
# X = 2 * Y - sin(Z);
X[...] = 2 * Y - fl.sin(Z)
x_h = 2 * y_h - np.sin(z_h)
check("X = 2*Y - sin(Z)", X, x_h)

# --- Builtin operations --------------------------------------------------------------------
# Z = sqrt(2 * X) + pow(cos(Y), 2.0);
Z[...] = fl.sqrt(2 * X) + fl.power(fl.cos(Y), 2.0)
z_h = np.sqrt(2 * x_h) + np.power(np.cos(y_h), 2.0)
check("Z = sqrt(2*X) + pow(cos(Y), 2.0)", Z, z_h)

# --- Constants -----------------------------------------------------------------------------
# A plain Python scalar is a kernel argument: 2*Y - sin(Z) and 42*Y - sin(Z) share a kernel.
(2 * Y - fl.sin(Z)).eval()
before = fl.stats()
W = (42 * Y - fl.sin(Z)).eval()
after = fl.stats()
assert after["kernels_lowered"] == before["kernels_lowered"]
assert after["kernels_compiled"] == before["kernels_compiled"]
check("42*Y - sin(Z) reuses the kernel of 2*Y - sin(Z)", W, 42 * y_h - np.sin(z_h))

# VEX_CONSTANT(two, 2);  X = two() * Y - sin(Z);
# fl.constant bakes the value into the kernel source instead.
two = fl.constant(2.0, dtype=dtype)
X[...] = two * Y - fl.sin(Z)
x_h = 2 * y_h - np.sin(z_h)
check("X = two() * Y - sin(Z)   (constant in the source)", X, x_h)
src_arg = fl.show_code(2 * Y - fl.sin(Z))
src_const = fl.show_code(two * Y - fl.sin(Z))
assert src_arg != src_const
print("    kernel with a constant:\n" + "\n".join("      " + ln for ln in src_const.splitlines()))

# vex::constants::two_pi() and friends: fl.constant(2 * np.pi) etc.
two_pi = fl.constant(2 * np.pi, dtype=dtype)

# --- Element indices -----------------------------------------------------------------------
# Linear function:
#   double x0 = 0.0, dx = 1.0 / (X.size() - 1);
#   X = x0 + dx * vex::element_index();
x0, dx = 0.0, 1.0 / (X.size - 1)
X[...] = x0 + dx * fl.arange(X.size, dtype=dtype)
x_h = x0 + dx * np.arange(n, dtype=dtype)
check("X = x0 + dx * element_index()", X, x_h)

# Single period of sine function:
#   Y = sin(vex::constants::two_pi() * vex::element_index() / Y.size());
Y[...] = fl.sin(two_pi * fl.arange(Y.size, dtype=dtype) / Y.size)
y_h = np.sin(2 * np.pi * np.arange(n, dtype=dtype) / n)
check("Y = sin(two_pi * element_index() / n)", Y, y_h)

# Fresh data for the rest.
x_h = rng.random(n).astype(dtype)
y_h = rng.random(n).astype(dtype)
z_h = rng.random(n).astype(dtype)
X[...] = fl.asarray(x_h)
Y[...] = fl.asarray(y_h)
Z[...] = fl.asarray(z_h)

# --- User-defined functions ----------------------------------------------------------------
# VEX_FUNCTION(double, squared_radius, (double, x)(double, y), return x * x + y * y;);
# Z = sqrt(squared_radius(X, Y));
squared_radius = fl.function(f"{ctype} squared_radius({ctype} x, {ctype} y)",
                             "return x * x + y * y;")
Z[...] = fl.sqrt(squared_radius(X, Y))
check("Z = sqrt(squared_radius(X, Y))   (OpenCL body)", Z, np.sqrt(x_h * x_h + y_h * y_h))


# The same function written in Python over scalars, traced into the expression.
@fl.function
def squared_radius_py(x, y):
    return x * x + y * y


Z[...] = fl.sqrt(squared_radius_py(X, Y))
check("Z = sqrt(squared_radius(X, Y))   (Python, traced)", Z, np.sqrt(x_h * x_h + y_h * y_h))

# Any expression may be an argument, including other function calls:
# Z = squared_radius(sin(X + Y), cos(X - Y));
Z[...] = squared_radius(fl.sin(X + Y), fl.cos(X - Y))
check("Z = squared_radius(sin(X + Y), cos(X - Y))", Z,
      np.sin(x_h + y_h) ** 2 + np.cos(x_h - y_h) ** 2)

# Functions calling functions (VEX_FUNCTION_D): compose traced Python functions.
bar = fl.function(lambda x: fl.sin(x) * fl.sin(x))
baz = fl.function(lambda x: fl.cos(x) * fl.cos(x))
foo = fl.function(lambda x, y: bar(x - y) * baz(x + y))
Z[...] = foo(X, Y)
check("Z = foo(X, Y) with foo(x, y) = bar(x - y) * baz(x + y)", Z,
      np.sin(x_h - y_h) ** 2 * np.cos(x_h + y_h) ** 2)

# Type conversion (VexCL's make_float example): b = make_float(a) / 2;
a_h = np.arange(n, dtype=np.int32)
A = fl.asarray(a_h)
B = fl.astype(A, np.float32) / 2
assert B.dtype == np.float32
np.testing.assert_allclose(B.get(), a_h.astype(np.float32) / 2)
print("ok  b = astype(a, float32) / 2")

# --- Tagged terminals and temporaries: not needed -------------------------------------------
# VexCL needs tag<>() to learn that two terminals are the same vector, and make_temp() to
# compute a repeated subexpression once. fuseloop's expression graph is hash-consed: the same
# array is loaded once and structurally equal subexpressions are computed once.
# Z = sqrt(tag<1>(X) * tag<1>(X) + tag<2>(Y) * tag<2>(Y));
Z[...] = fl.sqrt(X * X + Y * Y)
check("Z = sqrt(X*X + Y*Y)   (X and Y loaded once each)", Z, np.sqrt(x_h * x_h + y_h * y_h))



def calls(source, name):
    """Calls of `name` in the kernel function (helper functions precede it)."""
    return source[source.index("__kernel"):].count(f"{name}(")


# Y = log(X) * (log(X) + Z);   log(X) is computed once: the kernel calls log as often
# as that of log(X) + Z does (a recipe may call it on vectors, or unroll the loop)
expr = fl.log(X) * (fl.log(X) + Z)
src = fl.show_code(expr)
once = calls(fl.show_code(fl.log(X) + Z), "log")
print(f"    log(X) * (log(X) + Z): {calls(src, 'log')} log call(s) in the kernel, "
      f"as many as log(X) + Z has ({once})")
assert calls(src, "log") == once, src
z_now = np.sqrt(x_h * x_h + y_h * y_h)
Y[...] = expr
y_h = np.log(x_h) * (np.log(x_h) + z_now)
check("Y = log(X) * (log(X) + Z)", Y, y_h)

# auto tmp1 = make_temp<1>(sin(X)); auto tmp2 = make_temp<2>(cos(X));
# Y = (tmp1 - tmp2) * (tmp1 + tmp2);
s, c = fl.sin(X), fl.cos(X)  # plain Python names for lazy subexpressions
expr = (s - c) * (s + c)
src = fl.show_code(expr)
single = fl.show_code(fl.sin(X) + fl.cos(X))
assert calls(src, "sin") == calls(single, "sin") and calls(src, "cos") == calls(single, "cos"), src
Y[...] = expr
check("Y = (sin X - cos X) * (sin X + cos X)   (sin, cos once each)", Y,
      (np.sin(x_h) - np.cos(x_h)) * (np.sin(x_h) + np.cos(x_h)))

# --- Tuple assignment ----------------------------------------------------------------------
# vex::tie(X, Y) = std::make_tuple(X + Y, X - Y);
x_now, y_now = X.get(), Y.get()
before = fl.stats()["kernels_launched"]
S, D = fl.compute(X + Y, X - Y)
assert launched(before) == 1, "two results, one kernel"
X[...] = S
Y[...] = D
check("tie(X, Y) = (X + Y, X - Y): X", X, x_now + y_now)
check("tie(X, Y) = (X + Y, X - Y): Y", Y, x_now - y_now)

print()
print("stats:", fl.stats())
print("vector_expressions: all checks passed")
