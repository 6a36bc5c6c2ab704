"""Subtrees built once per operand structure, then re-instantiated on new operands.

A composite operation (``x.argmax(axis=1)``, ``x.var()``, ``x ** -1.5`` by products, a
view pushed into an expression) builds a subtree that depends only on its operand's
structure (its signature and views' offsets, see :mod:`fuseloop.expr.nodes`), on which
of the operand's buffers and scalars repeat, on static arguments and on the device:
not on the buffers themselves nor the scalars' values. Built the second time its key
is met (a key met once, as in a loop over shapes or slices that change, costs one
dictionary entry), the subtree is recorded as a :class:`Template` that names the
operand's buffers and scalars by their position in its ``operands`` (never holding a
buffer); later calls with an operand of the same structure copy the template's nodes
with the new buffers and scalars in place (node fields, signatures, views' offsets and
loops stored: no dtype resolution, shape arithmetic or view pushing), which costs a
fraction of building them again. The copy is the node tree a fresh build would have
made, so the structure key and kernels are the same.

A subtree is not recorded (the key is remembered as such, and the composite built
each time) when it holds a node kind this module does not copy (concatenations,
sparse products, pointers) or a buffer that is not among its
operand's (a copy evaluated on the way).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, cast

from .. import caches as _caches
from .. import trace_hooks as _trace_hooks
from .nodes import (
    _EMPTY,
    Apply,
    Gather,
    Iota,
    Leaf,
    Literal,
    Node,
    Reduce,
    Remap,
    Scalar,
    UserCall,
    signature_of,
)

_new = object.__new__
_node_of = attrgetter("_node")
_N = TypeVar("_N", bound=Node | None)

# step kinds (see Template); operations first, as most steps are
_APPLY, _REDUCE, _IN, _LEAF, _SCALAR, _SHARED, _REMAP, _GATHER = range(8)

#: the most nodes a template records (a larger subtree is built each time): a binary
#: search (``fl.searchsorted``) takes about 20 a halving, 32 halvings for 2^32 positions
MAX_STEPS = 1024
TEMPLATES_MAX = 2048
# key -> Template; None: a subtree that is not recorded (see the module's docstring);
# _SEEN: a key met once
_templates: dict[tuple, Any] = {}
_caches.register("expr.templates", _templates.clear, lambda: len(_templates), TEMPLATES_MAX)


class _NotCopied(Exception):
    """A subtree that cannot be recorded."""


class Template:
    """Steps that rebuild a subtree, children before parents; the last is its root.

    Copying starts from a pool holding the operand's ``operands`` (buffers and scalar
    nodes, in order) and appends each step's node; a step names what it reads by pool
    index.  Each step is a tuple whose first field is its kind: the operand itself, a
    leaf of a buffer, a new scalar of a value, a node shared as it is (literals, element
    indices: no buffer, never changed), or an operation, reduction or remap with its
    fields and ``operands``: None, the pool index of a child whose ``operands`` tuple it
    shares, or the pool indexes of its buffers and scalars.

    ``root``: for a subtree of at least :data:`LATER_MIN` steps whose root is an
    operation, the pool indexes of the root's operands, of its buffers and of the
    scalars among them that it makes (made at once): a copy makes the root alone, with
    its arguments made when first read (``Apply.later``), since a call whose run plan
    is found by the root's signature never reads them (a stencil's views of a lazy
    array, each a copy of the array's whole expression, are most of its host time)."""

    __slots__ = ("root", "steps")

    def __init__(self, steps: list[tuple], root: tuple | None = None) -> None:
        self.steps = steps
        self.root = root


#: the fewest steps of a template whose copies make their root's arguments when first
#: read (a smaller subtree costs less to copy than to defer)
LATER_MIN = 6


def operand_pattern(operands: tuple | None) -> tuple[int, ...] | None:
    """Which of ``operands`` repeat (each one's first position), None when none does:
    part of a template's key, as equal signatures can hide different repeats."""
    if operands is None or len(operands) < 2 or len(set(operands)) == len(operands):
        return None
    return tuple(map(operands.index, operands))


