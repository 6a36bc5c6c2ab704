"""Immutable expression nodes.

Nodes describe *what* to compute for every element of their shape; they hold device storage
only at the leaves.  Structure (what the cache key is built from) is read by
:mod:`fuseloop.expr.program`, never by hashing nodes, so nodes can stay cheap plain objects.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from .. import caches as _caches
from ..errors import ShapeError

# (the registry of lazy readers lives in expr.readers; its names are used from here)
from .readers import (  # noqa: F401  (re-exported)
    _EXACT_REFCOUNTS,
    _UNHELD,
    RECENT_LAZY_MAX,
    SHARED_WITH_PYOPENCL,
    Storage,
    _readers_lock,
    _refcounts,
    forget_recent,
    note_reader,
    prune_recent,
    recent_lazy,
    register_readers,
    take_last_recent,
)

_EMPTY: frozenset = frozenset()


class Node:
    __slots__ = ("dtype", "shape", "storages")
    dtype: np.dtype
    shape: tuple[int, ...]
    storages: frozenset
    # True when the tree holds a reduction, gather or remap (not purely elementwise)
    fancy = False
    # the structure signature (see signature_of); 0: none (pointers, sparse products,
    # concatenations, too many operands)
    sig = 0
    # the buffers and scalar nodes in the order the structure key's walk meets them
    operands: tuple | None = None
    # the distinct offsets of the views read, first met first (see sig_views)
    offs: tuple = ()


# A node carries ``sig``, a small integer standing for its whole structure (the part of the
# structure key in fuseloop.expr.program that it contributes, without which buffers are which),
# and ``operands``, its buffers and scalar nodes in walk order. Elementwise operations have one,
# and so do reductions, gathers and remaps (their own fields first: op, dtype, axes, shape; axis,
# shape, check; shape and map), so that an expression with them (``x - x.mean()``,
# ``sum(x*y)**0.5``, a view of a reduction) finds its run plan (fuseloop.run_plans) without a
# walk.  A signature says nothing about being elementwise: ``fancy`` does.  Equal signatures mean
# equal structures: signatures are interned by (kind, the node's own fields, its arguments'
# signatures) and never reused, even after the table is cleared, so a node built before a clear
# keeps a valid signature.  Evaluation then looks the structure up with (sig, which operands
# repeat) instead of walking the tree.
#
# A subexpression read by two arguments would repeat its operands, doubling them per step of a
# chain reusing its previous step (``r = sin(r) * 0.5 + r * 0.25``): where a later argument's
# operands begin with the earlier ones' (see shared_prefix), that prefix is written once and the
# signature is interned again with its length (joined_sig); so is a later argument that is one
# buffer the earlier ones read (``r = r * c + y``: y once).  Which operands repeat elsewhere is
# read at evaluation.
_sig_table: dict[tuple, int] = {}
_next_sig = itertools.count(1)
SIG_TABLE_MAX = 1 << 16
# beyond this an expression goes without a signature (walked instead); each operator
# copies its operands, so this bounds that copy (at 256, a 400-operation chain built
# 60% slower than it was looked up faster, measured)
MAX_OPERANDS = 64


def intern_sig(fields: tuple) -> int:
    """The signature for a node with these fields (see above)."""
    sig = _sig_table.get(fields)
    if sig is None:
        if len(_sig_table) >= SIG_TABLE_MAX:
            _sig_table.clear()
            joined_at_table.clear()
            offs_table.clear()
            # (the fields of the signatures made before stay readable one table longer:
            # views kept on their leaves, ``ops.indexing``, keep theirs)
            _fields_before[0] = _sig_fields.copy()
            _sig_fields.clear()
        sig = _sig_table.setdefault(fields, next(_next_sig))
        _sig_fields[sig] = fields
    return sig


# A view's offset is a kernel parameter (see fills), so signatures leave offsets out: a view
# leaf's signature is its kind, dtype, shape and strides, and its offset rides beside it in
# ``offs``.  A node's ``offs`` are the distinct offsets of the views it reads, first met first in
# the walk's order (as ``expr.program.ViewOffsets.values``; where each view's is:
# ``signed_keys.sig_views``); its signature says which of them each view reads: a later child's
# offsets are appended unless some equal an earlier one's, and then where each lands is interned
# into the signature ("O", offs_joined). So ``A[i] - A[i].mean()`` has one signature for every
# ``i`` (no signature made per statement of a loop over rows), and equal signatures with equal
# operands and equal ``offs`` are equal expressions.  Caches that bake offsets into what they keep
# (templates, shared subexpressions, the host path's counts) key by ``offs`` as well.
_sig_fields: dict[int, tuple] = {}
_fields_before: list[dict[int, tuple]] = [{}]
# (offsets, offsets) -> merge_offs' answer, (signature, offsets, offsets) -> with_offs',
# for merges of more than MERGED_SHORT offsets: an expression built again (a stencil of
# many views, each step) merges them again; shorter ones (a loop over rows, new offsets
# each statement) cost less than remembering them
_merged: dict[tuple, tuple] = {}
MERGED_MAX = 4096
MERGED_SHORT = 4


def merge_offs(ao: tuple, bo: tuple) -> tuple[tuple, tuple | None]:
    """The distinct offsets ``ao`` then those of ``bo`` not among them, and where each
    of ``bo``'s lands (None: all appended in order, the commonest case)."""
    if not ao:
        return bo, None
    short = len(ao) + len(bo) <= MERGED_SHORT
    got = None if short else _merged.get((ao, bo))
    if got is None:
        index = dict(zip(ao, range(len(ao))))
        where = tuple([index.setdefault(o, len(index)) for o in bo])
        got = (ao + bo, None) if len(index) == len(ao) + len(bo) else (tuple(index), where)
        if not short:
            _keep_merged((ao, bo), got)
    return got


