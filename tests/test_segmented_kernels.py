"""fuseloop's own segmented-scan kernels (``fuseloop.ops.segmented_kernels``), which the
scans by key use on CUDA devices, run here on every device against a sequential numpy
scan (the layouts made small so that several tiles, and several tiles per work-item
in the carry kernel, are exercised)."""

from __future__ import annotations

import numpy as np

from fuseloop.ops import segmented as sg
from fuseloop.ops import segmented_kernels as sk

_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reference(keys, values, op, exclusive, initial, dtype):
    f = _UFUNCS[op]
    out = np.empty(len(keys), dtype)
    run = None
    for i, v in enumerate(values.astype(dtype)):
        start = i == 0 or keys[i] != keys[i - 1]
        if exclusive:
            out[i] = initial if start else f(dtype.type(initial), run)
        run = v if start else f(run, v)
        if not exclusive:
            out[i] = run
    return out


def test_segmented_scan_kernels_match_a_sequential_scan(device, monkeypatch):
    # 167 tiles of 12 elements: 42 tiles per work-item in the carry kernel
    monkeypatch.setattr(sk, "layout_for", lambda dev: (4, 3))
    rng = np.random.default_rng(4)
    n = 2001
    keys = np.repeat(rng.integers(0, 4, n), rng.integers(1, 30, n))[:n]
    floats = rng.standard_normal(n)
    if not device.has_fp64:
        floats = floats.astype(np.float32)
    floats[[5, 900]] = np.nan  # (max and min propagate NaN, as numpy's maximum)
    # (integers and min differ only in the operator's C expression)
    cases = [("add", floats, False, 0), ("max", floats.astype(np.float32), True, -1.5)]
    for op, values, exclusive, initial in cases:
        k, v = sg._prepare("test", keys, values, op)
        rdt = sg._result_dtype(op, v.dtype)
        sdt = sg._scan_dtype(rdt)
        got = sk.scan(sg._concrete(k), sg._concrete(v), op, sdt, exclusive,
                      sdt.type(initial)).get()
        want = _reference(keys, values, op, exclusive, initial, sdt)
        np.testing.assert_allclose(got, want, rtol=1e-12 if sdt == np.float64 else 1e-5,
                                   err_msg=f"{op} {values.dtype} exclusive={exclusive}")
