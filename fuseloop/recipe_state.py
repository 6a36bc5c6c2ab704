"""What the evaluation paths need of the recipes before any recipe is asked for.

``import fuseloop`` does not load :mod:`fuseloop.recipes`: the recipes import the
lowering's names and helpers, which a program whose arrays are never evaluated
does not need.  The hot paths compare the recipes token (:data:`current`) and ask
:func:`recipe_for`, both here; the first call of :func:`recipe_for` loads the
recipes (registering the built-in ones), later ones cost one more Python call than
the registry's own (and the replays of launch plans ask none: they compare tokens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .recipes.core import Recipe
    from .runtime.devices import Device

__all__ = ["current", "recipe_for", "stamp"]

#: ``current[0]``: a token that stays the same object while recipe_for's answers cannot
#: change, replaced when they may (a registration, its answers forgotten) and None
#: while a ``recipes.use()`` block is open in any thread (use() is context-local).  A
#: launch plan keeps the token it was last confirmed under (``LaunchPlan.stamp``, see
#: :func:`stamp`), so the hot paths compare one object instead of calling recipe_for.
#: (:mod:`fuseloop.recipes.registry` changes it.)
current: list[object | None] = [object()]


def stamp() -> object:
    """The token to keep with a recipe found by :func:`recipe_for` (read it before
    asking): ``current[0]``, or while a use() block is open a new object that never
    matches it."""
    return current[0] or object()


def _load_and_ask(device: Device, kind: str) -> Recipe:
    # the first call: load the recipes (registering the built-in ones), then ask
    from ._lazy import await_preload

    await_preload()  # (a GPU's cold process imports them on a thread: fuseloop._lazy)
    from .recipes import registry

    global _ask
    _ask = registry.recipe_for
    return _ask(device, kind)


_ask = _load_and_ask


def recipe_for(device: Device, kind: str = "elementwise") -> Recipe:
    """:func:`fuseloop.recipes.recipe_for`; the first call loads the recipes."""
    return _ask(device, kind)
