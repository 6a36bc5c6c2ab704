"""Sparse matrix-vector products: ``fl.sparse`` CSR and ELL against cuSPARSE or scipy.

The matrix is the 2-D Poisson matrix (5-point Laplacian on a square grid, about
``--rows`` rows, 5 entries per inner row).  For each format the median time of one
product (the result evaluated into a new buffer) and of the fused
``2 * (A @ x) - b`` is reported with the bandwidth its compulsory traffic needs
(matrix arrays, ``x`` and ``b`` read once, ``y`` written once) and the peer's
ratio, measured in the same run:

* GPU devices: ``cupyx.scipy.sparse.csr_matrix @ x`` (cuSPARSE), when cupy imports;
  the fused case against cupy's ``2 * (A @ x) - b`` (two kernels more);
* CPU devices: ``scipy.sparse.csr_matrix @ x`` (single-threaded), when scipy imports.

Every result is checked against the peer's (or scipy's, or a numpy product).

Usage::

    python benchmarks/bench_spmv.py [--rows N] [--dtype float64] [--device SPEC]
                                    [--repeat N] [--out F]

``--rows`` defaults to 2^24 on a GPU and 2^20 on a CPU (rounded to a square grid).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import copy_bandwidth, wall_times


def poisson_2d(n: int, dtype: Any, index_dtype: Any = np.int32
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR arrays of the 5-point Laplacian on an ``n`` x ``n`` grid (sorted columns)."""
    rows = n * n
    r = np.arange(rows, dtype=np.int64)
    i, j = r // n, r % n
    # neighbours in increasing column order: up, left, centre, right, down
    cols = np.stack([r - n, r - 1, r, r + 1, r + n], axis=1)
    ok = np.stack([i > 0, j > 0, np.ones(rows, bool), j < n - 1, i < n - 1], axis=1)
    vals = np.where(np.arange(5) == 2, 4.0, -1.0)[None, :].repeat(rows, axis=0)
    counts = ok.sum(axis=1)
    indptr = np.zeros(rows + 1, dtype=index_dtype)
    np.cumsum(counts, out=indptr[1:])
    return vals[ok].astype(dtype), cols[ok].astype(index_dtype), indptr


def _cupy() -> Any:
    try:
        import cupy
        import cupyx.scipy.sparse
    except ImportError:
        return None
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # (no CUDA driver)
        return None
    return cupy, cupyx.scipy.sparse


