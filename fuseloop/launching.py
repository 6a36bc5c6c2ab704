"""Launching cached structures: kernels, argument packing and deferred small launches.

:func:`fuseloop.evaluate.run` finds an expression's cached structure
(:func:`fuseloop.expr.program.structure_entry`); what launching it needs beyond
the data (the compiled kernel, a generated function that sets the changed
arguments and enqueues, the grid) is planned once per structure, device and
index type (:func:`launch_cached`) and kept on the structure's entry.  Small
launches are deferred and enqueued back to back (:func:`enqueue_or_defer`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from weakref import WeakValueDictionary
from weakref import ref as _weakref

import numpy as np
import pyopencl as cl

from . import stats as _stats
from .cache import _memory, get_kernel, kernel_objects_lock, memory_generation
from .errors import DeviceError, DTypeError, RecipeError
from .expr.nodes import Storage
from .expr.program import INT32_LIMIT, Program, StructureEntry
from .recipes import recipe_for
from .runtime.devices import Device, _runtime

_enqueue_nd_range = cl._cl.enqueue_nd_range_kernel  # what pyopencl's kernel invoker calls
_counters = _stats.counters
_stats_lock = _stats._lock
INDEX_INT32, INDEX_INT64 = np.dtype(np.int32), np.dtype(np.int64)
# key -> UserFunction, filled by fuseloop.functions.  Weak: a function no longer
# referenced is forgotten (its compiled kernels stay cached; only lowering a new
# kernel looks a function up, and then the expression calling it holds it).
user_functions: WeakValueDictionary[str, object] = WeakValueDictionary()

# Cached elementwise launches (and replayed elementwise run-plan steps) of at most
# this many elements are deferred and enqueued in batches of up to DEFER_MAX (see
# enqueue_or_defer and fuseloop.runtime.devices._DeviceRuntime).
DEFER_MAX_ELEMENTS = 1 << 15
DEFER_MAX = 64


def _check_fp64(program_entries: tuple, device: Device) -> None:
    if device.has_fp64:
        return
    for e in program_entries:
        kind = e.kind
        if kind in ("op", "call"):
            chars = e.loop
        elif kind in ("load", "arg", "reduce", "lit", "iota"):
            chars = (e.dtype,)
        else:
            continue
        if "d" in chars:
            raise DTypeError(
                f"device {device.name} does not support float64, but this expression needs it "
                "(numpy promotes e.g. int32 / int32 and float32 + float64 to float64); "
                "use float32 arrays or .astype(np.float32)")





def size_class_of(recipe: Any, program: Program, params: Sequence[int], n_rows: int,
                  n_elem: int) -> str:
    """The recipe's size class for this launch (see :mod:`fuseloop.recipes`)."""
    size_class = recipe.size_class
    sizes = "" if size_class is None else size_class(program, params, n_rows, n_elem)
    if type(sizes) is not str:
        raise RecipeError(f"recipe {recipe.name!r}: size_class returned {sizes!r}; it must "
                          "return a string of Loopy assumptions ('' for none)")
    return sizes


def kernel_for(program: Program, index_dtype: np.dtype, device: Device, recipe: Any,
               params: Sequence[int], n_rows: int, n_elem: int) -> Any:
    """The compiled kernel for this launch of ``program``.

    Its memory-cache key holds the recipe's size class for these sizes (see
    :mod:`fuseloop.recipes`); counts a memory-cache hit when there is one.
    """
    sizes = size_class_of(recipe, program, params, n_rows, n_elem)
    compiled = _memory.get((program, index_dtype.char, device.index, recipe.cache_id, sizes))
    if compiled is not None:
        _stats.increment("memory_cache_hits")
    else:
        _check_fp64(program.entries, device)
        compiled = get_kernel(program, index_dtype, device, recipe, user_functions, sizes)
    return compiled


class _Launch:
    """How one structure's compiled kernel is launched: all but the buffers and scalars.

    ``go(out, storages, scalars, kernel, last, queue)`` sets the arguments that
    changed and enqueues (:func:`launcher`); ``threads`` holds, per thread, a
    ``cl.Kernel`` of its own for this structure and what its arguments were set to.
    """

    __slots__ = ("compiled", "consts", "generation", "global_size", "go", "local_size",
                 "recipe", "runtime", "threads")