def _keep_merged(key: tuple, got: tuple) -> None:
    if len(_merged) >= MERGED_MAX:
        _merged.clear()
    _merged[key] = got


# (signature, where per later child) -> offs_joined's result
offs_table: dict[tuple, int] = {}


def with_offs(sig: int, ao: tuple, bo: tuple) -> tuple[int, tuple]:
    """The signature and ``offs`` of a two-argument operation of signature ``sig`` whose
    arguments' offsets are ``ao`` and ``bo`` (the operators' lean path)."""
    nb = len(bo)
    if len(ao) + nb <= MERGED_SHORT:
        if nb == 1:  # (the commonest: one view's offset, new or met already: merge_offs inline)
            o = bo[0]
            return (sig, ao + bo) if o not in ao else (offs_joined(sig, ((ao.index(o),),)), ao)
        offs, where = merge_offs(ao, bo)
        return (sig if where is None else offs_joined(sig, (where,))), offs
    got = _merged.get((sig, ao, bo))
    if got is None:
        offs, where = merge_offs(ao, bo)
        got = (sig if where is None else offs_joined(sig, (where,))), offs
        _keep_merged((sig, ao, bo), got)
    return got


def offs_joined(sig: int, wheres: tuple) -> int:
    """The signature of an operation of signature ``sig`` whose later children's
    offsets land at ``wheres`` (per later child: :func:`merge_offs`' answer)."""
    key = (sig, wheres)
    got = offs_table.get(key)
    if got is None:
        got = intern_sig(("O", sig, wheres))
        if len(offs_table) >= SIG_TABLE_MAX:
            offs_table.clear()
        offs_table[key] = got
    return got


def shared_prefix(ao: tuple, bo: tuple) -> int:
    """How many of the operands ``bo`` of an operation's later argument are the first
    operands ``ao`` of its earlier ones, in order (compared by identity, in C): all of
    ``bo`` or all but its last (``f(r) + r * c``), else 0; 0 for fewer than two."""
    k = len(bo)
    # (most pairs differ in their first or second operand: no slices made for them)
    if k < 2 or not ao or ao[0] is not bo[0] or (
            k > 2 and (len(ao) < 2 or ao[1] is not bo[1])):  # (one operand: none shared)
        return 0
    if ao[:k] == bo:
        return k
    k -= 1
    return k if ao[:k] == bo[:k] else 0


