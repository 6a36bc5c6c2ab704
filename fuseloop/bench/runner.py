"""Running one workload at one size: check against numpy once, warm up, time the repeats.

Every library (fuseloop, the OpenCL copy reference, each peer) gives one record per case.
A run that raises is recorded with ``status`` ``"skipped"`` (an API that is missing or not
supported yet: AttributeError, TypeError, NotImplementedError, IndexError, fuseloop errors,
or a peer with no form of the workload) or ``"error"`` (anything else), with the reason and
no timing: numbers are only ever measured ones.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.errors import FuseloopError

from .peers import NotExpressible, Peer
from .workloads import Workload, size_label

SKIP_ERRORS = (AttributeError, TypeError, NotImplementedError, IndexError, FuseloopError,
               NotExpressible)
Prepared = tuple[Callable[[], Any], Callable[[Any], Any], Callable[[Any], np.ndarray]]


@dataclass(frozen=True)
class Settings:
    """How each library is timed in a case."""

    repeat: int = 10  # timed runs (fewer once budget_s is spent; see time_runs)
    warmup: int = 2  # untimed runs after the checked first run
    budget_s: float = 10.0  # rough time limit for the timed runs of one library in one case


def short_reason(e: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    text = str(e).strip()
    msg = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {msg}"[:limit]


def time_runs(run: Callable[[], Any], sync: Callable[[Any], Any], settings: Settings,
              first_s: float = 0.0) -> list[float]:
    """Wall times of ``sync(run())``, after ``settings.warmup`` untimed runs.

    ``first_s`` is how long the (checked) first run took. Timing stops once
    ``settings.budget_s`` is spent and 3 runs are done; a run slower than the budget on its
    own is timed once, and then without warm-up runs.
    """
    slow = first_s > settings.budget_s
    for _ in range(0 if slow else settings.warmup):
        sync(run())
    times: list[float] = []
    start = time.perf_counter()
    for _ in range(max(1, settings.repeat)):
        t0 = time.perf_counter()
        sync(run())
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if spent > settings.budget_s and (len(times) >= 3 or times[0] > settings.budget_s):
            break
    return times


def wall_times(fn: Callable[[], Any], sync: Callable[[], Any], repeat: int,
               warmup: int = 2, batch: int = 1) -> list[float]:
    """Wall times in seconds of ``repeat`` runs of ``fn()`` (``batch`` calls) then ``sync()``.

    ``warmup`` untimed ``fn(); sync()`` come first. With ``batch`` > 1 each time is divided
    by ``batch``: the per-call cost when calls are pipelined, one ``sync`` per run.
    """
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / batch)
    return times


def median_time(fn: Callable[[], Any], sync: Callable[[], Any], repeat: int,
                warmup: int = 2, batch: int = 1) -> float:
    """Median of :func:`wall_times` (same arguments), in seconds per call."""
    return statistics.median(wall_times(fn, sync, repeat, warmup, batch))


def copy_bandwidth(nbytes: int, repeat: int, warmup: int = 2) -> float:
    """GB/s of a buffer-to-buffer copy of ``nbytes`` on the current device.

    Counts the read and the write (``2 * nbytes``); the time is :func:`median_time` of
    the backend's copy then the queue's finish, on two fresh buffers.
    """
    from ..backends import backend_for

    dev = fl.get_device()
    backend = backend_for(dev)
    a = backend.allocate(dev, nbytes)
    b = backend.allocate(dev, nbytes)
    queue = dev.queue
    t = median_time(lambda: backend.copy(dev, b, a, nbytes),
                    lambda: backend.finish_queue(queue), repeat, warmup)
    return 2 * nbytes / t / 1e9


def check(got: Any, want: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    """Compare with the float64 reference: ``|got - want| <= atol + rtol * |want|``."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return {"correct": False, "max_abs_err": None, "max_rel_err": None,
                "detail": f"shape {got.shape}, expected {want.shape}"}
    err = np.abs(got - want)
    bad = ~(err <= atol + rtol * np.abs(want))  # NaN counts as bad
    max_err = float(np.max(err)) if err.size else 0.0  # NaN if any result is NaN
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    out: dict[str, Any] = {
        "correct": not bool(bad.any()),
        "max_abs_err": max_err,
        "max_rel_err": max_err / scale if scale > 0 else max_err,  # relative to max |want|
        "detail": "",
    }
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        out["detail"] = (f"{int(bad.sum())} of {bad.size} elements off; at {tuple(map(int, i))}:"
                         f" {got[i]!r} vs {want[i]!r}")
    return out


