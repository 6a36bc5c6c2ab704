"""Writes whose value reads elements of the target that other work-items write (issue 26):
up to the one-group limit one launch (values into private memory, a barrier, the
stores), beyond it a temporary and a copy; numpy's results either way."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from launch_counts import counted, launches

import fuseloop as fl
from fuseloop.lower import codegen
from fuseloop.recipe_state import recipe_for
from fuseloop.recipes.one_group import limit


def _limit(device) -> int:
    return limit(recipe_for(device, "one_group").values, device)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_shifts_launch_once_up_to_the_limit(device_path, dtype):
    if dtype == np.float64 and not device_path.has_fp64:
        pytest.skip("no float64 on this device")
    top = _limit(device_path)
    for n in (10, 700, top, top + 1):  # (x[1:] has n - 1 elements)
        h = (np.arange(n) % 97).astype(dtype)
        x = fl.asarray(h)

        def shift(x=x):
            x[1:] = x[:-1] * 2

        launched = launches(shift)
        h[1:] = h[:-1] * 2
        np.testing.assert_array_equal(x.get(), h)
        assert launched == (1 if n - 1 < top else 2), (n, launched)


def test_loops_of_overlapping_statements_launch_once_each(device_path):
    # durbin's reversed update, a row shift in place, floyd_warshall's row update (an
    # element of the written row, broadcast; row k is row i once): one launch a
    # statement, and a few kernels over every length
    n = 150
    rng = np.random.default_rng(3)
    yh = rng.random(n)
    y = fl.asarray(yh)
    misses = 0
    for k in range(1, n):
        def durbin(k=k):
            y[:k] += (0.5 / k) * fl.flip(y[:k])
        done = counted(durbin)
        assert done.launches == 1, k
        misses += done["memory_cache_misses"]
        yh[:k] += (0.5 / k) * np.flip(yh[:k])
    np.testing.assert_allclose(y.get(), yh, rtol=1e-13)
    assert misses <= 3, misses

    ah = rng.random((6, 40))
    a = fl.asarray(ah)
    for i in range(6):
        def row_shift(i=i):
            a[i, 1:] += a[i, :-1]
        assert launches(row_shift) == 1
        ah[i, 1:] += ah[i, :-1]
    np.testing.assert_allclose(a.get(), ah, rtol=1e-14)

    m = 12
    ph = rng.integers(1, 50, (m, m)).astype(np.int32)
    p = fl.asarray(ph)
    for k in range(m):
        for i in range(m):
            def floyd(i=i, k=k):
                p[i, :] = fl.minimum(p[i, :], p[i, k] + p[k, :])
            assert launches(floyd) == 1, (i, k)
            ph[i, :] = np.minimum(ph[i, :], ph[i, k] + ph[k, :])
    np.testing.assert_array_equal(p.get(), ph)


def test_complex_and_bool_targets(device_path):
    h = np.arange(50, dtype=np.complex64) * (1 + 2j)
    x = fl.asarray(h)

    def shift():
        x[1:] = x[:-1] * 2

    assert launches(shift) == 1
    h[1:] = h[:-1] * 2
    np.testing.assert_array_equal(x.get(), h)
    m = np.arange(50) % 3 == 0
    b = fl.asarray(m)

    def negate():
        b[:-1] = ~b[1:]

    assert launches(negate) == 1
    m[:-1] = ~m[1:]
    np.testing.assert_array_equal(b.get(), m)


def test_two_dimensional_and_reversed_targets(device_path):
    for shape in ((30, 40), (60, 60)):  # (60 x 60: several elements per work-item)
        h = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        a = fl.asarray(h)

        def diagonal_shift(a=a):
            a[1:, 1:] = a[:-1, :-1] * 2 + a[1:, 1:]

        def reversed_rows(a=a):
            a[::-1, 2:] = a[:, :-2] - 1

        def transposed(a=a):
            a.T[1:] = a.T[:-1] + a.T[1:]

        for statement in (diagonal_shift, reversed_rows, transposed):
            assert launches(statement) == 1, statement.__name__
        h[1:, 1:] = h[:-1, :-1] * 2 + h[1:, 1:]
        h[::-1, 2:] = h[:, :-2] - 1
        h.T[1:] = h.T[:-1] + h.T[1:]
        np.testing.assert_array_equal(a.get(), h)


def test_a_value_kept_and_a_masked_write(device_path):
    h = np.arange(50.0)
    x = fl.asarray(h)
    value = x[:-1] * 3  # (kept by the caller: computed in the same launch)
    x[1:] = value
    expected = h[:-1] * 3
    h[1:] = expected
    np.testing.assert_array_equal(value.get(), expected)
    np.testing.assert_array_equal(x.get(), h)

    mask = fl.asarray(np.arange(49) % 3 == 0)
    fl.compute(x[:-1] + 1, out=x[1:], where=mask)
    h[1:] = np.where(np.arange(49) % 3 == 0, h[:-1] + 1, h[1:])
    np.testing.assert_array_equal(x.get(), h)


def test_gpu_lowering_has_one_group_and_a_global_fence(device, monkeypatch):
    if device.type != "cpu":
        pytest.skip("presents the CPU device as a GPU")
    # (a compile worker finds no device of that description: builds in this process)
    monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
    monkeypatch.setenv("FUSELOOP_CACHE_DIR", "off")  # (its source is generated here)
    from fuseloop import host_path

    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 0)
    sources: list[str] = []
    plan = codegen.kernel_plan

    def keep(program, *args, **kwargs):
        out = plan(program, *args, **kwargs)
        if program.one_group:
            sources.append(out.source)
        return out

    monkeypatch.setattr(codegen, "kernel_plan", keep)
    # (the CPU device presented as a GPU: the GPU's lowering, run by the CPU's driver)
    gpu = dataclasses.replace(device, index=9134, type="gpu", compute_units=132,
                              max_work_group_size=1024)
    h = np.arange(3000.0, dtype=np.float32)
    with fl.device(gpu):
        x = fl.asarray(h)
        x[1:] = x[:-1] * 0.5
        got = x.get()
    h[1:] = h[:-1] * 0.5
    np.testing.assert_array_equal(got, h)
    assert len(sources) == 1
    source = sources[0]
    assert "reqd_work_group_size(1024, 1, 1)" in source
    assert "barrier(CLK_GLOBAL_MEM_FENCE)" in source
    assert "__restrict__" not in source  # (the output aliases an input)
    store = re.search(r"\bout0\[", source)
    assert store is not None and source.index("barrier(") < store.start()
