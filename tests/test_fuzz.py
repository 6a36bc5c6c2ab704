"""Differential testing against numpy: random programs run with fuseloop (thrice) and numpy.

A *program* is a list of steps over an environment of values: ufuncs (operators, comparisons,
bitwise, transcendental), ``where``, ``clip``, casts, reductions with axes and ``keepdims``,
basic slicing, shape functions, gathers, concatenation, user functions (traced Python and
OpenCL bodies), forced evaluations, rebuilt subexpressions, numpy's advanced indexing (several
integer index arrays per key, broadcasting, negative, from numpy, lists, fuseloop arrays or
lazy expressions of generated values; boolean masks, host or lazy comparisons of generated
values, over all or some axes), ``nonzero``/``flatnonzero``/``argwhere``, and writes into
arrays (views, scatters through index arrays and masks, in-place operators); inputs written
to are compared at the end.  Values are referred to by position, so one value can be used
by several later steps (shared subexpressions).  Inputs come in every dtype and broadcast
against each other; scalar operands are Python ``bool``/``int``/``float``, numpy scalars and
``fl.constant``.

The same program is interpreted twice: with fuseloop on ``fl`` arrays, and with numpy on
numpy arrays (:class:`Ref`).  Along with numpy's value, the numpy interpreter carries for
every element a bound on how far any correct implementation may differ from numpy's result
(``err``): 0 where both must agree bit for bit (integers, bools, correctly rounded float
operations on identical operands), a few ulps for functions whose accuracy OpenCL and numpy
leave open (more for transcendental functions), error propagation through each operation
(derivative bounds, cancellation), and ``inf`` ("either result is right") where the outcome
is implementation-defined or not determined by the tolerances (a comparison of two values
closer than their error, a float -> int cast out of range, an overflow at the edge of the
range).  fuseloop's result must then match: integers and bools exactly, floats within the
bound, NaN and +-inf at the same positions, and the sign of zero where the result is exact.

Documented deviations are asserted rather than avoided: float16 results are computed in
float32, integer powers with negative exponents give the truncated result, integer
division and remainder by zero give 0.  ``test_special_values_*`` check NaN, inf, -0.0,
integer wrap-around and division by zero explicitly.

``test_index_writes_match_numpy`` draws programs dense in writes through index arrays and
masks (``x[i, j] = v``, ``x[mask] += v``).  ``test_products_written_in_place_match_numpy``
starts each program with a matrix product written in place, its value reading the target
(``t += x @ y``, ``t[...] = 1.5 * (x @ y) + -0.5 * t``), at sizes that are multiples of no
block of the contraction recipes; the ``contract`` step kind also appears in other programs.
Out-of-range indices are checked by ``test_out_of_range_indices_raise``.

Profiles (``HYPOTHESIS_PROFILE``): ``quick`` (default, for CI: few short programs, derandomized)
and ``long`` (thousands of larger programs; ``nox -s fuzz``); ``FUZZ_EXAMPLES=N`` overrides
the number of programs (with ``--hypothesis-seed`` to split a long run among processes).
The number of programs run is printed at the end of the module.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, reject, settings
from hypothesis import strategies as st

import fuseloop as fl
from fuseloop.expr import program as prog_module

# {{{ profiles

_SLOW_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
            HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("quick", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("long", max_examples=4000, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "quick")
if PROFILE not in ("quick", "long"):
    raise RuntimeError(f"HYPOTHESIS_PROFILE={PROFILE!r}: tests/test_fuzz.py knows 'quick' "
                       "and 'long'")
FUZZ_SETTINGS = settings.get_profile(PROFILE)
if os.environ.get("FUZZ_EXAMPLES"):  # e.g. to share a long run among processes
    FUZZ_SETTINGS = settings(FUZZ_SETTINGS, max_examples=int(os.environ["FUZZ_EXAMPLES"]))


@dataclass(frozen=True)
class Config:
    """Size of the structure space (every distinct structure compiles a kernel)."""

    max_inputs: int
    max_ndim: int
    dims: tuple[int, ...]
    min_steps: int
    max_steps: int
    big_arrays: bool  # occasionally a 1-D input long enough for two-stage reductions


CONFIG = {
    "quick": Config(max_inputs=2, max_ndim=2, dims=(1, 2, 3), min_steps=2, max_steps=5,
                    big_arrays=False),
    "long": Config(max_inputs=3, max_ndim=3, dims=(1, 2, 3, 4, 5, 7, 0), min_steps=1,
                   max_steps=9, big_arrays=True),
}[PROFILE]

COUNTS = {"programs": 0, "steps": 0, "error_steps": 0, "exact": 0, "bounded": 0, "free": 0}


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request):
    yield
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin(
        "capturemanager")
    if reporter is not None:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(
                f"\ntest_fuzz ({PROFILE} profile): {COUNTS['programs']} generated programs "
                f"({COUNTS['steps']} steps, {COUNTS['error_steps']} of them expected errors) "
                f"ran and matched numpy; output elements compared exactly: {COUNTS['exact']}, "
                f"within a bound: {COUNTS['bounded']}, not compared (either result is "
                f"right): {COUNTS['free']}")

# }}}

# {{{ reference values with divergence bounds

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
LD = np.dtype(np.longdouble)
INF = np.inf
SLACK = 1.25  # on top of the worst-case bounds below (they are computed in float64)
TRANSCENDENTAL_ULPS = 10.0  # OpenCL allows 3-5 ulp (float and double), numpy's libm ~1-4
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float32", "float64"]
# the smallest normal number, where the device flushes subnormal results (set per device)
DENORM_FLOOR = {F32: 0.0, F64: 0.0}


@contextlib.contextmanager
def quiet():
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Ref:
    """numpy's value and, per element, a bound on the divergence of a correct implementation.

    ``err`` is 0 (bit-exact), a finite bound (floats), or ``inf`` (anything is right).
    Views of a value are views of both arrays, so writes show through them as in numpy.
    """

    __slots__ = ("err", "val")

    def __init__(self, val: Any, err: Any = None) -> None:
        self.val = val if isinstance(val, np.ndarray) else np.asarray(val)
        self.err = np.zeros(self.val.shape) if err is None else err
        assert self.err.shape == self.val.shape, (self.err.shape, self.val.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.val.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.val.shape

    def view(self, f: Any) -> Ref:
        """Apply a numpy shape function to both arrays (views stay views)."""
        return Ref(f(self.val), f(self.err))

    # operators, for the user function bodies shared with fuseloop
    def __add__(self, o): return ref_ufunc("add", self, o)
    def __radd__(self, o): return ref_ufunc("add", o, self)
    def __sub__(self, o): return ref_ufunc("subtract", self, o)
    def __rsub__(self, o): return ref_ufunc("subtract", o, self)
    def __mul__(self, o): return ref_ufunc("multiply", self, o)
    def __rmul__(self, o): return ref_ufunc("multiply", o, self)
    def __gt__(self, o): return ref_ufunc("greater", self, o)
    def __lt__(self, o): return ref_ufunc("less", self, o)


@dataclass(frozen=True)
class Scalar:
    """A scalar operand: Python scalar, numpy scalar, or ``fl.constant`` (weak or typed)."""

    kind: str  # "py", "np", "const", "const_dt"
    value: Any  # a Python bool, int or float
    dtype: str | None = None

    def for_numpy(self) -> Any:
        if self.kind in ("np", "const_dt"):
            return np.dtype(self.dtype).type(self.value)
        return self.value

    def for_fl(self) -> Any:
        if self.kind == "py":
            return self.value
        if self.kind == "np":
            return np.dtype(self.dtype).type(self.value)
        if self.kind == "const":
            return fl.constant(self.value)
        return fl.constant(self.value, self.dtype)

    def resolve_kind(self) -> Any:
        v = self.for_numpy()
        if isinstance(v, bool):
            return np.dtype(bool)
        if isinstance(v, np.generic):
            return v.dtype
        return type(v)

    def __repr__(self) -> str:
        v = repr(self.value) if not (isinstance(self.value, float) and not
                                     math.isfinite(self.value)) else f"float({str(self.value)!r})"
        if self.kind == "py":
            return v
        if self.kind == "np":
            return f"np.{self.dtype}({v})"
        if self.kind == "const":
            return f"fl.constant({v})"
        return f"fl.constant({v}, np.{self.dtype})"


def _sp(mag: np.ndarray, dt: np.dtype) -> np.ndarray:
    """The spacing of ``dt`` numbers at magnitude ``mag`` (float64), plus the denormal floor."""
    fi = np.finfo(dt)
    with quiet():
        m = np.abs(np.asarray(mag, F64))
        s = np.spacing(np.minimum(m, float(fi.max)).astype(dt)).astype(F64)
    return np.where(m >= float(fi.max), INF, s) + DENORM_FLOOR[dt]


def _cat(*arrays: np.ndarray) -> np.ndarray:
    return np.logical_and.reduce(arrays) if arrays else np.True_


def _any(*arrays: np.ndarray) -> np.ndarray:
    return np.logical_or.reduce(arrays) if arrays else np.False_


def truth(r: Ref) -> tuple[np.ndarray, np.ndarray]:
    """(certainly true, certainly false) for each element of ``r`` read as a bool."""
    care = r.err < INF
    if r.dtype.kind == "f":
        x = r.val.astype(F64)
        t = np.isnan(x) | (np.abs(x) > r.err)
        f = (x == 0) & (r.err == 0)
    else:
        t, f = r.val != 0, r.val == 0
    return t & care, f & care


def _int_range_ok(lo: np.ndarray, hi: np.ndarray, dt: np.dtype) -> np.ndarray:
    info = np.iinfo(dt)
    return (lo > float(info.min) - 1) & (hi < float(info.max) + 1)


def cast_ref(r: Ref, dt: np.dtype) -> Ref:
    """numpy's ``astype`` (C casts), with the cast's effect on the bound."""
    dt = np.dtype(dt)
    src = r.dtype
    with quiet():
        val = r.val.astype(dt)
    e = r.err
    if dt.kind == "b":
        t, f = truth(r)
        err = np.where(t | f, 0.0, INF)
    elif dt.kind in "iu":
        if src.kind in "iub":
            err = e.copy()
        else:  # float -> int: implementation-defined out of range, NaN and inf
            x = r.val.astype(F64)
            with quiet():
                lo, hi = np.trunc(x - e), np.trunc(x + e)
            ok = np.isfinite(x) & (e < INF) & (lo == hi) & _int_range_ok(lo, hi, dt)
            err = np.where(ok, 0.0, INF)
    elif src.kind in "iub":  # int -> float: round to nearest, both sides
        err = np.where(e < INF, 0.0, INF)
        if dt == F32:  # beyond float32's range: undefined in C
            with quiet():
                err = np.where(np.abs(r.val.astype(F64)) >= float(np.finfo(F32).max), INF, err)
    elif src.itemsize <= dt.itemsize:
        err = e.copy()
    else:  # float64 -> float32
        x = r.val.astype(F64)
        fmax = float(np.finfo(dt).max)
        with quiet():
            err = np.where(e == 0, 0.0, e + _sp(np.abs(x) + e, dt))
            over = np.isfinite(x) & (np.abs(x) + err >= fmax)
        err = np.where(over, INF, err)
    return Ref(val, err)


def as_ref(o: Any, dt: np.dtype) -> Ref:
    """An operand converted to a ufunc loop's input dtype."""
    if isinstance(o, Ref):
        return cast_ref(o, dt)
    v = o.for_numpy() if isinstance(o, Scalar) else o
    if dt.kind in "iu" and type(v) is int:
        info = np.iinfo(dt)
        if not info.min <= v <= info.max:
            raise OverflowError(f"Python integer {v} out of bounds for {dt}")
    with quiet():
        return Ref(np.asarray(dt.type(v)))


def _kind_of(o: Any) -> Any:
    if isinstance(o, Ref):
        return o.dtype
    if isinstance(o, Scalar):
        return o.resolve_kind()
    return Scalar("py", o).resolve_kind()


def _numpy_operand(o: Any) -> Any:
    if isinstance(o, Ref):
        return o.val
    if isinstance(o, Scalar):
        return o.for_numpy()
    return o


COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
LOGICAL = ("logical_and", "logical_or", "logical_xor", "logical_not")
CLASSIFY = ("isnan", "isinf", "isfinite")
NAN_PROPAGATING = frozenset({
    "add", "subtract", "multiply", "true_divide", "negative", "positive", "absolute", "square",
    "minimum", "maximum", "sqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin",
    "cos", "tanh", "arctan", "arcsinh", "floor", "ceil", "trunc", "rint", "hypot", "sign",
    "floor_divide", "remainder", "fmod", "power",
})


