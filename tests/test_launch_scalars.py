"""Launches with many scalar arguments (``backends.base.scalars_at_once``): those whose
value object changed are picked in one C pass, the rest left as the kernel object holds
them; results stay numpy's whatever changes from call to call."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import fuseloop as fl

COEFFS = [0.5 / (k + 1) * (-1) ** k for k in range(16)]


def _poly(x, cs):
    r = x * cs[0] + cs[1]
    for c in cs[2:]:
        r = r * x + c
    return r


def test_changed_scalars_among_many_are_set(device_path):
    # one structure, its scalars changing one or several at a time between launches,
    # zeros of both signs among them (never remembered as weak scalars: new objects)
    xh = np.linspace(-1, 1, 1000, dtype=np.float32)
    x = fl.asarray(xh)
    variants = [COEFFS, [*COEFFS[:5], 3.0, *COEFFS[6:]], COEFFS,
                [-0.0, *COEFFS[1:15], 0.0], [0.0, *COEFFS[1:15], -0.0],
                [c * 2 for c in COEFFS], COEFFS]
    for cs in variants:
        got = (_poly(x, cs) / cs[-1]).get()
        want = _poly(xh, [np.float32(c) for c in cs]) / np.float32(cs[-1])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_unchanged_scalars_are_not_checked_one_by_one(device_path):
    # a launch whose 17 scalars are the same objects as the last launch's runs a few
    # lines of its launcher, not a Python check per scalar
    if device_path.backend != "opencl":
        pytest.skip("OpenCL launchers")
    x = fl.asarray(np.linspace(-1, 1, 1000, dtype=np.float32))
    for _ in range(3):
        _poly(x, COEFFS).eval()
        fl.synchronize()
    lines = [0]

    def tracer(frame, event, arg):
        if frame.f_code.co_name not in ("go", "go_many", "go_scalars"):
            return None
        if event == "line":
            lines[0] += 1
        return tracer

    r = _poly(x, COEFFS)
    sys.settrace(tracer)
    try:
        r.eval()
        fl.synchronize()
    finally:
        sys.settrace(None)
    assert 0 < lines[0] <= 20, lines[0]