def record(root: Node | tuple[Node, ...], out: Node | None) -> Template | None:
    """The template of ``out``, a subtree built from ``root`` alone (or from the roots
    of a tuple: their operands pooled in order); None when it cannot be recorded (see
    the module's docstring) or ``out`` is None (no view possible)."""
    if out is None:
        return None
    roots = root if isinstance(root, tuple) else (root,)
    inops = _pooled(roots)
    at: dict[int, int] = {}  # id of a pooled buffer or scalar node -> pool index
    for k, o in enumerate(inops):
        at.setdefault(id(o), k)
    rooted = {id(r): k for k, r in enumerate(roots)}
    steps: list[tuple] = []
    sets: dict[frozenset, int] = {}  # buffers of a node -> the first such node's index
    index: dict[int, int] = {}  # id of a node -> pool index

    def refs(node: Any, children: tuple[int, ...]) -> Any:
        ops = node.operands
        if ops is None:
            return None
        for c in children:  # (most operations share their only child's tuple)
            if c >= len(inops) and steps[c - len(inops)][-1] is ops:
                return c
        got = []
        for o in ops:
            p = at.get(id(o))
            if p is None:
                raise _NotCopied  # (a buffer made on the way)
            got.append(p)
        return tuple(got)

    def enc(node: Any) -> int:
        k = index.get(id(node))
        if k is None:
            k = at.get(id(node))  # (one of the operand's scalars)
        if k is not None:
            return k
        cls = type(node)
        step: tuple
        if id(node) in rooted:
            step = (_IN, rooted[id(node)])
        elif cls is Apply or cls is UserCall:
            args = tuple(enc(a) for a in node.args)
            step = (_APPLY, cls, node.op, args, node.loop, node.loop_key, node.shape,
                    node.sig, node.offs, node.fancy, refs(node, args),
                    node.function if cls is UserCall else None, _buffers(node, sets, at))
        elif cls is Leaf:
            p = at.get(id(node.storage))
            if p is None:
                raise _NotCopied  # (a buffer made on the way)
            step = (_LEAF, p, node.dtype, node.shape, node.strides, node.offset,
                    signature_of(node), node.leaf_token(), _buffers(node, sets, at))
        elif cls is Scalar:
            step = (_SCALAR, node.value)
        elif cls is Literal or cls is Iota:
            step = (_SHARED, node)
        else:
            step = _step_over_children(node, enc, refs)
        if len(steps) >= MAX_STEPS:
            raise _NotCopied
        k = index[id(node)] = at[id(node)] = len(inops) + len(steps)
        # (the node's operands ride along while recording, for refs' test of sharing)
        steps.append((*step, node.operands))
        if node.storages:
            sets.setdefault(node.storages, k)
        return k

    try:
        if enc(out) != len(inops) + len(steps) - 1:
            return None  # (one of the operand's scalars itself: no step made it)
    except (_NotCopied, RecursionError):
        return None
    return Template([step[:-1] for step in steps], _root_refs(out, steps, at, len(inops)))


def _root_refs(out: Node, steps: list[tuple], at: dict[int, int], n_in: int
               ) -> tuple | None:
    """:class:`Template`'s ``root``: (operand indexes, buffer indexes, indexes of the
    scalar steps among the operands), or None where the copy makes the whole subtree (a
    small one, a root that is no operation, an operand that is no input or scalar)."""
    if len(steps) < LATER_MIN or steps[-1][0] != _APPLY or out.operands is None:
        return None
    operands = tuple(at.get(id(o), -1) for o in out.operands)
    buffers = tuple(at.get(id(b), -1) for b in out.storages)
    if any(k < 0 or (k >= n_in and steps[k - n_in][0] != _SCALAR) for k in operands) or \
            any(k < 0 or k >= n_in for k in buffers):
        return None
    return operands, buffers, tuple(sorted({k for k in operands if k >= n_in}))


def _buffers(node: Node, sets: dict[frozenset, int], at: dict[int, int]) -> Any:
    """:func:`record`'s source of a step's buffer set: the pool index of a node made
    before with the same buffers (the copy shares its set), else the buffers' indexes."""
    k = sets.get(node.storages)
    if k is not None:
        return k
    got = tuple(at.get(id(b), -1) for b in node.storages)
    if -1 in got:
        raise _NotCopied  # (a buffer made on the way)
    return got


def _step_over_children(node: Any, enc: Callable[[Any], int],
                        refs: Callable[[Any, tuple[int, ...]], Any]) -> tuple:
    """:func:`record`'s step of a reduction, remap or gather (children encoded by
    ``enc``, operands by ``refs``); other kinds are not copied."""
    cls = type(node)
    if cls is Reduce:
        child = enc(node.child)
        return (_REDUCE, child, node.op, node.axes, node.dtype, node.shape, node.sig,
                node.offs, refs(node, (child,)))
    if cls is Remap:
        child = enc(node.child)
        return (_REMAP, child, node.shape, node.offsets, node.coeffs, node.sig, node.offs,
                refs(node, (child,)))
    if cls is Gather:
        child, idx = enc(node.child), enc(node.index)
        return (_GATHER, child, idx, node.axis, node.checked, node.shape, node.sig,
                node.offs, refs(node, (child, idx)))
    raise _NotCopied