def shared_part(ao: tuple, a_storages: frozenset, bo: tuple) -> tuple[Any, tuple]:
    """What of an operation's later argument's operands ``bo`` its earlier arguments
    (operands ``ao``, buffers ``a_storages``) already have, and the rest of ``bo``:
    0 (nothing), a count (:func:`shared_prefix`) or ``("at", p)``: ``bo`` is one
    buffer, ``ao[p]``."""
    if len(bo) == 1:
        o = bo[0]
        if type(o) is Storage and o in a_storages:  # (then it is among ao)
            return ("at", ao.index(o)), ()
        return 0, bo
    k = shared_prefix(ao, bo)
    return (k, bo[k:]) if k else (0, bo)


def join_shared(sig: int, ao: tuple, a_storages: frozenset, bo: tuple) -> tuple[int, tuple]:
    """The signature of a two-argument operation of signature ``sig`` whose arguments
    have the operands ``ao`` (buffers ``a_storages``) and ``bo``, and the operands of
    ``bo`` to append (see :func:`shared_part`)."""
    if len(bo) == 1:  # (shared_part's cases, written out: an operator's frames fewer)
        o = bo[0]
        if type(o) is Storage and o in a_storages:  # (r * x)
            return joined_at(sig, ao.index(o)), ()
        return sig, bo
    k = shared_prefix(ao, bo)
    if not k:
        return sig, bo
    joined = joined_at_table.get((sig, -k))
    if joined is None:
        joined = joined_sig(sig, k)
        if len(joined_at_table) >= SIG_TABLE_MAX:
            joined_at_table.clear()
        joined_at_table[(sig, -k)] = joined
    return joined, bo[k:]


# (signature, position) -> joined_at's result (``r * x`` with r reading x: chains' join);
# (signature, -count) -> join_shared's for a shared prefix of ``count`` operands
joined_at_table: dict[tuple[int, int], int] = {}


def joined_at(sig: int, position: int) -> int:
    """:func:`join_shared`'s signature where the later argument is the earlier ones'
    buffer at ``position`` (remembered in ``joined_at_table``)."""
    if (joined := joined_at_table.get((sig, position))) is not None:
        return joined
    joined = joined_sig(sig, ("at", position))
    if len(joined_at_table) >= SIG_TABLE_MAX:
        joined_at_table.clear()
    joined_at_table[(sig, position)] = joined
    return joined


def joined_sig(sig: int, shared: Any) -> int:
    """The signature of an operation of signature ``sig`` (interned from its arguments'
    signatures alone) whose later arguments' operands begin with ``shared`` (one
    count, or a tuple of them for more than two arguments) of the earlier ones'
    (see :func:`shared_prefix`), written once."""
    return intern_sig(("J", sig, shared))


def per_signature(table: dict[int, int], root: Node, measure: Callable[[Node], int],
                  most: int) -> int:
    """``measure(root)``, remembered in ``table`` by the root's signature (unsigned roots
    are measured every time; the table is emptied when it holds ``most``)."""
    sig = root.sig
    got = table.get(sig) if sig else None
    if got is None:
        got = measure(root)
        if sig:
            if len(table) >= most:
                table.clear()
            table[sig] = got
    return got


