"""CPU microseconds of one host-path operation on a CPU device, numpy's beside (issue 26).

Each case is one operation of NPBench's loop kernels run on small views and 0-d values
(floyd_warshall's row statement and its parts, crc16's bit tests, seidel_2d's element
updates, nussinov's ``max``), executed ``--number`` times per timed loop; the minimum
over ``--repeat`` loops of ``time.process_time`` is printed per revision (git revisions,
``WT`` for the working tree, copied and imported under names of their own by
``compare_host_overhead.import_revisions``) with numpy's own operation beside.  The
revisions' loops are interleaved, so all see the same phases of a shared machine.
Reported, never asserted.

    python benchmarks/probes/host_op_costs.py [REV ...] [--number 200] [--repeat 60]
        [--cases 'u8 & 1' ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# name -> (numpy's statement, fuseloop's statement); ``P``/``F`` an int32 200 x 200
# matrix, ``Q``/``G`` a float64 one, ``rn``/``rf`` an int32 row held, ``b``/``bf`` a
# uint8 0-d value (``hb``: one of ``for b in data``, as crc16's), ``x``/``xf`` a float64 one
CASES = {
    "A[i, k]": ("P[3, 5]", "F[3, 5]"),
    "A[i, :]": ("P[3, :]", "F[3, :]"),
    "A[i, k] + A[k, :]": ("P[3, 5] + P[5, :]", "F[3, 5] + F[5, :]"),
    "minimum(row, row)": ("np.minimum(rn, rn)", "fl.minimum(rf, rf)"),
    "A[i, :] = row": ("P[3, :] = rn", "F[3, :] = rf"),
    "floyd_warshall row": ("P[3, :] = np.minimum(P[3, :], P[3, 5] + P[5, :])",
                           "F[3, :] = fl.minimum(F[3, :], F[3, 5] + F[5, :])"),
    "u8 & 1": ("b & 1", "bf & 1"),
    "1 ^ u8": ("1 ^ b", "1 ^ bf"),
    "if u8": ("1 if b else 0", "1 if bf else 0"),
    "u8 >>= 1": ("c = b; c >>= 1", "c = bf; c >>= 1"),
    "f8 * f8": ("x * x", "xf * xf"),
    "iterated u8 & 1": ("b & 1", "hb & 1"),
    "1 ^ iterated u8": ("1 ^ b", "1 ^ hb"),
    "if iterated u8": ("1 if b else 0", "1 if hb else 0"),
    "iterated u8 >>= 1": ("c = b; c >>= 1", "c = hb; c >>= 1"),
    "A[i, j] += A[i, j - 1]": ("Q[3, 5] += Q[3, 4]", "G[3, 5] += G[3, 4]"),
    "A[i, j] /= 9.0": ("Q[3, 5] /= 9.0", "G[3, 5] /= 9.0"),
    "max(A[i, j], A[i, k] + A[k, j])": ("max(P[3, 5], P[3, 4] + P[5, 5])",
                                        "max(F[3, 5], F[3, 4] + F[5, 5])"),
}


def _globals(fl: Any) -> dict[str, Any]:
    n = 200
    p = np.arange(n * n, dtype=np.int32).reshape(n, n) % 97
    q = np.random.default_rng(0).random((n, n))
    g: dict[str, Any] = {"np": np, "fl": fl, "P": p, "Q": q, "F": fl.asarray(p),
                         "G": fl.asarray(q), "rn": p[4].copy(), "b": np.uint8(200),
                         "x": np.float64(0.5)}
    g["rf"] = g["F"][4, :] + 0
    g["bf"] = 0xFF & fl.asarray(np.array([200], np.uint8))[0]
    g["xf"] = fl.asarray(np.array([0.5]))[0] * 1.0
    g["hb"] = 0xFF & next(iter(fl.asarray(np.array([200], np.uint8))))  # (crc16's bytes)
    return g


def _time(stmt: str, g: dict[str, Any], number: int) -> float:
    code = compile(f"for _ in range({number}):\n    {stmt}\n", stmt, "exec")
    start = time.process_time()
    exec(code, g)
    return (time.process_time() - start) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("revs", nargs="*", default=["WT"])
    ap.add_argument("--number", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    args = ap.parse_args()
    from benchmarks.compare_host_overhead import import_revisions

    mods = import_revisions(args.revs, "ops", "cpu")
    spaces = [_globals(fl) for fl in mods]
    print("CPU us per operation, min of", args.repeat, "loops of", args.number)
    print("| operation | numpy | " + " | ".join(args.revs) + " |")
    print("| --- | ---: |" + " ---: |" * len(args.revs))
    for name in args.cases:
        sn, sf = CASES[name]
        for g in spaces:  # (warm: views kept, loops found)
            exec(sf, g)
            exec(sf, g)
        best = [float("inf")] * (len(mods) + 1)
        for _ in range(args.repeat):
            best[0] = min(best[0], _time(sn, spaces[0], args.number))
            for k, g in enumerate(spaces):
                best[k + 1] = min(best[k + 1], _time(sf, g, args.number))
        print(f"| `{name}` | " + " | ".join(f"{t:.2f}" for t in best) + " |", flush=True)


if __name__ == "__main__":
    main()