def other_device(s: Storage, device: Device) -> DeviceError:
    return DeviceError(
        f"an input lives on {s.device.name} but the kernel runs on {device.name}; "
        "move arrays with fl.asarray(x, device=...) first")


def launch_cached(entry: StructureEntry, storages: list[Storage], scalars: list[np.generic],
                   out: Storage, out_shape: tuple[int, ...], device: Device) -> bool:
    """:func:`launch` for one flat elementwise output of a cached structure.

    What does not depend on the data (kernel, argument packing, grid) is
    remembered in ``entry.launches``; it is used while the memory cache still
    holds the same kernel and the recipe is the same, so ``clear_memory_cache``
    and ``register_recipe`` work as for :func:`launch`, and the counters of
    ``fl.stats()`` are the same.  False when the kernel needs more than this
    path packs (the caller then uses :func:`launch`).
    """
    biggest = entry.max_param
    for s in storages:
        if s.device is not device:
            raise other_device(s, device)
        if s.nbytes > biggest:
            biggest = s.nbytes
    size = out_shape[0] if out_shape else 1
    if size > biggest:
        biggest = size
    index_dtype = INDEX_INT32 if biggest <= INT32_LIMIT else INDEX_INT64
    recipe = recipe_for(device, "elementwise")
    plans = entry.launches.get(device)  # per device, then per index dtype (no key tuples)
    plan = None if plans is None else plans.get(index_dtype)
    if plan is None or plan.recipe is not recipe or plan.generation != memory_generation[0]:
        plan = _plan_launch(entry, index_dtype, recipe, size, device)  # counts the look-up
        if plan is None:
            return False
        hit = 0
    else:
        hit = 1
    try:
        try:
            kernel, last = plan.threads.state
        except AttributeError:
            kernel, last = thread_kernel(plan.compiled, plan.consts, plan.threads)
        enqueue_or_defer(plan.go, (out, storages, scalars, kernel, last),
                         size <= DEFER_MAX_ELEMENTS, device)
    except BaseException:
        _stats.increment("memory_cache_hits", hit)
        raise
    with _stats_lock:  # both counters at once: one lock round trip
        _counters["memory_cache_hits"] += hit
        _counters["kernels_launched"] += 1
    return True


def enqueue_or_defer(go: Any, args: tuple, small: bool, device: Device) -> None:
    """``go(*args, queue)`` now, or for a small launch later, back to back with others.

    A deferred launch is enqueued before anything else uses the device's queue
    (see ``_DeviceRuntime``); its record keeps the buffers alive until then.  A
    launch made now first enqueues the deferred ones, under the runtime's lock
    so that it is not placed amid another thread's flush.
    """
    rt = _runtime(device)
    if small:
        deferred = rt.deferred
        deferred.append((go, args))
        if len(deferred) >= DEFER_MAX:
            rt.flush()
    else:
        with rt.launch_lock:
            if rt.deferred:
                rt.flush()
            go(*args, rt.queue)


def _plan_launch(entry: StructureEntry, index_dtype: np.dtype, recipe: object, size: int,
                 device: Device) -> _Launch | None:
    program = entry.program
    if program.row_dims is not None or program.has_reduce or len(program.outputs) != 1:
        return None
    params = list(entry.params)
    generation = memory_generation[0]  # (read first: a clear during the look-up ends the plan)
    compiled = kernel_for(program, index_dtype, device, recipe, params, size, 1)
    plan = _Launch()
    plan.generation = generation
    plan.runtime = _runtime(device)
    plan.local_size = compiled.lsize(size, 1, params)
    plan.global_size = tuple(g * w for g, w in zip(compiled.gsize(size, 1, params),
                                                   plan.local_size))
    made = launcher(compiled, params, size, 1, plan.global_size, plan.local_size)
    if made is None:  # an error flag (gathers) or a second output: not this path's programs
        return None
    plan.go, plan.consts = made
    plan.compiled = compiled
    plan.recipe = recipe
    plan.threads = threading.local()
    entry.launches.setdefault(device, {})[index_dtype] = plan
    return plan


