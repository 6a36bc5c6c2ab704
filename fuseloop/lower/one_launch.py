"""A two-stage reduction's both stages in one launch (``Program.first``).

A long full reduction runs as a first stage (each work-group reduces a piece into a
partial result) and a combining stage (the partials reduced, the epilogue applied).
Two launches cost a second launch's latency and a pass over the queue; instead,
every group of the first stage publishes its partial, waits for its stores to be
visible (a global fence) and then takes a ticket from an atomic counter; the group
that draws the last ticket has every partial visible, runs the combining stage and
puts the counter back to 0 for the next launch.  Both stages are lowered and
transformed by their recipes as two kernels would be, then joined into one Loopy
kernel (:func:`join`):

* the first stage's arguments are renumbered after the combining stage's (its
  rows and row length become parameters); the combining stage reads its partials
  from the first stage's output arguments (one pointer each, no alias);
* the ticket is a ``CInstruction`` (Loopy has no construct for a fence and an
  atomic counter whose value decides a branch): the group's barrier, then one
  work-item's fence, ``atomic_inc`` and the broadcast of "last" through local memory;
* every instruction of the combining stage is predicated on that flag and depends on
  the ticket; it must fit in one group of the first stage's grid (its own grid is
  one group, no wider; a wider group is narrowed through its recipe's ``group``):
  otherwise ``OneLaunchRefused`` and the caller launches twice.

The counter (``fl_ticket``, one int32) belongs to the compiled kernel: set once on
each of its kernel objects (``cache.CompiledKernel``), launches on the device's
in-order queue never overlap.
"""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from loopy.kernel.data import AddressSpace, GroupInameTag
from pytools.tag import Tag, tag_dataclass

from ..cache_disk import KernelPlan
from ..errors import OneLaunchRefused
from ..expr.program import Program
from .codegen import apply_recipe, generate, lower

#: the kernel argument holding the ticket counter (``cache.CompiledKernel`` binds it)
TICKET_ARG = "fl_ticket"
_LAST = "fl_last"  # private: this group drew the last ticket
_LAST_SHARED = "fl_last_l"  # local: the same, written by one work-item
_TICKET_ID = "fl_take_ticket"
# (every work-item's stores of the partial done and visible before one takes a ticket;
# the ticket's value read after the other groups' stores: the fences pair up)
_TICKET_CODE = f"""barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
if (get_local_id(0) == 0)
{{
  mem_fence(CLK_GLOBAL_MEM_FENCE);
  {_LAST_SHARED} = atomic_inc({TICKET_ARG}) == (int) get_num_groups(0) - 1;
  if ({_LAST_SHARED})
    *{TICKET_ARG} = 0;
  mem_fence(CLK_GLOBAL_MEM_FENCE);
}}
barrier(CLK_LOCAL_MEM_FENCE);
{_LAST} = {_LAST_SHARED};"""


@tag_dataclass
class StageTag(Tag):
    """Marks the instructions of one stage (``stage`` 1 or 2) through the join, which
    renames instruction ids that clash."""

    stage: int


def _tagged(t_unit: Any, stage: int) -> Any:
    knl = t_unit.default_entrypoint
    tag = StageTag(stage)
    return t_unit.with_kernel(knl.copy(instructions=[
        insn.tagged(tag) for insn in knl.instructions]))


def kernel_plan(program: Program, index_dtype: np.dtype, device: Any, recipe: Any,
                user_functions: Any, sizes: str) -> KernelPlan:
    """The one-launch kernel of ``program`` (its ``first`` set): both stages lowered
    and transformed, joined, generated.  ``sizes``: the size classes, ``second|first``."""
    first = program.first
    assert first is not None
    sizes2, sizes1 = sizes.split("|", 1)
    # (the caller, codegen.kernel_plan, holds the Loopy section)
    t1 = apply_recipe(lower(first.program, index_dtype, recipe, user_functions, sizes1,
                            device=device), recipe, device)
    second = lower(program._replace(first=None), index_dtype, recipe, user_functions,
                   sizes2, device=device)
    t2 = apply_recipe(second, recipe, device)
    narrower = _within_group(t1, t2, recipe)
    if narrower is not None:
        t2 = apply_recipe(second, narrower, device)
    return generate(join(t1, t2, first, device), device)


