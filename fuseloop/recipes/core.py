"""The :class:`Recipe` object: a transform function, its declared parameters and its identity.

A recipe is ``func(t_unit, device, **params) -> t_unit`` plus what fuseloop
needs to know about it: the kernel kind it transforms (its precondition: the
lowering hands it kernels of that kind only), its named and typed parameters
with their defaults (:class:`Param`), per-device variants of those parameters
(:class:`~fuseloop.recipes.registry.DevicePredicate` -> values) and its cache
identity :attr:`Recipe.cache_id`: name, version, a fingerprint of the source
of the function (and of this package, whose helpers it calls) and the parameter
values.  Editing a recipe's function therefore rebuilds its kernels without a
version bump.

Three parameters belong to the pipeline rather than the function, and every
recipe has them: ``size_class`` (see :mod:`fuseloop.recipes`), ``concat_chunk`` and
``row_loops`` (see :func:`~fuseloop.register_recipe`).
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import lp
from ..errors import RecipeError

if TYPE_CHECKING:
    from ..runtime.devices import Device
    from .registry import DevicePredicate

#: a recipe's function: ``(t_unit, device, **params) -> t_unit``
RecipeFunction = Callable[..., "lp.TranslationUnit"]
#: ``(program, params, n_rows, n_elem) -> assumptions`` ("" for none): ``params``
#: are the values of the kernel's parameters ``p<k>``; ``n_rows`` and ``n_elem``
#: those of ``N`` and ``NE``
SizeClassFunction = Callable[[Any, Sequence[int], int, int], str]
#: ``(values, device) -> bool``: a recipe's test of a combination of parameter values
ValidFunction = Callable[[Mapping[str, Any], Any], bool]
KINDS = ("elementwise", "reduction", "contraction", "sparse", "one_group")


@dataclass(frozen=True)
class Derived:
    """A parameter default computed from the recipe's other parameter values."""

    compute: Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Space:
    """The values a parameter may take: ``candidates``, what a search
    (:func:`fuseloop.tune`) tries, and ``rule``, the test of a value (default:
    being one of the candidates); ``text`` describes the rule in errors."""

    candidates: tuple
    rule: Callable[[Any], bool] | None = None
    text: str = ""

    def __contains__(self, value: Any) -> bool:
        if self.rule is not None:
            return bool(self.rule(value))
        return any(value == c and type(value) is type(c) for c in self.candidates)

    def __str__(self) -> str:
        return self.text or "one of " + ", ".join(map(repr, self.candidates))


def powers_of_two(lo: int, hi: int, search: Sequence[int] | None = None) -> Space:
    """Powers of two from ``lo`` to ``hi``; a search tries ``search`` (default: all)."""
    every = tuple(1 << k for k in range(lo.bit_length() - 1, hi.bit_length())
                  if lo <= 1 << k <= hi)
    return Space(tuple(search) if search is not None else every,
                 lambda v: isinstance(v, int) and v in every,
                 f"a power of two from {lo} to {hi}")


def int_range(lo: int, hi: int, search: Sequence[int]) -> Space:
    """Integers from ``lo`` to ``hi``; a search tries ``search``."""
    return Space(tuple(search), lambda v: isinstance(v, int) and lo <= v <= hi,
                 f"an integer from {lo} to {hi}")


@dataclass(frozen=True)
class Param:
    """A recipe parameter: ``type`` (a type or tuple of types; a default of None also
    allows None), its ``default`` (a value or :class:`Derived`), what it does, and its
    ``space`` (:class:`Space`, or a tuple of the allowed values; None: any value of the
    type, and not searched by :func:`fuseloop.tune`)."""

    name: str
    type: Any
    default: Any
    doc: str = ""
    space: Space | tuple | None = None

    def __post_init__(self) -> None:
        if isinstance(self.space, tuple):
            object.__setattr__(self, "space", Space(self.space))

    def to_json(self, value: Any) -> Any:
        """``value`` as JSON (a named tuple as a list), for the tuning database."""
        return list(value) if isinstance(value, tuple) else value

    def from_json(self, value: Any) -> Any:
        """The inverse of :meth:`to_json`."""
        if not isinstance(value, list):
            return value
        for t in self.type if isinstance(self.type, tuple) else (self.type,):
            if isinstance(t, type) and issubclass(t, tuple):  # (a plain or a named tuple)
                return t(*value) if hasattr(t, "_fields") else tuple(value)
        return value

    def check(self, value: Any, recipe: str) -> Any:
        if value is None and (self.default is None or isinstance(self.default, Derived)):
            return value
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        ok = (callable(value) if Callable in types else isinstance(value, types))
        if isinstance(value, bool) and bool not in types:  # (bool is an int to isinstance)
            ok = False
        if not ok:
            names = " or ".join(getattr(t, "__name__", str(t)) for t in types)
            raise RecipeError(f"recipe {recipe!r}: parameter {self.name!r} must be {names}, "
                              f"got {type(value).__name__} {value!r}")
        if self.space is not None and value not in self.space:
            raise RecipeError(f"recipe {recipe!r}: parameter {self.name!r} = {value!r} is "
                              f"outside its space ({self.space})")
        return value