# How a scalar argument is set: from its bytes where pyopencl offers it.  Its
# public ``Kernel.set_arg`` tries the other kinds of argument first and took
# 10-15 us for a numpy scalar on PoCL (0.1 us for a buffer); ``_set_arg_buf``,
# which pyopencl's own invokers use for declared scalar types, takes 0.1-0.2 us.
SET_SCALAR_ARG = "_set_arg_buf" if hasattr(cl.Kernel, "_set_arg_buf") else "set_arg"


def launcher(compiled: Any, params: Sequence[int], n_rows: int, n_elem: int,
              global_size: tuple[int, ...], local_size: tuple[int, ...],
              one_output: bool = True) -> tuple[Any, list[tuple[int, Any]]] | None:
    """An enqueue function ``go(outs, storages, scalars, kernel, last, queue)`` and the
    constant arguments, or None when the kernel takes an error flag (gathers) or,
    with ``one_output`` (``outs`` is then the output itself), a second output.

    The kernel object is this path's own (one per structure and thread), so what
    its arguments were last set to is known: the sizes and parameters are set
    once (``consts``), an input buffer again only when it is another
    :class:`Storage` (remembered by weak reference, so no buffer is kept alive),
    a scalar only when it is another object (numpy scalars are immutable; the
    operators reuse one object per value), the output every time.  pyopencl's
    invoker sets every argument on every call, which costs PoCL about 2 us more
    per launch.  Scalars are converted to the kernel's declared type, as the
    invoker packs them, and set from their bytes (:data:`SET_SCALAR_ARG`).  Before
    an argument is set its record is cleared, so an interruption cannot leave a
    record that claims an argument it does not hold.
    """
    dtypes = compiled.plan.arg_dtypes
    lines = ["def go(o, s, c, k, last, queue):"]
    consts: list[tuple[int, Any]] = []
    env: dict[str, Any] = {"wr": _weakref, "enqueue": _enqueue_nd_range,
                           "g": global_size, "l": local_size}
    for i, (kind, idx) in enumerate(compiled.arg_plan):
        if kind >= 2 and dtypes[i] is None:
            return None  # (never expected: every scalar argument has a declared type)
        if kind == 0:
            if one_output and idx != 0:
                return None
            lines.append(f"    k.set_arg({i}, o.buffer)" if one_output else
                         f"    k.set_arg({i}, o[{idx}].buffer)")
        elif kind == 1:
            lines += [f"    x = s[{idx}]", f"    r = last[{i}]",
                      "    if r is None or r() is not x:",
                      f"        last[{i}] = None", f"        k.set_arg({i}, x.buffer)",
                      f"        last[{i}] = wr(x)"]
        elif kind == 2:
            env[f"T{i}"] = np.dtype(dtypes[i]).type
            lines += [f"    v = c[{idx}]", f"    if v is not last[{i}]:",
                      f"        last[{i}] = None", f"        k.{SET_SCALAR_ARG}({i}, T{i}(v))",
                      f"        last[{i}] = v"]
        elif kind in (3, 4, 5):
            value = params[idx] if kind == 3 else n_rows if kind == 4 else n_elem
            consts.append((i, np.dtype(dtypes[i]).type(value)))
        else:
            return None
    lines.append("    enqueue(queue, k, g, l, None, None, False, False)")
    exec("\n".join(lines), env)
    return env["go"], consts


def thread_kernel(compiled: Any, consts: list[tuple[int, Any]],
                  threads: threading.local) -> tuple[Any, list[Any]]:
    """This thread's kernel object for a :func:`_launcher` function, constants set.

    Kept in ``threads.state`` with the record of what its arguments were set to.
    """
    with kernel_objects_lock:
        kernel = cl.Kernel(compiled.program, compiled.plan.name)
        for i, value in consts:
            kernel.set_arg(i, value)
    last: list[Any] = [None] * len(compiled.arg_plan)
    threads.state = state = (kernel, last)
    return state


