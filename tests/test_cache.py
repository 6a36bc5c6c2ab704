"""Kernel cache: structural keys, memory and disk layers, corruption handling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache, cache_disk
from fuseloop.backends import backend_for
from fuseloop.expr.program import linearize

SCRIPT = textwrap.dedent("""
    import json, numpy as np, fuseloop as fl
    x = fl.asarray(np.arange(10, dtype=np.float32))
    y = fl.asarray(np.ones(10, dtype=np.float32))
    r = (fl.cos(x) * 4.5 - y / 3).get()
    print(json.dumps({"stats": fl.stats(), "ok": bool(np.allclose(
        r, np.cos(np.arange(10, dtype=np.float32)) * 4.5 - 1 / 3, rtol=1e-5))}))
""")


def run_child(cache_dir, extra_env=None):
    env = dict(os.environ)
    env["FUSELOOP_CACHE_DIR"] = str(cache_dir)
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_key_is_structural_without_loopy():
    a = fl.asarray(np.ones(4, np.float32))
    b = fl.asarray(np.ones(8, np.float32))
    p1, _ = linearize([(2 * a + fl.sin(a))._node], (4,))
    p2, _ = linearize([(3 * b + fl.sin(b))._node], (8,))
    p3, _ = linearize([(a * a + fl.sin(a))._node], (4,))
    assert p1 == p2 and hash(p1) == hash(p2)  # scalars and sizes are not structure
    assert p1 != p3


def test_second_process_generates_no_loopy_code(tmp_path):
    first, _ = run_child(tmp_path)
    assert first["ok"] and first["stats"]["kernels_lowered"] == 1
    second, _ = run_child(tmp_path)
    assert second["ok"]
    assert second["stats"]["kernels_lowered"] == 0
    assert second["stats"]["disk_cache_hits"] == 1


def test_corrupt_and_foreign_entries_are_rebuilt(tmp_path):
    run_child(tmp_path)
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) == 1
    entry = entries[0]
    entry.write_text(entry.read_text()[:40])  # truncated
    res, _ = run_child(tmp_path)
    assert res["ok"] and res["stats"]["kernels_lowered"] == 1
    doc = json.loads(entry.read_text())
    doc["plan"]["source"] = doc["plan"]["source"].replace("cos", "sin")  # tampered
    entry.write_text(json.dumps(doc))
    res, _ = run_child(tmp_path)
    assert res["ok"] and res["stats"]["kernels_lowered"] == 1
    doc = json.loads(entry.read_text())
    doc["key"] = doc["key"].replace("schema", "other")  # another version's entry
    entry.write_text(json.dumps(doc))
    res, _ = run_child(tmp_path)
    assert res["ok"] and res["stats"]["kernels_lowered"] == 1
    entry.write_bytes(b"\x00\xff garbage")
    res, _ = run_child(tmp_path)
    assert res["ok"] and res["stats"]["kernels_lowered"] == 1


def test_disk_cache_can_be_disabled(tmp_path):
    res, _ = run_child(tmp_path, {"FUSELOOP_CACHE_DIR": "off"})
    assert res["ok"] and res["stats"]["disk_cache_misses"] == 0
    assert not list(tmp_path.rglob("*.json"))


def test_show_kernels_prints_new_kernels(tmp_path):
    _res, err = run_child(tmp_path / "c", {"FUSELOOP_SHOW_KERNELS": "1"})
    assert "fuseloop: new kernel for" in err and "cos(" in err  # (a helper or builtin call)
    _res, err = run_child(tmp_path / "c", {"FUSELOOP_SHOW_KERNELS": "1"})
    assert "new kernel" not in err  # nothing new was generated


def test_memory_cache_across_sizes_and_shapes(device):
    fl.clear_memory_cache()
    fl.reset_stats()
    for shape in [(10,), (1000,), (7, 9)]:
        x = fl.asarray(np.ones(shape, np.float32))
        (x * 2 + 1).get()
    s = fl.stats()
    assert s["memory_cache_misses"] == 1 and s["memory_cache_hits"] == 2


def test_recipe_registry_is_extensible(device, fresh_cache):
    # fresh_cache: a kernel of this recipe cached on disk by an earlier run would be used
    import loopy as lp

    calls = []

    def my_recipe(t_unit, dev):
        calls.append(dev.name)
        return lp.split_iname(t_unit, "i", 64, outer_tag="g.0", inner_tag="l.0")

    old = fl.recipe_for(device)
    kind = "nvidia" if device.type == "gpu" and "nvidia" in device.vendor.lower() else device.type
    fl.register_recipe(kind, my_recipe, name="test-recipe", version="7")
    try:
        x = fl.asarray(np.arange(300, dtype=np.float32))
        np.testing.assert_allclose((x * 3 - 1).get(), np.arange(300) * 3 - 1)
        assert calls == [device.name]
        # name and version lead the cache id (then the source fingerprint and parameters)
        assert fl.recipe_for(device).cache_id[:2] == ("test-recipe", "7")
    finally:
        fl.register_recipe(kind, old.transform, name=old.name, version=old.version)


def test_recipe_size_classes(device, fresh_cache, fresh_stats):
    import loopy as lp

    seen = []

    def sized_recipe(t_unit, dev):
        seen.append(t_unit.default_entrypoint.assumptions)
        return lp.split_iname(t_unit, "i", 64, outer_tag="g.0", inner_tag="l.0")

    def size_class(program, params, n_rows, n_elem):
        return "N = 1000" if n_rows == 1000 else ""

    old = fl.recipe_for(device)
    kind = "nvidia" if device.type == "gpu" and "nvidia" in device.vendor.lower() else device.type
    fl.register_recipe(kind, sized_recipe, name="test-sized-recipe", version="1",
                       size_class=size_class)
    try:
        assert fl.recipe_for(device).size_class is size_class
        before = fl.stats()["memory_cache_misses"]
        for n in (1000, 2000, 1000, 3000):
            x = fl.asarray(np.arange(n, dtype=np.float32))
            np.testing.assert_allclose((x * 5 + 2).get(), np.arange(n) * 5 + 2)
        # one kernel for the class N = 1000, one for every other size
        assert fl.stats()["memory_cache_misses"] - before == 2
        # the recipe saw the class among the kernel's assumptions
        assert len(seen) == 2 and ["N = 1000" in str(a) for a in seen] == [True, False]
        assert len(list(fresh_cache.rglob("*.json"))) == 2  # two disk entries
    finally:
        fl.register_recipe(kind, old.transform, name=old.name, version=old.version)


@pytest.mark.parametrize("bad", ["p0 = = 3", None])
def test_a_bad_size_class_is_a_clear_error(device, fresh_cache, bad):
    import loopy as lp

    def recipe(t_unit, dev):
        return lp.split_iname(t_unit, "i", 64, outer_tag="g.0", inner_tag="l.0")

    old = fl.recipe_for(device)
    kind = "nvidia" if device.type == "gpu" and "nvidia" in device.vendor.lower() else device.type
    fl.register_recipe(kind, recipe, name="test-bad-sizes", version="1",
                       size_class=lambda program, params, n_rows, n_elem: bad)
    try:
        x = fl.asarray(np.arange(100, dtype=np.float32))
        with pytest.raises(fl.errors.RecipeError, match="test-bad-sizes") as info:
            (x * 7 - 1).get()
        assert repr(bad) in str(info.value)
        assert not list(fresh_cache.rglob("*.json"))  # nothing cached
    finally:
        fl.register_recipe(kind, old.transform, name=old.name, version=old.version)
    np.testing.assert_allclose((x * 7 - 1).get(), np.arange(100) * 7 - 1)


# {{{ key parts, location, disabling, stored binaries (in-process)

def _expr(x):
    return fl.arcsinh(x) * 2 - fl.log1p(x)  # a structure no other test uses


def _expect(xh):
    return np.arcsinh(xh) * 2 - np.log1p(xh)


def _evaluate_fresh(x, xh):
    """Evaluate in a fresh memory cache; return the counters of that evaluation."""
    fl.clear_memory_cache()
    fl.reset_stats()
    np.testing.assert_allclose(_expr(x).get(), _expect(xh), rtol=1e-5, atol=1e-6)
    return fl.stats()


def test_entry_for_another_device_is_not_used(device, fresh_cache, monkeypatch):
    xh = np.linspace(0, 2, 50, dtype=np.float32)
    x = fl.asarray(xh)
    other = ("Other Platform", "Other Vendor", device.name, "0.0")
    with monkeypatch.context() as m:  # an entry written by another device
        m.setattr(type(device), "identity", property(lambda self: other))
        assert _evaluate_fresh(x, xh)["kernels_lowered"] == 1
    [foreign] = cache.disk_entries(fresh_cache)
    s = _evaluate_fresh(x, xh)
    assert s["disk_cache_misses"] == 1 and s["kernels_lowered"] == 1
    assert len(cache.disk_entries(fresh_cache)) == 2
    # the foreign entry copied over this device's file name is refused, not launched
    [own] = [p for p in cache.disk_entries(fresh_cache) if p != foreign]
    own.write_bytes(foreign.read_bytes())
    s = _evaluate_fresh(x, xh)
    assert s["disk_cache_misses"] == 1 and s["kernels_lowered"] == 1
    assert cache.read_entry(own).key != cache.read_entry(foreign).key


def test_entry_for_another_library_version_is_not_used(device, fresh_cache, monkeypatch):
    xh = np.linspace(0, 2, 50, dtype=np.float32)
    x = fl.asarray(xh)
    real = cache.library_versions()
    older = tuple((d, "0.0.1" if d == "fuseloop" else v) for d, v in real)
    with monkeypatch.context() as m:
        m.setattr(cache, "library_versions", lambda: older)
        assert _evaluate_fresh(x, xh)["kernels_lowered"] == 1
    s = _evaluate_fresh(x, xh)
    assert s["disk_cache_misses"] == 1 and s["kernels_lowered"] == 1
    with monkeypatch.context() as m:  # an edited fuseloop checkout, same version number
        m.setattr(cache, "code_fingerprint", lambda: "edited")
        assert _evaluate_fresh(x, xh)["kernels_lowered"] == 1
    s = _evaluate_fresh(x, xh)  # the entry of the current versions is found again
    assert s["disk_cache_hits"] == 1 and s["kernels_lowered"] == 0
    assert len(cache.disk_entries(fresh_cache)) == 3


def test_cache_location_is_configurable(device, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "~/kernels")
    assert fl.cache_dir() == tmp_path / "home" / "kernels"
    xh = np.linspace(0, 2, 50, dtype=np.float32)
    _evaluate_fresh(fl.asarray(xh), xh)
    [entry] = cache.disk_entries()
    assert entry.parent == tmp_path / "home" / "kernels" / f"v{cache.SCHEMA_VERSION}"
    monkeypatch.delenv("FUSELOOP_CACHE_DIR")
    import platformdirs

    assert fl.cache_dir() == Path(platformdirs.user_cache_dir("fuseloop"))


@pytest.mark.parametrize("value", ["", "off", "OFF", "0", "none", "false", " off "])
def test_every_disabling_value_disables_the_disk_cache(device, tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)  # a value taken for a relative path would write here
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", value)
    assert fl.cache_dir() is None
    xh = np.linspace(0, 2, 50, dtype=np.float32)
    s = _evaluate_fresh(fl.asarray(xh), xh)
    assert s["disk_cache_hits"] == 0 and s["disk_cache_misses"] == 0
    assert list(tmp_path.rglob("*")) == []


def test_stored_binary_is_used_and_a_refused_one_is_replaced(device, fresh_cache, monkeypatch):
    def no_source_build(*args):
        raise AssertionError("built from source although the entry has a binary")

    # (a device whose driver caches its builds gets entries without binaries: see
    # test_cache_binaries.py; here its binaries are stored, as any other device's)
    monkeypatch.setattr(type(backend_for(device)), "stores_binaries", lambda self, d: True)
    xh = np.linspace(0, 2, 50, dtype=np.float32)
    x = fl.asarray(xh)
    _evaluate_fresh(x, xh)
    [path] = cache.disk_entries(fresh_cache)
    entry = cache.read_entry(path)
    assert entry is not None
    if not entry.binary:
        pytest.skip(f"{device.name} provides no program binary")
    with monkeypatch.context() as m:
        m.setattr(cache, "_build_source", no_source_build)
        s = _evaluate_fresh(x, xh)
    assert s["disk_cache_hits"] == 1 and s["kernels_lowered"] == 0
    # a binary the driver refuses (checksum intact) falls back to the stored source...
    cache._write_disk(path, entry.key, entry.plan, b"not a device binary")
    s = _evaluate_fresh(x, xh)
    assert s["disk_cache_hits"] == 1 and s["kernels_lowered"] == 0
    # ...and the entry gets the binary the driver produces now
    repaired = cache.read_entry(path)
    assert repaired.binary and repaired.binary != b"not a device binary"
    with monkeypatch.context() as m:
        m.setattr(cache, "_build_source", no_source_build)
        s = _evaluate_fresh(x, xh)
    assert s["disk_cache_hits"] == 1 and s["kernels_compiled"] == 1


def test_read_entry_verifies_checksum_and_file_name(device, fresh_cache, monkeypatch):
    # (an entry with a binary, which PoCL's CPU device otherwise leaves out)
    monkeypatch.setattr(type(backend_for(device)), "stores_binaries", lambda self, d: True)
    xh = np.linspace(0, 2, 50, dtype=np.float32)
    _evaluate_fresh(fl.asarray(xh), xh)
    [path] = cache.disk_entries(fresh_cache)
    good = path.read_bytes()
    assert cache.read_entry(path) is not None
    renamed = path.with_name("0" * 40 + ".json")  # right content, wrong name
    renamed.write_bytes(good)
    assert cache.read_entry(renamed) is None
    doc = json.loads(good)
    doc["plan"]["gsize"] = ["1"]  # any edit breaks the checksum
    path.write_text(json.dumps(doc))
    assert cache.read_entry(path) is None
    doc = json.loads(good)
    doc["binary"] = doc["binary"][:-8]  # so does a shortened binary
    path.write_text(json.dumps(doc))
    assert cache.read_entry(path) is None

# }}}


def test_lowering_keeps_no_lazy_array_alive(device, fresh_cache, restore_recipes):
    """Loopy keeps caught exceptions in reference cycles whose frames reach back into
    fuseloop's (seen in ``loopy.symbolic.with_aff_conversion_guard`` with the GPU
    recipe): until a garbage collection, a lazy array that the evaluation's frames held
    looked alive, and writing into its input materialised it first (one launch more)."""
    import gc

    import loopy as lp

    from fuseloop.recipes import gpu_coalesced

    if device.type == "cpu":  # the GPU recipe's code is the one that triggered it
        fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced-gc")
    gc_was_enabled = gc.isenabled()
    gc.disable()  # only fuseloop's own collection may break the cycles
    try:
        with lp.CacheMode(False):  # Loopy's own code cache would skip the lowering
            xh = np.linspace(0, 1, 1000, dtype=np.float32)
            x = fl.asarray(xh)
            out = fl.empty_like(x)
            out[...] = fl.exp(-x * x)  # lowered and compiled here (fresh caches)
            fl.reset_stats()
            x += 1
            assert fl.stats()["kernels_launched"] == 1
        np.testing.assert_allclose(x.get(), xh + 1)
        np.testing.assert_allclose(out.get(), np.exp(-xh * xh), rtol=1e-6)
    finally:
        if gc_was_enabled:
            gc.enable()


def test_loopy_section_freezes_old_objects_for_its_length_only():
    """The section freezes what was alive before it (its collection then skips those
    objects), still collects the cycles made inside it, leaves nothing frozen after
    it, and leaves objects that other code froze as they were."""
    import gc
    import weakref

    from fuseloop.lower import codegen

    class Node:
        pass

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        assert gc.get_freeze_count() == 0
        old = Node()
        old.self = old  # a cycle made before the section
        old_ref = weakref.ref(old)
        del old
        with codegen.loopy_section():
            assert gc.get_freeze_count() > 0
            with codegen.loopy_section():  # (a recipe that evaluates)
                pass
            assert gc.get_freeze_count() > 0
            new = Node()
            new.self = new  # one made inside (Loopy's caught exceptions)
            new_ref = weakref.ref(new)
            del new
        assert new_ref() is None
        assert gc.get_freeze_count() == 0
        assert old_ref() is not None  # (frozen during the section: collected later)
        gc.collect()
        assert old_ref() is None
        with pytest.raises(ZeroDivisionError), codegen.loopy_section():
            _ = 1 / 0  # (Loopy raised)
        assert gc.get_freeze_count() == 0
        gc.freeze()  # other code's own freeze is left alone
        frozen = gc.get_freeze_count()
        with codegen.loopy_section():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()


def test_an_unreadable_loopy_cache_entry_is_not_fatal(device, monkeypatch):
    # Loopy's own disk caches (~/.cache/pytools) may hold an entry pickled by other code
    # (a renamed copy of a package): unpickling it raises, and Loopy lets that through.
    # Loopy's caches are used only while fuseloop's disk cache is off (see
    # test_loopy_caches_are_off_while_the_disk_cache_is_on)
    import loopy as lp

    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")

    real = lp.generate_code_v2
    tried: list[bool] = []

    def with_foreign_entry(t_unit):
        tried.append(lp.CACHING_ENABLED)
        if lp.CACHING_ENABLED:
            raise ModuleNotFoundError("No module named 'fuseloop_renamed'")
        return real(t_unit)

    monkeypatch.setattr(lp, "generate_code_v2", with_foreign_entry)
    fl.clear_memory_cache()
    h = np.arange(37, dtype=np.float32)
    x = fl.asarray(h)
    np.testing.assert_array_equal((x * 7 - 1).get(), h * 7 - 1)
    assert tried == [True, False]  # read the caches, then generated without them
    assert lp.CACHING_ENABLED  # and left them on

    def broken(t_unit):  # a real code generation error is still reported
        raise AttributeError("a bug in a recipe")

    monkeypatch.setattr(lp, "generate_code_v2", broken)
    with pytest.raises(AttributeError, match="a bug in a recipe"):
        (fl.sqrt(x) * 9 + x).get()  # a new structure: generated afresh


def test_loopy_caches_are_off_while_the_disk_cache_is_on(device, fresh_cache, monkeypatch):
    # a kernel fuseloop builds missed its disk cache, so Loopy's caches (keyed by the
    # translation unit made from the same program) would miss too: not looked up
    import loopy as lp

    real = lp.generate_code_v2
    caching: list[bool] = []

    def noting(t_unit):
        caching.append(lp.CACHING_ENABLED)
        return real(t_unit)

    monkeypatch.setattr(lp, "generate_code_v2", noting)
    h = np.arange(41, dtype=np.float32)
    x = fl.asarray(h)
    np.testing.assert_array_equal((x * 5 - 2).get(), h * 5 - 2)
    assert caching == [False] and lp.CACHING_ENABLED  # (and on again afterwards)


# {{{ bounds (issue 23)

_UNARY = [(fl.sin, np.sin), (fl.cos, np.cos), (fl.exp, np.exp), (fl.log1p, np.log1p),
          (fl.sqrt, np.sqrt), (fl.arcsinh, np.arcsinh), (fl.expm1, np.expm1),
          (fl.cbrt, np.cbrt), (fl.tanh, np.tanh), (fl.arctan, np.arctan)]


def _distinct(k, x, xh):
    """Evaluate the k-th of ten expressions of distinct structure and check it."""
    f, g = _UNARY[k]
    np.testing.assert_allclose((f(x) * 3 - x).get(), g(xh) * 3 - xh, rtol=2e-5, atol=1e-6)


def test_memory_cache_is_bounded_and_evicted_kernels_rebuild(device, fresh_cache, monkeypatch):
    monkeypatch.setenv("FUSELOOP_MEMORY_CACHE_SIZE", "4")
    xh = np.linspace(0.1, 2, 40, dtype=np.float32)
    x = fl.asarray(xh)
    fl.clear_memory_cache()
    evictions = cache.memory_cache_info()["evictions"]
    for k in range(len(_UNARY)):
        _distinct(k, x, xh)
        info = cache.memory_cache_info()
        assert info["max_entries"] == 4 and 1 <= info["entries"] <= 4
        assert len(cache._memory) + len(cache._retired) <= 4
    assert cache.memory_cache_info()["evictions"] >= len(_UNARY) - 4 + evictions
    # the first kernel was dropped: it comes back from its disk entry, not from Loopy
    fl.reset_stats()
    _distinct(0, x, xh)
    s = fl.stats()
    assert s["memory_cache_misses"] == 1 and s["disk_cache_hits"] == 1
    assert s["kernels_lowered"] == 0
    # and without a disk cache it is generated again, correctly
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")
    for k in range(len(_UNARY)):
        _distinct(k, x, xh)
    fl.reset_stats()
    _distinct(1, x, xh)
    assert fl.stats()["kernels_lowered"] == 1


def test_a_retired_kernel_asked_for_again_is_kept(device, fresh_cache, monkeypatch):
    # size 4: rounds of one kernel; the fourth kernel added retires the first
    monkeypatch.setenv("FUSELOOP_MEMORY_CACHE_SIZE", "4")
    xh = np.linspace(0.1, 2, 40, dtype=np.float32)
    x = fl.asarray(xh)
    fl.clear_memory_cache()
    for k in range(4):
        _distinct(k, x, xh)
    assert len(cache._retired) == 1 and len(cache._memory) == 3
    generation = cache.memory_generation[0]
    fl.reset_stats()
    _distinct(0, x, xh)  # a plan made before the round looks its kernel up again...
    s = fl.stats()
    assert s["memory_cache_hits"] >= 1 and s["disk_cache_hits"] == 0
    assert s["kernels_compiled"] == 0 and s["kernels_lowered"] == 0
    assert cache.memory_generation[0] == generation + 1  # ...and it was the newest: kept
    fl.reset_stats()
    _distinct(4, x, xh)  # the next round drops kernel 1 (retired, not asked for)
    _distinct(1, x, xh)
    assert fl.stats()["disk_cache_hits"] == 1


def test_launch_plans_survive_eviction_rounds(device, fresh_cache, monkeypatch):
    # launch plans (structure cache, run plans) hold their kernel; every round makes
    # them look it up again, so each launch runs the kernel of its own structure
    monkeypatch.setenv("FUSELOOP_MEMORY_CACHE_SIZE", "3")
    xh = np.linspace(0.1, 2, 40, dtype=np.float32)
    x = fl.asarray(xh)
    fl.clear_memory_cache()
    out = fl.empty_like(x)
    for rep in range(3):
        for k in range(len(_UNARY)):
            f, g = _UNARY[k]
            out[...] = f(x) + rep
            np.testing.assert_allclose(out.get(), g(xh) + rep, rtol=2e-5, atol=1e-6)
            _distinct((k + 3) % len(_UNARY), x, xh)
            assert len(cache._memory) + len(cache._retired) <= 3


def test_bad_memory_cache_size_is_reported_once(monkeypatch, capsys):
    monkeypatch.setattr(cache_disk, "_warned_env", set())
    monkeypatch.setenv("FUSELOOP_MEMORY_CACHE_SIZE", "lots")
    assert cache.memory_cache_size() == cache.DEFAULT_MEMORY_CACHE_SIZE
    assert cache.memory_cache_size() == cache.DEFAULT_MEMORY_CACHE_SIZE
    err = capsys.readouterr().err
    assert err.count("FUSELOOP_MEMORY_CACHE_SIZE='lots'") == 1
    monkeypatch.setenv("FUSELOOP_MEMORY_CACHE_SIZE", "0")
    assert cache.memory_cache_size() == cache.DEFAULT_MEMORY_CACHE_SIZE
    monkeypatch.setenv("FUSELOOP_MEMORY_CACHE_SIZE", " 64 ")
    assert cache.memory_cache_size() == 64
    monkeypatch.setenv("FUSELOOP_DISK_CACHE_MAX_BYTES", "20M")
    assert cache.disk_cache_max_bytes() == 20 * 2**20
    monkeypatch.setenv("FUSELOOP_DISK_CACHE_MAX_BYTES", "0")
    assert cache.disk_cache_max_bytes() == 0  # no bound
    monkeypatch.delenv("FUSELOOP_DISK_CACHE_MAX_BYTES")
    assert cache.disk_cache_max_bytes() == cache.DEFAULT_DISK_CACHE_MAX_BYTES


def _fake_entries(directory, n, size=1000):
    """``n`` entry-named files of ``size`` bytes, oldest first (one second apart)."""
    sub = directory / f"v{cache.SCHEMA_VERSION}"
    sub.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = sub / f"{i:040x}.json"
        p.write_bytes(b"x" * size)
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
        paths.append(p)
    return paths


def test_trim_removes_least_recently_used_entries(tmp_path, monkeypatch):
    paths = _fake_entries(tmp_path, 10)
    old = tmp_path / "v1"  # older schema versions count and go too
    old.mkdir()
    (old / ("ab" * 20 + ".json")).write_bytes(b"y" * 1000)
    os.utime(old / ("ab" * 20 + ".json"), (10, 10))
    other = tmp_path / "v1" / "notes.txt"  # not fuseloop's: never touched
    other.write_bytes(b"z" * 5000)
    temp = paths[0].parent / ".tmp-left.part"  # an interrupted write, long ago
    temp.write_bytes(b"t")
    os.utime(temp, (10, 10))
    fresh_temp = paths[0].parent / ".tmp-now.part"  # a write in progress
    fresh_temp.write_bytes(b"t")
    os.utime(paths[2], None)  # read just now: the most recently used
    assert cache.trim_disk_cache(tmp_path, 20_000) == (0, 0)  # under the bound
    assert not temp.exists() and fresh_temp.exists()
    removed, freed = cache.trim_disk_cache(tmp_path, 5000)
    # down to 3/4 of the bound: the v1 entry and the oldest until 3 entries remain
    assert (removed, freed) == (8, 8000)
    assert sorted(cache.disk_entries(tmp_path)) == sorted([paths[2], paths[8], paths[9]])
    assert other.exists() and fresh_temp.exists()


def test_trim_tolerates_files_vanishing(tmp_path, monkeypatch):
    paths = _fake_entries(tmp_path, 6)
    real_scan = cache_disk._scan

    def scan_then_another_process_deletes(directory):
        found = real_scan(directory)
        paths[0].unlink()  # another process trimmed it in the meantime
        paths[3].unlink()
        return found

    monkeypatch.setattr(cache_disk, "_scan", scan_then_another_process_deletes)
    removed, freed = cache.trim_disk_cache(tmp_path, 4000)
    assert (removed, freed) == (2, 2000)  # paths 1, 2; 0 and 3 were gone already
    assert sorted(cache.disk_entries(tmp_path)) == paths[4:]
    # a reader whose entry vanished rebuilds it
    monkeypatch.setattr(cache_disk, "_scan", real_scan)
    assert cache.read_entry(paths[0]) is None


def test_disk_cache_bound_is_kept_after_writes(device, fresh_cache, monkeypatch):
    xh = np.linspace(0.1, 2, 40, dtype=np.float32)
    x = fl.asarray(xh)
    fl.clear_memory_cache()
    _distinct(0, x, xh)
    [first] = cache.disk_entries(fresh_cache)
    size = first.stat().st_size
    # room for about two entries: a trim keeps 3/4 of it, so one or two stay
    monkeypatch.setattr(cache_disk, "_written_since_trim", {})
    monkeypatch.setenv("FUSELOOP_DISK_CACHE_MAX_BYTES", str(int(2.2 * size)))
    for k in range(1, 8):
        _distinct(k, x, xh)
        held = cache.disk_entries(fresh_cache)
        assert 1 <= len(held) and sum(p.stat().st_size for p in held) <= 3.5 * size
    assert first not in cache.disk_entries(fresh_cache)
    fl.clear_memory_cache()  # the entry written last stayed
    fl.reset_stats()
    _distinct(7, x, xh)
    assert fl.stats()["disk_cache_hits"] == 1


def test_disk_cache_is_not_scanned_on_every_write(device, fresh_cache, monkeypatch):
    scans = []
    real_scan = cache_disk._scan
    monkeypatch.setattr(cache_disk, "_scan", lambda d: scans.append(d) or real_scan(d))
    monkeypatch.setattr(cache_disk, "_written_since_trim", {})
    monkeypatch.setenv("FUSELOOP_DISK_CACHE_MAX_BYTES", "64M")
    xh = np.linspace(0.1, 2, 40, dtype=np.float32)
    x = fl.asarray(xh)
    fl.clear_memory_cache()
    for k in range(5):
        _distinct(k, x, xh)
    assert len(cache.disk_entries(fresh_cache)) == 5
    assert scans == [fresh_cache]  # the process's first write only: 5 entries << 8 MiB


def test_reading_an_entry_marks_it_recently_used(device, fresh_cache):
    xh = np.linspace(0.1, 2, 40, dtype=np.float32)
    x = fl.asarray(xh)
    _evaluate_fresh(x, xh)
    [path] = cache.disk_entries(fresh_cache)
    os.utime(path, (1_000_000, 1_000_000))
    assert cache.read_entry(path) is not None  # inspecting does not count as a use
    assert path.stat().st_mtime == 1_000_000
    s = _evaluate_fresh(x, xh)
    assert s["disk_cache_hits"] == 1
    assert path.stat().st_mtime > 1_000_000


def test_a_fifo_at_an_entry_path_does_not_block(device, fresh_cache):
    import threading

    xh = np.linspace(0.1, 2, 40, dtype=np.float32)
    x = fl.asarray(xh)
    _evaluate_fresh(x, xh)
    program, bindings = linearize([_expr(x)._node], x.shape)
    recipe = fl.recipes.recipe_for(device, "elementwise")
    sizes = recipe.size_class(program, list(bindings.params), x.size, 1) \
        if recipe.size_class is not None else ""
    path = cache.entry_path(fresh_cache, cache.disk_key(program, np.dtype(np.int32), device,
                                                      recipe, sizes))
    assert cache.disk_entries(fresh_cache) == [path]
    path.unlink()
    os.mkfifo(path)
    assert cache.disk_entries(fresh_cache) == []  # not an entry
    result = {}

    def evaluate():  # (in a thread: a blocked read must fail the test, not hang it)
        result["read"] = cache.read_entry(path)
        result["stats"] = _evaluate_fresh(x, xh)

    t = threading.Thread(target=evaluate, daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():  # blocked opening or reading the FIFO: give it a writer, then fail
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(60)
        pytest.fail("reading a FIFO at a cache entry's path blocked the process")
    assert result["read"] is None
    s = result["stats"]
    assert s["disk_cache_misses"] == 1 and s["kernels_lowered"] == 1
    # the rebuilt kernel's entry replaced the FIFO with a regular file
    assert path.is_file() and cache.read_entry(path) is not None

# }}}


def test_the_code_fingerprint_covers_what_code_generation_imports():
    """A module the code generators import decides kernel source too: an edit to it must
    change the disk key (``cache._CODEGEN_PATHS``), or an editable install serves stale
    kernels.  Modules that hold no code-generation rules are named here."""
    import re
    from pathlib import Path

    root = Path(cache.__file__).parent
    covered = {p.removesuffix(".py") for p in cache._CODEGEN_PATHS}
    # (errors, counters, caches' registry, lazy imports, tuning state read at run time,
    # the runtime, the disk cache's files)
    no_codegen = {"errors", "stats", "caches", "_lazy", "recipe_state", "runtime",
                  "cache_disk"}
    missing = set()
    for package in ("lower", "recipes", "backends"):
        for f in (root / package).rglob("*.py"):
            for name in re.findall(r"^\s*from \.\.(\w+)", f.read_text(), re.M):
                if name not in covered and name not in no_codegen:
                    missing.add((f.relative_to(root).as_posix(), name))
    assert not missing, sorted(missing)
