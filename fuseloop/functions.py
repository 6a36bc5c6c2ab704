"""User-defined elementwise functions (VexCL's VEX_FUNCTION and function generator)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from . import launching
from .array import Array, build_node
from .dtypes import c_type_name, dtype_from_c_name
from .errors import FuseloopError
from .expr.nodes import UserCall

_SIGNATURE = re.compile(r"^\s*(?P<ret>[A-Za-z_][\w ]*?)\s+(?P<name>[A-Za-z_]\w*)\s*"
                        r"\((?P<params>[^)]*)\)\s*$")


class SignatureError(FuseloopError, ValueError):
    """An ``fl.function`` signature that is not ``type name(type a, type b, ...)``."""


class UserFunction:
    """An elementwise function with an OpenCL body: ``fl.function(signature, body)``.

    Arguments are converted to the declared parameter types, as a C call would.
    The function is emitted once into the kernel's preamble as ``c_name``, its
    name after a hash of its definition (``fl3a..._exp``): it cannot collide with
    an OpenCL builtin or with another function of the same name, and editing the
    body builds a new kernel.
    """

    def __init__(self, signature: str, body: str) -> None:
        m = _SIGNATURE.match(signature)
        if m is None:
            raise SignatureError(
                f"cannot parse function signature {signature!r}; write it like C, e.g. "
                "'float squared_radius(float x, float y)'")
        self.name = m["name"]
        self.result_dtype = dtype_from_c_name(m["ret"])
        params = [p.strip() for p in m["params"].split(",") if p.strip()]
        self.param_dtypes: list[np.dtype] = []
        self.param_names: list[str] = []
        for p in params:
            parts = p.rsplit(None, 1)
            if len(parts) != 2:
                raise SignatureError(f"parameter {p!r} of {signature!r} needs a type and a name")
            self.param_dtypes.append(dtype_from_c_name(parts[0]))
            self.param_names.append(parts[1])
        if not self.param_dtypes:
            raise SignatureError(f"{signature!r}: a function needs at least one parameter")
        self.body = body
        decl = ", ".join(f"{c_type_name(d)} {n}"
                         for d, n in zip(self.param_dtypes, self.param_names))
        ret = c_type_name(self.result_dtype)
        # The emitted name carries a hash of the whole definition, so that a body is
        # never shadowed by an OpenCL builtin of the same name (``exp``) or by another
        # function of the same name in one kernel; the key (structure signatures, cache
        # keys) is that name, so two definitions never share a kernel either.
        definition = f"{ret} {self.name}({decl})\n{body.strip()}"
        digest = hashlib.sha256(definition.encode()).hexdigest()[:16]
        self.c_name = f"fl{digest}_{self.name}"
        self.key = self.c_name
        self.source = f"static {ret} {self.c_name}({decl})\n{{\n{body.strip()}\n}}\n"
        # weakly held (see launching.user_functions): only lowering a live expression
        # that calls this function looks it up
        launching.user_functions[self.key] = self
        self.__name__ = self.name
        self.__doc__ = f"User OpenCL function {signature}"

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.param_dtypes):
            raise TypeError(f"{self.name}() takes {len(self.param_dtypes)} arguments "
                            f"({len(args)} given)")
        loop = (*self.param_dtypes, self.result_dtype)
        node, device = build_node("call", args, loop)
        if node is None:
            raise TypeError(f"{self.name}() needs at least one fuseloop array argument")
        call = UserCall(self, node.args, loop, node.shape)  # type: ignore[attr-defined]
        return Array._lazy(call, device)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"<fuseloop function {self.name}>"


class TracedFunction:
    """A Python function over scalars, traced into the calling expression.

    Calling it with fuseloop arrays runs the Python code on the lazy arrays, so
    its operations fuse with the rest of the expression (VexCL's function
    generator); with plain numbers or numpy arrays it runs as ordinary Python.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.__name__ = getattr(func, "__name__", "traced")
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: Any) -> Any:
        result = self.func(*args)
        if any(isinstance(a, Array) for a in args) and not isinstance(result, Array):
            raise TypeError(
                f"traced function {self.__name__} must return an expression of its arguments, "
                f"got {type(result).__name__}")
        return result

    def __repr__(self) -> str:
        return f"<fuseloop traced function {self.__name__}>"


def function(signature_or_func: str | Callable[..., Any], body: str | None = None) -> Any:
    """Define an elementwise function.

    * ``fl.function("float f(float x, float y)", "return x * y;")``: OpenCL body.
    * ``fl.function(py_func)`` or ``@fl.function``: a Python function over
      scalars, traced into each expression it is called in.
    """
    if isinstance(signature_or_func, str):
        if body is None:
            raise TypeError("fl.function(signature, body): the OpenCL body is missing")
        return UserFunction(signature_or_func, body)
    if callable(signature_or_func):
        if body is not None:
            raise TypeError("a traced Python function takes no OpenCL body")
        return TracedFunction(signature_or_func)
    raise TypeError("fl.function takes a signature string and a body, or a Python function")


