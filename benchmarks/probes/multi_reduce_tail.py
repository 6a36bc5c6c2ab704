"""What a split full reduction costs after its last part is launched (issue 29):
``float(fl.sum(x*y))`` over the devices of one backend, its partials combined on the
host (``multi.reduce.HOST_COMBINE`` ``auto``: each partial read behind its kernel) or
on the first device (``0``: copies there, one combine kernel, the read), the two routes
interleaved call by call in one process.  Per route: host CPU us per call
(``time.process_time``) and wall us from the last part's submit until the float is in
Python (``fuseloop.multi.trace``'s events), medians over ``--calls``; the results
checked against numpy (float64).  Where the devices do not copy to each other without
the host (OpenCL devices of a context each) both routes are the host's.  Usage::

    POCL_DEVICES="pthread pthread pthread pthread" FUSELOOP_HOST_PATH=0 \\
    FUSELOOP_OPENCL_SHARED_CONTEXT=1 python benchmarks/probes/multi_reduce_tail.py \\
        --type cpu --log2n 16,24
    python benchmarks/probes/multi_reduce_tail.py --backend cuda --log2n 24,30
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.multi import reduce as multi_reduce
from fuseloop.multi import trace


def one_call(x: Any, y: Any) -> tuple[float, float, float]:
    """(the value, host CPU us of the call, wall us from the last part's submit)."""
    fl.synchronize()
    with trace.tracing() as events:
        c0 = time.process_time()
        value = float(fl.sum(x * y))
        t1 = time.perf_counter()
        c1 = time.process_time()
    last = max((t for what, part, _, t in events if what == "enqueued" and part >= 0),
               default=t1)
    return value, (c1 - c0) * 1e6, (t1 - last) * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--type", default="gpu")
    p.add_argument("--backend", default=None)
    p.add_argument("--count", type=int, default=4)
    p.add_argument("--log2n", default="16,24")
    p.add_argument("--calls", type=int, default=30)
    args = p.parse_args(argv)
    devs = [d for d in fl.devices(type=args.type)
            if args.backend is None or d.backend == args.backend][:args.count]
    print("; ".join(str(d) for d in devs))
    ok = True
    for log2n in (int(v) for v in args.log2n.split(",")):
        with fl.device(devs) as dset:
            x = fl.random.uniform(1 << log2n, dtype=np.float32, key=1).eval()
            y = fl.random.uniform(1 << log2n, dtype=np.float32, key=2).eval()
        want = float(np.dot(x.get().astype(np.float64), y.get()))
        got: dict[str, list[tuple[float, float, float]]] = {"auto": [], "0": []}
        saved = multi_reduce.HOST_COMBINE
        try:
            for k in range(args.calls + 3):
                for mode in got:
                    multi_reduce.HOST_COMBINE = mode
                    r = one_call(x, y)
                    if k >= 3:  # (the first calls record plans and keep calls)
                        got[mode].append(r)
        finally:
            multi_reduce.HOST_COMBINE = saved
        print(f"2^{log2n}, {len(devs)} parts, device copies "
              f"{'allowed' if all(dset.copies_to_first) else 'through the host'}:")
        for mode, rows in got.items():
            err = max(abs(v - want) / abs(want) for v, _, _ in rows)
            ok = ok and err < 1e-5
            print(f"  combine {'host  ' if mode == 'auto' else 'device'}: cpu us/call "
                  f"{statistics.median(c for _, c, _ in rows):7.0f}, after the last launch "
                  f"us {statistics.median(t for _, _, t in rows):7.0f} "
                  f"(min {min(t for _, _, t in rows):.0f}), rel err {err:.1e}")
        del x, y
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
