"""Operators of two 0-d values on the CPU device (``fuseloop.host_element_ops``): a loop's
elements, values held on the host, Python and numpy scalars, computed by a kept entry
per operation and kinds of operand, with numpy's values and dtypes and no kernel."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import host_eager, host_element_ops


def _elements(m, f64, f32, i32, i64):
    """Elements with elements, held values and scalars: every conversion of the entry
    (an operand kept as it is, a Python scalar as numpy's weak scalar, a dtype cast)."""
    out = []
    for j in range(1, 5):
        s = f64[j] + f64[j - 1]                  # float64 by float64: Python's operator
        out.append(s * 0.5)                      # a held value by a Python float
        out.append(f32[j] * f64[j])              # float32 by float64: the loop's dtype
        out.append(f32[j] - 2)                   # float32 by a Python int: stays float32
        out.append(i32[j] + i32[j - 1])          # int32 by int32: wraps, as numpy's
        out.append(i32[j] // 3)                  # int32 by a Python int
        out.append(i64[j] % i32[j])              # int64 by int32
        out.append(np.float32(1.5) * f32[j])     # a numpy scalar
        out.append(i32[j] > i32[j - 1])          # a comparison (Python's max asks it)
        out.append(max(i32[j], i32[j - 1] + i32[j]))
    return out


def test_two_elements_are_computed_by_the_kept_entry(host, monkeypatch):
    rng = np.random.default_rng(2)
    ins = (rng.random(6), rng.random(6).astype(np.float32),
           np.array([1, 2 ** 30, -5, 2 ** 31 - 1, 9, 11], np.int32),
           np.arange(7, 13, dtype=np.int64))
    with np.errstate(all="ignore"):
        want = _elements(np, *ins)
    arrs = [fl.asarray(x) for x in ins]
    _elements(fl, *arrs)  # (the entries made, the elements' views kept)
    fl.synchronize()
    fl.reset_stats()
    # (every operation here by host_element_ops: host_eager's general steps unused)
    monkeypatch.setattr(host_eager, "compute", lambda *a: pytest.fail("general steps"))
    got = _elements(fl, *arrs)
    assert fl.stats()["kernels_launched"] == 0
    for g, w in zip(got, want):
        gv = g.get() if isinstance(g, fl.Array) else g
        assert np.asarray(gv).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(gv, w)
    assert len(host_element_ops._entries) >= 9


def test_an_element_written_by_a_kernel_is_read_after_it(host):
    """An element's value is read once the device's queue is finished (a kernel's
    write before it is seen)."""
    x = fl.asarray(np.arange(8.0))
    x[1] + x[2]  # (the views kept)
    x[...] = fl.asarray(np.full(8, 3.0)) * 2  # (a kernel, maybe still running)
    assert float(x[1] + x[2]) == 12.0


def test_a_division_by_zero_is_numpys(host):
    """float64's entry uses Python's operator, which raises on a division by zero: the
    general steps then give numpy's inf and NaN."""
    x = fl.asarray(np.array([1.0, 0.0, -2.0]))
    for _ in range(2):
        got = [float(x[k] / x[1]) for k in range(3)]
    np.testing.assert_array_equal(got, [np.inf, np.nan, -np.inf])
