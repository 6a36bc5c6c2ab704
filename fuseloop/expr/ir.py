"""The records a linearised program is made of (see :mod:`fuseloop.expr.program`).

Each entry of ``Program.entries`` is one of the frozen records below.  They are
named tuples whose first field, ``kind``, is the entry's tag (``"load"``,
``"op"``, ...): entries stay tuples, so a program hashes and compares by
structure (it is part of the cache keys) and code written against positions
keeps working, while new code reads fields by name.  Build an entry with its
class (``Load(slot, dtype, at, strides, offset)``); the tag is filled in.

Index components (the ``at`` tuples) stay plain tuples, described in
:mod:`fuseloop.expr.program`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple


class _LoadFields(NamedTuple):
    kind: Literal["load"]
    slot: int  # input buffer
    dtype: str  # dtype character
    at: tuple  # the symbolic index the value is read at
    strides: Any  # per component 0, 1 or ("p", slot); or "c" (the output's C order)
    offset: Any  # 0 or ("p", slot)


class _PtrFields(NamedTuple):
    kind: Literal["ptr"]
    slot: int  # input buffer
    dtype: str
    offset: Any  # 0 or ("p", slot): where the pointer points


class _CMemFields(NamedTuple):
    kind: Literal["cmem"]
    slot: int  # input buffer read from constant memory
    dtype: str


class _IotaFields(NamedTuple):
    kind: Literal["iota"]
    dtype: str
    at: tuple
    strides: Any
    offset: Any


class _ArgFields(NamedTuple):
    kind: Literal["arg"]
    slot: int  # scalar argument
    dtype: str


class _LitFields(NamedTuple):
    kind: Literal["lit"]
    dtype: str
    value: Any  # a Python number


class _OpFields(NamedTuple):
    kind: Literal["op"]
    name: str  # the operation (fuseloop.lower.scalar_ops)
    loop: tuple[str, ...]  # loop dtype characters: inputs..., output
    refs: tuple[int, ...]  # argument entries


class _CallFields(NamedTuple):
    kind: Literal["call"]
    key: str  # the user function's key
    loop: tuple[str, ...]
    refs: tuple[int, ...]


class _ReduceFields(NamedTuple):
    kind: Literal["reduce"]
    op: str
    dtype: str
    rid: int  # the reduction's number (its loop)
    child: int  # the entry reduced
    at: tuple  # the kept index
    sizes: tuple  # parameters: the reduced dimensions' lengths
    total: Any  # parameter: their product
    chunk: Any  # None, or (p_chunk, d, exact) for a two-stage reduction's first stage


class _GatherFields(NamedTuple):
    kind: Literal["gather"]
    # (shadows tuple.index, which entries never call)
    index: int  # type: ignore[assignment]  # the index values' entry
    child: int  # the gathered values' entry
    length: Any  # parameter: the length indexed


class _ConcatFields(NamedTuple):
    kind: Literal["concat"]
    comp: Any  # the component along the joined axis
    bounds: tuple  # parameters: where pieces 1.. start
    refs: tuple[int, ...]  # the pieces' entries
    flat: Any  # None, or (starts, kcs, cstrides) for pieces in loops of their own


class _SparseFields(NamedTuple):
    kind: Literal["sparse"]
    fmt: str  # "csr" or "ell" (see fuseloop.expr.nodes.SparseProduct)
    dtype: str  # the accumulator and result dtype
    at: tuple  # the row index (one component)
    slots: tuple[int, ...]  # input buffers: data, indices, indptr (-1 for ELL), x
    chars: tuple[str, ...]  # their dtype characters ("" for a missing indptr)
    x_stride: Any  # 1 or ("p", slot): x's stride, in elements
    x_offset: Any  # 0 or ("p", slot)
    rows: Any  # ELL: parameter, the number of rows (the stride between a row's entries)
    width: Any  # ELL: parameter, the entries per row; 0 for CSR


_new = tuple.__new__


class _Tagged:
    """The tag is filled in: a record is built from its other fields (each record's
    ``__new__`` names them; cheaper than a check of ``*fields``)."""

    __slots__ = ()
    KIND = ""

    if TYPE_CHECKING:  # (a mixin of the NamedTuples above: iterates their fields)
        def __iter__(self) -> Iterator[Any]: ...

    def __getnewargs__(self) -> tuple:  # pickling passes the fields, not the tag
        return tuple(self)[1:]


class Load(_Tagged, _LoadFields):
    """An element of input buffer ``slot`` at index ``at``."""
    __slots__ = ()
    KIND = "load"

    def __new__(cls, slot: int, dtype: str, at: tuple, strides: Any, offset: Any) -> Load:
        return _new(cls, ("load", slot, dtype, at, strides, offset))


class Ptr(_Tagged, _PtrFields):
    """Input buffer ``slot`` as a pointer to element ``offset``: a user function's
    pointer argument (never a temporary, never loaded by the kernel itself)."""
    __slots__ = ()
    KIND = "ptr"

    def __new__(cls, slot: int, dtype: str, offset: Any) -> Ptr:
        return _new(cls, ("ptr", slot, dtype, offset))


class CMem(_Tagged, _CMemFields):
    """Input buffer ``slot`` is read from constant memory (``fl.constant``): a marker,
    never read by other entries; the kernel declares the buffer ``__constant``."""
    __slots__ = ()
    KIND = "cmem"

    def __new__(cls, slot: int, dtype: str) -> CMem:
        return _new(cls, ("cmem", slot, dtype))


class Iota(_Tagged, _IotaFields):
    """The address a load with these fields would read, as a value (``arange``)."""
    __slots__ = ()
    KIND = "iota"

    def __new__(cls, dtype: str, at: tuple, strides: Any, offset: Any) -> Iota:
        return _new(cls, ("iota", dtype, at, strides, offset))


class Arg(_Tagged, _ArgFields):
    """Scalar argument ``slot`` (values are data: each scalar node is its own)."""
    __slots__ = ()
    KIND = "arg"

    def __new__(cls, slot: int, dtype: str) -> Arg:
        return _new(cls, ("arg", slot, dtype))


class Lit(_Tagged, _LitFields):
    """A literal, baked into the source."""
    __slots__ = ()
    KIND = "lit"

    def __new__(cls, dtype: str, value: Any) -> Lit:
        return _new(cls, ("lit", dtype, value))


class Op(_Tagged, _OpFields):
    """Elementwise operation ``name`` of the entries ``refs``."""
    __slots__ = ()
    KIND = "op"

    def __new__(cls, name: str, loop: tuple[str, ...], refs: tuple[int, ...]) -> Op:
        return _new(cls, ("op", name, loop, refs))


class Call(_Tagged, _CallFields):
    """User function ``key`` applied to the entries ``refs``."""
    __slots__ = ()
    KIND = "call"

    def __new__(cls, key: str, loop: tuple[str, ...], refs: tuple[int, ...]) -> Call:
        return _new(cls, ("call", key, loop, refs))


class Reduce(_Tagged, _ReduceFields):
    """Reduction ``rid`` of entry ``child`` over its own loop, at the kept index ``at``."""
    __slots__ = ()
    KIND = "reduce"

    def __new__(cls, op: str, dtype: str, rid: int, child: int, at: tuple,
                sizes: tuple, total: Any, chunk: Any) -> Reduce:
        return _new(cls, ("reduce", op, dtype, rid, child, at, sizes, total, chunk))


class Gather(_Tagged, _GatherFields):
    """Entry ``child`` read at the (wrapped, clamped, maybe checked) values of ``index``."""
    __slots__ = ()
    KIND = "gather"

    def __new__(cls, index: int, child: int, length: Any) -> Gather:
        return _new(cls, ("gather", index, child, length))


class Concat(_Tagged, _ConcatFields):
    """The piece of ``refs`` that component ``comp`` falls in (a nest of conditionals)."""
    __slots__ = ()
    KIND = "concat"

    def __new__(cls, comp: Any, bounds: tuple, refs: tuple[int, ...], flat: Any) -> Concat:
        return _new(cls, ("concat", comp, bounds, refs, flat))


class Sparse(_Tagged, _SparseFields):
    """A sparse matrix row times a vector (a loop over the row's entries, data-dependent
    for CSR), computed at row ``at``: a leaf to the rest of the program."""
    __slots__ = ()
    KIND = "sparse"

    def __new__(cls, fmt: str, dtype: str, at: tuple, slots: tuple[int, ...],
                chars: tuple[str, ...], x_stride: Any, x_offset: Any, rows: Any,
                width: Any) -> Sparse:
        return _new(cls, ("sparse", fmt, dtype, at, slots, chars, x_stride, x_offset, rows,
                          width))


Entry = (_LoadFields | _PtrFields | _CMemFields | _IotaFields | _ArgFields | _LitFields
         | _OpFields | _CallFields | _ReduceFields | _GatherFields | _ConcatFields
         | _SparseFields)

#: entries with no operand entries
LEAF_KINDS = frozenset({"load", "arg", "lit", "iota", "ptr", "cmem", "sparse"})
#: elementwise entries (``refs`` are their arguments)
ELEMENTWISE_KINDS = frozenset({"op", "call"})


def operand_refs(e: Entry) -> tuple[int, ...]:
    """The entries ``e`` reads directly (not counting gathered index components)."""
    f: Any = e  # read by its kind tag (mypy cannot narrow the union through it)
    kind = f.kind
    if kind in ELEMENTWISE_KINDS or kind == "concat":
        return f.refs
    if kind == "reduce":
        return (f.child,)
    if kind == "gather":
        return (f.index, f.child)
    return ()


# The largest value a launch may meet in an index expression and still use 32-bit
# indices (fuseloop.launching picks int64 above it, by the largest parameter, output
# size or input buffer's byte size).  A lazy source (an iota: arange, linspace) has
# no buffer to bound its addresses, so linearising records its reach as a parameter.
INT32_LIMIT = 2**31 - 1


def reachable_entries(roots: Iterable[int], inputs: Callable[[int, list[int]], bool],
                      limit: int | None = None) -> set[int] | None:
    """The entries of a program that ``roots`` are computed from, themselves included.

    ``inputs(ref, stack)`` pushes the entries that entry ``ref`` reads onto ``stack``;
    it returns False to give up (the result is then None), as does reaching more
    than ``limit`` entries.
    """
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        ref = stack.pop()
        if ref in seen:
            continue
        seen.add(ref)
        if inputs(ref, stack) is False or (limit is not None and len(seen) > limit):
            return None
    return seen
