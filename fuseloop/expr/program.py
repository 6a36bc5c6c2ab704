"""Linearise an expression DAG into a hashable SSA program.

The program is a tuple of entries in dependency order; entries refer to earlier
ones by position.  It is both the structural part of the cache key and the input
of lowering, so the key is computed without touching Loopy.  Entries are
hash-consed: an array read twice at the same index is loaded once and a
subexpression built twice (even as separate Python objects) is computed once.

Every value is computed *at* a symbolic index: a tuple with one component per
dimension of the node.  Components are

* ``0``: the dimension has length 1 (or is broadcast);
* ``("r", d)``: output (root) dimension ``d``;
* ``("j", rid, k)``: the ``k``-th reduced dimension of reduction ``rid``;
* ``("g", ref, p, checked)``: the value of index entry ``ref``, wrapped and
  clamped to the length in parameter ``p`` (a gather; ``checked`` reports
  out-of-range values);
* ``("a", const, ((coef, comp), ...))``: an affine combination (a remap);
* ``("k", comp, start, length)``: a position within one piece of a
  concatenation, ``comp - start`` clamped to ``[0, length)`` (``start`` 0 or a
  parameter; ``length`` a parameter, or None for the last piece): the
  selected piece reads exactly there, and a piece value computed for an
  element of another piece (a temporary) still reads inside its own buffer.

Run-time integers (strides, offsets, sizes) are parameters: entries name
parameter slots, :class:`Bindings` carries their values.  A stride of 0 or 1
is structural (it is baked into the source so loads vectorise); any other
stride is a parameter, so one kernel serves every size.

Entries are the records of :mod:`fuseloop.expr.ir` (named tuples whose first
field, ``kind``, is the tag below; the other fields are named as here), made by
the passes of :data:`fuseloop.passes.PASSES`:

* ``("load", slot, dtype, at, strides, offset)``: ``strides[k]`` is 0, 1 or
  ``("p", slot)``; ``offset`` is 0 (a whole buffer) or ``("p", slot)``.
* ``("iota", dtype, at, strides, offset)``: the same address, as a value.
* ``("arg", slot, dtype)`` / ``("lit", dtype, value)``: scalars.
* ``("op", name, loop, refs)`` / ``("call", key, loop, refs)``: elementwise.
* ``("reduce", op, dtype, rid, child, at, sizes, total, chunk)``: reduction
  ``rid`` of entry ``child`` over the reduced dimensions whose lengths are the
  parameters ``sizes`` (product ``total``); ``chunk`` is None or
  ``(p_chunk, d, exact)``: only the ``chunk``-long piece number ``("r", d)`` of
  the reduced range is reduced (first stage of a two-stage reduction);
  ``exact`` when the pieces tile the range exactly (no bounds test).
* ``("gather", index, child, length)``: checked gather.
* ``("concat", comp, bounds, refs, flat)``: the value of piece ``refs[p]`` where
  ``bounds[p-1] <= comp < bounds[p]`` (``bounds`` are the parameters holding
  where pieces 1.. start): a nest of conditionals, so each element loads from
  one piece only.  ``flat`` is None, or, when ``comp`` is an output dimension
  preceded by unit dimensions only, ``(starts, kcs, cstrides)``: the
  parameters holding where pieces 1.. start in the flat C-order loop over the
  output (each piece is then one range of it: a recipe may give each piece its
  own loop, see :func:`fuseloop.lower.kernel.lower_program`), the position
  component each piece is read at (a ``"k"`` component, or 0 for a piece of
  length 1), and the output's C strides as address kinds (a load with these
  strides at the output's index, shifted into a piece, reads the piece's
  elements in the flat loop's order).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import numpy as np

from ..passes import Build, run_passes
from ..passes.emit import iota_reach  # noqa: F401  (re-exported)
from .ir import INT32_LIMIT, Entry, reachable_entries  # noqa: F401  (re-exported)
from .nodes import (
    Apply,
    Concat,
    Gather,
    Iota,
    Leaf,
    Literal,
    Node,
    Reduce,
    Remap,
    Scalar,
    SparseProduct,
    Storage,
    UserCall,
    signature_of,
)


class Program(NamedTuple):
    """A linearised expression: what a kernel computes, without the data.

    Made by :func:`linearize` (the passes of :data:`fuseloop.passes.PASSES`).
    """

    entries: tuple[Entry, ...]
    outputs: tuple[int, ...]
    out_specs: tuple[tuple, ...]  # per output: () contiguous, or (at, strides, offset[, atomic])
    root_sizes: tuple[Any, ...]  # per root dimension: ("p", slot), or 1
    row_dims: tuple[int, ...] | None  # None: one flat loop; else dims of the row loop
    chunked: bool = False  # first stage of a two-stage reduction (see Reduce entries)
    has_reduce: bool = False
    # a matmul-like sum of products (see fuseloop.expr.contraction), else None
    contraction: Any = None
    # holds a sparse matrix product (fuseloop.expr.nodes.SparseProduct): its own recipes
    has_sparse: bool = False
    # the entry of a boolean mask (Target.mask) guarding the whole computation and the
    # stores of every output: elements where it is false are neither computed nor written
    mask: int | None = None
    # a two-stage reduction's first stage run in this (its combining) kernel's launch
    first: FirstStage | None = None
    # one work-group computes every value before any store (recipes/one_group.py): a
    # small write reading its target's elements that other work-items write
    one_group: bool = False


class FirstStage(NamedTuple):
    """The first stage of a two-stage reduction folded into the combining program's
    launch (``Program.first``; see :mod:`fuseloop.lower.one_launch`).

    The launch's bindings are the combining program's, then the first stage's, then the
    first stage's rows and row length as two more parameters; its outputs are the
    combining program's, then the partial results.  ``partial_inputs``: the combining
    program's input slots that read each partial result.
    """

    program: Program
    n_outputs: int  # the combining program's outputs, storages, scalars, parameters
    n_storages: int
    n_scalars: int
    n_params: int
    first_params: int  # the first stage's own parameters
    partial_inputs: tuple[int, ...]


def with_row_loops(program: Program) -> Program:
    """``program`` lowered as a loop over its output's rows (every non-unit axis but
    the last) and one along the last axis, where it has several axes and no
    reduction; else ``program`` itself.

    An output whose axes do not merge (a gather of rows, a slice of a matrix, a
    transpose) otherwise walks one flat loop and divides its position by the
    extents in every element's address; here the divisions are per row, and the
    inner loop steps along the last axis (vectorised on CPUs).  Masked programs,
    atomic updates and concatenations (the CPU's piece loops need the flat loop)
    keep it.  A recipe asks for this form with ``row_loops`` (see
    :mod:`fuseloop.recipes`).
    """
    dims = [d for d, s in enumerate(program.root_sizes) if s != 1]
    if (len(dims) < 2 or program.row_dims is not None or program.has_reduce
            or program.chunked or program.contraction is not None or program.has_sparse
            or program.mask is not None or any(len(s) == 4 for s in program.out_specs)
            or any(e.kind == "concat" for e in program.entries)):
        return program
    return program._replace(row_dims=tuple(dims[:-1]))


class Bindings(NamedTuple):
    """The run-time values a program is launched with.

    ``scalar_nodes``: the scalar node each value of ``scalars`` came from, where
    known (a full linearisation), so a run plan can tell apart two scalar nodes
    that hold one value object (``x*2 + y*2``: Python's 2 converts to one object).
    ``offset_slots``: the positions in ``params`` holding buffer views' and targets'
    offsets (parameters of their own: a run plan replays them with other offsets).
    """

    storages: list[Storage]
    scalars: list[np.generic]
    params: list[int]
    out_shape: tuple[int, ...]
    scalar_nodes: list[Node] | None = None
    offset_slots: tuple[int, ...] | None = None  # (None: not known)


class Target(NamedTuple):
    """Where an output goes: a buffer seen through strides (elements) and an offset.

    ``scatter=(axis, indices, lengths, codes)`` writes element ``idx`` of the result
    to position ``indices[k][idx[axis:axis+q]]`` along axis ``axis + k`` of the view,
    for each ``k`` (``a[i, j] = v``; the index nodes broadcast together to ``q`` axes,
    aligned from the right).  ``codes[k]`` is the bounds check's code (see ``Gather``).
    ``atomic``: with ``scatter``, combine each value into its position with this
    binary operation as an atomic update (``fl.add.at``: ``"add"``) instead of storing it.
    ``mask``: a boolean node of the output's shape; only elements where it holds are
    computed and stored (``fl.compute(..., out=y, where=m)``; every target of one
    program has the same mask, or none).
    """

    storage: Storage
    strides: tuple[int, ...] | None
    offset: int
    scatter: tuple | None = None
    atomic: str | None = None
    mask: Node | None = None


def target_nodes(targets: Sequence[Any] | None) -> tuple[list[Node], list[Node], tuple]:
    """The masks (each once) and scatters' index nodes of ``targets`` (a run plan's walk
    reads them as roots, after its roots), and each scatter's fields for the key: axis,
    index count, lengths, checks.  A loop, not comprehensions: most
    targets have neither, and this runs for every statement whose views move."""
    masks: list[Node] = []
    index_nodes: list[Node] = []
    scattered: list[tuple] = []
    for t in targets or ():
        if isinstance(t, Target) and (t.mask is not None or t.scatter is not None):
            if t.mask is not None and all(m is not t.mask for m in masks):
                masks.append(t.mask)
            if t.scatter is not None:
                sc = t.scatter
                index_nodes.extend(sc[1])
                scattered.append((sc[0], len(sc[1]), tuple(sc[2]), tuple(sc[3])))
    return masks, index_nodes, tuple(scattered)


def linearize(roots: Sequence[Node], out_shape: tuple[int, ...],
              targets: Sequence[Target | None] | None = None,
              chunks: tuple[int, int, bool, int] | None = None,
              cache: bool = True) -> tuple[Program, Bindings]:
    """The program computing ``roots`` (each broadcast to ``out_shape``).

    ``chunks=(count, length, exact, axis)`` makes every top-level reduction a first
    stage: output dimension ``axis`` (of length ``count``; the last one, or the
    first one for reductions along non-contiguous axes) numbers pieces of
    ``length`` reduced elements (``exact``: they tile every reduction exactly).

    Elementwise work into plain outputs is looked up in the structure cache
    (:func:`structure_entry`) first; ``cache=False`` always linearises.
    """
    if cache and chunks is None and (targets is None or all(
            t is None or (t.strides is None and t.offset == 0 and t.scatter is None
                          and t.mask is None) for t in targets)):
        hit = structure_entry(roots, out_shape)
        if hit is not None:
            entry, storages, scalars = hit
            return entry.program, Bindings(storages, scalars, list(entry.params), out_shape,
                                           None, entry.offset_slots)
    b = run_passes(Build(roots, out_shape, targets, chunks))
    program = Program(tuple(b.entries), b.outputs, tuple(b.out_specs), b.root_sizes,
                      b.row_dims, chunks is not None, b.reductions > 0, b.contraction,
                      any(e.kind == "sparse" for e in b.entries), b.mask)
    return program, Bindings(b.storages, b.scalars, b.params, out_shape, b.scalar_nodes,
                             b.offset_slots())


# {{{ structure cache

class StructureEntry:
    """What linearising one expression structure gives, minus the data.

    ``launches`` is for :mod:`fuseloop.evaluate` to remember, per index dtype
    and device, how the compiled kernel is launched for this structure.
    """

    __slots__ = ("launches", "max_param", "offs", "offset_slots", "params", "program",
                 "rebind", "take")

    def __init__(self, program: Program, params: list[int],
                 offset_slots: tuple[int, ...] = ()) -> None:
        self.program = program
        self.params = tuple(params)
        self.offset_slots = offset_slots
        self.max_param = max(params, default=0)
        self.launches: dict[Any, Any] = {}
        # for an entry found by signature: operands -> (buffers, scalar values), and the
        # views' offsets its parameters hold (a root's ``offs``)
        self.take: Any = None
        self.offs: tuple = ()
        # its launch plan's moving plan (the offsets as arguments: fuseloop.flat_moves)
        self.rebind: tuple | None = None


class _Uncacheable(Exception):
    pass


class _ScalarTokens(dict):
    def __missing__(self, char: str) -> tuple[str, str]:
        self[char] = ("S", char)
        return self[char]


_SCALAR_TOKENS = _ScalarTokens()


# the structure cache: key (see structure_entry) -> entry
structures: dict[tuple, StructureEntry] = {}
# (signature, out_shape) -> the entry last found under a key that starts with them;
# its program is right for any operands that repeat at least as its key says (an
# elementwise kernel into a new buffer may read one buffer through two arguments), its
# parameters for its own views' offsets (``entry.offs``)
flat_entries: dict[tuple, StructureEntry] = {}
STRUCTURES_MAX = 2048  # entries kept (all are dropped when it is reached)
# larger expressions are linearised every time (a 400-operation expression writes
# about 2000 tokens; linearising it costs ten times its walk)
MAX_TOKENS = 4096
# entries whose keys are longer than LARGE_TOKENS: at most LARGE_MAX of them are kept
# (until the cache is cleared), which bounds the memory their keys and programs take
LARGE_TOKENS = 512
LARGE_MAX = 64
_large = [0]
#: tests set this to compare every structure-cache hit with a fresh linearisation
CHECK_STRUCTURE_CACHE = False


def structure_key(roots: Sequence[Node], out_shape: tuple[int, ...]
                  ) -> tuple[tuple, list[Storage], list[np.generic]]:
    """A key for what :func:`linearize` makes of elementwise ``roots``, and their data.

    The key is a prefix code of the DAG, depth first, arguments in order: for an
    elementwise operation its name (a user call: ``("U", function key)``), loop
    dtypes and shape, then its arguments; for a leaf its dtype, shape, strides
    and offset and the *slot* of its buffer (buffers numbered by first
    appearance, so ``x * x`` and ``x * y`` differ); for a concatenation its
    axis, shape and piece starts, then its pieces; for a scalar argument its
    dtype and slot (one per scalar node, as in the program); literals and
    element indices in full.  An operation node met again is written as a
    back-reference to the place its part of the key began: the key stays a
    prefix code of the DAG (the walk's order and the first appearances of
    buffers and scalars are those of the full expansion), and a chain reusing
    its previous step (``r = f(r) + r * c``, whose expansion doubles per step)
    costs one visit per node.  Sharing written out as copies gives another key
    for the same program (:func:`linearize` merges equal entries anyway).  The
    program, its parameters (sizes, strides, offsets) and the order of the
    bindings are a function of this key.  Raises ``_Uncacheable`` for
    reductions, gathers and remaps, or beyond ``MAX_TOKENS``.
    """
    toks: list[Any] = [out_shape, len(roots)]
    storages: list[Storage] = []
    scalars: list[np.generic] = []
    slots: dict[Any, int] = {}  # buffer or scalar node -> its slot
    try:
        for r in roots:
            _walk(r, toks, slots, storages, scalars)
    except RecursionError:
        raise _Uncacheable from None
    return tuple(toks), storages, scalars


def _walk(node: Node, toks: list[Any], slots: dict[Any, int], storages: list[Storage],
          scalars: list[np.generic], general: bool = False,
          offs: ViewOffsets | None = None) -> None:
    """Append ``node``'s part of the structure key (see :func:`structure_key`).
    ``general`` also writes out reductions and remaps (for :mod:`fuseloop.run_plans`);
    with ``offs``, leaves' offsets are collected there, not written into the key."""
    # (``type(node) is C`` each time rather than a local: mypy narrows on it, and Python
    # 3.11 specialises the call of type, so it costs no more than the local would)
    if type(node) is Apply or type(node) is UserCall:
        back = slots.get(node)  # met again: a back-reference (see structure_key)
        if back is not None:
            toks.append(("B", back))
            return
        slots[node] = len(toks)
        toks.append(("U", node.function.key) if type(node) is UserCall else node.op)
        toks.append(node.loop_key)
        toks.append(node.shape if offs is None else offs.shape(node.shape))
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        for a in node.args:
            if type(a) is Leaf:  # leaves and scalars in place: most arguments are one
                s = a.storage
                k = slots.get(s)
                if k is None:
                    k = slots[s] = len(storages)
                    storages.append(s)
                toks.append(a.token or a.leaf_token() if offs is None else offs.token(a, k))
                toks.append(k)
            elif type(a) is Scalar:
                k = slots.get(a)
                if k is None:
                    k = slots[a] = len(scalars)
                    scalars.append(a.value)
                toks.append(_SCALAR_TOKENS[a.dtype.char])
                toks.append(k)
            else:
                _walk(a, toks, slots, storages, scalars, general, offs)
    elif type(node) is Leaf:
        s = node.storage
        k = slots.get(s)
        if k is None:
            k = slots[s] = len(storages)
            storages.append(s)
        toks.append(node.token or node.leaf_token() if offs is None else offs.token(node, k))
        toks.append(k)
    elif type(node) is Scalar:
        k = slots.get(node)
        if k is None:
            k = slots[node] = len(scalars)
            scalars.append(node.value)
        toks.append(_SCALAR_TOKENS[node.dtype.char])
        toks.append(k)
    elif type(node) is Literal:
        toks.append(("C", node.dtype.char, node.value.tobytes()))
    elif type(node) is Iota:
        toks.append(("I", node.dtype.char, node.shape, node.strides, node.offset))
    elif general and type(node) is Reduce:
        toks.append(("R", node.op, node.dtype.char, node.axes,
                     node.shape if offs is None else offs.shape(node.shape)))
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        _walk(node.child, toks, slots, storages, scalars, True, offs)
    elif general and type(node) is Remap:
        toks.append(("M", node.shape, node.offsets, node.coeffs))
        _walk(node.child, toks, slots, storages, scalars, True, offs)
    elif general and type(node) is Gather:  # (checked: its flag read, see fuseloop.flags)
        toks.append(("G", node.axis, node.shape, node.checked))
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        _walk(node.child, toks, slots, storages, scalars, True, offs)
        _walk(node.index, toks, slots, storages, scalars, True, offs)
    elif type(node) is Concat:
        # the piece boundaries are in the key (as leaves' sizes are), parameters in the program
        toks.append(("K", node.axis, node.shape, node.starts))
        if len(toks) > MAX_TOKENS:
            raise _Uncacheable
        for p in node.pieces:
            _walk(p, toks, slots, storages, scalars, general, offs)
    else:
        _walk_other(node, toks, slots, storages, scalars, general)


def _walk_other(node: Node, toks: list[Any], slots: dict[Any, int], storages: list[Storage],
                scalars: list[np.generic], general: bool) -> None:
    """:func:`_walk` for the rarer nodes: sparse products (general walks only)."""
    if not (general and type(node) is SparseProduct):
        raise _Uncacheable
    # its parameters (rows, width, x's stride and offset) are in these tokens
    toks.append(("P", node.fmt, node.dtype.char, node.width, node.shape))
    for leaf in node.leaves():
        _walk(leaf, toks, slots, storages, scalars, True)


class ViewOffsets:
    """The offsets and lengths of a walk's nodes, kept out of its key (see
    :func:`walk_structure`): a leaf's token says only whether it is plain (a whole
    buffer, no offset) and, if not, which of the walk's distinct offsets it has
    (first appearance first; 0 is one of them: ``a[i]`` has one key for every ``i``);
    ``values`` holds those offsets, ``views`` every leaf with its buffer's slot.

    Likewise every length above 1 of a shape (an operation's, a leaf's, a
    reduction's; :meth:`shape`) is written as which of the walk's distinct lengths
    it is, with its class (its bit length: the split and layout thresholds are
    powers of two); ``lengths`` holds them, and ``bound`` the largest node's size
    times two per axis (what a length of the same class can grow it to)."""

    __slots__ = ("bound", "index", "len_index", "lengths", "shapes", "values", "views")

    def __init__(self) -> None:
        self.values: list[int] = []
        self.index: dict[int, int] = {}
        self.views: list[tuple[int, Leaf]] = []
        self.lengths: list[int] = []
        self.len_index: dict[int, tuple] = {}
        self.shapes: dict[tuple[int, ...], tuple] = {}  # (shapes written so far)
        self.bound = 0

    def shape(self, shape: tuple[int, ...]) -> tuple:
        """``shape`` with each length above 1 as its symbol ``(k, class)``."""
        known = self.shapes.get(shape)
        if known is not None:
            return known
        out: list[Any] = []
        for n in shape:
            if n <= 1:
                out.append(n)
                continue
            sym = self.len_index.get(n)
            if sym is None:
                sym = self.len_index[n] = (len(self.lengths), n.bit_length())
                self.lengths.append(n)
            out.append(sym)
        bound = math.prod(shape) << len(shape)
        if bound > self.bound:
            self.bound = bound
        known = self.shapes[shape] = tuple(out)
        return known

    def cls(self, off: int, strides: tuple[int, ...] | None) -> int:
        """-1 for a plain view or target (``strides`` None: a whole buffer, offset 0),
        else which of the distinct offsets ``off`` is."""
        if strides is None:
            return -1
        k = self.index.get(off)
        if k is None:
            k = self.index[off] = len(self.values)
            self.values.append(off)
        return k

    def token(self, leaf: Leaf, slot: int) -> tuple:
        """``leaf``'s token without its offset's value (its buffer's slot: ``slot``)."""
        self.views.append((slot, leaf))
        off = leaf.offset
        shape = self.shape(leaf.shape)
        strides = leaf.strides
        if strides is None:  # (cls, written out: once per leaf of every planned evaluation)
            return ("L", leaf.dtype.char, shape, None, -1)
        k = self.index.get(off)
        if k is None:
            k = self.index[off] = len(self.values)
            self.values.append(off)
        return ("L", leaf.dtype.char, shape, strides, k)


def walk_structure(roots: Sequence[Node], head: list[Any], offs: ViewOffsets | None = None
                   ) -> tuple[list[Any], dict[Any, int], list[Storage], list[np.generic]] | None:
    """The prefix code of :func:`structure_key` for any roots, after ``head``.

    Returns ``(tokens, slots, storages, scalars)`` (``slots`` maps each buffer
    and scalar node to its slot), or None for very large DAGs.  With
    ``offs``, the leaves' offsets go there instead of into the tokens (see
    :class:`ViewOffsets`).
    """
    toks = head
    storages: list[Storage] = []
    scalars: list[np.generic] = []
    slots: dict[Any, int] = {}
    try:
        for r in roots:
            _walk(r, toks, slots, storages, scalars, True, offs)
    except (_Uncacheable, RecursionError):
        return None
    return toks, slots, storages, scalars


def structure_entry(roots: Sequence[Node], out_shape: tuple[int, ...]
                    ) -> tuple[StructureEntry, list[Storage], list[np.generic]] | None:
    """The cached linearisation of elementwise ``roots`` into plain outputs, and its data.

    Returns ``(entry, storages, scalars)``: ``entry.program`` and
    ``entry.params`` are what :func:`linearize` would return with these
    bindings.  None when the expression is not cached (reductions, gathers,
    very large expressions).  A miss linearises once and remembers the result.

    One root with a structure signature (see :mod:`fuseloop.expr.nodes`) is
    looked up by the signature and the pattern of repeated operands, without a
    walk: the buffers and scalars are its operands, each at its first place.
    """
    if len(roots) == 1:
        root = roots[0]
        sig = root.sig or signature_of(root)
        operands = root.operands
        # (a signature always comes with its operands; reductions have one too)
        if sig and operands is not None and not root.fancy:
            # each operand's first place: which buffers and scalar nodes are the same
            # (by identity: neither defines ==)
            # (and the views' offsets: the entry's parameters hold them)
            key: tuple = (sig, out_shape, firsts(operands), root.offs)
            entry = structures.get(key)
            if entry is not None and not CHECK_STRUCTURE_CACHE:
                flat_entries[key[:2]] = entry
                storages, scalars = entry.take(operands)
                return entry, storages, scalars
            found = _signed_miss(key, entry, root, out_shape)
            if structures.get(key) is found[0]:  # (not when it could not be cached)
                flat_entries[key[:2]] = found[0]
            return found
    for r in roots:
        if r.fancy:
            return None
    try:
        key, storages, scalars = structure_key(roots, out_shape)
    except _Uncacheable:
        return None
    entry = structures.get(key)
    if entry is not None and not CHECK_STRUCTURE_CACHE:
        return entry, storages, scalars
    return _linearised(key, entry, roots, out_shape, storages, scalars)


def firsts(operands: tuple) -> tuple[int, ...]:
    """Each operand's first position among ``operands`` (by identity)."""
    if len(operands) <= 16:
        return tuple(map(operands.index, operands))
    # (linear: searching would cost a pass per operand)
    first: dict[int, int] = {}
    return tuple(map(first.setdefault, map(id, operands), itertools.count()))


_firsts = firsts  # (its former name)


def _signed_miss(key: tuple, entry: StructureEntry | None, root: Node,
                 out_shape: tuple[int, ...]
                 ) -> tuple[StructureEntry, list[Storage], list[np.generic]]:
    """:func:`structure_entry` by signature on a miss (or, checking, on a hit)."""
    operands = root.operands
    assert operands is not None
    # (the picker also checks that the operands repeat as in this structure (None if
    # not): evaluate.run_flat finds entries by signature and shape alone)
    take = operand_picker(operands, key[2])
    storages, scalars = take(operands)
    return _linearised(key, entry, [root], out_shape, storages, scalars, take)


def operand_picker(operands: tuple, firsts: tuple[int, ...]
                   ) -> Callable[[Sequence[Any]], Any]:
    """The picker (see :func:`_picker`) of the buffers and scalar values of an expression
    with these ``operands`` (buffers and scalar nodes) in walk order, each at its first
    place (``firsts``: :func:`firsts`), as a walk of it would list them."""
    at = [k for k, f in enumerate(firsts) if f == k]  # first appearances, in walk order
    # (generated once per structure, so a hit costs one call)
    return _picker(tuple(k for k in at if type(operands[k]) is Storage),
                   tuple(k for k in at if type(operands[k]) is not Storage),
                   tuple((k, f) for k, f in enumerate(firsts) if f != k))


_value_of = attrgetter("value")
_NO_GET = itemgetter(0)


def _picker(buf_at: tuple[int, ...], val_at: tuple[int, ...],
            repeats: tuple[tuple[int, int], ...]) -> Callable[[Sequence[Any]], Any]:
    """``take(operands) -> (buffers, scalar values)`` of a structure found by signature,
    or None when the operands do not repeat as ``repeats`` (pairs of positions that
    must hold the same object) says.

    A closure specialised to the counts: on the hot path of ``.eval()``, so it
    picks with ``itemgetter`` and ``map`` rather than comprehensions (a Python
    frame each before 3.12).
    """
    nb, nv, nr = len(buf_at), len(val_at), len(repeats)
    # (_NO_GET where the count is written out below: never called)
    b_get = itemgetter(*buf_at) if nb > 2 else _NO_GET
    v_get = itemgetter(*val_at) if nv > 2 else _NO_GET
    b0, b1 = (*buf_at, 0, 0)[:2]
    v0, v1 = (*val_at, 0, 0)[:2]
    # repeated positions and their first ones; more than two are compared as two tuples
    # in one C call (operands, Storage and Scalar, compare by identity, as ``is`` would)
    (r0, f0), (r1, f1) = (*repeats, (0, 0), (0, 0))[:2]
    r_get = itemgetter(*(k for k, _ in repeats)) if nr > 2 else _NO_GET
    f_get = itemgetter(*(f for _, f in repeats)) if nr > 2 else _NO_GET

    # (the common counts written out: a call of list() or map() costs as much again)
    def take(o: Sequence[Any]) -> tuple[list[Any], list[Any]] | None:
        if nr:
            if nr == 1:
                if o[r0] is not o[f0]:
                    return None
            elif nr == 2:
                if o[r0] is not o[f0] or o[r1] is not o[f1]:
                    return None
            elif r_get(o) != f_get(o):
                return None
        buffers = ([o[b0], o[b1]] if nb == 2 else [o[b0]] if nb == 1 else
                   [] if nb == 0 else [*b_get(o)])
        values = ([o[v0].value, o[v1].value] if nv == 2 else [o[v0].value] if nv == 1 else
                  [] if nv == 0 else [*map(_value_of, v_get(o))])
        return buffers, values

    return take


def _linearised(key: tuple, entry: StructureEntry | None, roots: Sequence[Node],
                out_shape: tuple[int, ...], storages: list[Storage], scalars: list[np.generic],
                take: Any = None) -> tuple[StructureEntry, list[Storage], list[np.generic]]:
    """:func:`structure_entry` on a miss (``entry`` None) or, checking, on a hit.

    ``take`` is set on a new entry before other threads can see it.
    """
    program, bindings = linearize(roots, out_shape, cache=False)
    same = (len(bindings.storages) == len(storages) and len(bindings.scalars) == len(scalars)
            and all(a is b for a, b in zip(bindings.storages, storages))
            and all(a is b for a, b in zip(bindings.scalars, scalars)))
    if entry is not None:  # checking
        # (repr: a NaN literal makes equal programs unequal under ==)
        assert same and repr(entry.program) == repr(program) and \
            list(entry.params) == bindings.params, (
                "structure cache hit differs from a fresh linearisation", key)
        return entry, storages, scalars
    fresh = StructureEntry(program, bindings.params, bindings.offset_slots or ())
    fresh.take = take
    if take is not None:
        fresh.offs = roots[0].offs
    if not same:  # never expected: the walks visit in the same order; do not cache
        return fresh, bindings.storages, bindings.scalars
    if len(key) > LARGE_TOKENS:  # (a long key and a large program: only so many kept)
        if _large[0] >= LARGE_MAX:
            return fresh, storages, scalars
        _large[0] += 1
    if len(structures) >= STRUCTURES_MAX:
        clear_structure_cache()
    return structures.setdefault(key, fresh), storages, scalars


def clear_structure_cache() -> None:
    structures.clear()
    flat_entries.clear()
    _large[0] = 0


from ..caches import register as _register_cache  # noqa: E402  (cache registry: fuseloop/caches.py)

_register_cache("expr.program.structures", clear_structure_cache, lambda: len(structures) + len(flat_entries), 2 * STRUCTURES_MAX)  # noqa: E501  (flat_entries: one per structure)
_register_cache("expr.program.scalar_tokens", _SCALAR_TOKENS.clear, lambda: len(_SCALAR_TOKENS), why="one per dtype")  # noqa: E501

# }}}


def collapse_groups(program: Program) -> None:
    """Kept for the cache module's call; dimensions are coalesced before linearising."""
    return None
