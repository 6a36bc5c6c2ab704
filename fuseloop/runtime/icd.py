"""Make pip-installed OpenCL CPU runtimes visible to pyopencl's bundled ICD loader.

pyopencl's wheel carries ocl-icd 2.3 (patched to also read ``$PYOPENCL_HOME/.libs``,
where ``pocl-binary-distribution`` puts its ``pocl.icd``).  That loader reads its
environment once, at the first OpenCL call, and then takes the ICDs from

* ``OCL_ICD_VENDORS`` naming a directory: every ``*.icd`` file in it, plus
  ``pyopencl/.libs``;
* ``OCL_ICD_VENDORS`` naming a file (an ``.icd`` file or a library): that one ICD
  alone, and ``pyopencl/.libs`` is NOT read;
* ``OCL_ICD_VENDORS`` naming nothing that exists: no platform at all;
* otherwise ``OPENCL_VENDOR_PATH`` (default ``/etc/OpenCL/vendors``) as a
  directory, plus ``pyopencl/.libs``.

It knows no ``OCL_ICD_FILENAMES`` (the Khronos loader's variable).  Intel's CPU
runtime from pip (``intel-opencl-rt``) ships an ``intel-cpu.icd`` holding a build
machine's path, so nothing finds it as installed.  :func:`register_runtimes`
therefore writes, under fuseloop's cache directory, a directory holding links to
every ``.icd`` file the loader would have read anyway and one ``.icd`` naming the
installed ``libintelocl.so``, and points ``OCL_ICD_VENDORS`` at it: the loader
then sees the same ICDs as before plus Intel's (``pyopencl/.libs`` stays read).
An ``OCL_ICD_VENDORS`` naming one file is the user's explicit choice of a single
ICD and is left alone.  ``FUSELOOP_REGISTER_ICD=0`` turns all of this off.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _dists

INTEL_DIST = "intel-opencl-rt"
INTEL_LIBRARY = "libintelocl.so"
INTEL_PLATFORM = "Intel(R) OpenCL"
#: what ``pip install`` brings a working Intel CPU runtime with
INTEL_INSTALL = "pip install 'fuseloop[intel-cpu]'"
DEFAULT_VENDOR_PATH = "/etc/OpenCL/vendors"
_ICD_NAME = "fuseloop-intel-cpu.icd"

#: Among CPU devices that a type ("cpu") or nothing selects, runtimes whose label
#: (:func:`runtime_label`) starts with an earlier entry come first; a runtime not
#: listed comes after these.  The order is a measured choice (see
#: benchmarks/bench_cpu_runtimes.py); FUSELOOP_DEVICE selects any other.
CPU_RUNTIME_PREFERENCE = ("PoCL", "Intel OpenCL")


@dataclass
class Registration:
    """What :func:`register_runtimes` found and did (for ``fuseloop devices``)."""

    #: the installed ``libintelocl.so`` and its distribution's version
    intel_library: Path | None = None
    intel_version: str | None = None
    #: the directory ``OCL_ICD_VENDORS`` was pointed at, when fuseloop set it
    vendors_dir: Path | None = None
    #: problems to show with the device list
    notes: list[str] = field(default_factory=list)


_state: Registration | None = None


def registration() -> Registration:
    """The result of :func:`register_runtimes` (run now if it has not run yet)."""
    return _state if _state is not None else register_runtimes()


def find_intel_library() -> tuple[Path, str] | None:
    """``libintelocl.so`` of the installed ``intel-opencl-rt`` and its version, or None."""
    if _dists.metadata_dir(INTEL_DIST) is None:  # (not installed: no importlib.metadata)
        return None
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(INTEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    candidates = [Path(str(dist.locate_file(f))) for f in dist.files or ()
                  if f.name == INTEL_LIBRARY]
    # the wheel installs into <prefix>/lib; its RECORD may be missing (some installers)
    candidates.append(Path(sys.prefix) / "lib" / INTEL_LIBRARY)
    for path in candidates:
        if path.is_file():
            return path.resolve(), dist.version
    return None


def _icd_files(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.name.endswith(".icd"))
    except OSError:
        return []


def _names_library(icd_file: Path, library: Path) -> bool:
    """Whether ``icd_file`` already registers ``library`` (or another copy of it)."""
    try:
        named = Path(icd_file.read_text().strip())
    except (OSError, UnicodeDecodeError):
        return False
    if not named.is_absolute() or not named.is_file():
        return False
    return named.name.startswith(INTEL_LIBRARY) or named.resolve() == library


def _vendor_files(notes: list[str]) -> list[Path] | None:
    """The ``.icd`` files the loader reads by itself; None when it reads one ICD alone.

    An ``OCL_ICD_VENDORS`` naming nothing gets a note: the loader then finds no
    platform at all, which would otherwise read as 'no OpenCL devices'.
    """
    value = os.environ.get("OCL_ICD_VENDORS", "")
    vendor_path = Path(os.environ.get("OPENCL_VENDOR_PATH") or DEFAULT_VENDOR_PATH)
    if not value:
        return _icd_files(vendor_path)
    path = Path(value)
    if path.is_dir():
        return _icd_files(path)
    # a name without a slash: an .icd file in the vendor path, else a library the
    # dynamic linker searches for (which only loading it would tell)
    if path.exists() or ("/" not in value and (not value.endswith(".icd")
                                               or (vendor_path / value).is_file())):
        return None
    notes.append(f"OCL_ICD_VENDORS={value!r} names no file or directory, so the OpenCL "
                 "loader finds no platform at all (not even pyopencl's own PoCL); unset it, "
                 "or point it at a directory of .icd files or at one .icd file")
    return None


def _vendors_base() -> list[Path]:
    import platformdirs

    return [Path(platformdirs.user_cache_dir("fuseloop")) / "opencl-vendors",
            Path(tempfile.gettempdir()) / f"fuseloop-{os.getuid()}" / "opencl-vendors"]


def _write_vendors_dir(files: list[Path], library: Path) -> Path:
    """A directory of links to ``files`` and an ``.icd`` naming ``library``.

    Named by a hash of its contents and made under a temporary name, then renamed:
    processes starting together share one and never see it half written.
    """
    entries = {f.name: str(f.resolve()) for f in files}
    key = hashlib.sha256(repr((sorted(entries.items()), str(library))).encode()).hexdigest()
    errors = []
    for base in _vendors_base():
        target = base / key[:20]
        if target.is_dir() and {p.name for p in target.iterdir()} == {*entries, _ICD_NAME}:
            return target
        try:
            base.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=base, prefix=".tmp-"))
            for name, source in entries.items():
                (tmp / name).symlink_to(source)
            (tmp / _ICD_NAME).write_text(f"{library}\n")
            try:
                tmp.rename(target)
            except OSError:  # another process made it first (or a stale one is in the way)
                shutil.rmtree(tmp, ignore_errors=True)
                if not target.is_dir():
                    raise
            return target
        except OSError as exc:
            errors.append(f"{base}: {exc}")
    raise OSError("; ".join(errors))


def register_runtimes() -> Registration:
    """Register Intel's pip-installed CPU runtime with the ICD loader (once per process).

    Must run before the first OpenCL call of the process (the loader reads its
    environment then); fuseloop calls it when :mod:`fuseloop.runtime.devices` is
    imported.  Problems are recorded in ``notes``, never raised.
    """
    global _state
    if _state is not None:
        return _state
    state = _state = Registration()
    files = _vendor_files(state.notes)
    off = os.environ.get("FUSELOOP_REGISTER_ICD", "").strip().lower() in ("0", "off", "false")
    found = None if off else find_intel_library()
    if found is None:
        return state
    state.intel_library, state.intel_version = found
    if files is None:
        if not state.notes:
            state.notes.append(
                f"OCL_ICD_VENDORS={os.environ['OCL_ICD_VENDORS']!r} names one ICD, so the "
                "OpenCL loader reads that one alone (not pyopencl's own PoCL) and fuseloop "
                f"does not register Intel's CPU runtime ({INTEL_DIST}); point it at a "
                "directory of .icd files to see them all")
        return state
    if any(_names_library(f, state.intel_library) for f in files):
        return state  # registered already (Intel's own installer, or by hand)
    try:
        state.vendors_dir = _write_vendors_dir(files, state.intel_library)
    except OSError as exc:
        state.notes.append(f"could not register Intel's CPU runtime ({state.intel_library}): "
                           f"no writable directory for its .icd file ({exc})")
        return state
    os.environ["OCL_ICD_VENDORS"] = str(state.vendors_dir)
    return state


def check_discovered(platform_names: list[str]) -> None:
    """After discovery: say why a registered Intel runtime brought no platform."""
    state = registration()
    if state.vendors_dir is None or state.intel_library is None:
        return
    if any(name == INTEL_PLATFORM for name in platform_names):
        return
    try:
        ctypes.CDLL(str(state.intel_library))
    except OSError as exc:
        state.notes.append(
            f"Intel's CPU runtime ({INTEL_DIST} {state.intel_version}) is installed but "
            f"cannot load: {exc}; '{INTEL_INSTALL}' installs what it needs "
            "(intel-cmplr-lib-rt)")
        return
    state.notes.append(
        f"Intel's CPU runtime ({state.intel_library}) loads but the OpenCL loader shows no "
        "platform for it: either an OpenCL call ran before fuseloop was imported (import "
        "fuseloop first), or the runtime does not support this CPU (OCL_ICD_DEBUG=15 "
        "shows the loader's reasons)")


#: the libraries of the CPU runtimes' ICDs (an ICD naming another is a GPU's driver, or
#: another accelerator's)
CPU_RUNTIME_LIBRARIES = ("libpocl", INTEL_LIBRARY.removesuffix(".so"))


def lists_other_runtimes() -> bool:
    """Whether the loader will read an ICD other than the CPU runtimes' (NVIDIA's, AMD's,
    Intel's GPU driver): a GPU is likely among the devices, before any driver starts.
    True where that cannot be told (``OCL_ICD_VENDORS`` naming one ICD), False where
    only PoCL and Intel's CPU runtime are listed.  (Some files read and listed.)"""
    files = _vendor_files([])
    if files is None:
        return True
    for icd_file in files:
        try:
            library = Path(icd_file.read_text().strip()).name
        except (OSError, UnicodeDecodeError):
            continue
        if library and not library.startswith(CPU_RUNTIME_LIBRARIES):
            return True
    return False


