"""Fuseloop's helper and user functions as Loopy callables (imported on a cache miss only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from constantdict import constantdict
from loopy.kernel.function_interface import ScalarCallable
from loopy.types import NumpyType

from .kernel import kernel_dtype


@dataclass(frozen=True, init=False)
class HelperCallable(ScalarCallable):
    """A fuseloop helper or user function: fixed signature, source in the preamble."""

    param_dtypes: tuple
    result_dtype: Any
    source: str

    def __init__(self, name: str, param_dtypes: tuple, result_dtype: Any, source: str,
                 arg_id_to_dtype: Any = None, arg_id_to_descr: Any = None,
                 name_in_target: str | None = None) -> None:
        super().__init__(name, arg_id_to_dtype=arg_id_to_dtype,
                         arg_id_to_descr=arg_id_to_descr, name_in_target=name_in_target)
        object.__setattr__(self, "param_dtypes", param_dtypes)
        object.__setattr__(self, "result_dtype", result_dtype)
        object.__setattr__(self, "source", source)

    def with_types(self, arg_id_to_dtype, clbl_inf_ctx):
        types = {i: NumpyType(kernel_dtype(d)) for i, d in enumerate(self.param_dtypes)}
        types[-1] = NumpyType(kernel_dtype(self.result_dtype))
        return (self.copy(name_in_target=self.name, arg_id_to_dtype=constantdict(types)),
                clbl_inf_ctx)

    def generate_preambles(self, target):
        yield (f"50_{self.name}", self.source)
