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
    """Four float64 inputs, two float64 outputs: ``d0, d1 = f(a, b, c0, c1)`` is written
    ``d0 = f(a, b, c0, c1, &d1)`` (how Loopy passes a call's further assignees)."""

    def with_types(self, arg_id_to_dtype: Any, clbl_inf_ctx: Any) -> Any:
        f64 = NumpyType(np.dtype(np.float64))
        types = constantdict({i: f64 for i in (-2, -1, 0, 1, 2, 3)})
        return self.copy(name_in_target=self.name, arg_id_to_dtype=types), clbl_inf_ctx


def dmma_callable(source: str) -> DmmaCallable:
    """The callable ``fl_dmma`` whose definition (the preamble) is ``source``."""
    f64 = np.dtype(np.float64)
    return DmmaCallable("fl_dmma", (f64,) * 4, f64, source)
