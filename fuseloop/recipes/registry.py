"""Which recipe a device gets: registrations keyed by device predicates, and ``use()``.

``register_recipe(predicate, recipe)`` files a recipe under a
:class:`DevicePredicate` and a kernel kind; :func:`recipe_for` answers with the
registration whose predicate matches the device and names the most fields
(the most specific), the later one on a tie.  Inside
``with fuseloop.recipes.use(recipe):`` that recipe applies instead, to every
device, in the current thread or task only (a context variable, like
``fl.device``).  Either way the answer is the recipe's variant for the device
(:meth:`Recipe.for_device`).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..errors import RecipeError
from ..recipe_state import current as current  # (the names registry.current, .stamp kept)
from ..recipe_state import stamp as stamp
from .core import KINDS, Recipe, RecipeFunction, SizeClassFunction, _BoundTransform

if TYPE_CHECKING:
    from ..runtime.devices import Device


@dataclass(frozen=True)
class DevicePredicate:
    """Devices a recipe is for: ``type`` (``"cpu"``, ``"gpu"``, ``"accelerator"``) must be
    equal; ``vendor``, ``name`` and ``platform`` must occur in the device's (any case).
    Fields left None match every device; the empty predicate matches all."""

    type: str | None = None
    vendor: str | None = None
    name: str | None = None
    platform: str | None = None

    @property
    def specificity(self) -> int:
        """How many fields it names (more: more specific)."""
        return sum(getattr(self, f.name) is not None for f in fields(self))

    def matches(self, device: Device) -> bool:
        if self.type is not None and device.type != self.type:
            return False
        return all(want is None or want.lower() in str(getattr(device, attr)).lower()
                   for attr, want in (("vendor", self.vendor), ("name", self.name),
                                      ("platform", self.platform)))

    def __str__(self) -> str:
        named = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                          if getattr(self, f.name) is not None)
        return f"DevicePredicate({named})"


#: the string keys of the old registry, as predicates
SHORTHANDS = {
    "default": DevicePredicate(),
    "cpu": DevicePredicate(type="cpu"),
    "gpu": DevicePredicate(type="gpu"),
    "accelerator": DevicePredicate(type="accelerator"),
    "nvidia": DevicePredicate(type="gpu", vendor="nvidia"),
}

# (predicate, kind) -> recipe, in registration order (the later wins a tie)
_REGISTRY: dict[tuple[DevicePredicate, str], Recipe] = {}
# recipe_for's answers outside use(): (device index, kind) -> (device, recipe)
_CHOSEN: dict[tuple[int, str], tuple[Device, Recipe]] = {}
# use()'s recipes: kind -> recipe (None: the registry's)
_USING: contextvars.ContextVar[dict[str, Recipe] | None] = contextvars.ContextVar(
    "fuseloop_recipes", default=None)
# the recipes token (``current[0]``) and ``stamp()`` live in fuseloop/recipe_state.py,
# which the evaluation paths import without loading the recipes
_uses_open = [0]
_uses_lock = threading.Lock()


def forget_chosen() -> None:
    """Forget recipe_for's remembered answers (after the registry changed)."""
    _CHOSEN.clear()
    if current[0] is not None:
        current[0] = object()


def predicate(spec: DevicePredicate | str) -> DevicePredicate:
    """``spec`` as a predicate: one already, or one of the :data:`SHORTHANDS`."""
    if isinstance(spec, DevicePredicate):
        return spec
    if isinstance(spec, str) and spec in SHORTHANDS:
        return SHORTHANDS[spec]
    raise RecipeError(f"unknown device type {spec!r} for a recipe: use one of "
                      f"{', '.join(map(repr, SHORTHANDS))} or a fuseloop.recipes.DevicePredicate"
                      "(type=, vendor=, name=, platform=)")


def _as_recipe(func: RecipeFunction | Recipe | _BoundTransform, name: str | None,
               kind: str | None) -> Recipe:
    if isinstance(func, _BoundTransform):  # a registered recipe's ``transform`` again
        func = func.recipe
    if isinstance(func, Recipe):
        if kind is not None and kind != func.kind:
            raise RecipeError(f"recipe {func.name!r} transforms {func.kind} kernels, not "
                              f"{kind} ones")
        return func if name is None or name == func.name else func.with_params(name=name)
    if name is None:
        raise RecipeError(f"a recipe needs a name: register_recipe(..., name=...) for "
                          f"{getattr(func, '__qualname__', func)!r}")
    return Recipe(name, func, kind=kind or "elementwise")


