"""From a linearised program to a kernel plan: lowering, the recipe, code generation.

The three steps a kernel goes through before the driver builds it, shared by
the stages (:mod:`fuseloop.stages`, which show each step's result) and the
kernel cache's miss path (:func:`fuseloop.cache.get_kernel`, which runs them
all through :func:`kernel_plan`):

* :func:`lower`: the program as a Loopy translation unit (with the launch's
  size class as Loopy assumptions), before any recipe;
* :func:`apply_recipe`: the recipe's transformation of it for a device;
* :func:`generate`: Loopy's code generation, giving the OpenCL source, the
  kernel's argument list (from the generated function declaration, so unused
  arguments Loopy left out are left out here too) and its grid, as a
  :class:`~fuseloop.cache_disk.KernelPlan`.

Loopy, islpy and pymbolic keep process-wide caches and were not written for
concurrent use, so every step runs under :data:`loopy_lock` (reentrant: a
recipe may evaluate).  Nothing here imports Loopy until a step runs.
"""

from __future__ import annotations

import gc
import os
import pickle
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .._lazy import FROZEN_AT_IMPORT, await_preload
from .._lazy import loopy_lock as loopy_lock  # (one Loopy step at a time, in the process)
from ..cache_disk import KernelPlan, cache_dir
from ..errors import RecipeError
from ..expr.program import Program, collapse_groups, with_row_loops
from ..stats import increment as _increment  # (fl.stats, a function, shadows the module)

# What unpickling an entry of Loopy's own disk caches (under ~/.cache/pytools) raises
# when other code wrote it: a module or class of that name is missing here (a renamed
# copy of a package, an older version).  Loopy lets it through.
_UNREADABLE_CACHE_ENTRY = (ImportError, AttributeError, pickle.UnpicklingError, EOFError)
_loopy_cache_off_lock = threading.Lock()
# One Loopy target object per equal target (Loopy's equality: type and fields), for all
# kernels: Loopy memoizes work on the target object (its table of C type names, with
# OpenCL's vector types, took a few ms to build), which a new target per kernel redid.
_TARGETS: dict[Any, Any] = {}
_section_depth = 0  # (loopy_section's nesting, under loopy_lock)


@contextmanager
def loopy_section() -> Iterator[None]:
    """Holds :data:`loopy_lock`; collects garbage on the way out.

    Loopy leaves caught exceptions in reference cycles (a traceback holds its
    frame, whose local holds the exception); those frames reach back through the
    caller's frames to the user's lazy arrays, which then look alive and are
    materialised before their inputs are written.

    Those cycles are made inside the section, so the objects alive before it
    (numpy's, Loopy's and islpy's modules: tens of thousands) are frozen for its
    length (:func:`gc.freeze`), and the collections traverse the section's own
    objects: a full collection of everything cost 25-40 ms, and the collector
    ran one more during a small kernel's code generation (a quarter of the
    demo's Loopy time).  Where code running with fuseloop froze objects, nothing is
    frozen here; objects frozen before fuseloop's import (an interpreter's or site's own,
    :data:`~fuseloop._lazy.FROZEN_AT_IMPORT`) are unfrozen with the section's: had they
    kept the section from freezing, every section's collection would traverse all objects
    (Loopy's modules among them), and the collector's own runs in it the old ones too.
    """
    global _section_depth
    with loopy_lock:
        await_preload()  # (Loopy imported on a thread: whole before anything is frozen)
        freeze = _section_depth == 0 and gc.get_freeze_count() <= FROZEN_AT_IMPORT
        _section_depth += 1
        try:
            if freeze:
                gc.freeze()
                if "loopy" not in sys.modules:
                    _import_loopy()
                gc.freeze()
            yield
        finally:
            _section_depth -= 1
            try:
                gc.collect()
            finally:
                if freeze:
                    gc.unfreeze()


