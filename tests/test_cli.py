"""Command line: ``fuseloop cache info``, ``fuseloop cache clear``, ``fuseloop bench``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import cache
from fuseloop.cli import main


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    directory = tmp_path / "kernels"
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", str(directory))
    return directory


def fill(directory) -> list:
    """Evaluate two new kernels so that ``directory`` holds two entries."""
    fl.clear_memory_cache()
    x = fl.asarray(np.arange(8, dtype=np.float32))
    (fl.cbrt(x) + 1).get()
    (fl.cbrt(x) * fl.expm1(x)).get()
    entries = cache.disk_entries(directory)
    assert len(entries) == 2
    return entries


def info_json(capsys) -> dict:
    capsys.readouterr()
    assert main(["cache", "info", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cache_info_of_a_directory_that_does_not_exist(cache_env, capsys):
    info = info_json(capsys)
    assert info["directory"] == str(cache_env) and not info["exists"]
    assert info["entries"] == 0 and info["total_bytes"] == 0
    assert info["schema_version"] == cache.SCHEMA_VERSION and not info["disabled"]
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_env) in out and "does not exist" in out and "entries:        0" in out


def test_cache_info_counts_entries_and_size(device, cache_env, capsys):
    entries = fill(cache_env)
    info = info_json(capsys)
    assert info["entries"] == 2 and info["current_schema_entries"] == 2
    assert info["total_bytes"] == sum(p.stat().st_size for p in entries)
    old = cache_env / "v1"  # an entry of an older schema still counts
    old.mkdir()
    (old / ("ab" * 20 + ".json")).write_text("{}")
    info = info_json(capsys)
    assert info["entries"] == 3 and info["current_schema_entries"] == 2
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"schema version: {cache.SCHEMA_VERSION}" in out
    assert "entries:        3 (1 from older schema versions)" in out


def test_cache_clear_removes_only_fuseloops_files(device, cache_env, capsys):
    entries = fill(cache_env)
    current = entries[0].parent
    leftover = current / ".tmp-abc123.part"  # an interrupted write
    leftover.write_text("partial")
    foreign = [cache_env / "notes.txt", current / "README", current / "mine.json",
               cache_env / "other" / ("cd" * 20 + ".json")]
    for f in foreign:
        f.parent.mkdir(exist_ok=True)
        f.write_text("keep me")
    capsys.readouterr()
    assert main(["cache", "clear"]) == 0
    assert "removed 2 kernel cache entries" in capsys.readouterr().out
    assert not any(p.exists() for p in entries) and not leftover.exists()
    assert all(f.read_text() == "keep me" for f in foreign)
    assert info_json(capsys)["entries"] == 0
    # the next evaluation rebuilds and writes again
    fl.clear_memory_cache()
    fl.reset_stats()
    x = fl.asarray(np.arange(8, dtype=np.float32))
    np.testing.assert_allclose((fl.cbrt(x) + 1).get(), np.cbrt(np.arange(8)) + 1, rtol=1e-6)
    assert fl.stats()["disk_cache_misses"] == 1
    assert len(cache.disk_entries(cache_env)) == 1


def test_cache_clear_removes_empty_schema_folders(device, cache_env, capsys):
    fill(cache_env)
    assert main(["cache", "clear"]) == 0
    assert list(cache_env.iterdir()) == []  # the directory itself stays


def test_cache_clear_of_a_missing_directory(cache_env, capsys):
    assert main(["cache", "clear"]) == 0
    assert "removed 0 kernel cache entries" in capsys.readouterr().out
    assert not cache_env.exists()  # not created either


def test_cache_commands_when_disabled(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")
    assert main(["cache", "info"]) == 0
    assert "disabled" in capsys.readouterr().out
    assert info_json(capsys)["disabled"] is True
    assert main(["cache", "clear"]) == 0
    assert "nothing to clear" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_cache_info_from_the_command_line(cache_env):
    env = dict(os.environ, FUSELOOP_CACHE_DIR=str(cache_env))
    out = subprocess.run([sys.executable, "-m", "fuseloop.cli", "cache", "info", "--json"],
                         env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["directory"] == str(cache_env)
    res = subprocess.run([sys.executable, "-m", "fuseloop.cli", "cache"], env=env,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "info" in res.stderr  # argparse names the subcommands


def test_bench_without_the_benchmark_suite(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fuseloop.bench", None)  # import fails
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "fuseloop.bench" in err and "not part of this installation" in err


def test_bench_passes_its_arguments_through(monkeypatch):
    calls = []
    fake = types.ModuleType("fuseloop.bench")
    fake.main = lambda argv: calls.append(argv) or 3
    monkeypatch.setitem(sys.modules, "fuseloop.bench", fake)
    assert main(["bench", "--device", "cpu", "--help"]) == 3
    assert calls == [["--device", "cpu", "--help"]]
    fake.main = lambda argv: None  # no return code: success
    assert main(["bench"]) == 0


def test_bench_suite_with_a_broken_import(monkeypatch, capsys):
    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "fuseloop.bench":
                raise ImportError("No module named 'some_dependency'", name="some_dependency")
            return None

    monkeypatch.delitem(sys.modules, "fuseloop.bench", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "could not be imported" in err and "some_dependency" in err


def test_cache_flags_info_and_clear(device, cache_env, capsys, monkeypatch):
    monkeypatch.setenv("FUSELOOP_DISK_CACHE_MAX_BYTES", "300M")
    monkeypatch.setenv("FUSELOOP_MEMORY_CACHE_SIZE", "77")
    entries = fill(cache_env)
    capsys.readouterr()
    assert main(["cache", "--info"]) == 0
    out = capsys.readouterr().out
    assert "entries:        2" in out
    assert f"total size:     {sum(p.stat().st_size for p in entries) / 1024:.1f} KiB" in out
    assert "size bound:     300.0 MiB (314572800 bytes)" in out
    assert "at most 77 kernels" in out
    assert main(["cache", "--info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["max_bytes"] == 300 * 2**20 and info["memory_max_entries"] == 77
    assert info["entries"] == 2 and info == info_json(capsys)  # the same as 'cache info'
    assert main(["cache", "--clear"]) == 0
    assert "removed 2 kernel cache entries" in capsys.readouterr().out
    assert cache.disk_entries(cache_env) == []
    monkeypatch.setenv("FUSELOOP_DISK_CACHE_MAX_BYTES", "0")
    assert main(["cache", "--info"]) == 0
    assert "size bound:     none" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["cache"], ["cache", "--info", "--clear"],
                                  ["cache", "--clear", "--json"], ["cache", "--clear", "info"]])
def test_cache_flags_that_do_not_fit(argv, cache_env, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "info" in capsys.readouterr().err
    assert not cache_env.exists()
