"""Peer libraries measured in the same run as fuseloop.

CPU devices: numpy and numexpr. GPU devices: torch (eager), torch.compile, cupy and jax.jit,
each on its own CUDA device memory. A peer that cannot be imported, or has no GPU, is reported
as skipped with the reason. Every peer runs a workload's generic form (``Workload.peer``)
through an :class:`Ops` adapter, so the same expression is measured everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import metadata
from typing import Any

import numpy as np

from .workloads import Inputs, Workload


class NotExpressible(Exception):
    """The peer has no sensible spelling of this workload."""


Axis = int | tuple[int, ...] | None


class Ops:
    """numpy-style operations of an array module (numpy, cupy, jax.numpy, fuseloop).

    Attributes not defined here (``sin``, ``exp``, ``log``, ``sqrt``, ``where``, ...) are
    the module's own. A form the module lacks raises :class:`NotExpressible`.
    """

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def __getattr__(self, name: str) -> Any:  # sin, exp, sqrt, log1p, ...
        return getattr(self.xp, name)

    def sum(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.sum(x, axis=axis, keepdims=keepdims)

    def mean(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.mean(x, axis=axis, keepdims=keepdims)

    def max(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.max(x, axis=axis, keepdims=keepdims)

    def min(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.min(x, axis=axis, keepdims=keepdims)

    def argmax(self, x: Any, axis: int | None = None) -> Any:
        return self.xp.argmax(x, axis=axis)

    def argmin(self, x: Any, axis: int | None = None) -> Any:
        return self.xp.argmin(x, axis=axis)

    def copy(self, x: Any) -> Any:
        return self.xp.copy(x)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.xp.matmul(a, b)

    def mT(self, a: Any) -> Any:
        """The last two axes swapped (a transposed view where the module has views)."""
        return self.xp.swapaxes(a, -1, -2)

    def einsum(self, spec: str, *operands: Any) -> Any:
        return self.xp.einsum(spec, *operands)

    def take(self, x: Any, idx: Any, axis: int | None = None) -> Any:
        return self.xp.take(x, idx, axis=axis)

    def scatter(self, n: int, idx: Any, vals: Any) -> Any:
        """A new vector of ``n`` zeros with ``vals`` written at ``idx`` (distinct)."""
        out = self.xp.zeros(n, dtype=vals.dtype)
        out[idx] = vals
        return out

    def scatter_add(self, n: int, idx: Any, vals: Any) -> Any:
        """A new vector of ``n`` zeros with ``vals`` added at ``idx`` (repeats add up)."""
        at = getattr(getattr(self.xp, "add", None), "at", None)
        if at is None:
            raise NotExpressible(f"{getattr(self.xp, '__name__', self.xp)} has no add.at")
        out = self.xp.zeros(n, dtype=vals.dtype)
        at(out, idx, vals)
        return out


class FuseloopOps(Ops):
    """fuseloop's numpy-style API (``fl.add.at`` is numpy's ``np.add.at``)."""


class TorchOps(Ops):
    """The same operations spelled for torch (``dim``/``keepdim``, ``amax``, ``clone``)."""

    def sum(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.sum(x) if axis is None else x.sum(dim=axis, keepdim=keepdims)

    def mean(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.mean(x) if axis is None else x.mean(dim=axis, keepdim=keepdims)

    def max(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.amax(x) if axis is None else x.amax(dim=axis, keepdim=keepdims)

    def min(self, x: Any, axis: Axis = None, keepdims: bool = False) -> Any:
        return self.xp.amin(x) if axis is None else x.amin(dim=axis, keepdim=keepdims)

    def argmax(self, x: Any, axis: int | None = None) -> Any:
        return self.xp.argmax(x) if axis is None else x.argmax(dim=axis)

    def argmin(self, x: Any, axis: int | None = None) -> Any:
        return self.xp.argmin(x) if axis is None else x.argmin(dim=axis)

    def copy(self, x: Any) -> Any:
        return x.clone()

    def mT(self, a: Any) -> Any:
        return a.transpose(-1, -2)

    def take(self, x: Any, idx: Any, axis: int | None = None) -> Any:
        if axis is None:
            return x.reshape(-1)[idx]
        return self.xp.index_select(x, axis, idx)

    def scatter(self, n: int, idx: Any, vals: Any) -> Any:
        return self.xp.zeros(n, dtype=vals.dtype, device=vals.device).index_copy_(0, idx, vals)

    def scatter_add(self, n: int, idx: Any, vals: Any) -> Any:
        return self.xp.zeros(n, dtype=vals.dtype, device=vals.device).index_add_(0, idx, vals)


class JaxOps(Ops):
    """jax.numpy with full float32 precision for matmul (no TF32 shortcut); functional
    updates (``.at[]``) for scatters."""

    def matmul(self, a: Any, b: Any) -> Any:
        import jax

        return self.xp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)

    def einsum(self, spec: str, *operands: Any) -> Any:
        import jax

        return self.xp.einsum(spec, *operands, precision=jax.lax.Precision.HIGHEST)

    def scatter(self, n: int, idx: Any, vals: Any) -> Any:
        return self.xp.zeros(n, dtype=vals.dtype).at[idx].set(vals)

    def scatter_add(self, n: int, idx: Any, vals: Any) -> Any:
        return self.xp.zeros(n, dtype=vals.dtype).at[idx].add(vals)


class Peer:
    """A library that runs workloads through an :class:`Ops` adapter."""

    def __init__(self, name: str, ops: Ops, to_device: Callable[[np.ndarray], Any],
                 sync: Callable[[Any], Any], to_numpy: Callable[[Any], np.ndarray],
                 wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
                 release: Callable[[], Any] | None = None, version: str = "") -> None:
        self.name, self.ops, self.version = name, ops, version
        self.to_device, self.sync, self.to_numpy = to_device, sync, to_numpy
        self._wrap, self._release = wrap, release

    def prepare(self, wl: Workload, inputs: Inputs) -> Callable[[], Any]:
        """Copy the inputs to the peer's memory; return a function that runs ``wl`` once."""
        if wl.peer is None:
            raise NotExpressible(f"{self.name} has no form of {wl.name}")
        args = [self.to_device(inputs[k]) for k in wl.inputs]
        ops, body = self.ops, wl.peer

        def fn(*a: Any) -> Any:
            return body(ops, *a)

        if self._wrap is not None:
            fn = self._wrap(fn)
        return lambda: fn(*args)

    def release(self) -> None:
        """Give cached device memory back (between cases)."""
        if self._release is not None:
            self._release()