def _scipy() -> Any:
    try:
        import scipy.sparse
    except ImportError:
        return None
    return scipy.sparse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None,
                    help="about this many rows (a square grid); default 2^24 GPU, 2^20 CPU")
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.device is not None:
        fl.set_device(args.device)
    dev = fl.get_device()
    gpu = dev.type != "cpu"
    rows_wanted = args.rows or (1 << 24 if gpu else 1 << 20)
    n = max(2, math.isqrt(rows_wanted))
    dtype = np.dtype(args.dtype)
    data, indices, indptr = poisson_2d(n, dtype)
    rows, nnz = n * n, data.size
    print(f"device: {dev.name} ({dev.type}); 2-D Poisson matrix, {n} x {n} grid: {rows} rows, "
          f"{nnz} entries, {dtype}", flush=True)
    rng = np.random.default_rng(0)
    xh, bh = rng.standard_normal(rows).astype(dtype), rng.standard_normal(rows).astype(dtype)

    a_csr = fl.sparse.csr_matrix((data, indices, indptr), shape=(rows, rows))
    a_ell = a_csr.toell()
    x, b = fl.asarray(xh), fl.asarray(bh)
    vs, isz = dtype.itemsize, indices.dtype.itemsize
    vec_bytes = 2 * rows * vs  # x read once, y written once
    traffic = {"csr": nnz * (vs + isz) + (rows + 1) * isz + vec_bytes,
               "ell": a_ell.width * rows * (vs + isz) + vec_bytes}

    peer: dict[str, Any] = {}
    cp = _cupy() if gpu else None
    sps = _scipy()
    if cp is not None:
        cupy, cusp = cp
        pa = cusp.csr_matrix((cupy.asarray(data), cupy.asarray(indices),
                              cupy.asarray(indptr)), shape=(rows, rows))
        px, pb = cupy.asarray(xh), cupy.asarray(bh)
        peer = {"name": "cupyx (cuSPARSE)", "spmv": lambda: pa @ px,
                "fused": lambda: 2 * (pa @ px) - pb, "sync": cupy.cuda.Device().synchronize,
                "host": lambda v: cupy.asnumpy(v)}
    elif sps is not None and not gpu:
        pa = sps.csr_matrix((data, indices, indptr), shape=(rows, rows))
        peer = {"name": "scipy", "spmv": lambda: pa @ xh, "fused": lambda: 2 * (pa @ xh) - bh,
                "sync": lambda: None, "host": lambda v: v}
    if sps is not None:
        ref = sps.csr_matrix((data.astype(np.float64), indices, indptr),
                             shape=(rows, rows)) @ xh.astype(np.float64)
    else:  # (the stencil itself)
        g = xh.astype(np.float64).reshape(n, n)
        p = np.pad(g, 1)
        ref = (4 * g - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]).ravel()
    tol = 1e-4 if dtype == np.float32 else 1e-10
    scale = np.abs(ref).max()

    def ok(got: np.ndarray, want: np.ndarray) -> bool:
        return bool(np.abs(got.astype(np.float64) - want).max() <= tol * scale)

    table: list[dict[str, Any]] = []
    correct = True

    def timed(library: str, case: str, fmt: str, fn: Callable[[], Any],
              sync: Callable[[], Any]) -> float:
        times = wall_times(fn, sync, args.repeat, 2, 1)
        t = statistics.median(times)
        extra = rows * vs if case == "2*(A@x)-b" else 0  # b read once more
        gbs = (traffic[fmt] + extra) / t / 1e9
        table.append({"library": library, "format": fmt, "case": case, "ms": t * 1e3,
                      "min_ms": min(times) * 1e3, "GB/s": gbs})
        return t

    fused_ref = 2 * ref - bh.astype(np.float64)
    for fmt, mat in (("csr", a_csr), ("ell", a_ell)):
        correct &= ok((mat @ x).get(), ref)
        correct &= ok((2 * (mat @ x) - b).get(), fused_ref)
        timed("fuseloop", "A@x", fmt, lambda mat=mat: (mat @ x).eval(), fl.synchronize)
        timed("fuseloop", "2*(A@x)-b", fmt, lambda mat=mat: (2 * (mat @ x) - b).eval(),
              fl.synchronize)
    if peer:
        correct &= ok(peer["host"](peer["spmv"]()), ref)
        timed(peer["name"], "A@x", "csr", peer["spmv"], peer["sync"])
        timed(peer["name"], "2*(A@x)-b", "csr", peer["fused"], peer["sync"])

    peer_ms = {r["case"]: r["ms"] for r in table if r["library"] != "fuseloop"}
    print(f"{'library':18s} {'format':6s} {'case':10s} {'ms':>9s} {'min ms':>9s} {'GB/s':>8s} "
          f"{'peer/this':>10s}")
    for r in table:
        ratio = peer_ms.get(r["case"], float("nan")) / r["ms"]
        r["peer_time_ratio"] = ratio
        print(f"{r['library']:18s} {r['format']:6s} {r['case']:10s} {r['ms']:9.3f} "
              f"{r['min_ms']:9.3f} {r['GB/s']:8.1f} {ratio:10.2f}")
    print("(ms: median; peer/this > 1: fuseloop is faster, by medians; GB/s counts each array "
          "once: matrix arrays, x, y, and b for the fused case)")
    copy = copy_bandwidth(traffic["csr"] // 2, args.repeat)
    print(f"device buffer copy of the same traffic: {copy:.1f} GB/s")
    print(f"results match: {correct}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev.name, "type": dev.type, "rows": rows, "nnz": nnz,
                       "dtype": dtype.name, "table": table, "copy_GB/s": copy,
                       "correct": correct}, f, indent=1)
        print(f"wrote {args.out}")
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
