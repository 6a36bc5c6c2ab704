"""A split stencil's parts: row windows and the templates their expressions are made from.

Each part's stencil reads *row windows* (:class:`_ShiftedRows`), its own rows shifted by
a row offset along the split axis (the part itself at offset 0; a signed concatenation
of views of halo rows and its own rows otherwise, :func:`_signed`), so a part's run
plan is found by signature.  Parts after the first of a window structure make again
only the first's nodes that read a window (:class:`_Templates`); templates kept for
later steps (``exchange.PLANS``) make a part over concrete windows by moving the kept
expression onto the part's buffers (:func:`_moved`), without building its windows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..array import Array
from ..evaluate import _rebuild
from ..expr.nodes import (
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
    Storage,
    UserCall,
    signed,
)
from ..expr.views import concat_node


def _window(pieces: list[tuple[int, Array]], start: int, count: int) -> Node:
    """Rows ``start:start + count`` of the pieces ((first row, array), adjacent, in
    order), as one node: a piece's, a view of one or a concatenation of views (made
    here: the operators' slicing and concatenation checks cost more than the views)."""
    got = []
    for first, a in pieces:
        s, e = max(start, first), min(start + count, first + a.shape[0])
        if s < e:
            got.append((a, s - first, e - first))
    if len(got) == 1:
        return _row_view(*got[0])
    return _signed(concat_node([_row_view(a, s, e) for a, s, e in got], 0))


def _signed(node: Node) -> Node:
    """``node`` with a structure signature if it is a concatenation (they have none
    unless given one, ``expr.nodes``): its fields are what the structure key's walk
    writes for it (``expr.program._walk``), then its pieces'.  So a stencil's part
    reading a window finds its run plan by signature (``run_plans._signed_key``), not
    by walking its whole expression on every step: the parts' launches cost half."""
    if type(node) is Concat and not node.sig:
        node.sig, node.operands, node.offs = signed(["K", node.axis, node.shape, node.starts],
                                         list(node.pieces))
    return node


def _row_view(a: Array, s: int, e: int) -> Node:
    """Rows ``s:e`` of ``a`` as a node: a view of its buffer where ``a`` is one."""
    node = a._node
    if (s, e) == (0, a.shape[0]):
        return node
    if type(node) is not Leaf:
        return a[s:e]._node
    strides = node.view_strides()
    return Leaf(node.storage, node.dtype, (e - s, *node.shape[1:]), strides,
                node.offset + s * strides[0])


Window = Callable[[int], Array]


class _ShiftedRows:
    """A part's ``count`` rows shifted by ``dr`` (the window of its ``pieces``): called
    with ``dr``, an array (the part itself at 0); :meth:`node`, its node alone (all a
    substituted part needs).  A shift asked again is the same (the taps of one row
    offset, e.g. three of a 3x3 stencil's nine, share one concatenation)."""

    __slots__ = ("arrays", "count", "device", "nodes", "pieces")

    def __init__(self, pieces: list[tuple[int, Array]], count: int, device: Any) -> None:
        self.pieces, self.count, self.device = pieces, count, device
        self.nodes: dict[int, Node] = {}
        self.arrays: dict[int, Array] = {}

    def node(self, dr: int) -> Node:
        got = self.nodes.get(dr)
        if got is None:
            got = self.nodes[dr] = _window(self.pieces, dr, self.count)
        return got

    def __call__(self, dr: int) -> Array:
        got = self.arrays.get(dr)
        if got is None:
            node = self.node(dr)
            whole = next((a for _, a in self.pieces if a._node is node), None)
            got = self.arrays[dr] = whole if whole is not None else \
                Array._lazy(node, self.device)
        return got


