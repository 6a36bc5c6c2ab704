"""Issue 27's device algorithms against their peers, in one table: ``fl.linalg.cholesky``,
``fl.linalg.solve`` (one right-hand side), ``fl.linalg.qr`` (``qr``: Q and R, numpy's
"reduced" mode; ``qr_r``: R alone; against ``numpy.linalg.qr`` and ``cupy.linalg.qr``,
cuSOLVER's geqrf and orgqr), the LU factorisation alone (``lu``:
``fuseloop.linalg_factor._lu`` against ``scipy.linalg.lu_factor`` and cupy's
``cupyx.scipy.linalg.lu_factor``, cuSOLVER's getrf), ``fl.linalg.solve_triangular``
(``--rhs`` columns), ``fl.sort`` and ``fl.cumulative_sum``, ``fl.linalg.svd`` (reduced,
with vectors) and ``fl.linalg.eigh`` at ``--jacobi-sizes`` (one-sided Jacobi against
numpy, and cupy's and torch's cuSOLVER); ``update``: one trailing
update of the factorisations, ``C -= A B`` with C (n - 64) x (n - 64) and inner size 64
(a 4096 LU's first), by ``fuseloop_gemm_update`` (a row per tiling: the rule's, and each
of its two forced, labelled ``[tile]``, and the big one reading and writing c element by
element, ``[tile, c scalar]``, not as vectors) against cupy's ``c -= a @ b`` and torch's
``c.addmm_(a, b, alpha=-1)``.

Each is timed with its result on the device (synchronised, not read back), as the
median of ``--repeat`` calls after one warm-up call (the build), and checked against
numpy first.  Peers: numpy/scipy on the host's CPU always; cupy (cuSOLVER, CUB) and torch
when they import with a GPU.  The ``x cupy`` and ``x torch`` columns are the peer's
time over fuseloop's (1.0: as fast; issue 27 asks >= 0.3 for the factorisations and
>= 0.5 for sort and cumsum); ``launches``: fuseloop's kernel launches per call.
``--update`` picks the factorisations' trailing-update kernel
(``fuseloop.linalg_factor.UPDATE``): ``auto`` (the device's rule), ``kernel`` (the
hand-written ``C -= A B``), ``contraction`` (fuseloop's), or ``both`` (a row for each, in
one run: the op is then labelled with it).  ``--panel`` picks the LU panel's kernel
(``fuseloop.linalg_panel.PANEL``) for ``solve`` and ``lu`` the same way: ``auto``,
``rows`` (a row per work-item, the GPUs' default), ``tile`` (slices in local memory), or
``both``.
GFLOP/s counts n^3/3 for Cholesky, 2n^3/3 + 2n^2 for solve, 4n^3/3 for R alone (geqrf)
and 8n^3/3 with Q (geqrf and orgqr), n^2 k for a triangular solve with k right-hand sides
and 2 m n k for an update.

Usage (the issue's sizes are the defaults)::

    python benchmarks/bench_linalg.py [--sizes 4096] [--rhs 256] [--sort-n 16777216]
                                      [--scan-n 134217728] [--ops cholesky solve ...]
                                      [--repeat 5] [--dtype float32] [--out results.json]
                                      [--update auto|kernel|contraction|both]
                                      [--panel auto|rows|tile|both] [--qr-block 0 16 64]
                                      [--jacobi-sizes 256 1024]

Issue 27's LU target on a GPU (both panel kernels, cupy in the same run)::

    python benchmarks/bench_linalg.py --ops solve lu --panel both

The SVD and eigh (launches / (n - 1): the Jacobi sweeps; 1 launch: all sweeps in one
work-group, ``fuseloop.linalg_jacobi.LOCAL_MAX_N``, which ``FUSELOOP_JACOBI_LOCAL=<n>``
sets: compare ``=0`` and ``=256`` at ``--jacobi-sizes 64 128 256``)::

    PYTHONPATH=. python benchmarks/bench_linalg.py --ops svd eigh --jacobi-sizes 256 1024

The QR (float32 4096; cupy in the same run), with its GPU block of 32 and forced to 16
and 64 (``--qr-block``, a row each; ``FUSELOOP_QR_PANEL_GROUP`` sets the panel's group)::

    PYTHONPATH=. python benchmarks/bench_linalg.py --ops qr qr_r --qr-block 0 16 64

Complex matrices (``--dtype complex64`` or ``complex128``: cholesky, solve, qr, svd and
eigh; the GFLOP/s column still counts the real formulas, a quarter of the real flops)::

    PYTHONPATH=. python benchmarks/bench_linalg.py --dtype complex64 --sizes 1024 \
        --ops solve cholesky eigh --jacobi-sizes 1024

The trailing update alone (TFLOP/s: the GFLOP/s column / 1000)::

    PYTHONPATH=. python benchmarks/bench_linalg.py --ops update cholesky solve lu
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop import linalg_factor, linalg_gemm, linalg_kernels, linalg_panel, linalg_qr
from fuseloop.bench.runner import median_time

OPS = ("cholesky", "solve", "lu", "solve_triangular", "qr", "qr_r", "sort", "cumsum",
       "update", "svd", "eigh")
#: the ops of _factorisations (the rest: sort and scans, the update kernel, svd/eigh)
MATRIX_OPS = OPS[:6]
#: the ops that factor by LU (``--panel`` applies)
LU_OPS = ("solve", "lu")
#: the QR's ops (``--qr-block`` applies)
QR_OPS = ("qr", "qr_r")
#: the ops timed for complex ``--dtype``s
COMPLEX_OPS = ("cholesky", "solve", "qr", "qr_r", "sort", "cumsum", "svd", "eigh")


def _median(fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of ``fn`` (which synchronises itself) after one warm-up call."""
    return median_time(fn, lambda: None, repeat, warmup=1)


