"""Evaluation: turn lazy expressions into device buffers with one kernel per group.

This is the hot path: linearise the DAG (the structural key), look the kernel up
in memory, allocate outputs from the pool, enqueue.  Nothing here waits for the
device; reading results (``Array.get``) does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyopencl as cl

from . import stats as _stats
from .cache import _memory, get_kernel
from .errors import DeviceError, DeviceMemoryError, DTypeError
from .expr.nodes import Apply, Leaf, Node, Storage
from .expr.program import broadcast_signature, linearize
from .recipes import recipe_for
from .runtime.devices import Device

_counters = _stats.counters
_INT32_LIMIT = 2**31 - 1
user_functions: dict[str, object] = {}  # key -> UserFunction, filled by fuseloop.functions


def allocate(nbytes: int, device: Device) -> Storage:
    """A device buffer of ``nbytes`` from the device's pool."""
    if nbytes > device.max_alloc_size:
        raise DeviceMemoryError(
            f"cannot allocate {nbytes} bytes on {device.name}: its largest single allocation "
            f"is {device.max_alloc_size} bytes (global memory {device.global_mem_size} bytes); "
            "use smaller arrays or a device with more memory")
    try:
        buf = device.allocator.allocate(max(nbytes, 1))
    except cl.MemoryError as exc:
        raise DeviceMemoryError(
            f"out of device memory allocating {nbytes} bytes on {device.name}: {exc}") from None
    return Storage(buf, nbytes, device)


def _check_fp64(program_entries: tuple, device: Device) -> None:
    if device.has_fp64:
        return
    for e in program_entries:
        chars = e[2] if e[0] in ("op", "call") else (e[2],) if e[0] in ("load", "arg") else (e[1],)
        if "d" in chars:
            raise DTypeError(
                f"device {device.name} does not support float64, but this expression needs it "
                "(numpy promotes e.g. int32 / int32 and float32 + float64 to float64); "
                "use float32 arrays or .astype(np.float32)")


def run(roots: Sequence[Node], out_shape: tuple[int, ...], device: Device,
        targets: Sequence[Storage | None] | None = None) -> list[Storage]:
    """Compute ``roots`` (all of ``out_shape``) in one kernel; return their storages.

    ``targets`` optionally names existing storages to write into.  A target that
    the expression also reads through another index (broadcasting) is written
    through a temporary, so no element is read after it was overwritten.
    """
    program, bindings = linearize(roots, out_shape)
    if targets is None:
        targets = [None] * len(roots)
    elif any(t is not None and t in bindings.storages for t in targets):
        full_sig = broadcast_signature(out_shape, out_shape)
        unsafe_slots = {e[1] for e in program.entries if e[0] == "load" and e[3] != full_sig}
        unsafe = [t is not None and t in bindings.storages
                  and bindings.storages.index(t) in unsafe_slots for t in targets]
        if any(unsafe):
            direct = [None if u else t for t, u in zip(targets, unsafe)]
            outs = run(roots, out_shape, device, direct)
            for k, u in enumerate(unsafe):
                if u:
                    leaf = Leaf(outs[k], roots[k].dtype, out_shape)
                    run([leaf], out_shape, device, [targets[k]])
                    outs[k] = targets[k]  # type: ignore[call-overload]
            return outs
    size = math.prod(out_shape)
    outs = [t if t is not None else allocate(size * r.dtype.itemsize, device)
            for r, t in zip(roots, targets)]
    if size:
        launch(program, bindings, out_shape, outs, device)
    return outs


def launch(program, bindings, out_shape: tuple[int, ...], outs: list[Storage],
           device: Device) -> None:
    size = math.prod(out_shape)
    for s in bindings.storages:
        if s.device is not device:
            raise DeviceError(
                f"an input lives on {s.device.name} but the kernel runs on {device.name}; "
                "move arrays with fl.asarray(x, device=...) first")
    index_dtype = np.dtype(np.int32) if size <= _INT32_LIMIT else np.dtype(np.int64)
    recipe = recipe_for(device)
    kernel = _memory.get((program, index_dtype.char, device.index, recipe.cache_id))
    if kernel is not None:
        _counters["memory_cache_hits"] += 1
    else:
        _check_fp64(program.entries, device)
        kernel = get_kernel(program, index_dtype, device, recipe, user_functions)
    itype = index_dtype.type
    n = tuple([itype(s) for s in bindings.sizes])
    total = itype(size)
    args = []
    storages = bindings.storages
    scalars = bindings.scalars
    for kind, idx in kernel.arg_plan:
        if kind == 0:
            args.append(outs[idx].buffer)
        elif kind == 1:
            args.append(storages[idx].buffer)
        elif kind == 2:
            args.append(scalars[idx])
        elif kind == 3:
            args.append(n[idx])
        else:
            args.append(total)
    local = kernel.lsize(size, n)
    groups_per_axis = kernel.gsize(size, n)
    global_size = tuple(g * w for g, w in zip(groups_per_axis, local))
    kernel.kernel(device.queue, global_size, local, *args)
    _counters["kernels_launched"] += 1


def cast_node(node: Node, dtype: np.dtype) -> Node:
    if node.dtype == dtype:
        return node
    return Apply("cast", (node,), (node.dtype, dtype), node.shape)