class _Templates:
    """One split stencil's part expressions by the shape of their windows: a part whose
    windows have a built part's node types, shapes and dtypes gets that part's
    expression with its windows substituted (``evaluate._rebuild``: a walk of the
    built nodes), not built again through every operator; the middle parts (and with
    one row of halo, every part) of an evenly split array share one."""

    def __init__(self) -> None:
        # (windows, expression, the nodes reading a window children first: _reading)
        self.built: dict[tuple, tuple[list[Node], Node, list[Node] | None]] = {}
        self.counts = [0, 0]  # (built, substituted: see LAST_TEMPLATES)
        self.kept = False  # (kept for later calls: holds placeholders only, takes no more)
        #: kept only: by the pieces' leaves (:func:`_pieces_key`), the expression over
        #: placeholder buffers, ready to be moved onto a part's (:class:`_Mover`)
        self.by_buffer: dict[tuple, _Mover] = {}
        self.moved = 0  # (parts made by :meth:`_Mover.onto` in this call: LAST_MOVED)
        #: the last part's (template, the buffers it was moved onto), or (None, None)
        #: where it was not moved (what a step plan keeps: ``multi.steps``)
        self.last_moved: tuple[_Mover | None, list[Storage] | None] = (None, None)

    def part(self, apply: Callable[[Window, tuple[int, ...]], Array], window: _ShiftedRows,
             shifts: range, cen: tuple[int, ...], device: Any) -> Array:
        """``apply(window, cen)`` for a part on ``device``."""
        found = _pieces_key(window, shifts) if self.kept else None
        self.last_moved = (None, None)
        if found is not None:
            mover = self.by_buffer.get(found[0])
            if mover is not None:  # (the kept expression moved onto this part's buffers)
                self.counts[1] += 1
                self.moved += 1
                self.last_moved = (mover, found[1])
                return Array._lazy(mover.onto(found[1]), device)
        got = self._part(apply, window, shifts, cen, device)
        if found is not None and len(self.by_buffer) < BY_BUFFER_MAX:
            kept = _kept_by_buffer(got._node, found[1])
            if kept is not None:
                self.by_buffer[found[0]] = kept
        return got

    def _part(self, apply: Callable[[Window, tuple[int, ...]], Array], window: _ShiftedRows,
              shifts: range, cen: tuple[int, ...], device: Any) -> Array:
        wins = [window.node(dr) for dr in shifts]  # (nodes: no arrays made for them)
        key = tuple((type(w), w.shape, w.dtype, len(w.pieces) if type(w) is Concat else 0)
                    for w in wins)
        hit = self.built.get(key)
        if hit is not None:
            old, made, reading = hit
            node = _rebuild(made, {id(a): b for a, b in zip(old, wins)}, {}) \
                if reading is None else _rebuilt(made, reading, old, wins)
            # (only the windows' buffers may differ: anything else the template read
            # on its own device, e.g. an uploaded array, means building it afresh)
            if all(s.device is device for s in node.storages):
                self.counts[1] += 1
                return Array._lazy(node, device)
        got = apply(window, cen)
        self.counts[0] += 1
        if hit is None and not self.kept and len({id(w) for w in wins}) == len(wins):
            self.built[key] = (wins, got._node, _reading(got._node, wins))
        return got

    def detached(self) -> _Templates | None:
        """These templates over placeholder windows (leaves of a buffer that is never
        allocated) instead of this call's: kept for later calls (:data:`PLANS`), they
        hold no part's or halo's buffer.  None where an expression reads a buffer other
        than its windows' (it would be kept alive, and may be another call's data)."""
        out = _Templates()
        out.kept = True
        for key, (old, made, reading) in self.built.items():
            if not all(w.storages for w in old):  # (a lazy part reading no buffer)
                return None
            holders = [_placeholder(w) for w in old]
            node = _rebuild(made, {id(a): b for a, b in zip(old, holders)}, {}) \
                if reading is None else _rebuilt(made, reading, old, holders)
            if not node.storages <= frozenset(s for h in holders for s in h.storages):
                return None
            out.built[key] = (holders, node, _reading(node, holders))
        return out


def _placeholder(window: Node) -> Node:
    """A leaf of ``window``'s shape and dtype over a buffer that does not exist (only
    substituted, never read; on the window's device)."""
    device = next(iter(window.storages)).device  # (a window reads a part's rows)
    return Leaf(Storage(None, 0, device), window.dtype, window.shape)


def _kids(node: Node) -> tuple[Node, ...] | None:
    """``node``'s children (``()`` for leaves, scalars and indices), or None for a kind
    :func:`_rebuilt` does not make."""
    t = type(node)
    a: Any = node  # (narrowed by its type just above, as evaluate._rebuild's walk is)
    if t is Apply or t is UserCall:
        return tuple(a.args)
    if t is Gather:
        return (a.child, a.index)
    if t is Reduce or t is Remap:
        return (a.child,)
    if t is Concat:
        return tuple(a.pieces)
    return () if t in (Leaf, Scalar, Literal, Iota) else None


