"""Column-like reductions in the CPU rows recipe address memory with 64-bit loop
indices, as contiguous rows do (``row_cpu._wide_addresses``: PoCL makes vector loads
of a block's neighbouring outputs only then).  Results against numpy, a partial last
block included."""

from __future__ import annotations

import numpy as np

import fuseloop as fl
from fuseloop.recipes.rows import CPU_COLUMN_WIDTH


def test_column_blocks_have_wide_indices(pocl):
    x = fl.asarray(np.zeros((64, 2 * CPU_COLUMN_WIDTH), np.int32))
    code = fl.show_code(x.max(axis=0))
    assert "fuseloop_cols" in code and "for (long j0 = 0;" in code
    assert "for (int " not in code


def test_column_reductions_match_numpy(cpu):
    rng = np.random.default_rng(8)
    shape = (67, CPU_COLUMN_WIDTH + 45)  # a partial block
    i = rng.integers(-1000, 1000, shape).astype(np.int32)
    np.testing.assert_array_equal(fl.asarray(i).max(axis=0).get(), i.max(axis=0))
    d = rng.standard_normal(shape)
    d[5, 7] = np.nan
    np.testing.assert_array_equal(fl.asarray(d).min(axis=0).get(), d.min(axis=0))
    f = rng.random(shape).astype(np.float32)
    np.testing.assert_allclose(fl.asarray(f).sum(axis=0).get(),
                               f.astype(np.float64).sum(axis=0), rtol=1e-5)
    m = rng.random((3, 41, CPU_COLUMN_WIDTH + 3)).astype(np.float32)  # a middle axis
    np.testing.assert_allclose(fl.asarray(m).sum(axis=1).get(),
                               m.astype(np.float64).sum(axis=1), rtol=1e-5)
