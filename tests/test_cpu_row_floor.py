"""cpu-rows: the size class states which of the accumulator counts its reductions use a
contiguous row is at least as long as (``p >= 32`` for a max's, ``p >= 8``), so that the
accumulators' set-up, copy and combining steps run without a test of the row's length;
rows shorter than every count keep the tests, which leave accumulators past the row's
end unread."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes.rows import CPU_ACCUMULATORS, CPU_SELECT_ACCUMULATORS

FLOOR = max(CPU_ACCUMULATORS, CPU_SELECT_ACCUMULATORS)
LEAST = min(CPU_ACCUMULATORS, CPU_SELECT_ACCUMULATORS)
# a test of a row's length against a constant, as Loopy writes it: ``if (-5 + p0 >= 0)``
LENGTH_TEST = re.compile(r"if \(-\d+ \+ p0 >= 0\)")


def _rows(length: int, dtype: type, seed: int) -> np.ndarray:
    """Rows of ``length`` with ties, a NaN row and a row of one value."""
    rng = np.random.default_rng(seed)
    h = rng.integers(-5, 6, (6, length)).astype(dtype)
    h[0] = 3
    if np.dtype(dtype).kind == "f":
        h[1, length // 2] = np.nan
    return h


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_rows_either_side_of_the_floor_match_numpy(cpu, dtype):
    for length in (1, LEAST - 1, LEAST, LEAST + 3, FLOOR - 1, FLOOR, FLOOR + 1, 1003):
        h = _rows(length, dtype, length)
        x = fl.asarray(h)
        for op in ("sum", "max", "min", "argmax", "argmin"):
            got, want = getattr(x, op)(axis=1).get(), getattr(h, op)(axis=1)
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{op} {length}")
        if dtype == np.float32:
            np.testing.assert_allclose(x.var(axis=1).get(), h.var(axis=1), rtol=1e-5,
                                       err_msg=f"var {length}")


def test_rows_at_the_floor_have_no_length_tests(cpu):
    x = fl.asarray(np.ones((64, FLOOR + 32), np.float32))
    # a sum's floor is its own count: the select count is no fact its code reads
    for expr, floor in ((x.sum(axis=1), CPU_ACCUMULATORS), (x.max(axis=1), FLOOR),
                        (x.argmax(axis=1), FLOOR)):
        lowered = fl.program(expr).lower()
        assert re.findall(r"p0 >= (\d+)", lowered.sizes) == [str(floor)], lowered.sizes
        assert not LENGTH_TEST.search(lowered.compile().source)
    # rows shorter than every count: no lower bound, the steps tested
    short = fl.asarray(np.ones((64, LEAST - 1), np.float32))
    lowered = fl.program(short.sum(axis=1)).lower()
    assert ">=" not in lowered.sizes
    assert LENGTH_TEST.search(lowered.compile().source)


def test_row_lengths_share_a_kernel_per_side_of_the_floor(cpu):
    fl.clear_caches()
    fl.reset_stats()
    for length in (FLOOR, FLOOR + 5, 64):  # one class: FLOOR <= p <= 64
        h = np.random.default_rng(length).random((40, length)).astype(np.float32)
        np.testing.assert_array_equal(fl.asarray(h).max(axis=1).get(), h.max(axis=1))
    assert fl.stats()["kernels_compiled"] == 1
    h = np.random.default_rng(0).random((40, FLOOR - 1)).astype(np.float32)  # p >= LEAST
    np.testing.assert_array_equal(fl.asarray(h).max(axis=1).get(), h.max(axis=1))
    assert fl.stats()["kernels_compiled"] == 2
    # a sum's rows either side of the select count: one class (p >= LEAST)
    for length in (FLOOR - 1, FLOOR + 5):
        h = np.random.default_rng(length).random((40, length)).astype(np.float32)
        np.testing.assert_allclose(fl.asarray(h).sum(axis=1).get(), h.sum(axis=1),
                                   rtol=1e-5)
    assert fl.stats()["kernels_compiled"] == 3
