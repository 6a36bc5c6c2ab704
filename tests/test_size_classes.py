"""Size classes of loops whose reductions grow (issue 26): a launch of few rows states no
row facts on the CPU (``cpu-rows``) and takes the group layout on a GPU (``gpu-rows``),
so a triangular solve's or a factorisation's dot products, one row each, need one kernel
for every length (and one for length 1, linearised as another program), not one per
class crossed."""

from __future__ import annotations

import numpy as np

import fuseloop as fl
from fuseloop.recipes import gpu_rows
from fuseloop.recipes.row_cpu import CPU_CLASS_ROWS, cpu_rows

LENGTHS = range(0, 150)  # (0 and 1, and past every CPU row bound below 512)


def _kernels_needed(stats: dict) -> int:
    # (after fl.clear_caches: each kernel once, whether lowered or read from disk)
    return stats["memory_cache_misses"]


def _dot_loop(lengths: range) -> None:
    rng = np.random.default_rng(1)
    n = lengths.stop + 1
    xh, yh, lh = rng.random(n), rng.random(n), rng.random((n, n)) + n * np.eye(n)
    x, y, low = fl.asarray(xh), fl.asarray(yh), fl.asarray(lh)
    out, want = fl.zeros(n), np.zeros(n)
    for k in lengths:
        out[k] = (x[k] - low[k, :k] @ y[:k]) / low[k, k]
        want[k] = (xh[k] - lh[k, :k] @ yh[:k]) / lh[k, k]
    np.testing.assert_allclose(out.get(), want, rtol=1e-12)


def test_growing_dot_products_share_a_kernel(device_path, fresh_stats):
    fl.clear_caches()
    fl.reset_stats()
    _dot_loop(LENGTHS)
    assert _kernels_needed(fresh_stats()) <= 2, fresh_stats()


def test_gpu_rows_growing_dot_products_share_a_kernel(cpu, restore_recipes, fresh_stats):
    with fl.recipes.use(gpu_rows):
        fl.clear_caches()
        fl.reset_stats()
        _dot_loop(range(0, 40))
    assert _kernels_needed(fresh_stats()) <= 2, fresh_stats()


def test_gpu_rows_few_rows_of_any_length_match_numpy(cpu, restore_recipes):
    # few rows take the group layout, empty rows too (their class starts at 0)
    rng = np.random.default_rng(2)
    with fl.recipes.use(gpu_rows):
        for rows in (1, 3):
            for length in (0, 3, 33):  # (one class: 0 <= p <= 511)
                h = rng.standard_normal((rows, length))
                x = fl.asarray(h)
                np.testing.assert_allclose(x.sum(axis=1).get(), h.sum(axis=1), rtol=1e-12)
                if length:
                    np.testing.assert_array_equal(x.max(axis=1).get(), h.max(axis=1))


def test_cpu_rows_states_only_facts_its_code_reads(cpu):
    size_class = cpu_rows.size_class
    assert size_class is not None
    x = fl.asarray(np.zeros((64, 40), np.float32))

    def sizes(expr: fl.Array, rows: int) -> str:
        p = fl.program(expr)
        return size_class(p.program, p.bindings.params, rows, 1)

    # few rows: no class at all (a dot product's one row, of any length)
    assert sizes(x[0] @ x[1], 1) == ""
    assert sizes(x[:CPU_CLASS_ROWS - 1].sum(axis=1), CPU_CLASS_ROWS - 1) == ""
    # many rows: a sum's floor is its own accumulators' (8), a max's the selects' (32)
    assert sizes(x.sum(axis=1), 64) == "p0 >= 8 and p0 <= 64"
    assert sizes(x.max(axis=1), 64) == "p0 >= 32 and p0 <= 64"
