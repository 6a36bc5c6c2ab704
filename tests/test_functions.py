"""User functions: OpenCL bodies (VEX_FUNCTION) and traced Python functions."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl


def test_opencl_body_function(device):
    squared_radius = fl.function("float squared_radius(float x, float y)",
                                 "return x * x + y * y;")
    rng = np.random.default_rng(0)
    a, b = rng.random(500, dtype=np.float32), rng.random(500, dtype=np.float32)
    x, y = fl.asarray(a), fl.asarray(b)
    z = fl.sqrt(squared_radius(x, y))
    assert "squared_radius(" in fl.show_code(z)
    np.testing.assert_allclose(z.get(), np.sqrt(a * a + b * b), rtol=1e-6)
    nested = squared_radius(fl.sin(x + y), fl.cos(x - y))
    np.testing.assert_allclose(nested.get(), np.sin(a + b) ** 2 + np.cos(a - b) ** 2,
                               rtol=1e-5)
    assert z.dtype == np.float32


def test_function_arguments_are_converted(device):
    twice = fl.function("int twice(int v)", "return 2 * v;")
    x = fl.asarray(np.array([1.9, -2.5, 3.0]))
    np.testing.assert_array_equal(twice(x).get(), [2, -4, 6])
    assert twice(x).dtype == np.int32
    with pytest.raises(TypeError):
        twice(x, x)
    with pytest.raises(TypeError):
        twice(3)


def test_traced_python_function(device):
    @fl.function
    def hypot2(x, y):
        return fl.sqrt(x * x + y * y)

    a = np.linspace(0, 1, 300, dtype=np.float32)
    x = fl.asarray(a)
    fl.reset_stats()
    r = (hypot2(x, 2 * x) + 1).get()
    assert fl.stats()["kernels_launched"] == 1  # traced into one fused kernel
    np.testing.assert_allclose(r, np.sqrt(5 * a * a) + 1, rtol=1e-6)
    assert hypot2(3.0, 4.0) == 5.0  # plain numbers run as Python


def test_bad_body_reports_source_and_log(device):
    broken = fl.function("float broken(float x)", "return x +* ;")
    x = fl.asarray(np.ones(4, np.float32))
    before = fl.stats()["kernels_compiled"]
    with pytest.raises(fl.errors.KernelBuildError) as info:
        broken(x).get()
    assert "broken" in info.value.source and info.value.build_log
    assert "generated source" in str(info.value)
    assert fl.stats()["kernels_compiled"] == before
    with pytest.raises(fl.errors.KernelBuildError):  # not cached: fails again, same way
        broken(x).get()


def test_unknown_function_in_body(device):
    f = fl.function("float f(float x)", "return no_such_function(x);")
    with pytest.raises(fl.errors.KernelBuildError):
        f(fl.asarray(np.ones(3, np.float32))).get()


def test_bad_signatures():
    with pytest.raises(ValueError):
        fl.function("not a signature", "return 1;")
    with pytest.raises(fl.errors.DTypeError):
        fl.function("float3 f(float x)", "return x;")
    with pytest.raises(TypeError):
        fl.function("float f(float x)")


def test_unknown_top_level_name():
    with pytest.raises(fl.errors.UnknownFunctionError, match="did you mean"):
        fl.arcsinn  # noqa: B018
    with pytest.raises(AttributeError):
        fl.no_such_thing  # noqa: B018


def test_function_named_like_a_builtin_runs_its_own_body(device):
    # emitted under its bare name, ``exp`` resolved to OpenCL's builtin and the body was
    # silently ignored (issue 23)
    a = np.array([1.0, 2.0, -0.5], np.float32)
    x = fl.asarray(a)
    my_exp = fl.function("float exp(float x)", "return x + 1;")
    my_sin = fl.function("float sin(float x)", "return 2 * x;")
    np.testing.assert_array_equal(my_exp(x).get(), a + 1)
    np.testing.assert_array_equal((my_sin(x) + fl.sin(x)).get(), 2 * a + np.sin(a))
    np.testing.assert_allclose((my_exp(x) * fl.exp(x)).get(), (a + 1) * np.exp(a), rtol=1e-6)


def test_same_name_different_bodies_in_one_expression(device):
    # both calls ran the first body: [4, 6] for [12, 23] (issue 23)
    a = np.array([1.0, 2.0], np.float32)
    x = fl.asarray(a)
    f1 = fl.function("float f(float x)", "return 10 * x + 1;")
    f2 = fl.function("float f(float x)", "return x + 1;")
    np.testing.assert_array_equal((f1(x) + f2(x)).get(), [13, 24])
    np.testing.assert_array_equal((f1(x) + f2(x)).get(), 11 * a + 2)
    # the other order, and each alone, are separate kernels with their own bodies
    np.testing.assert_array_equal((f2(x) - f1(x)).get(), -9 * a)
    np.testing.assert_array_equal(f2(x).get(), a + 1)
    np.testing.assert_array_equal(f1(x).get(), 10 * a + 1)
    assert f1.key != f2.key and f1.c_name != f2.c_name
    # one definition written twice is one function (one kernel, one emitted name)
    assert fl.function("float f(float x)", "return x + 1;").key == f2.key


def test_unreferenced_functions_are_forgotten(device):
    import gc

    from fuseloop import launching

    a = np.array([1.0, 2.0, 3.0], np.float32)
    x = fl.asarray(a)
    body = "return x * x - 7;"
    f = fl.function("float forgotten_fn(float x)", body)
    key = f.key
    np.testing.assert_array_equal(f(x).get(), a * a - 7)
    assert launching.user_functions[key] is f
    del f
    fl.synchronize()  # lets go of the registry of recent lazy arrays
    gc.collect()
    assert key not in launching.user_functions
    # defined again, it is found under the same key and its cached kernel still runs
    fl.reset_stats()
    g = fl.function("float forgotten_fn(float x)", body)
    assert g.key == key
    np.testing.assert_array_equal(g(x).get(), a * a - 7)
    assert fl.stats()["kernels_lowered"] == 0
    # a new definition is lowered with the function that is alive
    h = fl.function("float forgotten_fn(float x)", "return x * x - 8;")
    np.testing.assert_array_equal((h(x) + g(x)).get(), 2 * a * a - 15)


# {{{ dependencies, pointer parameters, constant memory (issue 28)

def test_function_dependencies_are_emitted_first(device):
    a = np.array([1.0, 2.0, -3.0], np.float32)
    x = fl.asarray(a)
    sq = fl.function("float sq(float x)", "return x * x;")
    norm2 = fl.function("float norm2(float x, float y)", "return sq(x) + sq(y);",
                        depends=[sq])
    # two levels: the body calls both a dependency and its dependency
    f = fl.function("float f(float x)", "return norm2(x, 1) - sq(x);", depends=[norm2, sq])
    code = fl.show_code(f(x) * 2)
    # each function once, every function after the ones it calls
    assert code.count(f"{sq.c_name}(float x)") == 1
    assert (code.index(f"{sq.c_name}(float x)") < code.index(f"{norm2.c_name}(float x")
            < code.index(f"{f.c_name}(float x)"))
    np.testing.assert_array_equal(f(x).get(), np.ones(3, np.float32))
    np.testing.assert_array_equal((norm2(x, x) + sq(x)).get(), 3 * a * a)
    # a dependency of one name with another body is another function, another key
    sq2 = fl.function("float sq(float x)", "return 2 * x;")
    norm2b = fl.function("float norm2(float x, float y)", "return sq(x) + sq(y);",
                         depends=[sq2])
    assert norm2b.key != norm2.key
    np.testing.assert_array_equal((norm2(x, x) - norm2b(x, x)).get(), 2 * a * a - 4 * a)
    with pytest.raises(TypeError):
        fl.function("float g(float x)", "return x;", depends=[np.sin])


def test_traced_function_calls_other_functions(device):
    sq = fl.function("float sq(float x)", "return x * x;")

    @fl.function
    def shifted(x):
        return x + 1

    @fl.function
    def both(x):
        return sq(shifted(x)) * 2

    a = np.array([0.5, 1.0, 2.0], np.float32)
    fl.reset_stats()
    np.testing.assert_array_equal(both(fl.asarray(a)).get(), 2 * (a + 1) ** 2)
    assert fl.stats()["kernels_launched"] == 1


def test_dependency_cycles_are_refused():
    with pytest.raises(fl.errors.DependencyCycleError, match="f -> f"):
        fl.function("float f(float x)", "return x < 1 ? x : f(x / 2);")

    @fl.function
    def down(x):
        return up(x) + 1

    @fl.function
    def up(x):
        return down(x) * 2

    with pytest.raises(fl.errors.DependencyCycleError, match="down -> up -> down"):
        down(fl.asarray(np.ones(2, np.float32)))


_ACCEL = """
    float s = 0;
    for (int j = 0; j < n; ++j) {
        float d = p[j] - p[i];
        float r2 = d * d + q[j] * q[j] - 2 * q[j] * q[i] + q[i] * q[i] + eps;
        s += m[j] * d / (r2 * sqrt(r2));
    }
    return s;
