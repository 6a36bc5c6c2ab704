"""fuseloop's own kernel transformations, in Loopy's style.

Each function takes a translation unit, the inames or temporaries it acts on (by name)
and, where it rewrites instructions, ``within``: a Loopy match expression
(``"id:calc_t3 or writes:t4"``, see :func:`loopy.match.parse_match`) that limits it to
the matching instructions (``None``: all).  Each returns a new translation unit and
says in its docstring what it does and when the result is valid.  Recipes compose these
with Loopy's own transformations (``split_iname``, ``tag_inames``,
``split_reduction_outward``, ``add_barrier``, ...); they are here because Loopy has no
equivalent:

* :func:`combine_in_group`: a work-group's partial results combined in two barriers
  (Loopy's own local-parallel reduction is a binary tree of log2(group) barriers);
* :func:`on_every_work_item`: per-row work computed redundantly by every work-item of a
  local axis (Loopy runs instructions outside local loops on every work-item but stores
  from all of them);
* :func:`publish`: a barrier between a local result's writer and its readers;
* :func:`allow_single_writer`: silence Loopy's write-race warning where one work-item writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule, isl, lp, prim

if TYPE_CHECKING:
    from . import row_cache
else:  # (Loopy's mappers, loaded on a cache miss only)
    row_cache = LazyModule(".row_cache", __package__)


def _matcher(within: str | None) -> Any:
    """The predicate ``(kernel, instruction) -> bool`` of a Loopy match expression."""
    return lp.match.parse_match(within)


def combine_in_group(t_unit: lp.TranslationUnit, bounds: Mapping[str, str], group: int,
                     lanes: int, within: str | None = None
                     ) -> tuple[lp.TranslationUnit, set[str]]:
    """Realise the local-parallel reductions over the inames of ``bounds`` in two barriers.

    ``bounds`` maps each local iname of ``group`` work-items (a reduction iname's inner
    part after :func:`loopy.split_iname` and :func:`loopy.split_reduction_outward`) to the
    extent of the reduced range it came from (``j < p``; partials of work-items past it
    read as the operation's neutral value).  For each instruction matched by ``within``
    that assigns such a reduction, single-valued, to a scalar temporary: every
    work-item stores its partial result in local memory; ``lanes`` work-items each
    combine ``group / lanes`` of them (stride ``lanes``: neighbouring work-items read
    neighbouring words); then every work-item combines the ``lanes`` values itself
    (reading the same words: a broadcast) and keeps the result in a private variable.
    Both combining loops (fixed trip counts) are unrolled by the device compiler, not Loopy.
    Returns the new translation unit and the temporaries it handled (others: Loopy's tree).
    """
    lanes = min(lanes, group)
    if lanes <= 0 or group % lanes:
        return t_unit, set()
    per_lane = group // lanes
    knl = t_unit.default_entrypoint
    matches = _matcher(within)
    insns, temps, domains = [], dict(knl.temporary_variables), list(knl.domains)
    new_tags: dict[str, str] = {}
    done: set[str] = set()
    stems: set[str] = set()
    for insn in knl.instructions:
        red: Any = insn.expression if isinstance(insn, lp.Assignment) else None
        target = insn.assignee_var_names()[0] if red is not None else None
        local = (red.inames[0] if isinstance(red, lp.Reduction) and len(red.inames) == 1
                 else None)
        if (local is None or local not in bounds or not matches(knl, insn)
                or red.operation.arg_count != 1
                or target not in temps or temps[target].shape not in ((), None)):
            insns.append(insn)
            continue
        p, dtype = bounds[local], temps[target].dtype
        neutral = row_cache.typed_neutral(red.operation, dtype, t_unit)
        partials, combined = f"part_{target}", f"lanes_{target}"
        stem = local.removesuffix("_inner")
        if stem in stems:  # several reductions walk this loop: inames of their own
            stem = f"{stem}_{target}"
        stems.add(stem)
        lane, k, every, m = f"{stem}_lane", f"{stem}_k", f"{stem}_all", f"{stem}_m"
        temps[partials] = lp.TemporaryVariable(partials, dtype, shape=(group,),
                                               address_space=lp.AddressSpace.LOCAL)
        temps[combined] = lp.TemporaryVariable(combined, dtype, shape=(lanes,),
                                               address_space=lp.AddressSpace.LOCAL)
        domains.append(isl.BasicSet(
            f"{{ [{lane}, {k}] : 0 <= {lane} < {lanes} and 0 <= {k} < {per_lane} }}"))
        domains.append(isl.BasicSet(
            f"{{ [{every}, {m}] : 0 <= {every} < {group} and 0 <= {m} < {lanes} }}"))
        outer = insn.within_inames
        # work-item w has a partial when w < p (Loopy skips the others)
        insns.append(lp.Assignment(
            prim.Variable(partials)[prim.Variable(local)], red.expr,
            id=f"{insn.id}_partial", within_inames=outer | {local},
            depends_on=insn.depends_on))
        slot = prim.Variable(lane) + lanes * prim.Variable(k)
        partial: Any = prim.Variable(partials)[slot]
        if not row_cache.implied(knl, f"{p} >= {group}"):  # some work-items had no element
            partial = prim.If(prim.Comparison(slot, "<", prim.Variable(p)), partial, neutral)
        insns.append(lp.Assignment(
            prim.Variable(combined)[prim.Variable(lane)],
            lp.Reduction(red.operation, (k,), partial),
            id=f"{insn.id}_lanes", within_inames=outer | {lane},
            depends_on=frozenset({f"{insn.id}_partial"})))
        # every work-item computes the row's result: no barrier to publish it
        insns.append(insn.copy(
            expression=lp.Reduction(red.operation, (m,),
                                    prim.Variable(combined)[prim.Variable(m)]),
            within_inames=outer | {every},
            depends_on=insn.depends_on | {f"{insn.id}_lanes"}))
        new_tags |= {lane: "l.0", every: "l.0", k: "unr_hint", m: "unr_hint"}
        done.add(target)
    if not done:
        return t_unit, done
    knl = knl.copy(instructions=insns, temporary_variables=temps, domains=domains)
    return lp.tag_inames(t_unit.with_kernel(knl), new_tags), done


def on_every_work_item(t_unit: lp.TranslationUnit, lane: str, size: int, tag: str,
                       parallel: Iterable[str], within: str | None = None
                       ) -> lp.TranslationUnit:
    """Put the instructions outside the ``parallel`` loops (and not reductions) that
    ``within`` matches in a new loop ``lane`` of ``size``, tagged ``tag``.

    Each work-item along ``lane`` then computes their private values itself (no
    barrier to share them) and only the first (``lane == 0``) stores to global or
    local memory.  Valid when those instructions read only values every work-item
    along ``lane`` holds or can read.
    """
    knl = t_unit.default_entrypoint
    parallel = set(parallel)
    matches = _matcher(within)
    first = prim.Comparison(prim.Variable(lane), "==", 0)
    insns = []
    for insn in knl.instructions:
        if (insn.within_inames & parallel or not matches(knl, insn)
                or (isinstance(insn, lp.Assignment)
                    and isinstance(insn.expression, lp.Reduction))):
            insns.append(insn)
            continue
        targets = insn.assignee_var_names()
        shared = any(t not in knl.temporary_variables
                     or knl.temporary_variables[t].address_space == lp.AddressSpace.LOCAL
                     for t in targets)
        insns.append(insn.copy(within_inames=insn.within_inames | {lane},
                               predicates=insn.predicates | {first} if shared
                               else insn.predicates))
    if all(lane not in insn.within_inames for insn in insns):
        return t_unit
    domain = isl.BasicSet(f"{{ [{lane}] : 0 <= {lane} < {size} }}")
    knl = knl.copy(instructions=insns, domains=[*knl.domains, domain])
    return lp.tag_inames(t_unit.with_kernel(knl), {lane: tag})


def publish(t_unit: lp.TranslationUnit, temporaries: Iterable[str]) -> lp.TranslationUnit:
    """A local barrier between the writes of each of ``temporaries`` and its readers.

    Loopy writes a local-parallel reduction's result from one work-item and does not
    order the other work-items' later reads after it (they would race).
    """
    for name in temporaries:
        knl = t_unit.default_entrypoint
        if any(name in insn.read_dependency_names() and name not in insn.assignee_var_names()
               for insn in knl.instructions):
            t_unit = lp.add_barrier(t_unit, insn_before=f"writes:{name}",
                                    insn_after=f"reads:{name} and not writes:{name}",
                                    synchronization_kind="local", mem_kind="local")
    return t_unit


def allow_single_writer(t_unit: lp.TranslationUnit, insn_ids: Iterable[str]
                        ) -> lp.TranslationUnit:
    """Silence Loopy's write-race warning for instructions ``insn_ids`` (patterns as
    Loopy's ``silenced_warnings`` take them), whose stores one work-item makes."""
    knl = t_unit.default_entrypoint
    return t_unit.with_kernel(knl.copy(silenced_warnings=[
        *knl.silenced_warnings, *(f"write_race({i})" for i in insn_ids)]))
