"""The tuning database: tuned recipe parameters per device, kernel structure and size.

:func:`fuseloop.tune` stores a winner under ``(recipe name and version, kernel
structure, size bucket)`` in one JSON file per device,
``<cache directory>/tuning/<device hash>.json`` (the kernel cache's directory,
``FUSELOOP_CACHE_DIR``; no file when the disk cache is off), written to a
temporary file and renamed into place.  The structure is a hash of the
program and index dtype (what the kernel cache keys a kernel by); the bucket
is the bit length (``floor(log2) + 1``) of the row count, the row length and
each size parameter, so sizes within a factor of two share a winner.

:func:`tuned` is what :func:`fuseloop.launching.kernel_for` asks when it looks
a kernel up, which happens when a launch plan is made, not per launch (plans
are kept).  The file is read once per process and device into a dict; a
device without entries costs one dict look-up.  Only a recipe without
explicit parameters is replaced (the registry's own: a recipe given
parameters with ``with_params`` or ``fl.recipes.use`` is used as given).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cache_disk import cache_dir
from .errors import RecipeError

if TYPE_CHECKING:
    from .expr.program import Program
    from .recipes.core import Recipe
    from .runtime.devices import Device

SCHEMA = 1
_lock = threading.Lock()
# device index -> (device, entries)
_dbs: dict[int, tuple[Any, dict[str, dict[str, Any]]]] = {}
# (id of the recipe, entry key) -> (recipe, tuned recipe): one object per winner, so
# kernels and plans see a stable recipe
_tuned: dict[tuple[int, str], tuple[Any, Any]] = {}
# (program, index dtype char) -> structure hash
_structures: dict[tuple[Any, str], str] = {}
_STRUCTURES_MAX = 4096
# (id of the program, id of the recipe, device, index dtype, sizes...) ->
# (program, recipe, answer): what tuned() answered for a launch's sizes
_answers: dict[tuple, tuple[Any, Any, Any]] = {}
_ANSWERS_MAX = 4096
#: look-ups of the database (with entries) since the process started: tests check
#: that a cached launch does not consult it
lookups = [0]
# > 0: look-ups answer "no entry" (``suspended()``: timing the defaults)
_suspended = [0]


def device_hash(device: Device) -> str:
    return hashlib.sha256(repr(device.identity).encode()).hexdigest()[:24]


def db_path(device: Device) -> Path | None:
    """The database file of ``device`` (None when the disk cache is off)."""
    directory = cache_dir()
    return None if directory is None else directory / "tuning" / f"{device_hash(device)}.json"


def _read(path: Path | None, device: Device) -> dict[str, dict[str, Any]]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # missing, or written by something else: no entries
    if (not isinstance(data, dict) or data.get("schema") != SCHEMA
            or data.get("device") != list(device.identity)
            or not isinstance(data.get("entries"), dict)):
        return {}
    return data["entries"]


def entries(device: Device) -> dict[str, dict[str, Any]]:
    """The database of ``device``, read once per process."""
    hit = _dbs.get(device.index)
    if hit is not None and hit[0] is device:
        return hit[1]
    with _lock:
        found = _read(db_path(device), device)
        _dbs[device.index] = (device, found)
    return found


def structure_key(program: Program, index_dtype: Any) -> str:
    """A hash of the program and index dtype (the kernel cache's structure key parts)."""
    key = (program, index_dtype.char)
    hit = _structures.get(key)
    if hit is None:
        if len(_structures) >= _STRUCTURES_MAX:
            _structures.clear()
        text = repr((program, index_dtype.name))
        hit = _structures[key] = hashlib.sha256(text.encode()).hexdigest()[:24]
    return hit


def bucket(params: Sequence[int], n_rows: int, n_elem: int) -> str:
    """The size bucket: bit lengths of the rows, the row length and each parameter."""
    return ".".join(str(int(v).bit_length()) for v in (n_rows, n_elem, *params))


def entry_key(recipe: Recipe, structure: str, size_bucket: str) -> str:
    return f"{recipe.name}|{recipe.version}|{structure}|{size_bucket}"


def tuned(recipe: Recipe, program: Program, index_dtype: Any, device: Device,
          params: Sequence[int], n_rows: int, n_elem: int) -> Recipe:
    """``recipe`` with the database's winner for this kernel and size bucket, if any."""
    db = entries(device)
    if not db or recipe.explicit or _suspended[0]:
        return recipe
    # the answer per launch sizes, by identity (hashing a program walks all of it)
    answer_key = (id(program), id(recipe), device.index, index_dtype.char, n_rows, n_elem,
                  *params)
    hit = _answers.get(answer_key)
    if hit is not None and hit[0] is program and hit[1] is recipe:
        return hit[2]
    found = _lookup(db, recipe, program, index_dtype, device, params, n_rows, n_elem)
    if len(_answers) >= _ANSWERS_MAX:
        _answers.clear()
    _answers[answer_key] = (program, recipe, found)
    return found


def _lookup(db: dict[str, dict[str, Any]], recipe: Recipe, program: Program, index_dtype: Any,
            device: Device, params: Sequence[int], n_rows: int, n_elem: int) -> Recipe:
    lookups[0] += 1
    key = entry_key(recipe, structure_key(program, index_dtype), bucket(params, n_rows, n_elem))
    entry = db.get(key)
    if entry is None:
        return recipe
    memo = _tuned.get((id(recipe), key))
    if memo is not None and memo[0] is recipe:
        return memo[1]
    try:
        values = {n: recipe.params[n].from_json(v) for n, v in entry["params"].items()}
        new = recipe.with_params(**values).for_device(device)
    except (RecipeError, TypeError, KeyError):  # an entry of an older recipe: ignored
        return recipe
    new.__dict__["from_database"] = frozenset(values)
    _tuned[(id(recipe), key)] = (recipe, new)
    return new


def _write(path: Path, device: Device, found: dict[str, dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"schema": SCHEMA, "device": list(device.identity), "entries": found},
                      indent=1, sort_keys=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)  # readers see the old file or the whole new one
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def store(device: Device, key: str, record: dict[str, Any]) -> Path | None:
    """Add ``record`` under ``key`` (merged with the file as it is now: another process
    may have added entries); returns the file, None when the disk cache is off."""
    path = db_path(device)
    with _lock:
        found = dict(_read(path, device))
        found[key] = dict(record, stored_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if path is not None:
            _write(path, device, found)
        _dbs[device.index] = (device, found)
        _tuned.clear()
        _answers.clear()
    return path


def invalidate_plans() -> None:
    """Make kept launch plans look their kernels up again (so a new winner, or its
    removal, applies): drops the kernels held in memory (the disk cache stays)."""
    from .cache import clear_memory_cache

    clear_memory_cache()


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Within the block, the database is not used (the defaults apply)."""
    with _lock:
        _suspended[0] += 1
    invalidate_plans()
    try:
        yield
    finally:
        with _lock:
            _suspended[0] -= 1
        invalidate_plans()


def clear_database(device: Device) -> int:
    """Delete ``device``'s database; returns the number of entries it held."""
    path = db_path(device)
    with _lock:
        n = len(_read(path, device))
        if path is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        _dbs.pop(device.index, None)
        _tuned.clear()
        _answers.clear()
    invalidate_plans()
    return n


def clear_memory() -> None:
    """Forget what was read (the next look-up reads the file again)."""
    with _lock:
        _dbs.clear()
        _tuned.clear()
        _answers.clear()
        _structures.clear()


from .caches import register as _register_cache  # noqa: E402  (registry: fuseloop/caches.py)

_register_cache("tuning.database", clear_memory, lambda: sum(len(e) for _, e in _dbs.values()),
                why="one entry per tuned kernel structure and size bucket")
