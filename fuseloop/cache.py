"""Compiled-kernel cache: structural key -> launchable kernel, in memory and on disk.

The key is computed from fuseloop's own IR (a linearised program), never from
Loopy objects, so a cache hit does not touch Loopy.  On disk each entry is a
JSON file holding the generated OpenCL source and its launch plan, written
atomically and verified (key and checksum) when read: a truncated, corrupt or
foreign entry is ignored and rebuilt.  The OpenCL drivers (and pyopencl) cache
the compiled binaries of a source themselves.

Key parts (see :func:`disk_key`): schema version, library versions, device
identity, recipe name and version, index dtype, and the program.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

from . import stats as _stats
from .errors import KernelBuildError
from .expr.program import Program, collapse_groups
from .recipes import Recipe
from .runtime.devices import Device

SCHEMA_VERSION = 4
_counters = _stats.counters


@cache
def library_versions() -> tuple[tuple[str, str], ...]:
    out = []
    for dist in ("fuseloop", "loopy", "pyopencl", "islpy", "pymbolic"):
        try:
            out.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            out.append((dist, "unknown"))
    return tuple(out)


def cache_dir() -> Path | None:
    """Where kernels are cached on disk, or None when the disk cache is off."""
    env = os.environ.get("FUSELOOP_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in ("", "off", "0", "none", "false"):
            return None
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("fuseloop"))


def disk_key(program: Program, index_dtype: np.dtype, device: Device, recipe: Recipe) -> str:
    return repr((
        ("schema", SCHEMA_VERSION),
        ("libraries", library_versions()),
        ("device", device.identity),
        ("recipe", recipe.cache_id),
        ("index_dtype", index_dtype.name),
        ("program", program),
    ))


@dataclass
class KernelPlan:
    """Everything needed to launch a kernel, storable as JSON."""

    name: str
    source: str
    arg_names: list[str]
    gsize: list[str]  # Python expressions in the size names
    lsize: list[str]
    build_options: list[str]
    # numpy dtype name of each scalar argument, None for buffers: pyopencl packs
    # scalars several times faster when it knows their types up front
    arg_dtypes: list[str | None]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _compile_sizes(exprs: list[str]) -> Any:
    code = "lambda N, NE, p: (" + "".join(f"{e}, " for e in exprs) + ")"
    return eval(code, {"__builtins__": {"max": max, "min": min}})


class CompiledKernel:
    """A built OpenCL kernel plus the recipe for its arguments and grid."""

    __slots__ = ("arg_plan", "gsize", "kernel", "lsize", "plan")

    def __init__(self, plan: KernelPlan, program: cl.Program) -> None:
        self.plan = plan
        self.kernel = getattr(program, plan.name)
        self.kernel.set_scalar_arg_dtypes(
            [None if d is None else np.dtype(d) for d in plan.arg_dtypes])
        self.gsize = _compile_sizes(plan.gsize)
        self.lsize = _compile_sizes(plan.lsize)
        # (kind, index): 0 output, 1 input buffer, 2 scalar, 3 integer parameter,
        # 4 total size N, 5 row length NE, 6 gather error flag
        arg_plan = []
        for a in plan.arg_names:
            if a in ("N", "NE", "err"):
                arg_plan.append(({"N": 4, "NE": 5, "err": 6}[a], 0))
            else:
                kind = {"out": 0, "in": 1, "s": 2, "p": 3}[a.rstrip("0123456789")]
                arg_plan.append((kind, int(a.lstrip("outinsp"))))
        self.arg_plan = tuple(arg_plan)


_memory: dict[tuple, CompiledKernel] = {}
_build_locks: dict[tuple, threading.Lock] = {}
_global_lock = threading.Lock()


def _build(plan: KernelPlan, device: Device) -> CompiledKernel:
    try:
        program = cl.Program(device.context, plan.source).build(options=plan.build_options)
    except cl.Error as exc:
        raise KernelBuildError(
            f"the OpenCL compiler for {device.name} rejected kernel {plan.name}",
            source=plan.source, build_log=str(exc)) from None
    _counters["kernels_compiled"] += 1
    return CompiledKernel(plan, program)


def _read_disk(path: Path, key: str) -> KernelPlan | None:
    try:
        doc = json.loads(path.read_text())
        body = doc["plan"]
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if doc.get("key") != key or doc.get("checksum") != digest:
            return None
        return KernelPlan(**body)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_disk(path: Path, key: str, plan: KernelPlan) -> None:
    body = plan.to_json()
    doc = {"key": key, "plan": body,
           "checksum": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)  # readers see the old file or the whole new one
    except OSError as exc:
        print(f"fuseloop: could not write kernel cache entry {path}: {exc}", file=sys.stderr)


def _lower(program: Program, index_dtype: np.dtype, device: Device, recipe: Recipe,
           user_functions: dict[str, Any]) -> KernelPlan:
    import loopy as lp

    from .lower.kernel import lower_program

    groups = collapse_groups(program)
    lowered = lower_program(program, groups, index_dtype, user_functions)
    t_unit = recipe.transform(lowered.t_unit, device)
    code = lp.generate_code_v2(t_unit)
    entry = t_unit.default_entrypoint
    gsize, lsize = entry.get_grid_size_upper_bounds_as_exprs(t_unit.callables_table)
    _counters["kernels_lowered"] += 1
    source = code.device_code()
    if os.environ.get("FUSELOOP_SHOW_KERNELS", "") not in ("", "0"):
        print(f"fuseloop: new kernel for {device.name}:\n{source}", file=sys.stderr)
    arg_names = [a.name for a in entry.args]
    arg_dtypes = [a.dtype.numpy_dtype.name if isinstance(a, lp.ValueArg) else None
                  for a in entry.args]
    assert sorted(arg_names) == sorted(lowered.arg_names), (arg_names, lowered.arg_names)

    def to_py(e: Any) -> str:
        return re.sub(r"\bp(\d+)\b", r"p[\1]", str(e))

    return KernelPlan(
        name=entry.name, source=source, arg_names=arg_names,
        gsize=[to_py(e) for e in gsize] or ["1"], lsize=[to_py(e) for e in lsize] or ["1"],
        build_options=[], arg_dtypes=arg_dtypes)


def get_kernel(program: Program, index_dtype: np.dtype, device: Device, recipe: Recipe,
               user_functions: dict[str, Any]) -> CompiledKernel:
    """The compiled kernel for ``program``: memory cache, then disk, then Loopy."""
    mem_key = (program, index_dtype.char, device.index, recipe.cache_id)
    hit = _memory.get(mem_key)
    if hit is not None:
        _counters["memory_cache_hits"] += 1
        return hit
    with _global_lock:
        lock = _build_locks.setdefault(mem_key, threading.Lock())
    with lock:  # two threads asking for one kernel build it once
        hit = _memory.get(mem_key)
        if hit is not None:
            _counters["memory_cache_hits"] += 1
            return hit
        _counters["memory_cache_misses"] += 1
        directory = cache_dir()
        key = disk_key(program, index_dtype, device, recipe)
        path = None
        plan = None
        if directory is not None:
            name = hashlib.sha256(key.encode()).hexdigest()[:40]
            path = directory / f"v{SCHEMA_VERSION}" / f"{name}.json"
            plan = _read_disk(path, key)
            _counters["disk_cache_hits" if plan else "disk_cache_misses"] += 1
        compiled = None
        if plan is not None:
            try:
                compiled = _build(plan, device)
            except KernelBuildError:
                compiled = None  # an entry that no longer builds is rebuilt from scratch
        if compiled is None:
            plan = _lower(program, index_dtype, device, recipe, user_functions)
            compiled = _build(plan, device)  # raises before anything is cached
            if path is not None:
                _write_disk(path, key, plan)
        _memory[mem_key] = compiled
        return compiled


def clear_memory_cache() -> None:
    """Forget compiled kernels held in memory (the disk cache stays)."""
    _memory.clear()
