"""Lower a contraction program (see :mod:`fuseloop.expr.contraction`) to Loopy.

The kernel is written the plain way, one loop nest over flat indices::

    fl_x(xb, xm, xk) := <operand X at batch xb, row xm, reduced index xk>
    fl_y(yb, yk, yn) := <operand Y at batch yb, reduced index yk, column yn>
    acc = sum(k, fl_x(b, m, k) * fl_y(b, k, n))        {id=contract}
    out0[<address of (b, m, n)>] = <epilogue of acc>

over ``0 <= b < NB, 0 <= m < NM, 0 <= n < NN, 0 <= k < NK`` (the batch
index ``b`` only when there are batch dimensions).  Each of ``b``, ``m``,
``n`` and ``k`` numbers a *group* of dimensions in C order (usually one
dimension each; several dimensions of a group are recovered with ``/`` and
``%``).  The operands are substitution rules, so their bodies can address
memory any way they like (flat addresses with strides as parameters: not
affine, which is fine), while their *arguments* are affine in the loop
indices: that is all Loopy's ``precompute`` needs to compute a tile's
footprint.  Elementwise producers (``A * 2``) are part of the rule, so a
recipe that precomputes the rule into local memory applies them while
filling the tile.

Recipes (kind ``"contraction"``, :mod:`fuseloop.recipes.contraction`) tile
this kernel.  :func:`pad_to_tiles` rounds the index ranges up to whole tiles
so tiled loops need no bounds checks: reads of the operands are clamped into
range and zero beyond ``NK``, and the epilogue and stores are predicated.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from .._lazy import isl, lp, prim
from ..dtypes import kernel_dtype
from ..expr.ir import ELEMENTWISE_KINDS
from ..expr.program import Program
from .kernel import (
    _MAX_INLINE_DEPTH,
    LEAF_KINDS,
    LoweredKernel,
    _Lowering,
    _unflatten,
)

if TYPE_CHECKING:
    from .contraction_tags import ContractionSizes, OperandInfo


def __getattr__(name: str) -> Any:
    """The tag classes by their former names here: Loopy's on-disk caches hold pickled
    kernels whose tags name this module."""
    if name in ("ContractionSizes", "OperandInfo"):
        from . import contraction_tags

        return getattr(contraction_tags, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

KERNEL_NAME = "fuseloop_contract"
BATCH, ROW, COL, RED = "b", "m", "n", "k"
X_RULE, Y_RULE = "fl_x", "fl_y"
REDUCTION_ID = "contract"
ACC = "acc"
# rule arguments: (batch, row, reduced) for X, (batch, reduced, column) for Y
X_ARGS = {BATCH: "xb", ROW: "xm", RED: "xk"}
Y_ARGS = {BATCH: "yb", RED: "yk", COL: "yn"}


def divides(knl: lp.LoopKernel, iname: str, tile: int) -> bool:
    """Whether the kernel's assumptions make the extent of ``iname`` a multiple of ``tile``."""
    size = contraction_sizes(knl).of(iname)
    if isinstance(size, int):
        return size % tile == 0
    have = knl.assumptions.to_set()
    space = have.get_space()
    names = [str(space.get_dim_name(isl.dim_type.param, k))
             for k in range(space.dim(isl.dim_type.param))]
    if size not in names:
        return False
    want = isl.Set(f"[{', '.join(names)}] -> {{ : {size} mod {tile} = 0 }}")
    return bool(have.is_subset(want))


def extent_range(knl: lp.LoopKernel, iname: str) -> tuple[int, int | None]:
    """The least and greatest extent of ``iname`` (``m``, ``n``, ``k``) that the kernel's
    assumptions allow (a launch's size class, see :mod:`fuseloop.recipes`); None: no
    upper bound."""
    size = contraction_sizes(knl).of(iname)
    if isinstance(size, int):
        return size, size
    space = knl.assumptions.to_set()
    at = space.get_space().find_dim_by_name(isl.dim_type.param, size)
    if at < 0:
        return 1, None
    one = space.move_dims(isl.dim_type.set, 0, isl.dim_type.param, at, 1)
    one = one.project_out(isl.dim_type.param, 0, one.dim(isl.dim_type.param))

    def const(pw: Any) -> int | None:
        return pw.get_pieces()[0][1].get_constant_val().to_python() if pw.is_cst() else None

    lo = const(one.dim_min(0))
    hi = const(one.dim_max(0)) if one.is_bounded() else None
    return max(1, lo or 1), hi


