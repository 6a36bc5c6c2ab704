"""Host timestamps of a split evaluation's steps, for finding what serialises the parts
(``benchmarks/bench_multigpu.py --trace``): when each part's launch was enqueued and
submitted, when each part's read was enqueued and when it was done."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: the list events go to while :func:`tracing` is active (None: nothing is recorded)
events: list[tuple[str, int, int, float]] | None = None


def note(what: str, part: int, device: Any) -> None:
    """Record ``(what, part, device index, time.perf_counter())`` if tracing."""
    if events is not None:
        events.append((what, part, device.index, time.perf_counter()))


@contextmanager
def tracing() -> Iterator[list[tuple[str, int, int, float]]]:
    """Within it, split launches and reads append their events to the list it yields:
    ``"staging begun"`` (part -1: a split call's known parts about to be staged),
    ``"enqueue begun"`` (a staged part's first enqueue about to be made), ``"enqueued"``
    (a part's kernels enqueued and its queue submitted), ``"read
    enqueued"``, ``"read done"``, ``"combined"`` (part -1: a reduction's partials
    combined on the host); a split stencil's phases (part -1): ``"halos
    enqueued"`` (every halo's copy or read under way), ``"parts built"`` (every part's
    expression made), ``"halos uploaded"`` (the reads through the host waited for and
    uploaded)."""
    global events
    saved = events
    mine: list[tuple[str, int, int, float]] = []
    events = mine
    try:
        yield mine
    finally:
        events = saved