def measure(wl: Workload, size: int, library: str, prepare: Callable[[], Prepared],
            want: np.ndarray, work: float, settings: Settings) -> dict[str, Any]:
    """One record: prepare, run once and check, then time (or the reason it could not run).

    ``throughput`` is ``work / median`` in GB/s or GFLOP/s (``wl.unit``).
    """
    rec: dict[str, Any] = {"workload": wl.name, "group": wl.group, "size": size,
                           "size_label": size_label(wl, size), "shape": None,
                           "unit": wl.unit, "work": work, "library": library,
                           "status": "ok", "reason": "", "correct": None, "times_s": [],
                           "median_s": None, "throughput": None}
    try:
        run, sync, fetch = prepare()
        t0 = time.perf_counter()
        result = run()
        sync(result)
        first_s = time.perf_counter() - t0  # includes compilation
        rec["first_run_s"] = first_s
        rec.update(check(fetch(result), want, wl.rtol, wl.atol))
        del result
        times = time_runs(run, sync, settings, first_s)
    except SKIP_ERRORS as e:
        rec.update(status="skipped", reason=short_reason(e))
        return rec
    except Exception as e:
        rec.update(status="error", reason=short_reason(e))
        return rec
    rec["times_s"] = times
    rec["median_s"] = statistics.median(times)
    rec["throughput"] = work / rec["median_s"] / 1e9
    return rec


def joined(result: Any, to_numpy: Callable[[Any], Any] = np.asarray) -> np.ndarray:
    """One array for checking: several results (a tuple) as their flattened concatenation."""
    if isinstance(result, (tuple, list)):
        return np.concatenate([np.ravel(np.asarray(to_numpy(r), dtype=np.float64))
                               for r in result])
    return np.asarray(to_numpy(result))


def _fuseloop(wl: Workload, inputs: dict[str, np.ndarray]) -> Prepared:
    arrays = [fl.asarray(inputs[k]) for k in wl.inputs]
    fl.synchronize()
    run, fetch = wl.fuseloop(*arrays)
    return run, lambda _r: fl.synchronize(), lambda _r: joined(fetch())


def _opencl_copy(inputs: dict[str, np.ndarray]) -> Prepared:
    from ..backends import backend_for

    x = fl.asarray(inputs["x"])
    out = fl.empty_like(x)
    dev = fl.get_device()
    backend = backend_for(dev)
    queue = dev.queue
    src, dst, nbytes = x.data, out.data, inputs["x"].nbytes
    fl.synchronize()

    def run() -> None:
        backend.copy(dev, dst, src, nbytes)

    return run, lambda _r: backend.finish_queue(queue), lambda _r: out.get()


def _peer(peer: Peer, wl: Workload, inputs: dict[str, np.ndarray]) -> Prepared:
    run = peer.prepare(wl, inputs)
    return run, peer.sync, lambda r: joined(r, peer.to_numpy)


def run_case(wl: Workload, size: int, peers: list[Peer], settings: Settings,
             seed: int = 0, on_library: Callable[[str], Any] | None = None
             ) -> list[dict[str, Any]]:
    """All records of one workload at one size: OpenCL copy (copy only), fuseloop, peers."""
    inputs = wl.make_inputs(size, np.random.default_rng(seed))
    want = joined(wl.reference(*(inputs[k] for k in wl.inputs)))
    if wl.work is not None:
        work = float(wl.work(inputs))
    else:  # every input read once, every result element written once
        work = float(sum(a.nbytes for a in inputs.values()) + want.size * wl.out_itemsize)
    shape = list(inputs[wl.inputs[0]].shape)
    jobs: list[tuple[str, Callable[[], Prepared], Peer | None]] = []
    if wl.kind == "copy":
        jobs.append(("opencl enqueue_copy", lambda: _opencl_copy(inputs), None))
    jobs.append(("fuseloop", lambda: _fuseloop(wl, inputs), None))
    for p in peers:
        jobs.append((p.name, lambda p=p: _peer(p, wl, inputs), p))  # type: ignore[misc]

    records = []
    for library, prepare, peer in jobs:
        if on_library is not None:
            on_library(library)

        rec = measure(wl, size, library, prepare, want, work, settings)
        rec["shape"] = shape
        if wl.make is not None and wl.kind != "matmul":  # the size alone hides the shape
            rec["size_label"] += f" ({'x'.join(map(str, shape))})"
        records.append(rec)
        if peer is not None:
            peer.release()
    return records