def _import_loopy() -> None:
    """Loopy's modules, on the first section: imported before any of Loopy's work could
    make the cycles the collection is for, with the collector off (what the import makes
    stays for the process and is frozen next: collecting during it found nothing to free,
    and cost a few per cent of the import)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        import loopy  # noqa: F401
    finally:
        if enabled:
            gc.enable()


@contextmanager
def _without_loopy_caches() -> Iterator[None]:
    """Loopy's own caches (in memory and under ~/.cache/pytools) off while fuseloop's
    disk cache is on: a kernel fuseloop builds missed that cache, so Loopy's (keyed by
    the translation unit fuseloop makes from the same program) misses too, and
    looking up and storing there hashed and pickled the whole kernel three times
    (an eighth of Loopy's time for a 200-operation chain).  The caller holds
    :data:`loopy_lock`: the switch is a module global of Loopy's."""
    if cache_dir() is None:
        yield
        return
    import loopy as lp

    with lp.CacheMode(False):
        yield


def lower(program: Program, index_dtype: np.dtype, recipe: Any,
          user_functions: Any, sizes: str = "", *, device: Any) -> Any:
    """The Loopy translation unit computing ``program`` on ``device``, before the recipe.

    Its Loopy target is the one ``device``'s backend names
    (:meth:`~fuseloop.backends.base.Backend.loopy_target`, of its ``language``).
    ``sizes`` (the launch's size class, see :mod:`fuseloop.recipes`) is added as
    Loopy assumptions, for the recipe and for code generation.
    """
    import loopy as lp

    from ..backends import backend_for
    from . import kernel  # (looked up at call time: tests replace lower_program)

    # (collapse_groups returns None now; its result stays the second argument)
    target = backend_for(device).loopy_target()
    if any(len(spec) == 4 for spec in program.out_specs):  # atomic updates (fl.add.at)
        from .atomics import native_target

        target = native_target(target, device)
    if _has_complex(program):
        target = _complex_target(target, program, device)
    target = _TARGETS.setdefault(target, target)
    if recipe.row_loops:
        program = with_row_loops(program)
    lowered = kernel.lower_program(program, collapse_groups(program),  # type: ignore[func-returns-value]
                                   index_dtype,
                                   user_functions, piece_chunk=recipe.concat_chunk,
                                   target=target)
    t_unit = lowered.t_unit
    if sizes:
        try:
            t_unit = lp.assume(t_unit, _assumption_set(t_unit.default_entrypoint, sizes))
        except Exception as exc:  # isl's parse errors have no common base worth naming
            raise RecipeError(
                f"recipe {recipe.name!r} named the size class {sizes!r}, which is not a set "
                f"of Loopy assumptions about the kernel's sizes (N, NE, p0, p1, ...): {exc}; "
                "fix its size_class function") from None
    return t_unit


def _assumption_set(knl: Any, sizes: str) -> Any:
    """``sizes`` as an isl set over the kernel's domain parameters and the other size
    arguments it names (``lp.assume`` of a string knows the domain's parameters only;
    a stencil's size class pins strides and offsets too)."""
    import islpy as isl
    import loopy as lp

    names = list(knl.outer_params())
    names += [a.name for a in knl.args if isinstance(a, lp.ValueArg) and a.name not in names
              and re.search(rf"\b{a.name}\b", sizes)]
    return isl.BasicSet.read_from_str(knl.domains[0].get_ctx(),
                                      f"[{', '.join(names)}] -> {{ : {sizes} }}")


def _entry_chars(program: Program) -> Iterator[str]:
    for e in program.entries:
        if e.kind in ("op", "call"):
            yield from e.loop
        elif e.kind in ("load", "arg", "reduce", "lit", "iota", "sparse"):
            yield e.dtype


def _has_complex(program: Program) -> bool:
    return any(c in "FD" for c in _entry_chars(program))


def _complex_target(target: Any, program: Program, device: Any) -> Any:
    """Loopy's PyOpenCL target for a kernel holding complex values (plain OpenCL C's
    target knows no complex types; see :mod:`fuseloop.lower.complex_ops`)."""
    import loopy as lp

    from ..errors import DTypeError

    if "D" in _entry_chars(program) and not device.has_fp64:
        raise DTypeError(
            f"device {device.name} does not support float64, but this expression needs "
            "complex128 (numpy promotes e.g. complex64 with float64 to complex128); "
            "use complex64 and float32 arrays or .astype(np.complex64)")
    if type(target) is lp.OpenCLTarget:
        return lp.PyOpenCLTarget()
    if type(target) is lp.CudaTarget:
        # (OpenCL C with pyopencl's complex types, which the CUDA backend's prelude
        # spells for NVRTC: see fuseloop.lower.complex_ops)
        return lp.PyOpenCLTarget()
    raise DTypeError(f"complex dtypes are supported on OpenCL devices only, not on "
                     f"{device.name} (its Loopy target is {type(target).__name__})")


def apply_recipe(t_unit: Any, recipe: Any, device: Any) -> Any:
    """``t_unit`` as ``recipe`` transforms it for ``device``, its gathers' index checks
    then folded into one flag store per work-item (:mod:`.gather_flags`)."""
    from .gather_flags import fold_index_checks

    return fold_index_checks(recipe.transform(t_unit, device))


def _generate_code(t_unit: Any) -> Any:
    """``loopy.generate_code_v2``, again without Loopy's disk caches if one of their
    entries cannot be read (fuseloop keeps its own cache of what it generates)."""
    import loopy as lp

    from .loopy_classes import install

    install()
    try:
        return lp.generate_code_v2(t_unit)
    except _UNREADABLE_CACHE_ENTRY:
        # (serialised: CacheMode sets a module global and restores what it found)
        with _loopy_cache_off_lock, lp.CacheMode(False):
            return lp.generate_code_v2(t_unit)


def _declaration(node: Any, name: str) -> Any:
    """The cgen function declaration of kernel ``name`` in generated device code ``node``."""
    stack = [node]
    while stack:
        n = stack.pop()
        decl = getattr(n, "fdecl", None)
        if decl is not None:
            # (wrappers: kernel qualifier, work-group size attribute, ...)
            while decl is not None and not hasattr(decl, "arg_decls"):
                decl = getattr(decl, "subdecl", None)
            if decl is not None and getattr(decl.subdecl, "name", None) == name:
                return decl
        stack.extend(getattr(n, "contents", ()))
    raise RuntimeError(f"Loopy generated no declaration of kernel {name!r}")


def passed_arguments(code: Any, name: str) -> list[str]:
    """The arguments of kernel ``name`` as Loopy's generated code declares them, in order.

    Loopy leaves arguments the kernel does not use (an unused scalar) out of
    the signature, so this can be shorter than the entrypoint's argument list.
    """
    for prog in code.device_programs:
        if prog.name == name:
            return [d.name for d in _declaration(prog.ast, name).arg_decls]
    raise RuntimeError(f"Loopy generated no device program named {name!r}")


def _to_py(e: Any) -> str:
    # sizes read the integer parameters as p[k] (see cache._compile_sizes)
    return re.sub(r"\bp(\d+)\b", r"p[\1]", str(e))


def generate(t_unit: Any, device: Any) -> KernelPlan:
    """Loopy's code generation for ``t_unit``: its source, arguments and grid."""
    import loopy as lp

    from ..backends import backend_for

    code = _generate_code(t_unit)
    entry = t_unit.default_entrypoint
    gsize, lsize = entry.get_grid_size_upper_bounds_as_exprs(t_unit.callables_table)
    _increment("kernels_lowered")
    # (Loopy's OpenCL spelling of a loop to unroll is OpenCL C 2.0's attribute;
    # NVIDIA's OpenCL C 1.2 compiler, PoCL and NVRTC all read the pragma)
    source = re.sub(r"__attribute__\(\(opencl_unroll_hint(?:\((\d+)\))?\)\)",
                    lambda m: f"#pragma unroll {m.group(1) or ''}".rstrip(),
                    code.device_code())
    if "pyopencl-complex.h" in source:
        from .complex_ops import inline_complex_header

        source = inline_complex_header(source)
    if os.environ.get("FUSELOOP_SHOW_KERNELS", "") not in ("", "0"):
        print(f"fuseloop: new kernel for {device.name}:\n{source}", file=sys.stderr)
    by_name = {a.name: a for a in entry.args}
    arg_names = [n for n in passed_arguments(code, entry.name) if n in by_name]
    arg_dtypes = [by_name[n].dtype.numpy_dtype.name if isinstance(by_name[n], lp.ValueArg)
                  else None for n in arg_names]
    gs, ls = [_to_py(e) for e in gsize] or ["1"], [_to_py(e) for e in lsize] or ["1"]
    # a grid with more group axes than local axes (a batch axis g.2 over 2-D
    # work-groups) needs local size 1 along the extra axes
    ls += ["1"] * (len(gs) - len(ls))
    gs += ["1"] * (len(ls) - len(gs))
    return KernelPlan(
        name=entry.name, source=source, arg_names=arg_names, gsize=gs, lsize=ls,
        build_options=[*(entry.options.build_options or []),
                       *backend_for(device).build_options(device)],
        arg_dtypes=arg_dtypes)


def kernel_plan(program: Program, index_dtype: np.dtype, device: Any, recipe: Any,
                user_functions: Any, sizes: str = "") -> KernelPlan:
    """All three steps: what the kernel cache builds on a miss."""
    with loopy_section(), _without_loopy_caches():
        if program.first is not None:  # (two stages in one launch)
            from . import one_launch

            return one_launch.kernel_plan(program, index_dtype, device, recipe,
                                          user_functions, sizes)
        t_unit = lower(program, index_dtype, recipe, user_functions, sizes, device=device)
        plan = generate(apply_recipe(t_unit, recipe, device), device)
    if (len(program.outputs) > 1 and program.contraction is None) or program.one_group:
        # an output may be a buffer that another output's value reads (``fl.compute(
        # ..., out=(a, b))`` in place), or that its own value reads (``one_group``): its
        # loads come before the stores (see stores.values_before_stores, recipes/
        # one_group.py), which ``restrict`` would let the compiler undo
        plan.source = re.sub(r"\*\s*__restrict__\s+", "*", plan.source)
    return plan