def contraction_sizes(knl: lp.LoopKernel) -> ContractionSizes:
    from .contraction_tags import ContractionSizes

    for t in knl.tags:
        if isinstance(t, ContractionSizes):
            return t
    raise ValueError(f"kernel {knl.name} is not a fuseloop contraction")


class _ContractionLowering(_Lowering):
    def contiguous_address(self, root_at: tuple) -> tuple[Any, frozenset]:
        """C-order position of the root index (the output is walked by b, m, n)."""
        return self.c_order_position([d for d, c in enumerate(root_at) if c != 0])

    def set_groups(self, groups: dict[str, tuple[Any, frozenset]]) -> None:
        """Index the output dimensions (and the reduced ones) by group variables."""
        c = self.program.contraction
        self.root_idx = {}
        self.red_idx = {}
        for key, dims in ((BATCH, c.b_dims), (ROW, c.m_dims), (COL, c.n_dims)):
            if key not in groups:
                continue
            var, names = groups[key]
            sizes = [self.size(self.program.root_sizes[d]) for d in dims]
            idx = _unflatten(var, sizes) if len(dims) > 1 else [var] * len(dims)
            for d, e in zip(dims, idx):
                self.root_idx[d] = (e, names)
        if RED in groups:
            var, names = groups[RED]
            if c.split is not None:
                # split-K: ``k`` counts within piece ``b`` (see fuseloop.split_k)
                var = groups[BATCH][0] * self.size(c.k_size) + var
            red: Any = self.program.entries[c.reduce]
            rid = red.rid
            sizes = [self.size(s) for s in red.sizes]
            idx = _unflatten(var, sizes) if len(sizes) > 1 else [var]
            for k, e in enumerate(idx):
                self.red_idx[(rid, k)] = (e, names)

    def cast(self, value: Any, frm: np.dtype, to: np.dtype) -> Any:
        return value if frm == to else self.helper_call("cast", (frm, to), [value])

    def inline(self, ref: int, memo: dict[int, tuple[Any, np.dtype]]) -> tuple[Any, np.dtype]:
        """The value of an operand entry as one expression (a rule body)."""
        hit = memo.get(ref)
        if hit is not None:
            return hit
        e: Any = self.program.entries[ref]
        kind = e.kind
        if kind in LEAF_KINDS:
            value, dt, _ = self.lower_leaf(e)
        else:
            loop = tuple(np.dtype(n) for n in e.loop)
            dt = loop[-1]
            args = []
            for k, r in enumerate(e.refs):
                v, d = self.inline(r, memo)
                args.append(self.cast(v, d, loop[k]))
            value = self.elementwise(kind, e.name if kind == "op" else e.key, loop, args)
        memo[ref] = (value, dt)
        return value, dt

    def operand_rule(self, ref: int, name: str, args: dict[str, str],
                     order: tuple[str, ...]) -> tuple[lp.SubstitutionRule, np.dtype]:
        groups: dict[str, tuple[Any, frozenset]] = {
            key: (prim.Variable(args[key]), frozenset()) for key in order}
        self.set_groups(groups)
        value, dt = self.inline(ref, {})
        c = self.program.contraction
        if c.split is not None and not c.split[1]:
            # the last piece runs past the reduced range: zero there (in both operands,
            # so the product is zero even where the other is inf), nothing read
            k = groups[BATCH][0] * self.size(c.k_size) + prim.Variable(args[RED])
            value = prim.If(prim.Comparison(k, "<", self.size(c.split[0])), value,
                            kernel_dtype(dt).type(0))
        return lp.SubstitutionRule(name, tuple(args[key] for key in order), value), dt


