"""Lower a linearised program to one Loopy kernel.

The output is traversed by the flat iname ``i`` (or, when reductions are
computed once per row, by ``i`` over rows and ``e`` over the elements of a
row); reduction ``rid`` loops over ``j<rid>``.  Every entry of the program
becomes a pymbolic expression at its symbolic index (see
:mod:`fuseloop.expr.program`); entries used more than once, reductions, and
very deep trees become private temporaries.  Sizes, strides and offsets are
kernel arguments (``p<slot>``), so one kernel serves every size of a structure.
Recipes later split and tag the inames; one with a ``concat_chunk`` gets a
concatenation's pieces as loops of their own (see :func:`lower_program`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import lp, prim
from ..dtypes import kernel_dtype
from ..expr.ir import ELEMENTWISE_KINDS, LEAF_KINDS
from ..expr.program import Program
from ..passes.outputs import collect_root_dims, walks_columns
from .pieces import FLAT_INAME, live_entries, lower_pieces, piece_loops
from .roles import kernel_roles, tag_roles
from .scalar_ops import Helper, is_direct, make_helper
from .sparse import lower_sparse
from .stores import emit_outputs
from .user_calls import call_args, input_arg, user_call

if TYPE_CHECKING:
    from .callables import HelperCallable

ELEMENT_INAME = "e"
# Loopy's bounds check skipped, not only made a warning (False): its isl work on every
# access was a sixth of Loopy's scheduling time for a 200-operation chain
NO_BOUNDS_CHECK = "no_check"
_MAX_INLINE_DEPTH = 24
_INDEX_CHARS = "lq"  # gathered index values are computed in 64 bits


def _checks_a_gather(c: Any) -> bool:
    """Whether index component ``c`` has a bounds-checked gathered index in it."""
    if not isinstance(c, tuple):
        return False
    if c[0] == "g":
        return bool(c[3])
    if c[0] == "k":
        return _checks_a_gather(c[1])
    if c[0] == "a":
        return any(_checks_a_gather(sub) for _, sub in c[2])
    return False


def _helper_callable(name: str, param_dtypes: tuple, result_dtype: np.dtype,
                     source: str) -> HelperCallable:
    from .callables import HelperCallable  # (Loopy's class: loaded on a cache miss only)

    return HelperCallable(name, param_dtypes, result_dtype, source)


def __getattr__(name: str) -> Any:
    # HelperCallable lived here; it moved so that importing this module needs no Loopy
    if name == "HelperCallable":
        from .callables import HelperCallable

        return HelperCallable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class LoweredKernel:
    t_unit: lp.TranslationUnit
    arg_names: list[str]  # kernel argument order


def _p(ref: Any) -> prim.Variable:
    return prim.Variable(f"p{ref[1]}")


def _unflatten(flat: Any, sizes: list[Any]) -> list[Any]:
    """Indices along dimensions of ``sizes`` (C order) of a non-negative flat index."""
    out = []
    n = len(sizes)
    for d in range(n):
        stride = None
        for s in sizes[d + 1:]:
            stride = s if stride is None else stride * s
        # indices are never negative: C's / and % need no floor correction
        idx = flat if stride is None else prim.Variable("fl_idx_div")(flat, stride)
        if d > 0:
            idx = prim.Variable("fl_idx_mod")(idx, sizes[d])
        out.append(idx)
    return out


class _Lowering:
    def __init__(self, program: Program, index_dtype: np.dtype,
                 user_functions: dict[str, Any]) -> None:
        self.program = program
        self.index_dtype = index_dtype
        self.user_functions = user_functions
        self.helpers: dict[str, Helper] = {}
        self.callables: dict[str, HelperCallable] = {}
        self.instructions: list[Any] = []
        self.temporaries: list[Any] = []
        self.temp_names: set[str] = set()
        self.domains: list[str] = []
        self.params: set[int] = set()
        self.inputs: dict[int, np.dtype] = {}
        self.scalar_args: dict[int, np.dtype] = {}
        self.has_gather = False
        self.root_idx: dict[int, tuple[Any, frozenset]] = {}
        self.red_idx: dict[tuple[int, int], tuple[Any, frozenset]] = {}
        self.red_inames: dict[int, frozenset] = {}  # rid -> inames of its position
        self.exprs: list[Any] = []
        self.inames: list[frozenset] = []
        self.dtypes: list[Any] = []  # np.dtype; None outside the current piece's loop
        self.insn_of: dict[int, str] = {}  # entry -> instruction computing its temporary
        self.deps: list[frozenset] = []  # instruction ids each entry's value needs
        self.extra_deps: set[str] = set()
        # the flat loop: its iname, the inames every instruction sits in, the suffix of
        # instruction ids (per-piece passes, see lower_pieces), the concatenation resolved
        # in this pass ((comp, bounds), piece number, (start, length) of the piece) and
        # the entries the pass computes (None: all)
        self.flat = FLAT_INAME
        self.base: frozenset = frozenset({FLAT_INAME})
        self.sfx = ""
        self.resolved: Any = None
        self.live: set[int] | None = None

    def temporary(self, name: str, dtype: Any) -> None:
        if name not in self.temp_names:
            self.temp_names.add(name)
            self.temporaries.append(lp.TemporaryVariable(
                name, dtype, shape=(), address_space=lp.AddressSpace.PRIVATE))

    def start_pass(self, piece: int, resolved: Any, iname: str, base: frozenset) -> None:
        """Forget the values of a previous pass; lower the program again for one piece."""
        self.flat, self.base, self.sfx = iname, base, f"_k{piece}"
        self.resolved = resolved
        self.root_idx, self.red_idx, self.red_inames = {}, {}, {}
        self.exprs, self.inames, self.dtypes, self.deps = [], [], [], []
        self.live = live_entries(self.program, resolved)

    # {{{ index expressions

    def size(self, s: Any) -> Any:
        if isinstance(s, tuple):
            self.params.add(s[1])
            return _p(s)
        return s

    def setup_root(self) -> None:
        prog = self.program
        dims = [d for d, s in enumerate(prog.root_sizes) if s != 1]
        if prog.row_dims is None:
            groups = [(self.flat, dims)]
        else:
            groups = [(FLAT_INAME, [d for d in dims if d in prog.row_dims]),
                      (ELEMENT_INAME, [d for d in dims if d not in prog.row_dims])]
        for iname, ds in groups:
            if iname == FLAT_INAME or iname == ELEMENT_INAME:  # (a piece's loop: its own domain)
                bound = "N" if iname == FLAT_INAME else "NE"
                self.domains.append(f"[{bound}] -> {{[{iname}]: 0 <= {iname} < {bound}}}")
            sizes = [self.size(prog.root_sizes[d]) if k else _p(prog.root_sizes[d])
                     for k, d in enumerate(ds)]
            idx = _unflatten(prim.Variable(iname), sizes) if len(ds) > 1 else \
                [prim.Variable(iname)] * len(ds)
            for d, e in zip(ds, idx):
                self.root_idx[d] = (e, frozenset({iname}))

    def comp(self, c: Any) -> tuple[Any, frozenset]:
        """Expression and inames of one index component."""
        if c == 0:
            return 0, frozenset()
        kind = c[0]
        if kind == "r":
            return self.root_idx[c[1]]
        if kind == "j":
            return self.red_idx[(c[1], c[2])]
        if kind == "g":
            ref, length, checked = c[1], c[2], c[3]
            return (self.gather_index(ref, length, checked), self.inames[ref])
        if kind == "k":  # a position within one piece of a concatenation, clamped
            pos, names = self.comp(c[1])
            if self.resolved is not None and c == self.resolved[2]:
                # in the loop over this very piece: the position is inside it
                return (pos if c[2] == 0 else pos - self.size(c[2])), names
            if c[2] != 0:
                pos = prim.Variable("max")(pos - self.size(c[2]), 0)
            if c[3] is not None:
                pos = prim.Variable("min")(pos, self.size(c[3]) - 1)
            return pos, names
        assert kind == "a"
        expr: Any = c[1]
        names = frozenset()
        for coef, sub in c[2]:
            e, n = self.comp(sub)
            expr = expr + coef * e if expr != 0 else coef * e
            names |= n
        return expr, names

    def address(self, at: tuple, kinds: Any, offset: Any) -> tuple[Any, frozenset]:
        if kinds == "c":
            # C-contiguous in the output's own order: the output position itself
            addr, names = self.contiguous_address(at)
            return (addr if offset == 0 else addr + self.size(offset)), names
        terms = []
        names = frozenset()
        for c, k in zip(at, kinds):
            if c == 0:
                continue
            if k == 0:
                # a stride-0 axis (unit or broadcast) reads no position, but a gathered
                # index along it is still checked against the axis length (numpy)
                if _checks_a_gather(c):
                    # the check only: the load does not wait for it (it reads no position)
                    waits = set(self.extra_deps)
                    self.comp(c)
                    self.extra_deps = waits
                continue
            e, n = self.comp(c)
            names |= n
            terms.append(e if k == 1 else self.size(k) * e)
        if offset != 0:
            terms.append(self.size(offset))
        if not terms:
            return 0, names
        return (terms[0] if len(terms) == 1 else prim.Sum(tuple(terms))), names

    def piece_address(self, at: tuple, kinds: Any, offset: Any) -> tuple[Any, frozenset] | None:
        """In the loop over a piece of a concatenation, the address of a load that walks
        the piece in the flat loop's order (a C-contiguous piece at the output's own
        index): the flat index minus where the piece starts, so the load is contiguous.
        None for other loads."""
        if self.resolved is None or kinds == "c":
            return None
        kc, lo, cstrides = self.resolved[2], self.resolved[3], self.resolved[4]
        d0 = self.resolved[0][0][1]  # the joined output dimension
        sizes = self.program.root_sizes
        shift = len(sizes) - len(at)  # a value broadcast to more dimensions
        for d in range(len(sizes)):
            c, kind = (at[d - shift], kinds[d - shift]) if d >= shift else (0, 0)
            if d == d0:
                # the piece's position along the joined dimension (a piece of length 1
                # is read at 0: in its loop, any value constant along d0 has that form)
                if c != kc or (c != 0 and kind != cstrides[d]):
                    return None
            elif c == 0:
                if sizes[d] != 1:  # broadcast along an output dimension
                    return None
            elif c != ("r", d) or kind != cstrides[d]:
                return None
        addr: Any = prim.Variable(self.flat)
        if lo != 0:
            addr = addr - self.size(lo)
        if offset != 0:
            addr = addr + self.size(offset)
        return addr, frozenset({self.flat})

    def contiguous_address(self, root_at: tuple) -> tuple[Any, frozenset]:
        """C-order position of the root index in a contiguous output."""
        dims = [d for d, c in enumerate(root_at) if c != 0]
        if self.program.row_dims is None:
            # the flat loop enumerates the output in C order
            return prim.Variable(self.flat), frozenset({self.flat} if dims else ())
        return self.c_order_position(dims)

    def c_order_position(self, dims: list[int]) -> tuple[Any, frozenset]:
        """C-order position of the root index over its non-unit dimensions ``dims``."""
        terms = []
        names: frozenset = frozenset()
        stride: Any = 1
        for d in reversed(dims):
            e, n = self.root_idx[d]
            names |= n
            terms.append(e if stride == 1 else stride * e)
            stride = self.size(self.program.root_sizes[d]) if stride == 1 else \
                stride * self.size(self.program.root_sizes[d])
        if not terms:
            return 0, names
        return (terms[0] if len(terms) == 1 else prim.Sum(tuple(terms))), names

    def gather_index(self, ref: int, length: Any, checked: bool) -> Any:
        n = self.size(length)
        if not checked:
            return self.cast_expr(ref, self.index_dtype)
        # one temporary and check per index value *and* axis length: an index array
        # used for two axes (``m[i, i]``) is checked against each of them
        name = f"gi{ref}" + (f"p{length[1]}" if isinstance(length, tuple) else f"n{length}") \
            + self.sfx
        if name not in self.temp_names:
            self.has_gather = True
            raw = self.cast_expr(ref, np.dtype(np.int64))
            # a function, not an if-expression: Loopy's bounds check reads the condition
            # of an if as an affine set and fails on the cast of an affine index (arange)
            wrapped = prim.Variable("fl_idx_wrap")(raw, n)
            within = self.inames[ref] | self.base
            self.temporary(name, np.int64)
            self.instructions.append(lp.Assignment(
                prim.Variable(name), wrapped, id=f"calc_{name}", within_inames=within,
                depends_on=self.deps[ref]))
            # (loopy annotates predicates as strings; it takes expressions as well)
            bad: Any = prim.LogicalOr((prim.Comparison(prim.Variable(name), "<", 0),
                                       prim.Comparison(prim.Variable(name), ">=", n)))
            # any offending index is reported: the check's code (1, or the source axis
            # plus 2), the value and the axis length; racing writers all write offenders
            for k, value in enumerate((int(checked), raw, n)):
                self.instructions.append(lp.Assignment(
                    prim.Variable("err")[k], value, id=f"check{k}_{name}",
                    within_inames=within, predicates=frozenset({bad}),
                    depends_on=frozenset({f"calc_{name}"}),
                    # the flag writes of several gathers need no order among themselves
                    no_sync_with=frozenset({("check*", "any")})))
            self.extra_deps.add(f"calc_{name}")
        # an offending index (reported) reads at 0: min(max()) of longs defeated PoCL's SIMD
        return prim.Variable("fl_idx_in")(prim.Variable(name), n)

    # }}}

    def index_helpers(self) -> None:
        t = "long" if self.index_dtype.itemsize == 8 else "int"
        for name, op in (("fl_idx_div", "/"), ("fl_idx_mod", "%")):
            src = f"static inline {t} {name}({t} a, {t} b) {{ return a {op} b; }}\n"
            self.callables[name] = _helper_callable(name, (self.index_dtype, self.index_dtype),
                                                    self.index_dtype, src)
        # a gathered index counts from the end when negative (64 bits: see gather_index)
        i64 = np.dtype(np.int64)
        helpers = {"fl_idx_wrap": "a < 0 ? a + n : a", "fl_idx_in": "(ulong) a < n ? a : 0"}
        for name, body in helpers.items():
            src = f"static inline long {name}(long a, long n) {{ return {body}; }}\n"
            self.callables[name] = _helper_callable(name, (i64, i64), i64, src)

    def helper_call(self, op: str, loop: tuple[np.dtype, ...], args: list[Any]) -> Any:
        h = self.helpers.get(op + repr(loop))
        if h is None:
            h = self.helpers[op + repr(loop)] = make_helper(op, loop)
            self.callables[h.name] = _helper_callable(h.name, loop[:-1], loop[-1], h.source)
        return prim.Variable(h.name)(*args)

    def cast_expr(self, ref: int, to: np.dtype) -> Any:
        frm = self.dtypes[ref]
        if frm == to:
            return self.exprs[ref]
        return self.helper_call("cast", (frm, to), [self.exprs[ref]])

    def lower_leaf(self, e: Any) -> tuple[Any, np.dtype, frozenset]:
        """Value, dtype and address inames of a leaf entry (kind in ``LEAF_KINDS``);
        records the input array or scalar argument the leaf reads."""
        kind = e.kind
        dt = np.dtype(e.dtype)
        if kind == "sparse":  # (a temporary written before, entry number len(exprs))
            return lower_sparse(self, e, len(self.exprs))
        if kind == "load":
            self.inputs[e.slot] = dt
            addr, names = (self.piece_address(e.at, e.strides, e.offset)
                           or self.address(e.at, e.strides, e.offset))
            return prim.Variable(f"in{e.slot}")[addr], dt, names
        if kind == "ptr":
            # the first element pointed at, as Loopy sees it: the user function's
            # callable passes its address (see lower/callables.py)
            self.inputs[e.slot] = dt
            off = self.size(e.offset)
            return prim.Variable(f"in{e.slot}")[off], dt, frozenset()
        if kind == "cmem":  # a marker (see lower_program): no value
            return kernel_dtype(dt).type(0), dt, frozenset()
        if kind == "arg":
            self.scalar_args[e.slot] = dt
            return prim.Variable(f"s{e.slot}"), dt, frozenset()
        if kind == "lit":
            return kernel_dtype(dt).type(e.value), dt, frozenset()
        assert kind == "iota", kind
        addr, names = self.address(e.at, e.strides, e.offset)
        value = addr if dt == self.index_dtype else lp.TypeCast(kernel_dtype(dt), addr)
        return value, dt, names

    def count_uses(self) -> Counter[int]:
        """How often each live entry is read (an output counts as a read)."""
        live = self.live
        uses: Counter[int] = Counter()
        e: Any  # an Entry, read by its kind tag (mypy cannot narrow the union through it)
        for ref, e in enumerate(self.program.entries):
            if live is not None and ref not in live:
                continue
            kind = e.kind
            if kind in ELEMENTWISE_KINDS:
                uses.update(e.refs)
            elif kind == "reduce":
                uses[e.child] += 1
            elif kind == "gather":
                uses[e.index] += 2
                uses[e.child] += 1
            elif kind == "concat":
                uses.update(self.pieces_read(e))
        uses.update(self.program.outputs)
        return uses

    def run(self) -> None:
        entries = self.program.entries
        live = self.live
        uses = self.count_uses()
        e: Any  # an Entry, read by its kind tag (mypy cannot narrow the union through it)
        depth: list[int] = []
        for ref, e in enumerate(entries):
            if live is not None and ref not in live:  # not computed in this piece's loop
                depth.append(0)
                self.exprs.append(None)
                self.dtypes.append(None)
                self.inames.append(frozenset())
                self.deps.append(frozenset())
                continue
            self.extra_deps = set()
            kind = e.kind
            names: frozenset = frozenset()
            deps: frozenset = frozenset()
            force_temp = False
            if kind in LEAF_KINDS:
                value, dt, names = self.lower_leaf(e)
            elif kind in ELEMENTWISE_KINDS:
                refs = e.refs
                loop = tuple(np.dtype(n) for n in e.loop)
                dt = loop[-1]
                args = call_args(self, refs, loop)
                for r in refs:
                    names |= self.inames[r]
                    deps |= self.deps[r]
                value = self.elementwise(kind, e.name if kind == "op" else e.key, loop, args, refs)
            elif kind == "reduce":
                value, dt, names, deps = self.reduce(ref, e)
                force_temp = True
            elif kind == "concat":
                refs = self.pieces_read(e)
                for r in refs:
                    names |= self.inames[r]
                    deps |= self.deps[r]
                dt = self.dtypes[refs[0]]
                if len(refs) == 1:  # this pass's piece: no selection
                    value = self.exprs[refs[0]]
                else:
                    pos, pnames = self.comp(e.comp)
                    names |= pnames
                    value = _select(pos, [self.size(b) for b in e.bounds],
                                    [self.exprs[r] for r in refs])
            else:
                assert kind == "gather"
                iref, cref = e.index, e.child
                dt = self.dtypes[cref]
                value = self.exprs[cref]
                names = self.inames[cref] | self.inames[iref]
                deps = self.deps[cref] | self.deps[iref]
            deps |= frozenset(self.extra_deps)
            d = 1 + max((depth[r] for r in e.refs), default=0) if kind in ELEMENTWISE_KINDS \
                else 0
            self.dtypes.append(dt)
            self.inames.append(names)
            if force_temp or ((uses[ref] > 1 or d > _MAX_INLINE_DEPTH)
                              and kind not in ("arg", "lit", "ptr")):
                d = 0
                tmp = f"t{ref}{self.sfx}"
                self.temporary(tmp, kernel_dtype(dt))
                # every instruction sits in the outer loop: recipes map it to groups
                self.instructions.append(lp.Assignment(
                    prim.Variable(tmp), value, id=f"calc_{tmp}",
                    within_inames=names | self.base, depends_on=deps))
                value = prim.Variable(tmp)
                deps = frozenset({f"calc_{tmp}"})
            depth.append(d)
            self.exprs.append(value)
            self.deps.append(deps)

    def pieces_read(self, e: Any) -> tuple[int, ...]:
        """The pieces of concat entry ``e`` that this pass reads (one in a piece's loop)."""
        if self.resolved is not None and (e.comp, e.bounds) == self.resolved[0]:
            return (e.refs[self.resolved[1]],)
        return e.refs

    def elementwise(self, kind: str, op_name: str, loop: tuple[np.dtype, ...],
                    args: list[Any], refs: tuple[int, ...] = ()) -> Any:
        if kind == "call":
            return user_call(self, self.user_functions[op_name], loop, args, refs)
        if is_direct(op_name, loop):
            a = args[0]
            if op_name == "add":
                return prim.Sum((a, args[1]))
            if op_name == "multiply":
                return prim.Product((a, args[1]))
            if op_name == "subtract":
                return prim.Sum((a, prim.Product((-1, args[1]))))
            if op_name == "negative":
                return prim.Product((-1, a))
            return prim.Quotient(a, args[1])
        return self.helper_call(op_name, loop, args)

    def reduce(self, ref: int, e: Any) -> tuple[Any, np.dtype, frozenset, frozenset]:
        from .reductions import neutral_value, reduction_operation  # (Loopy's classes)

        op, rid, cref, total, chunk = e.op, e.rid, e.child, e.total, e.chunk
        dt = np.dtype(e.dtype)
        # the reduction's own loop was set up before its child was lowered
        names = self.red_inames[rid]
        jname = f"j{rid}"
        child = self.cast_expr(cref, dt)
        if chunk is not None and not chunk[2]:
            g, _ = self.root_idx[chunk[1]]
            flat = g * self.size(chunk[0]) + prim.Variable(jname)
            child = prim.If(prim.Comparison(flat, "<", self.size(total)), child,
                            neutral_value(op, kernel_dtype(dt)))
        value = lp.Reduction(reduction_operation(op, dt), (jname,), child)
        return value, dt, names, self.deps[cref]

    def prepare_reductions(self) -> None:
        """Create each reduction's loop before any entry is lowered.

        A reduction's child is linearised (and so lowered) before the reduction
        entry itself, but its indices refer to the reduction's loop.
        """
        prog = self.program
        e: Any  # an Entry, read by its kind tag
        for e in prog.entries:
            if e.kind != "reduce":
                continue
            rid, at, sizes, total, chunk = e.rid, e.at, e.sizes, e.total, e.chunk
            jname = f"j{rid}"
            names: frozenset = frozenset()
            for c in at:
                if c != 0:
                    names |= self._static_inames(c)
            names |= self.base
            self.red_inames[rid] = names
            size_exprs = [self.size(s) if k else _p(s) for k, s in enumerate(sizes)]
            if chunk is not None:
                # first stage of a two-stage reduction: piece g of the reduced range
                p_chunk = chunk[0][1]
                self.params.add(p_chunk)
                self.domains.append(f"[p{p_chunk}] -> {{[{jname}]: 0 <= {jname} < p{p_chunk}}}")
                g, _ = self.root_idx[chunk[1]]
                flat: Any = g * _p(chunk[0]) + prim.Variable(jname)
                if not chunk[2]:
                    # the padded tail of the last piece reads a valid address
                    flat = prim.Variable("min")(flat, self.size(total) - 1)
            else:
                self.size(total)
                self.domains.append(f"[p{total[1]}] -> {{[{jname}]: 0 <= {jname} < "
                                    f"p{total[1]}}}")
                flat = prim.Variable(jname)
            idx = _unflatten(flat, size_exprs) if len(sizes) > 1 else [flat] * len(sizes)
            for k, x in enumerate(idx):
                self.red_idx[(rid, k)] = (x, names | {jname})

    def _static_inames(self, c: Any) -> frozenset:
        kind = c[0]
        if kind == "r":
            return self.root_idx[c[1]][1]
        if kind == "j":
            return self.red_inames[c[1]] | {f"j{c[1]}"}
        if kind == "a":
            out: frozenset = frozenset()
            for _, sub in c[2]:
                out |= self._static_inames(sub)
            return out
        if kind == "k":
            return self._static_inames(c[1])
        # a gathered index: the inames of the index value's own position
        return self._entry_inames(c[1])

    def _entry_inames(self, ref: int) -> frozenset:
        e: Any = self.program.entries[ref]
        out: frozenset = frozenset()
        kind = e.kind
        if kind in ("load", "iota"):
            for c, k in zip(e.at, e.strides):
                if c != 0 and k != 0:
                    out |= self._static_inames(c)
        elif kind == "sparse":
            out = self._static_inames(e.at[0]) if e.at[0] != 0 else out
        elif kind in ELEMENTWISE_KINDS:
            for r in e.refs:
                out |= self._entry_inames(r)
        elif kind == "reduce":
            out = self.red_inames[e.rid]
        elif kind == "gather":
            out = self._entry_inames(e.index) | self._entry_inames(e.child)
        elif kind == "concat":
            out = self._static_inames(e.comp) if e.comp != 0 else out
            for r in e.refs:
                out |= self._entry_inames(r)
        return out


def _select(pos: Any, bounds: list[Any], values: list[Any]) -> Any:
    """``values[p]`` where ``bounds[p-1] <= pos < bounds[p]``: a balanced nest of ternaries
    (only the chosen value is evaluated, so an element loads from one piece; a balanced
    nest takes ``log2(pieces)`` comparisons, not one per piece)."""
    if len(values) == 1:
        return values[0]
    mid = len(values) // 2
    return prim.If(prim.Comparison(pos, "<", bounds[mid - 1]),
                   _select(pos, bounds[:mid - 1], values[:mid]),
                   _select(pos, bounds[mid:], values[mid:]))


def contiguous_rows(program: Program) -> bool:
    """Whether some reduction walks contiguous memory (the recipes' row pattern).

    A first stage whose pieces are numbered by the last output axis splits
    contiguous rows; one numbered by the first axis splits columns (see
    ``splits.two_stage_split``), judged by its loads like any other kernel.
    """
    e: Any  # an Entry, read by its kind tag
    last = len(program.root_sizes) - 1
    if program.chunked:
        for e in program.entries:
            if e.kind == "reduce" and e.chunk is not None and e.chunk[1] == last:
                return True
    elif program.row_dims is not None:
        # reductions once per row (softmax), unless they vary along a row's elements
        # (column-like reductions to several axes: see passes.outputs.split_rows), or
        # the rows are columns (``x - x.mean(axis=0)``: every reduction walks across rows)
        varying: set[int] = set()
        for e in program.entries:
            if e.kind == "reduce":
                collect_root_dims(e.at, varying, list(program.entries))
        if varying <= set(program.row_dims) and not (
                program.row_dims and walks_columns(program.entries)):
            return True
    for e in program.entries:
        if e.kind == "load" and e.strides != "c":
            for c, k in zip(e.at, e.strides):
                if c != 0 and c[0] == "j" and k == 1:
                    return True
    return False


def lower_program(program: Program, groups: Any, index_dtype: np.dtype,
                  user_functions: dict[str, Any],
                  name: str = "fuseloop_kernel", piece_chunk: int | None = None, *,
                  target: Any) -> LoweredKernel:
    """The Loopy kernel computing ``program`` (``groups`` is unused, kept for callers)
    for the Loopy ``target`` (the device's backend's, ``Backend.loopy_target()``).

    With ``piece_chunk`` (a recipe's ``concat_chunk``, see
    :func:`fuseloop.recipes.register_recipe`), an elementwise kernel reading a concatenation
    whose pieces are consecutive ranges of the flat loop (see :func:`piece_loops`) is
    lowered differently: ``i`` numbers chunks of ``piece_chunk`` elements, and within a
    chunk piece ``p`` has a loop ``i_k<p>`` of its own over the chunk's elements in the
    piece (Loopy turns the piece's range into the loop's bounds), running the whole kernel
    with the piece read directly: no per-element selection, so the loops vectorise.  An
    elementwise ``program`` with ``row_dims`` (``with_row_loops``) has rows too."""
    if program.contraction is not None:
        from .contraction import lower_contraction

        return lower_contraction(program, index_dtype, user_functions, target=target)
    if program.has_reduce:
        name = "fuseloop_rows" if contiguous_rows(program) else "fuseloop_cols"
    low = _Lowering(program, index_dtype, user_functions)
    low.index_helpers()
    split = piece_loops(program) if piece_chunk and program.mask is None else None
    if split is not None:
        lower_pieces(low, program, index_dtype, piece_chunk, split, emit_outputs)  # type: ignore[arg-type]
    else:
        low.setup_root()
        low.prepare_reductions()
        low.run()
        emit_outputs(low, program, index_dtype)
    idx_t = index_dtype

    kernel_args: list[Any] = []
    arg_names: list[str] = []
    for k, ref in enumerate(program.outputs):
        atomic = len(program.out_specs[k]) == 4
        kernel_args.append(lp.GlobalArg(f"out{k}", kernel_dtype(low.dtypes[ref]), shape=None,
                                        is_output=True, is_input=atomic, for_atomic=atomic))
        arg_names.append(f"out{k}")
    for slot in sorted(low.inputs):
        kernel_args.append(input_arg(program, slot, kernel_dtype(low.inputs[slot]), target))
        arg_names.append(f"in{slot}")
    if low.has_gather:
        kernel_args.append(lp.GlobalArg("err", np.int64, shape=(3,), is_output=True,
                                        is_input=True))
        arg_names.append("err")
    for slot in sorted(low.scalar_args):
        kernel_args.append(lp.ValueArg(f"s{slot}", kernel_dtype(low.scalar_args[slot])))
        arg_names.append(f"s{slot}")
    for slot in sorted(low.params):
        kernel_args.append(lp.ValueArg(f"p{slot}", idx_t))
        arg_names.append(f"p{slot}")
    bounds = ["N"] + (["NE"] if program.row_dims is not None else [])
    for b in bounds:
        kernel_args.append(lp.ValueArg(b, idx_t))
        arg_names.append(b)

    assumptions = " and ".join(f"{b} >= 1" for b in bounds)
    knl = lp.make_kernel(
        low.domains,
        low.instructions,
        [*kernel_args, *low.temporaries],
        target=target,
        assumptions=assumptions,
        index_dtype=index_dtype,
        lang_version=(2018, 2),
        name=name,
        silenced_warnings=["inferred_iname", "no_device_in_pre_codegen_checks",
                           "write_race(store_out*)", "write_race(check*)"],
    )
    knl = lp.set_options(knl, enforce_array_accesses_within_bounds=NO_BOUNDS_CHECK)
    # each loop's role, for recipes' within= matches (fuseloop.lower.roles)
    knl = tag_roles(knl, kernel_roles(program.has_reduce, program.has_reduce
                                      and contiguous_rows(program), low.red_inames,
                                      len(split[2]) if split is not None else 0,
                                      program.row_dims is not None))
    for cname, clbl in low.callables.items():
        knl = lp.register_callable(knl, cname, clbl)
    return LoweredKernel(knl, arg_names)