def signature_of(node: Node) -> int:
    """``node.sig``, computed on first use for leaves, literals and element indices."""
    sig = node.sig
    if sig:
        return sig
    cls = type(node)
    if cls is Leaf:
        strides = node.strides  # type: ignore[attr-defined]
        if strides is None:
            sig = intern_sig(node.leaf_token())  # type: ignore[attr-defined]
            node.offs = ()  # type: ignore[misc]
        else:  # (a view: its offset beside the signature)
            sig = intern_sig(("V", "LC" if node.storage.constant else "L",  # type: ignore[attr-defined]
                              node.dtype.char, node.shape, strides))
            node.offs = (node.offset,)  # type: ignore[attr-defined,misc]
    elif cls is Literal:
        sig = intern_sig(("C", node.dtype.char, node.value.tobytes()))  # type: ignore[attr-defined]
    elif cls is Iota:
        sig = intern_sig(("I", node.dtype.char, node.shape, node.strides, node.offset))  # type: ignore[attr-defined]
    else:
        return 0
    node.sig = sig  # type: ignore[misc]  # (Leaf, Literal and Iota have a sig slot)
    return sig


def signed(fields: list[Any], children: Sequence[Node]) -> tuple[int, tuple | None, tuple]:
    """The signature, operands and view offsets (``offs``) of a node whose own fields
    are ``fields`` and whose children, in the structure key's walk order, are
    ``children``: (0, None, ()) when a child has no signature or the operands would be
    too many (see above)."""
    if not children:
        return intern_sig(tuple(fields)), (), ()
    a = children[0]
    sig = a.sig or signature_of(a)
    if not sig:
        return 0, None, ()
    fields.append(sig)
    operands: tuple = a.operands or ()  # (never None with a signature)
    offs = a.offs
    n = len(children)
    if n == 1:  # (a signed child's operands are within the bound)
        return intern_sig(tuple(fields)), operands, offs
    earlier = a.storages  # the buffers of the children before
    joins: list[Any] = []  # per later child: its operands shared (shared_part)
    wheres: list[Any] = []  # per later child: where its offsets land (merge_offs)
    for k in range(1, n):
        a = children[k]
        sig = a.sig or signature_of(a)
        if not sig:
            return 0, None, ()
        fields.append(sig)
        shared, more = shared_part(operands, earlier, a.operands or ())
        joins.append(shared)
        operands += more
        offs, where = merge_offs(offs, a.offs)
        wheres.append(where)
        if k + 1 < n and a.storages:  # (the last child's are not needed)
            earlier = earlier | a.storages if earlier else a.storages
    if len(operands) > MAX_OPERANDS:
        return 0, None, ()
    sig = intern_sig(tuple(fields))
    if any(w is not None for w in wheres):
        sig = offs_joined(sig, tuple(wheres))
    # (two children: the operators' lean path joins with the one part)
    if any(joins):
        sig = joined_sig(sig, joins[0] if n == 2 else tuple(joins))
    return sig, operands, offs


def signed_one(fields: tuple, child: Node) -> tuple[int, tuple | None, tuple]:
    """:func:`signed` of a node with one child (a reduction, a remap): ``fields`` then
    the child's signature."""
    sig = child.sig or signature_of(child)
    if not sig:
        return 0, None, ()
    return intern_sig((*fields, sig)), child.operands, child.offs


_scalar_sigs: dict[str, int] = {}


def _clear_fields() -> None:
    _sig_fields.clear()
    _fields_before[0] = {}


_caches.register("expr.nodes.sig_table", _sig_table.clear, lambda: len(_sig_table), SIG_TABLE_MAX)
_caches.register("expr.nodes.sig_fields", _clear_fields,
                 lambda: len(_sig_fields) + len(_fields_before[0]), 2 * SIG_TABLE_MAX)
_caches.register("expr.nodes.offs", offs_table.clear, lambda: len(offs_table), SIG_TABLE_MAX)
_caches.register("expr.nodes.merged", _merged.clear, lambda: len(_merged), MERGED_MAX)
_caches.register("expr.nodes.joined_at", joined_at_table.clear, lambda: len(joined_at_table),
                 SIG_TABLE_MAX)
_caches.register("expr.nodes.scalar_sigs", _scalar_sigs.clear, lambda: len(_scalar_sigs),
                 why="one per dtype")


def scalar_sig(char: str) -> int:
    """The signature of a scalar argument of dtype ``char``."""
    sig = _scalar_sigs.get(char)
    if sig is None:
        sig = _scalar_sigs[char] = intern_sig(("S", char))
    return sig


