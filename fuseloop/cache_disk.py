"""The kernel cache's files: entries on disk, their directory, its size bound.

Each entry is a JSON file ``<directory>/v<schema>/<hash>.json`` holding a
kernel's generated OpenCL source, its launch plan and the device binary the
driver produced, if any (none for PoCL with its kernel cache on: see
``Backend.stores_binaries``; :mod:`fuseloop.cache` for the key), with a checksum.
Entries are written to a temporary file and renamed into place, and read only
from regular files (opened without blocking, so that a FIFO at an entry's path
cannot hang a reader) and verified: a truncated, corrupt or foreign entry reads
as missing.

Bound: the entries of a directory are trimmed to :func:`disk_cache_max_bytes`
(``FUSELOOP_DISK_CACHE_MAX_BYTES``), least recently used first, where a read
sets an entry's modification time (see :func:`trim_disk_cache`).  Processes
share a directory without locks: any file may be replaced or deleted by
another process at any time, and every step here tolerates that.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

# 7: the gather error flag has three entries (check code, value, axis length)
SCHEMA_VERSION = 7
#: values of ``FUSELOOP_CACHE_DIR`` that turn the disk cache off
DISABLED_VALUES = ("", "off", "0", "none", "false")
#: binaries larger than this are not stored (the source still is)
MAX_BINARY_BYTES = 32 * 2**20
#: bytes the disk cache may hold unless ``FUSELOOP_DISK_CACHE_MAX_BYTES`` says otherwise
DEFAULT_DISK_CACHE_MAX_BYTES = 1 << 30
#: a trim deletes the least recently used entries down to this fraction of the bound
DISK_TRIM_TO = 0.75
# temporary files older than this were left by an interrupted writer
_STALE_TEMP_SECONDS = 3600
_ENTRY_NAME = re.compile(r"^[0-9a-f]{40}\.json$")
_SCHEMA_DIR = re.compile(r"^v\d+$")
_TEMP_PREFIX = ".tmp-"
_warned_env: set[str] = set()


def _env_int(name: str, default: int, minimum: int) -> int:
    """An integer setting from the environment (``K``, ``M``, ``G`` suffixes: powers of
    1024); an unreadable one is reported once and the default used."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    m = re.fullmatch(r"(\d+)\s*([kKmMgG]?)i?[bB]?", text)
    if m is not None:
        value = int(m[1]) * 1024 ** " kmg".index(m[2].lower() or " ")
        if value >= minimum:
            return value
    if name not in _warned_env:
        _warned_env.add(name)
        print(f"fuseloop: ignoring {name}={text!r}: expected an integer >= {minimum} "
              f"(K, M and G suffixes allowed); using {default}", file=sys.stderr)
    return default


def cache_dir() -> Path | None:
    """Where kernels are cached on disk, or None when the disk cache is off."""
    env = os.environ.get("FUSELOOP_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in DISABLED_VALUES:
            return None
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("fuseloop"))


def entry_path(directory: Path, key: str) -> Path:
    """The file that holds the disk entry for ``key``."""
    name = hashlib.sha256(key.encode()).hexdigest()[:40]
    return directory / f"v{SCHEMA_VERSION}" / f"{name}.json"


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


class DiskEntry(NamedTuple):
    key: str
    plan: KernelPlan
    binary: bytes | None


def _checksum(key: str, body: dict[str, Any], binary_text: str | None) -> str:
    doc = {"key": key, "plan": body, "binary": binary_text}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


# an entry holds at most a MAX_BINARY_BYTES binary, base64-encoded, and its source
_MAX_ENTRY_BYTES = 2 * MAX_BINARY_BYTES + 16 * 2**20
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_UTIME_FD = os.utime in os.supports_fd


def _read_regular(path: Path, touch: bool = False) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of entry size, else None.

    Opened without blocking and checked before reading: a FIFO (or a device)
    put at an entry's path would otherwise block the reader forever.  ``touch``
    sets the file's modification time to now: the disk cache's LRU order.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_ENTRY_BYTES:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        if touch:
            try:
                os.utime(fd if _UTIME_FD else path)
            except OSError:
                pass  # a read-only cache directory, or the entry was just replaced
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _parse_entry(path: Path, data: bytes | None) -> DiskEntry | None:
    if data is None:
        return None
    try:
        doc = json.loads(data)
        key, body, binary_text = doc["key"], doc["plan"], doc.get("binary")
        if not isinstance(key, str) or doc.get("checksum") != _checksum(key, body, binary_text):
            return None
        if entry_path(path.parent.parent, key).name != path.name:
            return None
        binary = None if binary_text is None else base64.b64decode(binary_text, validate=True)
        return DiskEntry(key, KernelPlan(**body), binary)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # json and base64 errors are ValueErrors