def lower_contraction(program: Program, index_dtype: np.dtype,
                      user_functions: dict[str, Any], *, target: Any) -> LoweredKernel:
    """The contraction ``program`` as a Loopy kernel over ``b``, ``m``, ``n``, ``k``: its
    operands as substitution rules, the reduction of their product into ``acc``, the
    epilogue elementwise in the output's inames, and the stores; for the Loopy
    ``target`` (``Backend.loopy_target()``)."""
    c = program.contraction
    low = _ContractionLowering(program, index_dtype, user_functions)
    low.index_helpers()
    batch = bool(c.b_dims)
    out_inames = ((BATCH,) if batch else ()) + (ROW, COL)
    bounds = {ROW: low.size(c.m_size), COL: low.size(c.n_size), RED: low.size(c.k_size)}
    if batch:
        bounds[BATCH] = low.size(c.b_size)
    x_order = ((BATCH,) if batch else ()) + (ROW, RED)
    y_order = ((BATCH,) if batch else ()) + (RED, COL)
    x_rule, x_dt = low.operand_rule(c.x, X_RULE, X_ARGS, x_order)
    y_rule, y_dt = low.operand_rule(c.y, Y_RULE, Y_ARGS, y_order)
    calls = {c.x: (prim.Variable(X_RULE)(*(prim.Variable(i) for i in x_order)), x_dt),
             c.y: (prim.Variable(Y_RULE)(*(prim.Variable(i) for i in y_order)), y_dt)}
    dt = _emit_reduction(low, program, calls, frozenset(out_inames))
    values = _emit_epilogue(low, program, dt, out_inames)
    arg_names, kernel_args = _emit_stores_and_args(low, program, index_dtype, values,
                                                   frozenset(out_inames))
    # an empty group (the rows of ``x @ A``) has the literal extent 1
    names = {key: v if isinstance(v, int) else str(v) for key, v in bounds.items()}
    params = sorted({v for v in names.values() if isinstance(v, str)})
    order = ((BATCH,) if batch else ()) + (ROW, COL, RED)
    domain = (f"[{', '.join(params)}] -> {{[{', '.join(order)}]: "
              + " and ".join(f"0 <= {i} < {names[i]}" for i in order) + "}")
    # the least extents the program stands for (a recipe given no size class reads them)
    least = {p: 1 for p in params}
    for key, at_least in ((ROW, c.m_least), (COL, c.n_least)):
        if isinstance(names[key], str):
            least[str(names[key])] = max(least[str(names[key])], at_least)
    knl = lp.make_kernel(
        [domain],
        [x_rule, y_rule, *low.instructions],
        [*kernel_args, *low.temporaries],
        target=target,
        assumptions=" and ".join(f"{p} >= {least[p]}" for p in params),
        index_dtype=index_dtype,
        lang_version=(2018, 2),
        name=KERNEL_NAME,
        silenced_warnings=["inferred_iname", "no_device_in_pre_codegen_checks",
                           "write_race(store_out*)", "v1_scheduler_fallback", "iname-order"],
    )
    # (no bounds check: see kernel.NO_BOUNDS_CHECK)
    knl = lp.set_options(knl, enforce_array_accesses_within_bounds="no_check")
    entries = program.entries
    from .contraction_tags import ContractionSizes, OperandInfo

    total = None if c.split is None or c.split[1] else low.size(c.split[0])
    knl = knl.with_kernel(knl.default_entrypoint.tagged(frozenset({
        ContractionSizes(str(names[BATCH]) if batch else None, names[ROW], names[COL],
                         str(names[RED]), None if total is None else
                         total if isinstance(total, int) else str(total)),
        OperandInfo(kernel_dtype(x_dt).char, kernel_dtype(y_dt).char,
                    _fast_axis(entries, c.x, c.m_dims, ROW, RED),
                    _fast_axis(entries, c.y, c.n_dims, COL, COL))})))
    for cname, clbl in low.callables.items():
        knl = lp.register_callable(knl, cname, clbl)
    return LoweredKernel(knl, arg_names)


def _substitution(values: dict[str, Any]) -> Any:
    """A mapper replacing the variables named in ``values`` (Loopy's, aware of reductions)."""
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    return SubstitutionMapper(make_subst_func(values))


def _emit_reduction(low: _ContractionLowering, program: Program,
                    calls: dict[int, tuple[Any, np.dtype]], within: frozenset) -> np.dtype:
    """``acc = reduce(k, x(.., k) * y(k, ..))``; returns the reduction's dtype."""
    from .reductions import reduction_operation  # (Loopy's classes)

    entries = program.entries
    red: Any = entries[program.contraction.reduce]
    dt = np.dtype(red.dtype)
    prod: Any = entries[red.child]
    loop = tuple(np.dtype(n) for n in prod.loop)
    factors = [low.cast(calls[r][0], calls[r][1], loop[k]) for k, r in enumerate(prod.refs)]
    product = low.cast(low.elementwise("op", "multiply", loop, factors), loop[-1], dt)
    low.temporaries.append(lp.TemporaryVariable(ACC, kernel_dtype(dt), shape=(),
                                                address_space=lp.AddressSpace.PRIVATE))
    low.instructions.append(lp.Assignment(
        prim.Variable(ACC), lp.Reduction(reduction_operation(red.op, dt), (RED,), product),
        id=REDUCTION_ID, within_inames=within))
    return dt


