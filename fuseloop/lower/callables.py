"""Fuseloop's helper and user functions as Loopy callables (imported on a cache miss only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pymbolic.primitives as prim
from constantdict import constantdict
from loopy.kernel.function_interface import ScalarCallable
from loopy.types import NumpyType

from ..dtypes import kernel_dtype


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


@dataclass(frozen=True, init=False)
class UserCallable(HelperCallable):
    """A user function (``fl.function`` with a body): its preamble brings the functions
    it calls, in dependency order; ``pointers`` are ``(position, array)`` of its pointer
    parameters, whose argument is ``array[offset]`` in Loopy's eyes (so Loopy passes
    the array) and ``array + offset`` in the generated call."""

    preambles: tuple
    pointers: tuple
    c_name: str

    def __init__(self, name: str, param_dtypes: tuple, result_dtype: Any, source: str,
                 arg_id_to_dtype: Any = None, arg_id_to_descr: Any = None,
                 name_in_target: str | None = None, *, preambles: tuple = (),
                 pointers: tuple = (), c_name: str = "") -> None:
        super().__init__(name, param_dtypes, result_dtype, source, arg_id_to_dtype,
                         arg_id_to_descr, name_in_target)
        object.__setattr__(self, "preambles", preambles)
        object.__setattr__(self, "pointers", pointers)
        object.__setattr__(self, "c_name", c_name or name)

    def with_types(self, arg_id_to_dtype, clbl_inf_ctx):
        new, ctx = super().with_types(arg_id_to_dtype, clbl_inf_ctx)
        return new.copy(name_in_target=self.c_name), ctx

    def emit_call(self, expression_to_code_mapper, expression, target):
        call = super().emit_call(expression_to_code_mapper, expression, target)
        if not self.pointers:
            return call
        params: list[Any] = list(call.parameters)
        for k, _ in self.pointers:
            p = params[k]
            # ``in3[off]`` -> ``in3 + off``: the address, not the value
            assert isinstance(p, prim.Subscript), p
            array: Any = p.aggregate
            offset: Any = p.index
            params[k] = array if offset == 0 else prim.Sum((array, offset))
        return call.function(*params)

    def generate_preambles(self, target):
        yield from self.preambles
