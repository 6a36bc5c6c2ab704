"""The broad suite (``fuseloop bench --suite broad``): workloads drawn from real array code.

Each workload is one generic function ``f(m, *inputs)`` written against the
:class:`~fuseloop.bench.peers.Ops` adapter ``m``: the same function is the float64 numpy
reference (``Ops(numpy)`` on float64 copies of the float inputs), fuseloop's form
(``FuseloopOps(fuseloop)``, then ``.eval()``, or ``fl.compute`` for several results) and
every peer's form. A library that has no spelling of an operation raises
:class:`~fuseloop.bench.peers.NotExpressible`, and the record says so.

``size`` is an element count (``kind`` ``"n"``: the inputs' shapes are derived from it,
so pairwise workloads have ``size`` pairs) or a matrix order (``kind`` ``"matmul"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl

from .peers import FuseloopOps, Ops
from .workloads import COPY, F32, Inputs, Runner, Workload, chain, chain_string, shape_2d

FL_OPS = FuseloopOps(fl)
NP_OPS = Ops(np)
F64 = 8
Maker = Callable[[int, np.random.Generator], Inputs]


def _run_fl(expr: Callable[..., Any]) -> Callable[..., Runner]:
    """fuseloop's runner of ``expr(FL_OPS, *arrays)``: ``.eval()``, or ``fl.compute``."""

    def prepare(*arrays: fl.Array) -> Runner:
        box: list[Any] = [None]

        def run() -> Any:
            res = expr(FL_OPS, *arrays)
            if isinstance(res, tuple):
                box[0] = fl.compute(*res)
            else:
                box[0] = res.eval() if hasattr(res, "eval") else res
            return box[0]

        def fetch() -> Any:
            r = box[0]
            if isinstance(r, tuple):
                return tuple(np.asarray(v.get()) for v in r)
            return np.asarray(r.get() if hasattr(r, "get") else r)

        return run, fetch

    return prepare


def _ref(expr: Callable[..., Any]) -> Callable[..., Any]:
    def reference(*arrays: np.ndarray) -> Any:
        up = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
        return expr(NP_OPS, *up)

    return reference


def wl(name: str, group: str, label: str, names: str, make: Maker,
       expr: Callable[..., Any], *, kind: str = "n", unit: str = "GB/s",
       work: Callable[[Inputs], float] | None = None, ne: str | None = None,
       ne_env: Callable[[Inputs], dict[str, np.ndarray]] | None = None, rtol: float = 1e-4,
       atol: float = 1e-5, sizes: tuple[int, ...] | None = None,
       out_itemsize: int = F32) -> Workload:
    """One broad workload: ``names`` are the inputs ``make`` returns, in argument order."""
    return Workload(
        name=name, group=group, label=label, kind=kind, unit=unit,
        inputs=tuple(names.split(",")), work=work, reference=_ref(expr),
        fuseloop=_run_fl(expr), peer=expr, numexpr=ne, numexpr_env=ne_env,
        rtol=rtol, atol=atol, make=make, sizes=sizes, out_itemsize=out_itemsize)


# ------------------------------------------------------------------------ input makers