_PIPELINE_PARAMS = (
    Param("size_class", Callable, None, "picks each launch's size class (Loopy assumptions)"),
    Param("concat_chunk", int, None, "elementwise: lower concatenations as one loop per "
                                     "piece in chunks of this many elements"),
    Param("row_loops", bool, False, "elementwise: an output of several axes as a loop "
                                    "over its rows and one along its last axis"),
)
_PIPELINE_NAMES = frozenset(p.name for p in _PIPELINE_PARAMS)


class Recipe:
    """A named transform with declared parameters; see the module docstring.

    Make a variant with :meth:`with_params`; register it with
    :func:`~fuseloop.register_recipe` or use it for a while with
    :func:`~fuseloop.recipes.use`.
    """

    __slots__ = ("__dict__", "explicit", "func", "kind", "name", "params", "valid", "values",
                 "variants", "version")

    def __init__(self, name: str, func: RecipeFunction, *, kind: str = "elementwise",
                 version: str = "1", params: Sequence[Param] = (),
                 variants: Sequence[tuple[DevicePredicate, Mapping[str, Any]]] = (),
                 valid: ValidFunction | None = None, **values: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"recipe kind must be one of {KINDS}, got {kind!r}")
        if not callable(func):
            raise RecipeError(f"recipe {name!r}: the transform must be callable, got "
                              f"{type(func).__name__}")
        for attr in _PIPELINE_NAMES:
            if hasattr(func, attr):
                raise RecipeError(
                    f"recipe {name!r}: {func.__qualname__}.{attr} is set; recipes no longer "
                    f"read function attributes: pass {attr}=... to register_recipe or Recipe")
        self.name, self.func, self.kind, self.version = name, func, kind, str(version)
        #: ``(values, device) -> bool``: whether a combination of values can run on the
        #: device (work-group size and local memory limits); None: every one can
        self.valid = valid
        self.params: dict[str, Param] = {p.name: p for p in (*_PIPELINE_PARAMS, *params)}
        self.variants = tuple((pred, dict(vals)) for pred, vals in variants)
        for _, vals in self.variants:
            self._check_names(vals)
        values = self._absorb_derived(values)
        self.explicit = frozenset(values)
        self.values = self._resolve(values)

    def _absorb_derived(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` less its :class:`Derived` values, which become the parameters'
        defaults (recomputed by :meth:`with_params`, not fixed)."""
        self._check_names(given)
        derived = {n: v for n, v in given.items() if isinstance(v, Derived)}
        if derived:
            object.__setattr__(self, "params", {
                n: replace(p, default=derived[n]) if n in derived else p
                for n, p in self.params.items()})
        return {n: v for n, v in given.items() if n not in derived}

    def _check_names(self, values: Mapping[str, Any]) -> None:
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            raise RecipeError(f"recipe {self.name!r} has no parameter {unknown[0]!r}; its "
                              f"parameters: {', '.join(sorted(self.params))}")

    def _resolve(self, given: Mapping[str, Any]) -> dict[str, Any]:
        self._check_names(given)
        values = {n: given[n] if n in given else p.default for n, p in self.params.items()}
        plain = {n: v for n, v in values.items() if not isinstance(v, Derived)}
        for n, v in values.items():
            if isinstance(v, Derived):  # computed from the other values, not derived ones
                values[n] = v.compute(plain)
            self.params[n].check(values[n], self.name)
        if self.kind != "elementwise":
            # they change the lowering of elementwise kernels only
            values["concat_chunk"], values["row_loops"] = None, False
        return values

    def _copy(self, **changes: Any) -> Recipe:
        new = object.__new__(Recipe)
        for slot in ("name", "func", "kind", "version", "params", "variants", "explicit",
                     "values", "valid"):
            object.__setattr__(new, slot, changes.get(slot, getattr(self, slot)))
        return new

    def with_params(self, *, name: str | None = None, version: str | None = None,
                    **params: Any) -> Recipe:
        """This recipe with other parameter values (and optionally another name or
        version); values it does not name keep theirs, derived ones are recomputed."""
        new = self._copy(name=name or self.name,
                         version=self.version if version is None else str(version))
        given = {n: self.values[n] for n in self.explicit} | new._absorb_derived(params)
        object.__setattr__(new, "explicit", frozenset(given))
        object.__setattr__(new, "values", new._resolve(given))
        return new

    def for_device(self, device: Device) -> Recipe:
        """The variant for ``device``: the most specific matching variant's values,
        under those given explicitly to :meth:`with_params`."""
        # (kept: run plans compare recipes by identity, and the ids are computed once)
        memo = self.__dict__.setdefault("_for_device", {})
        hit = memo.get(device.index)
        if hit is not None and hit[0] is device:
            return hit[1]
        matching = [(pred.specificity, k) for k, (pred, _) in enumerate(self.variants)
                    if pred.matches(device)]
        vals = self.variants[max(matching)[1]][1] if matching else {}
        vals = {n: v for n, v in vals.items() if n not in self.explicit}
        new = self
        if any(self.values[n] != v for n, v in vals.items()):
            new = self._copy()
            object.__setattr__(new, "values", new._resolve(
                {n: self.values[n] for n in self.explicit} | vals))
        memo[device.index] = (device, new)
        return new

    def __call__(self, t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
        """Apply the recipe (its variant for ``device``) to ``t_unit``."""
        return self.for_device(device).transform(t_unit, device)

    @property
    def tunable(self) -> dict[str, Param]:
        """The parameters with a declared space (what :func:`fuseloop.tune` searches)."""
        return {n: p for n, p in self.params.items()
                if p.space is not None and n not in _PIPELINE_NAMES}

    def allows(self, values: Mapping[str, Any], device: Device) -> bool:
        """Whether ``values`` (all of the recipe's) pass its ``valid`` hook on ``device``."""
        return self.valid is None or bool(self.valid(values, device))

    # {{{ what the pipeline reads

    @property
    def size_class(self) -> SizeClassFunction | None:
        return self.values["size_class"]

    @property
    def concat_chunk(self) -> int | None:
        return self.values["concat_chunk"]

    @property
    def row_loops(self) -> bool:
        return self.values["row_loops"]

    @property
    def transform(self) -> _BoundTransform:
        """``(t_unit, device) -> t_unit``: the function with this recipe's parameters."""
        bound = self.__dict__.get("_transform")
        if bound is None:
            bound = self.__dict__["_transform"] = _BoundTransform(self)
        return bound

    @property
    def fingerprint(self) -> str:
        """Hash of the function's source (and closure) and of this package's source."""
        return _fingerprint(self.func)

    @property
    def cache_id(self) -> tuple:
        """Name, version, fingerprint and parameter values: part of both cache keys."""
        cid = self.__dict__.get("_cache_id")
        if cid is None:
            params = tuple((n, _value_id(self.values[n])) for n in sorted(self.values)
                           if self.values[n] is not None)
            cid = self.__dict__["_cache_id"] = (self.name, self.version, self.fingerprint,
                                                params)
        return cid

    # }}}

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Recipe.__slots__ and hasattr(self, name):
            raise AttributeError(f"Recipe is immutable; use with_params to change {name}")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in self.values.items()
                          if n not in _PIPELINE_NAMES)
        return f"Recipe({self.name!r}, kind={self.kind!r}, version={self.version!r}" \
               + (f", {shown})" if shown else ")")


class _BoundTransform:
    """A recipe's function with its parameters, checked to return a TranslationUnit
    (a recipe that forgot its ``return`` failed later with an error that named neither)."""

    __slots__ = ("recipe",)

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    @property
    def __wrapped__(self) -> RecipeFunction:
        return self.recipe.func

    def __call__(self, t_unit: lp.TranslationUnit, device: Device) -> lp.TranslationUnit:
        r = self.recipe
        kwargs = {n: v for n, v in r.values.items() if n not in _PIPELINE_NAMES}
        out = r.func(t_unit, device, **kwargs)
        if not isinstance(out, lp.TranslationUnit):
            raise RecipeError(
                f"recipe {r.name!r} ({getattr(r.func, '__qualname__', '?')}) "
                f"returned {type(out).__name__} for {device.name}; a recipe must return the "
                "transformed loopy TranslationUnit (did it forget 'return t_unit'?)")
        return out

    def _key(self) -> tuple:
        r = self.recipe
        return (r.func, tuple(sorted((n, _value_id(v)) for n, v in r.values.items()
                                     if n not in _PIPELINE_NAMES)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _BoundTransform):
            return self._key() == other._key()
        return other == self.recipe.func and not any(
            v is not None for n, v in self.recipe.values.items() if n not in _PIPELINE_NAMES)

    def __hash__(self) -> int:
        return hash(self.recipe.func)


# {{{ fingerprints

@cache
def _package_digest() -> str:
    """Hash of this package's modules (a recipe's function calls their helpers)."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _source(func: Any) -> str:
    """What ``func`` does, as stable text: its code object's (:func:`_code_text`), else
    its repr (a builtin).  Not its source: ``inspect.getsource`` searched every loaded
    module (Loopy's too) for the function's, in every process's first evaluation, a
    disk-cache hit's too; an edit that changes what a recipe does changes its bytecode or
    constants."""
    code = getattr(func, "__code__", None)
    return repr(func) if code is None else _code_text(code)


def _code_text(code: types.CodeType) -> str:
    """A code object's bytecode, names and constants, the same in every process of one
    Python version (not its line numbers)."""
    return repr((code.co_code, tuple(_const_text(c) for c in code.co_consts), code.co_names,
                 code.co_varnames, code.co_freevars, code.co_cellvars))


def _const_text(value: Any) -> str:
    # (a nested function's or lambda's code by its own text: its repr holds an address;
    # a frozenset's elements sorted: their order follows string hashes, seeded per process)
    if isinstance(value, types.CodeType):
        return _code_text(value)
    if isinstance(value, tuple):
        return repr(tuple(_const_text(v) for v in value))
    if isinstance(value, frozenset):
        return repr(sorted(_const_text(v) for v in value))
    return repr(value)


def _fingerprint(func: Any, depth: int = 1) -> str:
    try:
        return _cached_fingerprint(func, depth)
    except TypeError:  # an unhashable callable
        return _compute_fingerprint(func, depth)


@lru_cache(maxsize=256)
def _cached_fingerprint(func: Any, depth: int) -> str:
    return _compute_fingerprint(func, depth)


def _compute_fingerprint(func: Any, depth: int) -> str:
    h = hashlib.sha256(_package_digest().encode())
    target = getattr(func, "__func__", func)
    if not hasattr(target, "__code__") and callable(target):  # a callable object
        target = type(target).__call__
    h.update(_source(target).encode())
    h.update(repr(getattr(target, "__defaults__", None)).encode())
    # the values a closure captured (a factory's arguments) change what it does; one
    # level deep only (a recursive inner function captures itself)
    for cell in (getattr(target, "__closure__", None) or ()) if depth > 0 else ():
        try:
            h.update(_value_id(cell.cell_contents, depth - 1).encode())
        except ValueError:  # an empty cell
            pass
    return h.hexdigest()[:16]


def _value_id(value: Any, depth: int = 1) -> str:
    """A stable text for a parameter or closure value (no memory addresses)."""
    if isinstance(value, Recipe):
        return repr(value.cache_id)
    if callable(value) and not isinstance(value, type):
        name = getattr(value, "__qualname__", type(value).__name__)
        return f"{name}:{_fingerprint(value, depth)}"
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text

# }}}


from ..caches import register_function as _register_function  # noqa: E402

_register_function("recipes.fingerprints", _cached_fingerprint)
_register_function("recipes.package_digest", _package_digest, why="one entry")
