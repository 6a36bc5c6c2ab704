"""Free keys: a run plan's signed key with its lengths as symbols (``plan_free``), as
``run_plans`` looks its plans up at any lengths (issue 26).

A free key holds a number standing for ``plan_free.free_of``'s tokens, not the tokens:
its look-up, at every statement of a loop over lengths, then hashes a few numbers, not
the structure's tokens (1.4 us a statement on this CPU).  The number is found by the
tokens' identity while ``free_of``'s memo keeps them (one object per signatures), by
their value otherwise; numbers are never reused (old free keys just miss)."""

from __future__ import annotations

import itertools

from . import plan_free as _free_sigs
from .expr.ir import INT32_LIMIT

# free_of's tokens (one object per signatures while its memo keeps them), by id -> (them,
# their number); tokens -> number: a free key holds the number, so its look-up hashes a
# few numbers, not the structure's tokens (a loop over lengths looks one up every
# statement)
_toks_ids: dict[int, tuple[tuple, int]] = {}
_numbers: dict[tuple, int] = {}
_counted = itertools.count()


def _number(toks: tuple) -> int:
    known = _toks_ids.get(id(toks))
    if known is not None and known[0] is toks:
        return known[1]
    if len(_toks_ids) >= _free_sigs.FREE_MAX:
        _toks_ids.clear()
        if len(_numbers) >= _free_sigs.FREE_MAX:
            _numbers.clear()  # (numbers are never reused: old free keys just miss)
    n = _numbers.get(toks)
    if n is None:
        n = _numbers[toks] = next(_counted)
    _toks_ids[id(toks)] = (toks, n)
    return n


# (signed key, output shape) -> free_key's answer: a loop over lengths meets each
# signed key again every pass (bounded as plan_free's memo is)
_memo: dict[tuple, tuple[tuple, tuple[int, ...]] | None] = {}


def free_key(signed: tuple, out_shape: tuple[int, ...]
             ) -> tuple[tuple, tuple[int, ...]] | None:
    """The free key of ``signed`` (``signed_keys._signed_key``'s answer) and its lengths,
    or None (fields not known; past int32, where the walk keeps the lengths)."""
    key = signed[0]
    got = _memo.get((key, out_shape), _memo)
    if got is not _memo:
        return got  # type: ignore[return-value]
    sigs, joins = key[1], None
    if type(sigs) is int:
        sigs = (sigs,)
    elif type(sigs[0]) is tuple:  # (several roots, where their offsets land)
        sigs, joins = sigs
    free = _free_sigs.free_of(sigs, out_shape)
    answer = None if free is None or free[2] > INT32_LIMIT else (
        (key[0], _number(free[0]), joins, *key[3:]), free[1])
    if len(_memo) >= _free_sigs.FREE_MAX:
        _memo.clear()
    _memo[(key, out_shape)] = answer
    return answer


def clear() -> None:
    _memo.clear()
    _toks_ids.clear()
    _numbers.clear()
