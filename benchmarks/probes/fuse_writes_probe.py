"""``fl.fuse`` of functions that make an array and write into it, beside the same
function untraced and its peers: per form the median time of one call with a wait
(``fl.synchronize()``, ``torch.cuda.synchronize()``: the result stays on the device; us),
kernels launched and fills enqueued per call (of ``fl.fuse``'s), and whether the fused
function was traced (``traced``) or runs as Python on each call (``eager``: a tree
without traced writes).

Forms (float32, int64 device indices): ``scatter-add`` (the broad suite's: ``out =
zeros(n // 16); add.at(out, idx, v)``), ``histogram`` (``add.at`` of weights into 256
bins of ``x`` in [0, 1)), ``masked`` (``out = zeros_like(x); out[x > 0.5] = 3.0``),
``overwrite`` (``out = zeros_like(x); out[:] = x * 2``).
Peers: numpy on a CPU device; torch eager and ``torch.compile`` (``index_add_``,
masked assignment) where torch has the device (CUDA).

    PYTHONPATH=<tree> python benchmarks/probes/fuse_writes_probe.py [--log2 24]
        [--forms scatter-add,histogram,masked,overwrite] [--repeat 30] [--no-compile]
        [--clock thread] [--as-gpu]

``--as-gpu``: the CPU device presented as a GPU (the hand-written scatter kernels, a
GPU's rules), to count what a GPU's host does on this machine.
``--clock thread``: the calling thread's CPU time instead of wall time (the host's cost of
a call, robust on a busy machine; the device's work and waits are left out).

Run once per tree (``PYTHONPATH=../base`` is the session start's) to compare.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl

BINS = 256


def fl_forms() -> dict[str, Callable[..., Any]]:
    def scatter_add(v: Any, idx: Any) -> Any:
        out = fl.zeros(v.shape[0] // 16, dtype=v.dtype)
        fl.add.at(out, idx, v)
        return out

    def histogram(x: Any, w: Any) -> Any:
        k = fl.minimum((x * BINS).astype(np.int64), BINS - 1)
        h = fl.zeros(BINS, dtype=w.dtype)
        fl.add.at(h, k, w)
        return h

    def masked(x: Any) -> Any:
        out = fl.zeros_like(x)
        out[x > 0.5] = 3.0
        return out

    def overwrite(x: Any) -> Any:
        out = fl.zeros_like(x)
        out[:] = x * 2
        return out

    return {"scatter-add": scatter_add, "histogram": histogram, "masked": masked,
            "overwrite": overwrite}


def torch_forms(torch: Any) -> dict[str, Callable[..., Any]]:
    def scatter_add(v: Any, idx: Any) -> Any:
        return torch.zeros(v.shape[0] // 16, dtype=v.dtype, device=v.device).index_add_(
            0, idx, v)

    def histogram(x: Any, w: Any) -> Any:
        k = torch.clamp((x * BINS).to(torch.int64), max=BINS - 1)
        return torch.zeros(BINS, dtype=w.dtype, device=w.device).index_add_(0, k, w)

    def masked(x: Any) -> Any:
        out = torch.zeros_like(x)
        out[x > 0.5] = 3.0
        return out

    def overwrite(x: Any) -> Any:
        out = torch.zeros_like(x)
        out[:] = x * 2
        return out

    return {"scatter-add": scatter_add, "histogram": histogram, "masked": masked,
            "overwrite": overwrite}


def inputs(form: str, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.random(n, dtype=np.float32)
    if form == "scatter-add":
        return [x, rng.integers(0, n // 16, n)]
    if form == "histogram":
        return [x, rng.random(n, dtype=np.float32)]
    return [x]


def reference(form: str, a: list[np.ndarray]) -> np.ndarray:
    if form == "scatter-add":
        out = np.zeros(a[0].shape[0] // 16, np.float64)
        np.add.at(out, a[1], a[0])
        return out
    if form == "histogram":
        out = np.zeros(BINS, np.float64)
        np.add.at(out, np.minimum((a[0] * BINS).astype(np.int64), BINS - 1), a[1])
        return out
    out = np.zeros_like(a[0])
    if form == "overwrite":
        out[:] = a[0] * 2
        return out
    out[a[0] > 0.5] = 3.0
    return out


CLOCK = [time.perf_counter]


def median_us(runs: list[Callable[[], Any]], sync: Callable[[Any], Any],
              repeat: int) -> list[float]:
    """Per function of ``runs`` the median time of a call and its wait (us), the
    functions called in turn (interleaved: a busy machine slows them alike)."""
    for run in runs:
        for _ in range(3):
            sync(run())
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeat):
        for run, acc in zip(runs, times):
            t0 = CLOCK[0]()
            sync(run())
            acc.append(CLOCK[0]() - t0)
    return [statistics.median(t) * 1e6 for t in times]


def commands(call: Callable[[], Any]) -> tuple[int, int]:
    """(kernels launched, fills enqueued) by ``call`` on the default device."""
    from fuseloop.backends import backend_for

    backend = backend_for(fl.get_device())
    fill, count = backend.fill, [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return fill(*args, **kwargs)

    backend.fill = counted  # type: ignore[method-assign]
    try:
        fl.reset_stats()
        call()
        return fl.stats()["kernels_launched"], count[0]
    finally:
        del backend.fill  # (the class's again)


def peers_of(form: str, host: list[np.ndarray], torch: Any, compiled: bool
             ) -> list[tuple[str, Callable[[], Any], Callable[[Any], Any]]]:
    """(name, call, wait) of the peers: torch eager and torch.compile on CUDA, else numpy."""
    if torch is None:
        return [("numpy(f64)", lambda: reference(form, host), lambda r: r)]
    tf = torch_forms(torch)[form]
    ta = [torch.as_tensor(h, device="cuda") for h in host]

    def wait(r: Any) -> None:
        torch.cuda.synchronize()
    peers = [("torch", lambda: tf(*ta), wait)]
    if compiled:
        tc = torch.compile(tf)
        peers.append(("torch.compile", lambda: tc(*ta), wait))
    return peers


def measure(form: str, n: int, repeat: int, torch: Any, compiled: bool) -> None:
    """One form's rows (one per peer)."""
    host = inputs(form, n)
    want = reference(form, host)
    arrays = [fl.asarray(h) for h in host]
    fn = fl_forms()[form]
    fused = fl.fuse(fn)
    ok = True
    for f in (fused, fn):
        got = np.asarray(f(*arrays).get(), np.float64)
        ok &= bool(np.allclose(got, want, rtol=1e-3, atol=1e-2))
    # (the wait is fl.synchronize(), as torch's: no copy of the result to the host)
    t_fused, t_plain = median_us([lambda: fused(*arrays), lambda: fn(*arrays)],
                                 lambda r: fl.synchronize(), repeat)
    kernels, fills = commands(lambda: fused(*arrays).get())
    how = "eager" if fused.eager_signatures else "traced"
    head = f"{form:12s} {t_fused:10.1f} {t_plain:10.1f} {kernels:8d} {fills:6d} {how:>7s}"
    for name, run, sync in peers_of(form, host, torch, compiled):
        got = run()
        if torch is not None:
            got = got.cpu().numpy()
        pok = bool(np.allclose(np.asarray(got, np.float64), want, rtol=1e-3, atol=1e-2))
        t_peer = median_us([run], sync, repeat)[0]
        print(f"{head} {name:>14s} {t_peer:10.1f}  {ok and pok}")
        head = " " * len(head)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=24)
    ap.add_argument("--forms", default="scatter-add,histogram,masked,overwrite")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall")
    ap.add_argument("--as-gpu", action="store_true",
                    help="present the CPU device as a GPU (its scatter kernels, its rules)")
    args = ap.parse_args()
    if args.clock == "thread":
        CLOCK[0] = time.thread_time
    dev = fl.get_device()
    if args.as_gpu:  # (a GPU's paths on this CPU: the hand-written scatter kernels)
        import dataclasses

        from fuseloop.ops import scatter_kernel

        scatter_kernel.ON_CPU = True
        dev = dataclasses.replace(dev, type="gpu", max_work_group_size=256)
    torch = None
    if dev.type != "cpu" and not args.as_gpu:
        try:
            import torch  # type: ignore[no-redef]
        except ImportError:
            pass
    print(f"device: {dev.name} ({dev.type}); 2^{args.log2} float32; {args.clock} clock; fuseloop "
          f"{fl.__file__.rsplit('/fuseloop/', 1)[0]}")
    print(f"{'form':12s} {'fl.fuse':>10s} {'untraced':>10s} {'kernels':>8s} {'fills':>6s} "
          f"{'how':>7s} "
          f"{'peer':>14s} {'peer us':>10s}  ok")
    with fl.device(dev):
        for form in args.forms.split(","):
            measure(form, 1 << args.log2, args.repeat, torch, not args.no_compile)


if __name__ == "__main__":
    main()
