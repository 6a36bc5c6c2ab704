"""Two repeated pieces of work in Loopy's code generation, done once.

One dataclass per definition in Loopy's code generator, not one per call.

Loopy 2025.2's ``loopy.codegen.control.build_loop_nest`` defines a frozen dataclass
(``ScheduleIndexInfo``: four annotated fields, no methods) in its body, so every call
builds the class again; ``dataclasses`` writes and ``exec``-compiles its ``__init__``,
``__eq__``, ``__hash__``, ``__repr__`` and ``__setattr__`` each time (about 1 ms of
CPU).  Code generation calls it once per loop level and once per unrolled copy of a
loop's body, and those class builds were an eighth of Loopy's code generation time
for every kind of kernel fuseloop makes (a sampling profile over elementwise, row,
column, contraction and stencil kernels).

:func:`install` makes that module's ``dataclass`` decorator return the class it made
for the first definition of the same qualified name, fields and options: the class
body holds annotations only, so every definition's class is the same class.  It
applies to the Loopy version whose code was read for this (``LOOPY_VERSION``) and
leaves any other as it is.

A kernel copied only where a rename touches it.  Loopy 2025.2 renames resolved
functions in every kernel of a translation unit after each type inference
(``TranslationUnit``'s ``finish_program``: the entrypoint's name rolled back) and before
code generation (``diverge_callee_entrypoints``, with nothing to rename where no kernel
calls another), rewriting every instruction, argument and temporary through an
identity mapper even where the kernel calls none of the renamed functions.  Each
rewrite builds a new kernel of new instructions, on which what Loopy memoizes (their
hashes, taken to key its memos) is computed again.  For a 200-operation chain the
three rewrites were a tenth of Loopy's generation time (under cProfile).
:func:`install` makes ``rename_resolved_functions_in_a_single_kernel`` return the
kernel itself where none of its instructions calls a renamed function and it holds no
substitution rules (the rewrite's result is then equal to it), and call Loopy's
function otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

#: the Loopy release whose ``build_loop_nest`` was read (its one nested dataclass)
LOOPY_VERSION = (2025, 2)

_made: dict[tuple, type] = {}
_loopy_rename: list[Callable[..., Any]] = []  # (Loopy's own, once replaced)


def _once_per_definition(cls: Any = None, /, **options: Any) -> Any:
    """``dataclasses.dataclass``, returning one class per (qualified name, fields,
    options) for classes whose bodies hold only annotated fields."""

    def wrap(c: type) -> type:
        own = {k for k in vars(c) if not (k.startswith("__") and k.endswith("__"))}
        if own:  # (methods or defaults: not a plain record; made as written)
            return dataclasses.dataclass(**options)(c)
        key = (c.__module__, c.__qualname__, tuple(c.__annotations__.items()),
               tuple(sorted(options.items())))
        made = _made.get(key)
        if made is None:
            made = _made[key] = dataclasses.dataclass(**options)(c)
        return made

    return wrap if cls is None else wrap(cls)


def _calls_any(kernel: Any, names: Any) -> bool:
    """Whether an instruction of ``kernel`` calls a resolved function named in ``names``
    (its expressions, assignees and predicates, as Loopy's renamer maps them)."""
    from loopy.kernel.instruction import MultiAssignmentBase
    from loopy.kernel.tools import CallablesIDCollector

    collect = CallablesIDCollector()
    wanted = frozenset(names)
    for insn in kernel.instructions:
        if not isinstance(insn, MultiAssignmentBase):
            continue  # (C instructions and no-ops call no resolved function)
        for expr in (insn.expression, *insn.assignees, *insn.predicates):
            if collect(expr) & wanted:
                return True
    return False


def _rename_where_called(kernel: Any, renaming_dict: Any) -> Any:
    """Loopy's ``rename_resolved_functions_in_a_single_kernel``, skipping a kernel it
    would only copy."""
    if kernel.substitutions or (renaming_dict and _calls_any(kernel, renaming_dict)):
        return _loopy_rename[0](kernel, renaming_dict)
    return kernel


def install() -> bool:
    """Use :func:`_once_per_definition` in Loopy's loop-nest code generator and
    :func:`_rename_where_called` for Loopy's renames, if this is the Loopy release they
    were written for; True if they are in place."""
    import loopy
    from loopy import translation_unit
    from loopy.codegen import control

    if tuple(loopy.VERSION[:2]) != LOOPY_VERSION:
        return False
    current: Callable[..., Any] = control.dataclass
    if current is dataclasses.dataclass:
        control.dataclass = _once_per_definition
    elif current is not _once_per_definition:
        return False
    # (a module global to finish_program and imported at call time by
    # diverge_callee_entrypoints: the module's name is the one to replace)
    rename = translation_unit.rename_resolved_functions_in_a_single_kernel
    if rename is not _rename_where_called:
        _loopy_rename[:] = [rename]
        translation_unit.rename_resolved_functions_in_a_single_kernel = _rename_where_called
    return True
