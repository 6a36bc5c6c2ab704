"""Finding a kernel's loops and instructions with Loopy match expressions.

The lowering tags each loop with its role (:mod:`fuseloop.lower.roles`), so a
recipe asks for ``inames(knl, "tag:fl_reduction")`` rather than for the inames
whose name starts with ``j``.  ``within`` is a Loopy match expression
(:func:`loopy.match.parse_match`): for inames, ``id:<glob>`` matches the
iname's name and ``tag:<glob>`` its role tags; ``and``, ``or``, ``not`` and
parentheses combine them.  For instructions it is Loopy's own matching
(``id:``, ``tag:``, ``writes:``, ``reads:``, ``iname:``).
"""

from __future__ import annotations

from typing import Any

from .._lazy import lp
from ..lower.roles import (
    FLAT,
    PIECE,
    REDUCTION,
    ROW,
    ROW_CONTIGUOUS,
    ROW_ELEMENT,
    ROW_STRIDED,
)

__all__ = ["FLAT", "PIECE", "REDUCTION", "ROW", "ROW_CONTIGUOUS", "ROW_ELEMENT", "ROW_STRIDED",
           "has_iname", "iname", "inames", "instructions"]


def _kernel(knl: lp.LoopKernel | lp.TranslationUnit) -> lp.LoopKernel:
    return knl.default_entrypoint if isinstance(knl, lp.TranslationUnit) else knl


def inames(knl: lp.LoopKernel | lp.TranslationUnit, within: Any) -> list[str]:
    """The kernel's inames that ``within`` matches, sorted by name."""
    knl = _kernel(knl)
    from loopy.match import ConcreteMatchable, parse_match

    match = parse_match(within)
    return sorted(name for name, iname in knl.inames.items()
                  if match(knl, ConcreteMatchable(name, iname.tags)))


def has_iname(knl: lp.LoopKernel | lp.TranslationUnit, within: Any) -> bool:
    """Whether some iname of the kernel matches ``within``."""
    return bool(inames(knl, within))


def iname(knl: lp.LoopKernel | lp.TranslationUnit, within: Any) -> str | None:
    """The one iname ``within`` matches, or None when none does (more than one: an error)."""
    found = inames(knl, within)
    if len(found) > 1:
        raise ValueError(f"{within!r} matches the inames {found} of {_kernel(knl).name}; "
                         "expected at most one")
    return found[0] if found else None


def instructions(knl: lp.LoopKernel | lp.TranslationUnit, within: Any) -> list[Any]:
    """The kernel's instructions that ``within`` matches (Loopy's own matching)."""
    knl = _kernel(knl)
    from loopy.match import parse_match

    match = parse_match(within)
    return [insn for insn in knl.instructions if match(knl, insn)]
