"""The recipe for writes that read their own target elsewhere (kind ``"one_group"``).

``x[1:] = x[:-1] * 2``, ``y[:k] += alpha * flip(y[:k])`` and floyd_warshall's
``path[i, :] = minimum(path[i, :], path[i, k] + path[k, :])`` write elements that other
work-items read, and numpy's semantics say every value comes from the old elements.
Across work-groups that takes two launches (the value into a temporary, then a copy);
within one work-group a barrier suffices.  A program marked ``one_group``
(``Program.one_group``, set by :mod:`fuseloop.evaluate` for such writes of fewer than
:func:`limit` elements: :func:`fuseloop.expr.overlap.one_group_fits`) is lowered as
one loop over all elements (``i``), which this recipe splits into one work-group of
``group`` work-items (``i_inner``, local) and a sequential loop of ``N / group``
elements each (``i_outer``):

1. each work-item computes its elements' values into a private array indexed by
   ``i_outer`` (the store's right-hand side, moved into its own instruction);
2. a barrier with a global memory fence (``barrier(CLK_GLOBAL_MEM_FENCE)``;
   ``__syncthreads()`` on CUDA): every load of the group is done before any store;
3. a second loop over ``i_outer`` (a duplicate iname) stores the values, with the
   stores' address computations.

The size class names the least of ``group x 1, 2, 4, ...`` holding the output
(``N <= bound``), so one kernel serves every length up to it; the private array has
``bound / group`` elements.  A run plan replayed at a larger length (its key classes
lengths by bit length) still gets a correct kernel of a larger class.  The kernel's
pointers drop ``__restrict__`` (``codegen.kernel_plan``): the output aliases an input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lp, prim
from ..errors import RecipeError
from . import select
from .core import Derived, Param, Recipe, powers_of_two

if TYPE_CHECKING:
    from ..runtime.devices import Device

#: work-items in the group, at most (the device's maximum if smaller)
GROUP = 1024
#: elements per work-item, at most, of a write taking one group (:func:`limit`)
ITEMS = 8
#: elements per work-item up to which its loops are unrolled
UNROLL_MAX = 16
_VALUE = "fl_value"
_BARRIER = "fl_loads_done"


def group_size(group: int, device: Device) -> int:
    """The work-group size the parameter ``group`` gives on ``device``."""
    return min(group, device.max_work_group_size)


def limit(values: Any, device: Device) -> int:
    """A write of fewer elements than this (``group x items``) takes one group."""
    return group_size(values["group"], device) * values["items"]


def _bound(group: int, n: int) -> int:
    """The least ``group x 2^k`` holding ``n`` elements."""
    bound = group
    while bound < n:
        bound *= 2
    return bound


def _size_class(group: int) -> Any:
    def size_class(program: Any, params: Any, n_rows: int, n_elem: int) -> str:
        return f"N <= {_bound(group, n_rows * n_elem)}"
    return size_class


def _store_side(knl: Any, stores: set[str], values: set[str]) -> set[str]:
    """``stores`` and the instructions computing only what stores read (addresses),
    but not their ``values``."""
    side = set(stores)
    readers = knl.reader_map()
    grew = True
    while grew:
        grew = False
        for insn in knl.instructions:
            if insn.id in side or insn.id in values:
                continue
            written = insn.assignee_var_names()
            if written and all(readers.get(v, set()) and readers[v] <= side for v in written):
                side.add(insn.id)
                grew = True
    return side


def _fixed_bound(knl: Any, flat: str, bound: int) -> Any:
    """``knl`` with the flat loop over ``bound`` elements, each instruction in it under
    ``flat < N``: the group's size is then ``group`` at every length of the class,
    not the length (PoCL builds a kernel's work-group function per local size)."""
    from .._lazy import isl

    domains = [isl.BasicSet(f"[N] -> {{ [{flat}] : 0 <= {flat} < {bound} }}")
               if flat in d.get_var_names(isl.dim_type.set) else d for d in knl.domains]
    inside = prim.Comparison(prim.Variable(flat), "<", prim.Variable("N"))
    return knl.copy(domains=domains, instructions=[
        insn.copy(predicates=insn.predicates | {inside}) if flat in insn.within_inames
        else insn for insn in knl.instructions])


def _one_group(t_unit: lp.TranslationUnit, device: Device, *, group: int,
               items: int) -> lp.TranslationUnit:
    """One work-group: values into private memory, a barrier, then the stores."""
    from .row_cache import implied

    flat = str(select.iname(t_unit, f"tag:{select.FLAT}"))
    knl = t_unit.default_entrypoint
    size = group_size(group, device)
    bound = next((b for b in (_bound(size, 1 << k) for k in range(31))
                  if implied(knl, f"N <= {b}")), None)
    if bound is None:
        raise RecipeError("recipe 'one-group' needs its size class (N <= bound); a "
                          "with_params variant must keep size_class")
    t_unit = t_unit.with_kernel(_fixed_bound(knl, flat, bound))
    t_unit = lp.split_iname(t_unit, flat, size, inner_tag="l.0")
    knl = t_unit.default_entrypoint
    outer = f"{flat}_outer"
    outputs = {a.name for a in knl.args if a.is_output}
    stores = {insn.id for insn in knl.instructions
              if set(insn.assignee_var_names()) & outputs}
    insns, temps = [], dict(knl.temporary_variables)
    for insn in knl.instructions:
        if insn.id not in stores:
            insns.append(insn)
            continue
        name = f"{_VALUE}_{insn.id}"
        temps[name] = lp.TemporaryVariable(
            name, dtype=knl.arg_dict[insn.assignee_var_names()[0]].dtype,
            shape=(bound // size,), address_space=lp.AddressSpace.PRIVATE)
        value = prim.Subscript(prim.Variable(name), (prim.Variable(outer),))
        insns.append(lp.Assignment(value, insn.expression, id=name,
                                   depends_on=insn.depends_on,
                                   within_inames=insn.within_inames,
                                   predicates=insn.predicates))  # type: ignore[arg-type]
        insns.append(insn.copy(expression=value, depends_on=insn.depends_on | {name}))
    knl = knl.copy(instructions=insns, temporary_variables=temps)
    # (a store keeps its dependencies on what it still reads: its address and value)
    writers = knl.writer_map()
    knl = knl.copy(instructions=[insn.copy(depends_on=frozenset(
        d for v in insn.read_dependency_names() for d in writers.get(v, ())))
        if insn.id in stores else insn for insn in knl.instructions])
    # (the stores now read their values and addresses only: what computes no value
    # but the addresses moves after the barrier, with the stores)
    values = {f"{_VALUE}_{s}" for s in stores}
    side = _store_side(knl, stores, values)
    if any(d not in side and d not in values for s in side for d in knl.id_to_insn[s].depends_on):
        # (the lowering computes store addresses from indices and sizes alone; a value
        # computed before the barrier would be stale in the store loop)
        raise RecipeError("recipe 'one-group': a store address depends on an instruction "
                          "that computes a value; this program cannot take one group")
    knl = knl.copy(instructions=[
        insn.copy(depends_on=insn.depends_on | {_BARRIER}) if insn.id in side
        else insn.copy(depends_on=insn.depends_on - side) if insn.id in values
        else insn for insn in knl.instructions])
    # (a barrier of the group, fencing global memory: loads before, stores after)
    barrier = lp.BarrierInstruction(id=_BARRIER, depends_on=frozenset(values),
                                    synchronization_kind="local", mem_kind="global",
                                    within_inames=frozenset())
    knl = knl.copy(instructions=[*knl.instructions, barrier])
    t_unit = t_unit.with_kernel(knl)
    within = " or ".join(f"id:{s}" for s in sorted(side))
    t_unit = lp.duplicate_inames(t_unit, outer, within=within, new_inames=f"{flat}_store")
    if bound // size > UNROLL_MAX:  # (a run plan replayed past the limit)
        return t_unit
    # (unrolled: the private values stay in registers on GPUs)
    return lp.tag_inames(t_unit, {outer: "unr", f"{flat}_store": "unr"})


one_group_writes = Recipe(
    "one-group", _one_group, kind="one_group", version="1",
    params=(Param("group", int, GROUP, "work-items in the one work-group (at most the "
                  "device's maximum)", powers_of_two(32, 1024)),
            # (not searched: it decides which writes take one group, not the code)
            Param("items", int, ITEMS, "elements per work-item, at most, of a write "
                  "taking one group")),
    size_class=Derived(lambda values: _size_class(values["group"])))
