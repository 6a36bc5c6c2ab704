"""Which statements of ``lengths_gpu.py``'s loops are walked (``run_plans._key``) in a
repeat, and why their plan was not found by signature (issue 26: on an H200, durbin at
n = 2000 walked one statement per iteration, 2002 a pass, where the CPU walks 7).

After a first pass (kernels, plans), one pass runs with ``run_plans``' look-ups wrapped:
per walk, the pattern's source line that made the statement, the output shape's rank,
what ``run_plans.run`` was given (a signed key or not), what the look-up by signature
(``_signed_replay``) and by the signature with lengths as symbols (``_free_replay``)
answered, and the sizes of the tables they read.  Reported, never asserted.

    python benchmarks/probes/walks_gpu.py [--device nvidia] [--n 2000] [--pattern durbin]
"""

from __future__ import annotations

import argparse
import collections
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lengths_gpu

import fuseloop as fl
from fuseloop import run_plans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--pattern", nargs="+", default=["durbin", "trisolv"],
                    choices=list(lengths_gpu.PATTERNS))
    args = ap.parse_args()
    if args.device:
        fl.set_device(args.device)
    print(f"device: {fl.get_device()}; n={args.n}")
    last: dict[str, Any] = {}
    walks: collections.Counter = collections.Counter()

    def wrap(name: str) -> None:
        original = getattr(run_plans, name)

        def wrapped(*a: Any, **k: Any) -> Any:
            got = original(*a, **k)
            if name == "_key":
                line = next((f.lineno for f in reversed(traceback.extract_stack(limit=40))
                             if f.filename.endswith("lengths_gpu.py")), -1)
                walks[(line, len(a[1]), last.get("signed", "-"), last.get("free", "-"))] += 1
                last.clear()
            else:
                last["signed" if name == "_signed_replay" else "free"] = \
                    "hit" if got is not None else "miss"
            return got
        setattr(run_plans, name, wrapped)

    for name in args.pattern:
        run, count = lengths_gpu.PATTERNS[name](fl, args.n)
        run()
        fl.synchronize()
        walks.clear()
        for fn in ("_key", "_signed_replay", "_free_replay"):
            wrap(fn)
        before = fl.stats()["plans_walked"]
        run()
        fl.synchronize()
        for fn in ("_key", "_signed_replay", "_free_replay"):
            setattr(run_plans, fn, _unwrap(getattr(run_plans, fn)))
        print(f"{name}: {fl.stats()['plans_walked'] - before} walks in {count} statements; "
              f"tables: signed {len(run_plans._signed)}, target sigs "
              f"{len(run_plans._target_sigs)}")
        for (line, rank, signed, free), k in walks.most_common(6):
            print(f"  {k:6d} x lengths_gpu.py:{line} rank {rank}: by signature {signed}, "
                  f"by free lengths {free}")


def _unwrap(fn: Any) -> Any:
    """The function :func:`main`'s wrapper wraps (its closure's ``original``)."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    return cells["original"].cell_contents if "original" in cells else fn


if __name__ == "__main__":
    main()
