"""``fl_dmma``, the warp's float64 multiply-accumulate on FP64 tensor cores, as a Loopy
callable (imported when the DMMA recipe is applied, on a cache miss only; see
:mod:`fuseloop.recipes.matmul_dmma`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from constantdict import constantdict
from loopy.types import NumpyType

from .callables import HelperCallable


@dataclass(frozen=True, init=False)
class DmmaCallable(HelperCallable):
    """A warp's float64 ``mma.sync``: the lane's values of A, B and C in, ``outputs``
    values of D out, the first returned and the others through pointers (``d0, d1 =
    f(..)`` is written ``d0 = f(.., &d1)``: how Loopy passes a call's further
    assignees)."""

    outputs: int

    def __init__(self, name: str, param_dtypes: tuple, result_dtype: Any, source: str,
                 arg_id_to_dtype: Any = None, arg_id_to_descr: Any = None,
                 name_in_target: str | None = None, *, outputs: int = 1) -> None:
        super().__init__(name, param_dtypes, result_dtype, source, arg_id_to_dtype,
                         arg_id_to_descr, name_in_target)
        object.__setattr__(self, "outputs", outputs)

    def with_types(self, arg_id_to_dtype: Any, clbl_inf_ctx: Any) -> Any:
        f64 = NumpyType(np.dtype(np.float64))
        types = constantdict({i: f64 for i in range(-self.outputs, len(self.param_dtypes))})
        return self.copy(name_in_target=self.name, arg_id_to_dtype=types), clbl_inf_ctx


def dmma_callable(name: str, counts: tuple[int, int, int], source: str) -> DmmaCallable:
    """The callable ``name`` whose definition (the preamble) is ``source``; ``counts``:
    the lane's values of A, B and C (as many of D)."""
    f64 = np.dtype(np.float64)
    return DmmaCallable(name, (f64,) * sum(counts), f64, source, outputs=counts[2])
