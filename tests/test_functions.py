"""User functions: OpenCL bodies (VEX_FUNCTION) and traced Python functions."""

from __future__ import annotations

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
