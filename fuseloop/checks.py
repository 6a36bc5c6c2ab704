"""In-kernel checks (Stan's ``check_cl``): ``fl.check`` and its named helpers.

A check is ``where(probe, x, x)``: the value unchanged, but read after ``probe``, a
bounds-checked gather from a one-element axis: where the condition holds, element
``i`` reads position 0; where it fails, position ``1 + i``, out of range, so the
kernel's gather error flag (:mod:`fuseloop.flags`) records the check's
code, ``1 + i`` and the axis length 1.  No second pass, no new kernel machinery: the
evaluation fails after the kernel, and outputs of ``out[...] =`` / ``out=`` are left
untouched, as for any gather that may fail (``evaluate.run_unplanned`` computes into
temporaries first).

The code (``CHECK_CODE_BASE`` plus a hash of the message) is part of the kernel,
so one message compiles once; the message is found again by the code.
"""

from __future__ import annotations

import string
import zlib
from collections import OrderedDict
from typing import Any

import numpy as np

from .errors import CheckError, DTypeError
from .expr.nodes import Gather, Iota, Node
from .flags import CHECK_CODE_BASE  # (flag codes from it up are checks')

_INT64, _BOOL = np.dtype(np.int64), np.dtype(np.bool_)
FIELDS = frozenset({"i", "value"})
_messages: dict[int, str] = {}
# code -> the flat checked value of the latest check with that message, read on the
# host when the check fails to name {value} (only kept when the message names it;
# bounded, as each holds its expression's buffers)
_values: OrderedDict[int, Node] = OrderedDict()
VALUES_KEPT = 32


def _fields(message: str) -> set[str]:
    try:
        parsed = list(string.Formatter().parse(message))
    except ValueError as exc:
        raise ValueError(f"fl.check: malformed message {message!r}: {exc}") from None
    names = {name for _, name, _, _ in parsed if name is not None}
    unknown = names - FIELDS
    if unknown:
        raise ValueError(
            f"fl.check: unknown field(s) {', '.join(sorted('{' + n + '}' for n in unknown))} "
            f"in message {message!r}; the fields are {{i}} (the flat index) and {{value}} "
            "(the offending value); write '{{' and '}}' for literal braces")
    return names


def check(x: Any, cond: Any = None, message: str | None = None) -> Any:
    """``x``, failing the evaluation where ``cond`` is false (Stan's ``check_cl``).

    ``fl.check(x, x > 0, "x[{i}] = {value} is not positive")`` returns ``x``
    unchanged, in the same kernel as what reads it; an element where ``cond`` (a
    boolean expression broadcasting to ``x``) is false raises :class:`CheckError`
    after that kernel ran, its message formatted with ``{i}`` (an offending flat
    index) and ``{value}`` (``x`` there).  ``fl.check(cond, message)`` checks a
    boolean expression itself and returns it.
    """
    from .array import Array
    from .creation import asarray
    from .ops.shape import broadcast_to, reshape
    from .ufuncs import where

    if isinstance(cond, str) and message is None:
        cond, message = x, cond
    if message is None:
        message = "check failed at index {i}: value {value}"
    if not isinstance(message, str):
        raise TypeError(f"fl.check: the message must be a str, got {type(message).__name__}")
    names = _fields(message)
    x = x if isinstance(x, Array) else asarray(x)
    cond = cond if isinstance(cond, Array) else asarray(cond, device=x.device)
    if cond.dtype != np.bool_:
        raise DTypeError(f"fl.check: the condition must be boolean, got {cond.dtype} "
                         "(write a comparison, e.g. x > 0)")
    code = CHECK_CODE_BASE + zlib.crc32(message.encode())
    _messages[code] = message
    if "value" in names:
        _values[code] = reshape(x, (x.size,))._node
        _values.move_to_end(code)
        while len(_values) > VALUES_KEPT:
            _values.popitem(last=False)
    # a probe of x's shape: position 0 of a one-element axis where the condition holds,
    # 1 + the flat index where it fails (out of range: the flag records it)
    at = Array._lazy(Iota(x.shape, _INT64), x.device)
    index = where(broadcast_to(cond, x.shape), 0, at + 1)
    probe = Array._lazy(Gather(Iota((1,), _BOOL), index._node, 0, checked=code), x.device)
    return where(probe, x, x)


def _escape(name: str) -> str:
    return name.replace("{", "{{").replace("}", "}}")


def check_finite(x: Any, name: str = "x") -> Any:
    """``x``, failing where it is NaN or infinite (Stan's ``check_finite``)."""
    from .ufuncs import FUNCTIONS

    n = _escape(name)
    return check(x, FUNCTIONS["isfinite"](x), f"{n} is not finite: {n}[{{i}}] = {{value}}")


def check_positive(x: Any, name: str = "x") -> Any:
    """``x``, failing where it is not > 0 (NaN included; Stan's ``check_positive``)."""
    n = _escape(name)
    return check(x, x > 0, f"{n} is not positive: {n}[{{i}}] = {{value}}")


def check_nonnegative(x: Any, name: str = "x") -> Any:
    """``x``, failing where it is not >= 0 (NaN included; Stan's ``check_nonnegative``)."""
    n = _escape(name)
    return check(x, x >= 0, f"{n} is negative: {n}[{{i}}] = {{value}}")


def check_bounded(x: Any, low: Any, high: Any, name: str = "x") -> Any:
    """``x``, failing where it is outside ``[low, high]`` (Stan's ``check_bounded``)."""
    n = _escape(name)
    return check(x, (x >= low) & (x <= high),
                 f"{n} is not in [{_escape(str(low))}, {_escape(str(high))}]: "
                 f"{n}[{{i}}] = {{value}}")


def failure(code: int, raw: int, size: int) -> CheckError:
    """The error of a failed check whose flag holds ``code``, ``raw`` = ``size`` (1)
    + the flat index."""
    message = _messages.get(code, "check failed at index {i}: value {value}")
    index = raw - size
    value: Any = "?"
    node = _values.get(code)
    if node is not None and "{value" in message and 0 <= index < node.shape[0]:
        value = _value_at(node, index)
    try:
        text = message.format(i=index, value=value)
    except (ValueError, IndexError, KeyError):  # a format spec that '?' cannot take
        text = message.format(i=index, value="?") if "{value}" in message else message
    err = CheckError(text)
    err.index, err.value = index, value
    return err


def _value_at(node: Node, index: int) -> Any:
    """The element ``index`` of the flat expression ``node``: its inputs are as the
    failed kernel read them, as nothing was written."""
    from .array import Array
    from .runtime.devices import get_device

    try:
        devices = {s.device for s in node.storages}
        device = next(iter(devices)) if devices else get_device()
        return Array._lazy(node, device)[index].get().item()
    except Exception:  # (a nested check failing too, a freed device: no value to name)
        return "?"
