"""Mask compaction: ``fl.flatnonzero`` against the generic scan it replaced and a peer.

For each mask size (random masks of two densities) the time of one compaction, the
positions written and their count read back, is the median over ``--repeat`` calls:

* fuseloop: ``fl.flatnonzero(mask)`` (``fuseloop/ops/compaction.py``);
* pyopencl scan: pyopencl's ``GenericScanKernel`` with ``copy_if``'s pattern and the count
  read back, as fuseloop did before (defined here, for the comparison in the same run);
* numpy: ``np.flatnonzero`` of the host mask (CPU devices), or torch ``nonzero`` of a CUDA
  mask (GPU devices, when torch is importable with CUDA).

``--layouts`` also times fuseloop with other block sizes (``Layout.min_block``) and, on a
GPU, other numbers of mask bytes per work-item (``Layout.per_item``): the figures from
which the choices in ``compaction.py`` are made.  Every result is checked
against ``np.flatnonzero``.

Usage::

    python benchmarks/bench_masks.py [--device SPEC] [--repeat N] [--layouts] [--out F]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

import fuseloop as fl
from fuseloop.bench.runner import median_time
from fuseloop.ops import compaction


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _pyopencl_scan(dev: Any) -> Callable[[Any, int], int]:
    """Positions and count with pyopencl's generic scan; returns the count."""
    from pyopencl.scan import GenericScanKernel

    knl = GenericScanKernel(
        dev.context, np.int64,
        arguments="__global const unsigned char *mask, __global long *out, "
                  "__global long *count",
        input_expr="mask[i] ? 1 : 0", scan_expr="a+b", neutral="0",
        output_statement="if (prev_item != item) out[item - 1] = i; "
                         "if (i + 1 == N) count[0] = item;",
        index_dtype=np.int64, name_prefix="bench_nonzero")

    def run(mask_buf: Any, n: int) -> int:
        queue = dev.queue
        out = cl_array.empty(queue, (n,), np.int64, allocator=dev.allocator)
        count = cl_array.empty(queue, (1,), np.int64, allocator=dev.allocator)
        knl(cl_array.Array(queue, (n,), np.uint8, data=mask_buf), out, count,
            queue=queue, size=n, allocator=dev.allocator)
        host = np.empty(1, np.int64)
        cl.enqueue_copy(queue, host, count.data)
        return int(host[0])

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--layouts", action="store_true",
                    help="also time fuseloop with other block sizes and work per item")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.device is not None:
        fl.set_device(args.device)
    dev = fl.get_device()
    sizes = [10, 14, 18, 22] if dev.type == "cpu" else [10, 14, 18, 22, 26]
    torch = _torch() if dev.type != "cpu" else None
    scan = _pyopencl_scan(dev)
    layout_for = compaction.layout_for
    layout = layout_for(dev)
    rows: list[dict[str, Any]] = []
    ok = True

    def timed(library: str, name: str, fn: Callable[[], Any], sync: Callable[[], Any],
              n: int, **extra: Any) -> float:
        t = median_time(fn, sync, args.repeat)
        rows.append({"case": name, "library": library, "elements": n, "us": t * 1e6, **extra})
        print(f"{library:22s} {name:34s} {t * 1e6:10.1f} us", flush=True)
        return t

    rng = np.random.default_rng(0)

    def measure(log2: int, density: float) -> bool:
        n = 1 << log2
        mh = rng.random(n) < density
        m = fl.asarray(mh)
        want = np.flatnonzero(mh)
        name = f"2^{log2}, {density:.0%} true"
        good = bool(np.array_equal(fl.flatnonzero(m).get(), want))
        t_fl = timed("fuseloop", name, lambda: fl.flatnonzero(m), fl.synchronize, n,
                     layout=dataclasses.asdict(layout), blocks=compaction.blocks(n, layout)[0])
        buf = m.data
        good &= scan(buf, n) == want.size
        t_scan = timed("pyopencl scan", name, lambda: scan(buf, n), fl.synchronize, n)
        print(f"{'':22s} pyopencl scan / fuseloop: {t_scan / t_fl:.2f}")
        if dev.type == "cpu":
            t_np = timed("numpy", name, lambda: np.flatnonzero(mh), lambda: None, n)
            print(f"{'':22s} fuseloop / numpy: {t_fl / t_np:.2f}")
        elif torch is not None:
            tm = torch.from_numpy(mh).cuda()
            t_t = timed("torch", name, lambda: torch.nonzero(tm), torch.cuda.synchronize, n)
            print(f"{'':22s} fuseloop / torch: {t_fl / t_t:.2f}")
        if args.layouts:
            others = [(f"min_block 2^{b.bit_length() - 1}",
                       dataclasses.replace(layout, min_block=b))
                      for b in (1 << 11, 1 << 13, 1 << 15, 1 << 17, 1 << 40)]
            if layout.group > 1:
                others += [(f"per_item {k}", dataclasses.replace(layout, per_item=k))
                           for k in (1, 8, 16) if k != layout.per_item]
            for label, other in others:
                compaction.layout_for = lambda d, other=other: other
                try:
                    good &= bool(np.array_equal(fl.flatnonzero(m).get(), want))
                    timed(f"fuseloop {label}", name, lambda: fl.flatnonzero(m),
                          fl.synchronize, n, blocks=compaction.blocks(n, other)[0])
                finally:
                    compaction.layout_for = layout_for
        return good

    for log2 in sizes:
        for density in (0.5, 0.02):
            ok &= measure(log2, density)
    print(f"results match numpy: {ok}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev.name, "type": dev.type, "rows": rows, "correct": ok}, f,
                      indent=1)
        print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