def instantiate(template: Template, root: Node | tuple[Node, ...]) -> Node:
    """``template``'s subtree built on ``root`` (of the recorded root's structure; a
    tuple: the recorded roots')."""
    if isinstance(root, tuple):
        return _made(template, _pooled(root), root)
    return _made(template, root.operands or (), (root,))


def _pooled(roots: tuple[Node, ...]) -> tuple:
    """The operands of ``roots`` in order: a template's first pool entries."""
    pool: tuple = ()
    for r in roots:
        pool += r.operands or ()
    return pool


def _union(*parts: frozenset) -> frozenset:
    """The buffers of an operation's arguments (as :class:`Apply`'s constructor)."""
    storages = _EMPTY
    for s in parts:
        if s and s is not storages:
            storages = s if not storages else storages if s <= storages else storages | s
    return storages


def _made(t: Template, ops: tuple, roots: tuple[Node, ...]) -> Node:
    """The root of ``t``'s copy on the pool ``ops``: the whole subtree, or (``t.root``)
    the root alone, its fields and the scalars among its operands made now, its
    arguments when first read (:func:`_later_args`)."""
    root = t.root
    if root is None:
        return _fill(t.steps, ops, roots, None)[-1]
    steps = t.steps
    operands_at, buffers_at, scalars_at = root
    n = len(ops)
    made: dict[int, Node] = {}
    for k in scalars_at:
        value = steps[k - n][1]
        s = made[k] = _new(Scalar)
        s.value, s.dtype, s.shape, s.storages = value, value.dtype, (), _EMPTY
    _, cls, op, _args, loop, key, shape, sig, offs, fancy, _refs, function, _b = steps[-1]
    node = _new(cls)
    node.op, node.loop, node.loop_key, node.dtype = op, loop, key, loop[-1]
    node.shape, node.sig, node.fancy, node.offs = shape, sig, fancy, offs
    node.operands = tuple(map(ops.__getitem__, operands_at)) if not made else \
        tuple([ops[k] if k < n else made[k] for k in operands_at])
    node.storages = frozenset(map(ops.__getitem__, buffers_at)) if buffers_at else _EMPTY
    if function is not None:
        node.function = function
    node.later = lambda: _later_args(steps, ops, roots, made)
    return node


def _later_args(steps: list[tuple], ops: tuple, roots: tuple[Node, ...],
                made: dict[int, Node]) -> tuple:
    """The arguments of a root :func:`_made` without them: the steps before it copied
    (with the scalars it made)."""
    pool = _fill(steps[:-1], ops, roots, made)
    return tuple([pool[k] for k in steps[-1][3]])


