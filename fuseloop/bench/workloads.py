"""The fixed set of benchmark workloads.

Each :class:`Workload` knows how to make its float32 inputs for a size, how much work one run
does (bytes that must move, or floating-point operations), its float64 numpy reference, the
fuseloop form (written against the numpy-style API), a generic form for the peer libraries
(written against a small :class:`~fuseloop.bench.peers.Ops` adapter) and, where one exists,
a numexpr expression.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import fuseloop as fl

F32 = 4  # bytes per float32 element
Inputs = dict[str, np.ndarray]
Runner = tuple[Callable[[], Any], Callable[[], np.ndarray]]


@dataclass(frozen=True)
class Workload:
    """One benchmarked computation.

    ``size`` is an element count for ``kind`` ``"1d"`` and ``"2d"`` (2-D inputs are as
    square as the count allows) and the matrix order for ``kind`` ``"matmul"``.
    ``make(size, rng)``, where given, makes the inputs instead (any shapes and dtypes);
    ``sizes`` replaces the run's size list (small fixed arrays); ``work`` None counts every
    input's bytes plus the result's elements at ``out_itemsize`` bytes each.
    """

    name: str
    group: str
    label: str
    kind: str  # "1d", "2d", "matmul", "copy"
    unit: str  # "GB/s" or "GFLOP/s"
    inputs: tuple[str, ...]
    work: Callable[[Inputs], float] | None
    reference: Callable[..., np.ndarray]
    fuseloop: Callable[..., Runner]
    peer: Callable[..., Any] | None = None
    numexpr: str | None = None
    numexpr_env: Callable[[Inputs], dict[str, np.ndarray]] | None = None
    rtol: float = 1e-4
    atol: float = 1e-5
    make: Callable[[int, np.random.Generator], Inputs] | None = None
    sizes: tuple[int, ...] | None = None
    out_itemsize: int = F32

    def make_inputs(self, size: int, rng: np.random.Generator) -> Inputs:
        """Random float32 inputs in [0, 1) of the shape that ``size`` stands for."""
        if self.make is not None:
            return self.make(size, rng)
        if self.kind == "matmul":
            shape: tuple[int, ...] = (size, size)
        elif self.kind == "2d":
            shape = shape_2d(size)
        else:
            shape = (size,)
        return {name: rng.random(shape, dtype=np.float32) for name in self.inputs}


def shape_2d(n: int) -> tuple[int, int]:
    """The most square (rows, cols) with rows * cols <= n, rows <= cols."""
    rows = max(1, math.isqrt(n))
    while rows > 1 and n % rows:
        rows -= 1
    if rows * rows * 16 < n:  # n has no divisor near its square root: round down instead
        rows = max(1, math.isqrt(n))
    return rows, n // rows


def size_label(wl: Workload, size: int) -> str:
    """``2^20``, ``1024x1024`` or ``N=512``, as shown in reports."""
    if wl.kind == "matmul":
        return f"N={size}"
    if wl.kind == "2d":
        r, c = shape_2d(size)
        return f"{r}x{c}"
    return f"2^{size.bit_length() - 1}" if size & (size - 1) == 0 else str(size)


def _eval(expr_fn: Callable[..., Any], *args: Any) -> Runner:
    """A runner that evaluates ``expr_fn(*args)`` with ``.eval()`` each time."""
    box: list[Any] = [None]

    def run() -> Any:
        res = expr_fn(*args)
        box[0] = res.eval() if hasattr(res, "eval") else res
        return box[0]

    def fetch() -> np.ndarray:
        r = box[0]
        return np.asarray(r.get() if hasattr(r, "get") else r)

    return run, fetch


def _f64(*arrays: np.ndarray) -> list[Any]:
    return [a.astype(np.float64) for a in arrays]


# ---------------------------------------------------------------------------------- copy


def _fl_copy(x: fl.Array) -> Runner:
    out = fl.empty_like(x)

    def run() -> None:
        out[...] = x

    return run, lambda: out.get()


COPY = Workload(
    name="copy", group="copy", label="out[...] = x (reference: OpenCL enqueue_copy)",
    kind="copy", unit="GB/s", inputs=("x",), work=lambda a: 2 * F32 * a["x"].size,
    reference=lambda x: x.astype(np.float64), fuseloop=_fl_copy,
    peer=lambda ops, x: ops.copy(x), numexpr="x", rtol=0, atol=0,
)


# ---------------------------------------------------------------------- element-wise chains


def chain(x: Any, y: Any, length: int) -> Any:
    """``length`` arithmetic operations alternating ``* y`` and ``+ x``, starting from x."""
    r = x
    for i in range(length):
        r = r * y if i % 2 == 0 else r + x
    return r


def chain_string(length: int) -> str:
    """The numexpr spelling of :func:`chain`."""
    r = "x"
    for i in range(length):
        r = f"({r} * y)" if i % 2 == 0 else f"({r} + x)"
    return r


def _chain_workload(length: int) -> Workload:
    return Workload(
        name=f"chain-{length}", group="elementwise",
        label=f"{length} op(s) alternating * y and + x, from x: {chain_string(min(length, 4))}"
              + (" ..." if length > 4 else ""), kind="1d", unit="GB/s",
        inputs=("x", "y"), work=lambda a: 3 * F32 * a["x"].size,
        reference=lambda x, y: chain(*_f64(x, y), length),  # type: ignore[call-arg]
        fuseloop=lambda x, y: _eval(chain, x, y, length),
        peer=lambda ops, x, y: chain(x, y, length), numexpr=chain_string(length),
    )


CHAINS = [_chain_workload(k) for k in (1, 2, 4, 8, 16)]


# ---------------------------------------------------------------------- transcendental mixes


def _trans_workload(name: str, label: str, n_arrays: int, expr: Callable[..., Any],
                    ne: str) -> Workload:
    inputs = ("x", "y")

    def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return expr(np, *_f64(x, y))

    return Workload(
        name=name, group="transcendental", label=label, kind="1d", unit="GB/s",
        inputs=inputs, work=lambda a: n_arrays * F32 * a["x"].size, reference=reference,
        fuseloop=lambda x, y: _eval(expr, fl, x, y),
        peer=lambda ops, x, y: expr(ops, x, y), numexpr=ne,
    )


TRANSCENDENTAL = [
    _trans_workload("sin-mix", "2*x - sin(y) + x*y", 3,
                    lambda m, x, y: 2 * x - m.sin(y) + x * y, "2*x - sin(y) + x*y"),
    _trans_workload("gauss", "exp(-x*x)", 2, lambda m, x, y: m.exp(-x * x), "exp(-x*x)"),
    _trans_workload("radial", "sqrt(x*x + y*y) * exp(-y) + log1p(x)", 3,
                    lambda m, x, y: m.sqrt(x * x + y * y) * m.exp(-y) + m.log1p(x),
                    "sqrt(x*x + y*y) * exp(-y) + log1p(x)"),
]


# ------------------------------------------------------------------------------ reductions


def _fl_sum_xy(x: fl.Array, y: fl.Array) -> Runner:
    return _eval(lambda: fl.sum(x * y))


def _fl_axis_sum(axis: int) -> Callable[[fl.Array], Runner]:
    return lambda x: _eval(lambda: x.sum(axis=axis))


def col_var(m: Any, x: Any) -> Any:
    """Column variances through the ops adapter ``m`` (fuseloop and numpy: the module)."""
    mean = m.sum(x, axis=0) / x.shape[0]
    return m.sum((x - mean) ** 2, axis=0) / x.shape[0]


def _mid_group(cols: int) -> int:
    return math.gcd(cols, 64)


def mid_sum(m: Any, x: Any) -> Any:
    """``x`` as (rows, g, cols / g), summed over its middle axis."""
    g = _mid_group(x.shape[1])
    return m.sum(x.reshape(x.shape[0], g, x.shape[1] // g), axis=1)


def norm_xy(m: Any, x: Any, y: Any) -> Any:
    return m.sum((x - 2 * y) ** 2) ** 0.5


REDUCTIONS = [
    Workload(
        name="sum", group="reduction", label="fl.sum(x * y)", kind="1d", unit="GB/s",
        inputs=("x", "y"), work=lambda a: 2 * F32 * a["x"].size,
        reference=lambda x, y: np.sum(x.astype(np.float64) * y),
        fuseloop=_fl_sum_xy, peer=lambda ops, x, y: ops.sum(x * y),
        numexpr="sum(x * y)", rtol=1e-4, atol=0,
    ),
    *[
        Workload(
            name=f"sum-axis{ax}", group="reduction", label=f"x.sum(axis={ax}) on 2-D",
            kind="2d", unit="GB/s", inputs=("x",),
            work=lambda a, ax=ax: F32 * (a["x"].size + a["x"].shape[1 - ax]),  # type: ignore[misc]
            reference=lambda x, ax=ax: x.astype(np.float64).sum(axis=ax),
            fuseloop=_fl_axis_sum(ax), peer=lambda ops, x, ax=ax: ops.sum(x, axis=ax),
            numexpr=f"sum(x, axis={ax})", rtol=1e-4, atol=1e-4,
        )
        for ax in (0, 1)
    ],
    # column statistics (issue 25): a column mean inside a column reduction
    Workload(
        name="var-axis0", group="reduction", label="((x - x.mean(axis=0))**2).mean(axis=0)",
        kind="2d", unit="GB/s", inputs=("x",),
        work=lambda a: F32 * (a["x"].size + a["x"].shape[1]),
        reference=lambda x: col_var(np, x.astype(np.float64)),
        fuseloop=lambda x: _eval(col_var, fl, x), peer=col_var,
        numexpr=None, rtol=1e-4, atol=1e-6,
    ),
    # a middle axis: (rows, g, cols / g) summed over g
    Workload(
        name="sum-mid-axis", group="reduction", label="x.reshape(r, g, c // g).sum(axis=1)",
        kind="2d", unit="GB/s", inputs=("x",),
        work=lambda a: F32 * (a["x"].size + a["x"].size // _mid_group(a["x"].shape[1])),
        reference=lambda x: mid_sum(np, x.astype(np.float64)),
        fuseloop=lambda x: _eval(mid_sum, fl, x), peer=mid_sum,
        numexpr=None, rtol=1e-4, atol=1e-4,
    ),
    # a scalar epilogue on a full reduction: in the reduction's last stage
    Workload(
        name="norm-xy", group="reduction", label="((x - 2*y)**2).sum()**0.5", kind="1d",
        unit="GB/s", inputs=("x", "y"), work=lambda a: 2 * F32 * a["x"].size,
        reference=lambda x, y: norm_xy(np, *_f64(x, y)),
        fuseloop=lambda x, y: _eval(norm_xy, fl, x, y), peer=norm_xy,
        numexpr=None, rtol=1e-4, atol=0,
    ),
]


# -------------------------------------------------------------------------------- softmax


def softmax(m: Any, x: Any) -> Any:
    """Row softmax through the ops adapter ``m`` (max, exp, sum with keepdims)."""
    e = m.exp(x - m.max(x, axis=-1, keepdims=True))
    return e / m.sum(e, axis=-1, keepdims=True)


def _fl_softmax(x: fl.Array) -> Runner:
    def expr() -> fl.Array:
        e = fl.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return _eval(expr)


SOFTMAX = Workload(
    name="softmax", group="softmax", label="row softmax of a 2-D matrix", kind="2d",
    unit="GB/s", inputs=("x",), work=lambda a: 2 * F32 * a["x"].size,
    reference=lambda x: softmax(np, x.astype(np.float64)), fuseloop=_fl_softmax,
    peer=softmax, numexpr=None, rtol=1e-4, atol=1e-7,
)


# -------------------------------------------------------------------------------- stencil


def stencil(x: Any) -> Any:
    """``0.25*x[:-2] + 0.5*x[1:-1] + 0.25*x[2:]`` (the interior of the result)."""
    return 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]


def _fl_stencil(x: fl.Array) -> Runner:
    y = fl.zeros_like(x)

    def run() -> None:
        y[1:-1] = 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]

    return run, lambda: y.get()[1:-1]


STENCIL = Workload(
    name="stencil", group="stencil", label="y[1:-1] = 0.25*x[:-2] + 0.5*x[1:-1] + 0.25*x[2:]",
    kind="1d", unit="GB/s", inputs=("x",), work=lambda a: F32 * (2 * a["x"].size - 2),
    reference=lambda x: stencil(x.astype(np.float64)), fuseloop=_fl_stencil,
    peer=lambda ops, x: stencil(x), numexpr="0.25*a + 0.5*b + 0.25*c",
    numexpr_env=lambda a: {"a": a["x"][:-2], "b": a["x"][1:-1], "c": a["x"][2:]},
)


# --------------------------------------------------------------------------------- matmul

MATMUL = Workload(
    name="matmul", group="matmul", label="A @ B (float32, square)", kind="matmul",
    unit="GFLOP/s", inputs=("a", "b"), work=lambda a: 2.0 * a["a"].shape[0] ** 3,
    reference=lambda a, b: a.astype(np.float64) @ b.astype(np.float64),
    fuseloop=lambda a, b: _eval(lambda: a @ b), peer=lambda ops, a, b: ops.matmul(a, b),
    numexpr=None, rtol=1e-4, atol=1e-3,
)


ALL: list[Workload] = [COPY, *CHAINS, *TRANSCENDENTAL, *REDUCTIONS, SOFTMAX, STENCIL, MATMUL]


SUITES = ("default", "broad", "all")


def suite(name: str = "default") -> list[Workload]:
    """The workloads of a suite: ``default`` (this module's), ``broad``
    (:mod:`fuseloop.bench.broad`, with the copy reference) or ``all`` (both)."""
    from .broad import BROAD

    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    return {"default": list(ALL), "broad": [COPY, *BROAD], "all": [*ALL, *BROAD]}[name]


def by_name(names: list[str] | None, suite_name: str = "default") -> list[Workload]:
    """The workloads of ``suite_name`` whose name or group is in ``names`` (all for None).

    The copy reference is always included: it is the denominator of "fraction of copy".
    """
    pool = suite(suite_name)
    if not names:
        return pool
    wanted = set(names)
    unknown = wanted - {w.name for w in pool} - {w.group for w in pool}
    if unknown:
        raise ValueError(f"unknown workload(s) {sorted(unknown)} in suite {suite_name!r}; "
                         "known: " + ", ".join(w.name for w in pool))
    return [w for w in pool if w is COPY or w.name in wanted or w.group in wanted]