class NumexprPeer(Peer):
    """numexpr: one ``ne.evaluate`` per run; element-wise results go to a preallocated ``out``."""

    def __init__(self) -> None:
        import numexpr as ne

        self.ne = ne
        threads = ne.detect_number_of_cores()
        super().__init__(f"numexpr ({threads} threads)", Ops(np), lambda a: a, lambda r: None,
                         np.asarray, version=ne.__version__)

    def prepare(self, wl: Workload, inputs: Inputs) -> Callable[[], Any]:
        if wl.numexpr is None:
            raise NotExpressible(f"no single numexpr expression for {wl.name}")
        env = wl.numexpr_env(inputs) if wl.numexpr_env else dict(inputs)
        expr, ne = wl.numexpr, self.ne
        first = ne.evaluate(expr, local_dict=env)
        if expr.startswith("sum(") or np.ndim(first) == 0:
            return lambda: ne.evaluate(expr, local_dict=env)
        out = np.empty_like(first)
        return lambda: ne.evaluate(expr, local_dict=env, out=out)


def _numpy_peer() -> Peer:
    return Peer("numpy", Ops(np), lambda a: a, lambda r: None, np.asarray,
                version=np.__version__)


def _torch_peers() -> list[Peer]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch is installed but torch.cuda.is_available() is False")
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 matmul means float32
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")

    def sync(_r: Any) -> None:
        torch.cuda.synchronize()

    def to_dev(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a)).to(dev)

    def to_np(r: Any) -> np.ndarray:
        return r.detach().cpu().numpy()

    def compile_fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
        torch._dynamo.reset()  # one compiled graph per case, no recompile-limit fallback
        return torch.compile(fn, dynamic=False)

    common = {"to_device": to_dev, "sync": sync, "to_numpy": to_np,
              "release": torch.cuda.empty_cache, "version": torch.__version__}
    return [Peer("torch", TorchOps(torch), **common),
            Peer("torch.compile", TorchOps(torch), wrap=compile_fresh, **common)]