@lru_cache(maxsize=1024)
def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides of ``shape``, in elements."""
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def fills(storage: Storage, dtype: np.dtype, shape: tuple[int, ...],
          strides: tuple[int, ...]) -> bool:
    """Whether a view at offset 0 is all of ``storage`` in C order (a unit axis's stride
    aside: ``x[None]``): it is then the plain leaf (``strides`` None); else a view whose
    offset moves (``a[i]`` at ``i == 0``), with the same structure as at any other."""
    if math.prod(shape) * dtype.itemsize != storage.nbytes:
        return False
    c = c_strides(shape)
    return strides == c or all(n == 1 or s == k for n, s, k in zip(shape, strides, c))


class Leaf(Node):
    """Elements of a device buffer, seen through a strided view.

    Element ``idx`` lives at ``offset + sum(strides[k] * idx[k])`` (in elements).
    ``strides is None`` means the plain case: the whole buffer, C-contiguous from
    offset 0.  Any other view (``a[0]`` of a matrix included) keeps its strides, so
    its offset is a kernel parameter whatever its value (see :func:`fills`).
    """

    __slots__ = ("offs", "offset", "operands", "sig", "storage", "strides", "token", "views")

    def __init__(self, storage: Storage, dtype: np.dtype, shape: tuple[int, ...],
                 strides: tuple[int, ...] | None = None, offset: int = 0) -> None:
        self.sig = 0  # see signature_of (which sets offs)
        self.offs = ()
        self.views: dict | None = None  # see ops.indexing._plain_view
        self.operands = (storage,)
        self.storage = storage
        self.dtype = dtype
        self.shape = shape
        if strides is not None and offset == 0 and fills(storage, dtype, shape, strides):
            strides = None
        self.strides = strides
        self.offset = offset
        self.storages = frozenset((storage,))
        self.token: tuple | None = None  # see leaf_token

    @classmethod
    def plain(cls, storage: Storage, dtype: np.dtype, shape: tuple[int, ...]) -> Leaf:
        """``Leaf(storage, dtype, shape)``: a whole C-contiguous buffer, made with
        fewer steps (every evaluation's result becomes one)."""
        self = _new(cls)
        self.sig = 0
        self.offs = ()
        self.operands = (storage,)
        self.storage = storage
        self.dtype = dtype
        self.shape = shape
        self.strides = None
        self.offset = 0
        self.storages = frozenset((storage,))
        self.token = self.views = None
        return self

    def leaf_token(self) -> tuple:
        """Everything but the buffer, for the structure cache (``expr.program``)."""
        token = self.token
        if token is None:  # made on first use: most results are never read again
            token = self.token = ("LC" if self.storage.constant else "L", self.dtype.char,
                                  self.shape, self.strides, self.offset)
        return token

    def view_strides(self) -> tuple[int, ...]:
        return c_strides(self.shape) if self.strides is None else self.strides


class Scalar(Node):
    """A scalar passed to the kernel as an argument (its value is not in the key)."""

    __slots__ = ("value",)

    def __init__(self, value: np.generic) -> None:
        self.value = value
        self.dtype = value.dtype
        self.shape = ()
        self.storages = _EMPTY

    # (properties: the operators make scalar nodes in place, without setting them)
    @property
    def sig(self) -> int:  # type: ignore[override]
        return scalar_sig(self.dtype.char)

    @property
    def operands(self) -> tuple:  # type: ignore[override]
        return (self,)


class Literal(Node):
    """A scalar baked into the kernel source (``fl.constant``); its value is in the key."""

    __slots__ = ("operands", "sig", "value")

    def __init__(self, value: np.generic) -> None:
        self.sig = 0  # see signature_of
        self.operands = ()
        self.value = value
        self.dtype = value.dtype
        self.shape = ()
        self.storages = _EMPTY


class Iota(Node):
    """``offset + sum(strides[k] * idx[k])`` for each element; allocates nothing.

    The C-order flat index within ``shape`` with the default strides (VexCL's ``element_index``).
    """

    __slots__ = ("offset", "operands", "sig", "strides")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype,
                 strides: tuple[int, ...] | None = None, offset: int = 0) -> None:
        self.sig = 0  # see signature_of
        self.operands = ()
        self.dtype = dtype
        self.shape = shape
        if strides is not None and offset == 0 and strides == c_strides(shape):
            strides = None
        self.strides = strides
        self.offset = offset
        self.storages = _EMPTY

    def view_strides(self) -> tuple[int, ...]:
        return c_strides(self.shape) if self.strides is None else self.strides


