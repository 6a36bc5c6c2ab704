"""A lazy call's build as a look-up (issue 25): argmax and argmin called again as written
find their template by the call's arguments (``expr.templates.call_key``), as the other
reductions do; numpy's answer now still wins where it applies (a concrete array on the
CPU device), and the one-pass mode is part of the call's key."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.ops import reductions


def _counted(monkeypatch) -> list:
    """The calls of the full arg-reduction build (``reductions._arg_extreme``) made."""
    seen: list = []
    real = reductions._arg_extreme
    monkeypatch.setattr(reductions, "_arg_extreme",
                        lambda *a, **k: seen.append(a[1:4]) or real(*a, **k))
    return seen


@pytest.mark.parametrize("name,axis,keepdims", [
    ("argmax", 1, False), ("argmin", 0, False), ("argmax", None, False),
    ("argmin", -1, True)])
def test_arg_reduction_by_call_copies_its_template(device, monkeypatch, name, axis,
                                                   keepdims):
    rng = np.random.default_rng(5)
    hs = [rng.integers(-4, 5, (7, 9)).astype(np.float32) for _ in range(4)]  # (ties)
    seen = _counted(monkeypatch)
    for k, h in enumerate(hs):
        x = fl.asarray(h, device=device)
        got = getattr(fl, name)(x * 2.0 - 1.0, axis=axis, keepdims=keepdims)
        want = getattr(np, name)(h * np.float32(2.0) - np.float32(1.0), axis=axis,
                                 keepdims=keepdims)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.get(), want)
        if k == 1:
            made = len(seen)
    assert len(seen) == made, "the third call on built the arg-reduction again"


def test_arg_reduction_call_key_holds_the_one_pass_mode(device, monkeypatch):
    h = np.arange(24, dtype=np.float32).reshape(4, 6)[::-1].copy()
    x = fl.asarray(h, device=device)
    seen = _counted(monkeypatch)
    for mode in ("1", "1", "1", "0", "0", "0", "1", "0"):
        monkeypatch.setattr(reductions, "ARG_ONE_PASS", mode)
        np.testing.assert_array_equal(fl.argmax(x + 0.0, axis=1).get(), h.argmax(axis=1))
    # (each mode's template recorded when met a second time, then copied; met again
    # after the other mode: copied still, the other's call key told apart)
    assert len(seen) == 4, seen


def test_concrete_array_on_the_cpu_keeps_numpy_now(device, monkeypatch):
    if device.type != "cpu":
        pytest.skip("numpy computes arg-reductions now on the CPU device only")
    h = np.random.default_rng(1).random((8, 8), dtype=np.float32)
    x = fl.asarray(h, device=device)
    for _ in range(3):
        fl.argmax(x + 0.0, axis=0)  # (a lazy argument: its template recorded and copied)
    seen = _counted(monkeypatch)
    for _ in range(2):
        np.testing.assert_array_equal(fl.argmax(x, axis=0).get(), h.argmax(axis=0))
    assert len(seen) == 2  # (the full path, which computes it with numpy now)


def test_tuple_axes_make_call_keys_of_python_ints_only(device):
    x = fl.asarray(np.ones((2, 3, 4), np.float32), device=device) * 1.0
    assert reductions._call("sum", x, (0, 2), None, False) is not None
    assert reductions._call("sum", x, (), None, False) is not None
    for axes in ((0, True), (0, np.int64(2)), (0.0, 1)):
        assert reductions._call("sum", x, axes, None, False) is None
    np.testing.assert_array_equal(fl.sum(x, axis=(0, np.int64(2))).get(), np.full(3, 8))
