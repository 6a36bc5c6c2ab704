"""The CPU recipe's math builtins on vectors (fuseloop.recipes.cpu_vector).

Results against numpy in float64 for every vectorised builtin, at sizes that end
in a full chunk, a partial chunk and a partial block of 8; the generated code
(one ``float8``/``double8`` call per block of 8 elements); and the kernels that
the transform must leave alone.  The code tests of the transform itself build
their Loopy kernels here and need no device.
"""

from __future__ import annotations

import re

import islpy as isl
import loopy as lp
import numpy as np
import pymbolic.primitives as prim
import pytest

import fuseloop as fl
from fuseloop.lower.kernel import HelperCallable
from fuseloop.lower.scalar_ops import make_helper
from fuseloop.recipes import CPU_CHUNK
from fuseloop.recipes.cpu_vector import (
    LANES,
    pocl_target_cpu,
    through_double_width,
    vector_builtins,
    vectorise_math_calls,
)

UNARY = ["sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
         "arcsinh", "arccosh", "arctanh", "exp", "exp2", "expm1", "log", "log2", "log10",
         "log1p", "cbrt", "sqrt", "floor", "ceil", "trunc", "rint", "absolute"]
BINARY = ["arctan2", "hypot", "power", "fmod", "copysign", "fmin", "fmax"]
# sizes: less than a block, partial blocks, one full chunk, chunks and a partial one
SIZES = [1, 7, 13, CPU_CHUNK, 3 * CPU_CHUNK + 21]


def _argument(op: str, n: int, dtype: type, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo, hi = {"arcsin": (-1, 1), "arccos": (-1, 1), "arctanh": (-0.99, 0.99),
              "arccosh": (1, 30), "log": (1e-3, 50), "log2": (1e-3, 50),
              "log10": (1e-3, 50), "log1p": (-0.9, 50), "power": (0.1, 4)}.get(op, (-8, 8))
    return rng.uniform(lo, hi, n).astype(dtype)


def _tolerance(dtype: type) -> dict:
    return {"rtol": 2e-6, "atol": 2e-6} if dtype is np.float32 else {"rtol": 1e-13,
                                                                       "atol": 1e-13}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", UNARY)
def test_unary_builtins_match_numpy(cpu, op, dtype):
    for n in SIZES:
        h = _argument(op, n, dtype)
        x = fl.asarray(h)
        # arithmetic around the call: lanes are read back into the element loop
        got = (getattr(fl, op)(x) * 2 + x).get()
        want = getattr(np, op)(h.astype(np.float64)) * 2 + h
        np.testing.assert_allclose(got, want, **_tolerance(dtype), err_msg=f"{op} n={n}")
        assert got.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", BINARY)
def test_binary_builtins_match_numpy(cpu, op, dtype):
    for n in SIZES:
        a, b = _argument(op, n, dtype, 1), _argument(op, n, dtype, 2)
        if op == "fmod":
            b = np.where(np.abs(b) < 0.5, dtype(0.5), b)
        got = getattr(fl, op)(fl.asarray(a), fl.asarray(b)).get()
        want = getattr(np, op)(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(got, want, **_tolerance(dtype), err_msg=f"{op} n={n}")


def test_special_values(cpu):
    h = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1.0, 88.8, -104.0, 1e30,
                  3.0, 0.5, 2.0, -2.5, 700.0, 1.0], np.float32)
    x = fl.asarray(h)
    with np.errstate(all="ignore"):
        for op in ("exp", "log", "sin", "tanh", "log1p", "expm1"):
            got = getattr(fl, op)(x).get()
            want = getattr(np, op)(h.astype(np.float64)).astype(np.float32)
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30, err_msg=op)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=op)


def _scalar_chunks(t_unit, device):
    return lp.split_iname(t_unit, "i", CPU_CHUNK, outer_tag="g.0")


