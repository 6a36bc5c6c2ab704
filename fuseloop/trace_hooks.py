"""What the array layer knows of ``fl.fuse`` traces (:mod:`fuseloop.tracing`), kept
apart so that :mod:`fuseloop.array` and :mod:`fuseloop.assignment` need not import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# checks of the traces in progress: each is called as check(array, what) before an
# array's value is read or an array is assigned into (see fuseloop.tracing.Trace.check),
# and raises for a traced value; empty (the common case) costs one truth test
trace_checks: list[Callable[[Any, str], None]] = []


# the traces in progress note every buffer allocated while they run (see
# fuseloop.tracing._watch); each of these is called with a new buffer whose contents no
# argument decides (a fill, a copy of host data), which a recorded launch may then read
# as a constant of the function
constant_buffers: list[Callable[[Any], None]] = []


def constant_contents(buffer: Any) -> None:
    for note in constant_buffers:
        note(buffer)


def check_traced(a: Any, what: str) -> None:
    for check in trace_checks:
        check(a, what)


class ScalarStandIn:
    """Base of the stand-ins ``fl.fuse`` traces scalar arguments with
    (:class:`fuseloop.tracing.TracedScalar`): an operand of kind ``kind`` (a Python
    scalar type, weak as NEP 50 has it, or a dtype) whose node for a loop dtype is
    ``node_for(dtype)``."""

    __slots__ = ()
    kind: Any

    def node_for(self, dtype: np.dtype) -> Any:
        raise NotImplementedError
