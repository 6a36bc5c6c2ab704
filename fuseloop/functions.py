"""User-defined elementwise functions (VexCL's VEX_FUNCTION, VEX_FUNCTION_D and
function generator): OpenCL bodies, their dependencies on other user functions,
pointer parameters that receive whole arrays, and traced Python functions."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from . import launching
from .array import Array, build_node
from .dtypes import c_type_name, dtype_from_c_name
from .errors import (
    ConstantMemoryError,
    DependencyCycleError,
    DeviceError,
    DTypeError,
    PointerArgumentError,
    SignatureError,
)
from .expr.nodes import Iota, Leaf, Pointer, UserCall, broadcast_shapes, c_strides

_SIGNATURE = re.compile(r"^\s*(?P<ret>[A-Za-z_][\w ]*?)\s+(?P<name>[A-Za-z_]\w*)\s*"
                        r"\((?P<params>[^)]*)\)\s*$")
_SPACES = {"global": "global", "__global": "global", "constant": "constant",
           "__constant": "constant"}
_QUALIFIERS = {"const", "restrict", "__restrict", "volatile"}


class ElementIndex:
    """``fl.index``: passed to a user function, the flat (C-order) index of the
    element being computed (VexCL's ``element_index()``), as the parameter's type."""

    _instance: ElementIndex | None = None

    def __new__(cls) -> ElementIndex:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "fl.index"


index = ElementIndex()


class Param(NamedTuple):
    """One parameter of a user function: its (pointed-to) dtype, name, and for a
    pointer parameter its address space (``"global"``/``"constant"``; ``""``: a value)."""

    dtype: np.dtype
    name: str
    space: str = ""

    def declaration(self) -> str:
        c = c_type_name(self.dtype)
        if self.space == "global":
            return f"__global const {c} *{self.name}"
        if self.space == "constant":
            return f"__constant {c} *{self.name}"
        return f"{c} {self.name}"


def _parse_param(p: str, signature: str) -> Param:
    if "*" in p:
        left, _, name = p.rpartition("*")
        words = left.split()
        space = next((_SPACES[w] for w in words if w in _SPACES), "global")
        ctype = " ".join(w for w in words if w not in _SPACES and w not in _QUALIFIERS)
        name = name.strip()
        if not ctype or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise SignatureError(f"pointer parameter {p!r} of {signature!r} needs a type and "
                                 "a name, e.g. 'global const float *x'")
        return Param(dtype_from_c_name(ctype), name, space)
    parts = p.rsplit(None, 1)
    if len(parts) != 2:
        raise SignatureError(f"parameter {p!r} of {signature!r} needs a type and a name")
    words = [w for w in parts[0].split() if w not in _QUALIFIERS]
    return Param(dtype_from_c_name(" ".join(words)), parts[1])


def _calls(body: str, name: str) -> re.Pattern[str]:
    # a call of ``name`` in C source: the identifier followed by '(' (not a member)
    return re.compile(rf"(?<![\w.>]){re.escape(name)}(?=\s*\()")


class UserFunction:
    """An elementwise function with an OpenCL body: ``fl.function(signature, body)``.

    Arguments are converted to the declared parameter types, as a C call would.
    The function is emitted once into the kernel's preamble as ``c_name``, its
    name after a hash of its definition (``fl3a..._exp``): it cannot collide with
    an OpenCL builtin or with another function of the same name, and editing the
    body builds a new kernel.  ``depends`` names the user functions the body calls
    (by their own names); they are emitted before it, and their definitions are in
    its hash.  A parameter declared as a pointer (``global const float *x``)
    receives a whole device array; ``fl.index`` passed to a value parameter gives
    the element's index.
    """

    c_name: str
    key: str
    level: int

    def __init__(self, signature: str, body: str, depends: Iterable[Any] = ()) -> None:
        m = _SIGNATURE.match(signature)
        if m is None:
            raise SignatureError(
                f"cannot parse function signature {signature!r}; write it like C, e.g. "
                "'float squared_radius(float x, float y)'")
        self.name = m["name"]
        self.signature = signature
        self.result_dtype = dtype_from_c_name(m["ret"])
        self.params = [_parse_param(p.strip(), signature)
                       for p in m["params"].split(",") if p.strip()]
        if not self.params:
            raise SignatureError(f"{signature!r}: a function needs at least one parameter")
        self.param_dtypes: list[np.dtype] = [p.dtype for p in self.params]
        self.param_names: list[str] = [p.name for p in self.params]
        #: positions of the pointer parameters
        self.pointers = tuple(k for k, p in enumerate(self.params) if p.space)
        self.depends: tuple[UserFunction, ...] = tuple(_check_depends(self, depends))
        if _calls(body, self.name).search(body):
            raise DependencyCycleError(
                f"{self.name}() calls itself: OpenCL C has no recursion (the cycle "
                f"{self.name} -> {self.name}); rewrite the body as a loop")
        # calls of the dependencies by their own names become calls of their emitted names
        for dep in self.depends:
            body = _calls(body, dep.name).sub(dep.c_name, body)
        self.body = body
        decl = ", ".join(p.declaration() for p in self.params)
        ret = c_type_name(self.result_dtype)
        # The emitted name carries a hash of the whole definition (and of the definitions
        # it calls), so that a body is never shadowed by an OpenCL builtin of the same name
        # (``exp``) or by another function of the same name in one kernel; the key
        # (structure signatures, cache keys) is that name, so two definitions never share
        # a kernel either.
        definition = f"{ret} {self.name}({decl})\n{body.strip()}"
        definition += "".join(f"\n{d.key}" for d in self.depends)
        digest = hashlib.sha256(definition.encode()).hexdigest()[:16]
        self.c_name = f"fl{digest}_{self.name}"
        self.key = self.c_name
        self.source = f"static {ret} {self.c_name}({decl})\n{{\n{body.strip()}\n}}\n"
        #: preamble order: a function after everything it calls
        self.level = 1 + max((d.level for d in self.depends), default=0)
        # weakly held (see launching.user_functions): only lowering a live expression
        # that calls this function looks it up (its dependencies are held by it)
        launching.user_functions[self.key] = self
        self.__name__ = self.name
        self.__doc__ = f"User OpenCL function {signature}"

    def preambles(self) -> list[tuple[str, str]]:
        """``(tag, source)`` of this function and of everything it calls; Loopy emits
        preambles sorted by tag, so a lower level (a dependency) comes first."""
        out: dict[str, str] = {}
        stack: list[UserFunction] = [self]
        while stack:
            f = stack.pop()
            tag = f"50_{f.level:03d}_{f.c_name}"
            if tag not in out:
                out[tag] = f.source
                stack.extend(f.depends)
        return sorted(out.items())

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}() takes {len(self.params)} arguments "
                            f"({len(args)} given)")
        pointers = {k: self._pointer(k, args[k]) for k in self.pointers}
        values = [k for k in range(len(args)) if k not in pointers]
        arrays = [args[k] for k in values if isinstance(args[k], Array)]
        if arrays:
            shape = broadcast_shapes(*(a.shape for a in arrays))
        elif pointers:  # only pointers (and fl.index): one result per pointed-to element
            shape = next(iter(pointers.values())).shape
        else:
            raise TypeError(f"{self.name}() needs at least one fuseloop array argument")
        device = (arrays or list(pointers.values()))[0].device
        for p in pointers.values():
            if p.device is not device:
                raise DeviceError(f"{self.name}(): a pointer argument is on {p.device}, the "
                                  f"other arguments on {device}; move it with fl.asarray")
        operands = []
        for k in values:
            a = args[k]
            if a is index:
                dt = self.param_dtypes[k]
                a = Array._lazy(Iota(shape, dt if dt.kind in "iu" else np.dtype(np.int64)),
                                device)
            operands.append(a)
        loop = (*self.param_dtypes, self.result_dtype)
        node, _ = build_node("call", tuple(operands),
                             (*(loop[k] for k in values), self.result_dtype))
        if node is None:
            raise TypeError(f"{self.name}() needs at least one fuseloop array argument")
        value_args = iter(node.args)  # type: ignore[attr-defined]
        full = tuple(Pointer(pointers[k]._node) if k in pointers  # type: ignore[arg-type]
                     else next(value_args) for k in range(len(args)))
        call = UserCall(self, full, loop, shape)
        return Array._lazy(call, device)

    def _pointer(self, k: int, a: Any) -> Array:
        """Argument ``a`` of pointer parameter ``k``, as a contiguous device array."""
        p = self.params[k]
        what = f"{self.name}(): parameter {p.declaration()!r}"
        if not isinstance(a, Array):
            shown = "fl.index" if a is index else type(a).__name__
            raise PointerArgumentError(
                f"{what} takes a fuseloop array (the whole array is passed), got {shown}; "
                "pass an fl.asarray(...) of the data, or declare the parameter as a value "
                f"('{c_type_name(p.dtype)} {p.name}')")
        if a.dtype != p.dtype:
            raise DTypeError(f"{what} points to {p.dtype}, got an array of {a.dtype}: convert "
                             f"it once with .astype(np.{p.dtype.name})")
        if not a.ndim:
            raise PointerArgumentError(f"{what} takes an array, got a 0-d array; pass a "
                                       "scalar through a value parameter instead")
        a.eval()
        if type(a._node) is not Leaf or a._node.view_strides() != c_strides(a.shape):
            a = a.copy().eval()  # a strided view: the function indexes it as C order
        storage = a._storage
        assert storage is not None
        constant = storage.constant
        if constant and p.space != "constant":
            raise ConstantMemoryError(
                f"{what} is a global pointer, but the array passed is in constant memory "
                "(fl.constant); declare the parameter 'constant "
                f"{c_type_name(p.dtype)} *{p.name}'")
        if not constant and p.space == "constant":
            raise ConstantMemoryError(
                f"{what} is a constant pointer: pass fl.constant(array), not a plain array")
        return a

    def __repr__(self) -> str:
        return f"<fuseloop function {self.name}>"


def _check_depends(owner: UserFunction, depends: Iterable[Any]) -> list[UserFunction]:
    deps = list(depends)
    names: dict[str, UserFunction] = {}
    for d in deps:
        if isinstance(d, TracedFunction):
            raise TypeError(f"{owner.name}(): depends lists {d.__name__}, a traced Python "
                            "function; an OpenCL body can call only fl.function(signature, "
                            "body) functions")
        if not isinstance(d, UserFunction):
            raise TypeError(f"{owner.name}(): depends takes fl.function objects, got "
                            f"{type(d).__name__}")
        other = names.get(d.name)
        if other is not None and other.key != d.key:
            raise SignatureError(
                f"{owner.name}(): depends lists two different functions named {d.name!r}; "
                "the body calls dependencies by name, so give them different names")
        names[d.name] = d
    return deps


_tracing = threading.local()


class TracedFunction:
    """A Python function over scalars, traced into the calling expression.

    Calling it with fuseloop arrays runs the Python code on the lazy arrays, so
    its operations fuse with the rest of the expression (VexCL's function
    generator); with plain numbers or numpy arrays it runs as ordinary Python.
    Other user functions it calls (traced or with OpenCL bodies) are its
    dependencies, found as it runs: they fuse the same way, and a function that
    calls itself is refused (the chain of calls is named).
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.__name__ = getattr(func, "__name__", "traced")
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: Any) -> Any:
        traced = any(isinstance(a, Array) for a in args)
        if not traced:
            return self.func(*args)
        stack: list[TracedFunction] = getattr(_tracing, "stack", None) or []
        _tracing.stack = stack
        if self in stack:
            chain = " -> ".join(f.__name__ for f in stack[stack.index(self):])
            raise DependencyCycleError(
                f"traced function {self.__name__} calls itself ({chain} -> {self.__name__}): "
                "a kernel cannot recurse; write the recursion as a loop in Python over "
                "a fixed depth, or as an OpenCL body with a loop")
        stack.append(self)
        try:
            result = self.func(*args)
        finally:
            stack.pop()
        if not isinstance(result, Array):
            raise TypeError(
                f"traced function {self.__name__} must return an expression of its arguments, "
                f"got {type(result).__name__}")
        return result

    def __repr__(self) -> str:
        return f"<fuseloop traced function {self.__name__}>"


def function(signature_or_func: str | Callable[..., Any], body: str | None = None, *,
             depends: Iterable[Any] = ()) -> Any:
    """Define an elementwise function.

    * ``fl.function("float f(float x, float y)", "return x * y;")``: OpenCL body;
      ``depends=[g, h]``: user functions the body calls by name (emitted first).
      A parameter ``global const float *p`` (or ``constant float *p`` for an
      ``fl.constant`` array) receives a whole array; ``fl.index`` passed to an
      integer parameter gives the element's flat index.
    * ``fl.function(py_func)`` or ``@fl.function``: a Python function over
      scalars, traced into each expression it is called in.
    """
    if isinstance(signature_or_func, str):
        if body is None:
            raise TypeError("fl.function(signature, body): the OpenCL body is missing")
        return UserFunction(signature_or_func, body, depends)
    if callable(signature_or_func):
        if body is not None:
            raise TypeError("a traced Python function takes no OpenCL body")
        if depends:
            raise TypeError("a traced Python function finds its dependencies as it runs: "
                            "depends= is for OpenCL bodies")
        return TracedFunction(signature_or_func)
    raise TypeError("fl.function takes a signature string and a body, or a Python function")
