"""A distributed array on paper, checked in a simulation (issue 29, docs/distributed.md):
MPI ranks on this machine's CPU, each running fuseloop on its own block of rows, with
mpi4py for the reduction (allreduce) and the halo exchange (sendrecv of boundary
rows).  mpi4py and MPICH come with the test extras (``fuseloop[mpi]``); skipped
where either is missing.

Run as a script (by mpiexec), this file is the rank's program.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

N, M = 11, 5  # rows split unevenly over the ranks


def _grid() -> np.ndarray:
    return np.sqrt(np.arange(N * M, dtype=np.float64).reshape(N, M))


def _rank_program() -> None:
    """Each rank: rows ``lo:hi`` on its device; a global sum and one stencil step."""
    from mpi4py import MPI

    import fuseloop as fl

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        lo, hi = rank * N // size, (rank + 1) * N // size
        x = fl.asarray(_grid()[lo:hi])
        # a reduction: the fused partial on each rank, combined by allreduce
        total = comm.allreduce(float(fl.sum(x * x + 1)), op=MPI.SUM)
        # halo exchange: a row from each neighbour (at the ends the edge row: clamp)
        above, below = np.empty(M), np.empty(M)
        up = rank - 1 if rank > 0 else MPI.PROC_NULL
        down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
        comm.Sendrecv(x[hi - lo - 1].get(), dest=down, recvbuf=above, source=up)
        comm.Sendrecv(x[0].get(), dest=up, recvbuf=below, source=down)
        if rank == 0:
            above = x[0].get()
        if rank == size - 1:
            below = x[hi - lo - 1].get()
        ext = fl.concatenate([fl.asarray(above[None]), x, fl.asarray(below[None])])
        w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float64)
        step = (x + 0.1 * fl.stencil(ext, w)[1:-1]).get()
        steps = comm.gather(step, root=0)
        if rank == 0:
            g = _grid()
            p = np.pad(g, 1, mode="edge")
            lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * g
            np.testing.assert_allclose(np.concatenate(steps), g + 0.1 * lap, rtol=1e-12)
            assert abs(total - float((g * g + 1).sum())) < 1e-9 * total
            print(f"OK {size} ranks, sum {total:.6f}", flush=True)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        comm.Abort(1)  # (the other ranks would wait in a collective for ever)


def test_mpi_ranks_sum_and_halo_exchange():
    pytest.importorskip("mpi4py")
    # (the MPICH wheel's mpiexec is beside the interpreter; the PATH may not name it)
    mpiexec = shutil.which("mpiexec", path=sysconfig.get_path("scripts")) or \
        shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec (pip install 'fuseloop[mpi]' gives one)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    # (1 compile worker per rank: the ranks already share the CPUs)
    env.setdefault("FUSELOOP_COMPILE_WORKERS", "1")
    # (Open MPI refuses to start as root unless told; MPICH ignores these)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    proc = subprocess.run([mpiexec, "-n", "3", sys.executable, os.path.abspath(__file__)],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK 3 ranks" in proc.stdout


if __name__ == "__main__":
    _rank_program()