def _emit_epilogue(low: _ContractionLowering, program: Program, dt: np.dtype,
                   out_inames: tuple[str, ...]) -> dict[int, tuple[Any, np.dtype, frozenset]]:
    """Every entry but the operands' and the product, elementwise in the output's
    inames: ``ref -> (value, dtype, instruction ids it depends on)``.  Values used
    twice, or nested deeper than ``_MAX_INLINE_DEPTH``, go through a temporary."""
    c = program.contraction
    entries = program.entries
    low.set_groups({key: (prim.Variable(key), frozenset({key})) for key in out_inames})
    red: Any = entries[c.reduce]
    skip = _operand_entries(entries, c.x) | _operand_entries(entries, c.y) | {red.child}
    uses: Counter[int] = Counter()
    for k, e in enumerate(entries):
        if k not in skip and e.kind in ELEMENTWISE_KINDS:
            uses.update(e.refs)  # type: ignore[union-attr]
    uses.update(program.outputs)
    within = frozenset(out_inames)
    values: dict[int, tuple[Any, np.dtype, frozenset]] = {}
    depth: dict[int, int] = {}
    for ref, e in enumerate(entries):
        if ref in skip:
            continue
        kind = e.kind
        dep: frozenset = frozenset()
        d = 0
        if ref == c.reduce:
            value, edt, dep = prim.Variable(ACC), dt, frozenset({REDUCTION_ID})
        elif kind in ELEMENTWISE_KINDS:
            refs = e.refs  # type: ignore[union-attr]
            eloop = tuple(np.dtype(n) for n in e.loop)  # type: ignore[union-attr]
            edt = eloop[-1]
            for r in refs:
                if r not in values:  # shared with an operand: a 0-d value, inlined
                    v, vdt = low.inline(r, {})
                    values[r], depth[r] = (v, vdt, frozenset()), 0
            args = [low.cast(values[r][0], values[r][1], eloop[k]) for k, r in enumerate(refs)]
            for r in refs:
                dep |= values[r][2]
            name = e.name if kind == "op" else e.key  # type: ignore[union-attr]
            value = low.elementwise(kind, name, eloop, args)
            d = 1 + max(depth[r] for r in refs)
        else:
            value, edt = low.inline(ref, {})
        if (uses[ref] > 1 or d > _MAX_INLINE_DEPTH) and kind not in ("arg", "lit") \
                and ref != c.reduce:
            tmp = f"t{ref}"
            low.temporaries.append(lp.TemporaryVariable(
                tmp, kernel_dtype(edt), shape=(), address_space=lp.AddressSpace.PRIVATE))
            low.instructions.append(lp.Assignment(prim.Variable(tmp), value, id=f"calc_{tmp}",
                                                  within_inames=within, depends_on=dep))
            value, dep, d = prim.Variable(tmp), frozenset({f"calc_{tmp}"}), 0
        values[ref], depth[ref] = (value, edt, dep), d
    return values


