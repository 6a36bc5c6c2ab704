"""What a GPU's host asks per small statement (issue 26): the CPU host path's tests are
for a host device, and a statement on a GPU does not take them up (``A[i, j] += A[i, j -
1]``'s 0-d operation asks no operand's kind, its assignment no host-path eligibility,
``path[i, :] = e`` no host write), with numpy's results."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import array as array_module
from fuseloop import host_ops, host_path
from fuseloop.ops import indexing


@pytest.fixture
def gpu(device, monkeypatch):
    """``device`` presented as a GPU (its kernels under the GPU's rules, on PoCL), the
    default device for the test, with the host path's default limit (a GPU's host runs
    with it on: the tests run with ``FUSELOOP_HOST_PATH=0``)."""
    if device.type != "cpu":
        pytest.skip("presents the CPU device as a GPU")
    monkeypatch.setattr(host_path, "HOST_MAX_WORK", 4096)
    # (a compile worker finds no device of that description: builds in this process)
    monkeypatch.setenv("FUSELOOP_COMPILE", "inline")
    fake = dataclasses.replace(device, index=9134, type="gpu", compute_units=132,
                               max_work_group_size=1024)
    with fl.device(fake):
        yield fake
        fl.synchronize()


@pytest.fixture
def asked(monkeypatch):
    """Counts the calls of the host path's per-operand and per-evaluation tests."""
    counts = {"_kind": 0, "eligible": 0, "_eager_setitem": 0, "host_assign": 0}

    def counter(module, name):
        original = getattr(module, name)

        def counted(*args):
            counts[name] += 1
            return original(*args)
        monkeypatch.setattr(module, name, counted)

    counter(host_ops, "_kind")
    counter(host_path, "eligible")
    counter(array_module, "_eager_setitem")
    counter(indexing, "host_assign")
    return counts


def test_element_statements_on_a_gpu_ask_no_host_tests(gpu, asked):
    ah = np.random.default_rng(2).random((6, 7))
    a = fl.asarray(ah)
    want = ah.copy()
    for i in range(1, 6):
        for j in range(1, 7):
            a[i, j] += a[i, j - 1]
            want[i, j] += want[i, j - 1]
    np.testing.assert_allclose(a.get(), want, rtol=1e-13)
    # (the first statements take evaluate.run, which asks once; the replays never)
    assert asked["_kind"] == 0 and asked["eligible"] <= 2, asked
    assert asked["_eager_setitem"] == 0, asked


def test_row_statements_on_a_gpu_ask_no_host_writes(gpu, asked):
    # floyd_warshall's row statement: a value assigned into a row view
    ph = np.random.default_rng(4).integers(1, 50, (8, 8)).astype(np.int32)
    path = fl.asarray(ph)
    want = ph.copy()
    for k in range(8):
        for i in range(8):
            path[i, :] = fl.minimum(path[i, :], path[i, k] + path[k, :])
            want[i, :] = np.minimum(want[i, :], want[i, k] + want[k, :])
    np.testing.assert_array_equal(path.get(), want)
    assert asked["_eager_setitem"] == 0 and asked["host_assign"] == 0, asked


def test_zero_d_operations_on_a_gpu_ask_no_operand_kinds(gpu, asked):
    xh = np.arange(1.0, 9.0)
    x = fl.asarray(xh)
    s = fl.asarray(np.float64(0))
    for i in range(8):
        s = s + x[i] * 0.5
    assert float(s) == xh.sum() * 0.5
    assert asked["_kind"] == 0, asked
