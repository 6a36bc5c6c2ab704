"""Transformation recipes: Loopy TranslationUnit -> TranslationUnit, per device type.

A recipe receives the lowered kernel, whose work is one flat loop over the iname
``"i"`` (see :mod:`fuseloop.lower.kernel`), and the :class:`~fuseloop.Device` it
will run on, and returns the transformed kernel.  Recipes are registered by
device type (``"nvidia"``, ``"gpu"``, ``"cpu"``, ``"default"``); the most
specific match wins.  Their name and version are part of the kernel cache key,
so bumping the version invalidates cached kernels built by an older recipe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import loopy as lp

from ..lower.kernel import FLAT_INAME

if TYPE_CHECKING:
    from ..runtime.devices import Device

RecipeFunction = Callable[[lp.TranslationUnit, "Device"], lp.TranslationUnit]


@dataclass(frozen=True)
class Recipe:
    name: str
    version: str
    transform: RecipeFunction

    @property
    def cache_id(self) -> tuple[str, str]:
        return (self.name, self.version)


_REGISTRY: dict[str, Recipe] = {}


def register_recipe(device_type: str, func: RecipeFunction, *, name: str,
                    version: str = "1") -> Recipe:
    """Use ``func`` for elementwise kernels on devices of ``device_type``.

    ``device_type`` is ``"nvidia"`` (NVIDIA GPUs), ``"gpu"``, ``"cpu"``,
    ``"accelerator"`` or ``"default"``.  Registering again replaces the entry.
    """
    recipe = Recipe(name, str(version), func)
    _REGISTRY[device_type] = recipe
    return recipe


def recipe_for(device: Device) -> Recipe:
    """The recipe that applies to ``device`` (most specific registration first)."""
    candidates = []
    if device.type == "gpu" and "nvidia" in device.vendor.lower():
        candidates.append("nvidia")
    candidates += [device.type, "default"]
    for c in candidates:
        if c in _REGISTRY:
            return _REGISTRY[c]
    raise AssertionError("the default recipe is always registered")


def registered_recipes() -> dict[str, Recipe]:
    return dict(_REGISTRY)


# {{{ built-in recipes

CPU_CHUNK = 4096
GPU_GROUP_SIZE = 128
GPU_ITEMS_PER_THREAD = 4


def cpu_chunked(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
    """One work-item per contiguous chunk; the sequential inner loop vectorises.

    On PoCL this is about twice as fast as one element per work-item (see
    docs/design.md for the figures).
    """
    return lp.split_iname(t_unit, FLAT_INAME, CPU_CHUNK, outer_tag="g.0")


def gpu_coalesced(t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
    """Work-groups of 128 work-items, each handling 4 elements 128 apart.

    Neighbouring work-items touch neighbouring elements (coalesced), and the
    unrolled 4 independent loads per work-item keep enough memory traffic in
    flight to approach the copy bandwidth.
    """
    t_unit = lp.split_iname(t_unit, FLAT_INAME, GPU_GROUP_SIZE * GPU_ITEMS_PER_THREAD,
                            outer_tag="g.0")
    return lp.split_iname(t_unit, f"{FLAT_INAME}_inner", GPU_GROUP_SIZE,
                          outer_tag="unr", inner_tag="l.0")


register_recipe("default", gpu_coalesced, name="gpu-coalesced", version="1")
register_recipe("gpu", gpu_coalesced, name="gpu-coalesced", version="1")
register_recipe("cpu", cpu_chunked, name="cpu-chunked", version="1")

# }}}
