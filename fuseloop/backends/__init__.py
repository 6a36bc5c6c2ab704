"""Backends: the compute APIs fuseloop runs kernels through (see :mod:`.base`).

Each backend is one module implementing :class:`~.base.Backend`, registered here
under its short label (``"opencl"``).  A device names its backend
(``Device.backend``); :func:`backend_for` maps it to the backend object.  A
backend's module is imported when first asked for, so a process imports only the
drivers it uses.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from .base import Backend, BuiltProgram, DeviceInfo, Launcher, LaunchSpec

#: label -> "module:class" of every known backend, in discovery order (a module
#: name starting with a dot is relative to this package)
BACKENDS: dict[str, str] = {
    "opencl": ".opencl:OpenCLBackend",
    "cuda": ".cuda:CudaBackend",
}
_loaded: dict[str, Backend] = {}
_lock = threading.Lock()


def get_backend(name: str) -> Backend:
    """The backend labelled ``name`` (imported on first use); KeyError if unknown."""
    found = _loaded.get(name)
    if found is not None:
        return found
    target = BACKENDS[name]
    with _lock:
        found = _loaded.get(name)
        if found is None:
            module, _, cls = target.partition(":")
            found = _loaded[name] = getattr(importlib.import_module(module, __name__), cls)()
    return found


def backend_for(device: Any) -> Backend:
    """The backend ``device`` runs on (its ``backend`` label)."""
    return get_backend(getattr(device, "backend", "opencl"))


def require_backend(device: Any, what: str, backends: tuple[str, ...] = ("opencl",)) -> None:
    """Raise :class:`~fuseloop.errors.BackendFeatureError` unless ``device`` runs on
    one of ``backends`` (``what`` names the operation in the message)."""
    have = getattr(device, "backend", "opencl")
    if have not in backends:
        from ..errors import BackendFeatureError

        raise BackendFeatureError(
            f"{what} is not available on {getattr(device, 'name', device)} (a {have} "
            f"device) yet: it runs on {', '.join(backends)} devices only; evaluate it on "
            f"one of those (fl.devices() lists them) and move the result with .to_device()")


def worker_builders() -> list[str]:
    """The builder files compile workers load at start (their driver imports then
    overlap the caller's work): those of the backends this process has loaded.  (A
    worker loads another's builder when a request names it; importing every backend
    here to name its builder cost a process the imports of drivers it never uses,
    CuPy's 0.1 s on a machine without NVIDIA devices.)"""
    return [b.worker_builder for name in BACKENDS
            if (b := _loaded.get(name)) is not None and b.worker_builder is not None]


__all__ = ["BACKENDS", "Backend", "BuiltProgram", "DeviceInfo", "LaunchSpec", "Launcher",
           "backend_for", "get_backend", "require_backend", "worker_builders"]
