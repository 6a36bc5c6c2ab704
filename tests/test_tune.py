"""Recipe parameter spaces, the tuning database and ``fl.tune`` (issue 25)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import loopy as lp
import numpy as np
import pytest

import fuseloop as fl
from fuseloop import evaluate, tuning
from fuseloop.errors import RecipeError
from fuseloop.recipes import Param, Recipe, Space, cpu_chunked, gpu_coalesced, gpu_rows, select
from fuseloop.recipes.contraction import CpuBlocks, TileConfig, cpu_blocked, gpu_tiled
from fuseloop.tuner import _candidates

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    """A cache directory of the test's own (kernels and tuning database)."""
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(tmp_path))
    tuning.clear_memory()
    tuning.invalidate_plans()
    yield tmp_path
    tuning.clear_memory()
    tuning.invalidate_plans()


def _chunks(t_unit, device, *, chunk, bad):
    """One work-item per ``chunk`` elements; ``bad`` adds 1 to every result."""
    flat = select.iname(t_unit, f"tag:{select.FLAT}")
    if bad:
        knl = t_unit.default_entrypoint
        insns = [i.copy(expression=i.expression + 1) if "out0" in i.assignee_var_names()
                 else i for i in knl.instructions]
        t_unit = t_unit.with_kernel(knl.copy(instructions=insns))
    return lp.split_iname(t_unit, flat, chunk, outer_tag="g.0")


def _test_recipe(bad_space=(False,)):
    # default: 8 elements per work-item (many work-items: slow on a CPU)
    return Recipe("test-tune-chunks", _chunks, version="1",
                  params=(Param("chunk", int, 8, "elements per work-item", (8, 4096)),
                          Param("bad", bool, False, "wrong results", bad_space)))


# ------------------------------------------------------------------------------ spaces

def test_value_outside_the_space_names_recipe_parameter_and_space():
    with pytest.raises(RecipeError, match=r"'cpu-chunked'.*'chunk' = 3.*outside its space "
                                          r"\(an integer from 8"):
        cpu_chunked.with_params(chunk=3)
    with pytest.raises(RecipeError, match=r"'gpu-coalesced'.*'group' = 96.*power of two"):
        gpu_coalesced.with_params(group=96)
    with pytest.raises(RecipeError, match=r"'gpu-tiled'.*'tiles'.*tm dividing bm"):
        gpu_tiled.with_params(tiles=TileConfig(32, 32, 8, 12, 8))
    with pytest.raises(RecipeError, match=r"'gpu-rows'.*'lanes' = 3"):
        gpu_rows.with_params(lanes=3)
    with pytest.raises(RecipeError, match=r"'t'.*'mode' = 'c'.*one of 'a', 'b'"):
        Recipe("t", _chunks, params=(Param("mode", str, "a", "", ("a", "b")),),
               mode="c")
    # values inside the rule but not among the searched candidates stay allowed
    assert cpu_chunked.with_params(chunk=1000).values["chunk"] == 1000
    assert cpu_blocked.with_params(blocks=CpuBlocks(5, 32)).values["blocks"] == (5, 32, 1)


def test_every_builtin_default_is_in_its_space_and_a_candidate():
    from fuseloop.recipes import registered_recipes

    for recipe in registered_recipes().values():
        assert recipe.tunable, recipe.name
        for name, p in recipe.tunable.items():
            assert recipe.values[name] in p.space, (recipe.name, name)
            assert all(c in p.space for c in p.space.candidates), (recipe.name, name)


def test_valid_hook_filters_candidates(cpu):
    recipe = Recipe("t", _chunks, params=(Param("chunk", int, 8, "", (8, 64, 4096)),
                                          Param("bad", bool, False, "", (False,))),
                    valid=lambda v, device: v["chunk"] != 64)
    combos = _candidates(recipe, cpu, random.Random(0))
    assert combos[0] == {"chunk": 8, "bad": False}
    assert {c["chunk"] for c in combos} == {8, 4096}
    big = gpu_coalesced.values | {"group": 1024}
    assert gpu_coalesced.allows(big, cpu) == (1024 <= cpu.max_work_group_size)