def _ulps_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in representable values (0 where both are NaN, huge where one is)."""
    ints = {4: np.int32, 8: np.int64}[a.itemsize]
    ia, ib = a.view(ints).astype(object), b.view(ints).astype(object)
    # map the bit patterns onto a line: negative floats count down from zero
    sign = 1 << (8 * a.itemsize - 1)
    la = np.where(ia < 0, -(ia + sign), ia)
    lb = np.where(ib < 0, -(ib + sign), ib)
    far = np.abs(la - lb)
    far[np.isnan(a) & np.isnan(b)] = 0
    far[np.isnan(a) != np.isnan(b)] = 1 << 62
    return far


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_builtins_agree_with_scalar_ones_in_mixed_lanes(pocl, restore_recipes, dtype):
    """Every lane of a vector holds an unrelated value (random bit patterns: every
    magnitude, subnormals, infinities, NaN), as in real data; PoCL's float8 sin
    failed this for small lanes beside large ones."""
    dt = np.dtype(dtype)
    ints = {4: np.uint32, 8: np.uint64}[dt.itemsize]
    rng = np.random.default_rng(5)
    n = 8 * CPU_CHUNK + 3
    a = rng.integers(0, np.iinfo(ints).max, n, dtype=ints, endpoint=True).view(dt)
    b = rng.integers(0, np.iinfo(ints).max, n, dtype=ints, endpoint=True).view(dt)
    a[:64] = rng.uniform(-10, 10, 64)  # and some ordinary values among them
    x, y = fl.asarray(a), fl.asarray(b)
    ops = [(name.split("_")[1], call.arity) for name, call in vector_builtins().items()
           if name.endswith("_f32" if dtype is np.float32 else "_f64")]
    assert len(ops) >= 20

    def results():
        # all in one kernel (one compile): its calls are independent of each other
        got = fl.compute(*[getattr(fl, op)(x) if arity == 1 else getattr(fl, op)(x, y)
                           for op, arity in ops])
        return {op: r.get() for (op, _), r in zip(ops, got, strict=True)}

    vector = results()
    assert "_fl_va" in fl.show_code(fl.exp(x))  # (vector calls)
    fl.register_recipe("cpu", _scalar_chunks, name="test-scalar-chunks")
    assert "_fl_v" not in fl.show_code(fl.exp(x))
    scalar = results()
    for op, _ in ops:
        far = _ulps_apart(vector[op], scalar[op])
        worst = int(np.argmax(far))
        assert far[worst] <= 4, (f"{op}({a[worst]!r}, {b[worst]!r}): vector "
                                 f"{vector[op][worst]!r}, scalar {scalar[op][worst]!r}")


def test_nested_and_shared_calls(cpu, fresh_stats):
    n = 2 * CPU_CHUNK + 5
    xh = np.random.default_rng(4).uniform(0.01, 3, n).astype(np.float32)
    yh = _argument("sin", n, np.float64, 3)
    x, y = fl.asarray(xh), fl.asarray(yh)
    # a call of a call's result, a call used twice, a float32 call promoted to a
    # float64 one, and a call under where (a helper call: all arguments evaluated)
    e = (fl.sin(fl.exp(x) * 2) + fl.arctan2(x, y) * fl.log(x)
         + fl.where(x > 2, fl.exp(x), 0) + fl.sqrt(fl.exp(x)))
    x64 = xh.astype(np.float64)
    want = (np.sin(np.exp(x64) * 2) + np.arctan2(x64, yh) * np.log(x64)
            + np.where(xh > 2, np.exp(x64), 0) + np.sqrt(np.exp(x64)))
    np.testing.assert_allclose(e.get(), want, rtol=1e-5, atol=1e-5)
    assert fl.stats()["kernels_launched"] == 1


def test_two_results_and_strided_inputs(cpu, fresh_stats):
    h = _argument("exp", 3 * CPU_CHUNK + 22, np.float32)
    x = fl.asarray(h)
    a, b = fl.compute(fl.exp(x[::2]), fl.cos(x[1::2]) + fl.exp(x[::2]))
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(a.get(), np.exp(h[::2].astype(np.float64)), rtol=2e-6)
    np.testing.assert_allclose(b.get(), np.cos(h[1::2].astype(np.float64))
                               + np.exp(h[::2].astype(np.float64)), rtol=2e-6, atol=2e-6)


def test_into_an_existing_array_and_in_place(cpu):
    h = _argument("exp", CPU_CHUNK + 9, np.float64)
    x = fl.asarray(h)
    out = fl.empty_like(x)
    out[...] = fl.exp(-x * x)
    np.testing.assert_allclose(out.get(), np.exp(-h * h), rtol=1e-13)
    x[...] = fl.sin(x)  # reads and writes the same elements
    np.testing.assert_allclose(x.get(), np.sin(h), rtol=1e-13, atol=1e-15)


def test_code_has_one_vector_call_per_block(pocl):
    x = fl.asarray(_argument("exp", 100, np.float32))
    code = fl.show_code(fl.exp(x) * 2 + x)
    calls = code.count(f"exp((float{LANES})(")
    assert calls >= 1 and code.count("exp(") == calls  # no scalar exp left
    assert "fl_exp_f32" not in code
    d = fl.asarray(_argument("exp", 100, np.float64))
    code = fl.show_code(fl.arctan2(d, d + 1))
    # doubles go 4 lanes at a time (two calls per block)
    assert "atan2((double4)(t0[0], " in code and "atan2((double4)(t0[4], " in code
    assert "double _fl_vr0[8]" in code
    # float32 sin: through doubles, 4 at a time, or 8 on AVX-512 (see cpu_vector)
    w = through_double_width(pocl)
    code = fl.show_code(fl.sin(x))
    assert code.count(f"convert_float{w}(sin(convert_double{w}((float{w})(") == LANES // w


def test_arithmetic_only_kernels_are_unchanged(cpu):
    x = fl.asarray(_argument("exp", 100, np.float32))
    code = fl.show_code(2 * x + x * x - x / 3)
    assert "vload" not in code and "_fl_v" not in code


def test_exact_builtins_are_vector_calls(cpu):
    # PoCL calls its library for sqrt, floor, fabs, fmax, ... one element at a time,
    # and the loop around such a call was not vectorised
    x = fl.asarray(_argument("exp", 100, np.float32))
    code = fl.show_code(fl.sqrt(x) + fl.floor(x) + fl.abs(x) + fl.fmax(x, 2 * x))
    for builtin in ("sqrt", "floor", "fabs", "fmax"):
        assert f"{builtin}((float8)(" in code


# {{{ the transform on hand-made kernels (no device)

F32 = np.dtype(np.float32)


def _kernel(instructions: str) -> lp.TranslationUnit:
    knl = lp.make_kernel(
        "{[i]: 0 <= i < N}", instructions,
        [lp.GlobalArg("x", F32, shape="N"), lp.GlobalArg("out", F32, shape="N",
                                                          is_output=True),
         lp.ValueArg("N", np.int32)],
        target=lp.OpenCLTarget(), lang_version=(2018, 2), name="k")
    for op in ("log", "exp"):
        h = make_helper(op, (F32, F32))
        knl = lp.register_callable(knl, h.name, HelperCallable(h.name, (F32,), F32, h.source))
    return knl


def _code(t_unit: lp.TranslationUnit) -> str:
    return lp.generate_code_v2(vectorise_math_calls(t_unit, "i", CPU_CHUNK)).device_code()


def test_calls_under_a_condition_stay_scalar():
    code = _code(_kernel("out[i] = if(x[i] > 0, fl_log_f32(x[i]), 0)"))
    assert "_fl_v" not in code and "fl_log_f32(x[" in code


def test_only_calls_outside_conditions_are_vectorised():
    code = _code(_kernel("out[i] = fl_exp_f32(x[i]) + if(x[i] > 0, fl_log_f32(x[i]), 0)"))
    assert "exp((float8)(" in code and "fl_log_f32(x[" in code


def test_calls_with_the_same_argument_for_every_lane_stay_scalar():
    code = _code(_kernel("out[i] = x[i] * fl_exp_f32(N)"))
    assert "_fl_v" not in code


class _FakeCLDevice:
    def __init__(self, preferred: int, version: str = "OpenCL 3.0 ") -> None:
        self.preferred_vector_width_float = preferred
        self.version = version


class _FakeDevice:
    def __init__(self, cl_device: object) -> None:
        self.cl_device = cl_device


def test_float32_through_doubles_take_a_block_at_a_time_on_avx512():
    assert through_double_width(_FakeDevice(_FakeCLDevice(16))) == 8  # AVX-512
    assert through_double_width(_FakeDevice(_FakeCLDevice(8))) == 4  # AVX2
    assert through_double_width(_FakeDevice(None)) == 4
    # PoCL names its target CPU: that decides, whatever width it prefers (pip's PoCL
    # 3.0 on AMD Zen 4 prefers 16 floats but targets znver3, where double8 aborts LLVM)
    pocl = "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-"
    for cpu, width in (("znver3", 4), ("znver4", 8), ("skylake-avx512", 8),
                       ("sapphirerapids", 8), ("haswell", 4), ("some-future-cpu", 4)):
        assert through_double_width(_FakeDevice(_FakeCLDevice(16, pocl + cpu))) == width, cpu
    assert pocl_target_cpu(_FakeDevice(_FakeCLDevice(16, pocl + "icelake-server"))) == (
        "icelake-server")
    t_unit = _kernel("out[i] = fl_exp_f32(x[i]) + 1")
    t_unit = lp.register_callable(t_unit, "fl_sin_f32", _sin_callable())
    t_unit = t_unit.with_kernel(t_unit.default_entrypoint.copy(instructions=[
        insn.copy(expression=insn.expression + prim.Call(prim.Variable("fl_sin_f32"),
                                                         (prim.Variable("x")[prim.Variable("i")],)))
        for insn in t_unit.default_entrypoint.instructions]))
    for width in (4, 8):
        code = lp.generate_code_v2(vectorise_math_calls(
            t_unit, "i", CPU_CHUNK, through_width=width)).device_code()
        assert code.count(f"sin(convert_double{width}((float{width})(") == LANES // width
        assert code.count("exp((float8)(") == 1  # float32 builtins: 8 at a time anyway
    with pytest.raises(fl.errors.RecipeError, match="16 at a time"):
        vectorise_math_calls(t_unit, "i", CPU_CHUNK, through_width=16)


def _sin_callable() -> HelperCallable:
    h = make_helper("sin", (F32, F32))
    return HelperCallable(h.name, (F32,), F32, h.source)


def test_lane_temporaries_are_private_arrays_and_one_body_serves_every_chunk():
    """No slab of full chunks: its second copy of the body ran no faster and doubled
    Loopy's code generation and the OpenCL build (issue 26)."""
    code = _code(_kernel("<> t = x[i] * 2 {id=t}\nout[i] = fl_exp_f32(t) + t {dep=t}"))
    assert "float t[8];" in code
    assert "slab" not in code and code.count("exp((float8)(") == 1
    loops = code.split("for (", 2)[2]  # (after the loop over blocks)
    assert loops.count("<= 7;") == 2  # the lanes before and after the call


