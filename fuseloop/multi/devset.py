"""Device sets: the devices an array is split over, and how many rows each gets."""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError, ShapeError
from ..runtime.devices import Device, find_device

#: measured bandwidths whose largest is at most this many times the smallest count as
#: equal: measurement noise between identical GPUs (a few percent) must not unbalance
#: the parts, since the slowest part sets the time of every split evaluation
EQUAL_WITHIN = 1.15


def _cached_bandwidth(device: Device) -> float | None:
    """The copy bandwidth :func:`fuseloop.explain.copy_bandwidth` measured for ``device``
    in this process, or None (nothing is measured here: measuring takes the device)."""
    explain = sys.modules.get("fuseloop.explain")
    if explain is None:
        return None
    hit = explain._copy_bandwidth.get(device.index)
    return hit[1] if hit is not None and hit[0] is device else None


@dataclass(frozen=True, eq=False)
class DeviceSet:
    """Devices to split arrays over (along the first axis), each with a weight.

    A device may be listed more than once: each entry is a part with buffers of its
    own (on one device they share its queue, so they run one after the other).  Two
    sets are the same set when they list the same devices in the same order; the
    weights only decide how new arrays are split.
    """

    devices: tuple[Device, ...]
    weights: tuple[float, ...]

    @classmethod
    def of(cls, spec: Any, weights: Any = None) -> DeviceSet:
        """The set of ``spec`` (devices, indices or names; or a set) with ``weights``:
        a sequence of positive numbers (used as given), ``"measure"`` (each device's copy
        bandwidth, measured now), or None: the bandwidths :func:`fuseloop.explain`
        measured in this process when there is one for every device, else equal weights.
        Bandwidths (measured now or before) give equal weights when the devices are one
        model (same backend and name) or are within :data:`EQUAL_WITHIN` of each other
        (see :func:`balanced`)."""
        if isinstance(spec, DeviceSet):
            devs = spec.devices
            if weights is None:
                return spec
        else:
            devs = tuple(find_device(s) for s in spec)
        if not devs:
            raise DeviceError("fl.device: the list of devices is empty (no GPU found? "
                              "fl.devices(type='gpu') lists them)")
        if isinstance(weights, str):
            if weights != "measure":
                raise ValueError(f"fl.device: weights must be numbers, 'measure' or None, "
                                 f"not {weights!r}")
            from ..explain import copy_bandwidth

            w = balanced(devs, [copy_bandwidth(d) for d in devs])
        elif weights is None:
            measured = [_cached_bandwidth(d) for d in devs]
            known = [m for m in measured if m is not None]
            w = balanced(devs, known) if len(known) == len(devs) else (1.0,) * len(devs)
        else:
            w = tuple(float(v) for v in weights)
            if len(w) != len(devs) or not all(v > 0 for v in w):
                raise ValueError(f"fl.device: {len(devs)} devices need {len(devs)} positive "
                                 f"weights, got {list(weights)}")
        return cls(devs, w)

    @property
    def key(self) -> tuple[int, ...]:
        """The device indices in order: equal keys, same set."""
        return tuple(d.index for d in self.devices)

    def same(self, other: DeviceSet) -> bool:
        return self is other or self.key == other.key

    @functools.cached_property
    def copies_to_first(self) -> tuple[bool, ...]:
        """Per part, whether its device copies to the first one without the host (the
        first device's backend's ``copies_between``: one device, CUDA peers, OpenCL
        devices of one context); asked once per set, not at every split reduction."""
        from ..backends import backend_for

        first = self.devices[0]
        backend = backend_for(first)
        return tuple(backend.copies_between(first, d) for d in self.devices)

    def split(self, n: int, what: str = "an array") -> tuple[int, ...]:
        """Row bounds of ``n`` rows over the parts, in proportion to the weights (each
        part at least one row)."""
        p = len(self.devices)
        if n < p:
            raise ShapeError(f"cannot split {what} of {n} rows over {p} parts ({self}): "
                             "every part needs at least one row; make it on one device "
                             "(device=...) or use fewer devices")
        total = sum(self.weights)
        bounds = [0]
        acc = 0.0
        for w in self.weights[:-1]:
            acc += w
            bounds.append(round(n * acc / total))
        bounds.append(n)
        for k in range(1, p):  # at least one row each: forwards, then backwards
            bounds[k] = max(bounds[k], bounds[k - 1] + 1)
        for k in range(p - 1, 0, -1):
            bounds[k] = min(bounds[k], bounds[k + 1] - 1)
        return tuple(bounds)

    def __len__(self) -> int:
        return len(self.devices)

    def __str__(self) -> str:
        return "device set (" + ", ".join(f"[{d.index}] {d.name}" for d in self.devices) + ")"


def balanced(devices: Sequence[Device], bandwidths: Sequence[float]) -> tuple[float, ...]:
    """Weights from measured ``bandwidths``: all equal (their mean) when the devices are
    one model or the bandwidths are within :data:`EQUAL_WITHIN` of each other, else the
    bandwidths.  The same model has the same memory system: a difference measured between
    two of them is noise, and following it would make one part, which then sets the
    time, longer than an equal split's."""
    bw = tuple(float(b) for b in bandwidths)
    one_model = len({(d.backend, d.name) for d in devices}) == 1
    if one_model or max(bw) <= EQUAL_WITHIN * min(bw):
        mean = sum(bw) / len(bw)
        return (mean,) * len(bw)
    return bw


def split_bounds(sizes: Sequence[int]) -> tuple[int, ...]:
    """Bounds from part sizes."""
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return tuple(out)