class Reduce(Node):
    """A reduction of ``child`` over ``axes`` (sorted, non-negative).

    ``op`` is ``sum``, ``prod``, ``max``, ``min``, ``any``, ``all``, ``argmax``
    or ``argmin`` (the arg reductions take exactly one axis).  ``dtype`` is the
    accumulator and result dtype; the child is cast to it first (numpy's
    ``dtype=`` argument).  The result has the child's shape without the reduced
    axes, or ``shape``: the same lengths with unit axes added or removed
    (``keepdims``; a whole subtree rebuilt through a view would cost more).
    """

    __slots__ = ("axes", "child", "offs", "op", "operands", "sig")
    fancy = True

    def __init__(self, op: str, child: Node, axes: tuple[int, ...], dtype: np.dtype,
                 shape: tuple[int, ...] | None = None) -> None:
        self.op = op
        self.child = child
        self.axes = axes
        self.dtype = dtype
        kept = tuple(n for d, n in enumerate(child.shape) if d not in axes)
        if shape is not None and shape != kept:
            assert [n for n in shape if n != 1] == [n for n in kept if n != 1], (shape, kept)
            kept = shape
        self.shape = kept
        self.storages = child.storages
        # (the child's shape follows from its signature: the axes and result shape,
        # keepdims' unit axes included, are this node's fields)
        self.sig, self.operands, self.offs = signed_one(("R", op, dtype.char, axes, kept),
                                                        child)

    def kept_index(self, at: Sequence[Any]) -> tuple[Any, ...]:
        """An index of this node's result (``at``) as one of the child's kept axes.

        Unit axes carry no index: the non-unit axes correspond in order.
        """
        child_shape, axes = self.child.shape, self.axes
        kept = [n for d, n in enumerate(child_shape) if d not in axes]
        if len(kept) == len(self.shape):
            return tuple(at)
        comps = iter([c for c, n in zip(at, self.shape) if n != 1])
        return tuple(0 if n == 1 else next(comps) for n in kept)


class Gather(Node):
    """``child`` indexed along ``axis`` by the integer values of ``index``.

    The result has shape ``child.shape[:axis] + index.shape + child.shape[axis+1:]``
    (``numpy.take``).  Negative indices count from the end; indices out of range
    are reported after the kernel ran (the load itself is clamped, so the device
    never reads outside the buffer).
    """

    __slots__ = ("axis", "checked", "child", "index", "offs", "operands", "sig")
    fancy = True

    def __init__(self, child: Node, index: Node, axis: int, checked: bool | int = True) -> None:
        self.child = child
        self.index = index
        self.axis = axis
        # False for indices fuseloop computed itself (roll): known to be in range.
        # Else the code an out-of-range value is reported with: True (1) for an
        # unnamed axis, ``axis + 2`` to name axis ``axis`` of the indexed array
        self.checked = checked
        self.dtype = child.dtype
        self.shape = child.shape[:axis] + index.shape + child.shape[axis + 1:]
        storages = child.storages
        if index.storages:
            storages = storages | index.storages if storages else index.storages
        self.storages = storages
        # (``checked`` as a code: True and 1 name the same check, as in the walk's key)
        self.sig, self.operands, self.offs = signed(["G", axis, self.shape, int(checked)],
                                         (child, index))


