"""The stages (fl.program -> lower -> compile) and the cache registry (fl.clear_caches)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import caches
from fuseloop.errors import NotOneKernelError, ShapeError
from fuseloop.recipes import recipe_for


def test_program_text_and_key_without_building():
    x = fl.asarray(np.arange(12.0).reshape(3, 4))
    y = fl.asarray(np.ones((3, 4)))
    before = fl.stats()
    p = fl.program(x * 2 + y)
    text = p.as_text()
    assert "multiply" in text and "add" in text and "outputs %" in text
    assert "computed as (12,)" in text  # coalesced as evaluation does
    assert len(p.key) == 16 and int(p.key, 16) >= 0
    # same structure, other data (and other scalar): same key; recomputed: same key
    other = fl.asarray(np.zeros((3, 4)))
    assert fl.program(other * 3 + fl.asarray(np.ones((3, 4)))).key == p.key
    assert fl.program(x * 2 + y).key == p.key
    # another operation, or one buffer read twice: another structure
    assert fl.program(x * 2 - y).key != p.key
    assert fl.program(x * 2 + x).key != p.key
    after = fl.stats()
    assert after["kernels_lowered"] == before["kernels_lowered"]
    assert after["kernels_compiled"] == before["kernels_compiled"]


def test_program_refuses_what_needs_several_kernels():
    x = fl.asarray(np.arange(100_000, dtype=np.float32))
    with pytest.raises(NotOneKernelError, match="more than one kernel"):
        fl.program(x - x.sum())
    with pytest.raises(ShapeError):
        fl.program(x, fl.asarray(np.ones(3)))
    with pytest.raises(TypeError):
        fl.program(np.ones(3))


def test_lower_shows_the_recipe(device):
    x = fl.asarray(np.arange(10, dtype=np.float32))
    lowered = fl.program(fl.sin(x) + 1).lower()
    text = lowered.as_text()
    recipe = recipe_for(device, "elementwise")
    assert recipe.name in text and "before the recipe" in text
    assert "\x1b[" not in text
    assert lowered.t_unit_before is not lowered.t_unit
    assert lowered.t_unit.default_entrypoint.name == lowered.t_unit_before.default_entrypoint.name


def test_compile_of_a_cached_program_builds_nothing(device):
    a = np.linspace(0, 1, 50, dtype=np.float32)
    b = np.arange(50, dtype=np.float32)
    x, y = fl.asarray(a), fl.asarray(b)
    expected = a * 3 - b
    np.testing.assert_allclose((x * 3 - y).get(), expected)  # now cached
    before = fl.stats()
    compiled = fl.program(x * 3 - y).compile()
    assert fl.stats()["kernels_compiled"] == before["kernels_compiled"]
    assert fl.stats()["kernels_lowered"] == before["kernels_lowered"]
    assert compiled.name in compiled.source and compiled.name in compiled.as_text()
    assert compiled.arg_names[0] == "out0" and {"in0", "in1"} <= set(compiled.arg_names)
    global_size, local_size = compiled.grid
    assert len(global_size) == len(local_size)
    np.testing.assert_allclose(compiled().get(), expected)
    # other inputs in place of the traced ones
    np.testing.assert_allclose(compiled(b, a).get(), b * 3 - a)
    with pytest.raises(ShapeError, match="input 0"):
        compiled(np.ones(7, np.float32), b)
    with pytest.raises(TypeError, match="2 input buffer"):
        compiled(a)


def test_lowered_compile_and_call_reduction(device):
    a = np.random.default_rng(3).random((6, 70), dtype=np.float32)
    x = fl.asarray(a)
    compiled = fl.program(x.sum(axis=1) * 2, x.max(axis=1)).lower().compile()
    assert compiled.binary is None or len(compiled.binary) > 0
    total, biggest = compiled()
    np.testing.assert_allclose(total.get(), a.sum(axis=1) * 2, rtol=1e-5)
    np.testing.assert_allclose(biggest.get(), a.max(axis=1))
    # the kernel a stage compiled is the one evaluation launches
    one = fl.program(x.min(axis=1) - 1).lower().compile()
    np.testing.assert_allclose(one().get(), a.min(axis=1) - 1)
    before = fl.stats()
    np.testing.assert_allclose((x.min(axis=1) - 1).get(), a.min(axis=1) - 1)
    assert fl.stats()["kernels_compiled"] == before["kernels_compiled"]
    assert fl.stats()["memory_cache_hits"] > before["memory_cache_hits"]


def test_compiled_arguments_are_the_generated_signature(device):
    x = fl.asarray(np.arange(8, dtype=np.float32))
    compiled = fl.program(x * 0 + 1).compile()
    start = compiled.source.index(compiled.name + "(")
    signature = compiled.source[start:compiled.source.index(")", start)]
    positions = [signature.index(f" {n},") if f" {n}," in signature
                 else signature.rindex(f" {n}") for n in compiled.arg_names]
    assert positions == sorted(positions)
    assert signature.count(",") + 1 == len(compiled.arg_names)


def test_clear_caches_then_rebuild_from_disk(device):
    if fl.cache_dir() is None:
        pytest.skip("the disk cache is off")
    a = np.arange(40, dtype=np.float64)
    x = fl.asarray(a)
    np.testing.assert_allclose((x * 7 + 2).get(), a * 7 + 2)
    np.testing.assert_allclose((x.reshape(5, 8).sum(axis=0)).get(), a.reshape(5, 8).sum(axis=0))
    fl.clear_caches()
    sizes = {i["name"]: i["size"] for i in fl.cache_info()}
    assert sizes["cache.kernels"] == 0 and sizes["run_plans.plans"] == 0
    assert sizes["expr.program.structures"] == 0
    before = fl.stats()
    np.testing.assert_allclose((x * 7 + 2).get(), a * 7 + 2)
    np.testing.assert_allclose((x.reshape(5, 8).sum(axis=0)).get(), a.reshape(5, 8).sum(axis=0))
    after = fl.stats()
    assert after["disk_cache_hits"] - before["disk_cache_hits"] == 2
    assert after["kernels_lowered"] == before["kernels_lowered"]


def test_cache_info_lists_a_bound_or_a_reason():
    info = fl.cache_info()
    names = {i["name"] for i in info}
    for expected in ("cache.kernels", "run_plans.plans", "expr.program.structures",
                     "expr.nodes.sig_table", "array.sig_loops", "recipes.chosen",
                     "ops.compaction.kernels", "dtypes.resolve_loop"):
        assert expected in names
    for i in info:
        assert isinstance(i["size"], int)
        assert i["bound"] is not None or i["why_bounded"]
    # the kernel cache (what holds the others' kernels) is cleared last
    assert caches.records()[-1].name == "cache.kernels"
    with pytest.raises(ValueError, match="bound"):
        caches.register("test.unbounded", dict().clear, lambda: 0)
