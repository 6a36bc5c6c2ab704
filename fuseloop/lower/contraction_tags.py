"""The kernel tags of a lowered contraction (Loopy tags are pytools ``Tag`` objects).

Apart from :mod:`fuseloop.lower.contraction` so that ``import fuseloop`` does not
import pytools (about 40 ms): they are needed only when a contraction is lowered or
its recipe applied, on a kernel cache miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytools.tag import UniqueTag

from .._lazy import prim
from .contraction import BATCH, COL, RED, ROW


@dataclass(frozen=True)
class ContractionSizes(UniqueTag):
    """Kernel tag: the names of the kernel arguments bounding ``b``, ``m``, ``n``, ``k``
    (the literal 1 for an empty group: the rows of a vector-matrix product);
    ``split_total``: a split-K first stage whose pieces do not tile the reduced range,
    the whole range's length (its operands read zero past it)."""

    batch: str | None
    rows: str | int
    cols: str | int
    reduced: str
    split_total: str | int | None = None

    def of(self, iname: str) -> str | int:
        size = {BATCH: self.batch, ROW: self.rows, COL: self.cols, RED: self.reduced}[iname]
        assert size is not None
        return size

    def limit(self, iname: str) -> Any:
        """The extent of ``iname`` as an expression (a variable or a literal)."""
        size = self.of(iname)
        return size if isinstance(size, int) else prim.Variable(size)

    def params(self) -> list[str]:
        """The names of the size arguments, sorted."""
        return sorted({v for v in (self.batch, self.rows, self.cols, self.reduced)
                       if isinstance(v, str)})


@dataclass(frozen=True)
class OperandInfo(UniqueTag):
    """Kernel tag: per operand rule, its value's dtype (numpy char) and the axis
    along which its main array is contiguous (``"k"``, ``"m"`` or ``"n"``)."""

    x_dtype: str
    y_dtype: str
    x_fast: str
    y_fast: str