def test_cpu_rows_never_tries_more_accumulators_than_vector_lanes(cpu):
    # accumulators=16 with vector_math indexed past the 8-lane arrays: wrong results
    # for softmax rows, and a crash of the process
    from fuseloop.recipes import cpu_rows
    from fuseloop.recipes.cpu_vector import LANES

    combos = _candidates(cpu_rows, cpu, random.Random(0))
    assert any(c["accumulators"] > LANES for c in combos)
    assert not any(c["vector_math"] and c["accumulators"] > LANES for c in combos)


def test_space_from_a_tuple():
    p = Param("x", int, 1, "", (1, 2))
    assert isinstance(p.space, Space) and 2 in p.space and 3 not in p.space
    assert True not in p.space  # (True == 1, but it is not an int value of the space)


# ---------------------------------------------------------------------- tune and database

def test_tune_finds_a_winner_with_the_same_result_and_stores_it(cpu, tuning_dir,
                                                               monkeypatch):
    from fuseloop import tuner as tune_module

    real = tune_module._timed

    def timed(launch, recipe, repeat, cutoff=float("inf")):
        # runs for real; the time is made up (this machine's noise is larger than what a
        # chunk size changes): the search, the check and the database are under test
        real(launch, recipe, 1)
        return 1e-3 if recipe.values["chunk"] == 4096 else 2e-3

    monkeypatch.setattr(tune_module, "_timed", timed)
    h = np.random.default_rng(0).random(1 << 18, dtype=np.float32)
    x = fl.asarray(h)
    with fl.recipes.use(_test_recipe()):
        report = fl.tune(fl.exp(x) * 2 + x, budget_s=60, progress=False)
        k, = report.kernels
        assert k.candidates == 2 and k.failed == k.wrong == 0
        assert k.best == {"chunk": 4096} and k.stored  # (bad: one value, not searched)
        assert k.best_s == 1e-3 and k.default_s == 2e-3 and k.speedup == 2
        assert "stored" in report.as_text()
        # the winner applies to the next evaluation, with the same result
        ex = fl.explain(fl.exp(x) * 2 + x)
        assert ex.kernels[0].params["chunk"] == (4096, "database")
        got = (fl.exp(x) * 2 + x).get()
    np.testing.assert_allclose(got, np.exp(h) * 2 + h, rtol=1e-6)
    files = list((tuning_dir / "tuning").iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"  # no temporary file left
    data = json.loads(files[0].read_text())
    (key, entry), = data["entries"].items()
    assert key.startswith("test-tune-chunks|1|") and entry["params"]["chunk"] == 4096



def test_a_slow_candidate_is_not_timed_further(cpu, tuning_dir, monkeypatch):
    from fuseloop import tuner as tune_module

    runs = {8: 0, 4096: 0}

    def one_run(launch, recipe):
        # runs for real; the time is made up: chunk=4096 is 10x slower than the default
        chunk = recipe.values["chunk"]
        runs[chunk] += 1
        tune_module._run(launch, recipe)
        return 1e-2 if chunk == 4096 else 1e-3

    monkeypatch.setattr(tune_module, "_one_run", one_run)
    x = fl.asarray(np.arange(1 << 12, dtype=np.float32))
    with fl.recipes.use(_test_recipe()):
        k, = fl.tune(x * 2 + 1, budget_s=60, progress=False, repeat=5).kernels
    # the default: a warm-up and 5 timed runs; the slow candidate: its warm-up only
    assert runs == {8: 6, 4096: 1}
    assert k.candidates == 2 and not k.best and not k.stored

def test_candidate_with_wrong_results_is_rejected(cpu, tuning_dir):
    x = fl.asarray(np.linspace(0, 1, 1 << 18, dtype=np.float32))
    # bad=True adds 1: its results are checked before it is timed, so it never wins
    recipe = Recipe("test-tune-bad", _chunks, version="1",
                    params=(Param("chunk", int, 8, "", (8,)),
                            Param("bad", bool, False, "", (False, True))))
    with fl.recipes.use(recipe):
        report = fl.tune(x * 3 + 1, budget_s=60, progress=False)
    k, = report.kernels
    assert k.candidates == 2 and k.wrong == 1 and not k.best and not k.stored
    assert not (tuning_dir / "tuning").exists()


def test_tune_a_function_finds_its_kernels(cpu, tuning_dir):
    x = fl.asarray(np.arange(4096, dtype=np.float32).reshape(64, 64))

    def fn(a):
        t = (a * 2).eval()  # evaluated inside: recorded, not run
        return fl.sqrt(t) + 1  # lazy: evaluated by the recording too

    with fl.recipes.use(_test_recipe()):
        report = fl.tune(fn, x, budget_s=60, progress=False, store=False)
        assert [k.candidates for k in report.kernels] == [2, 2]
        assert not any(k.stored or k.wrong or k.failed for k in report.kernels)
        got = fn(x).get()
    np.testing.assert_allclose(got, np.sqrt(np.arange(4096).reshape(64, 64) * 2) + 1,
                               rtol=1e-6)
    with pytest.raises(TypeError, match="array expression or a function"):
        fl.tune(3)


def test_failing_candidate_is_counted_and_skipped(cpu, tuning_dir):
    def broken(t_unit, device, *, chunk):
        if chunk == 64:
            raise RecipeError("this candidate cannot be built")
        return lp.split_iname(t_unit, select.iname(t_unit, f"tag:{select.FLAT}"), chunk,
                              outer_tag="g.0")

    recipe = Recipe("test-tune-broken", broken, params=(Param("chunk", int, 4096, "",
                                                              (4096, 64)),))
    x = fl.asarray(np.ones(1 << 12, np.float32))
    with fl.recipes.use(recipe):
        k, = fl.tune(x + 1, budget_s=60, progress=False).kernels
    assert k.candidates == 2 and k.failed == 1 and not k.stored


def _child(cache_dir: Path, script: str) -> dict:
    env = dict(os.environ, FUSELOOP_CACHE_DIR=str(cache_dir),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_database_round_trip_in_a_later_process(cpu, tuning_dir):
    x = fl.asarray(np.arange(1 << 14, dtype=np.float32))
    program = fl.program(x * 2 + 1)
    ex = fl.explain(x * 2 + 1)
    assert ex.kernels[0].params["chunk"][1] == "default"
    index_dtype, recipe, n_rows, n_elem = evaluate.launch_choice(
        program.program, program.bindings, cpu)
    key = tuning.entry_key(recipe, tuning.structure_key(program.program, index_dtype),
                           tuning.bucket(program.bindings.params, n_rows, n_elem))
    tuning.store(cpu, key, {"recipe": recipe.name, "version": recipe.version,
                            "bucket": "-", "params": {"chunk": 1024}})
    res = _child(tuning_dir, """
        import json, numpy as np, fuseloop as fl
        from fuseloop import evaluate, tuning
        fl.set_device("cpu")
        x = fl.asarray(np.arange(1 << 14, dtype=np.float32))
        ex = fl.explain(x * 2 + 1)
        same = bool(np.array_equal((x * 2 + 1).get(), np.arange(1 << 14) * 2 + 1))
        other = fl.explain(fl.asarray(np.ones(1 << 20, np.float32)) * 2 + 1)
        print(json.dumps({"chunk": ex.kernels[0].params["chunk"], "same": same,
                          "grid": ex.kernels[0].grid[0],
                          "other": other.kernels[0].params["chunk"]}))
    """)
    assert res["chunk"] == [1024, "database"] and res["same"]
    assert res["grid"] == [(1 << 14) // 1024]  # the kernel is the winner's
    assert res["other"][1] == "default"  # another size bucket: not tuned


def test_cached_launches_do_not_consult_the_database(cpu, tuning_dir, restore_recipes):
    x = fl.asarray(np.ones(1 << 12, np.float32))
    y = fl.asarray(np.ones((64, 64), np.float32))
    tuning.store(cpu, "no-such-recipe|1|0|0", {"params": {}})  # the database has entries
    start = tuning.lookups[0]
    (x * 2 + 1).eval()
    (y * 3).sum(axis=1).eval()
    before = tuning.lookups[0]
    assert before > start  # a new kernel's plan looks the database up
    for _ in range(20):
        (x * 2 + 1).eval()
        (y * 3).sum(axis=1).eval()
    fl.synchronize()
    assert tuning.lookups[0] - before <= 2
    fl.clear_caches()  # (registered: forgets the database read)
    assert tuning._dbs == {}


def test_cli_tune_show_and_clear(cpu, tuning_dir):
    from fuseloop.cli import main

    tuning.store(cpu, "cpu-chunked|4|abc|1.2.3", {"recipe": "cpu-chunked", "version": "4",
                                                  "bucket": "1.2.3",
                                                  "params": {"chunk": 1024},
                                                  "default_s": 2.0, "best_s": 1.0})
    res = _child(tuning_dir, """
        import contextlib, io, json
        import fuseloop as fl
        from fuseloop.cli import main
        fl.set_device("cpu")  # (where the entry was stored, whatever FUSELOOP_DEVICE says)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            main(["tune", "--show"])
        print(json.dumps(buf.getvalue()))
    """)
    assert "1 entries" in res and "chunk=1024 2.00x" in res
    assert main(["tune", "--clear"]) == 0
    assert tuning.entries(cpu) == {} and not list((tuning_dir / "tuning").glob("*.json"))


def test_a_huge_space_is_sampled_not_enumerated(cpu):
    import random

    from fuseloop import tuner as tune_module
    from fuseloop.recipes.rows import gpu_rows

    space = gpu_rows.tunable
    assert np.prod([len(space[n].space.candidates) for n in space], dtype=float) > 1e7
    combos = tune_module._candidates(gpu_rows, cpu, random.Random(0))
    assert len(combos) == tune_module.MAX_CANDIDATES
    assert combos[0] == {n: gpu_rows.values[n] for n in space}
    assert len({tuple(sorted(c.items())) for c in combos}) == len(combos)
    for c in combos:
        assert all(v in space[n].space for n, v in c.items())
        assert gpu_rows.allows({**gpu_rows.values, **c}, cpu)


def test_a_parameter_the_kernel_does_not_read_is_not_searched(cpu, tuning_dir):
    """``unused`` changes nothing in this kernel (found by one recipe transform per
    value, tuner._read_names): no candidate is built for it."""
    def chunks(t_unit, device, *, chunk, unused):
        return _chunks(t_unit, device, chunk=chunk, bad=False)

    recipe = Recipe("test-tune-unused", chunks, version="1",
                    params=(Param("chunk", int, 8, "", (8, 4096)),
                            Param("unused", int, 1, "a parameter this kernel ignores",
                                  (1, 2, 3))))
    x = fl.asarray(np.arange(1 << 12, dtype=np.float32))
    with fl.recipes.use(recipe):
        k, = fl.tune(x * 2 + 1, budget_s=60, progress=False).kernels
    assert k.candidates == 2 and k.same_code == 0  # the default and chunk=4096
    with fl.recipes.use(recipe.with_params(chunk=4096)):
        k, = fl.tune(x * 2 + 1, budget_s=60, progress=False).kernels
    assert k.candidates == 2


def test_a_candidate_generating_the_same_code_is_not_run_again(cpu, tuning_dir):
    """Each parameter alone changes the kernel (``max(a, b)`` elements a work-item), so
    both are searched; of (64, 8), (8, 64) and (64, 64), all 64 a work-item, the first
    tried is built and run, the other two generate its code again."""
    def chunks(t_unit, device, *, a, b):
        return _chunks(t_unit, device, chunk=max(a, b), bad=False)

    recipe = Recipe("test-tune-same", chunks, version="1",
                    params=(Param("a", int, 8, "", (8, 64)), Param("b", int, 8, "", (8, 64))))
    x = fl.asarray(np.arange(1 << 12, dtype=np.float32))
    with fl.recipes.use(recipe):
        k, = fl.tune(x * 2 + 1, budget_s=60, progress=False).kernels
    assert k.candidates == 4 and k.same_code == 2
    assert "2 same code" in k.as_text()
