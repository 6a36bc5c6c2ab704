"""Role tags on the lowered kernel's inames, for recipes to match with ``within="tag:..."``.

The lowering knows what each loop is for; it says so with a string tag on the
iname (Loopy's ``tag:`` match expressions read these), so that a recipe selects
loops by role rather than by name (see :mod:`fuseloop.recipes.select`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .._lazy import lp
from .pieces import FLAT_INAME, PIECE_INAME_PREFIX

#: the one flat loop over all elements of an elementwise kernel
FLAT = "fl_flat"
#: the loop over output rows of a reduction kernel
ROW = "fl_row"
#: with ROW: each row's reduced elements are contiguous in memory (else ROW_STRIDED)
ROW_CONTIGUOUS = "fl_row_contiguous"
ROW_STRIDED = "fl_row_strided"
#: the loop over a row's elements (a reduction kernel's ``e``)
ROW_ELEMENT = "fl_row_element"
#: a reduction's own loop
REDUCTION = "fl_reduction"
#: a concatenation piece's loop within a chunk (``concat_chunk``)
PIECE = "fl_piece"


def tag_roles(t_unit: lp.TranslationUnit,
              roles: Mapping[str, Iterable[str]]) -> lp.TranslationUnit:
    """``t_unit`` with each iname tagged with its roles (``{iname: roles}``)."""
    from loopy.kernel.instruction import LegacyStringInstructionTag

    present = t_unit.default_entrypoint.all_inames()
    tags = [(iname, LegacyStringInstructionTag(role))
            for iname, names in roles.items() if iname in present for role in names]
    return lp.tag_inames(t_unit, tags) if tags else t_unit


def kernel_roles(reduction: bool, contiguous: bool, reduction_ids: Iterable[int],
                 pieces: int, rows: bool = False) -> dict[str, list[str]]:
    """The roles of the loops :func:`fuseloop.lower.kernel.lower_program` makes: ``i``
    (flat or rows), ``e``, ``j<rid>`` for each reduction and ``i_k<p>`` per piece
    (``rows``: an elementwise kernel in rows, ``with_row_loops``)."""
    # ("e": kernel.ELEMENT_INAME, not imported: kernel imports this module)
    if not reduction and rows:
        return {FLAT_INAME: [ROW], "e": [ROW_ELEMENT]}
    if not reduction:
        return {FLAT_INAME: [FLAT], **{f"{PIECE_INAME_PREFIX}{p}": [PIECE] for p in range(pieces)}}
    return {FLAT_INAME: [ROW, ROW_CONTIGUOUS if contiguous else ROW_STRIDED], "e": [ROW_ELEMENT],
            **{f"j{rid}": [REDUCTION] for rid in reduction_ids}}
