"""Kernels a loop over growing lengths lowers, each with the step that asked for it.

Issue 26: loops whose statements reduce over a length that grows with the loop index
(NPBench's cholesky, lu, trisolv, gramschmidt, durbin) lower a kernel whenever a
statement's size class changes.  This probe runs such loops on one process's empty
caches and prints, for each kernel the stages lower, the loop step that asked for it,
the kernel's name, recipe and size class, and at the end ``fl.stats()``'s kernels
lowered.  Patterns: ``cholesky``/``lu``/``trisolv`` (NPBench's statements), ``prefix``
(``x[:k] @ y[:k]``, k = 1..n), ``lagsum`` (``sum(x[i:] * y[:n-i])``), ``rowmax``
(``max(A[:k, :k], axis=1)``, a reduction over many rows of a growing length),
``suffix_norm`` (``sqrt(sum(x[k:] ** 2))``), ``gemv`` (``A[:k, :k] @ x[:k]``),
``covariance`` (``d[:, i] @ d[:, i:]``, 200 rows).  Counts, not timings.

    FUSELOOP_HOST_PATH=0 python benchmarks/probes/size_class_kernels.py [--n 100]
        [--pattern cholesky prefix ...] [--fake-gpu] [--quiet]

``--fake-gpu`` presents the CPU device as a 132-unit GPU (the GPU recipes' classes, run
by PoCL), as ``cold_npbench.py --fake-gpu`` does.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
# (an empty disk cache: a kernel found there is not lowered)
os.environ.setdefault("FUSELOOP_PROGRESS", "0")
os.environ.setdefault("FUSELOOP_CACHE_DIR", tempfile.mkdtemp(prefix="size_classes_"))
if "--fake-gpu" in sys.argv:  # (compile workers see only the real device)
    os.environ["FUSELOOP_COMPILE"] = "inline"
import numpy as np

import fuseloop as fl
from fuseloop.lower import codegen

STEP = [0]
LOWERED: list[str] = []


def _record() -> None:
    inner = codegen.kernel_plan

    def kernel_plan(program: Any, index_dtype: Any, device: Any, recipe: Any,
                    user_functions: Any, sizes: str = "") -> Any:
        plan = inner(program, index_dtype, device, recipe, user_functions, sizes)
        LOWERED.append(f"step {STEP[0]:4d}: {plan.name} ({len(program.entries)} operations)"
                       f" {recipe.name} [{sizes}]")
        return plan
    codegen.kernel_plan = kernel_plan  # type: ignore[assignment]


def _cholesky(n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(1)
    m = rng.random((n, n))
    a = fl.asarray(m @ m.T + n * np.eye(n))

    def run() -> Any:
        a[0, 0] = fl.sqrt(a[0, 0])
        for i in range(1, n):
            STEP[0] = i
            for j in range(i):
                a[i, j] -= fl.dot(a[i, :j], a[j, :j])
                a[i, j] /= a[j, j]
            a[i, i] -= fl.dot(a[i, :i], a[i, :i])
            a[i, i] = fl.sqrt(a[i, i])
        return a
    return run


def _lu(n: int) -> Callable[[], Any]:
    a = fl.asarray(np.random.default_rng(2).random((n, n)) + n * np.eye(n))

    def run() -> Any:
        for i in range(n):
            STEP[0] = i
            for j in range(i):
                a[i, j] -= a[i, :j] @ a[:j, j]
                a[i, j] /= a[j, j]
            for j in range(i, n):
                a[i, j] -= a[i, :i] @ a[:i, j]
        return a
    return run


def _trisolv(n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(3)
    low = fl.asarray(np.tril(rng.random((n, n))) + n * np.eye(n))
    b, x = fl.asarray(rng.random(n)), fl.zeros(n)

    def run() -> Any:
        for i in range(n):
            STEP[0] = i
            x[i] = (b[i] - low[i, :i] @ x[:i]) / low[i, i]
        return x
    return run


def _prefix(n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(4)
    x, y, out = fl.asarray(rng.random(n)), fl.asarray(rng.random(n)), fl.zeros(n)

    def run() -> Any:
        for k in range(1, n + 1):
            STEP[0] = k
            out[k - 1] = x[:k] @ y[:k]
        return out
    return run


def _lagsum(n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(5)
    x, y, s = fl.asarray(rng.random(n)), fl.asarray(rng.random(n)), fl.zeros(n)

    def run() -> Any:
        for i in range(n):
            STEP[0] = i
            s[i] = fl.sum(x[i:] * y[:n - i])
        return s
    return run


def _rowmax(n: int) -> Callable[[], Any]:
    a = fl.asarray(np.random.default_rng(6).random((n, n)).astype(np.float32))
    out = fl.zeros(n, dtype=np.float32)

    def run() -> Any:
        for k in range(1, n + 1):
            STEP[0] = k
            out[:k] = fl.max(a[:k, :k], axis=1)
        return out
    return run


def _suffix_norm(n: int) -> Callable[[], Any]:
    x, s = fl.asarray(np.random.default_rng(7).random(n)), fl.zeros(n)

    def run() -> Any:
        for k in range(n):
            STEP[0] = k
            s[k] = fl.sqrt(fl.sum(x[k:] ** 2))
        return s
    return run


def _gemv(n: int) -> Callable[[], Any]:
    rng = np.random.default_rng(8)
    a, x, out = fl.asarray(rng.random((n, n))), fl.asarray(rng.random(n)), fl.zeros(n)

    def run() -> Any:
        for k in range(1, n + 1):
            STEP[0] = k
            out[:k] = a[:k, :k] @ x[:k]
        return out
    return run


def _covariance(n: int) -> Callable[[], Any]:
    d, cov = fl.asarray(np.random.default_rng(9).random((200, n))), fl.zeros((n, n))

    def run() -> Any:
        for i in range(n):
            STEP[0] = i
            cov[i, i:] = d[:, i] @ d[:, i:]
        return cov
    return run


PATTERNS = {"cholesky": _cholesky, "lu": _lu, "trisolv": _trisolv, "prefix": _prefix,
            "lagsum": _lagsum, "rowmax": _rowmax, "suffix_norm": _suffix_norm, "gemv": _gemv,
            "covariance": _covariance}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--pattern", nargs="+", default=list(PATTERNS), choices=PATTERNS)
    parser.add_argument("--fake-gpu", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.fake_gpu:
        import dataclasses
        fl.set_device(dataclasses.replace(fl.set_device("cpu"), index=9132, type="gpu",
                                          compute_units=132, max_work_group_size=1024))
    _record()
    for name in args.pattern:
        before = fl.stats()["kernels_lowered"]
        LOWERED.clear()
        PATTERNS[name](args.n)().get()
        print(f"{name} n={args.n}: kernels lowered {fl.stats()['kernels_lowered'] - before}",
              flush=True)
        if not args.quiet:
            for line in LOWERED:
                print("   ", line)


if __name__ == "__main__":
    main()
