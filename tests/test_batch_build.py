"""The new kernels of one evaluation built together: one program per preamble
(fuseloop.batch_build), found again on disk by any of its kernels, a failing kernel
built alone."""

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
from fuseloop import batch_build
from fuseloop.cache_disk import KernelPlan
from fuseloop.errors import KernelBuildError
from fuseloop.lower import codegen

REPO = Path(__file__).resolve().parent.parent
LENGTHS = (300, 277, 254, 231)


def _inputs() -> list[np.ndarray]:
    return [np.linspace(-1, 1, n).astype(np.float32) for n in LENGTHS]


def _exprs(xs: list) -> list:
    """One expression per length, each of another depth: four different kernels."""
    out = []
    for k, x in enumerate(xs):
        r = x
        for _ in range(k + 1):
            r = fl.sin(r) * 0.5 + r
        out.append(r)
    return out


def _expected(hosts: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for k, x in enumerate(hosts):
        r = x
        for _ in range(k + 1):
            r = np.sin(r) * np.float32(0.5) + r
        out.append(r)
    return out


def _fresh_compute() -> tuple[list[np.ndarray], list, list, dict]:
    """The four kernels' ``fl.compute`` with empty caches: inputs on the host and on the
    device, the results, and the stats of that call."""
    hosts = _inputs()
    xs = [fl.asarray(h) for h in hosts]
    fl.clear_caches()
    fl.reset_stats()
    results = fl.compute(*_exprs(xs))
    return hosts, xs, results, fl.stats()


@pytest.fixture
def joined(device, monkeypatch):
    """The device's backend joins a call's new kernels into one program (by default
    only PoCL's CPU device does: Backend.joins_kernels), so that the joining is tested
    on every device, a GPU's compiler taking the joined source too."""
    from fuseloop.backends import backend_for

    monkeypatch.setattr(type(backend_for(device)), "joins_kernels", lambda self, d: True)
    return device


@pytest.fixture(params=["process", "inline"])
def compile_mode(request, monkeypatch):
    monkeypatch.setenv("FUSELOOP_COMPILE", request.param)
    return request.param


def test_a_calls_new_kernels_are_one_program(joined, compile_mode, monkeypatch,
                                             tmp_path):
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    hosts, xs, results, s = _fresh_compute()
    assert s["kernels_lowered"] == 4 and s["kernels_compiled"] == 4
    assert s["programs_built"] == 1  # (at the session start: 4)
    assert s["memory_cache_misses"] == 4 and s["memory_cache_hits"] == 0
    for got, want in zip(results, _expected(hosts)):
        np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-6)
    # each kernel has a disk entry of its own, holding the program and its name there
    entries = [json.loads(p.read_text()) for p in tmp_path.rglob("*.json")]
    assert len(entries) == 4
    names = {e["plan"]["name"] for e in entries}
    assert len(names) == 4 and len({e["plan"]["source"] for e in entries}) == 1
    assert all(e["plan"]["source"].count(name) == 1 for e in entries for name in names)
    # again: all cached, nothing built
    fl.reset_stats()
    again = fl.compute(*_exprs(xs))
    assert fl.stats()["programs_built"] == 0 and fl.stats()["memory_cache_misses"] == 0
    for got, want in zip(again, _expected(hosts)):
        np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-6)


CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import fuseloop as fl
    from fuseloop.backends import backend_for
    from test_batch_build import _inputs, _exprs, _expected
    type(backend_for(fl.get_device())).joins_kernels = lambda self, d: True
    hosts = _inputs()
    results = fl.compute(*_exprs([fl.asarray(h) for h in hosts]))
    ok = all(np.allclose(r.get(), w, rtol=1e-5, atol=1e-6)
             for r, w in zip(results, _expected(hosts)))
    print(json.dumps({"ok": ok, "stats": fl.stats()}))