def _reading(root: Node, windows: list[Node]) -> list[Node] | None:
    """The nodes of ``root`` that read one of ``windows``, children first (what a part's
    substitution makes anew; the rest it shares), or None where one is of a kind
    :func:`_rebuilt` does not make (``evaluate._rebuild`` then walks it all)."""
    wins = {id(w) for w in windows}
    order: list[Node] = []
    reads: dict[int, bool] = {}

    def visit(node: Node) -> bool:
        key = id(node)
        if key in wins:
            return True
        known = reads.get(key)
        if known is not None:
            return known
        kids = _kids(node)
        if kids is None:
            raise _Unmade
        hit = False
        for kid in kids:
            hit = visit(kid) or hit
        reads[key] = hit
        if hit:
            order.append(node)
        return hit

    try:
        visit(root)
    except (_Unmade, RecursionError):
        return None
    return order


class _Unmade(Exception):
    pass


def _rebuilt(root: Node, reading: list[Node], old: list[Node], new: list[Node]) -> Node:
    """``root`` with ``new`` windows for ``old``: the nodes in ``reading`` made again
    over their new children (as ``evaluate._rebuild`` makes them), in that order."""
    made: dict[int, Node] = {id(o): n for o, n in zip(old, new)}
    get = made.get
    for node in reading:
        t = type(node)
        out: Node
        if t is Apply:
            a: Any = node
            out = Apply(a.op, tuple([get(id(c), c) for c in a.args]), a.loop, a.shape,
                        a.loop_key)
        elif t is UserCall:
            a = node
            out = UserCall(a.function, tuple([get(id(c), c) for c in a.args]), a.loop,
                           a.shape)
        elif t is Gather:
            a = node
            out = Gather(get(id(a.child), a.child), get(id(a.index), a.index), a.axis,
                         a.checked)
        elif t is Reduce:
            a = node
            out = Reduce(a.op, get(id(a.child), a.child), a.axes, a.dtype, a.shape)
        elif t is Remap:
            a = node
            out = Remap(get(id(a.child), a.child), a.shape, a.offsets, a.coeffs)
        else:
            a = node
            out = Concat(tuple([get(id(c), c) for c in a.pieces]), a.axis)
            if a.sig:
                out = _signed(out)
        made[id(node)] = out
    return made.get(id(root), root)


#: kept stencil templates make a part whose pieces (halo rows, its own rows) are buffers
#: by moving the kept expression onto them (:func:`_moved`: its nodes copied with the
#: buffers swapped, signatures kept), without building the part's windows; at most this
#: many piece layouts per kept stencil
BY_BUFFER_MAX = 16  # (per kept stencil: the partition fixes the few piece layouts)


def _pieces_key(window: _ShiftedRows, shifts: range) -> tuple[tuple, list[Storage]] | None:
    """(the layout of the window's pieces: rows, leaf fields, which share a buffer;
    their distinct buffers in order), or None where a piece is not a buffer (lazy)."""
    storages: list[Storage] = []
    fields = []
    for first, a in window.pieces:
        node = a._node
        if type(node) is not Leaf:
            return None
        s = node.storage
        i = 0
        while i < len(storages) and storages[i] is not s:  # (a window has three pieces)
            i += 1
        if i == len(storages):
            storages.append(s)
        fields.append((first, node.leaf_token(), i, s.device.index))
    return (window.count, shifts.start, shifts.stop, tuple(fields)), storages


def _kept_by_buffer(root: Node, storages: list[Storage]) -> _Mover | None:
    """``root`` (a part's expression over its pieces' ``storages``) moved onto
    placeholder buffers, for :meth:`_Templates.part`; None where it reads another buffer
    or a node of a kind :func:`_moved` does not copy."""
    if not root.storages or not root.storages <= frozenset(storages):
        return None
    order: list[Node] = []
    seen: set[int] = set()

    def visit(node: Node) -> None:
        if id(node) in seen or not node.storages:
            return
        seen.add(id(node))
        kids = _kids(node)
        if kids is None or type(node) not in _COPY:
            raise _Unmade
        for kid in kids:
            visit(kid)
        order.append(node)

    try:
        visit(root)
    except (_Unmade, RecursionError):
        return None
    holders = [Storage(None, 0, s.device, s.constant) for s in storages]
    try:
        return _Mover(holders, _moved(order, dict(zip(storages, holders))))
    except AttributeError:  # (a slot its constructor left unset: not copied)
        return None


