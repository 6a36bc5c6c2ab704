"""Index remapping without copies: concatenate, tile, multi-array gathers, boolean masks.

Each fuseloop case writes into a preallocated output (``out[...] = expr``), so the time is
one kernel (two for the mask: the scan, then the gather) and the bytes counted are what the
expression must move: every input element read once, every output element written once
(a gather counts the indices it reads and the elements it loads).  The reference is the
fuseloop copy kernel of the same number of bytes, measured in the same run; on a CPU device
numpy runs the same expressions, and torch (eager and ``torch.compile``) does when importable
with CUDA.  A last section times small (1000-element) gathers pipelined, per call: a host
index array, a device index array and a mask.  For
concatenate, the eager form that fuseloop used before (each piece copied into a new array,
then the expression) is measured too.  Results are checked against numpy in float64.

Usage::

    python benchmarks/bench_shapes.py [--device SPEC] [--size LOG2] [--repeat N] [--out F]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import fuseloop as fl
from fuseloop.bench.runner import median_time, short_reason


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--size", type=int, default=None, help="log2 of the elements per piece")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.device is not None:
        fl.set_device(args.device)
    dev = fl.get_device()
    n = 1 << (args.size if args.size is not None else (22 if dev.type == "cpu" else 26))
    rng = np.random.default_rng(0)
    ah = rng.random(n, dtype=np.float32)
    bh = rng.random(n, dtype=np.float32)
    side = int(np.sqrt(n))
    mh = rng.random((side, side), dtype=np.float32)
    ih = rng.integers(-side, side, n).astype(np.int32)
    jh = rng.integers(-side, side, n).astype(np.int32)
    a, b, m, i, j = (fl.asarray(h) for h in (ah, bh, mh, ih, jh))
    rows: list[dict[str, Any]] = []

    def timed(name: str, fn: Callable[[], Any], sync: Callable[[], Any], nbytes: int | None,
              library: str) -> float:
        t = median_time(fn, sync, args.repeat)
        row = {"case": name, "library": library, "ms": t * 1e3,
               "gbs": None if nbytes is None else nbytes / t / 1e9}
        rows.append(row)
        gbs = "" if nbytes is None else f"{row['gbs']:8.1f} GB/s"
        print(f"{library:14s} {name:44s} {t * 1e3:9.3f} ms {gbs}", flush=True)
        return t

    # the copy reference: fuseloop's copy kernel over 2n elements (8n bytes each way)
    big = fl.asarray(np.concatenate([ah, bh]))
    out2 = fl.empty(2 * n, np.float32)

    def copy() -> None:
        out2[...] = big

    t_copy = timed("copy 2n (reference)", copy, fl.synchronize, 16 * n, "fuseloop")
    copy_gbs = 16 * n / t_copy / 1e9

    cases: list[tuple[str, Callable[[], Any], int, Callable[[], np.ndarray]]] = []

    def concat() -> None:
        out2[...] = fl.concatenate([a, b]) * 2

    def concat_eager() -> None:
        joined = fl.empty(2 * n, np.float32)
        joined[:n] = a
        joined[n:] = b
        out2[...] = joined * 2

    out_tile = fl.empty(2 * n, np.float32)

    def tile() -> None:
        out_tile[...] = fl.tile(a, 2) * 2

    out_g = fl.empty(n, np.float32)

    def gather() -> None:
        out_g[...] = m[i, j] * 2

    cases = [
        ("concatenate([a, b]) * 2", concat, 16 * n,
         lambda: np.concatenate([ah, bh]).astype(np.float64) * 2),
        ("eager: copy pieces, then * 2 (3 kernels)", concat_eager, 16 * n,
         lambda: np.concatenate([ah, bh]).astype(np.float64) * 2),
        ("tile(a, 2) * 2", tile, 12 * n, lambda: np.tile(ah.astype(np.float64), 2) * 2),
        ("m[i, j] * 2 (int32 indices)", gather, 16 * n,
         lambda: mh.astype(np.float64)[ih, jh] * 2),
    ]
    results: dict[str, bool] = {}
    for name, fn, nbytes, ref in cases:
        try:
            t = timed(name, fn, fl.synchronize, nbytes, "fuseloop")
            got = {"concatenate([a, b]) * 2": out2, "eager: copy pieces, then * 2 (3 kernels)":
                   out2, "tile(a, 2) * 2": out_tile}.get(name, out_g).get()
            ok = bool(np.allclose(got, ref(), rtol=1e-6, atol=0))
            results[name] = ok
            rows[-1].update(pct_copy=100 * nbytes / t / 1e9 / copy_gbs, correct=ok)
            print(f"{'':14s} {'':44s} {rows[-1]['pct_copy']:6.1f}% of copy, matches numpy: {ok}")
        except Exception as exc:  # report and go on: one failing case must not hide the rest
            print(f"fuseloop {name}: {short_reason(exc)}")

    # boolean mask: the positions (one scan, the count read back), then a fused gather
    def masked_sum() -> Any:
        return fl.sum(a[a > 0.5])

    t_mask = timed("sum(a[a > 0.5]) (scan + read-back + gather)", masked_sum, fl.synchronize,
                   None, "fuseloop")
    ok = bool(np.isclose(float(masked_sum()), ah[ah > 0.5].sum(dtype=np.float64), rtol=1e-4))
    rows[-1]["correct"] = ok
    print(f"{'':14s} matches numpy: {ok}")

    if dev.type == "cpu":  # the host peer: numpy, into preallocated outputs where it can
        hout2 = np.empty(2 * n, np.float32)
        hout = np.empty(n, np.float32)
        host = {
            "concatenate([a, b]) * 2": (
                lambda: np.multiply(np.concatenate([ah, bh]), 2, out=hout2), 16 * n),
            "tile(a, 2) * 2": (lambda: np.multiply(np.tile(ah, 2), 2, out=hout2), 12 * n),
            "m[i, j] * 2 (int32 indices)": (lambda: np.multiply(mh[ih, jh], 2, out=hout),
                                            16 * n),
        }
        for name, (fn, nbytes) in host.items():
            t = timed(name, fn, lambda: None, nbytes, "numpy")
            rows[-1]["pct_copy"] = 100 * nbytes / t / 1e9 / copy_gbs
            print(f"{'':14s} {'':44s} {rows[-1]['pct_copy']:6.1f}% of copy")
        t_np = timed("sum(a[a > 0.5]) (scan + read-back + gather)",
                     lambda: ah[ah > 0.5].sum(), lambda: None, None, "numpy")
        print(f"fuseloop/numpy time for the masked sum: {t_mask / t_np:.2f}")

    torch = _torch()
    if torch is not None:
        tdev = torch.device("cuda")
        ta, tb, tm = (torch.from_numpy(h).to(tdev) for h in (ah, bh, mh))
        ti, tj = (torch.from_numpy(h.astype(np.int64)).to(tdev) for h in (ih, jh))
        sync = torch.cuda.synchronize
        tout2 = torch.empty(2 * n, device=tdev)
        tout = torch.empty(n, device=tdev)
        peers = {
            "concatenate([a, b]) * 2": (lambda: torch.mul(torch.cat([ta, tb]), 2, out=tout2),
                                        16 * n),
            "tile(a, 2) * 2": (lambda: torch.mul(ta.repeat(2), 2, out=tout2), 12 * n),
            "m[i, j] * 2 (int32 indices)": (lambda: torch.mul(tm[ti, tj], 2, out=tout), 16 * n),
        }
        for name, (fn, nbytes) in peers.items():
            t = timed(name, fn, sync, nbytes, "torch")
            rows[-1]["pct_copy"] = 100 * nbytes / t / 1e9 / copy_gbs
            print(f"{'':14s} {'':44s} {rows[-1]['pct_copy']:6.1f}% of copy")
        compiled = {
            "concatenate([a, b]) * 2": torch.compile(lambda x, y: torch.cat([x, y]) * 2),
            "tile(a, 2) * 2": torch.compile(lambda x: x.repeat(2) * 2),
            "m[i, j] * 2 (int32 indices)": torch.compile(lambda mm, ii, jj: mm[ii, jj] * 2),
        }
        argsets = {"concatenate([a, b]) * 2": (ta, tb), "tile(a, 2) * 2": (ta,),
                   "m[i, j] * 2 (int32 indices)": (tm, ti, tj)}
        for name, fn in compiled.items():
            try:
                t = timed(name, lambda fn=fn, name=name: fn(*argsets[name]), sync,
                          peers[name][1], "torch.compile")
                rows[-1]["pct_copy"] = 100 * peers[name][1] / t / 1e9 / copy_gbs
                print(f"{'':14s} {'':44s} {rows[-1]['pct_copy']:6.1f}% of copy")
            except Exception as exc:
                print(f"torch.compile {name}: {short_reason(exc)}")
        tmask = lambda: ta[ta > 0.5].sum()  # noqa: E731
        timed("sum(a[a > 0.5]) (scan + read-back + gather)", tmask, sync, None, "torch")
        print(f"fuseloop/torch time for the masked sum: "
              f"{t_mask / rows[-1]['ms'] * 1e3:.2f}")

    # small gathers, pipelined: what a gather costs the host when nothing waits for the
    # device.  A host index array is checked on the host and its gather reads nothing back;
    # a device index is checked by the gather, which reads its error flag back (waits).
    small = 1000
    xs_h = rng.random(small, dtype=np.float32)
    idx_h = rng.permutation(small).astype(np.int32)
    xs, idx_d = fl.asarray(xs_h), fl.asarray(idx_h)
    calls = 200
    small_cases = [
        ("small: (x[idx host] * 2).eval()", lambda: (xs[idx_h] * 2).eval()),
        ("small: (x[idx device] * 2).eval()", lambda: (xs[idx_d] * 2).eval()),
        ("small: (x[x > 0.5] * 2).eval()", lambda: (xs[xs > 0.5] * 2).eval()),
    ]
    for name, fn in small_cases:
        t = median_time(fn, fl.synchronize, max(5, args.repeat // 2), batch=calls)
        rows.append({"case": name, "library": "fuseloop", "us_per_call": t * 1e6,
                     "calls_per_sync": calls})
        print(f"{'fuseloop':14s} {name:44s} {t * 1e6:9.1f} us/call ({calls} per sync)")
    np.testing.assert_array_equal((xs[idx_h] * 2).get(), xs_h[idx_h] * 2)
    np.testing.assert_array_equal((xs[xs > 0.5] * 2).get(), xs_h[xs_h > 0.5] * 2)
    if dev.type == "cpu":
        for name, fn in [("small: (x[idx host] * 2).eval()", lambda: xs_h[idx_h] * 2),
                         ("small: (x[x > 0.5] * 2).eval()", lambda: xs_h[xs_h > 0.5] * 2)]:
            t = median_time(fn, lambda: None, max(5, args.repeat // 2), batch=calls)
            rows.append({"case": name, "library": "numpy", "us_per_call": t * 1e6})
            print(f"{'numpy':14s} {name:44s} {t * 1e6:9.1f} us/call")
    elif torch is not None:
        txs = torch.from_numpy(xs_h).to(tdev)
        tidx = torch.from_numpy(idx_h.astype(np.int64)).to(tdev)
        for name, fn in [("small: (x[idx device] * 2).eval()", lambda: txs[tidx] * 2),
                         ("small: (x[x > 0.5] * 2).eval()", lambda: txs[txs > 0.5] * 2)]:
            t = median_time(fn, sync, max(5, args.repeat // 2), batch=calls)
            rows.append({"case": name, "library": "torch", "us_per_call": t * 1e6})
            print(f"{'torch':14s} {name:44s} {t * 1e6:9.1f} us/call")

    summary = {"device": dev.name, "type": dev.type, "elements_per_piece": n,
               "copy_gbs": copy_gbs, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"wrote {args.out}")
    return 0 if all(results.values()) and ok else 1


if __name__ == "__main__":
    sys.exit(main())
