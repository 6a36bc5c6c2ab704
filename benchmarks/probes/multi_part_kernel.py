"""A split ``fl.sum(x*y)``'s part kernel against one GPU's (issue 29): device time per call
of ``fl.sum(x*y).eval()`` issued back to back (the host's issue hidden behind the kernels;
no read back), float32, at one GPU's ``2**log2n`` and a part's ``2**log2n / parts``, for
the first stage's piece counts in ``--pieces`` (``splits.piece_count`` replaced, the
in-memory caches cleared between counts; ``0``: the rule's own count).

Per size and count: ms per call on GPU 0, the fraction of the one-GPU time per element
(``scale``: the part's time over ``1/parts`` of one GPU's at the rule's count; 1.00: a
part runs at one GPU's speed), GB/s, ``get ms`` (one ``fl.sum(x*y).get()`` after a wait,
the devices waited for after it: what ``multi_scaling_ab``'s ``part 0 ms`` times; its
excess over ``ms`` is the call's fixed cost: host work, read back, waits), ``dev ms``
(CUDA: between events around one call's launches, the kernel's time where the host is
slower than it), kernels per call and the value's relative difference from the rule's
count's; the pieces are those ``splits.chunking`` makes (the largest count down to half
that divides the length). Then, at the rule's counts, a part alone on each GPU (a split
call waits for its slowest) and every part on its own GPU at once (``together``: each
GPU's ``--repeat`` calls issued round-robin, the time until all are done, per call), which
says whether the GPUs slow each other down; and the peer (``torch.dot``, else CuPy's
``(x*y).sum()``) at both sizes, alone and together.
Usage (on a host of several GPUs)::

    python benchmarks/probes/multi_part_kernel.py [--backend cuda] [--log2n 30] [--parts 4]
        [--pieces 0,1024,4096,8192,16384] [--repeat 20]
    # the machinery on a CPU (PoCL devices presented as GPUs; the times say nothing):
    POCL_DEVICES="pthread pthread" python benchmarks/probes/multi_part_kernel.py \\
        --backend opencl --type cpu --log2n 20 --parts 2 --pieces 0,64 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop import caches, host_path, splits
from fuseloop.runtime.devices import _runtime
from fuseloop.runtime.transfer import finish


def _fixed(count: int) -> Any:
    """A ``splits.piece_count`` giving ``count`` pieces to every split."""
    def pieces(length: int, device: Any) -> int:
        return count
    return pieces


def _sync(devices: list[Any]) -> None:
    for d in devices:
        rt = _runtime(d)
        rt.flush()
        rt.submit(rt.queue)
    for d in devices:
        finish(d)


def _per_call(pairs: list[tuple[Any, Any]], repeat: int, rounds: int = 3) -> float:
    """Seconds per call of ``fl.sum(x*y).eval()`` over each (x, y) of ``pairs`` (each on
    its own device), the calls issued round-robin: the median over ``rounds``."""
    devices = [x.device for x, _ in pairs]
    out = []
    for _ in range(rounds):
        _sync(devices)
        t0 = time.perf_counter()
        for _ in range(repeat):
            for x, y in pairs:
                fl.sum(x * y).eval()
        _sync(devices)
        out.append((time.perf_counter() - t0) / repeat)
    return statistics.median(out)


def _device_ms(x: Any, y: Any, repeat: int) -> float:
    """CUDA only: the median device ms of one ``fl.sum(x*y).eval()``'s launches, between
    events recorded on its stream around them (kernel time even where the host issues
    calls slower than they run: small sizes); NaN elsewhere."""
    if x.device.backend != "cuda":
        return float("nan")
    import cupy

    rt = _runtime(x.device)
    pairs = []
    with cupy.cuda.Device(x.device.cl_device.ordinal):
        for _ in range(repeat):
            before, after = cupy.cuda.Event(), cupy.cuda.Event()
            rt.flush()
            before.record(rt.queue)
            fl.sum(x * y).eval()
            rt.flush()
            after.record(rt.queue)
            pairs.append((before, after))
        pairs[-1][1].synchronize()
        return statistics.median(cupy.cuda.get_elapsed_time(a, b) for a, b in pairs)


def _effective(length: int, count: int) -> int:
    """The pieces ``splits.chunking`` makes of ``count``: the largest count down to half
    of it that divides ``length`` (else ``count``)."""
    return next((p for p in range(count, max(2, count // 2) - 1, -1) if length % p == 0),
                count)


def _get_call(x: Any, y: Any, repeat: int) -> float:
    """Median seconds of one ``fl.sum(x*y).get()`` between waits for the device."""
    out = []
    for _ in range(repeat):
        _sync([x.device])
        t0 = time.perf_counter()
        fl.sum(x * y).get()
        _sync([x.device])
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _peer(devices: list[Any], n: int, parts: int, repeat: int) -> str:
    """The peer's ms per call at ``n`` on the first device and at ``n // parts`` on each,
    alone and together."""
    try:
        import torch

        def make(k: int, m: int) -> tuple[Any, Any]:
            return (torch.rand(m, device=f"cuda:{k}"), torch.rand(m, device=f"cuda:{k}"))

        def run(a: Any, b: Any) -> None:
            torch.dot(a, b)

        def sync(ks: list[int]) -> None:
            for k in ks:
                torch.cuda.synchronize(k)
        name = "torch.dot"
    except ImportError:
        try:
            import cupy
        except ImportError:
            return "peer: neither torch nor cupy"

        def make(k: int, m: int) -> tuple[Any, Any]:
            with cupy.cuda.Device(k):
                return (cupy.random.rand(m, dtype=np.float32),
                        cupy.random.rand(m, dtype=np.float32))

        def run(a: Any, b: Any) -> None:
            with a.device:
                (a * b).sum()

        def sync(ks: list[int]) -> None:
            for k in ks:
                cupy.cuda.Device(k).synchronize()
        name = "cupy (x*y).sum()"

    def timed(pairs: list[tuple[Any, Any]], ks: list[int]) -> float:
        for a, b in pairs:
            run(a, b)
        sync(ks)
        t0 = time.perf_counter()
        for _ in range(repeat):
            for a, b in pairs:
                run(a, b)
        sync(ks)
        return (time.perf_counter() - t0) / repeat * 1e3

    ks = list(range(min(parts, len(devices))))
    whole = timed([make(0, n)], [0])
    alone = timed([make(0, n // parts)], [0])
    together = timed([make(k, n // parts) for k in ks], ks)
    return (f"peer {name}: 2^{n.bit_length() - 1} {whole:.3f} ms; a part alone "
            f"{alone:.3f} ms (scale {alone / (whole / parts):.2f}); {len(ks)} parts "
            f"together {together:.3f} ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="cuda")
    p.add_argument("--type", default="gpu")
    p.add_argument("--log2n", type=int, default=30)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--pieces", default="0,1024,4096,8192,16384")
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args(argv)
    host_path.HOST_MAX_WORK = 0  # (a CPU run takes the device path, as a GPU's does)
    devices = [d for d in fl.devices(type=args.type) if d.backend == args.backend]
    if args.type == "cpu":  # (presented as GPUs: the GPU rule and recipes)
        import dataclasses

        devices = [dataclasses.replace(d, type="gpu") for d in devices]
    n, parts = 1 << args.log2n, args.parts
    rule = splits.piece_count
    print(f"{devices[0]}: {devices[0].compute_units} compute units; rule's pieces: "
          f"2^{args.log2n} {rule(n, devices[0])}, a part {rule(n // parts, devices[0])}")
    inputs = {}
    for m in (n, n // parts):
        with fl.device(devices[0]):
            inputs[m] = (fl.random.uniform(m, dtype=np.float32, key=1).eval(),
                         fl.random.uniform(m, dtype=np.float32, key=2).eval())
    counts = [int(c) for c in args.pieces.split(",")]
    base: dict[int, tuple[float, float]] = {}
    print(f"{'size':>6s} {'pieces':>6s} {'ms':>8s} {'scale':>6s} {'GB/s':>7s} {'get ms':>8s} "
          f"{'dev ms':>8s} kernels  rel.diff")
    try:
        for c in counts:
            splits.piece_count = rule if c == 0 else _fixed(c)
            caches.clear()
            for m, (x, y) in inputs.items():
                value = float(fl.sum(x * y))  # (built; its plan recorded)
                fl.sum(x * y).eval()
                fl.reset_stats()
                fl.sum(x * y).eval()
                kernels = fl.stats()["kernels_launched"]
                t = _per_call([(x, y)], args.repeat)
                got = _get_call(x, y, args.repeat)
                try:
                    dev = _device_ms(x, y, args.repeat)
                except Exception as exc:  # (a probe: the other columns still count)
                    print(f"device timing failed: {exc!r}")
                    dev = float("nan")
                if c == 0:
                    base[m] = (t, value)
                ref_v = base.get(m, (t, value))[1]
                one = base.get(n, (t, value))[0] * m / n  # (one GPU's time per element)
                print(f"2^{m.bit_length() - 1:<4d} {_effective(m, c or rule(m, devices[0])):6d} "
                      f"{t * 1e3:8.3f} {t / one:6.2f} {8 * m / t / 1e9:7.1f} {got * 1e3:8.3f} "
                      f"{dev:8.3f} {kernels:7d} "
                      f" {abs(value - ref_v) / abs(ref_v):.1e}", flush=True)
    finally:
        splits.piece_count = rule
        caches.clear()
    used = devices[:parts]
    if len(used) == parts:
        pairs = []
        for d in used:
            with fl.device(d):
                pairs.append((fl.random.uniform(n // parts, dtype=np.float32, key=1).eval(),
                              fl.random.uniform(n // parts, dtype=np.float32, key=2).eval()))
            float(fl.sum(pairs[-1][0] * pairs[-1][1]))
        each = " ".join(f"{_per_call([pair], args.repeat) * 1e3:.3f}" for pair in pairs)
        t = _per_call(pairs, args.repeat)
        print(f"a part alone on each GPU: {each} ms; {parts} parts together, each on its "
              f"GPU: {t * 1e3:.3f} ms per call (one GPU's 2^{args.log2n} / {parts} "
              f"{base[n][0] / parts * 1e3:.3f} ms)")
    if args.type == "gpu":
        print(_peer(devices, n, parts, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