def read_entry(path: Path) -> DiskEntry | None:
    """The verified entry stored at ``path``, or None if it is unreadable or corrupt.

    Verified: it is a regular file, it parses, its checksum covers key, plan and
    binary, and its name is the one its key maps to.
    """
    return _parse_entry(path, _read_regular(path))


def _read_disk(path: Path, key: str) -> DiskEntry | None:
    """The entry for ``key``; reading it marks it as recently used."""
    entry = _parse_entry(path, _read_regular(path, touch=True))
    return entry if entry is not None and entry.key == key else None


_warned: set[Path] = set()


def _write_disk(path: Path, key: str, plan: KernelPlan, binary: bytes | None = None) -> None:
    body = plan.to_json()
    binary_text = None if binary is None else base64.b64encode(binary).decode("ascii")
    doc = {"key": key, "plan": body, "binary": binary_text,
           "checksum": _checksum(key, body, binary_text)}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX, suffix=".part")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
            written = f.tell()
        os.replace(tmp, path)  # readers see the old file or the whole new one
        tmp = None
        _wrote(path, written)
    except OSError as exc:
        if path.parent not in _warned:  # once per directory, not once per kernel
            _warned.add(path.parent)
            print(f"fuseloop: could not write kernel cache entry {path}: {exc} "
                  "(kernels still work; set FUSELOOP_CACHE_DIR to a writable directory "
                  "or to 'off')", file=sys.stderr)
    finally:
        if tmp is not None:  # failed or interrupted (KeyboardInterrupt) before the rename
            try:
                os.unlink(tmp)
            except OSError:
                pass


def disk_cache_max_bytes() -> int:
    """How many bytes of entries the disk cache keeps at most; 0: no bound.

    ``FUSELOOP_DISK_CACHE_MAX_BYTES`` (an integer, ``K``, ``M`` or ``G`` suffixes
    allowed), else :data:`DEFAULT_DISK_CACHE_MAX_BYTES`.
    """
    return _env_int("FUSELOOP_DISK_CACHE_MAX_BYTES", DEFAULT_DISK_CACHE_MAX_BYTES, 0)


# bytes this process wrote per cache directory since it last trimmed it (absent:
# never trimmed in this process, so the first write trims)
_written_since_trim: dict[Path, int] = {}
_trim_lock = threading.Lock()