class _Mover:
    """A kept part expression over placeholder buffers (``holders``), with what moving
    it onto a step's buffers needs worked out once (:meth:`onto`): per node, in order
    (children first), where its children lie (a copy made before it, or a node reading
    no buffer, shared), and which of the expression's few distinct buffer sets and
    operand tuples it has, as holder positions.  A step then makes each distinct set and
    tuple once and each node by its kind's copier, with no look-up by identity."""

    __slots__ = ("holders", "operand_tuples", "root", "shared", "steps", "storage_sets")

    def __init__(self, holders: list[Storage], order: list[Node]) -> None:
        self.holders, self.root = holders, order[-1]
        slot = {id(h): i for i, h in enumerate(holders)}
        shared: list[Node] = []
        kids_of = [_kids(n) or () for n in order]
        copied = {id(n) for n in order}
        for kids in kids_of:
            for kid in kids:
                if id(kid) not in copied and all(kid is not s for s in shared):
                    shared.append(kid)
        env = {id(n): i for i, n in enumerate(shared)}
        env.update((id(n), len(shared) + i) for i, n in enumerate(order))
        sets: dict[int, int] = {}
        tuples: dict[int, int] = {}
        self.storage_sets: list[tuple[int, ...]] = []
        self.operand_tuples: list[tuple[tuple[int, Any], ...]] = []
        steps: list[tuple[type, Callable[[Any, Any], None], Node, tuple[int, ...], int, int]]
        steps = []
        for node, kids in zip(order, kids_of):
            t = type(node)
            if t is Leaf:
                leaf: Any = node
                steps.append((t, _COPY[t], node, (slot[id(leaf.storage)],), 0, -1))
                continue
            si = sets.get(id(node.storages))
            if si is None:
                si = sets[id(node.storages)] = len(self.storage_sets)
                self.storage_sets.append(tuple(slot[id(s)] for s in node.storages))
            oi = -1
            if node.operands:
                oi = tuples.get(id(node.operands), -1)
                if oi < 0:
                    oi = tuples[id(node.operands)] = len(self.operand_tuples)
                    self.operand_tuples.append(tuple((slot.get(id(o), -1), o)
                                                     for o in node.operands))
            steps.append((t, _COPY[t], node, tuple(env[id(k)] for k in kids), si, oi))
        self.shared, self.steps = shared, steps

    def onto(self, storages: list[Storage]) -> Node:
        """The expression with ``storages`` (in the holders' order) for the holders:
        its nodes copied (the same structure, so the same signatures), its root."""
        sets = [frozenset(map(storages.__getitem__, s)) for s in self.storage_sets]
        tuples = [tuple([storages[i] if i >= 0 else o for i, o in t])
                  for t in self.operand_tuples]
        leaves = [((s,), frozenset((s,))) for s in storages]
        env: list[Any] = self.shared.copy()
        at = env.__getitem__
        new: Any = None
        for t, copy, node, kids, si, oi in self.steps:
            new = _new(t)
            copy(node, new)
            if t is Leaf:
                new.storage = storages[kids[0]]
                new.operands, new.storages = leaves[kids[0]]
            else:
                if t is Apply or t is UserCall:
                    new.args = tuple(map(at, kids))
                elif t is Concat:
                    new.pieces = tuple(map(at, kids))
                elif t is Gather:
                    new.child, new.index = env[kids[0]], env[kids[1]]
                else:
                    new.child = env[kids[0]]
                new.storages = sets[si]
                if oi >= 0:
                    new.operands = tuples[oi]
            env.append(new)
        return new


# How :func:`_moved` copies a node of each kind: every slot assigned, written out per
# kind (a loop of ``setattr(new, n, getattr(node, n))`` over the names cost five times
# as much; a kept stencil's part copies 14 nodes a step).  Each copier lists the slots it
# copies: a kind whose slots differ from them (a slot added to the node class) is not
# copied (its parts are built from windows and substituted).

def _copy_leaf(node: Any, new: Any) -> None:
    new.offset, new.operands, new.sig, new.offs = node.offset, node.operands, node.sig, \
        node.offs
    new.storage, new.strides, new.token = node.storage, node.strides, node.token
    new.views = None  # (a copy's own views: none yet)
    new.dtype, new.shape, new.storages = node.dtype, node.shape, node.storages


def _copy_apply(node: Any, new: Any) -> None:
    new.args, new.fancy, new.loop, new.loop_key = node.args, node.fancy, node.loop, \
        node.loop_key
    new.op, new.operands, new.sig, new.offs = node.op, node.operands, node.sig, node.offs
    new.dtype, new.shape, new.storages = node.dtype, node.shape, node.storages