def test_lane_loops_run_whole_and_test_only_what_touches_memory():
    """Every lane loop runs all 8 lanes and tests only the lanes that touch memory: a
    trip count of its own per lane loop (up to the size) made PoCL's LLVM vectorise
    each with a remainder, and a 40-level chain of sin/cos build 3x slower."""
    code = _code(_kernel("<> t = x[i] * 2 {id=t}\nout[i] = fl_exp_f32(t) + t {dep=t}"))
    loops = code.split("for (", 2)[2]  # (after the loop over blocks)
    assert loops.count("<= 7;") == 2 and "? " not in loops
    tests = re.findall(r"if \(([^\n]*)\)\n\s*(\w+)\[", loops)
    assert [target for _, target in tests] == ["t", "out"], code  # the load and the store
    assert all("N" in cond for cond, _ in tests)


def test_instructions_between_tested_ones_are_tested_too(cpu):
    """``u`` touches no memory but sits between two loads of the lane loop: it goes in
    their guard, as Loopy enters the guard once per lane (a CycleError before)."""
    code = _code(_kernel("<> t = x[i] * 2 {id=t}\n<> u = 1 / (8 * t) {id=u, dep=t}\n"
                         "<> w = x[i] * u {id=w, dep=u}\nout[i] = fl_exp_f32(t) * w {dep=w}"))
    tests = re.findall(r"if \(([^\n]*)\)\n\s*\{([^}]*)\}", code)
    assert len(tests) == 1 and "u[i_inner_inner] =" in tests[0][1], code
    # through fuseloop: a power series in 1/(8x), reused, times a vector call
    xh = np.linspace(21.0, 30.0, 2 * CPU_CHUNK + 13)
    big = fl.asarray(xh)
    inv = 1.0 / (8.0 * big)
    series, want = fl.full_like(big, 0.5), np.full_like(xh, 0.5)
    for c in range(1, 16):
        series, want = c + series * inv, c + want / (8.0 * xh)
    np.testing.assert_allclose((fl.exp(big) * series).get(), np.exp(xh) * want, rtol=1e-13)