def _fill(steps: list[tuple], ops: tuple, roots: tuple[Node, ...],
          made: dict[int, Node] | None) -> list[Any]:
    """The pool after the steps' nodes are made on ``ops`` (the operand's ``operands``):
    node allocations and field stores, no dtype resolution, shape arithmetic or view
    pushing (``made``: scalar nodes made already, by pool index)."""
    pool: list[Any] = list(ops)
    # (pool positions are read by map in C, not by a comprehension's frame each)
    get = pool.__getitem__
    for step in steps:
        kind = step[0]
        node: Any
        if kind == _APPLY:
            _, cls, op, args, loop, key, shape, sig, offs, fancy, refs, function, bufs = step
            node = _new(cls)
            node.op, node.loop, node.loop_key, node.dtype = op, loop, key, loop[-1]
            node._args, node.shape, node.sig, node.fancy = tuple(map(get, args)), shape, sig, \
                fancy
            node.offs = offs
            # (an argument's set where it is the operation's, as mostly: no union made)
            node.storages = pool[bufs].storages if type(bufs) is int else \
                frozenset(map(get, bufs)) if bufs else _EMPTY
            node.operands = None if refs is None else pool[refs].operands \
                if type(refs) is int else tuple(map(get, refs))
            if function is not None:
                node.function = function
        elif kind == _REDUCE:
            _, child, op, axes, dtype, shape, sig, offs, refs = step
            node = _new(Reduce)
            c = pool[child]
            node.op, node.child, node.axes, node.dtype = op, c, axes, dtype
            node.shape, node.sig, node.storages, node.offs = shape, sig, c.storages, offs
            node.operands = None if refs is None else pool[refs].operands \
                if type(refs) is int else tuple(map(get, refs))
        elif kind == _IN:
            node = roots[step[1]]
        elif kind == _LEAF:
            _, p, dtype, shape, strides, offset, sig, token, bufs = step
            node = _new(Leaf)
            node.storage = pool[p]
            node.operands = (pool[p],)
            node.storages = pool[bufs].storages if type(bufs) is int else \
                frozenset(node.operands)
            node.dtype, node.shape, node.strides, node.offset = dtype, shape, strides, offset
            node.sig, node.token, node.views = sig, token, None
            node.offs = () if strides is None else (offset,)
        elif kind == _SCALAR:
            if made and len(pool) in made:
                node = made[len(pool)]
            else:
                value = step[1]
                node = _new(Scalar)
                node.value, node.dtype, node.shape = value, value.dtype, ()
                node.storages = _EMPTY
        elif kind == _SHARED:
            node = step[1]
        elif kind == _GATHER:
            _, child, idx, axis, checked, shape, sig, offs, refs = step
            node = _new(Gather)
            c, i = pool[child], pool[idx]
            node.child, node.index, node.axis, node.checked = c, i, axis, checked
            node.dtype, node.shape, node.sig, node.offs = c.dtype, shape, sig, offs
            node.storages = _union(c.storages or _EMPTY, i.storages or _EMPTY)
            node.operands = None if refs is None else pool[refs].operands \
                if type(refs) is int else tuple(map(get, refs))
        else:
            _, child, shape, offsets, coeffs, sig, offs, refs = step
            node = _new(Remap)
            c = pool[child]
            node.child, node.shape, node.offsets, node.coeffs = c, shape, offsets, coeffs
            node.dtype, node.storages, node.sig, node.offs = c.dtype, c.storages, sig, offs
            node.operands = None if refs is None else pool[refs].operands \
                if type(refs) is int else tuple(map(get, refs))
        pool.append(node)
    return pool


_MISSING = object()
# a key met once: recorded the second time it is met (a composite of shapes or views
# that change every call, in a loop, is built without recording it)
_SEEN = object()


def _remember(key: tuple, t: Any, record_it: Callable[[], Template | None]) -> None:
    """After building under ``key`` (whose entry was ``t``): note it seen, or record it."""
    if t is _MISSING:
        if len(_templates) >= TEMPLATES_MAX:
            _templates.clear()
        _templates[key] = _SEEN
    elif t is _SEEN:
        _templates[key] = record_it()


def built(key: tuple, root: Node, build: Callable[[], _N]) -> _N:
    """``build()``, a subtree of ``root`` alone, by its template under ``key`` (which
    must hold everything but ``root``'s buffers and scalars that the subtree depends
    on: ``root``'s signature, ``offs`` and :func:`operand_pattern`, the static
    arguments)."""
    t = _templates.get(key, _MISSING)
    if type(t) is Template:
        return cast(_N, instantiate(t, root))  # (a node: what build made when recorded)
    out = build()
    if t is not None:
        _remember(key, t, lambda: record(root, out))
    return out


def array_key(name: str, x: Any, *statics: Any) -> tuple | None:
    """The template key of a composite ``name`` of the array ``x`` with ``statics``,
    or None where it is built each time: an operand without a signature, a 0-d
    operand (small work on a CPU device may compute its parts at once, as values),
    or a trace of ``fl.fuse`` (which watches what is built)."""
    node = x._node
    sig = node.sig or signature_of(node)
    if not sig or not x._shape or _trace_hooks.trace_checks:
        return None
    return (name, sig, operand_pattern(node.operands), node.offs, x.device, statics)


def composite(key: tuple | None, x: Any, build: Callable[[], Any]) -> Any:
    """The lazy array ``build()`` makes from the array ``x`` (a composite operation
    keyed by :func:`array_key`), by its template where one is recorded."""
    if key is None:
        return build()
    try:
        t = _templates.get(key, _MISSING)
    except TypeError:  # (a static argument that is not hashable: a list of axes)
        return build()
    if type(t) is Template:  # (instantiate's work, written out: one frame fewer)
        node = x._node
        return (_lazy_array or _bind())(_made(t, node.operands or (), (node,)), x.device)
    out = build()
    if t is not None:
        # (a concrete result, or one on another device, is not a copy of nodes)
        _remember(key, t, lambda: record(x._node, out._node) if type(out) is type(x)
                  and out._storage is None and out.device is x.device else None)
    return out