def _mono(f: Any, x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Largest change of a monotonic ``f`` over [x - e, x + e]."""
    y = f(x)
    return np.maximum(np.abs(f(x + e) - y), np.abs(f(x - e) - y))


def _product_exact(a: np.ndarray, b: np.ndarray, r: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Whether the product a*b (float64 arrays) is exactly the rounded result ``r``."""
    if dt == F32:
        return a * b == r  # a float32 product is exact in float64
    # Dekker's two-product: the rounding error of a*b, exactly (away from over/underflow)
    def split(v):
        c = 134217729.0 * v
        hi = c - (c - v)
        return hi, v - hi

    ah, al = split(a)
    bh, bl = split(b)
    rest = ((ah * bh - r) + ah * bl + al * bh) + al * bl
    tiny = float(np.finfo(F64).tiny) * 2.0**54
    sane = (np.abs(a) < 2.0**990) & (np.abs(b) < 2.0**990)
    return (rest == 0) & sane & ((np.abs(r) >= tiny) | (a == 0) | (b == 0))


def _float_rule(name: str, x: list, e: list, r: np.ndarray, dt: np.dtype):
    """(propagated bound, invalid mask, ulps when operands agree, ulps otherwise)."""
    f32 = dt == F32
    no = np.zeros(r.shape, bool)
    if name in ("add", "subtract"):
        return e[0] + e[1], no, 0.0, 1.0
    if name in ("multiply", "square"):
        a, b = (x[0], x[1]) if name == "multiply" else (x[0], x[0])
        ea, eb = (e[0], e[1]) if name == "multiply" else (e[0], e[0])
        prop = np.abs(a) * eb + np.abs(b) * ea + ea * eb
        # a product that rounds may be contracted into a following add (fma): not exact
        return prop, no, np.where(_product_exact(a, b, r, dt), 0.0, 1.0), 1.0
    if name == "true_divide":
        denom = np.abs(x[1]) - e[1]
        prop = (e[0] + np.abs(r) * e[1]) / denom
        k = 3.0 if f32 else 0.0  # float32 division: 2.5 ulp in OpenCL
        return prop, (denom <= 0) & (e[1] > 0), k, k + 1.0
    if name in ("negative", "positive", "absolute"):
        return e[0], no, 0.0, 0.0
    if name in ("minimum", "maximum"):
        return np.maximum(e[0], e[1]), no, 0.0, 0.0
    if name in ("fmin", "fmax"):
        prop = np.where(np.isnan(x[0]), e[1], np.where(np.isnan(x[1]), e[0],
                                                        np.maximum(e[0], e[1])))
        # fmin(+0.0, -0.0): either zero (C99 and OpenCL leave it open; numpy gives the first)
        zeros = (x[0] == 0) & (x[1] == 0) & (np.signbit(x[0]) != np.signbit(x[1]))
        return prop, no, np.where(zeros, 1.0, 0.0), 0.0
    if name == "sign":
        return 0.0 * e[0], ~((e[0] == 0) | (np.abs(x[0]) > e[0])), 0.0, 0.0
    if name == "sqrt":
        prop = e[0] / (np.sqrt(x[0]) + np.sqrt(np.maximum(x[0] - e[0], 0)))
        k = 4.0 if f32 else 0.0  # float32 sqrt: 3 ulp in OpenCL
        return prop, (x[0] - e[0] < 0) & (e[0] > 0), k, k + 1.0
    t = TRANSCENDENTAL_ULPS
    if name in ("exp", "expm1"):
        return np.exp(x[0] + e[0]) * e[0], no, t, t + 1
    if name == "exp2":
        return np.log(2.0) * np.exp2(x[0] + e[0]) * e[0], no, t, t + 1
    if name in ("log", "log2", "log10", "log1p"):
        lo = x[0] - e[0] + (1.0 if name == "log1p" else 0.0)
        scale = {"log": 1.0, "log1p": 1.0, "log2": np.log(2.0), "log10": np.log(10.0)}[name]
        return e[0] / (lo * scale), (lo <= 0) & (e[0] > 0), t, t + 1
    if name in ("sin", "cos", "tanh", "arctan", "arcsinh"):
        return np.minimum(e[0], 2.0 if name != "arcsinh" else INF), no, t, t + 1
    if name in ("floor", "ceil", "trunc", "rint"):
        return _mono(getattr(np, name), x[0], e[0]), no, 0.0, 0.0
    if name == "hypot":
        return e[0] + e[1], no, 5.0, 6.0
    if name == "copysign":
        sign_known = ~np.isnan(x[1]) & ((e[1] == 0) | (np.abs(x[1]) > e[1]))
        return e[0], ~sign_known, 0.0, 0.0
    if name == "power":
        base_pos = x[0] - e[0] > 0
        corners = [np.power(x[0] + s * e[0], x[1] + t2 * e[1])
                   for s in (-1, 1) for t2 in (-1, 1)]
        prop = np.max([np.abs(c - r) for c in corners], axis=0)
        return prop, ~base_pos & ((e[0] > 0) | (e[1] > 0)), 18.0, 19.0  # pow: 16 ulp
    if name in ("floor_divide", "remainder", "fmod"):
        k = 3.0 if (f32 and name == "floor_divide") else 0.0
        return 0.0 * e[0], (e[0] > 0) | (e[1] > 0), k, k
    raise AssertionError(f"no error rule for {name}")


def float_op(name: str, vals: list, errs: list, r: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Divergence bound of a float ufunc on float operands (``vals`` in the loop dtype)."""
    x = [v.astype(F64) for v in vals]
    rf = r.astype(F64)
    det = _cat(*[e == 0 for e in errs])
    in_dc = _any(*[e == INF for e in errs])
    finite_in = _cat(*[np.isfinite(v) for v in x])
    exact_or_nf = _cat(*[(e == 0) | ~np.isfinite(v) for v, e in zip(x, errs)])
    fmax = float(np.finfo(dt).max)
    with quiet():
        prop, bad, k_det, k = _float_rule(name, x, errs, rf, dt)
        err = np.where(det, k_det * _sp(rf, dt), prop + k * _sp(np.abs(rf) + prop, dt))
        err = np.where(bad | np.isnan(err), INF, err)
        nonfinite = ~np.isfinite(rf)
        certain = exact_or_nf.copy()
        if name in NAN_PROPAGATING:
            certain |= np.isnan(rf) & _any(*[np.isnan(v) for v in x])
        if name in ("add", "subtract"):
            certain |= _any(*[np.isinf(v) for v in x])
        if name == "true_divide":  # by an exact zero: only the numerator's sign matters
            certain |= (x[1] == 0) & (errs[1] == 0) & (np.abs(x[0]) > errs[0])
        overflow = nonfinite & finite_in & ~np.isnan(rf)
        if overflow.any():  # is the true value far beyond the range?
            wide = getattr(np, name)(*[v.astype(LD) for v in vals])
            huge = ~np.isfinite(wide) | (np.abs(wide) > fmax * (1 + 64 * np.finfo(dt).eps))
            certain &= ~overflow | huge
        err = np.where(nonfinite, np.where(certain, 0.0, INF), err)
        if name not in ("fmin", "fmax"):
            from_nf = ~nonfinite & ~finite_in
            err = np.where(from_nf, np.where(exact_or_nf, k_det * _sp(rf, dt), INF), err)
        err = np.where(~nonfinite & (err > 0) & (np.abs(rf) + err >= fmax), INF, err)
    return np.where(in_dc | bad, INF, err)


def compare_err(name: str, x: list, e: list) -> np.ndarray:
    a, b = (v.astype(F64) for v in x)
    ea, eb = e
    with quiet():
        lo0, hi0, lo1, hi1 = a - ea, a + ea, b - eb, b + eb
        det = (ea == 0) & (eb == 0)
        if name in ("less", "greater_equal"):
            certain = (hi0 < lo1) | (lo0 >= hi1)
        elif name in ("less_equal", "greater"):
            certain = (hi0 <= lo1) | (lo0 > hi1)
        else:
            certain = (hi0 < lo1) | (lo0 > hi1)
        certain |= det | np.isnan(a) | np.isnan(b)
    return np.where(certain & (ea < INF) & (eb < INF), 0.0, INF)


def _int_power(a: np.ndarray, b: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Documented fuseloop semantics: numpy's power, and for b < 0 the truncated result."""
    with quiet():
        neg = (b < 0) if b.dtype.kind == "i" else np.zeros(b.shape, bool)
        pos = np.power(a, np.where(neg, 0, b).astype(b.dtype))
        odd = (b % 2) != 0
        trunc = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)) \
            if dt.kind == "i" else np.where(a == 1, 1, 0)
    return np.where(neg, trunc.astype(dt), pos).astype(dt)


def _scalar_ufunc(uf: Any, ops: tuple) -> Any:
    """A ufunc of scalars only: numpy computes it; on ``fl.constant`` it folds into one."""
    ops = tuple(o if isinstance(o, Scalar) else Scalar("py", o) for o in ops)
    with quiet():
        result = uf(*(o.for_numpy() for o in ops))
    if not any(o.kind in ("const", "const_dt") for o in ops):
        return Ref(np.asarray(result))  # a numpy scalar: strong
    weak = all(o.kind == "const" or (o.kind == "py" and type(o.value) in (int, float))
               for o in ops)
    return Scalar("const", result.item()) if weak else \
        Scalar("const_dt", result.item(), result.dtype.name)


def ref_ufunc(name: str, *ops: Any) -> Ref:
    """``numpy.<name>(*ops)`` with its divergence bound."""
    uf = getattr(np, name)
    if not any(isinstance(o, Ref) for o in ops):
        return _scalar_ufunc(uf, ops)
    loop = uf.resolve_dtypes((*(_kind_of(o) for o in ops), None))
    half = any(d == np.float16 for d in loop)
    loop = tuple(F32 if d == np.float16 else d for d in loop)  # documented deviation
    ins = [as_ref(o, loop[k]) for k, o in enumerate(ops)]
    shape = np.broadcast_shapes(*(r.shape for r in ins))
    vals = [np.broadcast_to(r.val, shape) for r in ins]
    errs = [np.broadcast_to(r.err, shape) for r in ins]
    out = loop[-1]
    with quiet():
        if name == "power" and out.kind in "iu":
            val = _int_power(vals[0], vals[1], out)
        elif half:
            val = uf(*vals)
        else:
            val = uf(*(_numpy_operand(o) for o in ops))
    val = np.asarray(val)
    assert val.dtype == out and val.shape == shape, (name, val.dtype, out, val.shape, shape)
    if name in LOGICAL:
        tf = [truth(r) for r in ins]
        t = [np.broadcast_to(a, shape) for a, _ in tf]
        f = [np.broadcast_to(b, shape) for _, b in tf]
        if name == "logical_and":
            certain = (t[0] & t[1]) | f[0] | f[1]
        elif name == "logical_or":
            certain = t[0] | t[1] | (f[0] & f[1])
        else:
            certain = _cat(*[a | b for a, b in zip(t, f)])
        err = np.where(certain, 0.0, INF)
    elif name in COMPARISONS and loop[0].kind == "f":
        err = compare_err(name, vals, errs)
    elif name in CLASSIFY or out.kind != "f":
        err = np.maximum.reduce(errs) if len(errs) > 1 else errs[0]
    else:
        err = float_op(name, vals, errs, val, out)
    return Ref(val, np.array(np.broadcast_to(err, shape), F64))


def ref_where(c: Any, x: Any, y: Any) -> Ref:
    with quiet():
        val = np.asarray(np.where(*(_numpy_operand(o) for o in (c, x, y))))
    cond = c if isinstance(c, Ref) else Ref(np.asarray(_numpy_operand(c)))
    t, f = truth(cond)
    xr, yr = as_ref(x, val.dtype), as_ref(y, val.dtype)
    shape = val.shape
    err = np.where(np.broadcast_to(t, shape), np.broadcast_to(xr.err, shape),
                   np.where(np.broadcast_to(f, shape), np.broadcast_to(yr.err, shape), INF))
    return Ref(val, np.array(err, F64))


