"""The bounded tables of :mod:`fuseloop.run_plans`: how an entry is kept and dropped.

A full table drops its least recently used entry.  Where a table's entries come in
groups (a key's plans at other lengths: the key), a new entry whose group had entries
dropped before, which a loop over more of them than the table holds does, enters as
the least recently used, and one in ``MOST_RECENT_EVERY`` as the most recent (bimodal
insertion): under plain least-recently-used eviction such a loop (covariance's rows:
two statements at each of 1400 lengths) drops each entry just before its next use and
remakes every one on every pass, while so it keeps those it met first and remakes
only the rest.  A group with nothing dropped (a new loop) enters as the most recent,
so a new working set takes the table over at once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MOST_RECENT_EVERY = 32
_inserted = [0]  # (entries of dropped groups admitted so far: every 32nd as most recent)


def touch(table: OrderedDict, key: Any) -> None:
    """``key`` is now the most recently used of ``table``."""
    try:
        table.move_to_end(key)
    except KeyError:  # (another thread dropped it meanwhile)
        pass


def keep(table: OrderedDict, key: Any, value: Any, bound: int) -> None:
    """``table[key] = value``, the least recently used dropped beyond ``bound``."""
    table[key] = value
    touch(table, key)
    while len(table) > bound:
        try:
            table.popitem(last=False)
        except KeyError:  # (emptied by another thread)
            break


def admit(table: OrderedDict, key: tuple, value: Any, bound: int,
          dropped: OrderedDict) -> None:
    """``table[key] = value``, the group of each entry ``key[0]``, at most ``bound``
    kept; ``dropped``: the groups (at most ``bound``) whose entries were dropped (see
    the module docstring)."""
    while len(table) >= bound and key not in table:
        try:
            gone = table.popitem(last=False)[0]
        except KeyError:  # (emptied by another thread)
            break
        keep(dropped, gone[0], True, bound)
    table[key] = value
    if key[0] in dropped:
        _inserted[0] += 1
        if _inserted[0] % MOST_RECENT_EVERY:
            try:
                table.move_to_end(key, last=False)  # (the next to go)
            except KeyError:  # (another thread dropped it meanwhile)
                pass
