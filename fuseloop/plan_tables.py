"""The bounded tables of :mod:`fuseloop.run_plans`: how an entry is kept and dropped.

Recorded plans (``run_plans._plans``) are kept least recently used: a miss there
records again.  The tables whose entries a miss remakes without recording (a key's
plans at other lengths, plans by signature and the signatures looked up) take a new
entry, once full, as their least recently used, and one in ``MOST_RECENT_EVERY`` as
their most recent (*bimodal insertion*).  A loop that cycles through more entries than
a table holds (covariance's rows: two statements at each of 1400 lengths) would, under
least-recently-used eviction, drop each entry just before its next use and remake every
one on every pass; so the table keeps those it met first, the rest pass through one
slot, and a new working set still takes the table over, one in ``MOST_RECENT_EVERY``
misses at a time.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MOST_RECENT_EVERY = 32
_inserted = [0]  # (new entries of full tables so far: every MOST_RECENT_EVERY-th is recent)


def touch(table: OrderedDict, key: Any) -> None:
    """``key`` is now the most recently used of ``table``."""
    try:
        table.move_to_end(key)
    except KeyError:  # (another thread dropped it meanwhile)
        pass


def _drop_beyond(table: OrderedDict, bound: int) -> None:
    while len(table) > bound:
        try:
            table.popitem(last=False)
        except KeyError:  # (emptied by another thread)
            break


def keep(table: OrderedDict, key: Any, value: Any, bound: int) -> None:
    """``table[key] = value``, the least recently used dropped beyond ``bound``."""
    table[key] = value
    touch(table, key)
    _drop_beyond(table, bound)


def admit(table: OrderedDict, key: Any, value: Any, bound: int) -> None:
    """``table[key] = value`` by bimodal insertion (see the module docstring), at most
    ``bound`` kept."""
    if len(table) < bound or key in table:
        table[key] = value
        return
    _drop_beyond(table, bound - 1)
    table[key] = value
    _inserted[0] += 1
    if _inserted[0] % MOST_RECENT_EVERY:
        try:
            table.move_to_end(key, last=False)  # (the next to go)
        except KeyError:  # (another thread dropped it meanwhile)
            pass