def register_recipe(device_type: DevicePredicate | str, func: RecipeFunction | Recipe, *,
                    name: str | None = None, version: str | None = None,
                    kind: str | None = None, size_class: SizeClassFunction | None = None,
                    concat_chunk: int | None = None, **params: Any) -> Recipe:
    """Use ``func`` for kernels of ``kind`` on the devices ``device_type`` matches.

    ``device_type`` is a :class:`DevicePredicate` or one of the shorthands
    ``"nvidia"`` (GPUs whose vendor is NVIDIA), ``"gpu"``, ``"cpu"``, ``"accelerator"``,
    ``"default"`` (every device).  ``func`` is a :class:`Recipe` or a function
    ``(t_unit, device) -> t_unit`` (``name`` required; ``kind`` defaults to
    ``"elementwise"``).  ``version``, ``size_class``, ``concat_chunk`` and further
    keywords set the recipe's parameters (:meth:`Recipe.with_params`).  Registering
    again for the same predicate and kind replaces the entry.  Returns the recipe.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"recipe kind must be one of {KINDS}, got {kind!r}")
    pred = predicate(device_type)
    recipe = _as_recipe(func, name, kind)
    given = {k: v for k, v in (("size_class", size_class), ("concat_chunk", concat_chunk))
             if v is not None} | params
    if given or version is not None:
        recipe = recipe.with_params(version=version, **given)
    _REGISTRY.pop((pred, recipe.kind), None)  # re-inserted last: it wins ties
    _REGISTRY[(pred, recipe.kind)] = recipe
    forget_chosen()
    return recipe


def recipe_for(device: Device, kind: str = "elementwise") -> Recipe:
    """The recipe that applies to ``device``: ``use()``'s, else the most specific
    registration's, as its variant for the device."""
    using = _USING.get()
    if using is not None and kind in using:
        return using[kind].for_device(device)
    hit = _CHOSEN.get((device.index, kind))
    if hit is not None and hit[0] is device:
        return hit[1]
    recipe = _choose(device, kind).for_device(device)
    _CHOSEN[(device.index, kind)] = (device, recipe)
    return recipe


def _choose(device: Device, kind: str) -> Recipe:
    if kind not in KINDS:
        raise ValueError(f"recipe kind must be one of {KINDS}, got {kind!r}")
    best, best_rank = None, -1
    for (pred, k), recipe in _REGISTRY.items():
        # ">=": the later of two equally specific registrations wins
        if k == kind and pred.matches(device) and pred.specificity >= best_rank:
            best, best_rank = recipe, pred.specificity
    if best is None:
        raise RecipeError(f"no {kind} recipe is registered for {device} (type "
                          f"{device.type!r}, platform {device.platform!r}); register one for "
                          "'default' with fl.register_recipe")
    return best


def registered_recipes() -> dict[tuple[DevicePredicate, str], Recipe]:
    """The registry: ``(predicate, kind) -> recipe``."""
    return dict(_REGISTRY)


def find(name: str, kind: str | None = None) -> Recipe:
    """The registered recipe called ``name`` (of ``kind``, when given)."""
    found = {r.kind: r for (_, k), r in _REGISTRY.items()
             if r.name == name and (kind is None or k == kind)}
    if not found:
        known = sorted({r.name for r in _REGISTRY.values()})
        raise RecipeError(f"no recipe named {name!r}" + (f" for {kind} kernels" if kind else "")
                          + f" is registered; registered: {', '.join(known)}")
    if len(found) > 1:
        raise RecipeError(f"recipes named {name!r} exist for {sorted(found)} kernels: pass "
                          "kind=... to choose")
    return next(iter(found.values()))


@contextlib.contextmanager
def use(recipe: Recipe | RecipeFunction | str, kind: str | None = None,
        **params: Any) -> Iterator[Recipe]:
    """Within the block, kernels of the recipe's kind use ``recipe`` on every device.

    ``recipe`` is a :class:`Recipe`, the name of a registered one, or a function
    (then ``kind`` defaults to ``"elementwise"``); ``params`` make a variant
    (:meth:`Recipe.with_params`).  Context-local, like ``fl.device``; blocks nest,
    and leaving one restores what applied before.  Yields the recipe.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"recipe kind must be one of {KINDS}, got {kind!r}")
    if isinstance(recipe, str):
        chosen = find(recipe, kind)
    else:
        chosen = _as_recipe(recipe, getattr(recipe, "__name__", None)
                            if not isinstance(recipe, Recipe | _BoundTransform) else None, kind)
    if params:
        chosen = chosen.with_params(**params)
    token = _USING.set({**(_USING.get() or {}), chosen.kind: chosen})
    with _uses_lock:
        _uses_open[0] += 1
        current[0] = None
    try:
        yield chosen
    finally:
        _USING.reset(token)
        with _uses_lock:
            _uses_open[0] -= 1
            if not _uses_open[0]:
                current[0] = object()


from ..caches import register as _register_cache  # noqa: E402  (registry: fuseloop/caches.py)

_register_cache("recipes.chosen", forget_chosen, lambda: len(_CHOSEN),
                why="one entry per device and kernel kind")
