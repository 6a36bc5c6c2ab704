#!/usr/bin/env bash
# Checks of the CUDA work of branch `cuda` (issue 29), for a host with an NVIDIA GPU
# (two for step 5).  Run from the repository root:  bash benchmarks/probes/cuda_h100_checks.sh
# Expected output is given with each step; timings are reported, never asserted.
set -u
export PYTHONPATH=.
export FUSELOOP_CACHE_DIR=${FUSELOOP_CACHE_DIR:-/tmp/flcache-cuda-checks}

echo "== 1-5. tests on cuda:0 (expected: all pass; skips only 'needs two CUDA devices' on one GPU)"
FUSELOOP_DEVICE=cuda:0 python -m pytest -q -rs tests/test_cuda_backend.py tests/test_fuse_graphs.py \
    tests/test_segmented_kernels.py tests/test_multi_exchange.py tests/test_segmented.py \
    tests/test_fuse.py tests/test_complex.py 2>&1 | tail -15

echo "== 1. fl.fuse with CUDA graphs (expected: 'graphs' below 'launches' from 3 launches per"
echo "   call, the gap growing with the launches; CuPy for scale)"
python benchmarks/bench_fuse_graphs.py --device cuda:0

echo "== 2. host cost of a cached 5-op .eval() (expected: the CUDA row at or below the OpenCL"
echo "   row, which was 19.3 vs 18.7 us before; 'CuPy argument objects' well below 'numpy"
echo "   scalars'; MemoryPool.malloc + free is the next largest CUDA-only piece)"
python benchmarks/probes/cuda_launch_cost.py

echo "== 4. scans by key on CUDA (fuseloop's own kernels) against CuPy and torch, same run;"
echo "   the OpenCL GPU (pyopencl's scan) for comparison"
python benchmarks/bench_segmented.py --device cuda:0
python benchmarks/bench_segmented.py --device gpu  # (the OpenCL GPU: listed before the CUDA devices)

echo "== 5. halo exchange over all GPUs (with 2+ GPUs: the stencil row's scaling; before the"
echo "   change its halos went through the host)"
if [ "$(python -c 'import fuseloop as fl; print(sum(d.backend == "cuda" for d in fl.devices()))')" -ge 2 ]; then
    python benchmarks/bench_multigpu.py --devices cuda:0,cuda:1 --log2n 28 --grid-log2 13
else
    echo "one CUDA device: skipped"
fi
