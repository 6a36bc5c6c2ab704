"""fl.explain: the kernels of an evaluation, their buffers, recipe, bytes and flops."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate, splits
from fuseloop.errors import ShapeError
from fuseloop.recipes import recipe_for


def _vec(n: int, seed: int = 0) -> tuple[np.ndarray, fl.Array]:
    h = np.random.default_rng(seed).random(n, dtype=np.float32)
    return h, fl.asarray(h)


def test_elementwise_is_one_kernel_with_exact_bytes_and_flops(device):
    _, x = _vec(1000)
    _, y = _vec(1000, 1)
    ex = fl.explain(2 * x + y * x)
    [k] = ex.kernels
    assert k.kind == "elementwise"
    assert k.recipe == recipe_for(device, "elementwise").name
    assert k.bytes_read == 2 * 4 * 1000 and k.bytes_written == 4 * 1000
    assert k.flops == 3 * 1000  # a multiply, a multiply and an add per element
    assert [b.role for b in k.reads] == ["input", "input"]
    assert [b.role for b in k.writes] == ["result"]
    assert k.computes == ["out0 = ((2.0 * x0) + (x1 * x0))"]
    assert all(src in ("explicit", "device variant", "derived", "default")
               for _, src in k.params.values())
    assert k.grid[0] and all(g > 0 for g in k.grid[0])
    assert ex.temporaries == [] and "1 kernel(s)" in str(ex)
    assert k.time_s is None and not ex.timed


def test_explain_runs_nothing_and_leaves_the_expression_lazy(device):
    hx, x = _vec(5000)
    e = fl.exp(x) - x.sum()
    before = fl.stats()
    fl.explain(e)
    after = fl.stats()
    launched = [k for k in after if "launch" in k and after[k] != before.get(k)]
    assert launched == [], (before, after)
    assert e._storage is None
    np.testing.assert_allclose(e.get(), np.exp(hx) - hx.astype(np.float64).sum(), rtol=1e-5)


def test_two_stage_reduction_has_a_partial_temporary(device):
    n = 1 << 20
    assert n >= evaluate.TWO_STAGE_MIN_LENGTH
    _, x = _vec(n)
    _, y = _vec(n, 1)
    ex = fl.explain(fl.sum(x * y))
    if splits.ONE_LAUNCH:  # both stages in one launch: the partials still a temporary
        [k] = ex.kernels
        assert k.kind == "reduction"
        result, t = k.writes
        assert result.role == "result" and t.role == "temporary" and "two-stage" in t.reason
        assert "same launch" in t.reason and t.name in k.computes[0]
        assert k.computes[0].endswith("(partial: first stage)")
        assert k.computes[1] == f"out0 = sum({t.name})"
        assert [b.name for b in k.reads if b.role == "temporary"] == [t.name]
        assert result.nbytes == 4 and k.bytes_read == 2 * 4 * n + t.nbytes
        # a multiply and an add per element, then the partials' sum
        assert 2 * n <= k.flops <= 2 * n + 64 + t.nbytes
    else:
        assert len(ex.kernels) == 2
        first, second = ex.kernels
        assert first.kind == second.kind == "reduction"
        [t] = first.writes
        assert t.role == "temporary" and "two-stage" in t.reason
        assert [b.name for b in second.reads] == [t.name]
        assert second.writes[0].role == "result" and second.writes[0].nbytes == 4
        assert first.bytes_read == 2 * 4 * n
        assert 2 * n <= first.flops <= 2 * n + 64  # a multiply and an add per element


def test_contraction_is_one_kernel():
    a = fl.asarray(np.ones((128, 96), np.float32))
    b = fl.asarray(np.ones((96, 64), np.float32))
    [k] = fl.explain(a @ b).kernels
    assert k.kind == "contraction"
    assert k.flops == 2 * 128 * 96 * 64
    assert k.bytes_read == 4 * (128 * 96 + 96 * 64) and k.bytes_written == 4 * 128 * 64


def test_materialised_reduction_inside_an_expression(device):
    n = 1 << 20  # past the one-row rule: the mean runs before the subtraction
    assert n > evaluate.ONE_ROW_MAX_LENGTH
    _, x = _vec(n)
    ex = fl.explain(x - x.mean())
    assert len(ex.kernels) >= 2
    last = ex.kernels[-1]
    assert last.kind == "elementwise"
    temps = {b.name: b for b in ex.temporaries}
    read = [b for b in last.reads if b.role == "temporary"]
    assert read and "reduction read by 1 later kernel" in temps[read[0].name].reason
    [x_name] = [b.name for b in last.reads if b.role == "input"]
    assert x_name in last.computes[0] and read[0].name in last.computes[0]


def test_fused_row_reduction_stays_one_kernel():
    x = fl.asarray(np.ones((64, 256), np.float32))
    [k] = fl.explain(fl.exp(x - x.max(axis=1, keepdims=True))).kernels
    assert k.kind == "reduction" and "max(x0)" in k.computes[0]
    assert k.flops == 64 * 256 * 3  # the max, the subtraction and the exp
    assert k.notes == []


def test_nested_reduction_is_noted():
    x = fl.asarray(np.ones((128, 32), np.float32))
    [k] = fl.explain(((x - x.mean(axis=0)) ** 2).mean(axis=0)).kernels
    [note] = k.notes
    assert "sum over 128 elements sits in another reduction's body" in note
    assert "128x" in note and "note: " in str(fl.explain(((x - x.mean(axis=0)) ** 2).sum(0)))


def test_run_times_each_kernel(device):
    _, x = _vec(1 << 16)
    ex = fl.explain(fl.sqrt(x) * 2 - x.sum(), run=True, repeat=3)
    assert ex.timed and ex.copy_gb_per_s > 0 and ex.peak_gflop_per_s > 0
    for k in ex.kernels:
        assert k.time_s > 0 and k.gb_per_s > 0 and k.fraction_of_copy > 0
        assert k.gflop_per_s > 0 and k.fraction_of_peak > 0
    assert "GB/s" in ex.as_text() and "of copy bandwidth" in ex.as_text()
    assert "of peak flops" in ex.as_text()


def test_concrete_arrays_and_bad_arguments():
    x = fl.asarray(np.ones(10, np.float32))
    ex = fl.explain(x)
    assert ex.kernels == [] and "runs no kernel" in str(ex)
    with pytest.raises(TypeError, match="fuseloop arrays"):
        fl.explain(np.ones(3))  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="one shape"):
        fl.explain(x + 1, fl.asarray(np.ones(3, np.float32)) + 1)
    with pytest.raises(TypeError, match="at least one"):
        fl.explain()
