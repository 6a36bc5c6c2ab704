"""Programs (steps over an environment of values), their keys with index arrays and masks,
and their listing as fuseloop code."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import fuseloop as fl
from fuzz.reference import Scalar, quiet, ref_ufunc

INPLACE = {"add": operator.iadd, "subtract": operator.isub, "multiply": operator.imul,
           "true_divide": operator.itruediv, "floor_divide": operator.ifloordiv,
           "remainder": operator.imod, "bitwise_and": operator.iand,
           "bitwise_or": operator.ior, "bitwise_xor": operator.ixor,
           "left_shift": operator.ilshift, "right_shift": operator.irshift}


# the coefficients of ``t[...] = alpha * (x @ y) + beta * t`` (the ``gemm`` contract form)
GEMM_ALPHA, GEMM_BETA = Scalar("py", 1.5), Scalar("py", -0.5)

INDEX_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@dataclass(frozen=True, eq=False)
class IntIndex:
    """An integer index array in a key (numpy's advanced indexing).

    ``form``: ``np`` (a numpy array), ``list`` (nested Python lists), ``fl`` (a concrete
    fuseloop array), ``lazy`` (a lazy fuseloop expression computing the values) or ``env``
    (computed from generated value ``v{src}``: ``v % n``, minus ``n`` with ``neg``).
    ``values`` are the index values (for ``env``, as generated: the reference recomputes them).
    """

    form: str
    values: np.ndarray
    src: int | None = None
    n: int = 0
    neg: bool = False

    def for_numpy(self, env: list) -> Any:
        if self.form == "env":
            with quiet():
                v = np.remainder(env[self.src].val, self.n)
                return v - self.n if self.neg else v
        return self.values.tolist() if self.form == "list" else self.values

    def for_fl(self, env: list) -> Any:
        if self.form == "env":
            v = env[self.src] % self.n
            return v - self.n if self.neg else v
        if self.form == "list":
            return self.values.tolist()
        if self.form == "fl":
            return fl.asarray(self.values)
        if self.form == "lazy":
            return fl.asarray(self.values.astype(np.int64) - 1) + 1
        return self.values

    def __repr__(self) -> str:
        if self.form == "env":
            return f"v{self.src} % {self.n}" + (f" - {self.n}" if self.neg else "")
        if self.form == "list":
            return repr(self.values.tolist())
        text = f"np.array({self.values.tolist()!r}, np.{self.values.dtype})"
        if self.form == "fl":
            return f"fl.asarray({text})"
        if self.form == "lazy":
            return f"(fl.asarray({text} - 1) + 1)"
        return text


@dataclass(frozen=True, eq=False)
class MaskIndex:
    """A boolean mask in a key: ``np``/``list``/``fl`` (host values), ``env`` (generated bool
    value ``v{src}``) or ``cmp`` (a lazy comparison ``fl.<op>(v{src}, other)``)."""

    form: str
    values: np.ndarray | None = None
    src: int | None = None
    op: str | None = None
    other: Any = None  # a Scalar or an env position

    def for_numpy(self, env: list) -> Any:
        if self.form == "env":
            return env[self.src].val
        if self.form == "cmp":
            other = env[self.other] if isinstance(self.other, int) else self.other
            return ref_ufunc(self.op, env[self.src], other).val
        return self.values.tolist() if self.form == "list" else self.values

    def for_fl(self, env: list) -> Any:
        if self.form == "env":
            return env[self.src]
        if self.form == "cmp":
            other = env[self.other] if isinstance(self.other, int) else self.other.for_fl()
            return getattr(fl, self.op)(env[self.src], other)
        if self.form == "fl":
            return fl.asarray(self.values)
        return self.values.tolist() if self.form == "list" else self.values

    def __repr__(self) -> str:
        if self.form == "env":
            return f"v{self.src}"
        if self.form == "cmp":
            return f"fl.{self.op}(v{self.src}, {_op(self.other)})"
        if self.form == "list":
            return repr(self.values.tolist())
        text = f"np.array({self.values.tolist()!r})"
        return f"fl.asarray({text})" if self.form == "fl" else text


def resolve_key(key: tuple, env: list, numpy: bool) -> tuple:
    """A generated key with its index arrays and masks made for numpy or for fuseloop."""
    return tuple((k.for_numpy(env) if numpy else k.for_fl(env))
                 if isinstance(k, IntIndex | MaskIndex) else k for k in key)


@dataclass
class Program:
    inputs: list[np.ndarray]
    steps: list[tuple] = field(default_factory=list)  # (step, env index of its value or None)
    outputs: list[int] = field(default_factory=list)
    together: bool = True  # evaluate the outputs with one fl.compute

    def listing(self) -> str:
        lines = [f"v{k} = fl.asarray(np.array({a.tolist()!r}, np.{a.dtype}))"
                 if a.size <= 64 else f"v{k} = fl.asarray(<{a.dtype} array {a.shape}>)"
                 for k, a in enumerate(self.inputs)]
        for step, out in self.steps:
            text = describe(step)
            lines.append(f"v{out} = {text}" if out is not None else text)
        how = "fl.compute" if self.together else ".get() each"
        lines.append(f"outputs ({how}): {', '.join(f'v{k}' for k in self.outputs)}")
        return "\n".join(lines)


def _op(o: Any) -> str:
    return f"v{o}" if isinstance(o, int) else repr(o)


def _key(key: Any) -> str:
    def one(k):
        if isinstance(k, slice):
            s = "" if k.start is None else str(k.start)
            s += ":" + ("" if k.stop is None else str(k.stop))
            return s + (f":{k.step}" if k.step is not None else "")
        if k is Ellipsis:
            return "..."
        if isinstance(k, np.ndarray):
            return f"np.array({k.tolist()})"
        return repr(k)
    return ", ".join(one(k) for k in key) if key else "()"


def describe(step: tuple) -> str:
    kind = step[0]
    if kind == "ufunc":
        return f"fl.{step[1]}({', '.join(_op(o) for o in step[2])})"
    if kind == "where":
        return f"fl.where({', '.join(_op(o) for o in step[1:])})"
    if kind == "clip":
        return f"fl.clip({', '.join(_op(o) if o is not None else 'None' for o in step[1:])})"
    if kind == "astype":
        return f"v{step[1]}.astype(np.{step[2]})"
    if kind == "reduce":
        _, op, x, axis, keepdims, ddof = step
        extra = f", ddof={ddof}" if op in ("var", "std") else ""
        return f"fl.{op}(v{x}, axis={axis!r}, keepdims={keepdims}{extra})"
    if kind == "index":
        return f"v{step[1]}[{_key(step[2])}]"
    if kind == "shape":
        return f"fl.{step[1]}(v{step[2]}{''.join(', ' + repr(a) for a in step[3])})"
    if kind == "take":
        return f"fl.take(v{step[1]}, np.array({step[2]!r}), axis={step[3]!r})"
    if kind == "adv":
        return f"v{step[1]}[{_key(step[2])}]"
    if kind == "nonzero":
        _, fname, x, k = step
        return f"fl.{fname}(v{x})" + (f"[{k}]" if fname == "nonzero" else "")
    if kind == "concat":
        return f"fl.{step[1]}([{', '.join(f'v{x}' for x in step[2])}], axis={step[3]!r})"
    if kind == "call":
        return f"{step[1]}({', '.join(_op(o) for o in step[2])})"
    if kind == "rebuild":
        return f"(the step that made v{step[1]}, built again)"
    if kind == "eval":
        return f"v{step[1]}.eval()"
    if kind == "setitem":
        return f"v{step[1]}[{_key(step[2])}] = {_op(step[3])}"
    if kind == "inplace":
        sym = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/",
               "floor_divide": "//", "remainder": "%", "bitwise_and": "&", "bitwise_or": "|",
               "bitwise_xor": "^", "left_shift": "<<", "right_shift": ">>"}[step[3]]
        target = f"v{step[1]}" + (f"[{_key(step[2])}]" if step[2] is not None else "")
        return f"{target} {sym}= {_op(step[4])}"
    if kind == "contract":
        _, t, key, x, y, form = step
        target = f"v{t}[{_key(key) if key is not None else '...'}]"
        read = f"v{t}" if key is None else target
        if form in ("add", "subtract"):
            return f"{target} {'+' if form == 'add' else '-'}= v{x} @ v{y}"
        if form == "gemm":
            return f"{target} = {GEMM_ALPHA!r} * (v{x} @ v{y}) + {GEMM_BETA!r} * {read}"
        return f"{target} = fl.{form}(v{x} @ v{y}, {read})"
    if kind == "error":
        return f"{describe(step[1])}  # raises {step[2]} (as numpy does)"
    raise AssertionError(kind)


def as_view_key(key: tuple) -> tuple:
    """numpy's key for the same elements as a view.

    Documented deviation: an index with an integer for every axis gives a 0-d view in
    fuseloop, where numpy gives a scalar (a copy); so later writes show through it, and
    ``x[i] += v`` is an in-place operation with the ``same_kind`` rule.
    """
    return key if any(k is Ellipsis for k in key) else (*key, Ellipsis)