def _wrote(path: Path, nbytes: int) -> None:
    """Count an entry written; trim the directory now and then (see trim_disk_cache).

    Trimming scans the directory, so it is done at the first write of a process
    and then once this process has written an eighth of the bound: a directory
    shared by P processes may exceed the bound by about P eighths of it between
    trims.
    """
    limit = disk_cache_max_bytes()
    if limit <= 0:
        return
    directory = path.parent.parent
    with _trim_lock:
        done = _written_since_trim.get(directory)
        if done is not None and done + nbytes < max(1, limit // 8):
            _written_since_trim[directory] = done + nbytes
            return
        _written_since_trim[directory] = 0
    trim_disk_cache(directory, limit, keep=path)


def _scan(directory: Path) -> tuple[list[tuple[float, int, Path]], list[tuple[float, Path]]]:
    """(mtime, size, path) of each entry file and (mtime, path) of each temporary file,
    in every schema folder; files that vanish while scanned are left out."""
    entries: list[tuple[float, int, Path]] = []
    temps: list[tuple[float, Path]] = []
    try:
        subs = [e for e in os.scandir(directory) if _SCHEMA_DIR.match(e.name) and e.is_dir()]
    except OSError:
        return entries, temps
    for sub in subs:
        try:
            files = list(os.scandir(sub.path))
        except OSError:
            continue
        for f in files:
            is_entry = _ENTRY_NAME.match(f.name) is not None
            if not (is_entry or f.name.startswith(_TEMP_PREFIX)):
                continue
            try:
                st = f.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if is_entry:
                entries.append((st.st_mtime, st.st_size, Path(f.path)))
            else:
                temps.append((st.st_mtime, Path(f.path)))
    return entries, temps


def trim_disk_cache(directory: Path | None = None, max_bytes: int | None = None,
                    keep: Path | None = None) -> tuple[int, int]:
    """Delete the least recently used entries while the cache holds more than ``max_bytes``.

    Entries (of every schema version) go oldest modification time first (a read
    sets it, see :func:`_read_disk`) until :data:`DISK_TRIM_TO` of the bound
    remains, so that trims are rare; ``keep`` (the entry just written) stays.
    Temporary files an interrupted write left over an hour ago go too.  Other
    processes may read, write or delete entries meanwhile: a file that vanishes
    is skipped, and a reader whose entry vanished rebuilds it.  Returns
    (entries removed, bytes freed).
    """
    directory = cache_dir() if directory is None else directory
    max_bytes = disk_cache_max_bytes() if max_bytes is None else max_bytes
    if directory is None or max_bytes <= 0:
        return 0, 0
    entries, temps = _scan(directory)
    stale = time.time() - _STALE_TEMP_SECONDS
    for mtime, p in temps:
        if mtime < stale:
            try:
                p.unlink()
            except OSError:
                pass
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return 0, 0
    target = int(max_bytes * DISK_TRIM_TO)
    removed = freed = 0
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= target:
            break
        if p == keep:
            continue
        try:
            p.unlink()
        except FileNotFoundError:
            pass  # another process trimmed or replaced it first
        except OSError:
            continue
        else:
            removed += 1
            freed += size
        total -= size
    return removed, freed


# {{{ devices opened with this cache: whether a process's first kernels are likely on disk

#: folder of a schema's folder holding one empty file per device identity that a process
#: opened with this cache directory (named by a hash of the identity)
_OPENED = "opened"


def _opened_marker(directory: Path, identity: tuple[str, ...]) -> Path:
    digest = hashlib.sha1(repr(tuple(identity)).encode()).hexdigest()
    return directory / f"v{SCHEMA_VERSION}" / _OPENED / digest


def opened_before(identity: tuple[str, ...] | None = None) -> bool:
    """Whether a process opened a device of ``identity`` (``Device.identity``; None: any
    device) with this disk cache before, so that its kernels are likely on disk: a
    process that did not will build kernels (so a compile worker is worth starting with
    the device, see ``fuseloop.runtime.devices``).  False with the disk cache off (every
    process builds); a marker, never an entry, answers: a stat, or a folder's listing."""
    directory = cache_dir()
    if directory is None:
        return False
    try:
        if identity is None:
            return any(True for _ in os.scandir(directory / f"v{SCHEMA_VERSION}" / _OPENED))
        return _opened_marker(directory, identity).exists()
    except OSError:
        return False


def note_opened(identity: tuple[str, ...]) -> None:
    """Record that this process opened a device of ``identity`` (see :func:`opened_before`);
    a cache folder that cannot be written is left alone."""
    directory = cache_dir()
    if directory is None:
        return
    marker = _opened_marker(directory, identity)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass

# }}}


def disk_entries(directory: Path | None = None) -> list[Path]:
    """fuseloop's entry files in the cache directory (every schema version)."""
    directory = cache_dir() if directory is None else directory
    if directory is None or not directory.is_dir():
        return []
    found: list[Any] = []
    for sub in sorted(directory.iterdir()):
        if _SCHEMA_DIR.match(sub.name) and sub.is_dir():
            found.extend(f for f in sorted(sub.iterdir())
                         if _ENTRY_NAME.match(f.name) and f.is_file())
    return found


def disk_cache_info(directory: Path | None = None) -> dict[str, Any]:
    """Where the disk cache is, what it holds and its bound (``fuseloop cache --info``)."""
    env = os.environ.get("FUSELOOP_CACHE_DIR")
    directory = cache_dir() if directory is None else directory
    info: dict[str, Any] = {
        "directory": None if directory is None else str(directory),
        "disabled": directory is None, "exists": False, "schema_version": SCHEMA_VERSION,
        "entries": 0, "current_schema_entries": 0, "total_bytes": 0,
        "max_bytes": disk_cache_max_bytes(),
        "source": "FUSELOOP_CACHE_DIR" if env is not None else "default"}
    if directory is None:
        return info
    info["exists"] = directory.is_dir()
    for f in disk_entries(directory):
        try:
            size = f.stat().st_size
        except OSError:
            continue
        info["entries"] += 1
        info["total_bytes"] += size
        if f.parent.name == f"v{SCHEMA_VERSION}":
            info["current_schema_entries"] += 1
    return info


def clear_disk_cache(directory: Path | None = None) -> tuple[int, int]:
    """Delete fuseloop's entries (and leftover temporary files) from the disk cache.

    Only files fuseloop writes are removed: ``v<schema>/<hash>.json`` and
    ``v<schema>/.tmp-*`` (and the markers of devices opened, ``v<schema>/opened/``);
    schema folders left empty are removed too.  Returns
    (entries removed, bytes freed); (0, 0) when there is no cache directory.
    """
    directory = cache_dir() if directory is None else directory
    if directory is None or not directory.is_dir():
        return 0, 0
    removed = freed = 0
    for sub in directory.iterdir():
        if not (_SCHEMA_DIR.match(sub.name) and sub.is_dir()):
            continue
        # (the devices' markers go too: an emptied cache is cold for every device)
        shutil.rmtree(sub / _OPENED, ignore_errors=True)
        for f in sub.iterdir():
            is_entry = _ENTRY_NAME.match(f.name) is not None
            if not (is_entry or f.name.startswith(_TEMP_PREFIX)) or not f.is_file():
                continue
            try:
                size = f.stat().st_size
                f.unlink()
            except FileNotFoundError:
                continue  # another process removed or replaced it
            if is_entry:
                removed += 1
                freed += size
        try:
            sub.rmdir()  # only if empty
        except OSError:
            pass
    return removed, freed