def ref_clip(x: Ref, lo: Any, hi: Any) -> Ref:
    """numpy's clip, including its handling of out-of-range Python integer bounds."""
    with quiet():
        val = np.asarray(np.clip(x.val, _numpy_operand(lo), _numpy_operand(hi)))
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        if isinstance(lo, Scalar) and type(lo.for_numpy()) is int and lo.value <= info.min:
            lo = None
        if isinstance(hi, Scalar) and type(hi.for_numpy()) is int and hi.value >= info.max:
            hi = None
    if lo is None and hi is None:
        out = ref_ufunc("positive", x)
    elif lo is None:
        out = ref_ufunc("minimum", x, hi)
    elif hi is None:
        out = ref_ufunc("maximum", x, lo)
    else:  # numpy's clip loop: one dtype for all three operands
        a, b, c = (as_ref(o, val.dtype) for o in (x, lo, hi))
        out = ref_ufunc("minimum", ref_ufunc("maximum", a, b), c)
    assert out.dtype == val.dtype, (out.dtype, val.dtype)
    err = out.err
    if val.dtype.kind == "f":  # numpy's clip loop picks either zero when +0.0 meets -0.0
        err = np.where((val == 0) & (err == 0), 5e-324, err)
    return Ref(val, err)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim for a in axes))