def _within_group(t1: Any, t2: Any, recipe: Any) -> Any:
    """``recipe`` with its ``group`` (work-items per row) no wider than the first stage's
    group, where the combining stage ``t2`` took a wider one (a full reduction of 1024
    row values after a row kernel of 256-item groups: the join must fit it in one of
    them); None where it fits, or the recipe has no such parameter."""
    _, l1 = t1.default_entrypoint.get_grid_size_upper_bounds_as_exprs(t1.callables_table)
    _, l2 = t2.default_entrypoint.get_grid_size_upper_bounds_as_exprs(t2.callables_table)
    if not l1 or not l2 or "group" not in recipe.params \
            or not all(isinstance(n, int | np.integer) for n in (*l1, *l2)) or l2[0] <= l1[0]:
        return None
    return recipe.with_params(group=int(l1[0]))


def _renamed_first(t1: Any, first: Any) -> Any:
    """The first stage's arguments numbered after the combining stage's; its rows and
    row length are parameters after its own."""
    shift = {"out": first.n_outputs, "in": first.n_storages, "s": first.n_scalars,
             "p": first.n_params}
    rows = first.n_params + first.first_params
    renames = {}
    for a in t1.default_entrypoint.args:
        base = a.name.rstrip("0123456789")
        if a.name in ("N", "NE"):
            renames[a.name] = f"p{rows if a.name == 'N' else rows + 1}"
        elif base in shift:
            renames[a.name] = f"{base}{int(a.name[len(base):]) + shift[base]}"
    for old in renames:  # (two steps: a new name may be another argument's old one)
        t1 = lp.rename_argument(t1, old, f"fl_tmp_{old}")
    for old, new in renames.items():
        t1 = lp.rename_argument(t1, f"fl_tmp_{old}", new)
    return t1


def _combining(t2: Any, first: Any) -> Any:
    """The combining stage as one group's work: its one row fixed (``N``, ``NE`` = 1),
    its partial inputs renamed to the first stage's outputs, its inames and group
    axes its own (a group axis of one group becomes a loop of one step)."""
    knl = t2.default_entrypoint
    fixed: dict[str, Any] = {a.name: 1 for a in knl.args if a.name in ("N", "NE")}
    if fixed:
        t2 = lp.fix_parameters(t2, **fixed)
    for t, slot in enumerate(first.partial_inputs):
        t2 = lp.rename_argument(t2, f"in{slot}", f"out{first.n_outputs + t}")
    knl = t2.default_entrypoint
    gsize, _ = knl.get_grid_size_upper_bounds_as_exprs(t2.callables_table)
    if any(g != 1 for g in gsize):
        raise OneLaunchRefused(f"the combining stage needs {gsize} groups")
    for iname in sorted(knl.all_inames()):
        if knl.iname_tags_of_type(iname, GroupInameTag):
            knl = lp.untag_inames(knl, iname, GroupInameTag)
    for iname in sorted(knl.all_inames()):
        knl = lp.rename_iname(knl, iname, f"{iname}_fl2")
    return t2.with_kernel(knl)


def _with_lane_iname(knl: Any, name: str, extent: int) -> Any:
    """``knl`` with an iname ``name`` over ``extent`` work-items of local axis 0."""
    import islpy as isl

    domain = isl.BasicSet.read_from_str(knl.domains[0].get_ctx(),
                                        f"{{ [{name}]: 0 <= {name} < {extent} }}")
    knl = knl.copy(domains=[*knl.domains, domain])
    return lp.tag_inames(knl, {name: "l.0"})