def _fuse_peer() -> Peer:
    """fuseloop's own traced functions: the workload under ``fl.fuse`` (traced once per
    signature, later calls replay it), the counterpart of ``torch.compile`` and
    ``jax.jit``.  Opt-in (``--peers ...,fuseloop.fuse``)."""
    import fuseloop as fl

    return Peer("fuseloop.fuse", FuseloopOps(fl), fl.asarray, lambda r: fl.synchronize(),
                lambda r: np.asarray(r.get()), wrap=fl.fuse, version=fl.__version__)


def _cupy_peer() -> Peer:
    import cupy as cp

    cp.cuda.runtime.getDeviceCount()  # raises without a CUDA device

    def sync(_r: Any) -> None:
        cp.cuda.get_current_stream().synchronize()

    def release() -> None:
        cp.get_default_memory_pool().free_all_blocks()

    return Peer("cupy", Ops(cp), cp.asarray, sync, cp.asnumpy, release=release,
                version=cp.__version__)


def _jax_peer() -> Peer:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU
    import jax
    import jax.numpy as jnp

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        raise RuntimeError(f"jax has no GPU backend (default backend: {jax.default_backend()})")

    def to_dev(a: np.ndarray) -> Any:
        if a.dtype.kind == "f" and a.dtype.itemsize == 8 and not jax.config.jax_enable_x64:
            # jax would compute in float32: say so rather than report a mismatch (int64
            # indices may narrow to int32: their values fit)
            raise NotExpressible(f"jax without jax_enable_x64 has no {a.dtype} arrays")
        return jax.device_put(a, gpus[0])

    return Peer("jax.jit", JaxOps(jnp), to_dev, jax.block_until_ready, np.asarray,
                wrap=jax.jit, version=jax.__version__)


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"[:160]


def make_peers(device_type: str, only: list[str] | None = None
               ) -> tuple[list[Peer], dict[str, str]]:
    """The peers for a device type, and ``{name: reason}`` for those that are unavailable."""
    if device_type == "cpu":
        factories: list[tuple[str, Callable[[], Any]]] = [
            ("numpy", _numpy_peer), ("numexpr", NumexprPeer)]
    else:
        factories = [("torch", _torch_peers), ("cupy", _cupy_peer), ("jax", _jax_peer)]
    if only is not None and "fuseloop.fuse" in only:
        factories.append(("fuseloop.fuse", _fuse_peer))
    peers: list[Peer] = []
    skipped: dict[str, str] = {}
    for name, factory in factories:
        # "torch" selects torch and torch.compile, "torch.compile" only the latter
        if only is not None and not any(o.startswith(name) for o in only):
            continue
        try:
            made = factory()
        except Exception as e:  # not installed, no GPU, broken install: report and go on
            skipped[name] = _short(e)
            continue
        for p in made if isinstance(made, list) else [made]:
            if only is None or name in only or p.name in only:
                peers.append(p)
    return peers, skipped


def versions(peers: list[Peer]) -> dict[str, str]:
    """Versions of fuseloop's stack and of the peers in use (installed distributions)."""
    out: dict[str, str] = {}
    for dist in ("fuseloop", "numpy", "pyopencl", "loopy", "islpy", "pocl-binary-distribution",
                 "numexpr", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    for p in peers:
        if p.version:
            out[p.name.split(" ")[0]] = p.version
    return out
