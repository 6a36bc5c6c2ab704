"""What one call does, counted: kernel launches, compiles, scans through ``fl.stats()``,
and calls of one of fuseloop's functions (shared by the tests that assert such counts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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


def launches_and_result(make: Callable[[], Any]) -> tuple[int, Any]:
    """Kernels launched computing and reading the array ``make()`` returns (or each of a
    tuple of them), and its values (a tuple of values) in numpy arrays."""

    def computed() -> Any:
        got = make()
        return tuple(g.get() for g in got) if isinstance(got, tuple) else got.get()

    done = counted(computed)
    return done.launches, done.value


def calls_of(monkeypatch: Any, module: Any, name: str) -> list[tuple]:
    """A list that gets an entry (the positional arguments) per call of ``module.name``,
    which still runs, until ``monkeypatch`` undoes it."""
    calls: list[tuple] = []
    real = getattr(module, name)

    def counted_call(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted_call)
    return calls
