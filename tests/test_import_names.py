"""``import fuseloop`` loads the common path only; every public name still imports (issue 26).

Each test runs a new Python process: in this one, other tests have loaded everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import fuseloop as fl

# modules that ``import fuseloop`` leaves for the first use of one of their names
LATER = ("fuseloop.explain", "fuseloop.fuse", "fuseloop.tracing", "fuseloop.fuse_graphs",
         "fuseloop.api", "fuseloop.ops.indexing", "fuseloop.ops.masks",
         "fuseloop.ops.compaction", "fuseloop.ops.scatter_kernel", "fuseloop.ops.index_keys",
         "fuseloop.host_masks")


def _run(script: str, tmp_path) -> dict:
    env = dict(os.environ, FUSELOOP_CACHE_DIR=str(tmp_path), FUSELOOP_PROGRESS="0")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_leaves_the_table_s_modules_unloaded(tmp_path):
    # (but ops.scatter_add: the ufuncs' ``fl.add.at`` is attached at import)
    table = sorted({"fuseloop" + module for module, _ in fl._ON_FIRST_USE.values()}
                   - {"fuseloop.ops.scatter_add"})
    assert "fuseloop.explain" in table and "fuseloop.ops.sorting" in table
    out = _run(f"""
        import json, sys
        import fuseloop
        print(json.dumps(sorted(m for m in {[*table, *LATER]!r} if m in sys.modules)))
    """, tmp_path)
    assert out == []


def test_every_public_name_imports(tmp_path):
    # ``from fuseloop import X`` (``__import__`` with a from-list, as the statement does)
    # for each X of __all__ and of the table of names loaded on first use, in a process
    # where none was read before; dir() lists them
    out = _run("""
        import json, types
        import fuseloop as fl
        listed = set(dir(fl))
        missing, none = [], []
        names = sorted({*fl.__all__, *fl._ON_FIRST_USE})
        for name in names:
            if name not in listed:
                missing.append(name)
            value = getattr(__import__("fuseloop", fromlist=[name]), name)
            if value is None and name != "newaxis":
                none.append(name)
        functions = ("explain", "fuse", "stats", "take", "nonzero", "synchronize")
        print(json.dumps({"missing": missing, "none": none, "n": len(names),
                          "functions": [n for n in functions if callable(getattr(fl, n))
                                        and not isinstance(getattr(fl, n), types.ModuleType)]}))
    """, tmp_path)
    assert out["missing"] == [] and out["none"] == []
    assert out["n"] == len({*fl.__all__, *fl._ON_FIRST_USE}) > 400
    assert out["functions"] == ["explain", "fuse", "stats", "take", "nonzero", "synchronize"]


def test_function_named_as_its_module_stays_the_function(tmp_path):
    # importing fuseloop.explain (fuseloop.tuner does) or fuseloop.fuse first binds the
    # module as the package's attribute, in a plain package; fl.explain stays the function
    out = _run("""
        import importlib, json
        import fuseloop as fl
        modules = [importlib.import_module(m) for m in ("fuseloop.explain", "fuseloop.fuse")]
        from fuseloop import explain
        print(json.dumps([explain is modules[0].explain, fl.fuse is modules[1].fuse,
                          fl.explain is explain]))
    """, tmp_path)
    assert out == [True, True, True]


def test_indexing_module_loads_at_the_first_index(tmp_path):
    # the stand-in the array module holds for ops.indexing's getitem gives way to the
    # function itself at its first call (no stand-in's call on later indexes)
    out = _run("""
        import json, sys
        import numpy as np
        import fuseloop as fl
        from fuseloop import array
        before = "fuseloop.ops.indexing" in sys.modules
        stand_in = array._getitem
        x = fl.asarray(np.arange(1 << 16, dtype=np.float32))
        got = x[(x > 2) & (x < 5)].get().tolist()  # (a mask: the indexing module's work)
        from fuseloop.ops import indexing
        print(json.dumps([before, got, array._getitem is indexing.getitem,
                          stand_in is not indexing.getitem]))
    """, tmp_path)
    assert out == [False, [3.0, 4.0], True, True]


def test_loopy_imports_with_the_collector_off(tmp_path):
    # the first Loopy section imports Loopy: no collection runs while its modules load
    # (they stay for the process and are frozen next), and the collector is on after
    out = _run("""
        import gc, json, sys
        from fuseloop.lower import codegen
        during = []
        def note(phase, info):  # (loopy in sys.modules without its last names: importing)
            loopy = sys.modules.get("loopy")
            if phase == "start" and loopy is not None and not hasattr(loopy, "CacheMode"):
                during.append(info["generation"])
        gc.callbacks.append(note)
        with codegen.loopy_section():
            pass
        print(json.dumps([len(during), gc.isenabled(), "loopy" in sys.modules]))
    """, tmp_path)
    assert out == [0, True, True]
