"""The benchmark suite (``fuseloop bench``): a ``--quick`` run writes well-formed reports.

Only structure and correctness checks here; timings are never asserted.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import bench
from fuseloop.bench import report
from fuseloop.bench.runner import check
from fuseloop.bench.workloads import ALL, shape_2d


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    if not fl.devices(type="cpu"):
        pytest.skip("no OpenCL CPU device")
    out = tmp_path_factory.mktemp("bench")
    with fl.device("cpu"):
        rc = bench.main(["--quick", "--out", str(out)])
    return out, rc


def _load(out: Path) -> dict[str, Any]:
    [path] = out.glob("cpu-*-suite.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_quick_run_writes_json_and_markdown(quick_run: tuple[Path, int]) -> None:
    out, rc = quick_run
    assert rc == 0
    assert len(list(out.glob("cpu-*-suite.md"))) == 1
    doc = _load(out)
    assert doc["device"]["type"] == "cpu" and doc["device"]["name"]
    assert doc["date"] and doc["versions"]["numpy"] == np.__version__
    assert {r["workload"] for r in doc["results"]} == {w.name for w in ALL}
    sizes = {r["workload"]: set() for r in doc["results"]}
    for r in doc["results"]:
        sizes[r["workload"]].add(r["size"])
    assert all(len(s) >= 2 for s in sizes.values())


def test_every_record_has_a_number_or_a_reason(quick_run: tuple[Path, int]) -> None:
    doc = _load(quick_run[0])
    for r in doc["results"]:
        if r["status"] == "ok":
            assert r["times_s"] and all(t > 0 for t in r["times_s"]), r
            assert r["median_s"] > 0 and r["throughput"] > 0, r
            assert r["correct"] in (True, False), r
        else:
            assert r["status"] in ("skipped", "error") and r["reason"], r
            assert r["median_s"] is None and r["throughput"] is None and not r["times_s"], r
    libs = {(r["workload"], r["library"]): r["status"] for r in doc["results"]}
    # the copy reference and plain element-wise fuseloop work on every device
    assert libs[("copy", "opencl enqueue_copy")] == "ok"
    assert libs[("chain-4", "fuseloop")] == "ok"
    assert libs[("chain-4", "numpy")] == "ok"
    copy = doc["copy_gb_per_s"]
    assert copy and all(v > 0 for v in copy.values())
    fl_rows = [r for r in doc["results"] if r["library"] == "fuseloop" and r["status"] == "ok"]
    assert all(r["correct"] for r in fl_rows), doc["mismatches"]
    for r in fl_rows:
        if r["unit"] == "GB/s":
            assert r["fraction_of_copy"] > 0
        assert r["speedup_vs"]["numpy"] > 0


def test_markdown_tables_are_well_formed(quick_run: tuple[Path, int]) -> None:
    out = quick_run[0]
    [md_path] = out.glob("cpu-*-suite.md")
    md = md_path.read_text(encoding="utf-8")
    doc = _load(out)
    assert "## fuseloop" in md and "## All libraries" in md
    table: list[list[str]] = []
    tables = []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            table.append(_cells(line))
        elif table:
            tables.append(table)
            table = []
    assert len(tables) == 2
    for t in tables:
        assert all(len(row) == len(t[0]) for row in t), t[0]
    summary = {(row[0], row[1]): row for row in tables[0][2:]}
    for r in doc["results"]:
        if r["library"] != "fuseloop":
            continue
        row = summary[(r["workload"], r["size_label"])]
        if r["status"] == "ok":
            assert float(row[3].split()[0]) > 0
        else:
            assert row[-1].startswith(r["status"] + ":")


def test_mismatch_is_reported_loudly(quick_run: tuple[Path, int]) -> None:
    doc = _load(quick_run[0])
    rec = next(r for r in doc["results"] if r["library"] == "numpy" and r["status"] == "ok")
    rec.update(correct=False, detail="1 of 4 elements off")
    report.annotate(doc)
    assert len(doc["mismatches"]) == 1
    md = report.markdown(doc)
    assert "RESULT MISMATCH" in md and "**MISMATCH**" in md


def test_check_and_helpers() -> None:
    want = np.linspace(0.0, 1.0, 11)
    assert check(want.astype(np.float32), want, 1e-5, 1e-6)["correct"]
    bad = want.copy()
    bad[3] += 0.1
    res = check(bad, want, 1e-5, 1e-6)
    assert not res["correct"] and "1 of 11" in res["detail"]
    assert not check(np.full(11, np.nan), want, 1e-5, 1e-6)["correct"]
    assert not check(want[:5], want, 1e-5, 1e-6)["correct"]
    assert bench.parse_sizes("2^4,100, 1e3") == [16, 100, 1000]
    assert shape_2d(2**20) == (1024, 1024) and shape_2d(2**15) == (128, 256)


# ------------------------------------------------------------------- the broad suite


@pytest.fixture(scope="module")
def broad_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], int]:
    if not fl.devices(type="cpu"):
        pytest.skip("no OpenCL CPU device")
    out = tmp_path_factory.mktemp("broad")
    with fl.device("cpu"):
        rc = bench.main(["--suite", "broad", "--quick", "--no-plot", "--no-progress",
                         "--out", str(out)])
    [path] = out.glob("cpu-*-broad.json")
    return json.loads(path.read_text(encoding="utf-8")), rc


def test_broad_suite_runs_every_workload_and_checks_it(broad_run) -> None:
    from fuseloop.bench.broad import BROAD

    doc, rc = broad_run
    assert rc == 0 and doc["settings"]["suite"] == "broad"
    assert len(BROAD) >= 30 and len({w.name for w in BROAD}) == len(BROAD)
    assert {r["workload"] for r in doc["results"]} == {"copy", *(w.name for w in BROAD)}
    by = {(r["workload"], r["library"]): r for r in doc["results"]}
    for w in BROAD:
        fl_rec, np_rec = by[(w.name, "fuseloop")], by[(w.name, "numpy")]
        assert np_rec["status"] == "ok" and np_rec["correct"], np_rec
        assert fl_rec["status"] == "ok" and fl_rec["correct"], fl_rec
        assert fl_rec["speedup_vs"]["numpy"] > 0
    assert not doc["mismatches"]
    # several outputs, integer and float64 inputs, explicit shapes
    assert by[("nbody", "fuseloop")]["shape"] == [64]
    assert by[("int-sum-rows", "fuseloop")]["work"] == 4 * 2**12 + 8 * 64


def test_broad_names_and_suites() -> None:
    from fuseloop.bench.workloads import by_name

    assert [w.name for w in by_name(["stencil"], "broad")] == [
        "copy", "stencil-1d-5", "stencil-2d", "stencil-3d"]
    with pytest.raises(ValueError, match="unknown workload"):
        by_name(["stencil-2d"], "default")
    assert len(by_name(None, "all")) == len(by_name(None, "default")) + len(
        by_name(None, "broad")) - 1


def test_peer_adapters_express_or_refuse() -> None:
    from fuseloop.bench.peers import FuseloopOps, NotExpressible, Ops, make_peers

    idx = np.array([0, 2, 2, 1, 2])
    vals = np.arange(5, dtype=np.float32)
    want = np.zeros(3, np.float32)
    np.add.at(want, idx, vals)
    np.testing.assert_array_equal(Ops(np).scatter_add(3, idx, vals), want)
    np.testing.assert_array_equal(Ops(np).scatter(5, idx[[0, 3, 1]], vals[:3]),
                                  [0, 1, 2, 0, 0])
    got = FuseloopOps(fl).scatter_add(3, fl.asarray(idx), fl.asarray(vals))
    np.testing.assert_allclose(got.get(), want)
    # a library without add.at: refused, not faked
    stub = types.SimpleNamespace(__name__="stub", zeros=np.zeros)
    with pytest.raises(NotExpressible, match=r"stub has no add\.at"):
        Ops(stub).scatter_add(3, idx, vals)
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(Ops(np).mT(x), x.T)
    np.testing.assert_array_equal(Ops(np).take(x, np.array([2, 0]), axis=0), x[[2, 0]])
    # GPU peers that are not installed are skipped with the reason, not an error
    peers, skipped = make_peers("gpu")
    names = {p.name for p in peers}
    for lib in ("torch", "cupy", "jax"):
        assert lib in skipped or any(n.startswith(lib) for n in names)
        if lib in skipped:
            assert skipped[lib]
