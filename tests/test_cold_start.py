"""Time to first result: what ``import fuseloop`` and a disk-cache hit load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache

# the code generator and what only it needs: loaded on a kernel cache miss only
GENERATOR = ("loopy", "islpy", "pymbolic")

EVALUATE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import fuseloop as fl
    x = fl.asarray(np.linspace(0, 1, 64, dtype=np.float32))
    m = fl.asarray(np.ones((8, 8), np.float32))
    values = [(fl.sin(x) * 2 + x).get(), fl.sum(x * x).get(), fl.exp(m).sum(axis=1).get()]
    expected = [np.sin(x.get()) * 2 + x.get(), np.sum(x.get() ** 2),
                np.exp(np.ones((8, 8), np.float32)).sum(axis=1)]
    ok = all(np.allclose(v, e, rtol=1e-5) for v, e in zip(values, expected))
    from fuseloop.runtime import compile_workers
    from fuseloop.backends import worker_builders
    print(json.dumps({"ok": ok, "lowered": fl.stats()["kernels_lowered"],
                      "loaded": [m for m in GENERATOR if m in sys.modules],
                      "codegen": "fuseloop.lower.codegen" in sys.modules,
                      "workers": compile_workers._pool.started, "builders": worker_builders(),
                      "backend": x.device.backend,
                      "backends": sorted(m.rpartition(".")[2] for m in sys.modules
                                         if m.startswith("fuseloop.backends."))}))
""").replace("GENERATOR", repr(GENERATOR))


def _child(script: str, cache_dir: str, **env_vars: str) -> dict:
    env = dict(os.environ, FUSELOOP_CACHE_DIR=cache_dir, FUSELOOP_PROGRESS="0", **env_vars)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loaded(watched: tuple[str, ...]) -> str:
    # a child's line: which of ``watched`` (packages: with their submodules) it loaded
    return (f"import json, sys; watched = {watched!r}\n"
            "print(json.dumps({'loaded': sorted(m for m in sys.modules if m in watched or "
            "m.startswith(tuple(w + '.' for w in watched)))}))")


def test_import_loads_no_code_generator(tmp_path):
    # nor the recipes and the lowering (they load with the first kernel not in the
    # cache: issue 26), nor the OpenCL runtime (pyopencl loads with the first device
    # use), nor pytools (a contraction's lowering needs its tags)
    watched = (*GENERATOR, "pyopencl", "pytools", "fuseloop.recipes", "fuseloop.lower")
    assert _child("import fuseloop\n" + _loaded(watched), str(tmp_path))["loaded"] == []


def test_names_load_on_first_use(tmp_path):
    # names whose modules ``import fuseloop`` leaves for later: reading one loads it
    script = textwrap.dedent("""
        import json, sys
        import numpy as np
        import fuseloop as fl
        later = sorted(m for m in ("fuseloop.fft", "fuseloop.ops.sorting", "fuseloop.stages")
                       if m in sys.modules)
        from fuseloop import fft, sort
        import fuseloop.lower.codegen  # (after fl.stats, the function, is bound)
        from fuseloop.tuner import tune  # imports fuseloop.explain, a module named as fl.explain
        ok = (sort is fl.sort and fft is sys.modules["fuseloop.fft"] and fl.linalg is fl.linalg
              and callable(fl.stats) and callable(fl.explain) and callable(fl.fuse)
              and {"sort", "fft", "linalg", "recipes", "sum", "tune"} <= set(dir(fl))
              and fl.recipes.recipe_for is fl.recipe_for and tune is fl.tune)
        from fuseloop.interop import _lookup  # (numpy's functions on arrays dispatch here)
        ok = ok and all(_lookup(f) is not None for f in (np.einsum, np.fft.fft, np.linalg.norm))
        try:
            fl.sortt
        except AttributeError as e:
            ok = ok and "did you mean sort" in str(e)
        print(json.dumps({"later": later, "ok": ok}))
    """)
    out = _child(script, str(tmp_path))
    assert out == {"later": [], "ok": True}


@pytest.mark.parametrize("host_path", ["1", "0"])
def test_disk_cache_hit_loads_no_code_generator(tmp_path, host_path):
    # (with the host path off a CPU device launches kernels as a GPU does, so the recipes
    # the kernels name are loaded: they must not import the code generator either)
    first = _child(EVALUATE, str(tmp_path), FUSELOOP_HOST_PATH=host_path)
    assert first["ok"] and first["lowered"] >= 3
    assert "loopy" in first["loaded"]  # a miss generates code
    second = _child(EVALUATE, str(tmp_path), FUSELOOP_HOST_PATH=host_path)
    assert second["ok"] and second["lowered"] == 0
    assert second["loaded"] == []
    # nor the code generator's steps (lowering, recipe, Loopy: fuseloop.lower.codegen),
    # nor does it start a compile worker (the first miss does); the recipes load (their
    # parameters are part of the keys), with the names of the lowering they import
    assert first["codegen"] and not second["codegen"]
    assert second["workers"] == 0
    # the worker the miss started loads the builders of the backends in use only (naming
    # every backend's imported the CUDA backend, and CuPy, into an OpenCL-only process;
    # the parent may have imported the CUDA backend's module to discover devices, when
    # FUSELOOP_DEVICE does not name one)
    assert first["backend"] == "cuda" or not any("cuda" in b for b in first["builders"])
    assert "opencl" not in first["backend"] or any("opencl" in b for b in first["builders"])


def _unusual(x: fl.Array, k: int) -> fl.Array:
    # a structure no other test builds, so that evaluating it builds a kernel
    return ((x * 3 + 1) ** 2 - fl.floor(x * k)) / (fl.abs(fl.tanh(x)) + 9) - fl.arcsinh(x)


def _expected(xh: np.ndarray, k: int) -> np.ndarray:
    return ((xh * 3 + 1) ** 2 - np.floor(xh * k)) / (np.abs(np.tanh(xh)) + 9) - np.arcsinh(xh)


def test_slow_build_says_so_once(monkeypatch, capsys, tmp_path, device):
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSELOOP_PROGRESS", "1")
    monkeypatch.setattr(cache, "PROGRESS_AFTER_S", 0.0)  # every build is slow
    xh = np.linspace(-2, 2, 50, dtype=np.float32)
    x = fl.asarray(xh)
    np.testing.assert_allclose(_unusual(x, 2).get(), _expected(xh, 2), rtol=1e-5, atol=1e-6)
    err = capsys.readouterr().err
    assert err.count("fuseloop: building a kernel") == 1, err
    assert device.name in err
    np.testing.assert_allclose(_unusual(x, 5).get(), _expected(xh, 5), rtol=1e-5, atol=1e-6)
    assert "building" not in capsys.readouterr().err  # (the same kernel: no build)


def test_progress_line_can_be_turned_off(monkeypatch, capsys, tmp_path, device):
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSELOOP_PROGRESS", "0")
    monkeypatch.setattr(cache, "PROGRESS_AFTER_S", 0.0)
    xh = np.linspace(-2, 2, 50, dtype=np.float32)
    got = fl.sqrt(_unusual(fl.asarray(xh), 3) + 4).get()
    np.testing.assert_allclose(got, np.sqrt(_expected(xh, 3) + 4), rtol=1e-5, atol=1e-6)
    assert "building" not in capsys.readouterr().err
