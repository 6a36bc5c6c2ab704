"""Kernel cache: structural keys, memory and disk layers, corruption handling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import fuseloop as fl
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
    assert "__kernel" in err and "fl_cos_f32" in err
    _res, err = run_child(tmp_path / "c", {"FUSELOOP_SHOW_KERNELS": "1"})
    assert "__kernel" not in err  # nothing new was generated


def test_memory_cache_across_sizes_and_shapes(device):
    fl.clear_memory_cache()
    fl.reset_stats()
    for shape in [(10,), (1000,), (7, 9)]:
        x = fl.asarray(np.ones(shape, np.float32))
        (x * 2 + 1).get()
    s = fl.stats()
    assert s["memory_cache_misses"] == 1 and s["memory_cache_hits"] == 2


def test_recipe_registry_is_extensible(device):
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
        assert fl.recipe_for(device).cache_id == ("test-recipe", "7")
    finally:
        fl.register_recipe(kind, old.transform, name=old.name, version=old.version)
