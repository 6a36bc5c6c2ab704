"""Mask compaction (``fuseloop.ops.compaction``): the positions of true elements.

Every layout of work is run on every device present: the CPU one (one
work-item per group, a branch-free loop) and the GPU one (work-groups scanning
chunks in local memory), each with one block and with many, so that block and
chunk boundaries fall inside runs of true and false elements.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

import fuseloop as fl
from fuseloop.ops import compaction
from fuseloop.ops.compaction import Layout

LAYOUTS = {
    "device": None,  # layout_for(device), as used
    "serial-one-block": Layout(1, 1, 1 << 40, 1),
    "serial-many-blocks": Layout(1, 1, 5, 64),
    "groups-one-block": Layout(64, 4, 1 << 40, 1),
    "groups-many-blocks": Layout(32, 3, 7, 50),
    "groups-words-many-blocks": Layout(128, 16, 1 << 11, 64),
    "groups-of-two": Layout(2, 1, 1, 9),
}


def _masks(rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for n in (1, 2, 3, 31, 64, 65, 255, 256, 257, 1000, 4099):
        for p in (0.0, 0.01, 0.5, 0.99, 1.0):
            out.append(rng.random(n) < p)
    # runs of trues and falses longer than blocks and chunks (a block that ends in
    # falses followed by one that starts with trues is where writes could collide)
    runs = np.zeros(3000, bool)
    for start in range(0, 3000, 97):
        runs[start:start + 41] = True
    out += [runs, ~runs, np.r_[np.zeros(777, bool), np.ones(5, bool)]]
    return out


@pytest.fixture(params=list(LAYOUTS), ids=list(LAYOUTS))
def layout(request, monkeypatch):
    chosen = LAYOUTS[request.param]
    if chosen is not None:
        monkeypatch.setattr(compaction, "layout_for", lambda device: chosen)
    return chosen


def test_positions_match_numpy_in_every_layout(device, layout):
    rng = np.random.default_rng(5)
    for h in _masks(rng):
        got = fl.flatnonzero(fl.asarray(h))
        assert got.dtype == np.int64 and got.shape == (np.count_nonzero(h),)
        np.testing.assert_array_equal(got.get(), np.flatnonzero(h), err_msg=f"n={h.size}")


def test_masks_of_other_forms_in_every_layout(device, layout):
    rng = np.random.default_rng(6)
    xh = rng.standard_normal((37, 29))
    x = fl.asarray(xh)
    # a lazy mask, a strided view of a mask, a non-bool array, a mask over rows
    np.testing.assert_array_equal(x[x > 0.3].get(), xh[xh > 0.3])
    np.testing.assert_array_equal(fl.flatnonzero((x > 0)[::2, 1::3]).get(),
                                  np.flatnonzero((xh > 0)[::2, 1::3]))
    ih = (rng.random(500) < 0.3) * rng.integers(-3, 4, 500)
    np.testing.assert_array_equal(fl.flatnonzero(fl.asarray(ih)).get(), np.flatnonzero(ih))
    for got, want in zip(fl.nonzero(x < -0.5), np.nonzero(xh < -0.5)):
        np.testing.assert_array_equal(got.get(), want)
    np.testing.assert_array_equal(fl.argwhere(x > 1).get(), np.argwhere(xh > 1))
    rows = xh[:, 0] > 0
    np.testing.assert_array_equal(x[fl.asarray(rows)].get(), xh[rows])


def test_one_block_is_one_launch_and_many_are_two(device, monkeypatch, fresh_stats):
    from fuseloop import launching

    launches = []
    real = launching.enqueue

    def counted(plan, *args, **kwargs):
        name = plan.compiled.plan.name
        if name.startswith("fuseloop_mask"):
            launches.append(name)
        return real(plan, *args, **kwargs)

    # (compaction launches through launching.enqueue, as every kernel does)
    monkeypatch.setattr(launching, "enqueue", counted)
    layout = compaction.layout_for(device)
    small = np.arange(layout.min_block // 2) % 3 == 0
    fl.flatnonzero(fl.asarray(small)).eval()
    assert launches == ["fuseloop_mask_compact"]
    del launches[:]
    monkeypatch.setattr(compaction, "layout_for",
                        lambda d: Layout(layout.group, layout.per_item, 64, 16))
    large = np.arange(5000) % 3 == 0
    np.testing.assert_array_equal(fl.flatnonzero(fl.asarray(large)).get(),
                                  np.flatnonzero(large))
    assert launches == ["fuseloop_mask_count", "fuseloop_mask_compact"]
    assert fresh_stats()["scans"] == 2


def test_blocks_cover_the_mask_in_whole_chunks():
    for layout in LAYOUTS.values():
        if layout is None:
            continue
        for n in (1, 2, 5, 63, 64, 1000, 12345):
            groups, block = compaction.blocks(n, layout)
            assert 1 <= groups <= layout.max_groups
            assert (groups - 1) * block < n <= groups * block
            if layout.group > 1:
                assert block % (layout.group * layout.per_item) == 0 and block % 16 == 0
    cpu = Layout(1, 1, 1 << 15, 8)
    assert compaction.blocks(1000, cpu) == (1, 1000)
    assert compaction.blocks(1 << 20, cpu) == (8, 1 << 17)


def test_a_sparse_result_gets_a_buffer_of_its_own(device):
    n = 100_000
    sparse = np.zeros(n, bool)
    sparse[[3, 50_000, n - 1]] = True
    got = fl.flatnonzero(fl.asarray(sparse))
    assert got._storage.nbytes == 3 * 8
    buffer = got._storage.buffer
    size = buffer.size if hasattr(buffer, "size") else buffer.mem.size  # (CuPy: a pointer)
    assert size < n * 8  # not the n positions' scratch buffer
    np.testing.assert_array_equal(got.get(), [3, 50_000, n - 1])
    dense = np.ones(n, bool)
    dense[7] = False
    got = fl.flatnonzero(fl.asarray(dense))
    assert got._storage.nbytes == (n - 1) * 8
    np.testing.assert_array_equal(got.get(), np.flatnonzero(dense))


@pytest.mark.parametrize("name", ["serial-many-blocks", "groups-many-blocks",
                                  "groups-words-many-blocks", "groups-of-two"])
@pytest.mark.opencl_only  # (fills and reads the buffers with pyopencl)
def test_with_many_blocks_nothing_is_written_past_the_positions(device, monkeypatch, name):
    # each block writes only between its first position and the next block's: a
    # write past that would race with the next block (seen here past the last)
    layout = LAYOUTS[name]
    monkeypatch.setattr(compaction, "layout_for", lambda d: layout)
    real_allocate = compaction.allocate

    def filled(nbytes, dev):
        s = real_allocate(nbytes, dev)
        if nbytes:
            cl.enqueue_fill_buffer(dev.queue, s.buffer, np.int64(-7), 0, nbytes)
        return s

    monkeypatch.setattr(compaction, "allocate", filled)
    rng = np.random.default_rng(8)
    for h in _masks(rng):
        if compaction.blocks(h.size, layout)[0] == 1:
            continue
        mask = fl.asarray(h)
        out, count = compaction.true_positions(mask.data, h.size, device)
        scratch = np.empty(h.size, np.int64)
        cl.enqueue_copy(device.queue, scratch, out.buffer)
        assert count == np.count_nonzero(h)
        np.testing.assert_array_equal(scratch[:count], np.flatnonzero(h))
        assert (scratch[count:] == -7).all(), f"n={h.size}"


@pytest.mark.opencl_only  # (fills and reads the buffers with pyopencl)
def test_every_nonzero_byte_counts_as_true_in_every_layout(device, layout):
    # (bool buffers hold 0 and 1; the kernels read words and must not rely on that)
    rng = np.random.default_rng(9)
    for n in (1, 15, 16, 17, 100, 1029, 5000):
        raw = rng.choice(np.array([0, 0, 0, 1, 2, 127, 128, 255], np.uint8), n)
        buf = fl.asarray(raw).data
        out, count = compaction.true_positions(buf, n, device)
        got = np.empty(count, np.int64)
        if count:
            cl.enqueue_copy(device.queue, got, out.buffer)
        np.testing.assert_array_equal(got, np.flatnonzero(raw), err_msg=f"n={n}")


def _forget_compaction_kernels():
    # the compaction's kernels leave the memory cache, as in a new process (keyed by
    # ("source", digest, device); generated kernels by their program)
    from fuseloop import cache

    with cache._memory_lock:
        for held in (cache._memory, cache._retired):
            for key in [k for k in held if isinstance(k[0], str)]:
                held.pop(key).in_cache = False
    cache._shared.clear()  # (programs still alive, found again from disk: batch_build)


def test_the_compaction_program_is_counted_as_compiled(device, monkeypatch):
    from fuseloop import cache

    monkeypatch.setattr(compaction, "_kernels", {})
    _forget_compaction_kernels()
    h = np.arange(50_000, dtype=np.float32)
    x = fl.asarray(h)
    x[x > 10].get()  # compiles the mask's and the gather's kernels as well
    before = fl.stats()["kernels_compiled"]
    # (one program on a CPU, where one work-group counts; the counting one too on a GPU)
    programs = sum(isinstance(k[0], str) for k in cache._memory)
    assert programs in (1, 2)
    _forget_compaction_kernels()
    np.testing.assert_array_equal(x[x > 20].get(), h[h > 20])
    assert fl.stats()["kernels_compiled"] == before + programs  # compiled again
    np.testing.assert_array_equal(x[x > 30].get(), h[h > 30])
    assert fl.stats()["kernels_compiled"] == before + programs