class Apply(Node):
    """An elementwise operation named ``op`` with numpy's loop dtypes ``loop``.

    ``loop`` is ``(in_0, ..., in_k, out)``: operands are cast to ``in_j`` first, as numpy's.
    """

    # ``args`` reads ``_args``, which a template's copy makes when first read (``later``)
    __slots__ = ("_args", "fancy", "later", "loop", "loop_key", "offs", "op", "operands", "sig")

    @property
    def args(self) -> tuple[Node, ...]:
        try:
            return self._args  # type: ignore[has-type]
        except AttributeError:  # (a copy's, made now)
            args = self._args = self.later()  # type: ignore[attr-defined]
            return args

    @args.setter
    def args(self, value: tuple[Node, ...]) -> None:
        self._args = value

    def __init__(self, op: str, args: tuple[Node, ...], loop: tuple[np.dtype, ...],
                 shape: tuple[int, ...], loop_key: tuple[str, ...] | None = None) -> None:
        self.op = op
        self._args = args
        self.loop = loop
        self.loop_key = key = _loop_key(loop) if loop_key is None else loop_key
        self.dtype = loop[-1]
        self.shape = shape
        storages = _EMPTY
        fancy = False
        for a in args:
            s = a.storages
            if s and s is not storages:
                if not storages:
                    storages = s
                elif not s <= storages:
                    storages = storages | s
            fancy = fancy or a.fancy
        self.storages = storages
        self.fancy = fancy
        # the signature: an operation's name (a user function's key), loop, shape, arguments
        self.sig, self.operands, self.offs = signed(
            ["A", ("U", self.function.key) if type(self) is UserCall else op, key, shape], args)


_new = object.__new__


class UserCall(Apply):
    """A call of a user-defined OpenCL function (``fl.function`` with a body)."""

    __slots__ = ("function",)

    def __init__(self, function: Any, args: tuple[Node, ...], loop: tuple[np.dtype, ...],
                 shape: tuple[int, ...]) -> None:
        self.function = function  # (first: the signature names it)
        super().__init__("call", args, loop, shape)


_loop_keys: dict[tuple, tuple[str, ...]] = {}


def _loop_key(loop: tuple[np.dtype, ...]) -> tuple[str, ...]:
    key = _loop_keys.get(loop)
    if key is None:
        key = _loop_keys[loop] = tuple(d.char for d in loop)
    return key


_broadcast_cache: dict[tuple[tuple[int, ...], ...], tuple[int, ...]] = {}
BROADCAST_CACHE_MAX = 4096


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcasting of ``shapes``; a ShapeError names them when they clash."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    try:
        return _broadcast_cache[shapes]
    except KeyError:
        pass
    try:
        result = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(
            f"operands could not be broadcast together with shapes {shown}; "
            "dimensions must be equal or 1 when aligned from the right"
        ) from None
    if len(_broadcast_cache) < BROADCAST_CACHE_MAX:
        _broadcast_cache[shapes] = result
    return result


class Pointer(Node):
    """A whole buffer passed to a user function's pointer parameter (``global const
    float *x``): not read per element, so it has shape ``()`` and broadcasts like a
    scalar.  ``leaf`` is the contiguous view whose first element the pointer points
    at; it covers every element the function may read (aliasing checks walk it)."""

    __slots__ = ("leaf",)
    fancy = True  # (evaluated through the general path: no flat structure key)

    def __init__(self, leaf: Leaf) -> None:
        self.leaf = leaf
        self.dtype = leaf.dtype
        self.shape = ()
        self.storages = leaf.storages


class Remap(Node):
    """``child`` read through an affine index map (see :mod:`fuseloop.expr.views`).

    Only used where the map cannot be pushed into the child (a gather);
    everywhere else views become strides of the leaves.
    """

    __slots__ = ("child", "coeffs", "offs", "offsets", "operands", "sig")
    fancy = True

    def __init__(self, child: Node, shape: tuple[int, ...], offsets: tuple[int, ...],
                 coeffs: tuple[tuple[int, ...], ...]) -> None:
        self.child = child
        self.shape = shape
        self.offsets = offsets
        self.coeffs = coeffs
        self.dtype = child.dtype
        self.storages = child.storages
        self.sig, self.operands, self.offs = signed_one(("M", shape, offsets, coeffs), child)