"""


def _nbody_reference(p, q, m, eps):
    dp = p[None, :] - p[:, None]
    dq = q[None, :] - q[:, None]
    r2 = (dp * dp + dq * dq + eps).astype(np.float64)
    return (m[None, :] * dp / (r2 * np.sqrt(r2))).sum(axis=1)


def test_pointer_arguments_nbody(device):
    # VexCL's N-body example: each body's acceleration sums over all bodies by a loop
    # inside the function, reading whole arrays through pointers
    accel = fl.function(
        "float accel(int i, int n, float eps, global const float *p, "
        "global const float *q, global const float *m)", _ACCEL)
    n, eps = 96, 1e-2
    rng = np.random.default_rng(1)
    xs, ys, ms = (rng.random(n, dtype=np.float32) for _ in range(3))
    x, y, m = fl.asarray(xs), fl.asarray(ys), fl.asarray(ms)
    ax = accel(fl.index, n, eps, x, y, m)
    ay = accel(fl.index, n, eps, y, x, m)
    assert ax.shape == (n,)
    np.testing.assert_allclose(ax.get(), _nbody_reference(xs, ys, ms, eps), rtol=2e-3,
                               atol=1e-2)
    np.testing.assert_allclose(ay.get(), _nbody_reference(ys, xs, ms, eps), rtol=2e-3,
                               atol=1e-2)
    # fused with elementwise work: an Euler step of the velocity, one kernel
    v = fl.zeros(n, np.float32)
    fl.reset_stats()
    v2 = (v + 0.5 * accel(fl.index, n, eps, x, y, m)).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(v2, 0.5 * _nbody_reference(xs, ys, ms, eps), rtol=2e-3,
                               atol=1e-2)


def test_pointer_argument_views_aliasing_and_gpu_recipe(device, restore_recipes):
    from fuseloop.recipes import gpu_coalesced

    rev = fl.function("float rev(int i, int n, global const float *x)",
                      "return x[n - 1 - i];")
    a = np.arange(12, dtype=np.float32)
    x = fl.asarray(a)
    # a view with an offset points at its first element
    np.testing.assert_array_equal(rev(fl.index, 5, x[3:8]).get(), a[3:8][::-1])
    # a strided view is passed as a contiguous copy
    np.testing.assert_array_equal(rev(fl.index, 6, x[::2]).get(), a[::2][::-1])
    # a lazy call sees the array as it was when the call was built
    before = rev(fl.index, 12, x)
    x[0] = 100
    np.testing.assert_array_equal(before.get(), a[::-1])
    x[0] = 0
    # writing the array a pointer reads: every element is read, so through a temporary
    x[...] = rev(fl.index, 12, x) + x
    np.testing.assert_array_equal(x.get(), a[::-1] + a)
    # the GPU's elementwise recipe hoists loads, not the arrays pointers point at
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    y = fl.asarray(a)
    r = rev(fl.index, 12, y) * y
    code = fl.show_code(r)
    assert re.search(r"_rev\(.*, in\d+\)", code)
    np.testing.assert_array_equal(r.get(), a[::-1] * a)


def test_pointer_argument_errors(device):
    f = fl.function("float f(int i, global const float *x)", "return x[i];")
    x = fl.asarray(np.ones(4, np.float32))
    with pytest.raises(fl.errors.PointerArgumentError, match=r"global const float \*x"):
        f(fl.index, 2.0)
    with pytest.raises(fl.errors.PointerArgumentError):
        f(fl.index, np.ones(4, np.float32))
    with pytest.raises(fl.errors.PointerArgumentError, match="0-d"):
        f(fl.index, x[0])
    with pytest.raises(fl.errors.DTypeError, match="float64"):
        f(fl.index, fl.asarray(np.ones(4)))
    with pytest.raises(fl.errors.SignatureError):
        fl.function("float g(float *)", "return 0;")


def test_constant_arrays(device):
    a = np.linspace(0, 1, 16, dtype=np.float32)
    table = fl.constant(a)
    assert table.shape == (16,) and table.dtype == np.float32
    x = fl.asarray(a * 2)
    # elementwise reads, gathers and pointer arguments all read constant memory
    prod = x * table
    if device.backend == "opencl":  # (CUDA has no constant-space pointers: read-only global)
        assert re.search(r"__constant float \*(__restrict__ )?in\d", fl.show_code(prod))
    np.testing.assert_allclose(prod.get(), 2 * a * a)
    idx = fl.asarray(np.array([5, 0, 15], np.int64))
    gathered = table[idx] + 1
    assert "__constant" in fl.show_code(gathered)
    np.testing.assert_allclose(gathered.get(), a[[5, 0, 15]] + 1)
    total = fl.function("float total(int i, int n, constant float *t)",
                        "float s = 0; for (int j = 0; j <= i; ++j) s += t[j]; return s;")
    r = total(fl.index, 16, table)
    assert "__constant float *t" in fl.show_code(r)
    np.testing.assert_allclose(r.get(), np.cumsum(a), rtol=1e-5)
    # the same expression on a plain array is another kernel (global memory)
    assert "__constant" not in fl.show_code(x * fl.asarray(a))
    with pytest.raises(fl.errors.ConstantMemoryError, match="global"):
        fl.function("float g(int i, global const float *t)", "return t[i];")(fl.index, table)
    with pytest.raises(fl.errors.ConstantMemoryError, match=r"fl\.constant"):
        total(fl.index, 16, x)
    limit = fl.get_device().max_constant_buffer_size
    n = limit // 4 + 1
    with pytest.raises(fl.errors.ConstantMemoryError, match=rf"\({n},\).*{limit} bytes"):
        fl.constant(np.zeros(n, np.float32))
    assert fl.constant(2.5).value == 2.5  # a scalar is still a literal

# }}}