def _cupy() -> Any:
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:
        return None


def _torch() -> Any:
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def _synced(fn: Callable[[], Any], sync: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        fn()
        sync()
    return run


class Case:
    """One row: fuseloop's call and its peers' (None where a peer is missing); ``ok``:
    whether fuseloop's result matched numpy's (a mismatch is reported, not raised, so
    that one run still times everything)."""

    def __init__(self, op: str, size: str, flops: float | None, ours: Callable[[], Any],
                 host: Callable[[], Any], cupy: Callable[[], Any] | None = None,
                 torch: Callable[[], Any] | None = None, ok: bool = True) -> None:
        self.op, self.size, self.flops, self.ok = op, size, flops, ok
        self.calls = {"fuseloop": ours, "numpy": host, "cupy": cupy, "torch": torch}


def _random(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Standard normal values (complex dtypes: real and imaginary parts), in float64 or
    complex128."""
    x = rng.standard_normal(shape)
    return x + 1j * rng.standard_normal(shape) if dt.kind == "c" else x


def _wide(dt: np.dtype) -> type:
    """The reference computations' dtype: float64, or complex128 for complex input."""
    return np.complex128 if dt.kind == "c" else np.float64


def _tol(dt: np.dtype) -> float:
    return 1e-3 if dt in (np.float32, np.complex64) else 1e-9


def _factorisations(n: int, dt: np.dtype, rhs: int, ops: list[str], cp: Any,
                    th: Any) -> list[Case]:
    rng = np.random.default_rng(0)
    m = _random(rng, (n, n), dt)
    spd = (m @ m.conj().T / n + np.eye(n)).astype(dt)
    gen = (m / np.sqrt(n) + 2 * np.eye(n)).astype(dt)
    b = _random(rng, (n,), dt).astype(dt)
    low = np.tril(m / np.sqrt(n) + 4 * np.eye(n)).astype(dt)
    bb = rng.standard_normal((n, rhs)).astype(dt)
    d = {k: fl.asarray(v) for k, v in
         (("spd", spd), ("gen", gen), ("b", b), ("low", low), ("bb", bb))}
    tol = _tol(dt)
    cases = []
    if "cholesky" in ops:
        ref = np.linalg.cholesky(spd.astype(_wide(dt)))
        got = fl.linalg.cholesky(d["spd"]).get()
        ok = bool(np.abs(got - ref).max() <= tol * np.abs(ref).max() * 10)
        c_spd = cp.asarray(spd) if cp else None
        t_spd = th.from_numpy(spd).cuda() if th else None
        cases.append(Case(
            "cholesky", f"{n}", n ** 3 / 3,
            lambda: fl.linalg.cholesky(d["spd"]).eval(), lambda: np.linalg.cholesky(spd),
            (lambda: cp.linalg.cholesky(c_spd)) if cp else None,
            (lambda: th.linalg.cholesky(t_spd)) if th else None, ok))
    if "solve" in ops:
        x = fl.linalg.solve(d["gen"], d["b"]).get()
        ok = bool(np.abs(gen @ x - b).max() <= tol * 10 * np.abs(b).max())
        c_gen, c_b = (cp.asarray(gen), cp.asarray(b)) if cp else (None, None)
        t_gen, t_b = (th.from_numpy(gen).cuda(), th.from_numpy(b).cuda()) if th else (None,
                                                                                        None)
        cases.append(Case(
            "solve", f"{n}, 1 rhs", 2 * n ** 3 / 3 + 2 * n ** 2,
            lambda: fl.linalg.solve(d["gen"], d["b"]).eval(), lambda: np.linalg.solve(gen, b),
            (lambda: cp.linalg.solve(c_gen, c_b)) if cp else None,
            (lambda: th.linalg.solve(t_gen, t_b)) if th else None, ok))
    if "lu" in ops:
        cases.append(_lu_case(n, gen, d, cp, tol))
    for op in ("qr", "qr_r"):
        if op in ops:
            cases.append(_qr_case(op, n, gen, d, cp, th, tol))
    if "solve_triangular" in ops:
        import scipy.linalg

        x = fl.linalg.solve_triangular(d["low"], d["bb"], lower=True).get()
        ok = bool(np.abs(low @ x - bb).max() <= tol * 10 * np.abs(bb).max())
        cases.append(_triangular(n, rhs, low, bb, d, cp, th, scipy.linalg))
        cases[-1].ok = ok
    return cases


def _lu_case(n: int, gen: np.ndarray, d: dict, cp: Any, tol: float) -> Case:
    import scipy.linalg

    f = linalg_factor._lu(d["gen"])
    lu, rows = f.lu.get().astype(np.float64), f.rows.get()
    low = np.tril(lu, -1) + np.eye(n)
    ok = bool(np.abs(low @ np.triu(lu) - gen[rows]).max() <= tol * 10 * np.abs(gen).max())
    cupy_call = None
    if cp:
        import cupyx.scipy.linalg as csla

        c_gen = cp.asarray(gen)
        cupy_call = lambda: csla.lu_factor(c_gen, check_finite=False)  # noqa: E731
    return Case("lu", f"{n}", 2 * n ** 3 / 3, lambda: linalg_factor._lu(d["gen"]),
                lambda: scipy.linalg.lu_factor(gen, check_finite=False), cupy_call, None, ok)


def _qr_case(op: str, n: int, gen: np.ndarray, d: dict, cp: Any, th: Any,
             tol: float) -> Case:
    """``qr``: Q and R ("reduced"); ``qr_r``: R alone ("r"), checked against numpy's R
    (the same signs: both are LAPACK's reflectors)."""
    mode = "reduced" if op == "qr" else "r"
    got = fl.linalg.qr(d["gen"], mode=mode)
    wide = _wide(gen.dtype)
    r = (got.R if mode == "reduced" else got).get().astype(wide)
    want = np.linalg.qr(gen.astype(wide), mode="r")
    ok = bool(np.abs(r - want).max() <= tol * 10 * np.abs(want).max())
    if mode == "reduced":
        q = got.Q.get().astype(wide)
        ok = ok and bool(np.abs(q @ r - gen).max() <= tol * 10 * np.abs(gen).max())

    def ours() -> None:
        out = fl.linalg.qr(d["gen"], mode=mode)
        if mode == "reduced":
            fl.compute(*out)
        else:
            out.eval()

    c_gen = cp.asarray(gen) if cp else None
    t_gen = th.from_numpy(gen).cuda() if th else None
    return Case(op, f"{n}", (8 if mode == "reduced" else 4) * n ** 3 / 3, ours,
                lambda: np.linalg.qr(gen, mode=mode),
                (lambda: cp.linalg.qr(c_gen, mode=mode)) if cp else None,
                (lambda: th.linalg.qr(t_gen, mode=mode)) if th else None, ok)


def _triangular(n: int, rhs: int, low: np.ndarray, bb: np.ndarray, d: dict, cp: Any,
                th: Any, sla: Any) -> Case:
    cupy_call = torch_call = None
    if cp:
        import cupyx.scipy.linalg as csla

        c_low, c_bb = cp.asarray(low), cp.asarray(bb)
        cupy_call = lambda: csla.solve_triangular(c_low, c_bb, lower=True)  # noqa: E731
    if th:
        t_low, t_bb = th.from_numpy(low).cuda(), th.from_numpy(bb).cuda()
        torch_call = lambda: th.linalg.solve_triangular(t_low, t_bb, upper=False)  # noqa: E731
    return Case("solve_triangular", f"{n} x {rhs}", n * n * rhs,
                lambda: fl.linalg.solve_triangular(d["low"], d["bb"], lower=True).eval(),
                lambda: sla.solve_triangular(low, bb, lower=True), cupy_call, torch_call)


def _update_cases(n: int, dt: np.dtype, cp: Any, th: Any, kk: int = 64) -> list[Case]:
    """``C -= A B`` (m = n - kk square, A row-major m x kk, B row-major kk x m: the LU's
    layout) by ``fuseloop_gemm_update``, a case per tiling (the rule's, then both of
    its choices forced)."""
    m = n - kk
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, kk)).astype(dt), rng.standard_normal((kk, m)).astype(dt)
    c = rng.standard_normal((m, m)).astype(dt)
    da, db, dc = fl.asarray(a), fl.asarray(b), linalg_factor._copy(fl.asarray(c))
    buf = linalg_factor._buf
    rule = linalg_kernels.gemm_tiling
    big, _ = linalg_gemm.gemm_tiling(None, 1 << 20, 1 << 20, dt)
    tol = 1e-3 if dt == np.float32 else 1e-9
    want = c - a.astype(np.float64) @ b
    c_c, c_a, c_b = (cp.asarray(c), cp.asarray(a), cp.asarray(b)) if cp else (None,) * 3
    t_c, t_a, t_b = ((th.from_numpy(c).cuda(), th.from_numpy(a).cuda(),
                      th.from_numpy(b).cuda()) if th else (None,) * 3)

    def cupy_call() -> None:
        c_c[...] -= c_a @ c_b

    cases = []
    # (the rule's; each tile forced; the big one with c element by element)
    for tile, vector in ((0, True), (big, True), (big // 2, True), (big, False)):
        wg = (tile * dt.itemsize // (2 * linalg_gemm.GEMM_VECTOR_BYTES)) ** 2
        tiling = rule if not tile else (lambda *_, t=tile, w=wg: (t, w))

        def ours(out: Any = dc, tiling: Any = tiling, vector: bool = vector) -> None:
            linalg_kernels.gemm_tiling, linalg_gemm.GEMM_VECTOR_C = tiling, vector
            try:
                linalg_kernels.gemm_update(buf(out), buf(da), buf(db), m, m, kk, (0, m, 1),
                                           (0, kk, 1), (0, m, 1), False, dt, out.device)
            finally:
                linalg_kernels.gemm_tiling, linalg_gemm.GEMM_VECTOR_C = rule, True

        once = linalg_factor._copy(fl.asarray(c))
        ours(once)
        ok = bool(np.abs(once.get() - want).max() <= tol * np.abs(want).max())
        label = f"update [{tile}{'' if vector else ', c scalar'}]" if tile else "update"
        cases.append(Case(label, f"{m} x {kk}",
                          2 * m * m * kk, ours, lambda: np.subtract(c, a @ b, out=c),
                          cupy_call if cp else None,
                          (lambda: t_c.addmm_(t_a, t_b, alpha=-1)) if th else None, ok))
    return cases


def _sort_scan(sort_n: int, scan_n: int, ops: list[str], cp: Any, th: Any) -> list[Case]:
    rng = np.random.default_rng(1)
    cases = []
    if "sort" in ops:
        h = rng.standard_normal(sort_n).astype(np.float32)
        dx = fl.asarray(h)
        ok = bool(np.array_equal(fl.sort(dx).get(), np.sort(h)))
        c = cp.asarray(h) if cp else None
        t = th.from_numpy(h).cuda() if th else None
        cases.append(Case("sort", f"2^{sort_n.bit_length() - 1} f32", None,
                          lambda: fl.sort(dx).eval(), lambda: np.sort(h),
                          (lambda: cp.sort(c)) if cp else None,
                          (lambda: th.sort(t)) if th else None, ok))
    if "cumsum" in ops:
        h = rng.random(scan_n, dtype=np.float32)
        dx = fl.asarray(h)
        got = fl.cumulative_sum(dx).get()
        step = max(1, scan_n // 4096)
        want = np.cumsum(h, dtype=np.float64)[::step]
        ok = bool(np.allclose(got[::step], want, rtol=1e-3))
        c = cp.asarray(h) if cp else None
        t = th.from_numpy(h).cuda() if th else None
        cases.append(Case("cumsum", f"2^{scan_n.bit_length() - 1} f32", None,
                          lambda: fl.cumulative_sum(dx).eval(), lambda: np.cumsum(h),
                          (lambda: cp.cumsum(c)) if cp else None,
                          (lambda: th.cumsum(t, 0)) if th else None, ok))
    return cases


# {{{ svd and eigh (one-sided Jacobi: fuseloop/linalg_jacobi.py)

def _jacobi_cases(n: int, dt: np.dtype, ops: list[str], cp: Any, th: Any) -> list[Case]:
    """``fl.linalg.svd`` (reduced, with vectors) of a random n x n matrix and
    ``fl.linalg.eigh`` of a random symmetric one, against numpy (LAPACK), cupy and
    torch (cuSOLVER); checked by the values against numpy's (float64)."""
    rng = np.random.default_rng(3)
    a = _random(rng, (n, n), dt)
    sym = ((a + a.conj().T) / 2).astype(dt)
    a = a.astype(dt)
    tol = _tol(dt)
    cases = []
    if "svd" in ops:
        da = fl.asarray(a)
        ref = np.linalg.svd(a.astype(_wide(dt)), compute_uv=False)
        got = fl.linalg.svd(da, full_matrices=False).S.get()
        c_a = cp.asarray(a) if cp else None
        t_a = th.from_numpy(a).cuda() if th else None
        cases.append(Case(
            "svd", f"{n}", None,
            lambda: [x.eval() for x in fl.linalg.svd(da, full_matrices=False)],
            lambda: np.linalg.svd(a, full_matrices=False),
            (lambda: cp.linalg.svd(c_a, full_matrices=False)) if cp else None,
            (lambda: th.linalg.svd(t_a, full_matrices=False)) if th else None,
            bool(np.abs(got - ref).max() <= tol * ref.max())))
    if "eigh" in ops:
        ds = fl.asarray(sym)
        ref = np.linalg.eigvalsh(sym.astype(_wide(dt)))
        got = fl.linalg.eigh(ds).eigenvalues.get()
        c_s = cp.asarray(sym) if cp else None
        t_s = th.from_numpy(sym).cuda() if th else None
        cases.append(Case(
            "eigh", f"{n}", None, lambda: [x.eval() for x in fl.linalg.eigh(ds)],
            lambda: np.linalg.eigh(sym), (lambda: cp.linalg.eigh(c_s)) if cp else None,
            (lambda: th.linalg.eigh(t_s)) if th else None,
            bool(np.abs(got - ref).max() <= tol * np.abs(ref).max())))
    return cases


# }}}


def _row(case: Case, repeat: int, dtype: str, syncs: dict[str, Callable[[], Any]]) -> dict:
    row: dict[str, Any] = {"op": case.op, "size": case.size, "dtype": dtype, "ok": case.ok}
    for peer, call in case.calls.items():
        if call is not None:
            row[f"{peer}_s"] = _median(_synced(call, syncs[peer]), repeat)
    ours = row["fuseloop_s"]
    fl.reset_stats()
    _synced(case.calls["fuseloop"], fl.synchronize)()
    row["launches"] = fl.stats()["kernels_launched"]
    for peer in ("cupy", "torch"):
        if f"{peer}_s" in row:
            row[f"x_{peer}"] = row[f"{peer}_s"] / ours
    if case.flops:
        row["fuseloop_gflops"] = case.flops / ours / 1e9
    return row


def _print(rows: list[dict]) -> None:
    head = (f"{'op':26s} {'size':14s} {'fuseloop ms':>11s} {'numpy ms':>9s} {'cupy ms':>8s} "
            f"{'torch ms':>9s} {'x cupy':>7s} {'x torch':>7s} {'GFLOP/s':>8s} {'launches':>8s} "
            "check")
    print(head)
    print("-" * len(head))

    def ms(r: dict, k: str) -> str:
        return f"{r[k] * 1e3:.2f}" if k in r else "-"

    def num(r: dict, k: str, f: str) -> str:
        return format(r[k], f) if k in r else "-"

    for r in rows:
        print(f"{r['op']:26s} {r['size']:14s} {ms(r, 'fuseloop_s'):>11s} "
              f"{ms(r, 'numpy_s'):>9s} {ms(r, 'cupy_s'):>8s} {ms(r, 'torch_s'):>9s} "
              f"{num(r, 'x_cupy', '.3f'):>7s} {num(r, 'x_torch', '.3f'):>7s} "
              f"{num(r, 'fuseloop_gflops', '.1f'):>8s} {r['launches']:8d} "
              f"{'ok' if r['ok'] else 'DIFFERS from numpy'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096])
    ap.add_argument("--rhs", type=int, default=256)
    ap.add_argument("--jacobi-sizes", type=int, nargs="+", default=[256, 1024],
                    help="the sizes of svd and eigh (O(n^3) a sweep, about 10 sweeps)")
    ap.add_argument("--sort-n", type=int, default=1 << 24)
    ap.add_argument("--scan-n", type=int, default=1 << 27)
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dtype", default="float32",
                    choices=["float32", "float64", "complex64", "complex128"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--update", default="auto",
                    choices=["auto", "kernel", "contraction", "both"])
    ap.add_argument("--panel", default="auto", choices=["auto", "rows", "tile", "both"])
    ap.add_argument("--qr-block", type=int, nargs="+", default=[0],
                    help="the QR's block widths, a row each (0: fuseloop.linalg_qr's rule)")
    args = ap.parse_args()
    modes = ["contraction", "kernel"] if args.update == "both" else [args.update]
    panels = ["tile", "rows"] if args.panel == "both" else [args.panel]
    if args.update != "auto" and not hasattr(linalg_factor, "update_kernel"):
        ap.error(f"the fuseloop imported ({fl.__file__}) has no choice of update kernel: run "
                 "with PYTHONPATH=<the checkout>")
    dt = np.dtype(args.dtype)
    if dt.kind == "c":  # (the LU, the triangular solve and the update kernel: real only)
        args.ops = [op for op in args.ops if op in COMPLEX_OPS]
    cp, th = _cupy(), _torch()
    syncs: dict[str, Callable[[], Any]] = {
        "fuseloop": fl.synchronize, "numpy": lambda: None,
        "cupy": (lambda: cp.cuda.Device().synchronize()) if cp else (lambda: None),
        "torch": th.cuda.synchronize if th else (lambda: None)}
    print(f"device: {fl.get_device()}; {args.dtype} factorisations; median of {args.repeat}; "
          f"cupy {'yes' if cp else 'no'}, torch {'yes' if th else 'no'}; fuseloop from "
          f"{fl.__file__}")
    rows, failed = [], []
    jobs: list[tuple[str, Callable[[], list[Case]], str, str, str]] = []
    for n in args.sizes:
        jobs += [(f"{op} {n}", lambda op=op, n=n: _factorisations(n, dt, args.rhs, [op], cp, th),
                  args.dtype, mode, panel) for op in MATRIX_OPS if op in args.ops
                 for mode in modes for panel in (panels if op in LU_OPS else
                                                 [f"qr{b}" for b in args.qr_block]
                                                 if op in QR_OPS else ["auto"])]
    jobs += [(op, lambda op=op: _sort_scan(args.sort_n, args.scan_n, [op], cp, th), "float32",
              "auto", "auto") for op in ("sort", "cumsum") if op in args.ops]
    if "update" in args.ops:
        jobs += [(f"update {n}", lambda n=n: _update_cases(n, dt, cp, th), args.dtype, "auto",
                  "auto") for n in args.sizes]
    jobs += [(f"{op} {n}", lambda op=op, n=n: _jacobi_cases(n, dt, [op], cp, th), args.dtype,
              "auto", "auto") for n in args.jacobi_sizes for op in ("svd", "eigh")
             if op in args.ops]
    for what, make, dtype, mode, panel in jobs:
        qr_block = int(panel[2:]) if panel.startswith("qr") else 0
        linalg_qr.QR_BLOCK = qr_block
        panel = "auto" if panel.startswith("qr") else panel
        linalg_factor.UPDATE, linalg_panel.PANEL = mode, panel
        try:  # (one failing operation does not cost the others' timings)
            for case in make():
                if len(modes) > 1 and mode != "auto":
                    case.op = f"{case.op} [{mode[:6]}]"
                if len(panels) > 1 and panel != "auto":
                    case.op = f"{case.op} [{panel}]"
                if qr_block:
                    case.op = f"{case.op} [nb {qr_block}]"
                rows.append(_row(case, args.repeat, dtype, syncs))
        except Exception as exc:
            failed.append(f"{what}: {type(exc).__name__}: {exc}")
    linalg_factor.UPDATE, linalg_panel.PANEL, linalg_qr.QR_BLOCK = "auto", "auto", 0
    _print(rows)
    for line in failed:
        print("FAILED", line)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
