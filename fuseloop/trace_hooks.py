"""What the array layer knows of ``fl.fuse`` traces (:mod:`fuseloop.tracing`), kept
apart so that :mod:`fuseloop.array` and :mod:`fuseloop.assignment` need not import it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

# checks of the traces in progress: each is called as check(array, what) before an
# array's value is read or an array is assigned into (see fuseloop.tracing.Trace.check),
# and raises for a traced value; empty (the common case) costs one truth test
trace_checks: list[Callable[[Any, str], None]] = []


# the traces in progress note every buffer allocated while they run (see
# fuseloop.tracing._watch); each of these is called as note(buffer, contents) with a new
# buffer whose contents no argument decides (a fill, a copy of host data), which a
# recorded launch may then read as a constant of the function; ``contents`` (a
# :class:`Contents`, or None) says how to make them again in a call's own buffer, which
# lets the function write into the array (fl.zeros, then ``out[idx] += v``)
constant_buffers: list[Callable[[Any, Any], None]] = []


class Contents(NamedTuple):
    """How a new buffer's contents were made: a fill with ``pattern`` (one element's
    bytes), a copy of ``host``, or neither (``fl.empty``'s: nothing to make again)."""

    pattern: np.ndarray | None = None
    host: np.ndarray | None = None


def constant_contents(buffer: Any, contents: Contents | None = None) -> None:
    for note in constant_buffers:
        note(buffer, contents)


def by_traced_code() -> bool:
    """Whether the caller of the creation function calling this is outside fuseloop (the
    traced function's own ``fl.empty``, not one of fuseloop's operations, whose new
    buffers may be written by kernels a trace does not record: a sort's, a QR's)."""
    frame = sys._getframe(2)
    while frame is not None and os.path.basename(frame.f_code.co_filename) in _CREATION:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return False
    folder = os.path.dirname(os.path.abspath(frame.f_code.co_filename))
    return folder != _PACKAGE_DIR and not folder.startswith(_PACKAGE_DIR + os.sep)


# (the creation functions and their decorators' wrappers)
_CREATION = ("creation.py", "multi_hooks.py")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


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
