"""numpy's reference values (:class:`Ref`) with, per element, a bound on how far a correct
implementation may differ; the user functions shared by fuseloop and the reference."""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

import fuseloop as fl

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


def numpy_operand(o: Any) -> Any:
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
            val = uf(*(numpy_operand(o) for o in ops))
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
        val = np.asarray(np.where(*(numpy_operand(o) for o in (c, x, y))))
    cond = c if isinstance(c, Ref) else Ref(np.asarray(numpy_operand(c)))
    t, f = truth(cond)
    xr, yr = as_ref(x, val.dtype), as_ref(y, val.dtype)
    shape = val.shape
    err = np.where(np.broadcast_to(t, shape), np.broadcast_to(xr.err, shape),
                   np.where(np.broadcast_to(f, shape), np.broadcast_to(yr.err, shape), INF))
    return Ref(val, np.array(err, F64))


def ref_clip(x: Ref, lo: Any, hi: Any) -> Ref:
    """numpy's clip, including its handling of out-of-range Python integer bounds."""
    with quiet():
        val = np.asarray(np.clip(x.val, numpy_operand(lo), numpy_operand(hi)))
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