""")


def _child(cache_dir: Path) -> dict:
    env = dict(os.environ, FUSELOOP_CACHE_DIR=str(cache_dir), FUSELOOP_PROGRESS="0")
    out = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "tests")], env=env,
                         capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_later_process_finds_a_programs_kernels_on_disk(tmp_path):
    first = _child(tmp_path)
    assert first["ok"] and first["stats"]["programs_built"] == 1
    assert first["stats"]["kernels_lowered"] == 4
    second = _child(tmp_path)
    assert second["ok"]
    s = second["stats"]
    assert s["disk_cache_hits"] == 4 and s["disk_cache_misses"] == 0
    assert s["kernels_lowered"] == 0
    # the first entry read builds the program; the other three share that build
    assert s["kernels_compiled"] == 1


def test_a_failing_kernel_is_built_alone_and_the_others_are_cached(joined, compile_mode,
                                                                  monkeypatch):
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")
    real = codegen.kernel_plan
    bad_depth = 3  # the third kernel (3 sines) fails to compile

    def plan(program, *args, **kwargs):
        made = real(program, *args, **kwargs)
        if sum(e.kind == "op" and e.name == "sin" for e in program.entries) == bad_depth:
            body = made.source.index("{", made.source.index(made.name))
            made.source = made.source[:body + 1] + " fl_not_c_at_all + ;" + \
                made.source[body + 1:]
        return made

    monkeypatch.setattr(codegen, "kernel_plan", plan)
    hosts = _inputs()
    xs = [fl.asarray(h) for h in hosts]
    fl.clear_caches()
    fl.reset_stats()
    with pytest.raises(KernelBuildError) as info:
        fl.compute(*_exprs(xs))
    assert "fl_not_c_at_all" in (info.value.source or "")
    assert "fuseloop_kernel" in str(info.value)
    s = fl.stats()
    # the program of four failed; each alone: three built, the bad one again when launched
    assert s["programs_built"] == 3 and s["kernels_compiled"] == 3
    fl.reset_stats()
    good = [e for k, e in enumerate(_exprs(xs)) if k != bad_depth - 1]
    results = fl.compute(*good)
    assert fl.stats()["programs_built"] == 0 and fl.stats()["memory_cache_misses"] == 0
    want = [w for k, w in enumerate(_expected(hosts)) if k != bad_depth - 1]
    for got, w in zip(results, want):
        np.testing.assert_allclose(got.get(), w, rtol=1e-5, atol=1e-6)


def _plan(name: str, source: str, options: tuple[str, ...] = ()) -> KernelPlan:
    return KernelPlan(name=name, source=source, arg_names=["out0", "N"], gsize=["N"],
                      lsize=["1"], build_options=list(options), arg_dtypes=[None, "int32"])


PRE = "#define lid(N) ((int) get_local_id(N))\nstatic inline float fl_h(float a) { return a; }\n"
BODY = "__kernel void {name}(__global float *out0, int const N)\n{{\n  out0[0] = {v};\n}}\n"


def test_kernels_group_by_preamble_and_options():
    macros = "#define lid(N) ((long) get_local_id(N))\n#ifndef FL_Q\n#define FL_Q 1\n#endif\n"
    plans = [_plan("k", PRE + BODY.format(name="k", v=1)),
             _plan("k", PRE + BODY.format(name="k", v=2)),
             _plan("k", macros + BODY.format(name="k", v=3)),
             _plan("k", PRE + BODY.format(name="k", v=4), ("-cl-fast-relaxed-math",)),
             # a macro in the body would reach the kernels after it: alone
             _plan("k", PRE + BODY.format(name="k", v=5).replace("{\n", "{\n#define Q 1\n")),
             _plan("k", PRE + BODY.format(name="k", v=6)),
             # another preamble defining functions (two might define one name): apart
             _plan("k", PRE.replace("fl_h", "fl_g") + BODY.format(name="k", v=7))]
    assert batch_build.group(plans) == [[0, 1, 2, 5], [3], [6], [4]]
    shared = batch_build.combine([plans[2], plans[0], plans[1], plans[5]])
    assert [p.name for p in shared] == ["k_b0", "k_b1", "k_b2", "k_b3"]
    source = shared[0].source
    assert all(p.source == source for p in shared)
    # the preamble defining functions first, with its kernels; each preamble's macros
    # undefined after its kernels, so the next preamble's kernels see their own only
    assert source.count("fl_h(float a)") == 1 and source.startswith(PRE)
    first = "".join(BODY.format(name=f"k_b{k}", v=v) + "\n" for k, v in ((1, 1), (2, 2), (3, 6)))
    second = BODY.format(name="k_b0", v=3) + "\n"
    assert source == (PRE + first + "#undef lid\n" + macros + second
                      + "#undef lid\n#undef FL_Q\n")
    assert shared[1].arg_names == plans[0].arg_names and shared[1].gsize == plans[0].gsize


def test_a_kernel_of_a_program_is_shown_alone():
    """A disk entry holds its program's source: the kernel it names is shown with its own
    preamble and body (fl.show_code after a disk hit showed the program's other kernels)."""
    macros = "#define lid(N) ((long) get_local_id(N))\n"
    plans = [_plan("k", macros + BODY.format(name="k", v=3)),
             _plan("k", PRE + BODY.format(name="k", v=1)),
             _plan("k", PRE + BODY.format(name="k", v=2))]
    shared = batch_build.combine(plans)
    assert [batch_build.shown_alone(p).source for p in shared] == [
        macros + BODY.format(name="k_b0", v=3), PRE + BODY.format(name="k_b1", v=1),
        PRE + BODY.format(name="k_b2", v=2)]
    assert batch_build.shown_alone(plans[0]) is plans[0]  # (one kernel: as it is)


@pytest.mark.opencl_only  # (counts OpenCL kernels in the source)
def test_a_kernel_found_on_disk_shows_its_own_source(joined, monkeypatch, tmp_path):
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    _, xs, _, _ = _fresh_compute()
    fl.clear_caches()  # (the memory cache: the kernels are found on disk)
    fl.reset_stats()
    src = fl.show_code(_exprs(xs)[2])
    assert fl.stats()["disk_cache_hits"] == 1
    assert src.count("__kernel") == 1, src


def test_a_group_holds_at_most_so_many_kernels():
    plans = [_plan("k", PRE + BODY.format(name="k", v=v)) for v in range(5)]
    assert batch_build.group(plans, 2) == [[0, 1], [2, 3], [4]]
    assert batch_build.group(plans, 1) == [[0], [1], [2], [3], [4]]
    assert batch_build.group(plans) == [[0, 1, 2, 3, 4]]


def test_a_reduction_and_its_elementwise_kernel_share_a_program(joined, monkeypatch):
    # x * 3 - mean(x): the reduction's kernel (index macros of int64, Loopy's helper
    # functions) and the elementwise one (index macros of int32) have other preambles;
    # one program holds both, each kernel seeing its own macros
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")
    host = np.random.default_rng(5).random(1 << 16).astype(np.float32)
    x = fl.asarray(host)
    fl.clear_caches()
    fl.reset_stats()
    got = (x * 3 - fl.mean(x)).get()
    s = fl.stats()
    assert s["kernels_compiled"] >= 2 and s["programs_built"] < s["kernels_compiled"]
    if joined.type == "cpu":
        assert s["programs_built"] == 1  # (at the session start: 2)
    np.testing.assert_allclose(got, host * 3 - host.mean(dtype=np.float64), rtol=1e-5,
                               atol=1e-5)


def test_a_driver_whose_cost_is_per_kernel_gets_a_program_each(device, monkeypatch):
    # (NVIDIA's compiler: one program of eight kernels took longer than eight programs
    # in two compile workers; Backend.joins_kernels says which way a device goes)
    from fuseloop.backends import backend_for

    backend = backend_for(device)
    monkeypatch.setattr(type(backend), "joins_kernels", lambda self, d: False)
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")
    hosts, _, results, s = _fresh_compute()
    assert s["programs_built"] == 4 and s["kernels_compiled"] == 4
    for got, want in zip(results, _expected(hosts)):
        np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.opencl_only
def test_pocls_cpu_device_joins_kernels_a_gpu_does_not(device):
    import dataclasses

    from fuseloop.backends import backend_for

    backend = backend_for(device)
    if device.type == "cpu" and device.runtime.startswith("PoCL"):
        assert backend.joins_kernels(device)
    assert not backend.joins_kernels(dataclasses.replace(device, type="gpu"))