def join(t1: Any, t2: Any, first: Any, device: Any) -> Any:
    """The first stage ``t1`` and combining stage ``t2`` (both transformed by their
    recipe) as one kernel: see the module."""
    if type(t1.target) is not type(t2.target):
        raise OneLaunchRefused("the stages have different Loopy targets")
    t1 = _renamed_first(t1, first)
    t2 = _combining(t2, first)
    k1, k2 = t1.default_entrypoint, t2.default_entrypoint
    g1, l1 = k1.get_grid_size_upper_bounds_as_exprs(t1.callables_table)
    _, l2 = k2.get_grid_size_upper_bounds_as_exprs(t2.callables_table)
    if len(g1) > 1 or len(l1) > 1 or len(l2) > len(l1) or any(
            not isinstance(b, (int, np.integer)) or not isinstance(a, (int, np.integer))
            or b > a for a, b in zip(l1, l2)):
        raise OneLaunchRefused(f"grids: first stage {g1} x {l1}, combining stage {l2}")
    t_unit = lp.fuse_kernels([_tagged(t1, 1), _tagged(t2, 2)], suffixes=["_fl1", "_fl2"])
    knl = t_unit.default_entrypoint
    ids1 = frozenset(i.id for i in knl.instructions if StageTag(1) in i.tags)
    args = list(knl.args)
    args.append(lp.GlobalArg(TICKET_ARG, np.int32, shape=(1,), is_input=True,
                             is_output=True))
    temps = dict(knl.temporary_variables)
    temps[_LAST] = lp.TemporaryVariable(_LAST, np.int32, shape=(),
                                        address_space=AddressSpace.PRIVATE)
    temps[_LAST_SHARED] = lp.TemporaryVariable(_LAST_SHARED, np.int32, shape=(),
                                               address_space=AddressSpace.LOCAL)
    ticket = lp.CInstruction(
        (), _TICKET_CODE, read_variables=frozenset({TICKET_ARG}),
        assignees=(prim.Variable(_LAST_SHARED), prim.Variable(_LAST),
                   prim.Subscript(prim.Variable(TICKET_ARG), 0)), id=_TICKET_ID,
        depends_on=ids1, within_inames=frozenset())
    # the combining stage reads partials only after the ticket, which follows the
    # group's own stores and the fences: no barrier of Loopy's (a global one) is needed
    # Loopy wants every instruction inside every hardware axis: the ticket is taken by
    # the whole group (an iname over the group's work-items), a combining stage of one
    # work-item runs on the first (an iname of one step)
    group = frozenset(i for i in knl.all_inames() if knl.iname_tags_of_type(i, GroupInameTag))
    lanes = group
    if l1:
        knl = _with_lane_iname(knl, "fl_lane", int(l1[0]))
        ticket = ticket.copy(within_inames=group | {"fl_lane"})
        if not l2:
            knl = _with_lane_iname(knl, "fl_lane0", 1)
            lanes = group | {"fl_lane0"}
    else:
        ticket = ticket.copy(within_inames=group)
    last = prim.Variable(_LAST)
    after = frozenset((i, "any") for i in ids1)
    insns = []
    for insn in knl.instructions:
        if StageTag(2) in insn.tags:
            insn = insn.copy(predicates=insn.predicates | {last},
                             depends_on=insn.depends_on | {_TICKET_ID} | ids1,
                             no_sync_with=insn.no_sync_with | after,
                             within_inames=insn.within_inames | lanes)
        insns.append(insn)
    # (the ticket's writes are one work-item's, by its own test; the dependencies of
    # the combining stage are stated above)
    quiet = [f"write_race({_TICKET_ID})", f"write_race_local({_TICKET_ID})",
             "single_writer_after_creation"]
    knl = knl.copy(args=args, temporary_variables=temps, instructions=[*insns, ticket],
                   silenced_warnings=[*knl.silenced_warnings, *quiet])
    return t_unit.with_kernel(knl)
