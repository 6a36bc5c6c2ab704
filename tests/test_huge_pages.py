"""Huge pages under a CPU device's large buffers (fuseloop.runtime.huge_pages): the policy
read from sysfs, the advice's range, and the buffers advised (new ones, once)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.backends import backend_for
from fuseloop.runtime import devices, huge_pages
from fuseloop.runtime.memory import DeviceMemory

MIB = 1 << 20


def _thp(tmp_path, enabled, own=None):
    (tmp_path / "enabled").write_text(enabled + "\n")
    (tmp_path / "hpage_pmd_size").write_text(f"{2 * MIB}\n")
    if own is not None:
        (tmp_path / "hugepages-2048kB").mkdir()
        (tmp_path / "hugepages-2048kB" / "enabled").write_text(own + "\n")
    return tmp_path


# {{{ the policy (no device)

@pytest.mark.parametrize("enabled, advised", [("always [madvise] never", True),
                                              ("[always] madvise never", False),
                                              ("always madvise [never]", False)])
def test_only_a_madvise_policy_advises_and_only_cpus(tmp_path, monkeypatch, enabled, advised):
    monkeypatch.delenv(huge_pages.ENV, raising=False)
    root = _thp(tmp_path, enabled)
    assert huge_pages.policy(root) == enabled[enabled.index("[") + 1:enabled.index("]")]
    assert huge_pages.advise_from("cpu", root) == (2 * MIB if advised else None)
    assert huge_pages.advise_from("gpu", root) is None


def test_a_page_size_policy_of_its_own_wins_unless_inherit(tmp_path, monkeypatch):
    monkeypatch.delenv(huge_pages.ENV, raising=False)
    root = _thp(tmp_path, "always [madvise] never", own="always inherit madvise [never]")
    assert huge_pages.policy(root) == "never" and huge_pages.advise_from("cpu", root) is None
    (root / "hugepages-2048kB" / "enabled").write_text("always [inherit] madvise never\n")
    assert huge_pages.policy(root) == "madvise"
    (root / "enabled").write_text("[always] madvise never\n")
    (root / "hugepages-2048kB" / "enabled").write_text("always inherit [madvise] never\n")
    assert huge_pages.advise_from("cpu", root) == 2 * MIB


def test_no_policy_to_read_or_turned_off_advises_nothing(tmp_path, monkeypatch):
    assert huge_pages.policy(tmp_path / "absent") == "none"
    assert huge_pages.advise_from("cpu", tmp_path / "absent") is None
    root = _thp(tmp_path, "always [madvise] never")
    monkeypatch.setenv(huge_pages.ENV, "0")
    assert huge_pages.advise_from("cpu", root) is None


class _Libc:
    def __init__(self):
        self.calls = []

    def madvise(self, start, length, advice):
        self.calls.append((start.value, length.value, advice))
        return 0


def test_advice_covers_the_whole_pages_inside_only(monkeypatch):
    libc = _Libc()
    monkeypatch.setattr(huge_pages, "_libc", libc)
    page = 2 * MIB
    base = 1000 * page
    assert huge_pages.advise(base + 4096, 5 * page, page) == 4 * page
    assert libc.calls[-1][:2] == (base + page, 4 * page)
    assert huge_pages.advise(base, 3 * page, page) == 3 * page
    assert libc.calls[-1][:2] == (base, 3 * page)
    assert huge_pages.advise(base + 4096, 2 * page - 8192, page) == 0  # (no whole page)
    assert len(libc.calls) == 2

# }}}


# {{{ the buffers advised

def _advised_memory(device, monkeypatch):
    """``device``'s memory over a pool advising from 2 MiB, and the (address, bytes) of
    each advice."""
    if device.type != "cpu" or device.backend != "opencl":
        pytest.skip("huge pages are advised under a CPU device's OpenCL buffers")
    from fuseloop.backends.opencl import OpenCLBufferPool

    memory = DeviceMemory(device, device.context, device.queue)
    memory.pool = OpenCLBufferPool(device.context, device.queue, 2 * MIB)
    advised: list[tuple[int, int]] = []
    real = huge_pages.advise
    monkeypatch.setattr(huge_pages, "advise",
                        lambda a, n, page: (advised.append((a, n)), real(a, n, page))[1])
    return memory, advised


def test_new_large_buffers_are_advised_once_before_use(device, monkeypatch):
    memory, advised = _advised_memory(device, monkeypatch)
    assert memory.reserve(4 * MIB) == 1 << 62  # (hot paths allocate through allocate)
    small = memory.allocate(MIB)
    assert advised == []
    big = memory.allocate(4 * MIB)
    assert len(advised) == 1 and advised[0][1] >= 4 * MIB  # (the pool's whole block)
    del big
    again = memory.allocate(4 * MIB)  # (the pool's block again: advised when it was new)
    other = memory.allocate(4 * MIB)  # (a second block of that size: new)
    assert len(advised) == 2
    h = np.random.default_rng(0).random(3 * MIB // 8)
    uploaded = memory.host_buffer(h)
    assert len(advised) == 3 and advised[-1][1] == h.nbytes
    got = np.empty_like(h)
    backend_for(device).enqueue_read(device.queue, got, uploaded, None, True)
    np.testing.assert_array_equal(got, h)
    memory.host_buffer(h[: MIB // 8])
    assert len(advised) == 3
    del small, again, other


@pytest.mark.skipif(not sys.platform.startswith("linux")
                    or huge_pages.policy() != "madvise", reason="needs THP in madvise mode")
def test_the_advice_reaches_the_buffers_pages(device, monkeypatch):
    memory, advised = _advised_memory(device, monkeypatch)
    kept = memory.host_buffer(np.ones(8 * MIB // 4, np.float32))
    address = advised[-1][0] + 2 * MIB  # (inside the pages advised)
    flags, inside = "", False
    with open("/proc/self/smaps") as f:  # (the mapping's VmFlags: "hg" once advised)
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                flags = line
    assert " hg" in flags
    del kept


def test_results_are_unchanged_in_advised_buffers(device, monkeypatch):
    _, advised = _advised_memory(device, monkeypatch)
    from fuseloop.backends.opencl import OpenCLBufferPool

    rt = devices._runtime(device)
    monkeypatch.setattr(rt.pool, "pool", OpenCLBufferPool(device.context, device.queue,
                                                          2 * MIB))
    rng = np.random.default_rng(1)
    h, g = rng.random((1024, 1024), np.float32), rng.random((1024, 1024), np.float32)
    x, y = fl.asarray(h), fl.asarray(g)
    np.testing.assert_allclose((2 * x + y).get(), 2 * h + g, rtol=1e-6)
    np.testing.assert_allclose(x.sum(axis=0).get(), h.sum(axis=0), rtol=1e-4)
    np.testing.assert_allclose(((x - x.mean(axis=0)) ** 2).mean(axis=0).get(),
                               h.var(axis=0), rtol=1e-3)
    assert len(advised) >= 3  # (both inputs and the elementwise result)


def test_gpus_never_advise(device):
    fake = dataclasses.replace(device, type="gpu")
    pool = backend_for(device).buffer_pool(fake, device.context, device.queue)
    assert pool.huge_from is None

# }}}