def runtime_label(platform_name: str, platform_version: str, driver_version: str) -> str:
    """A short name and version of the OpenCL runtime: 'PoCL 3.0 (LLVM 14.0.6)'."""
    pocl = re.search(r"PoCL (\S+)", platform_version)
    if pocl:
        llvm = re.search(r"LLVM (\d+(?:\.\d+)*)", platform_version)
        return f"PoCL {pocl.group(1)}" + (f" (LLVM {llvm.group(1)})" if llvm else "")
    if platform_name == INTEL_PLATFORM:
        label = f"Intel OpenCL {driver_version.split('_')[0]}"
        state = registration()
        if state.vendors_dir is not None and state.intel_version:
            label += f" (pip {state.intel_version})"
        return label
    return f"{platform_name} {driver_version}".strip()


def preference(runtime: str) -> int:
    """Rank of a runtime label in :data:`CPU_RUNTIME_PREFERENCE` (lower first)."""
    return next((i for i, prefix in enumerate(CPU_RUNTIME_PREFERENCE)
                 if runtime.startswith(prefix)), len(CPU_RUNTIME_PREFERENCE))


# {{{ the drivers' long calls with the GIL released

# pyopencl holds the GIL through clGetPlatformIDs (the loader's first call starts every
# vendor's driver) and clCreateContext: tenths of a second on a GPU host, during which no
# other thread of the process ran, not even Loopy's import on a thread (see
# fuseloop._lazy.preload_loopy).  ctypes releases the GIL for the calls it makes, so
# these two are made through ctypes, on the loader pyopencl's module uses.

