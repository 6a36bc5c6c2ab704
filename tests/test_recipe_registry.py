"""The recipe registry: device predicates, use() scoping, parameters, fingerprints, errors."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import loopy as lp
import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import RecipeError
from fuseloop.recipes import DevicePredicate, Param, Recipe, cpu_chunked, gpu_coalesced, select
from fuseloop.recipes.registry import _choose


def _fake(index=900, **kw):
    base = dict(type="cpu", vendor="Some Vendor", name="Some CPU", platform="Some Platform")
    return SimpleNamespace(index=index, **(base | kw))


def _split(t_unit, device):
    return lp.split_iname(t_unit, "i", 64, outer_tag="g.0", inner_tag="l.0")


# {{{ predicates

def test_predicate_matching_and_specificity():
    dev = _fake(vendor="NVIDIA Corporation", type="gpu", name="H200")
    assert DevicePredicate().matches(dev) and DevicePredicate().specificity == 0
    assert DevicePredicate(type="gpu", vendor="nvidia").matches(dev)  # any case, a substring
    assert not DevicePredicate(type="cpu").matches(dev)
    assert not DevicePredicate(platform="Portable").matches(dev)
    assert DevicePredicate(type="gpu", vendor="nvidia", name="h200").specificity == 3


def test_most_specific_registration_wins(restore_recipes):
    dev = _fake(platform="Portable Computing Language")
    general = Recipe("test-general", _split)
    narrow = Recipe("test-narrow", _split)
    fl.register_recipe(DevicePredicate(type="cpu", platform="Portable Computing Language"),
                       narrow)
    fl.register_recipe("cpu", general)  # registered later, but less specific
    assert _choose(dev, "elementwise") is narrow
    assert _choose(_fake(platform="Other"), "elementwise") is general
    # equally specific: the later registration wins
    later = Recipe("test-later", _split)
    fl.register_recipe(DevicePredicate(type="cpu", vendor="some vendor"), later)
    fl.register_recipe(DevicePredicate(type="cpu", name="some cpu"), narrow)
    assert _choose(_fake(), "elementwise") is narrow


def test_string_shorthands_still_register(device, restore_recipes):
    # the most specific shorthand naming this device: a built-in recipe registered for
    # "nvidia" is more specific than "gpu", and would win over it on an NVIDIA GPU
    shorthand = max((name for name, pred in fl.recipes.SHORTHANDS.items()
                     if fl.recipes.predicate(name).matches(device)),
                    key=lambda name: fl.recipes.predicate(name).specificity)
    recipe = fl.register_recipe(shorthand, _split, name="test-shorthand")
    assert fl.recipe_for(device).name == "test-shorthand" and recipe.kind == "elementwise"
    assert ("cpu" in fl.recipes.SHORTHANDS and
            fl.recipes.predicate("nvidia") == DevicePredicate(type="gpu", vendor="nvidia"))


def test_pocl_vector_math_is_a_variant():
    pocl = _fake(platform="Portable Computing Language")
    other = _fake(platform="Intel(R) OpenCL")
    assert cpu_chunked.for_device(pocl).values["vector_math"] is True
    assert cpu_chunked.for_device(other).values["vector_math"] is False
    assert cpu_chunked.for_device(pocl).cache_id != cpu_chunked.for_device(other).cache_id
    # a value given explicitly is kept on every device
    assert cpu_chunked.with_params(vector_math=False).for_device(pocl).values[
        "vector_math"] is False

# }}}


# {{{ use()

def test_use_scopes_and_restores(device, fresh_stats):
    before = fl.recipe_for(device)
    mine = Recipe("test-use", _split)
    with fl.recipes.use(mine) as used:
        assert used is mine and fl.recipe_for(device) is mine
        assert fl.recipe_for(device, "reduction") is fl.recipe_for(device, "reduction")
        with fl.recipes.use(gpu_coalesced.with_params(group=32)):
            assert fl.recipe_for(device).values["group"] == 32
        assert fl.recipe_for(device) is mine
        x = fl.asarray(np.arange(300, dtype=np.float32))
        np.testing.assert_allclose((x * 3 + 1).get(), np.arange(300) * 3 + 1)
    assert fl.recipe_for(device) is before
    with fl.recipes.use(cpu_chunked):  # the same variant each time (run plans compare by identity)
        assert fl.recipe_for(device) is fl.recipe_for(device)
    # after an exception too
    with pytest.raises(KeyError), fl.recipes.use(mine):
        raise KeyError("x")
    assert fl.recipe_for(device) is before


def test_use_is_context_local(device):
    before = fl.recipe_for(device)
    seen = []
    with fl.recipes.use(Recipe("test-local", _split)):
        thread = threading.Thread(target=lambda: seen.append(fl.recipe_for(device)))
        thread.start()
        thread.join()
    assert seen == [before]


def test_use_by_name_and_function(device):
    with fl.recipes.use("gpu-coalesced", items=2) as r:
        assert r.name == "gpu-coalesced" and fl.recipe_for(device).values["items"] == 2
    with fl.recipes.use(_split) as r:
        assert r.name == "_split" and fl.recipe_for(device).func is _split

# }}}


# {{{ parameters and cache ids

def test_with_params_gives_another_cache_id():
    other = gpu_coalesced.with_params(group=64)
    assert other.values["group"] == 64 and gpu_coalesced.values["group"] == 128
    assert other.cache_id != gpu_coalesced.cache_id
    assert other.cache_id[:3] == gpu_coalesced.cache_id[:3]  # same name, version, source
    assert gpu_coalesced.with_params(group=128).cache_id == gpu_coalesced.cache_id


def test_derived_parameters_follow():
    from fuseloop.recipes import gpu_rows

    small = gpu_rows.with_params(group=64)
    assert small.size_class is not gpu_rows.size_class
    assert small.cache_id != gpu_rows.cache_id
    assert cpu_chunked.with_params(chunk=1024).concat_chunk == 1024


def _recipe_a():
    def transform(t_unit, device):
        return lp.split_iname(t_unit, "i", 64, outer_tag="g.0")
    return transform


def _recipe_b():
    def transform(t_unit, device):
        return lp.split_iname(t_unit, "i", 128, outer_tag="g.0")
    return transform


def test_fingerprint_follows_the_source():
    a, b = _recipe_a(), _recipe_b()
    assert a.__qualname__.split(".")[-1] == b.__qualname__.split(".")[-1] == "transform"
    ra, rb = Recipe("test-same", a), Recipe("test-same", b)
    assert ra.fingerprint != rb.fingerprint and ra.cache_id != rb.cache_id
    assert Recipe("test-same", _recipe_a()).cache_id == ra.cache_id  # stable


def test_fingerprint_follows_closure_values():
    from fuseloop.recipes.contraction import CpuBlocks, blocked

    assert (Recipe("t", blocked(CpuBlocks(4, 8))).fingerprint
            != Recipe("t", blocked(CpuBlocks(6, 16))).fingerprint)


@pytest.fixture
def cold_kernel_cache(tmp_path, monkeypatch):
    """Kernels built afresh: an empty disk cache and no kernels in memory, so a recipe
    is called even when FUSELOOP_CACHE_DIR names a cache earlier runs filled."""
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    fl.clear_caches()
    yield
    fl.clear_caches()


def test_declared_parameters_reach_the_function(device, fresh_stats, cold_kernel_cache):
    seen = []

    def chunked(t_unit, dev, *, width):
        seen.append(width)
        return lp.split_iname(t_unit, select.iname(t_unit, "tag:fl_flat"), width,
                              outer_tag="g.0", inner_tag="l.0")

    recipe = Recipe("test-width", chunked, params=(Param("width", int, 16),))
    x = fl.asarray(np.arange(200, dtype=np.float64))
    with fl.recipes.use(recipe.with_params(width=32)):
        np.testing.assert_allclose((x * 2 - 9).get(), np.arange(200) * 2 - 9)
    assert seen == [32]

# }}}


# {{{ errors

def test_recipe_errors_name_the_problem(restore_recipes):
    with pytest.raises(RecipeError, match=r"has no parameter 'grup'.*group"):
        gpu_coalesced.with_params(grup=64)
    with pytest.raises(RecipeError, match="'group' must be int, got str"):
        gpu_coalesced.with_params(group="64")
    with pytest.raises(RecipeError, match="'vector_math' must be bool"):
        cpu_chunked.with_params(vector_math=1)
    with pytest.raises(RecipeError, match=r"unknown device type 'cpus'.*DevicePredicate"):
        fl.register_recipe("cpus", _split, name="x")
    with pytest.raises(RecipeError, match="needs a name"):
        fl.register_recipe("cpu", _split)
    with pytest.raises(RecipeError, match="transforms elementwise kernels, not reduction"):
        fl.register_recipe("cpu", gpu_coalesced, kind="reduction")
    with pytest.raises(RecipeError, match="no recipe named 'nope'"):
        with fl.recipes.use("nope"):
            pass

    def with_attribute(t_unit, device):
        return t_unit

    with_attribute.concat_chunk = 64
    with pytest.raises(RecipeError, match=r"concat_chunk=\.\.\. to register_recipe"):
        fl.register_recipe("cpu", with_attribute, name="x")
    with pytest.raises(AttributeError, match="immutable"):
        gpu_coalesced.name = "x"


def test_a_kernel_role_tags_are_found_by_within(device, cold_kernel_cache):
    """The lowering's role tags, as the recipes match them."""
    seen = {}

    def spy(t_unit, dev):
        seen["flat"] = select.inames(t_unit, "tag:fl_flat")
        seen["rows"] = select.inames(t_unit, "tag:fl_row*")
        seen["red"] = select.inames(t_unit, "tag:fl_reduction")
        return lp.tag_inames(t_unit, {seen["flat"][0]: "g.0"}) if seen["flat"] else \
            lp.tag_inames(t_unit, {seen["rows"][0]: "g.0"})

    x = fl.asarray(np.arange(12.0).reshape(3, 4))
    with fl.recipes.use(spy, kind="reduction"):
        np.testing.assert_allclose(x.sum(axis=1).get(), np.arange(12.0).reshape(3, 4).sum(1))
    assert seen == {"flat": [], "rows": ["i"], "red": ["j0"]}

# }}}