def _emit_stores_and_args(low: _ContractionLowering, program: Program, index_dtype: np.dtype,
                          values: dict[int, tuple[Any, np.dtype, frozenset]],
                          within: frozenset) -> tuple[list[str], list[Any]]:
    """The stores of the outputs, and the kernel's arguments with their names in the
    order ``out*``, ``in*``, ``s*``, ``p*``."""
    kernel_args: list[Any] = []
    arg_names: list[str] = []
    root_at = tuple(0 if s == 1 else ("r", d) for d, s in enumerate(program.root_sizes))
    for k, ref in enumerate(program.outputs):
        spec = program.out_specs[k]
        addr, _ = low.contiguous_address(root_at) if spec == () else low.address(*spec)
        value, dt, dep = values[ref]
        if _has_call(addr):
            # Loopy resolves function calls on right-hand sides only
            tmp = f"oaddr{k}"
            low.temporaries.append(lp.TemporaryVariable(
                tmp, index_dtype, shape=(), address_space=lp.AddressSpace.PRIVATE))
            low.instructions.append(lp.Assignment(prim.Variable(tmp), addr, id=f"calc_{tmp}",
                                                  within_inames=within))
            dep = dep | {f"calc_{tmp}"}
            addr = prim.Variable(tmp)
        low.instructions.append(lp.Assignment(
            prim.Variable(f"out{k}")[addr], value, id=f"store_out{k}",
            within_inames=within, depends_on=dep))
        kernel_args.append(lp.GlobalArg(f"out{k}", kernel_dtype(dt), shape=None,
                                        is_output=True, is_input=False))
        arg_names.append(f"out{k}")
    for slot in sorted(low.inputs):
        kernel_args.append(lp.GlobalArg(f"in{slot}", kernel_dtype(low.inputs[slot]),
                                        shape=None, is_output=False, is_input=True))
        arg_names.append(f"in{slot}")
    for slot in sorted(low.scalar_args):
        kernel_args.append(lp.ValueArg(f"s{slot}", kernel_dtype(low.scalar_args[slot])))
        arg_names.append(f"s{slot}")
    for slot in sorted(low.params):
        kernel_args.append(lp.ValueArg(f"p{slot}", index_dtype))
        arg_names.append(f"p{slot}")
    return arg_names, kernel_args


def _has_call(expr: Any) -> bool:
    """Whether an index expression calls a function (the ``/`` and ``%`` helpers)."""
    if isinstance(expr, prim.Call):
        return True
    if isinstance(expr, prim.Sum | prim.Product):
        return any(_has_call(c) for c in expr.children)
    return False


def _operand_entries(entries: tuple[tuple, ...], ref: int) -> set[int]:
    out: set[int] = set()
    stack = [ref]
    while stack:
        r = stack.pop()
        if r in out:
            continue
        out.add(r)
        e: Any = entries[r]
        if e.kind in ELEMENTWISE_KINDS:
            stack.extend(e.refs)
    return out


def _domain(knl: lp.LoopKernel, bounds: dict[str, str]) -> isl.BasicSet:
    """A new loop domain: ``bounds`` maps each iname to its constraints."""
    params = contraction_sizes(knl).params()
    return isl.BasicSet(f"[{', '.join(params)}] -> {{[{', '.join(bounds)}]: "
                        + " and ".join(bounds.values()) + "}")


def _current_bounds(knl: lp.LoopKernel) -> dict[str, str]:
    """The constraints of every iname of the (single) domain, as isl text."""
    dom = knl.domains[0]
    out: dict[str, str] = {}
    for name in dom.get_var_names(isl.dim_type.set):
        proj = dom.project_out_except([name], [isl.dim_type.set])  # type: ignore[list-item]
        text = str(proj)
        out[name] = text[text.index(":") + 1:text.rindex("}")].strip()  # type: ignore[index]
    return out