def _copy_user_call(node: Any, new: Any) -> None:
    new.function = node.function
    _copy_apply(node, new)


def _copy_reduce(node: Any, new: Any) -> None:
    new.axes, new.child, new.op = node.axes, node.child, node.op
    new.operands, new.sig, new.offs = node.operands, node.sig, node.offs
    new.dtype, new.shape, new.storages = node.dtype, node.shape, node.storages


def _copy_remap(node: Any, new: Any) -> None:
    new.child, new.coeffs, new.offsets = node.child, node.coeffs, node.offsets
    new.operands, new.sig, new.offs = node.operands, node.sig, node.offs
    new.dtype, new.shape, new.storages = node.dtype, node.shape, node.storages


def _copy_gather(node: Any, new: Any) -> None:
    new.axis, new.checked, new.child, new.index = node.axis, node.checked, node.child, \
        node.index
    new.operands, new.sig, new.offs = node.operands, node.sig, node.offs
    new.dtype, new.shape, new.storages = node.dtype, node.shape, node.storages


def _copy_concat(node: Any, new: Any) -> None:
    new.axis, new.fancy, new.operands = node.axis, node.fancy, node.operands
    new.pieces, new.sig, new.starts = node.pieces, node.sig, node.starts
    new.offs = node.offs
    new.dtype, new.shape, new.storages = node.dtype, node.shape, node.storages


_SHARED = ("offs", "operands", "sig", "dtype", "shape", "storages")
_COPIERS: dict[type, tuple[Callable[[Any, Any], None], tuple[str, ...]]] = {
    Leaf: (_copy_leaf, ("offset", "storage", "strides", "token", "views", *_SHARED)),
    # (``args`` is read whole and written to its slot ``_args``; ``later`` is only read
    # while ``_args`` is unset, which a copy's is not)
    Apply: (_copy_apply, ("_args", "later", "fancy", "loop", "loop_key", "op", *_SHARED)),
    UserCall: (_copy_user_call, ("function", "_args", "later", "fancy", "loop", "loop_key",
                                 "op", *_SHARED)),
    Reduce: (_copy_reduce, ("axes", "child", "op", *_SHARED)),
    Remap: (_copy_remap, ("child", "coeffs", "offsets", *_SHARED)),
    Gather: (_copy_gather, ("axis", "checked", "child", "index", *_SHARED)),
    Concat: (_copy_concat, ("axis", "fancy", "pieces", "starts", *_SHARED)),
}


def _slots(cls: type) -> set[str]:
    return {n for k in cls.__mro__ for n in getattr(k, "__slots__", ()) if n != "__weakref__"}


_COPY: dict[type, Callable[[Any, Any], None]] = {
    cls: copy for cls, (copy, names) in _COPIERS.items() if _slots(cls) == set(names)}
_new = object.__new__


def _moved(order: list[Node], buffers: dict[Storage, Storage]) -> list[Node]:
    """The nodes of ``order`` (children first, each reading a buffer) copied with the
    buffers ``buffers`` maps swapped in (their children the copies): the same
    structure, so the same signatures; operands and buffer sets mapped (the mapping
    is one to one, so which operands repeat is unchanged).  The copies, in order."""
    made: dict[int, Node] = {}
    get = made.get
    # (by the template's own: its nodes share buffer sets and operand tuples)
    sets: dict[int, Any] = {}
    out = []
    for node in order:
        t = type(node)
        new: Any = _new(t)
        _COPY[t](node, new)
        if t is Leaf:
            s = buffers[new.storage]
            one = sets.get(id(s))
            if one is None:
                one = sets[id(s)] = ((s,), frozenset((s,)))
            new.storage, (new.operands, new.storages) = s, one
        else:
            if t is Apply or t is UserCall:
                new.args = tuple([get(id(c), c) for c in new.args])
            elif t is Concat:
                new.pieces = tuple([get(id(c), c) for c in new.pieces])
            else:
                new.child = get(id(new.child), new.child)
                if t is Gather:
                    new.index = get(id(new.index), new.index)
            old = node.storages
            got = sets.get(id(old))
            if got is None:
                got = sets[id(old)] = frozenset([buffers.get(s, s) for s in old])
            new.storages = got
            ops = node.operands
            if ops:
                got = sets.get(id(ops))
                if got is None:
                    got = sets[id(ops)] = tuple([buffers.get(o, o) for o in ops])
                new.operands = got
        made[id(node)] = new
        out.append(new)
    return out
