"""What the evaluation paths need of the recipes before any recipe is asked for.

``import fuseloop`` does not load :mod:`fuseloop.recipes`: the recipes import the
lowering's names and helpers, which a program whose arrays are never evaluated
does not need.  The hot paths compare the recipes token (:data:`current`) and ask
:func:`recipe_for`, both here; the first call of :func:`recipe_for` loads the
recipes (registering the built-in ones) and puts the registry's function in its
place, so that later calls cost what a call of the registry's own did.
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


def _load_and_ask(device: Device, kind: str = "elementwise") -> Recipe:
    """:func:`fuseloop.recipes.recipe_for`, loading the recipes first."""
    from .recipes import registry

    global recipe_for
    recipe_for = registry.recipe_for  # (callers read it as recipe_state.recipe_for)
    return registry.recipe_for(device, kind)


#: :func:`fuseloop.recipes.recipe_for` once the recipes are loaded (the first call
#: loads them)
recipe_for = _load_and_ask