def test_each_stage_of_a_chain_gets_a_lane_domain_of_its_own():
    # 16 stages, each a vector call of the one before: the lane loop is copied per
    # stage; in one domain its dimensions grew with the chain, and Loopy's checks
    # and code generation with them, much faster than linearly
    expr = "x[i]"
    for k in range(16):
        expr = f"fl_{'exp' if k % 2 else 'log'}_f32({expr} + 2)"
    t_unit = vectorise_math_calls(_kernel(f"out[i] = {expr}"), "i", CPU_CHUNK)
    knl = t_unit.default_entrypoint
    lanes = sorted(n for n in knl.all_inames() if n.startswith("i_inner_inner"))
    assert len(lanes) >= 16
    assert max(d.dim(isl.dim_type.set) for d in knl.domains) <= 3
    for lane in lanes:  # each in a domain with the lane alone, or with the block loops
        assert knl.get_home_domain_index(lane) is not None
    code = lp.generate_code_v2(t_unit).device_code()
    assert code.count("exp((float8)(") + code.count("log((float8)(") == 16  # (one body)


def test_a_calls_argument_waits_only_for_the_calls_it_reads(pocl):
    """Per level of ``sin(r)*.5 + cos(r*k)*.25 + .1``, cos's argument ``r*k`` reads no
    call's result: it joins the lane loop that makes ``r``, and both calls follow
    that loop (one lane loop per level, not two: half of Loopy's and PoCL's work)."""
    r = fl.asarray(np.linspace(0.1, 2.0, 100, dtype=np.float32))
    for k in range(3):
        r = fl.sin(r) * .5 + fl.cos(r * (k + 1.5)) * .25 + .1
    code = fl.show_code(r)
    assert code.count("for (int i_inner_inner") == 3 + 1, code
    # an argument that reads a call's result still follows that call
    x = fl.asarray(np.linspace(0.1, 2.0, 100, dtype=np.float32))
    code = fl.show_code(fl.sin(fl.cos(x) * 2 + fl.exp(x)))
    store = re.search(r"_fl_va\w+\[\w+\] =", code)
    assert store is not None, code
    assert code.index("exp((float8)(") < store.start() < code.index("sin(convert"), code