#: the loader's functions (a ctypes library), False where it was not found
_loader: Any = None


def _opencl_loader() -> Any:
    """The OpenCL ICD loader pyopencl loaded (by its path among this process's mapped
    files: the same instance, so what it starts pyopencl's calls find started), or None
    (no ``/proc``, or no loader found: the callers then use pyopencl's calls)."""
    global _loader
    if _loader is None:
        _loader = False
        try:
            with open("/proc/self/maps") as maps:
                paths = {line.split(None, 5)[-1].strip() for line in maps if "libOpenCL" in line}
            path = next(p for p in sorted(paths) if p.startswith("/"))
            lib = ctypes.CDLL(path)
            lib.clGetPlatformIDs.argtypes = [ctypes.c_uint32, ctypes.c_void_p,
                                             ctypes.POINTER(ctypes.c_uint32)]
            lib.clGetPlatformIDs.restype = ctypes.c_int32
            lib.clCreateContext.argtypes = [
                ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p),
                ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]
            lib.clCreateContext.restype = ctypes.c_void_p
            _loader = lib
        except (OSError, StopIteration, AttributeError):
            pass
    return _loader or None


def start_drivers() -> None:
    """Have the loader start its vendors' drivers now, without the GIL (its first
    clGetPlatformIDs; later ones, pyopencl's, only list the platforms).  Call after
    pyopencl's import, before its first call."""
    lib = _opencl_loader()
    if lib is not None:
        count = ctypes.c_uint32(0)
        lib.clGetPlatformIDs(0, None, ctypes.byref(count))  # (pyopencl's call reports errors)


def new_context(cl_devices: list[Any]) -> Any:
    """``pyopencl.Context(cl_devices)``, made by the driver without the GIL; pyopencl's
    own call where that fails (it then raises the driver's error)."""
    import pyopencl as cl

    lib = _opencl_loader()
    if lib is not None:
        ids = (ctypes.c_void_p * len(cl_devices))(*(d.int_ptr for d in cl_devices))
        status = ctypes.c_int32(0)
        handle = lib.clCreateContext(None, len(cl_devices), ids, None, None,
                                     ctypes.byref(status))
        if handle and status.value == 0:
            return cl.Context.from_int_ptr(handle, retain=False)  # (pyopencl releases it)
    return cl.Context(cl_devices)

# }}}


@contextlib.contextmanager
def _reset_for_tests():
    """Forget the registration (tests that run :func:`register_runtimes` again)."""
    global _state
    saved = _state
    _state = None
    try:
        yield
    finally:
        _state = saved