def _rows(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``a`` with the reduced axes moved to the end and merged into one."""
    kept = [d for d in range(a.ndim) if d not in axes]
    t = np.transpose(a, kept + list(axes))
    n = math.prod(a.shape[d] for d in axes)
    return t.reshape((*t.shape[:len(kept)], n))


def _lsb_and_bits(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For finite nonzero float64 values: the value of the lowest set bit, and the bit count."""
    with quiet():
        m, ex = np.frexp(np.where(np.isfinite(x) & (x != 0), x, 1.0))
        mant = np.abs(m * 2.0**53).astype(np.int64)
        low = mant & -mant
        tz = np.log2(low.astype(F64))
    return np.ldexp(1.0, (ex - 53 + tz).astype(np.int64)), 53 - tz


def _sum_err(v: np.ndarray, e: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Bound for a float sum along the last axis, in any order (numpy: pairwise)."""
    n = v.shape[-1]
    x = v.astype(F64)
    fin = np.isfinite(x)
    fmax = float(np.finfo(dt).max)
    u = float(np.finfo(dt).eps) / 2
    with quiet():
        absx = np.where(fin, np.abs(x), 0.0)
        total = absx.astype(LD).sum(axis=-1).astype(F64)
        prop = np.where(fin, e, 0.0).sum(axis=-1)
        lsb, _ = _lsb_and_bits(x)
        lsb_min = np.where(fin & (x != 0), lsb, INF).min(axis=-1, initial=INF)
        p = np.finfo(dt).nmant + 1
        # every partial sum is a multiple of the smallest lsb and below 2**p of them: exact
        exact = (e == 0).all(axis=-1) & (total / lsb_min < 2.0 ** (p - 1))
        exact |= (e == 0).all(axis=-1) & (total == 0)
        growth = n + math.ceil(math.log2(max(n, 1))) + 2
        err = np.where(exact, 0.0, prop + growth * u * (total + prop) + DENORM_FLOOR[dt])
        risky = total + prop >= fmax  # a partial sum may overflow in some order
        has_nan = np.isnan(x).any(axis=-1)
        nonfinite_in = ~fin.all(axis=-1)
        err = np.where(risky, INF, err)
        err = np.where(nonfinite_in, np.where(has_nan | ~risky, 0.0, INF), err)
    return np.where((e == INF).any(axis=-1), INF, err)


def _prod_err(v: np.ndarray, e: np.ndarray, dt: np.dtype) -> np.ndarray:
    n = v.shape[-1]
    x = v.astype(F64)
    fin = np.isfinite(x)
    fi = np.finfo(dt)
    u = float(fi.eps) / 2
    with quiet():
        a = np.where(fin, np.abs(x), 1.0).astype(LD)
        ea = np.where(fin, e, 0.0).astype(LD)
        big = np.maximum(a + ea, 1).prod(axis=-1)
        small = np.where(a == 0, 1, np.minimum(np.maximum(a - ea, 0), 1)).prod(axis=-1)
        over = big >= float(fi.max) / 4
        under = small <= float(fi.tiny) * 2.0 ** (fi.nmant + 2)
        has_zero = ((x == 0) & (e == 0)).any(axis=-1)
        has_nan = np.isnan(x).any(axis=-1)
        has_inf = np.isinf(x).any(axis=-1)
        full = (a + ea).prod(axis=-1)
        prop = (ea * np.where(a + ea > 0, full[..., None] / (a + ea), 0)).sum(axis=-1)
        _, bits = _lsb_and_bits(x)
        bits = np.where(fin & (x != 0), bits, 0).sum(axis=-1)
        det = (e == 0).all(axis=-1)
        exact = det & (bits <= fi.nmant + 1) & ~over & ~under
        err = np.where(exact, 0.0, (prop + (2 * n + 2) * u * full).astype(F64)
                       + DENORM_FLOOR[dt])
        err = np.where(over | (under & ~has_zero), INF, err)
        err = np.where(det & has_zero & ~over & ~has_inf & ~has_nan, 0.0, err)
        nf_certain = has_nan | (has_inf & has_zero & det) | (has_inf & ~has_zero & ~under
                                                              & ~over)
        err = np.where(has_nan | has_inf, np.where(nf_certain, 0.0, INF), err)
    return np.where((e == INF).any(axis=-1), INF, err)


def _extreme_err(op: str, v: np.ndarray, e: np.ndarray, r: np.ndarray) -> np.ndarray:
    if v.dtype.kind != "f":
        return e.max(axis=-1, initial=0.0)
    x = v.astype(F64)
    with quiet():
        err = e.max(axis=-1, initial=0.0)
        has_nan = np.isnan(x).any(axis=-1)
        zeros = x == 0
        both_zeros = (zeros & np.signbit(x)).any(axis=-1) & (zeros & ~np.signbit(x)).any(axis=-1)
        rf = r.astype(F64)
        err = np.where(both_zeros & (rf == 0), np.maximum(err, 5e-324), err)  # sign of zero
        err = np.where(has_nan | ~np.isfinite(rf), 0.0, err)
    return np.where((e == INF).any(axis=-1), INF, err)


def _arg_err(op: str, v: np.ndarray, e: np.ndarray, w: np.ndarray) -> np.ndarray:
    in_dc = (e == INF).any(axis=-1)
    if v.dtype.kind != "f":
        return np.where(in_dc, INF, 0.0)
    x = v.astype(F64)
    with quiet():
        xw = np.take_along_axis(x, w[..., None], -1)
        ew = np.take_along_axis(e, w[..., None], -1)
        j = np.arange(x.shape[-1])
        later = j > w[..., None]
        exact = (ew == 0) & (e == 0)
        if op == "argmax":
            ok = (xw - ew > x + e) | (exact & ((xw > x) | ((xw == x) & later)))
        else:
            ok = (xw + ew < x - e) | (exact & ((xw < x) | ((xw == x) & later)))
        ok |= j == w[..., None]
        certain = ok.all(axis=-1) | np.isnan(x).any(axis=-1)
    return np.where(certain & ~in_dc, 0.0, INF)


def ref_reduce(op: str, x: Ref, axis: Any, keepdims: bool, ddof: int = 0) -> Ref:
    kw = {"ddof": ddof} if op in ("var", "std") else {}
    with quiet():
        val = np.asarray(getattr(np, op)(x.val, axis=axis, keepdims=keepdims, **kw))
    if op in ("var", "std"):
        return _ref_var(op, x, axis, keepdims, ddof, val)
    if op == "mean":
        acc = F64 if x.dtype.kind in "biu" else x.dtype
        axes = _axes(axis, x.val.ndim)
        n = math.prod(x.shape[d] for d in axes)
        total = ref_reduce("sum", cast_ref(x, acc), axis, keepdims)
        m = ref_ufunc("true_divide", total, Scalar("np", n, acc.name))
        assert m.dtype == val.dtype
        return Ref(val, m.err)
    axes = _axes(axis, x.val.ndim)
    if op in ("argmax", "argmin") and axis is None:
        flat = x.view(np.ravel)
        v, e = flat.val[None, :], flat.err[None, :]
        err = _arg_err(op, v, e, np.asarray(np.argmax(v, axis=-1) if op == "argmax"
                                             else np.argmin(v, axis=-1)))
        return Ref(val, np.full(val.shape, err[0]))
    src = cast_ref(x, val.dtype) if op in ("sum", "prod") else x
    v, e = _rows(src.val, axes), _rows(src.err, axes)
    kept = val.reshape(v.shape[:-1])
    if op in ("sum", "prod"):
        if val.dtype.kind == "f":
            err = (_sum_err if op == "sum" else _prod_err)(v, e, val.dtype)
        else:
            err = e.max(axis=-1, initial=0.0)
    elif op in ("max", "min"):
        err = _extreme_err(op, v, e, kept)
    elif op in ("argmax", "argmin"):
        err = _arg_err(op, v, e, kept)
    elif op in ("any", "all"):
        t, f = truth(Ref(v, e))
        if op == "any":
            ok = np.where(kept, t.any(axis=-1), f.all(axis=-1))
        else:
            ok = np.where(kept, t.all(axis=-1), f.any(axis=-1))
        err = np.where(ok, 0.0, INF)
    else:
        raise AssertionError(op)
    return Ref(val, np.array(np.reshape(err, val.shape), F64))


def _ref_var(op: str, x: Ref, axis: Any, keepdims: bool, ddof: int, val: np.ndarray) -> Ref:
    """numpy's two-pass variance, step by step, for the bound (the value is numpy's)."""
    acc = F64 if x.dtype.kind in "biu" else x.dtype
    xa = cast_ref(x, acc)
    axes = _axes(axis, x.val.ndim)
    n = math.prod(x.shape[d] for d in axes)
    m = ref_reduce("mean", xa, axis, True)
    d = ref_ufunc("subtract", xa, m)
    total = ref_reduce("sum", ref_ufunc("multiply", d, d), axis, keepdims)
    out = ref_ufunc("true_divide", total, Scalar("np", max(n - ddof, 0), acc.name))
    if op == "std":
        out = ref_ufunc("sqrt", out)
    assert out.dtype == val.dtype and out.shape == val.shape, (out.dtype, val.dtype)
    return Ref(val, out.err)

# }}}

# {{{ user functions (one body for fuseloop and the reference)


class _RefNamespace:
    """``fl``-like functions over :class:`Ref` values (for the traced function body)."""

    def where(self, c, x, y):
        return ref_where(c, x, y)

    def __getattr__(self, name):
        return lambda *args: ref_ufunc(name, *args)


REF_NS = _RefNamespace()


def _traced_body(ns: Any, x: Any, y: Any) -> Any:
    t = x * y
    return ns.where(t > 1, t - x, ns.absolute(y) + 0.5)


_TRACED = fl.function(lambda x, y: _traced_body(fl, x, y))
_AXPY = fl.function("float fz_axpy(float x, float y)", "return x * y + 0.5f;")
_MIX = fl.function("uint fz_mix(uint a, int b)", "return (a ^ (uint)b) * 3u + (a >> 2);")


def _ref_axpy(x: Ref, y: Ref) -> Ref:
    m = ref_ufunc("multiply", cast_ref(x, F32), cast_ref(y, F32))
    return ref_ufunc("add", m, Scalar("np", 0.5, "float32"))


def ref_matmul(x: Ref, y: Ref) -> Ref:
    """``x @ y`` as the sum over ``k`` of the products (bounds for any order of the sum)."""
    prods = ref_ufunc("multiply", x.view(lambda a: a[..., None]),
                      y.view(lambda a: a[..., None, :, :]))  # (..., m, k, n)
    total = ref_reduce("sum", prods, -2, False)
    # (sums of small integers are int64 in numpy: a modular cast to matmul's type)
    return cast_ref(total, np.result_type(x.dtype, y.dtype))


def _ref_mix(a: Ref, b: Ref) -> Ref:
    u32 = np.dtype(np.uint32)
    a = cast_ref(a, u32)
    b = cast_ref(cast_ref(b, np.dtype(np.int32)), u32)
    left = ref_ufunc("multiply", ref_ufunc("bitwise_xor", a, b), Scalar("np", 3, "uint32"))
    return ref_ufunc("add", left, ref_ufunc("right_shift", a, Scalar("np", 2, "uint32")))


USER_FUNCTIONS = {
    "traced": (_TRACED, lambda x, y: _traced_body(REF_NS, x, y)),
    "axpy": (_AXPY, _ref_axpy),
    "mix": (_MIX, _ref_mix),
}

# }}}

# {{{ programs and their two interpreters

INPLACE = {"add": operator.iadd, "subtract": operator.isub, "multiply": operator.imul,
           "true_divide": operator.itruediv, "floor_divide": operator.ifloordiv,
           "remainder": operator.imod, "bitwise_and": operator.iand,
           "bitwise_or": operator.ior, "bitwise_xor": operator.ixor,
           "left_shift": operator.ilshift, "right_shift": operator.irshift}


INDEX_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@dataclass(frozen=True, eq=False)
class IntIndex:
    """An integer index array in a key (numpy's advanced indexing).

    ``form``: ``np`` (a numpy array), ``list`` (nested Python lists), ``fl`` (a concrete
    fuseloop array), ``lazy`` (a lazy fuseloop expression computing the values) or ``env``
    (computed from generated value ``v{src}``: ``v % n``, minus ``n`` with ``neg``).
    ``values`` are the index values (for ``env``, as generated: the reference recomputes them).
    """

    form: str
    values: np.ndarray
    src: int | None = None
    n: int = 0
    neg: bool = False

    def for_numpy(self, env: list) -> Any:
        if self.form == "env":
            with quiet():
                v = np.remainder(env[self.src].val, self.n)
                return v - self.n if self.neg else v
        return self.values.tolist() if self.form == "list" else self.values

    def for_fl(self, env: list) -> Any:
        if self.form == "env":
            v = env[self.src] % self.n
            return v - self.n if self.neg else v
        if self.form == "list":
            return self.values.tolist()
        if self.form == "fl":
            return fl.asarray(self.values)
        if self.form == "lazy":
            return fl.asarray(self.values.astype(np.int64) - 1) + 1
        return self.values

    def __repr__(self) -> str:
        if self.form == "env":
            return f"v{self.src} % {self.n}" + (f" - {self.n}" if self.neg else "")
        if self.form == "list":
            return repr(self.values.tolist())
        text = f"np.array({self.values.tolist()!r}, np.{self.values.dtype})"
        if self.form == "fl":
            return f"fl.asarray({text})"
        if self.form == "lazy":
            return f"(fl.asarray({text} - 1) + 1)"
        return text


@dataclass(frozen=True, eq=False)
class MaskIndex:
    """A boolean mask in a key: ``np``/``list``/``fl`` (host values), ``env`` (generated bool
    value ``v{src}``) or ``cmp`` (a lazy comparison ``fl.<op>(v{src}, other)``)."""

    form: str
    values: np.ndarray | None = None
    src: int | None = None
    op: str | None = None
    other: Any = None  # a Scalar or an env position

    def for_numpy(self, env: list) -> Any:
        if self.form == "env":
            return env[self.src].val
        if self.form == "cmp":
            other = env[self.other] if isinstance(self.other, int) else self.other
            return ref_ufunc(self.op, env[self.src], other).val
        return self.values.tolist() if self.form == "list" else self.values

    def for_fl(self, env: list) -> Any:
        if self.form == "env":
            return env[self.src]
        if self.form == "cmp":
            other = env[self.other] if isinstance(self.other, int) else self.other.for_fl()
            return getattr(fl, self.op)(env[self.src], other)
        if self.form == "fl":
            return fl.asarray(self.values)
        return self.values.tolist() if self.form == "list" else self.values

    def __repr__(self) -> str:
        if self.form == "env":
            return f"v{self.src}"
        if self.form == "cmp":
            return f"fl.{self.op}(v{self.src}, {_op(self.other)})"
        if self.form == "list":
            return repr(self.values.tolist())
        text = f"np.array({self.values.tolist()!r})"
        return f"fl.asarray({text})" if self.form == "fl" else text


def resolve_key(key: tuple, env: list, numpy: bool) -> tuple:
    """A generated key with its index arrays and masks made for numpy or for fuseloop."""
    return tuple((k.for_numpy(env) if numpy else k.for_fl(env))
                 if isinstance(k, IntIndex | MaskIndex) else k for k in key)


@dataclass
class Program:
    inputs: list[np.ndarray]
    steps: list[tuple] = field(default_factory=list)  # (step, env index of its value or None)
    outputs: list[int] = field(default_factory=list)
    together: bool = True  # evaluate the outputs with one fl.compute

    def listing(self) -> str:
        lines = [f"v{k} = fl.asarray(np.array({a.tolist()!r}, np.{a.dtype}))"
                 if a.size <= 64 else f"v{k} = fl.asarray(<{a.dtype} array {a.shape}>)"
                 for k, a in enumerate(self.inputs)]
        for step, out in self.steps:
            text = describe(step)
            lines.append(f"v{out} = {text}" if out is not None else text)
        how = "fl.compute" if self.together else ".get() each"
        lines.append(f"outputs ({how}): {', '.join(f'v{k}' for k in self.outputs)}")
        return "\n".join(lines)


def _op(o: Any) -> str:
    return f"v{o}" if isinstance(o, int) else repr(o)


def _key(key: Any) -> str:
    def one(k):
        if isinstance(k, slice):
            s = "" if k.start is None else str(k.start)
            s += ":" + ("" if k.stop is None else str(k.stop))
            return s + (f":{k.step}" if k.step is not None else "")
        if k is Ellipsis:
            return "..."
        if isinstance(k, np.ndarray):
            return f"np.array({k.tolist()})"
        return repr(k)
    return ", ".join(one(k) for k in key) if key else "()"


def describe(step: tuple) -> str:
    kind = step[0]
    if kind == "ufunc":
        return f"fl.{step[1]}({', '.join(_op(o) for o in step[2])})"
    if kind == "where":
        return f"fl.where({', '.join(_op(o) for o in step[1:])})"
    if kind == "clip":
        return f"fl.clip({', '.join(_op(o) if o is not None else 'None' for o in step[1:])})"
    if kind == "astype":
        return f"v{step[1]}.astype(np.{step[2]})"
    if kind == "reduce":
        _, op, x, axis, keepdims, ddof = step
        extra = f", ddof={ddof}" if op in ("var", "std") else ""
        return f"fl.{op}(v{x}, axis={axis!r}, keepdims={keepdims}{extra})"
    if kind == "index":
        return f"v{step[1]}[{_key(step[2])}]"
    if kind == "shape":
        return f"fl.{step[1]}(v{step[2]}{''.join(', ' + repr(a) for a in step[3])})"
    if kind == "take":
        return f"fl.take(v{step[1]}, np.array({step[2]!r}), axis={step[3]!r})"
    if kind == "adv":
        return f"v{step[1]}[{_key(step[2])}]"
    if kind == "nonzero":
        _, fname, x, k = step
        return f"fl.{fname}(v{x})" + (f"[{k}]" if fname == "nonzero" else "")
    if kind == "concat":
        return f"fl.{step[1]}([{', '.join(f'v{x}' for x in step[2])}], axis={step[3]!r})"
    if kind == "call":
        return f"{step[1]}({', '.join(_op(o) for o in step[2])})"
    if kind == "rebuild":
        return f"(the step that made v{step[1]}, built again)"
    if kind == "eval":
        return f"v{step[1]}.eval()"
    if kind == "setitem":
        return f"v{step[1]}[{_key(step[2])}] = {_op(step[3])}"
    if kind == "inplace":
        sym = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/",
               "floor_divide": "//", "remainder": "%", "bitwise_and": "&", "bitwise_or": "|",
               "bitwise_xor": "^", "left_shift": "<<", "right_shift": ">>"}[step[3]]
        target = f"v{step[1]}" + (f"[{_key(step[2])}]" if step[2] is not None else "")
        return f"{target} {sym}= {_op(step[4])}"
    if kind == "contract":
        _, t, key, x, y, form = step
        target = f"v{t}[{_key(key) if key is not None else '...'}]"
        read = f"v{t}" if key is None else target
        if form in ("add", "subtract"):
            return f"{target} {'+' if form == 'add' else '-'}= v{x} @ v{y}"
        if form == "gemm":
            return f"{target} = {GEMM_ALPHA!r} * (v{x} @ v{y}) + {GEMM_BETA!r} * {read}"
        return f"{target} = fl.{form}(v{x} @ v{y}, {read})"
    if kind == "error":
        return f"{describe(step[1])}  # raises {step[2]} (as numpy does)"
    raise AssertionError(kind)


def _as_view_key(key: tuple) -> tuple:
    """numpy's key for the same elements as a view.

    Documented deviation: an index with an integer for every axis gives a 0-d view in
    fuseloop, where numpy gives a scalar (a copy); so later writes show through it, and
    ``x[i] += v`` is an in-place operation with the ``same_kind`` rule.
    """
    return key if any(k is Ellipsis for k in key) else (*key, Ellipsis)


class RefLib:
    """numpy, through :class:`Ref`."""

    def input(self, a):
        return Ref(a.copy())

    def operand(self, o, env):
        return env[o] if isinstance(o, int) else o

    def ufunc(self, name, *ops):
        return ref_ufunc(name, *ops)

    def where(self, c, x, y):
        return ref_where(c, x, y)

    def clip(self, x, lo, hi):
        return ref_clip(x, lo, hi)

    def astype(self, x, dt):
        return cast_ref(x, np.dtype(dt))

    def reduce(self, op, x, axis, keepdims, ddof):
        return ref_reduce(op, x, axis, keepdims, ddof)

    def index(self, x, key):
        return x.view(lambda a: a[_as_view_key(key)])

    def shape(self, fname, x, args):
        return x.view(lambda a: getattr(np, fname)(a, *args))

    def take(self, x, idx, axis):
        return x.view(lambda a: np.take(a, np.asarray(idx, np.int64), axis=axis))

    def key(self, key, env):
        return resolve_key(key, env, numpy=True)

    def adv(self, x, key):
        # a copy (numpy reads 0-d index arrays as integers: a view where one is left)
        return Ref(np.array(x.val[key]), np.array(x.err[key], F64))

    def nonzero(self, fname, x, k):
        val = getattr(np, fname)(x.val)
        return Ref(val[k] if fname == "nonzero" else val)

    def concat(self, fname, xs, axis):
        val = getattr(np, fname)([x.val for x in xs], axis=axis)
        parts = [cast_ref(x, val.dtype) for x in xs]
        err = getattr(np, fname)([p.err for p in parts], axis=axis)
        return Ref(val, err)

    def call(self, fname, *ops):
        return USER_FUNCTIONS[fname][1](*ops)

    def eval(self, x):
        return None

    def setitem(self, t, key, value):
        key = _as_view_key(key)
        v = value if isinstance(value, Ref) else Ref(np.asarray(value.for_numpy()))
        err = cast_ref(v, t.dtype).err
        with quiet():
            try:
                t.val[key] = _numpy_operand(value)
            except (OverflowError, ValueError):
                if not (isinstance(value, Scalar) and value.kind in ("np", "const_dt")):
                    raise
                # documented deviation: a typed scalar that an integer array cannot hold
                # (out of range, NaN) is converted like an array (C cast); numpy may raise
                t.val[key] = np.asarray(value.for_numpy()).astype(t.dtype)
        t.err[key] = err

    def inplace(self, t, key, op, value):
        key = None if key is None else _as_view_key(key)
        view = t if key is None else t.view(lambda a: a[key])
        err = cast_ref(ref_ufunc(op, view, value), t.dtype).err
        with quiet():
            if key is None:
                INPLACE[op](t.val, _numpy_operand(value))
            else:
                tmp = t.val[key]
                tmp = INPLACE[op](tmp, _numpy_operand(value))
                t.val[key] = tmp
        t.err[key if key is not None else ...] = err

    def matmul(self, x, y):
        return ref_matmul(x, y)

    def read(self, t, key):
        return t if key is None else t.view(lambda a: a[_as_view_key(key)])


class FlLib:
    """fuseloop."""

    def input(self, a):
        return fl.asarray(a)

    def operand(self, o, env):
        return env[o] if isinstance(o, int) else o.for_fl()

    def ufunc(self, name, *ops):
        return getattr(fl, name)(*ops)

    def where(self, c, x, y):
        return fl.where(c, x, y)

    def clip(self, x, lo, hi):
        return fl.clip(x, lo, hi)

    def astype(self, x, dt):
        return x.astype(dt)

    def reduce(self, op, x, axis, keepdims, ddof):
        kw = {"ddof": ddof} if op in ("var", "std") else {}
        return getattr(fl, op)(x, axis=axis, keepdims=keepdims, **kw)

    def index(self, x, key):
        return x[key]

    def shape(self, fname, x, args):
        return getattr(fl, fname)(x, *args)

    def take(self, x, idx, axis):
        return fl.take(x, np.asarray(idx, np.int64), axis=axis)

    def key(self, key, env):
        return resolve_key(key, env, numpy=False)

    def adv(self, x, key):
        return x[key]

    def nonzero(self, fname, x, k):
        val = getattr(fl, fname)(x)
        return val[k] if fname == "nonzero" else val

    def concat(self, fname, xs, axis):
        return getattr(fl, fname)(xs, axis=axis)

    def call(self, fname, *ops):
        return USER_FUNCTIONS[fname][0](*ops)

    def eval(self, x):
        x.eval()

    def setitem(self, t, key, value):
        t[key] = value

    def inplace(self, t, key, op, value):
        if key is None:
            out = INPLACE[op](t, value)
            assert out is t
        else:
            tmp = t[key]
            tmp = INPLACE[op](tmp, value)
            t[key] = tmp

    def matmul(self, x, y):
        return x @ y

    def read(self, t, key):
        return t if key is None else t[key]


def contract(lib: Any, t: Any, key: tuple | None, x: Any, y: Any, form: str) -> None:
    """Write ``x @ y`` into ``t[key]`` (all of ``t`` for None) in place, the value
    reading the target: one contraction kernel whose epilogue reads what it writes."""
    prod = lib.matmul(x, y)
    if form in ("add", "subtract"):
        lib.inplace(t, key, form, prod)
        return
    old = lib.read(t, key)
    alpha, beta = (lib.operand(c, []) for c in (GEMM_ALPHA, GEMM_BETA))
    value = lib.ufunc("add", lib.ufunc("multiply", alpha, prod),
                      lib.ufunc("multiply", beta, old)) if form == "gemm" else \
        lib.ufunc(form, prod, old)
    lib.setitem(t, key if key is not None else (Ellipsis,), value)


def apply_step(lib: Any, step: tuple, env: list, steps: list) -> Any:
    """Run one step; returns the new value, or None for steps that only act."""
    kind = step[0]

    def opd(o):
        return lib.operand(o, env) if o is not None else None

    if kind == "ufunc":
        return lib.ufunc(step[1], *(opd(o) for o in step[2]))
    if kind == "where":
        return lib.where(*(opd(o) for o in step[1:]))
    if kind == "clip":
        return lib.clip(*(opd(o) for o in step[1:]))
    if kind == "astype":
        return lib.astype(env[step[1]], step[2])
    if kind == "reduce":
        _, op, x, axis, keepdims, ddof = step
        return lib.reduce(op, env[x], axis, keepdims, ddof)
    if kind == "index":
        return lib.index(env[step[1]], step[2])
    if kind == "shape":
        return lib.shape(step[1], env[step[2]], step[3])
    if kind == "take":
        return lib.take(env[step[1]], step[2], step[3])
    if kind == "concat":
        return lib.concat(step[1], [env[x] for x in step[2]], step[3])
    if kind == "adv":
        return lib.adv(env[step[1]], lib.key(step[2], env))
    if kind == "nonzero":
        return lib.nonzero(step[1], env[step[2]], step[3])
    if kind == "call":
        return lib.call(step[1], *(opd(o) for o in step[2]))
    if kind == "rebuild":
        original = next(s for s, out in steps if out == step[1])
        return apply_step(lib, original, env, steps)
    if kind == "eval":
        return lib.eval(env[step[1]])
    if kind == "setitem":
        return lib.setitem(env[step[1]], lib.key(step[2], env), opd(step[3]))
    if kind == "inplace":
        key = step[2] if step[2] is None else lib.key(step[2], env)
        return lib.inplace(env[step[1]], key, step[3], opd(step[4]))
    if kind == "contract":
        _, t, key, x, y, form = step
        return contract(lib, env[t], key, env[x], env[y], form)
    raise AssertionError(kind)


ERROR_FAMILIES = {"OverflowError": OverflowError, "TypeError": TypeError,
                  "ValueError": ValueError}


def run_program(lib: Any, prog: Program, check: list[Ref] | None = None) -> list:
    """Interpret ``prog``; with ``check`` (the reference env), compare dtypes and shapes."""
    env = [lib.input(a) for a in prog.inputs]
    done: list[tuple] = []
    for step, out in prog.steps:
        if step[0] == "error":
            family = ERROR_FAMILIES[step[2]]
            try:
                apply_step(lib, step[1], env, done)
            except family:
                pass
            else:
                raise AssertionError(f"numpy raises {step[2]} for `{describe(step[1])}`, "
                                     "fuseloop does not")
            done.append((step, out))
            continue
        value = apply_step(lib, step, env, done)
        done.append((step, out))
        if out is not None:
            assert out == len(env)
            env.append(value)
            if check is not None:
                want = check[out]
                assert (value.dtype, value.shape) == (want.dtype, want.shape), (
                    f"v{out} = {describe(step)}: fuseloop gives {value.dtype}{list(value.shape)},"
                    f" numpy {want.dtype}{list(want.shape)}")
    return env


def compare(label: str, got: np.ndarray, want: Ref) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (label, got.dtype, want.dtype)
    w, err = want.val, want.err
    care = err < INF
    if w.dtype.kind != "f":
        bad = care & (got != w)
    else:
        g, x = got.astype(F64), w.astype(F64)
        finite = np.isfinite(x)
        with quiet():
            same_nf = (np.isnan(g) & np.isnan(x)) | (g == x)
            close = np.isfinite(g) & (np.abs(g - x) <= err * SLACK)
            zero_sign = (err == 0) & (x == 0) & (np.signbit(g) != np.signbit(x))
        bad = care & np.where(finite, ~close | zero_sign, ~same_nf)
    if bad.any():
        where = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:6]]
        rows = "\n".join(f"  at {ix}: fuseloop {got[ix]!r}, numpy {w[ix]!r} (bound {err[ix]:.3g})"
                         for ix in where)
        raise AssertionError(f"{label}: {int(bad.sum())} of {bad.size} elements differ\n{rows}")

# }}}

# {{{ strategies

UNARY_FUZZ = ("negative", "positive", "absolute", "sign", "square", "invert", "logical_not",
              "isnan", "isinf", "isfinite", "sqrt", "exp", "exp2", "expm1", "log", "log2",
              "log10", "log1p", "sin", "cos", "tanh", "arctan", "arcsinh", "floor", "ceil",
              "trunc", "rint")
BINARY_FUZZ = ("add", "subtract", "multiply", "true_divide", "floor_divide", "remainder",
               "fmod", "power", "minimum", "maximum", "fmin", "fmax", "hypot", "copysign",
               *COMPARISONS, "logical_and", "logical_or", "logical_xor", "bitwise_and",
               "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
REDUCTIONS = ("sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "argmax",
              "argmin")
STEP_KINDS = (["unary"] * 3 + ["binary"] * 6 + ["where", "clip", "astype"] + ["reduce"] * 3
              + ["index"] * 2 + ["shape"] * 3 + ["take", "concat", "call", "call", "rebuild",
                                                 "eval", "setitem", "inplace"]
              + ["adv"] * 2 + ["nonzero", "contract"])
# products written in place, the value reading the target (t += x @ y, t[...] =
# 1.5 * (x @ y) + -0.5 * t): recipes tile the output, and an element written by two
# tiles would take the epilogue twice.  bool operands are left out: fuseloop's
# bool @ bool is int64 where numpy's is bool.
CONTRACT_FORMS = ("add", "subtract", "gemm", "maximum")
CONTRACT_DTYPES = tuple(t for t in DTYPES if t != "bool")
GEMM_ALPHA, GEMM_BETA = Scalar("py", 1.5), Scalar("py", -0.5)
MAX_PRODUCTS = 2_000_000  # elements of the reference's (..., m, k, n) products


@dataclass(frozen=True)
class ContractSizes:
    """Sizes of the generated in-place products: multiples of no block of the recipes
    (CPU 6 x 16, GPU 128 x 128 and 64 x 64), the rows and columns of the quick
    profile all big enough for a contraction kernel (32)."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]
    reduced: tuple[int, ...]
    batches: tuple[tuple[int, ...], ...]


CONTRACT_SIZES = {
    "quick": ContractSizes(rows=(33, 37, 40, 47), cols=(33, 36, 51), reduced=(5, 17, 40),
                           batches=((), (), (2,))),
    "long": ContractSizes(rows=(1, 2, 5, 17, 33, 35, 37, 40, 47, 65, 101, 133),
                          cols=(1, 3, 7, 33, 36, 41, 51, 100, 131),
                          reduced=(1, 3, 4, 5, 17, 40, 67),
                          batches=((), (), (), (2,), (3,), (2, 1))),
}[PROFILE]
MAX_ELEMENTS = 3 * 70001  # no broadcast beyond (gathers and masks make new lengths)
FLOAT_SPECIALS = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1.5, math.nan, math.inf, -math.inf)
BIG_INTS = (100, 127, 200, 255, 300, 40000, 2**31, 2**40, -(2**63), 2**64 - 1)


def _valid(name: str, kinds: tuple) -> bool:
    try:
        getattr(np, name).resolve_dtypes((*kinds, None))
    except TypeError:
        return False
    return True


def _element_strategy(dt: np.dtype) -> st.SearchStrategy:
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = int(info.min), int(info.max)
        edges = sorted({lo, hi, lo + 1, hi - 1, 0, 1} | ({-1} if dt.kind == "i" else set()))
        return st.one_of(st.integers(max(lo, -4), min(hi, 4)), st.sampled_from(edges),
                         st.integers(lo, hi))
    width = 32 if dt == F32 else 64
    return st.one_of(st.sampled_from(FLOAT_SPECIALS),
                     st.floats(-8, 8, width=width, allow_subnormal=False),
                     st.floats(width=width, allow_subnormal=False))


@st.composite
def _array(draw, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    n = math.prod(shape)
    if n > 256:  # big arrays: random values from a drawn seed
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if dt.kind == "b":
            return rng.integers(0, 2, shape).astype(bool)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            return rng.integers(max(int(info.min), -100), min(int(info.max), 100), shape,
                                endpoint=True).astype(dt)
        return (rng.standard_normal(shape) * 4).astype(dt)
    elements = draw(st.lists(_element_strategy(dt), min_size=n, max_size=n))
    with quiet():
        return np.array(elements, dtype=object).astype(dt).reshape(shape)


@st.composite
def scalars(draw) -> Scalar:
    kind = draw(st.sampled_from(["py", "py", "np", "const", "const_dt"]))
    if kind in ("py", "const"):
        value = draw(st.one_of(st.integers(-3, 3), st.sampled_from(FLOAT_SPECIALS),
                               st.floats(-8, 8, width=32), st.booleans(),
                               st.sampled_from(BIG_INTS)))
        return Scalar(kind, value)
    dt = np.dtype(draw(st.sampled_from(DTYPES)))
    value = draw(_element_strategy(dt))
    return Scalar(kind, bool(value) if dt.kind == "b" else value, dt.name)


class Gen:
    """Draws the parameters of one step from the current environment of reference values."""

    def __init__(self, draw, env: list[Ref], writable: set[int], values: list[int]) -> None:
        self.draw, self.env, self.writable, self.values = draw, env, writable, values
        self.kind_of: dict[int, str] = {}
        self.index_writes = False  # writes only through index arrays and masks

    def pick(self, pred=lambda r: True) -> int | None:
        cands = [i for i, r in enumerate(self.env) if pred(r)]
        if not cands:
            return None
        if self.draw(st.booleans()):
            return cands[-1]  # chains: the most recent value
        return self.draw(st.sampled_from(cands))

    def compatible(self, shape) -> Any:
        def ok(r):
            try:
                out = np.broadcast_shapes(shape, r.shape)
            except ValueError:
                return False
            # (a selection's length against a big array's would make an outer product)
            return math.prod(out) <= MAX_ELEMENTS
        return ok

    def axis(self, ndim: int, allow_none=True, allow_tuple=True) -> Any:
        opts = ["none"] * allow_none + ["int"] * (ndim > 0) + ["tuple"] * allow_tuple
        how = self.draw(st.sampled_from(opts))
        if how == "none":
            return None
        if how == "int":
            return self.draw(st.integers(-ndim, ndim - 1))
        axes = self.draw(st.lists(st.integers(0, max(ndim - 1, 0)), unique=True,
                                  max_size=ndim)) if ndim else []
        return tuple(a - ndim if self.draw(st.booleans()) else a for a in axes)

    def basic_key(self, shape: tuple[int, ...]) -> tuple:
        d = self.draw
        nd = len(shape)

        def items(dims):
            out: list[Any] = []
            for n in dims:
                if n > 0 and d(st.integers(0, 3)) == 0:
                    out.append(d(st.integers(-n, n - 1)))
                else:
                    bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
                    out.append(slice(d(bound), d(bound),
                                     d(st.sampled_from([None, 1, 2, 3, -1, -2, -3]))))
            return out

        lead = d(st.integers(0, nd))
        key = items(shape[:lead])
        if d(st.booleans()):  # an Ellipsis, then items for some trailing axes
            trail = d(st.integers(0, nd - lead))
            key += [Ellipsis, *items(shape[nd - trail:])]
        for _ in range(d(st.integers(0, 1))):
            key.insert(d(st.integers(0, len(key))), None)
        return tuple(key)

    # {{{ one drawer per step kind

    def unary(self):
        x = self.pick()
        names = [n for n in UNARY_FUZZ if _valid(n, (self.env[x].dtype,))]
        return ("ufunc", self.draw(st.sampled_from(names)), (x,))

    def binary(self):
        d = self.draw
        a = self.pick()
        b: Any = None
        if d(st.integers(0, 2)) > 0:
            b = self.pick(self.compatible(self.env[a].shape))
        if b is None:
            b = d(scalars())
        ops = (b, a) if d(st.booleans()) else (a, b)
        kinds = tuple(self.env[o].dtype if isinstance(o, int) else o.resolve_kind()
                      for o in ops)
        names = [n for n in BINARY_FUZZ if _valid(n, kinds)]
        if not names:
            return None
        return ("ufunc", d(st.sampled_from(names)), ops)

    def operand_or_scalar(self, shape):
        i = self.pick(self.compatible(shape)) if self.draw(st.booleans()) else None
        return i if i is not None else self.draw(scalars())

    def where(self):
        c = self.pick()
        shape = self.env[c].shape
        return ("where", c, self.operand_or_scalar(shape), self.operand_or_scalar(shape))

    def clip(self):
        x = self.pick()
        shape = self.env[x].shape
        lo, hi = self.operand_or_scalar(shape), self.operand_or_scalar(shape)
        which = self.draw(st.sampled_from(["both", "lo", "hi"]))
        return ("clip", x, None if which == "hi" else lo, None if which == "lo" else hi)

    def astype(self):
        return ("astype", self.pick(), self.draw(st.sampled_from(DTYPES)))

    def reduce(self):
        d = self.draw
        x = self.pick()
        op = d(st.sampled_from(REDUCTIONS))
        nd = self.env[x].val.ndim
        axis = self.axis(nd, allow_tuple=op not in ("argmax", "argmin"))
        ddof = d(st.integers(0, 2)) if op in ("var", "std") else 0
        return ("reduce", op, x, axis, d(st.booleans()), ddof)

    def index(self):
        x = self.pick()
        return ("index", x, self.basic_key(self.env[x].shape))

    def shape(self):
        d = self.draw
        x = self.pick()
        shape = self.env[x].shape
        nd = len(shape)
        fname = d(st.sampled_from(["reshape", "ravel", "transpose", "swapaxes", "moveaxis",
                                   "flip", "roll", "expand_dims", "squeeze", "broadcast_to",
                                   "tile", "repeat", "diagonal", "triu", "tril"]))
        if fname == "reshape":
            size = math.prod(shape)
            dims: list[int] = []
            rest = size
            for _ in range(d(st.integers(0, 3))):
                divs = [k for k in range(1, min(rest, 8) + 1) if rest % k == 0] or [1]
                k = d(st.sampled_from(divs))
                dims.append(k)
                rest //= max(k, 1)
            dims.append(rest)
            if size and d(st.booleans()):
                dims[d(st.integers(0, len(dims) - 1))] = -1
            order = d(st.permutations(dims))
            return ("shape", fname, x, (tuple(order),))
        if fname == "ravel":
            return ("shape", fname, x, ())
        if fname == "transpose":
            return ("shape", fname, x, (tuple(d(st.permutations(range(nd)))),))
        if fname in ("swapaxes", "moveaxis"):
            if nd == 0:
                return None
            ax = st.integers(-nd, nd - 1)
            return ("shape", fname, x, (d(ax), d(ax)))
        if fname == "flip":
            return ("shape", fname, x, (self.axis(nd),))
        if fname == "roll":
            axis = self.axis(nd, allow_tuple=False)
            return ("shape", fname, x, (d(st.integers(-7, 7)), axis))
        if fname == "expand_dims":
            return ("shape", fname, x, (d(st.integers(-nd - 1, nd)),))
        if fname == "squeeze":
            units = [k for k, n in enumerate(shape) if n == 1]
            axis = d(st.sampled_from([None, *units])) if units else None
            return ("shape", fname, x, (axis,))
        if fname == "broadcast_to":
            new = tuple(d(st.integers(1, 3)) if n == 1 else n for n in shape)
            lead = tuple(d(st.lists(st.integers(1, 3), max_size=1)))
            return ("shape", fname, x, (lead + new,))
        if fname == "tile":
            return ("shape", fname, x, (tuple(d(st.lists(st.integers(1, 2), min_size=1,
                                                         max_size=2))),))
        if fname == "repeat":
            return ("shape", fname, x, (d(st.integers(0, 3)), self.axis(nd, allow_tuple=False)))
        if nd < 2:
            return None
        if fname == "diagonal":
            a1 = d(st.integers(0, nd - 1))
            a2 = d(st.sampled_from([k for k in range(nd) if k != a1]))
            return ("shape", fname, x, (d(st.integers(-2, 2)), a1, a2))
        return ("shape", fname, x, (d(st.integers(-2, 2)),))

    def take(self):
        d = self.draw
        x = self.pick()
        shape = self.env[x].shape
        axis = self.axis(len(shape), allow_tuple=False)
        n = math.prod(shape) if axis is None else shape[axis]
        if n == 0:
            return None
        idx_shape = d(st.sampled_from([(1,), (3,), (2, 2), ()]))
        idx = d(st.lists(st.integers(-n, n - 1), min_size=math.prod(idx_shape),
                         max_size=math.prod(idx_shape)))
        return ("take", x, np.array(idx, np.int64).reshape(idx_shape).tolist(), axis)

    def concat(self):
        d = self.draw
        x = self.pick()
        shape = self.env[x].shape
        fname = d(st.sampled_from(["concatenate", "stack"]))
        nd = len(shape)
        if fname == "concatenate":
            if nd == 0:
                return None
            axis = d(st.one_of(st.none(), st.integers(-nd, nd - 1)))
            ax = None if axis is None else axis % nd

            def fits(r):
                return ax is None or (r.val.ndim == nd and all(
                    p == q for k, (p, q) in enumerate(zip(r.shape, shape)) if k != ax))
        else:
            axis = d(st.integers(-nd - 1, nd))

            def fits(r):
                return r.shape == shape
        # (one piece alone is a copy; several, a lazy concatenation read in place)
        others = [self.pick(fits) for _ in range(d(st.integers(0, 3)))]
        return ("concat", fname, (x, *others), axis)

    def call(self):
        d = self.draw
        fname = d(st.sampled_from(sorted(USER_FUNCTIONS)))
        x = self.pick()
        if fname == "traced":
            return ("call", fname, (x, self.operand_or_scalar(self.env[x].shape)))
        y = self.pick(self.compatible(self.env[x].shape))
        return ("call", fname, (x, y))

    def rebuild(self):
        if not self.values:
            return None
        return ("rebuild", self.draw(st.sampled_from(self.values)))

    def eval(self):
        return ("eval", self.pick())

    def setitem(self):
        d = self.draw
        if not self.writable:
            return None
        t = d(st.sampled_from(sorted(self.writable)))
        shape = self.env[t].shape
        if shape and (self.index_writes or d(st.booleans())):  # index arrays, masks
            found = self.adv_target(t)
            if found is None:
                return None
            key, sub, distinct = found
            # a position written twice gets one of its values (numpy: the last): one value
            value = self.operand_or_scalar(sub) if distinct else d(scalars())
            return ("setitem", t, key, value)
        if shape and d(st.booleans()):  # a scatter: distinct positions along one axis
            ax = d(st.integers(0, len(shape) - 1))
            n = shape[ax]
            if n == 0:
                return None
            pos = d(st.lists(st.integers(0, n - 1), unique=True, min_size=1, max_size=3))
            idx = np.array([p - n if d(st.booleans()) else p for p in pos], np.int64)
            key = (slice(None),) * ax + (idx,)
            sub = shape[:ax] + idx.shape + shape[ax + 1:]
        else:
            key = self.basic_key(shape)
            with quiet():
                sub = self.env[t].val[key].shape
        return ("setitem", t, key, self.operand_or_scalar(sub))

    def inplace(self):
        d = self.draw
        if not self.writable:
            return None
        t = d(st.sampled_from(sorted(self.writable)))
        shape = self.env[t].shape
        op = d(st.sampled_from(sorted(INPLACE)))
        if shape and (self.index_writes or d(st.booleans())):  # x[i, j] += v, x[mask] *= v
            found = self.adv_target(t)
            if found is None:
                return None
            key, sub, distinct = found
            value = self.operand_or_scalar(sub) if distinct else d(scalars())
            return ("inplace", t, key, op, value)
        key = self.basic_key(shape) if d(st.booleans()) else None
        with quiet():
            sub = self.env[t].val[key].shape if key is not None else shape
        return ("inplace", t, key, op, self.operand_or_scalar(sub))

    def contract(self):
        """``t[key] += x @ y`` and the like, with operands of fitting shapes from the env."""
        d = self.draw
        if not self.writable:
            return None
        t = d(st.sampled_from(sorted(self.writable)))
        shape = self.env[t].shape
        if len(shape) < 2:
            return None
        key = self.basic_key(shape) if d(st.booleans()) else None
        with quiet():
            sub = self.env[t].val[key].shape if key is not None else shape
        if len(sub) < 2:
            return None
        xs = [i for i, r in enumerate(self.env) if r.val.ndim >= 2 and r.shape[-2] == sub[-2]
              and r.dtype.name in CONTRACT_DTYPES]
        if not xs:
            return None
        x = d(st.sampled_from(xs))
        k = self.env[x].shape[-1]
        ys = [i for i, r in enumerate(self.env) if r.val.ndim >= 2
              and r.shape[-2:] == (k, sub[-1]) and r.dtype.name in CONTRACT_DTYPES]
        if not ys:
            return None
        y = d(st.sampled_from(ys))
        try:
            batch = np.broadcast_shapes(self.env[x].shape[:-2], self.env[y].shape[:-2])
            np.broadcast_shapes(batch + sub[-2:], sub)
        except ValueError:
            return None
        if math.prod(batch) * sub[-2] * k * sub[-1] > MAX_PRODUCTS:
            return None
        return ("contract", t, key, x, y, d(st.sampled_from(CONTRACT_FORMS)))

    def adv(self):
        x = self.pick(lambda r: r.val.ndim > 0)
        if x is None:
            return None
        key = self.adv_key(self.env[x].shape)
        return None if key is None else ("adv", x, key)

    def nonzero(self):
        d = self.draw

        def certain(r):  # whether each element is certainly zero or certainly not
            t, f = truth(r)
            return bool((t | f).all())

        x = self.pick(certain)
        if x is None:
            return None
        fname = d(st.sampled_from(["nonzero", "flatnonzero", "argwhere"]))
        nd = self.env[x].val.ndim
        if fname == "nonzero":
            return ("nonzero", fname, x, d(st.integers(0, nd - 1))) if nd else None
        return ("nonzero", fname, x, None)

    # }}}

    # {{{ advanced keys: integer index arrays and boolean masks

    def exact(self, i: int) -> bool:
        return not self.env[i].err.any()

    def slice_or_int(self, n: int, ints: bool = True) -> Any:
        d = self.draw
        if ints and n > 0 and d(st.integers(0, 3)) == 0:
            return d(st.integers(-n, n - 1))
        if d(st.booleans()):
            return slice(None)
        bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
        return slice(d(bound), d(bound), d(st.sampled_from([None, 1, 2, -1, -2])))

    def host_index(self, vals: np.ndarray) -> IntIndex:
        d = self.draw
        form = d(st.sampled_from(["np", "np", "list", "fl", "lazy"]))
        if form == "list" and (vals.ndim == 0 or vals.size == 0):
            form = "np"  # (numpy reads [] as float and a bare int as an integer)
        dts = [t for t in INDEX_DTYPES if vals.size == 0 or (
            np.iinfo(t).min <= vals.min() and vals.max() <= np.iinfo(t).max)]
        dt = d(st.sampled_from(dts)) if form in ("np", "fl") else "int64"
        return IntIndex(form, vals.astype(dt))

    def int_array(self, n: int, shape: tuple[int, ...]) -> IntIndex | None:
        size = math.prod(shape)
        if size and n == 0:
            return None
        if not size:
            return self.host_index(np.zeros(shape, np.int64))
        vals = self.values_of(st.integers(-n, n - 1), size,
                              lambda rng: rng.integers(-n, n, size))
        return self.host_index(np.array(vals, np.int64).reshape(shape))

    def values_of(self, elements: st.SearchStrategy, size: int, big: Any) -> Any:
        if size > 256:  # (big arrays) random values from a drawn seed
            return big(np.random.default_rng(self.draw(st.integers(0, 2**32 - 1))))
        return self.draw(st.lists(elements, min_size=size, max_size=size))

    def env_index(self, src: int, n: int) -> IntIndex | None:
        """``v{src} % n`` (minus ``n``): a lazy index from a generated integer value."""
        dt = self.env[src].dtype
        if n == 0 or (dt.kind != "b" and n > np.iinfo(dt).max):
            return None
        neg = dt.kind == "i" and -n >= np.iinfo(dt).min and self.draw(st.booleans())
        idx = IntIndex("env", np.zeros(0, np.int64), src, n, neg)
        return IntIndex("env", np.asarray(idx.for_numpy(self.env)), src, n, neg)

    def arrange(self, items: list) -> tuple:
        """Trailing slices dropped, an Ellipsis for a run of slices, a None inserted."""
        d = self.draw
        while items and isinstance(items[-1], slice) and d(st.booleans()):
            items.pop()
        if d(st.integers(0, 3)) == 0:
            p = q = d(st.integers(0, len(items)))
            while q < len(items) and isinstance(items[q], slice) and d(st.booleans()):
                q += 1
            items[p:q] = [Ellipsis]
        if d(st.integers(0, 3)) == 0:
            items.insert(d(st.integers(0, len(items))), None)
        return tuple(items)

    def adv_key(self, shape: tuple[int, ...]) -> tuple | None:
        d = self.draw
        nd = len(shape)
        if nd == 0:
            return None
        if d(st.booleans()):
            return self.mask_key(shape)
        k = d(st.integers(1, min(nd, 3)))
        axes = sorted(d(st.lists(st.integers(0, nd - 1), unique=True, min_size=k, max_size=k)))
        env_cands = [i for i, r in enumerate(self.env) if r.dtype.kind in "biu"
                     and r.val.ndim <= 3 and r.val.size <= 64 and self.exact(i)]
        src = d(st.sampled_from(env_cands)) if env_cands and d(st.integers(0, 2)) == 0 \
            else None
        if src is not None:  # the broadcast index shape is the generated value's
            bshape = self.env[src].shape
        else:
            bshape = tuple(d(st.lists(st.sampled_from([1, 2, 3, 3, 0]), max_size=2)))
        env_slot = d(st.integers(0, k - 1)) if src is not None else None
        items: list[Any] = []
        for ax, n in enumerate(shape):
            if ax not in axes:
                items.append(self.slice_or_int(n))
                continue
            idx = self.env_index(src, n) if axes.index(ax) == env_slot else None
            if idx is None:
                if n == 0:
                    sub = (0,)
                else:  # a suffix of the broadcast shape, some axes of length 1
                    sub = bshape[d(st.integers(0, len(bshape))):]
                    sub = tuple(1 if d(st.integers(0, 3)) == 0 else m for m in sub)
                idx = self.int_array(n, sub)
                if idx is None:
                    return None
            items.append(idx)
        return self.arrange(items)

    def mask_key(self, shape: tuple[int, ...]) -> tuple | None:
        d = self.draw
        nd = len(shape)
        p = d(st.integers(0, nd - 1))
        mshape = shape[p:p + d(st.integers(1, nd - p))]
        form = d(st.sampled_from(["np", "list", "fl", "env", "cmp", "cmp", "cmp"]))
        mask = None
        if form == "env":
            cands = [i for i, r in enumerate(self.env) if r.dtype.kind == "b"
                     and r.shape == mshape and self.exact(i)]
            if cands:
                mask = MaskIndex("env", src=d(st.sampled_from(cands)))
        elif form == "cmp":  # a lazy comparison; usable where its outcome is certain
            src = self.pick(lambda r: r.shape == mshape)
            if src is not None:
                other = self.operand_or_scalar(mshape)
                op = d(st.sampled_from(COMPARISONS))
                try:
                    r = ref_ufunc(op, self.env[src],
                                  self.env[other] if isinstance(other, int) else other)
                except (TypeError, ValueError, OverflowError):
                    r = None
                if r is not None and r.shape == mshape and not r.err.any():
                    mask = MaskIndex("cmp", src=src, op=op, other=other)
        if mask is None:
            size = math.prod(mshape)
            vals = np.array(self.values_of(st.booleans(), size,
                                           lambda rng: rng.integers(0, 2, size)),
                            bool).reshape(mshape)
            form = form if form in ("np", "fl") or (form == "list" and size) else "np"
            mask = MaskIndex(form, vals)
        count = int(np.count_nonzero(mask.for_numpy(self.env)))
        items: list[Any] = [self.slice_or_int(n) for n in shape[:p]] + [mask]
        extra = d(st.integers(0, 4)) == 0  # an index array too, broadcasting with the mask's
        for n in shape[p + len(mshape):]:
            if extra and n:
                idx = self.int_array(n, d(st.sampled_from([(1,), (count,)])))
                if idx is not None:
                    items.append(idx)
                    extra = False
                    continue
            items.append(self.slice_or_int(n))
        return self.arrange(items)

    def adv_target(self, t: int) -> tuple | None:
        """(key, shape of the selection, whether it selects no position twice) for a write."""
        shape = self.env[t].shape
        key = self.adv_key(shape)
        if key is None:
            return None
        nkey = resolve_key(key, self.env, numpy=True)
        try:
            with quiet():
                pos = np.arange(math.prod(shape)).reshape(shape)[nkey]
        except IndexError:
            return None
        pos = np.asarray(pos)
        return key, pos.shape, np.unique(pos).size == pos.size

    # }}}


def _has_scalar_operand(step: tuple) -> bool:
    """Steps whose errors depend on scalar operands (numpy's OverflowError, TypeError)."""
    ops = step[2] if step[0] == "ufunc" else step[1:] if step[0] in ("where", "clip") else ()
    return any(isinstance(o, Scalar) for o in ops)


def _shares_input(r: Ref, inputs: list[Ref]) -> bool:
    return r.val.flags.writeable and any(np.shares_memory(r.val, a.val) for a in inputs)


@st.composite
def _inputs(draw, cfg: Config, index_writes: bool) -> list[np.ndarray]:
    """Inputs of a common (broadcast) shape, in every dtype."""
    big = cfg.big_arrays and draw(st.integers(0, 9)) == 0
    if big:
        base = (draw(st.sampled_from([40000, 70001])),)
    else:
        ndim = draw(st.integers(int(index_writes), max(cfg.max_ndim, int(index_writes))))
        base = tuple(draw(st.sampled_from(cfg.dims)) for _ in range(ndim))
    inputs = []
    for _ in range(draw(st.integers(1, cfg.max_inputs))):
        dt = np.dtype(draw(st.sampled_from(DTYPES)))
        drop = draw(st.integers(0, len(base)))
        drop = min(drop, len(base) - int(index_writes))
        shape = tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in base[drop:])
        inputs.append(draw(_array(dt, shape)))
    return inputs


@st.composite
def _contraction_start(draw, sizes: ContractSizes = CONTRACT_SIZES) -> tuple[list, list]:
    """Inputs ``t``, ``x``, ``y`` and the first steps: ``x`` or ``y`` maybe transposed
    (``swapaxes`` of an input stored the other way), then one product written into
    all of ``t`` or a strided window of it, the value reading the target."""
    m, n, k = (draw(st.sampled_from(c)) for c in (sizes.rows, sizes.cols, sizes.reduced))
    batch = draw(st.sampled_from(sizes.batches))
    if math.prod(batch) * m * k * n > MAX_PRODUCTS:
        batch = ()
    xdt = np.dtype(draw(st.sampled_from(["float32", "float64", "float32", "float64",
                                         *CONTRACT_DTYPES])))
    ydt = xdt if draw(st.integers(0, 3)) else np.dtype(draw(st.sampled_from(CONTRACT_DTYPES)))
    tdt = np.result_type(xdt, ydt)
    if tdt.kind in "iu" and draw(st.integers(0, 3)) == 0:
        tdt = np.dtype(np.float64)  # (same_kind: an integer product into a float target)
    window = draw(st.booleans())  # t[..., 1:, ::2]: offset rows, every other column
    tshape = (*batch, m + 1, 2 * n - 1) if window else (*batch, m, n)
    key = (Ellipsis, slice(1, None), slice(None, None, 2)) if window else None
    tx, ty = draw(st.booleans()), draw(st.booleans())
    # x's batch axes may be broadcast: all of them or none of them
    xbatch = batch if draw(st.integers(0, 2)) else tuple(1 for _ in batch)
    inputs = [draw(_array(tdt, tshape)),
              draw(_array(xdt, (*xbatch, k, m) if tx else (*xbatch, m, k))),
              draw(_array(ydt, (*batch, n, k) if ty else (*batch, k, n)))]
    steps: list[tuple] = []
    xi, yi = 1, 2
    for flag, src in ((tx, 1), (ty, 2)):
        if flag:
            steps.append(("shape", "swapaxes", src, (-1, -2)))
            if src == 1:
                xi = len(inputs) + len(steps) - 1
            else:
                yi = len(inputs) + len(steps) - 1
    steps.append(("contract", 0, key, xi, yi, draw(st.sampled_from(CONTRACT_FORMS))))
    return inputs, steps


@st.composite
def programs(draw, cfg: Config = CONFIG, kinds: tuple = STEP_KINDS,
             index_writes: bool = False, contraction: bool = False) -> Program:
    """Programs of steps drawn from ``kinds``; ``index_writes``: every write goes through
    index arrays or a mask, and the inputs have at least one axis; ``contraction``:
    the program starts with a product written in place (:func:`_contraction_start`)."""
    planned: list[tuple] = []
    if contraction:
        inputs, planned = draw(_contraction_start())
    else:
        inputs = draw(_inputs(cfg, index_writes))
    prog = Program(inputs)
    env = [Ref(a.copy()) for a in inputs]
    writable = set(range(len(inputs)))
    values: list[int] = []
    lib = RefLib()
    gen = Gen(draw, env, writable, values)
    gen.index_writes = index_writes
    written: set[int] = set()  # inputs written to (compared at the end)
    done: list[tuple] = []
    lo, hi = (0, 3) if contraction else (cfg.min_steps, cfg.max_steps)
    for i in range(len(planned) + draw(st.integers(lo, hi))):
        step = planned[i] if i < len(planned) else getattr(gen, draw(st.sampled_from(kinds)))()
        if step is None:
            continue
        try:
            value = apply_step(lib, step, env, done)
        except (TypeError, ValueError, OverflowError) as exc:
            if "C long" in str(exc):
                # numpy cannot convert a Python int beyond int64 for a bool loop
                # (logical_and(bool_array, 2**64 - 1)); fuseloop converts it: not compared
                continue
            if _has_scalar_operand(step) or step[0] in ("setitem", "inplace", "contract"):
                family = next(n for n, c in ERROR_FAMILIES.items() if isinstance(exc, c))
                prog.steps.append((("error", step, family), None))
                done.append(prog.steps[-1])
            continue
        except IndexError:
            continue
        out = None
        if value is not None:
            out = len(env)
            env.append(value)
            values.append(out)
            gen.kind_of[out] = gen.kind_of[step[1]] if step[0] == "rebuild" else step[0]
            if step[0] in ("index", "shape") and _shares_input(value, env[:len(inputs)]):
                writable.add(out)
        if step[0] in ("setitem", "inplace", "contract"):
            written |= {k for k in range(len(inputs)) if np.shares_memory(env[k].val,
                                                                          env[step[1]].val)}
        prog.steps.append((step, out))
        done.append((step, out))
    if not values and not written:
        reject()
    extra = draw(st.lists(st.sampled_from(values), max_size=2, unique=True)) if values else []
    prog.outputs = list(dict.fromkeys([*values[-1:], *extra, *sorted(written)]))
    prog.together = draw(st.booleans())
    return prog

# }}}

# {{{ tests


def _set_denormal_floor(device: Any) -> None:
    import pyopencl as cl

    for dt, cfg in ((F32, device.cl_device.single_fp_config),
                    (F64, device.cl_device.double_fp_config if device.has_fp64 else 0)):
        DENORM_FLOOR[dt] = 0.0 if cfg & cl.device_fp_config.DENORM else float(np.finfo(dt).tiny)


def check_program(prog: Program, device: Any) -> None:
    _set_denormal_floor(device)
    note(prog.listing())
    refs = run_program(RefLib(), prog)
    if not device.has_fp64 and any(r.dtype == F64 for r in refs):
        reject()
    _evaluate_and_compare(prog, refs)
    for k in prog.outputs:
        err = refs[k].err
        COUNTS["exact"] += int((err == 0).sum())
        COUNTS["free"] += int((err == INF).sum())
        COUNTS["bounded"] += int(((err > 0) & (err < INF)).sum())
    # Again with new arrays: the cached structures and run plans of the first pass
    # are replayed; then once more re-deriving each and comparing it with the cache.
    _evaluate_and_compare(prog, refs)
    prog_module.CHECK_STRUCTURE_CACHE = True
    try:
        _evaluate_and_compare(prog, refs)
    finally:
        prog_module.CHECK_STRUCTURE_CACHE = False
    COUNTS["programs"] += 1
    COUNTS["steps"] += len(prog.steps)
    COUNTS["error_steps"] += sum(s[0] == "error" for s, _ in prog.steps)


def _evaluate_and_compare(prog: Program, refs: list[Ref]) -> None:
    env = run_program(FlLib(), prog, check=refs)
    outs = [env[k] for k in prog.outputs]
    if prog.together:
        fl.compute(*outs)
    for k, o in zip(prog.outputs, outs):
        compare(f"v{k}", o.get(), refs[k])


@FUZZ_SETTINGS
@given(prog=programs())
def test_programs_match_numpy(device, prog):
    check_program(prog, device)


@settings(FUZZ_SETTINGS, max_examples=4 if PROFILE == "quick" and not os.environ.get(
    "FUZZ_EXAMPLES") else max(FUZZ_SETTINGS.max_examples // 8, 1))
@given(prog=programs(contraction=True))
def test_products_written_in_place_match_numpy(device, prog):
    """``t += x @ y``, ``t[...] = 1.5 * (x @ y) + -0.5 * t``, ``t[..., 1:, ::2] -= x @ y``
    and ``fl.maximum(x @ y, t)`` at sizes that are multiples of no block, then a few steps
    more: the contraction kernel's epilogue reads the array it writes."""
    check_program(prog, device)


INDEX_WRITE_KINDS = ("setitem", "setitem", "inplace", "inplace", "adv", "adv", "unary",
                     "binary", "binary", "where", "reduce", "nonzero", "eval", "index")


def _few(divisor: int) -> settings:
    """A share of the programs; three in the quick profile (each compiles kernels)."""
    n = 3 if PROFILE == "quick" and not os.environ.get("FUZZ_EXAMPLES") else \
        max(FUZZ_SETTINGS.max_examples // divisor, 1)
    return settings(FUZZ_SETTINGS, max_examples=n)


@_few(4)
@given(prog=programs(kinds=INDEX_WRITE_KINDS, index_writes=True))
def test_index_writes_match_numpy(device, prog):
    """Programs dense in ``x[i, j] = v``, ``x[mask] = v``, ``x[mask] += v`` (masks from
    generated comparisons, index arrays from generated values) and reads around them."""
    check_program(prog, device)


@_few(12)
@given(data=st.data())
def test_out_of_range_indices_raise(device, data):
    """One index value out of range among several index arrays: numpy raises IndexError,
    fuseloop IndexOutOfBoundsError naming that value, its axis and the axis' length (reads
    of concrete and lazy arrays, and writes, which leave the array as it was)."""
    d = data.draw
    shape = tuple(d(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    nd = len(shape)
    axes = sorted(d(st.lists(st.integers(0, nd - 1), unique=True, min_size=1, max_size=nd)))
    bad_axis = d(st.sampled_from(axes))
    m = d(st.integers(1, 3))
    key: list[Any] = []
    for ax, n in enumerate(shape):
        if ax not in axes:
            key.append(d(st.sampled_from([slice(None), slice(None, None, -1), 0])))
            continue
        size = d(st.sampled_from([1, m]))
        vals = d(st.lists(st.integers(-n, n - 1), min_size=size, max_size=size))
        if ax == bad_axis:
            bad = d(st.one_of(st.integers(n, n + 5), st.integers(-n - 5, -n - 1)))
            vals[d(st.integers(0, size - 1))] = bad
        key.append(np.array(vals, np.int64))
    src = sum(1 for k in key[:bad_axis] if k is not None)  # (no None in the key)
    h = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    note(f"shape {shape}, key {key}")
    with pytest.raises(IndexError):
        h[tuple(key)]
    form = d(st.sampled_from(["np", "fl", "lazy"]))
    fkey = tuple(k if not isinstance(k, np.ndarray) or form == "np" else fl.asarray(k)
                 if form == "fl" else fl.asarray(k + 1) - 1 for k in key)
    x = fl.asarray(h)
    msg = f"index {bad} is out of bounds for axis {src} with size {shape[bad_axis]}"
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=msg):
        (x if d(st.booleans()) else x * 2)[fkey].get()
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=msg):
        x[fkey] = 7
    np.testing.assert_array_equal(x.get(), h)  # nothing written, as in numpy

# }}}

# {{{ special values and documented behaviour, explicitly

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, math.inf, -math.inf, math.nan]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values (NaN equal to NaN), and the same sign of every zero."""
    assert got.dtype == want.dtype and got.shape == want.shape
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if want.dtype.kind == "f":
        bad |= (want == 0) & (np.signbit(got) != np.signbit(want))
    assert not bad.any(), [(ix, got[ix], want[ix]) for ix in zip(*np.nonzero(bad))][:5]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_special_values_nan_inf_signed_zero(device, dt):
    """Every pair of special values, through the operations whose result IEEE (or numpy's
    definition) fixes exactly: values, NaN and inf positions, and signs of zero."""
    a = np.array(SPECIAL, dt)[:, None].repeat(len(SPECIAL), 1)
    b = a.T.copy()
    x, y = fl.asarray(a), fl.asarray(b)
    got, want = [], []
    with quiet():
        for name in ["add", "subtract", "multiply", "floor_divide", "remainder", "fmod",
                     "minimum", "maximum", "equal", "not_equal", "less", "less_equal",
                     "greater", "greater_equal", "logical_and", "logical_or"]:
            got.append(getattr(fl, name)(x, y))
            want.append(getattr(np, name)(a, b))
        for name in ["negative", "absolute", "sign", "floor", "ceil", "trunc", "rint", "sqrt",
                     "isnan", "isinf", "isfinite", "logical_not"]:
            got.append(getattr(fl, name)(x))
            want.append(getattr(np, name)(a))
        # the sign of a NaN is not specified: copysign by a NaN compares by magnitude
        c = fl.copysign(x, y)
        got.append(fl.where(fl.isnan(y), fl.absolute(c), c))
        want.append(np.where(np.isnan(b), np.abs(a), np.copysign(a, b)))
        got.append(fl.where(x > y, x, y))
        want.append(np.where(a > b, a, b))
        got.append(x / y)
        q_want = a / b
    outs = fl.compute(*got)  # one kernel
    for g, w in zip(outs[:-1], want):
        _same(g.get(), w)
    q = outs[-1].get()  # +-inf, NaN and zeros exactly; the rest within OpenCL's 2.5 ulp
    special = ~np.isfinite(q_want) | (q_want == 0)
    _same(np.where(special, q, q_want), q_want)
    np.testing.assert_allclose(q[~special], q_want[~special], rtol=4 * np.finfo(dt).eps)


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                "uint32", "uint64"])
def test_special_values_integer_wraparound(device, dt):
    info = np.iinfo(dt)
    vals = sorted({int(info.min), int(info.min) + 1, -1 if dt[0] == "i" else 2, 0, 1,
                   int(info.max) - 1, int(info.max)})
    a = np.array(vals, dt)[:, None].repeat(len(vals), 1)
    b = a.T.copy()
    x, y = fl.asarray(a), fl.asarray(b)
    got, want = [], []
    with quiet():
        for name in ["add", "subtract", "multiply", "bitwise_xor", "maximum"]:
            got.append(getattr(fl, name)(x, y))
            want.append(getattr(np, name)(a, b))
        for name in ["negative", "absolute", "square", "invert"]:
            got.append(getattr(fl, name)(x))
            want.append(getattr(np, name)(a))
        got.append(x + 1)  # a weak Python int keeps the dtype
        want.append(a + np.array(1, dt))
        # the widened sum (numpy's dtype), wrapping as numpy's
        got.append(fl.sum(x, axis=1, keepdims=True) + x)
        want.append(a.sum(axis=1, keepdims=True) + a)
    for g, w in zip(fl.compute(*got), want):
        _same(g.get(), w)


@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "uint8", "uint64"])
def test_special_values_integer_division_by_zero(device, dt):
    info = np.iinfo(dt)
    a = np.array([int(info.min), -7 if dt[0] == "i" else 7, 0, 5, int(info.max)], dt)
    x = fl.asarray(a)
    zero = fl.zeros_like(x)
    names = ["floor_divide", "remainder", "fmod"]
    outs = fl.compute(*(getattr(fl, n)(x, zero) for n in names),
                      *((x // -1, x % -1) if dt[0] == "i" else ()))
    for name, got in zip(names, outs):
        np.testing.assert_array_equal(got.get(), np.zeros_like(a))  # documented: 0
        with quiet():
            _same(got.get(), getattr(np, name)(a, np.zeros_like(a)))
    if dt[0] == "i":  # INT_MIN // -1 wraps to INT_MIN, INT_MIN % -1 is 0 (documented)
        with quiet():
            _same(outs[3].get(), a // np.array(-1, dt))
            _same(outs[4].get(), a % np.array(-1, dt))
        assert outs[3].get()[0] == info.min and outs[4].get()[0] == 0


def test_documented_negative_integer_powers(device):
    base = np.array([2, 1, -1, -1, 0, -3], np.int16)
    x = fl.asarray(base)
    np.testing.assert_array_equal((x ** -1).get(), [0, 1, -1, -1, 0, 0])
    np.testing.assert_array_equal((x ** fl.asarray(np.array([-2] * 6, np.int8))).get(),
                                  [0, 1, 1, 1, 0, 0])
    with pytest.raises(ValueError):  # numpy raises instead
        np.power(base, -1)


def test_documented_float16_results_are_float32(device):
    h = np.arange(-3, 4, dtype=np.int8)
    got = fl.sin(fl.asarray(h))
    assert np.sin(h).dtype == np.float16 and got.dtype == np.float32
    np.testing.assert_allclose(got.get(), np.sin(h.astype(np.float32)), rtol=1e-6)


def test_documented_integer_index_is_a_view(device):
    h = np.arange(6, dtype=np.int32).reshape(2, 3)
    x = fl.asarray(h)
    v = x[1, 2]  # numpy: a scalar copy; fuseloop: a 0-d view
    x[...] = 0
    assert v.shape == () and int(v) == 0
    with pytest.raises(fl.errors.DTypeError):  # in place on the view: same_kind
        x[0, 0] += 0.5
    h[0, 0] += 0.5  # numpy: scalar + 0.5, cast back
    assert h[0, 0] == 0


def test_documented_typed_scalar_assignment_is_a_cast(device):
    a = fl.zeros(3, np.int8)
    a[0] = np.int32(300)  # numpy raises OverflowError; fuseloop casts like an array
    a[1] = np.int16(-5)
    assert a.get().tolist() == [np.array(300).astype(np.int8), -5, 0]
    with pytest.raises(OverflowError):  # Python ints are checked as numpy does
        a[2] = 300

# }}}