def test_deep_chains_match_numpy(cpu):
    n = CPU_CHUNK + 13
    xh = np.random.default_rng(7).uniform(-2, 2, n).astype(np.float32)
    r, want = fl.asarray(xh), xh.astype(np.float64)
    for k in range(12):
        r = fl.sin(r) * np.float32(.5) + fl.cos(r * np.float32(k + 1.5)) * np.float32(.25) + 1
        want = np.sin(want) * .5 + np.cos(want * (k + 1.5)) * .25 + 1
    np.testing.assert_allclose(r.get(), want, rtol=2e-5, atol=2e-5)


def test_table_names_only_float_helpers():
    table = vector_builtins()
    assert table["fl_exp_f32"] == ("exp", 1, False)
    assert table["fl_arctan2_f64"] == ("atan2", 2, False)
    assert table["fl_power_f32"] == ("pow", 2, False)
    assert table["fl_sin_f32"] == ("sin", 1, True) and table["fl_sin_f64"] == ("sin", 1, False)
    assert table["fl_sqrt_f32"] == ("sqrt", 1, False)
    assert table["fl_absolute_f64"] == ("fabs", 1, False)
    assert table["fl_fmax_f32"] == ("fmax", 2, False)
    # numpy's maximum and minimum propagate NaN (their helpers are not fmax or fmin)
    assert not any(name.startswith(("fl_maximum", "fl_minimum")) for name in table)
    # without doubles, float32 sin, cos and tan stay scalar
    assert "fl_sin_f32" not in vector_builtins(fp64=False)
    assert "fl_exp_f32" in vector_builtins(fp64=False)

# }}}
