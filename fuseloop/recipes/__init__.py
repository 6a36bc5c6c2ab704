"""Transformation recipes: Loopy TranslationUnit -> TranslationUnit, per device.

A recipe (:class:`Recipe`, :mod:`.core`) is a function ``(t_unit, device,
**params) -> t_unit`` with its kernel kind (``"elementwise"``,
``"reduction"``, ``"contraction"``, ``"sparse"``), its named and typed parameters with
defaults, and per-device variants of them; ``recipe.with_params(...)`` makes a
variant.  It receives the lowered kernel, whose loops carry role tags
(:mod:`fuseloop.lower.roles`) that it finds with Loopy match expressions
(:mod:`.select`), and the :class:`~fuseloop.Device` it will run on.

The registry (:mod:`.registry`) files recipes under device predicates
(:class:`DevicePredicate`: type, vendor, name, platform); the most specific
match wins, and ``with use(recipe):`` overrides it for a block.  A recipe's
:attr:`Recipe.cache_id` (name, version, source fingerprint, parameter values)
is part of the kernel cache keys, so editing a recipe rebuilds its kernels.

A recipe may also name a *size class* for each launch (its ``size_class``
parameter): Loopy assumptions about the kernel's size parameters, such as
``"p0 = 8192"``.  Kernels are built and cached per class, with the assumptions
added to the kernel before the recipe runs, so that the recipe (and Loopy's
code generation) can drop loops and bounds tests that the class makes
unnecessary.  One class per size would compile a kernel per size; a recipe
keeps the number of classes small.

Built in: ``gpu-coalesced`` (``"gpu"``, ``"default"``) and ``cpu-chunked``
(``"cpu"``; vector math builtins on PoCL) for elementwise kernels, ``gpu-rows``
and ``cpu-rows`` for reductions, ``gpu-tiled`` and ``cpu-blocked`` for
contractions, ``gpu-sparse-rows`` and ``cpu-sparse-rows`` for sparse products.
"""

from __future__ import annotations

from .. import recipe_state as _recipe_state
from . import select
from .contraction import cpu_blocked, gpu_tiled
from .core import (
    KINDS,
    Derived,
    Param,
    Recipe,
    RecipeFunction,
    SizeClassFunction,
    Space,
    int_range,
    powers_of_two,
)
from .elementwise import (
    CPU_CHUNK,
    GPU_GROUP_SIZE,
    GPU_ITEMS_PER_THREAD,
    POCL,
    cpu_chunked,
    gpu_coalesced,
)
from .one_group import one_group_writes
from .registry import (
    _CHOSEN,
    _REGISTRY,
    SHORTHANDS,
    DevicePredicate,
    find,
    predicate,
    recipe_for,
    register_recipe,
    registered_recipes,
    use,
)
from .rows import cpu_rows, gpu_rows
from .sparse import cpu_sparse_rows, gpu_sparse_rows

__all__ = [
    "CPU_CHUNK", "GPU_GROUP_SIZE", "GPU_ITEMS_PER_THREAD", "KINDS", "POCL", "SHORTHANDS",
    "_CHOSEN", "_REGISTRY", "Derived", "DevicePredicate", "Param", "Recipe", "RecipeFunction",
    "SizeClassFunction", "Space", "cpu_blocked", "cpu_chunked", "cpu_rows",
    "cpu_sparse_rows", "find", "gpu_coalesced", "gpu_rows", "gpu_sparse_rows", "gpu_tiled",
    "int_range", "one_group_writes", "powers_of_two", "predicate",
    "recipe_for", "register_recipe", "registered_recipes", "select", "use",
]


def _register_builtins() -> None:
    # Loading the built-in recipes changes no answer of recipe_for (none was given
    # before: the first one loads them), so the token stays: a launch plan stamped
    # just before that first call (launching.launch_cached reads the token first)
    # stays confirmed, and its next launch takes the flat path.
    token = _recipe_state.current[0]
    for device_type, elementwise, reduction, contraction, sparse in (
            ("default", gpu_coalesced, gpu_rows, gpu_tiled, gpu_sparse_rows),
            ("gpu", gpu_coalesced, gpu_rows, gpu_tiled, gpu_sparse_rows),
            ("cpu", cpu_chunked, cpu_rows, cpu_blocked, cpu_sparse_rows)):
        for recipe in (elementwise, reduction, contraction, sparse):
            register_recipe(device_type, recipe)
    register_recipe("default", one_group_writes)
    _recipe_state.current[0] = token


_register_builtins()