# A composite called again with the same arguments as written (``fl.sum(d, axis=1)``)
# finds its template under a key of those arguments before they are normalised (axes,
# dtypes): ``_templates`` holds it under that key too, after the composite's own key
# (so that clearing the one clears the other).


def call_key(name: str, x: Any, *args: Any) -> tuple | None:
    """The key of a call of composite ``name`` on the array ``x`` with ``args`` as the
    caller wrote them (hashable or not), or None where :func:`array_key` gives none."""
    if type(x) is not (_array_type or _bind_array()) or not x._shape \
            or _trace_hooks.trace_checks:
        return None
    node = x._node
    sig = node.sig or signature_of(node)
    if not sig:
        return None
    return (name, sig, operand_pattern(node.operands), node.offs, x.device, args)


def by_call(key: tuple | None, x: Any) -> Any:
    """The lazy array of the call ``key`` (:func:`call_key`) on ``x``, copied from its
    template, or None (not recorded yet, or ``key`` None or not hashable)."""
    if key is None:
        return None
    try:
        t = _templates.get(key)
    except TypeError:  # (an argument that is not hashable: a list of axes)
        return None
    if type(t) is not Template:
        return None
    node = x._node
    return (_lazy_array or _bind())(_made(t, node.operands or (), (node,)), x.device)


def note_call(call: tuple | None, key: tuple | None) -> None:
    """Enter the template recorded under the composite's ``key`` under ``call`` too."""
    if call is None or key is None:
        return
    try:
        t = _templates.get(key)
        if type(t) is Template and len(_templates) < TEMPLATES_MAX:
            _templates[call] = t
    except TypeError:  # (not hashable: built each time)
        pass


def composite_of(name: str, xs: tuple, build: Callable[[], Any], *statics: Any) -> Any:
    """:func:`composite` of the arrays ``xs`` (one device), keyed by ``name``, their
    signatures, which of their operands repeat (within one and across them) and
    ``statics``."""
    a = xs[0]
    device = a.device
    pool: tuple = ()
    sigs = []
    for x in xs:
        node = x._node
        sig = node.sig or signature_of(node)
        if not sig or not x._shape or node.operands is None or x.device is not device:
            return build()
        sigs.append((sig, node.offs))
        pool += node.operands
    if _trace_hooks.trace_checks:
        return build()
    key = (name, tuple(sigs), operand_pattern(pool), device, statics)
    t = _templates.get(key, _MISSING)
    roots = tuple(map(_node_of, xs))  # (in C: a generator's frame resumed per array)
    if type(t) is Template:
        return (_lazy_array or _bind())(_made(t, pool, roots), device)
    out = build()
    if t is not None:
        _remember(key, t, lambda: record(roots, out._node) if type(out) is type(a)
                  and out._storage is None and out.device is device else None)
    return out


_lazy_array: Any = None
_array_type: Any = None


def _bind() -> Any:
    """``fuseloop.array._lazy_array``, bound on first use (that module imports this
    one's importers)."""
    global _lazy_array, _array_type
    from ..array import Array
    from ..array import _lazy_array as lazy

    _lazy_array, _array_type = lazy, Array
    return lazy


def _bind_array() -> Any:
    """``fuseloop.array.Array``, bound on first use (see :func:`_bind`)."""
    _bind()
    return _array_type


# module name -> its settings that change what a composite builds (see watch_settings)
_watched: dict[str, frozenset[str]] = {}


class _WatchedModule(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _watched.get(self.__name__, ()) and getattr(self, name, _MISSING) != value:
            _templates.clear()
        super().__setattr__(name, value)


def watch_settings(module: str, names: frozenset[str]) -> None:
    """Forget every template when one of ``module``'s settings ``names`` (module-level
    values that change what a composite builds, like ``ops.reductions.ROWS_FIRST_MIN``)
    is set to a new value: a template recorded under the old value would build the old
    structure.  Reading a setting stays a plain module attribute read (nothing added to
    the keys); setting one goes through the module class's ``__setattr__``."""
    _watched[module] = _watched.get(module, frozenset()) | names
    sys.modules[module].__class__ = _WatchedModule