def bound_last_piece(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """A split-K first stage whose pieces do not tile the reduced range
    (``ContractionSizes.split_total``) with the end of each piece in the loop domain
    instead of zeros in the operand rules: ``k < min(NK, total - b * NK)``, the second
    bound a value written per piece (Loopy nests the loop inside the instruction that
    writes it; ``b * NK`` is not affine), so a recipe that splits ``k`` into slabs gets
    a bulk loop without a test per term.  (Apply after :func:`pad_to_tiles`, which
    rewrites a single domain.)"""
    knl = t_unit.default_entrypoint
    sizes = contraction_sizes(knl)
    total = sizes.split_total
    if total is None:
        return t_unit
    subs = dict(knl.substitutions)
    for rule_name in (X_RULE, Y_RULE):
        rule = subs[rule_name]
        # (operand_rule's outermost node: If(piece start + k < total, value, 0))
        assert isinstance(rule.expression, prim.If), rule.expression
        subs[rule_name] = rule.copy(expression=rule.expression.then)
    end, nk = "k_end", sizes.reduced
    keep = [str(i) for i in knl.domains[0].get_var_names(isl.dim_type.set) if i != RED]
    outer = knl.domains[0].project_out_except(keep, [isl.dim_type.set])
    # (one upper bound: Loopy's slabs need it)
    inner = isl.BasicSet(f"[{end}] -> {{[{RED}]: 0 <= {RED} < {end}}}")
    left = prim.Variable(str(total)) - prim.Variable(BATCH) * prim.Variable(nk)
    write = lp.Assignment(prim.Variable(end), prim.Variable("min")(prim.Variable(nk), left),
                          id="piece_end", within_inames=frozenset({BATCH}))
    insns = [i.copy(depends_on=i.depends_on | {"piece_end"}) if i.id == REDUCTION_ID else i
             for i in knl.instructions]
    temps = dict(knl.temporary_variables)
    temps[end] = lp.TemporaryVariable(end, knl.index_dtype, shape=(),
                                      address_space=lp.AddressSpace.PRIVATE)
    knl = knl.copy(domains=[outer, inner], substitutions=subs, instructions=[write, *insns],
                   temporary_variables=temps)
    return t_unit.with_kernel(knl)


def pad_to_tiles(t_unit: lp.TranslationUnit, tiles: dict[str, int]) -> lp.TranslationUnit:
    """Round the ranges of ``m``, ``n`` and ``k`` up to multiples of ``tiles``.

    After this, splitting an iname by its tile gives loops without remainders.
    The operand rules read clamped indices (always inside the arrays) and give
    zero for ``k >= NK`` (so padded terms add nothing, even next to inf or NaN);
    every instruction but the reduction is predicated on ``m < NM`` and
    ``n < NN``, so padded rows and columns are computed but never stored.  A
    range that the kernel's assumptions (its size class) make a multiple of its
    tile is left as it is: no clamps, no tests.
    """
    knl = t_unit.default_entrypoint
    sizes = contraction_sizes(knl)
    bounds = _current_bounds(knl)
    padded = {i for i in (ROW, COL, RED) if tiles.get(i, 1) != 1 and i in bounds
              and not divides(knl, i, tiles[i])}
    for i in padded:
        t = tiles[i]
        bounds[i] = f"0 <= {i} < {t} * floor(({sizes.of(i)} + {t - 1}) / {t})"

    limit = sizes.limit
    subs = dict(knl.substitutions)
    for rule_name, args in ((X_RULE, X_ARGS), (Y_RULE, Y_ARGS)):
        rule = subs[rule_name]
        clamp = {args[i]: prim.Variable("min")(prim.Variable(args[i]), limit(i) - 1)
                 for i in (ROW, COL, RED) if i in args and i in padded}
        body = _substitution(clamp)(rule.expression)
        if RED in padded:
            zero = kernel_dtype(np.dtype(_rule_dtype(knl, rule_name))).type(0)
            body = prim.If(prim.Comparison(prim.Variable(args[RED]), "<", limit(RED)), body, zero)
        subs[rule_name] = rule.copy(expression=body)
    guard = frozenset(prim.Comparison(prim.Variable(i), "<", limit(i))
                      for i in (ROW, COL) if i in padded)
    insns = [insn if insn.id == REDUCTION_ID else insn.copy(predicates=insn.predicates | guard)
             for insn in knl.instructions]
    knl = knl.copy(domains=[_domain(knl, bounds)], substitutions=subs, instructions=insns)
    return t_unit.with_kernel(knl)


def shifted_split(t_unit: lp.TranslationUnit, iname: str, tile: int, outer: str,
                  inner: str) -> lp.TranslationUnit:
    """Split ``iname`` (``m`` or ``n``) into tiles, the last one shifted back into range.

    ``iname = min(outer * tile, size - tile) + inner``: every tile is whole
    and inside the operands, so the operand reads need no clamping and the
    reads of a tile are provably contiguous (vectorisable).  The last tile
    overlaps the one before it; it accumulates the overlap again but skips
    it in the epilogue and the stores (predicated on ``size - tile + inner
    >= outer * tile``, always true in a tile that was not shifted), so every
    output element is written once, by one work-item.  That is the rule an
    in-place epilogue relies on: ``C += A @ B`` reads each element of ``C``
    where it writes it, and a second pass over the overlap would add twice.
    Needs ``size >= tile`` (contractions have at least
    :data:`fuseloop.expr.contraction.MIN_SIDE` rows and columns).
    """
    knl = t_unit.default_entrypoint
    sizes = contraction_sizes(knl)
    size = sizes.of(iname)
    bounds = _current_bounds(knl)
    del bounds[iname]
    bounds[outer] = f"0 <= {outer} and {tile} * {outer} < {size}"
    bounds[inner] = f"0 <= {inner} < {tile}"
    start, last = prim.Variable(outer) * tile, sizes.limit(iname) - tile
    # a conditional, not min(): calls added to instructions after the kernel
    # was made would not be resolved by Loopy
    value = prim.If(prim.Comparison(start, "<", last), start, last) + prim.Variable(inner)
    # the elements a shifted tile shares with the tile before it are that tile's
    first_time = prim.Comparison(last + prim.Variable(inner), ">=", start)
    mapper = _substitution({iname: value})
    insns = []
    for insn in knl.instructions:
        if iname in insn.within_inames:
            insn = insn.with_transformed_expressions(mapper).copy(
                within_inames=(insn.within_inames - {iname}) | {outer, inner})
            if insn.id != REDUCTION_ID:
                insn = insn.copy(predicates=insn.predicates | {first_time})
        insns.append(insn)
    knl = knl.copy(domains=[_domain(knl, bounds)], instructions=insns)
    return t_unit.with_kernel(knl)


def explicit_accumulator(t_unit: lp.TranslationUnit, axes: list[tuple[str, int]],
                         name: str = "acc_tile") -> lp.TranslationUnit:
    """Accumulate the contraction in a private array indexed by ``axes``.

    The reduction becomes three instructions: zero the array, add the product
    for each ``k``, and copy the element to ``acc`` for the epilogue.  With
    the array's layout fixed here (last axis contiguous), a CPU recipe can
    loop over a register tile's columns inside the ``k`` loop and leave the
    vectorising to the compiler (Loopy's ILP privatisation orders the axes
    of the accumulator it creates arbitrarily).  ``axes`` are ``(iname,
    length)`` pairs, each iname counting from 0.
    """
    knl = t_unit.default_entrypoint
    insn = knl.id_to_insn[REDUCTION_ID]
    red = insn.expression
    assert isinstance(red, lp.Reduction) and red.operation.__class__.__name__ == \
        "SumReductionOperation"
    dtype = knl.temporary_variables[ACC].dtype
    tile: Any = prim.Variable(name)[tuple(prim.Variable(i) for i, _ in axes)]
    init = lp.Assignment(tile, dtype.numpy_dtype.type(0), id=f"{REDUCTION_ID}_init",  # type: ignore[union-attr]
                         within_inames=insn.within_inames)
    update = lp.Assignment(tile, tile + red.expr, id=f"{REDUCTION_ID}_update",
                           within_inames=insn.within_inames | frozenset(red.inames),
                           depends_on=insn.depends_on | {init.id})
    final = insn.copy(expression=tile, depends_on=insn.depends_on | {update.id})
    insns = [init, update] + [final if i.id == REDUCTION_ID else i for i in knl.instructions]
    temps = dict(knl.temporary_variables)
    temps[name] = lp.TemporaryVariable(name, dtype, shape=tuple(n for _, n in axes),
                                       address_space=lp.AddressSpace.PRIVATE)
    return t_unit.with_kernel(knl.copy(instructions=insns, temporary_variables=temps))


def _rule_dtype(knl: lp.LoopKernel, rule_name: str) -> np.dtype:
    """The dtype of an operand rule's value (recorded when lowering)."""
    info = operand_info(knl)
    return np.dtype(info.x_dtype if rule_name == X_RULE else info.y_dtype)


def operand_info(knl: lp.LoopKernel) -> OperandInfo:
    from .contraction_tags import OperandInfo

    for t in knl.tags:
        if isinstance(t, OperandInfo):
            return t
    raise ValueError(f"kernel {knl.name} is not a fuseloop contraction")


def contraction_layout(knl: lp.LoopKernel) -> tuple[str, str]:
    """The contiguous axes of the operands: (``"k"`` or ``"m"``, ``"k"`` or ``"n"``)."""
    info = operand_info(knl)
    return info.x_fast, info.y_fast


def operand_itemsize(knl: lp.LoopKernel) -> int:
    info = operand_info(knl)
    return max(np.dtype(info.x_dtype).itemsize, np.dtype(info.y_dtype).itemsize)


def _fast_axis(entries: tuple[tuple, ...], ref: int, own_dims: tuple[int, ...],
               own: str, default: str) -> str:
    """The axis along which the operand's first unit-stride load is contiguous."""
    for r in sorted(_operand_entries(entries, ref)):
        e: Any = entries[r]
        if e.kind != "load" or e.strides == "c":
            continue
        for c, k in zip(e.at, e.strides):
            if k != 1 or c == 0:
                continue
            if c[0] == "j":
                return RED
            if c[0] == "r" and c[1] in own_dims:
                return own
    return default