class Concat(Node):
    """``pieces`` joined along ``axis`` (``numpy.concatenate``), without a copy.

    Element ``i`` along ``axis`` reads piece ``p`` at ``i - starts[p]``, where
    ``starts[p] <= i < starts[p + 1]``: each element loads from one piece only.
    Pieces have this node's dtype and shape except along ``axis``; none is
    empty unless it is the only one (build with :func:`fuseloop.expr.views.concat_node`).
    """

    __slots__ = ("axis", "fancy", "offs", "operands", "pieces", "sig", "starts")

    def __init__(self, pieces: tuple[Node, ...], axis: int) -> None:
        first = pieces[0]
        starts = []
        total = 0
        storages = _EMPTY
        fancy = False
        for p in pieces:
            assert p.dtype == first.dtype and len(p.shape) == len(first.shape), (p, first)
            starts.append(total)
            total += p.shape[axis]
            s = p.storages
            if s and not s <= storages:
                storages = s if not storages else storages | s
            fancy = fancy or p.fancy
        self.pieces = pieces
        self.axis = axis
        self.starts = tuple(starts)
        self.dtype = first.dtype
        self.shape = (*first.shape[:axis], total, *first.shape[axis + 1:])
        # every buffer a piece reads: later writes to any of them evaluate this first
        self.storages = storages
        self.fancy = fancy
        # (none by default; fuseloop.multi.exchange signs the row windows it makes)
        self.sig, self.operands, self.offs = 0, None, ()


class SparseProduct(Node):
    """A sparse matrix times a vector, one row per element: ``y[i] = sum_k A[i, k] * x[k]``.

    ``fmt`` ``"csr"``: row ``i``'s entries are ``data[indptr[i]:indptr[i + 1]]`` at the
    columns ``indices[...]`` (a loop over a data-dependent range).  ``fmt`` ``"ell"``:
    ``width`` entries per row stored column-major (entry ``k`` of row ``i`` at
    ``k * rows + i``), padding marked by the column index -1.  ``data``,
    ``indices`` and ``indptr`` (None for ELL) are whole contiguous buffers; ``x`` is
    a 1-D leaf (any view), read at the column indices, which were checked when the
    matrix was built.  ``dtype`` is the accumulator and result dtype.  The node
    has no children to rewrite: its operands are leaves.
    """

    __slots__ = ("data", "fmt", "indices", "indptr", "width", "x")
    fancy = True

    def __init__(self, fmt: str, data: Leaf, indices: Leaf, indptr: Leaf | None, x: Leaf,
                 rows: int, width: int, dtype: np.dtype) -> None:
        assert fmt in ("csr", "ell") and (indptr is None) == (fmt == "ell"), fmt
        self.fmt = fmt
        self.data = data
        self.indices = indices
        self.indptr = indptr
        self.x = x
        self.width = width
        self.dtype = dtype
        self.shape = (rows,)
        storages = data.storages | indices.storages | x.storages
        self.storages = storages if indptr is None else storages | indptr.storages

    def leaves(self) -> tuple[Leaf, ...]:
        """The buffers read, as leaves (matrix arrays first, ``x`` last)."""
        mats = (self.data, self.indices) if self.indptr is None else \
            (self.data, self.indices, self.indptr)
        return (*mats, self.x)


_caches.register("expr.nodes.loop_keys", _loop_keys.clear, lambda: len(_loop_keys),
                 why="one per numpy loop of an operation (dtype tuples of the ufuncs' loops)")
_caches.register("expr.nodes.broadcast", _broadcast_cache.clear,
                 lambda: len(_broadcast_cache), BROADCAST_CACHE_MAX)
_caches.register_function("expr.nodes.c_strides", c_strides)
