"""Which kernel a PoCL CPU device aborts on: one complex ``solve`` of the contour test,
every launch waited for at once and named first.

``tests/test_cold_kernels.py::test_contour_kernels_do_not_grow_with_iterations`` aborted
the interpreter on a Debian PoCL 5.0 (LLVM 16) CPU device inside ``clWaitForEvents``
(``linalg_factor._read_flag``).  PoCL's CPU driver builds a kernel's work-group function
when the kernel first runs, in its worker thread, so a compiler or runtime abort there
shows up in whatever wait the host thread is in: that of the flag, behind the five
fuseloop kernels, ``fuseloop_tslu`` and ``fuseloop_rowperm`` enqueued since the last
read.  Here each launch is enqueued at once (nothing deferred) and waited for before
the next, its name printed (flushed) first, so the last name printed before an abort
is the kernel's (Loopy's are all ``fuseloop_kernel``: ``POCL_DEBUG=all`` names the
build PoCL was in).  With PoCL's kernel cache on (the default) that compile happens at
the first launch, in this process (the compile worker asks no binary); with
``POCL_KERNEL_CACHE=0`` the worker asks for the binary, which compiles the work-group
functions there first, so a crash is a ``KernelBuildError``.  ``--as-gpu`` presents
the device as a 132-unit GPU (the GPU's LU panel kernel and groups of many
work-items, still run by PoCL).  Nothing is timed.

Usage (``--device``: what ``fl.device`` takes, e.g. ``1`` or ``cpu``)::

    PYTHONUNBUFFERED=1 FUSELOOP_HOST_PATH=0 POCL_KERNEL_CACHE=0 POCL_DEBUG=all \\
        python benchmarks/probes/pocl_abort_bisect.py --device 1 [--points 3] [--clear] \\
        [--as-gpu]
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import fuseloop as fl
from fuseloop import launching, linalg_factor
from fuseloop.runtime import transfer
from fuseloop.runtime.devices import find_device


def _name(args: tuple) -> str:
    kernel = args[3] if len(args) > 3 else None
    return str(getattr(kernel, "function_name", None) or type(kernel).__name__)


def _waiting(device: fl.Device) -> None:
    """Every launch now and waited for, its kernel's name printed before."""
    enqueue = launching.enqueue_or_defer
    count = [0]

    def now(go, args, small, dev):
        count[0] += 1
        print(f"launch {count[0]}: {_name(args)} on {dev.name}", flush=True)
        enqueue(go, args, False, dev)
        transfer.finish(dev)
        print("  done", flush=True)

    launching.enqueue_or_defer = now
    read_flag = linalg_factor._read_flag

    def flag(f):
        print("read flag", flush=True)
        return read_flag(f)

    linalg_factor._read_flag = flag


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="what fl.device takes (index, type)")
    ap.add_argument("--points", type=int, default=3, help="contour points (solves)")
    ap.add_argument("--clear", action="store_true",
                    help="fl.clear_caches() first, as the test does before each count")
    ap.add_argument("--as-gpu", action="store_true",
                    help="present the device as a 132-unit GPU (builds in this process)")
    opts = ap.parse_args()
    faulthandler.enable(all_threads=True)
    from test_cold_kernels import _contour, _inputs

    spec: Any = int(opts.device) if opts.device.isdigit() else opts.device
    if opts.as_gpu:
        # (a compile worker finds no device of that description: builds in this process)
        os.environ["FUSELOOP_COMPILE"] = "inline"
        base = find_device(spec)
        spec = dataclasses.replace(base, index=9150 + base.index, type="gpu",
                                   compute_units=132, max_work_group_size=1024)
    with fl.device(spec) as dev:
        print(f"device {dev.name} ({dev.platform}), {dev.compute_units} units, local "
              f"memory {getattr(dev.cl_device, 'local_mem_size', '?')} bytes", flush=True)
        _waiting(dev)
        if opts.clear:
            fl.clear_caches()
        ham, pts, y = _inputs(12, 20, opts.points)
        got = _contour(fl, fl.asarray(ham), fl.asarray(pts), fl.asarray(y))
        want = _contour(np, ham, pts, y)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.get(), w, rtol=1e-9, atol=1e-9)
    print("finished: results equal numpy's", flush=True)


if __name__ == "__main__":
    main()
