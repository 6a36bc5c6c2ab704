"""Loops that read elements of small integer arrays to Python (issue 26): launches,
device-to-host reads and CPU time per statement, in the current checkout.

Two are NPBench's patterns (spmv's CSR rows, nussinov's ``max`` of two elements); two
are not (a ragged segment sum by an offsets array, a binary search written in Python).
On a GPU each element read is a blocking copy; ``fuseloop.ops.host_mirror`` serves
them from a host copy.  Run it in each checkout to compare (on the CPU with
``FUSELOOP_HOST_PATH=0``, which models the GPU path):

    cd /work/main && FUSELOOP_HOST_PATH=0 python BRANCH/benchmarks/probes/host_mirror_loops.py
    cd BRANCH && FUSELOOP_HOST_PATH=0 python benchmarks/probes/host_mirror_loops.py

Reported, never asserted.  The device reads are counted on OpenCL backends only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.getcwd())  # (the current checkout's fuseloop, not the installed one)
import fuseloop as fl

_DEVICE_READS = [0]


def _count_device_reads() -> None:
    from fuseloop.backends.opencl import OpenCLBackend

    original = OpenCLBackend.enqueue_read

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        _DEVICE_READS[0] += 1
        return original(self, *a, **k)

    OpenCLBackend.enqueue_read = counted  # type: ignore[method-assign]


def csr_rows(n: int) -> tuple[Any, int]:
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 5, n)
    indptr = fl.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    indices = fl.asarray(rng.integers(0, n, int(counts.sum())).astype(np.int32))
    data, x = fl.asarray(rng.random(int(counts.sum()))), fl.asarray(rng.random(n))

    def run() -> Any:
        y = fl.empty(n, np.float64)
        for i in range(n):
            y[i] = data[indptr[i]:indptr[i + 1]] @ x[indices[indptr[i]:indptr[i + 1]]]
        return y
    return run, n


def segment_sums(n: int) -> tuple[Any, int]:
    rng = np.random.default_rng(1)
    offs = fl.asarray(np.concatenate([[0], np.cumsum(rng.integers(1, 40, n))]).astype(np.int64))
    x = fl.asarray(rng.random(int(offs.get()[-1])))

    def run() -> Any:
        out = fl.empty(n, np.float64)
        for s in range(n):
            out[s] = fl.sum(x[offs[s]:offs[s + 1]])
        return out
    return run, n


def binary_search(n: int) -> tuple[Any, int]:
    host = np.sort(np.random.default_rng(2).integers(0, 10**6, 5000)).astype(np.int32)
    keys = fl.asarray(host)
    wanted = [int(v) for v in np.random.default_rng(3).integers(0, 10**6, n)]

    def search(keys: Any, steps: list[int]) -> list[int]:
        found = []
        for v in wanted:
            lo, hi = 0, len(keys)
            while lo < hi:
                mid = (lo + hi) // 2
                steps[0] += 1
                if keys[mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
            found.append(lo)
        return found
    steps = [0]
    search(host, steps)  # (the statement count: the same steps on numpy's array)
    return (lambda: search(keys, [0])), steps[0]


def max_of_elements(n: int) -> tuple[Any, int]:
    start = (np.random.default_rng(4).random((n, n)) < 0.1).astype(np.int32)

    def run() -> Any:
        t = fl.asarray(start)
        for i in range(n - 1, -1, -1):
            for j in range(i + 1, n):
                for k in range(i + 1, j):
                    t[i, j] = max(t[i, j], t[i, k] + t[k + 1, j])
        return t
    return run, sum(j - i - 1 for i in range(n) for j in range(i + 1, n))


WORKLOADS = {"csr_rows": (csr_rows, 2000), "segment_sums": (segment_sums, 1000),
             "binary_search": (binary_search, 100), "max_of_elements": (max_of_elements, 24)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    _count_device_reads()
    print(f"fuseloop {fl.__file__}")
    print(f"{'workload':16} run {'stmts':>7} {'launched':>9} {'dev reads':>9} {'us/stmt':>8}")
    for name in args.names:
        make, n = WORKLOADS[name]
        run, statements = make(n)
        for r in range(args.runs):
            fl.synchronize()
            fl.reset_stats()
            _DEVICE_READS[0] = 0
            t = time.process_time()
            out = run()
            if isinstance(out, fl.Array):
                out.get()
            fl.synchronize()
            cpu = time.process_time() - t
            print(f"{name:16} {r:3} {statements:7} {fl.stats()['kernels_launched']:9} "
                  f"{_DEVICE_READS[0]:9} {cpu / statements * 1e6:8.1f}", flush=True)


if __name__ == "__main__":
    main()
