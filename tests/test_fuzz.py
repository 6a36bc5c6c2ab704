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

The fuzzer lives in the package ``tests/fuzz/`` (imported as ``fuzz``: ``pythonpath`` in
pyproject.toml): ``profiles``, ``reference``, ``programs``, ``generators``, ``harness``.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import fuseloop as fl
from fuzz.generators import programs
from fuzz.harness import COUNTS, check_program
from fuzz.profiles import FUZZ_SETTINGS, PRODUCT_SETTINGS, PROFILE, few
from fuzz.reference import quiet

# {{{ tests


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


@FUZZ_SETTINGS
@given(prog=programs())
def test_programs_match_numpy(device, prog):
    check_program(prog, device)


@PRODUCT_SETTINGS
@given(prog=programs(contraction=True))
def test_products_written_in_place_match_numpy(device, prog):
    """``t += x @ y``, ``t[...] = 1.5 * (x @ y) + -0.5 * t``, ``t[..., 1:, ::2] -= x @ y``
    and ``fl.maximum(x @ y, t)`` at sizes that are multiples of no block, then a few steps
    more: the contraction kernel's epilogue reads the array it writes."""
    check_program(prog, device)


INDEX_WRITE_KINDS = ("setitem", "setitem", "inplace", "inplace", "adv", "adv", "unary",
                     "binary", "binary", "where", "reduce", "nonzero", "eval", "index")


@few(4)
@given(prog=programs(kinds=INDEX_WRITE_KINDS, index_writes=True))
def test_index_writes_match_numpy(device, prog):
    """Programs dense in ``x[i, j] = v``, ``x[mask] = v``, ``x[mask] += v`` (masks from
    generated comparisons, index arrays from generated values) and reads around them."""
    check_program(prog, device)


@few(12)
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