def _u(rng: np.random.Generator, shape: tuple[int, ...], dt: Any = np.float32,
       lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    return (lo + (hi - lo) * rng.random(shape)).astype(dt)


def _mid3(n: int) -> tuple[int, int, int]:
    """(batch, sequence, 64 features): the middle axis is the long one."""
    a, b = shape_2d(max(1, n // 64))
    return a, b, 64


def _cube(n: int) -> tuple[int, int, int]:
    s = max(3, round(n ** (1 / 3)))
    return s, s, s


def _side(n: int) -> int:
    return max(2, math.isqrt(n))


def xs(shape: Callable[[int], tuple[int, ...]], names: str = "x", dt: Any = np.float32,
       lo: float = 0.0, hi: float = 1.0) -> Maker:
    """Inputs ``names`` (comma-separated), each uniform in [lo, hi) of ``shape(n)``."""
    return lambda n, rng: {k: _u(rng, shape(n), dt, lo, hi) for k in names.split(",")}


def ints(shape: Callable[[int], tuple[int, ...]]) -> Maker:
    return lambda n, rng: {"x": rng.integers(-1000, 1000, shape(n), dtype=np.int32)}


def vec(n: int) -> tuple[int]:
    return (n,)


def sq(n: int) -> tuple[int, int]:
    return shape_2d(n)


def _cross_entropy_inputs(n: int, rng: np.random.Generator) -> Inputs:
    r, c = shape_2d(n)
    return {"x": _u(rng, (r, c), lo=-4, hi=4), "rows": np.arange(r, dtype=np.int64),
            "labels": rng.integers(0, c, r, dtype=np.int64)}


def _gather_inputs(n: int, rng: np.random.Generator) -> Inputs:
    return {"x": _u(rng, (n,)), "idx": rng.integers(0, n, n, dtype=np.int64)}


def _gather_rows_inputs(n: int, rng: np.random.Generator) -> Inputs:
    r = max(1, n // 64)
    return {"x": _u(rng, (r, 64)), "idx": rng.integers(0, r, r, dtype=np.int64)}


def _scatter_inputs(n: int, rng: np.random.Generator) -> Inputs:
    return {"v": _u(rng, (n,)), "idx": rng.permutation(n).astype(np.int64)}


def _scatter_add_inputs(n: int, rng: np.random.Generator) -> Inputs:
    return {"v": _u(rng, (n,)), "idx": rng.integers(0, max(1, n // 16), n, dtype=np.int64)}


def _points(names: str, cols: int | None = None) -> Maker:
    """Pairwise inputs: ``size`` pairs, so sqrt(size) points each (with ``cols`` coords)."""
    def make(n: int, rng: np.random.Generator) -> Inputs:
        k = _side(n)
        shape = (k,) if cols is None else (k, cols)
        return {name: _u(rng, shape) for name in names.split(",")}

    return make


def _mats(*shapes: Callable[[int], tuple[int, ...]]) -> Maker:
    """Matrix inputs ``a``, ``b``, ... of ``shape(N)`` each, N the matrix order."""
    return lambda n, rng: {"ab"[k]: _u(rng, s(n)) for k, s in enumerate(shapes)}


def _pairs(a: Inputs) -> int:
    k = next(iter(a.values())).shape[0]
    return k * k


# ---------------------------------------------------------------------------- the forms


def logsumexp_rows(m: Any, x: Any) -> Any:
    mx = m.max(x, axis=1, keepdims=True)
    return mx[:, 0] + m.log(m.sum(m.exp(x - mx), axis=1))


def layernorm(m: Any, x: Any) -> Any:
    d = x - m.mean(x, axis=1, keepdims=True)
    return d / m.sqrt(m.mean(d * d, axis=1, keepdims=True) + 1e-5)


def softmax_rows(m: Any, x: Any) -> Any:
    e = m.exp(x - m.max(x, axis=-1, keepdims=True))
    return e / m.sum(e, axis=-1, keepdims=True)


def cross_entropy(m: Any, x: Any, rows: Any, labels: Any) -> Any:
    return m.mean(logsumexp_rows(m, x) - x[rows, labels])


def nbody(m: Any, x: Any, y: Any, z: Any, w: Any) -> Any:
    """Accelerations of every body from every other, softened: ``(d2 + eps)**-1.5``."""
    dx, dy, dz = x[None, :] - x[:, None], y[None, :] - y[:, None], z[None, :] - z[:, None]
    s = w[None, :] * (dx * dx + dy * dy + dz * dz + 1e-3) ** -1.5
    return m.sum(dx * s, axis=1), m.sum(dy * s, axis=1), m.sum(dz * s, axis=1)


def distances(m: Any, p: Any, q: Any) -> Any:
    return m.sqrt(m.sum((p[:, None, :] - q[None, :, :]) ** 2, axis=-1))


def kernel_sum(m: Any, x: Any, y: Any, w: Any) -> Any:
    return m.sum(w[None, :] * m.exp(-((x[:, None] - y[None, :]) ** 2)), axis=1)


def black_scholes(m: Any, s: Any, k: Any, t: Any) -> Any:
    """A Black-Scholes call with a logistic stand-in for the normal CDF (logs, exps)."""
    r, v = 0.02, 0.3
    sq_t = m.sqrt(t)
    d1 = (m.log(s / k) + (r + 0.5 * v * v) * t) / (v * sq_t)
    d2 = d1 - v * sq_t
    return s / (1 + m.exp(-1.702 * d1)) - k * m.exp(-r * t) / (1 + m.exp(-1.702 * d2))


BS_NE = ("s / (1 + exp(-1.702 * ((log(s / k) + 0.065 * t) / (0.3 * sqrt(t))))) - k * "
         "exp(-0.02 * t) / (1 + exp(-1.702 * ((log(s / k) + 0.065 * t) / (0.3 * sqrt(t)) "
         "- 0.3 * sqrt(t))))")
HORNER = [0.5 / (k + 1) * (-1) ** k for k in range(17)]


def horner(m: Any, x: Any) -> Any:
    r = x * 0 + HORNER[0]
    for c in HORNER[1:]:
        r = r * x + c
    return r


def horner_string() -> str:
    r = repr(HORNER[0])
    for c in HORNER[1:]:
        r = f"({r}) * x + {c!r}"
    return r


def stencil2d(m: Any, u: Any) -> Any:
    c = u[1:-1, 1:-1]
    return c + 0.1 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * c)


def stencil3d(m: Any, u: Any) -> Any:
    c = u[1:-1, 1:-1, 1:-1]
    return c + 0.05 * (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1]
                       + u[1:-1, 2:, 1:-1] + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:] - 6 * c)


def stencil1d5(m: Any, x: Any) -> Any:
    return 0.1 * x[:-4] + 0.2 * x[1:-3] + 0.4 * x[2:-2] + 0.2 * x[3:-1] + 0.1 * x[4:]


def _mm_flops(a: Inputs) -> float:
    """2 m n k of ``a @ b`` (batched: times the batch), from the operands' shapes."""
    x, y = a["a"], a["b"]
    if x.ndim == 1:
        return 2.0 * x.shape[0] * y.shape[1]
    return 2.0 * math.prod(x.shape) * y.shape[-1]


def _col(n: int) -> tuple[int, int]:
    return n, n


R, M = "reduction-layout", "matmul-shape"
BROAD: list[Workload] = [
    # reductions: every layout, several reductions of one input, arg-reductions, dtypes
    wl("colstat", R, "((X - X.mean(axis=0))**2).mean(axis=0)", "x", xs(sq),
       lambda m, x: m.mean((x - m.mean(x, axis=0)) ** 2, axis=0)),
    wl("row-center", R, "X - X.mean(axis=1, keepdims=True)", "x", xs(sq),
       lambda m, x: x - m.mean(x, axis=1, keepdims=True)),
    wl("sum-middle", R, "X.sum(axis=1) of (batch, seq, 64)", "x", xs(_mid3),
       lambda m, x: m.sum(x, axis=1), atol=1e-3),
    wl("sum-axes02", R, "X.sum(axis=(0, 2)) of (batch, seq, 64)", "x", xs(_mid3),
       lambda m, x: m.sum(x, axis=(0, 2)), atol=1e-3),
    wl("sum-all-keepdims", R, "X.sum(axis=(0, 1, 2), keepdims=True), a cube", "x",
       xs(_cube), lambda m, x: m.sum(x, axis=(0, 1, 2), keepdims=True), atol=1e-2),
    wl("min-max-sum-sumsq", R, "x.min(), x.max(), x.sum(), (x*x).sum() of one x", "x",
       xs(vec), lambda m, x: (m.min(x), m.max(x), m.sum(x), m.sum(x * x)), atol=1e-2),
    wl("argmax-rows", R, "X.argmax(axis=1)", "x", xs(sq), lambda m, x: m.argmax(x, axis=1),
       rtol=0, atol=0, out_itemsize=8),
    wl("argmin-all", R, "x.argmin()", "x", xs(vec), lambda m, x: m.argmin(x), rtol=0,
       atol=0, out_itemsize=8),
    wl("norm-f64", R, "((a - 2*b)**2).sum()**0.5, float64", "a,b",
       xs(vec, "a,b", np.float64), lambda m, a, b: m.sum((a - 2 * b) ** 2) ** 0.5,
       rtol=1e-10, atol=0, out_itemsize=F64),
    wl("int-sum-rows", R, "X.sum(axis=1), int32 (int64 result)", "x", ints(sq),
       lambda m, x: m.sum(x, axis=1), rtol=0, atol=0, out_itemsize=8),
    wl("int-max-cols", R, "X.max(axis=0), int32", "x", ints(sq),
       lambda m, x: m.max(x, axis=0), rtol=0, atol=0),
    # normalisations
    wl("layernorm", "normalisation", "(X - mean) / sqrt(var + 1e-5) over rows", "x", xs(sq),
       layernorm, atol=1e-4),
    wl("batchnorm-stats", "normalisation", "mean and variance over axis 0 of (N, 64)", "x",
       xs(lambda n: (max(1, n // 64), 64)),
       lambda m, x: (m.mean(x, axis=0), m.mean((x - m.mean(x, axis=0)) ** 2, axis=0))),
    wl("softmax-128", "normalisation", "row softmax, rows of 128", "x",
       xs(lambda n: (max(1, n // 128), 128)), softmax_rows, atol=1e-7),
    wl("logsumexp-rows", "normalisation", "max + log(sum(exp(X - max))) over rows", "x",
       xs(sq, lo=-4, hi=4), logsumexp_rows, atol=1e-4),
    wl("cross-entropy", "normalisation", "mean(logsumexp(X) - X[rows, labels])",
       "x,rows,labels", _cross_entropy_inputs, cross_entropy, atol=1e-4),
    # stencils in 1, 2 and 3 dimensions (slices of one array)
    wl("stencil-1d-5", "stencil", "5-point 1-D: 0.1*x[:-4] + 0.2*x[1:-3] + ...", "x", xs(vec),
       stencil1d5, ne="0.1*a + 0.2*b + 0.4*c + 0.2*d + 0.1*e",
       ne_env=lambda a: dict(zip("abcde", (a["x"][k:len(a["x"]) - 4 + k] for k in range(5))))),
    wl("stencil-2d", "stencil", "5-point 2-D step: c + 0.1*(N + S + W + E - 4c)", "x",
       xs(sq), stencil2d),
    wl("stencil-3d", "stencil", "7-point 3-D step on a cube", "x", xs(_cube), stencil3d),
    # pairwise broadcast-reduce (size = pairs)
    wl("distances", "pairwise", "sqrt(((P[:, None] - Q[None])**2).sum(-1)), 3-D points",
       "p,q", _points("p,q", 3), distances, unit="GFLOP/s", work=lambda a: 9.0 * _pairs(a)),
    wl("nbody", "pairwise", "accelerations sum(d * w * (d2 + eps)**-1.5), 3 outputs",
       "x,y,z,w", _points("x,y,z,w"), nbody, unit="GFLOP/s",
       work=lambda a: 20.0 * _pairs(a), rtol=1e-3, atol=1e-2),
    wl("kernel-sum", "pairwise", "sum(w * exp(-(x[:, None] - y[None])**2), axis=1)", "x,y,w",
       _points("x,y,w"), kernel_sum, unit="GFLOP/s", work=lambda a: 6.0 * _pairs(a),
       atol=1e-3),
    # gathers and scatters
    wl("gather", "gather-scatter", "x.take(idx), random idx", "x,idx", _gather_inputs,
       lambda m, x, idx: m.take(x, idx)),
    wl("gather-rows", "gather-scatter", "X.take(idx, axis=0), rows of 64", "x,idx",
       _gather_rows_inputs, lambda m, x, idx: m.take(x, idx, axis=0)),
    wl("scatter", "gather-scatter", "out[perm] = v (distinct positions)", "v,idx",
       _scatter_inputs, lambda m, v, idx: m.scatter(v.shape[0], idx, v)),
    wl("scatter-add", "gather-scatter", "np.add.at(out, idx, v), n/16 bins", "v,idx",
       _scatter_add_inputs, lambda m, v, idx: m.scatter_add(v.shape[0] // 16, idx, v),
       atol=1e-4),
    # matmul shapes (size = N, the matrix order)
    wl("matmul-tn", M, "A.T @ B", "a,b", _mats(_col, _col), lambda m, a, b: m.matmul(
        m.mT(a), b), kind="matmul", unit="GFLOP/s", work=_mm_flops, atol=1e-3),
    wl("matmul-nt", M, "A @ B.T", "a,b", _mats(_col, _col), lambda m, a, b: m.matmul(
        a, m.mT(b)), kind="matmul", unit="GFLOP/s", work=_mm_flops, atol=1e-3),
    wl("matmul-batch", M, "(8, N/4, N/4) @ (8, N/4, N/4)", "a,b",
       _mats(*[lambda n: (8, max(1, n // 4), max(1, n // 4))] * 2),
       lambda m, a, b: m.matmul(a, b), kind="matmul", unit="GFLOP/s", work=_mm_flops,
       atol=1e-3),
    wl("vecmat", M, "x @ A, vector-matrix", "a,b", _mats(lambda n: (n,), _col),
       lambda m, a, b: m.matmul(a, b), kind="matmul", unit="GFLOP/s", work=_mm_flops,
       atol=1e-3),
    wl("matmul-8rows", M, "(8, N) @ (N, N)", "a,b", _mats(lambda n: (8, n), _col),
       lambda m, a, b: m.matmul(a, b), kind="matmul", unit="GFLOP/s", work=_mm_flops,
       atol=1e-3),
    wl("matmul-64rows", M, "(64, N) @ (N, N)", "a,b", _mats(lambda n: (64, n), _col),
       lambda m, a, b: m.matmul(a, b), kind="matmul", unit="GFLOP/s", work=_mm_flops,
       atol=1e-3),
    wl("matmul-8cols", M, "(N, N) @ (N, 8)", "a,b", _mats(_col, lambda n: (n, 8)),
       lambda m, a, b: m.matmul(a, b), kind="matmul", unit="GFLOP/s", work=_mm_flops,
       atol=1e-3),
    wl("einsum-attn", M, "einsum('bqd,bkd->bqk'), b=4, d=64, q=k=N", "a,b",
       _mats(*[lambda n: (4, n, 64)] * 2), lambda m, a, b: m.einsum("bqd,bkd->bqk", a, b),
       kind="matmul", unit="GFLOP/s", work=lambda a: 2.0 * 4 * a["a"].shape[1] ** 2 * 64,
       atol=1e-3),
    wl("einsum-rowdot", M, "einsum('ij,ij->i') (row dot products)", "a,b",
       _mats(_col, _col), lambda m, a, b: m.einsum("ij,ij->i", a, b), kind="matmul",
       unit="GFLOP/s", work=lambda a: 2.0 * a["a"].size, atol=1e-3),
    # long element-wise chains
    wl("black-scholes", "elementwise-long", "Black-Scholes-like call: logs, exps, sqrt",
       "s,k,t", lambda n, rng: {"s": _u(rng, (n,), lo=5, hi=30), "k": _u(rng, (n,), lo=1,
                                hi=100), "t": _u(rng, (n,), lo=0.25, hi=10)},
       black_scholes, ne=BS_NE, atol=1e-4),
    wl("horner-16", "elementwise-long", "a degree-16 polynomial of x by Horner's rule", "x",
       xs(vec), horner, ne=horner_string()),
    wl("chain-32", "elementwise-long", "32 ops alternating * y and + x", "x,y",
       xs(vec, "x,y"), lambda m, x, y: chain(x, y, 32), ne=chain_string(32), rtol=1e-3),
    wl("where-branch", "elementwise-long", "where(x > 0.5, x*y, sqrt(y))", "x,y",
       xs(vec, "x,y"), lambda m, x, y: m.where(x > 0.5, x * y, m.sqrt(y)),
       ne="where(x > 0.5, x*y, sqrt(y))"),
    # small arrays (fixed sizes: host overhead dominates)
    wl("small-chain-8", "small", "8 ops on 2^10 and 2^12 elements", "x,y", xs(vec, "x,y"),
       lambda m, x, y: chain(x, y, 8), ne=chain_string(8), sizes=(2**10, 2**12)),
    wl("small-softmax", "small", "row softmax of 32x32 and 64x64", "x", xs(sq),
       softmax_rows, atol=1e-7, sizes=(2**10, 2**12)),
    wl("small-matvec", "small", "A @ x, A 32x32 and 64x64", "a,b",
       lambda n, rng: {"a": _u(rng, shape_2d(n)), "b": _u(rng, (shape_2d(n)[1],))},
       lambda m, a, b: m.matmul(a, b), atol=1e-4, sizes=(2**10, 2**12)),
]

SUITE: list[Workload] = [COPY, *BROAD]
