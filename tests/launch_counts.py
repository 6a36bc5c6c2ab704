"""What one call does, counted through ``fl.stats()``: kernel launches, compiles, scans
(shared by the tests that assert launch or compile counts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

import fuseloop as fl

T = TypeVar("T")


@dataclass(frozen=True)
class Counted(Generic[T]):
    """A call's value and how much each of fuseloop's counters grew during it."""

    value: T
    counts: dict[str, int]

    @property
    def launches(self) -> int:
        return self.counts["kernels_launched"]

    @property
    def compiles(self) -> int:
        return self.counts["kernels_compiled"]

    def __getitem__(self, counter: str) -> int:
        return self.counts[counter]


def counted(fn: Callable[[], T], *, warm: bool = False) -> Counted[T]:
    """``fn()``'s value and counts.  Every device's work is finished before and after
    the call, so launches a device deferred count with the call that made them; the
    counters are not reset (a test may count around several calls).  With ``warm``,
    ``fn`` runs once first, uncounted: its kernels and plans are built and cached."""
    if warm:
        fn()
    fl.synchronize()
    before = fl.stats()
    value = fn()
    fl.synchronize()
    after = fl.stats()
    return Counted(value, {name: after[name] - before[name] for name in after})


def launches(fn: Callable[[], Any], *, warm: bool = False) -> int:
    """Kernels ``fn()`` launched (after a first, uncounted call with ``warm``)."""
    return counted(fn, warm=warm).launches


def launches_and_result(make: Callable[[], Any]) -> tuple[int, np.ndarray]:
    """Kernels launched evaluating the array ``make()`` returns, and its values."""
    done = counted(lambda: make().eval())
    return done.launches, done.value.get()
