"""Instructions per statement of the build layer alone, for exact A/B on a shared machine.

The loops of ``statement_layers.py`` (cholesky, lu, trisolv, durbin) and the 400-node
chain of ``bench_lazy_build.py`` are run with the assignment replaced by a stub (a lazy
target is still computed once), so only the operators, indexing and in-place operators
run.  Each loop runs inside its own C function (``functools.reduce``, ``itertools``'
iterators), which callgrind's ``--toggle-collect`` measures alone; instruction counts do
not depend on the machine's load as CPU clocks do.  Reported, never asserted::

    PYTHONHASHSEED=0 FUSELOOP_HOST_PATH=0 valgrind --tool=callgrind --collect-atstart=no \\
      --toggle-collect=functools_reduce --toggle-collect=starmap_next \\
      --toggle-collect=takewhile_next --toggle-collect=dropwhile_next \\
      --toggle-collect=filterfalse_next --callgrind-out-file=cg.out \\
      /path/to/python3.11 benchmarks/probes/build_instructions.py CHECKOUT [REPS]
    callgrind_annotate --inclusive=yes cg.out | grep -E "reduce|_next"

(run the real interpreter, not a pyenv shim).  Divide each marker's count by REPS and by
the statements per call printed here: cholesky ``functools_reduce``, lu ``starmap_next``,
trisolv ``takewhile_next``, durbin ``dropwhile_next``, chain ``filterfalse_next``.
"""

from __future__ import annotations

import functools
import itertools
import sys
from typing import Any

import numpy as np

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
import fuseloop as fl
from fuseloop import array
from fuseloop.ops import indexing

N = 24


def _stub(target: Any, *args: Any, **kw: Any) -> None:
    if target._storage is None:
        target.eval()


def main() -> None:
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    array.assign = indexing.assign = _stub  # type: ignore[assignment]
    rng = np.random.default_rng(0)
    big = fl.asarray(rng.random((N, N)) + N * np.eye(N))
    b, x = fl.asarray(rng.random(N)), fl.asarray(rng.random(N))

    def cholesky() -> None:
        for i in range(1, N):
            for j in range(i):
                big[i, j] -= big[i, :j] @ big[j, :j]
                big[i, j] /= big[j, j]

    def lu() -> None:
        for i in range(N):
            for j in range(i):
                big[i, j] -= big[i, :j] @ big[:j, j]
                big[i, j] /= big[j, j]
            for j in range(i, N):
                big[i, j] -= big[i, :i] @ big[:i, j]

    def trisolv() -> None:
        for i in range(N):
            x[i] = (b[i] - big[i, :i] @ x[:i]) / big[i, i]

    def durbin() -> None:
        for k in range(1, N):
            alpha = -(b[k] + fl.dot(fl.flip(b[:k]), x[:k])) / 2.0
            x[:k] += alpha * fl.flip(x[:k])
            x[k] = alpha

    def chain() -> None:
        r = big
        for _ in range(200):
            r = r * 0.999 + big

    loops = {"cholesky": (cholesky, (N - 1) * N), "lu": (lu, N * (N - 1) + N * (N + 1) // 2),
             "trisolv": (trisolv, N), "durbin": (durbin, 3 * (N - 1)), "chain": (chain, 400)}
    for f, _ in loops.values():
        f()  # (kernels, plans and templates made before the measured calls)

    todo = [0] * reps  # (each loop REPS times, inside its marker)
    functools.reduce(lambda acc, _: cholesky(), todo, None)
    list(itertools.starmap(lu, [()] * reps))
    list(itertools.takewhile(lambda _: trisolv() or True, todo))
    list(itertools.dropwhile(lambda _: durbin() or True, todo))
    list(itertools.filterfalse(lambda _: chain(), todo))
    print("statements (nodes, for chain) per call:",
          {name: count for name, (_, count) in loops.items()}, "reps:", reps)


if __name__ == "__main__":
    main()
