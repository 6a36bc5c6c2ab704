"""fuseloop's radix sort (fuseloop.ops.radix_sort) behind fl.sort and fl.argsort on
OpenCL devices, against numpy's stable sort."""

from __future__ import annotations

import numpy as np
import pytest
from launch_counts import launches

import fuseloop as fl
from fuseloop.ops import radix_sort

pytestmark = pytest.mark.opencl_only

_SPECIAL = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, -1.5, 2.5, -np.nan, 1e-30, -1e30])


def _descending_ref(a: np.ndarray) -> np.ndarray:
    """numpy's stable argsort, descending, NaNs last (Python's sort is stable)."""
    def key(j: int) -> tuple[bool, float | int]:
        v = a[j]
        if a.dtype.kind != "f":  # (exact for 64-bit integers)
            return (False, -int(v))
        return (bool(v != v), 0.0 if v != v else -float(v))

    return np.array(sorted(range(a.size), key=key), dtype=np.int64)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_floats_special_values(device, dt):
    rng = np.random.default_rng(3)
    # more than one tile on every layout (a CPU tile is 512 keys), and not a multiple
    a = np.concatenate([rng.choice(_SPECIAL, 2000), rng.standard_normal(3001)]).astype(dt)
    x = fl.asarray(a)
    got = fl.sort(x).get()
    np.testing.assert_array_equal(got, np.sort(a))
    # -0.0 before 0.0 is a valid order; the signs that were sorted are all there
    assert np.signbit(got[got == 0]).sum() == np.signbit(a[a == 0]).sum()
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))
    ref = _descending_ref(a)
    np.testing.assert_array_equal(fl.argsort(x, descending=True).get(), ref)
    np.testing.assert_array_equal(fl.sort(x, descending=True).get(), a[ref])


@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                np.uint32, np.uint64, np.bool_])
def test_integers(device, dt):
    # the extremes and small values, with many ties across tiles
    info = np.iinfo(dt) if dt != np.bool_ else np.iinfo(np.uint8)
    vals = np.array([info.min, info.min + 1, 0, 1, 2, info.max - 1, info.max], info.dtype)
    a = vals[np.random.default_rng(4).integers(0, 7, 1537)].astype(dt)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))
    np.testing.assert_array_equal(fl.argsort(x, descending=True).get(), _descending_ref(a))
    np.testing.assert_array_equal(fl.sort(x, descending=True).get(), np.sort(a)[::-1])


@pytest.mark.parametrize("n", [0, 1, 2, 513, 1 << 18])
def test_sizes(device, n):
    a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    x = fl.asarray(a)
    assert fl.sort(x).shape == (n,)
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))


def test_along_axes(device):
    # ties everywhere: the second pass (by row) must keep each row's order
    a = np.random.default_rng(5).integers(-4, 4, (3, 5, 301)).astype(np.int16)
    x = fl.asarray(a)
    for axis in (0, 1, 2):
        np.testing.assert_array_equal(fl.sort(x, axis=axis).get(), np.sort(a, axis=axis))
        np.testing.assert_array_equal(fl.argsort(x, axis=axis).get(),
                                      np.argsort(a, axis=axis, kind="stable"))
    # a strided view of a float64 array
    f = a.astype(np.float64) / 3
    np.testing.assert_array_equal(fl.sort(fl.asarray(f)[:, 1:4], axis=1).get(),
                                  np.sort(f[:, 1:4], axis=1))


def test_launches_and_skipped_passes(device):
    rng = np.random.default_rng(6)
    x = fl.asarray(rng.standard_normal(3000).astype(np.float32))
    # keys (with their OR and AND), 4 passes of count, scan and scatter (the last
    # writing values)
    assert launches(lambda: fl.sort(x).eval()) == 1 + 4 * 3
    # ... argsort: positions with the keys, then int64 positions
    assert launches(lambda: fl.argsort(x).eval()) == 1 + 4 * 3 + 1
    # int32 in [0, 1000): the two high bytes are the same in every key: 2 passes
    small = rng.integers(0, 1000, 3000).astype(np.int32)
    assert launches(lambda: fl.sort(fl.asarray(small)).eval()) == 1 + 2 * 3
    np.testing.assert_array_equal(fl.sort(fl.asarray(small)).get(), np.sort(small))
    # all equal: no pass at all, the values from the keys
    assert launches(lambda: fl.sort(fl.asarray(np.full(3000, 7, np.int64))).eval()) == 2
    # 4 rows: value passes (one for int8), one pass over the row's digit, then the
    # values (narrower than their 32-bit keys) from the keys
    rows = rng.integers(-100, 100, (4, 700)).astype(np.int8)
    assert launches(lambda: fl.sort(fl.asarray(rows), axis=1).eval()) == 1 + 2 * 3 + 1
    np.testing.assert_array_equal(fl.sort(fl.asarray(rows), axis=1).get(), np.sort(rows))


def test_gpu_layout_on_cpu(device, monkeypatch):
    """An H100's layouts (256 work-items a group, 48 KiB of local memory: 16 keys per
    work-item, with positions too since the scatter's counts table holds two 16-bit
    counts a word) and recipe (8 histogram copies, the scan through local memory) run on
    this device: the kernels the H100 runs."""
    monkeypatch.setattr(radix_sort, "CPU_GROUP", radix_sort.GPU_GROUP)
    monkeypatch.setattr(radix_sort, "CPU_COPIES", radix_sort.GPU_COPIES)
    monkeypatch.setattr(radix_sort, "CPU_SCAN_LOCAL", radix_sort.GPU_SCAN_LOCAL)
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: 48 * 1024)
    if device.max_work_group_size < radix_sort.GPU_GROUP:
        pytest.skip("the device's work-groups are smaller than a GPU's")
    assert radix_sort.layout_for(device, 4, False, 1 << 20) == (256, 16)
    assert radix_sort.layout_for(device, 4, True, 1 << 20) == (256, 16)
    rng = np.random.default_rng(7)
    a = rng.standard_normal(5 * 4096 + 3).astype(np.float32)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_tile_boundaries_and_duplicates(device, monkeypatch, extra):
    """Tiles of one repeated key (every item of a tile in one nibble: the scatter's
    packed 16-bit counts at their fullest, in the low and in the high half), runs of
    equal keys across tiles, and an array one item short of, at, or past a multiple of
    the tile, on this device's layout and an H100's (4096-key tiles)."""
    tile = 4096
    rng = np.random.default_rng(11)
    a = np.concatenate([
        np.full(tile, -1, np.int32),  # bytes 0xFF (and 0x7F): nibbles 7 and 15
        rng.choice(np.array([-1, 0, 1, 2**31 - 1, -2**31], np.int32), tile),
        np.zeros(tile + extra, np.int32)])  # bytes 0x00 (and 0x80): nibbles 0 and 8
    x = fl.asarray(a)
    for layout in ("own", "gpu"):
        if layout == "gpu":
            if device.max_work_group_size < radix_sort.GPU_GROUP:
                continue
            monkeypatch.setattr(radix_sort, "CPU_GROUP", radix_sort.GPU_GROUP)
            monkeypatch.setattr(radix_sort, "CPU_COPIES", radix_sort.GPU_COPIES)
            monkeypatch.setattr(radix_sort, "CPU_SCAN_LOCAL", radix_sort.GPU_SCAN_LOCAL)
            monkeypatch.setattr(radix_sort, "local_memory", lambda device: 48 * 1024)
            assert radix_sort.layout_for(device, 4, True, a.size).tile == tile
        np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
        np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))


def test_few_keys_per_item(device, monkeypatch):
    """A device with little local memory: 2 keys per work-item, too few for the
    scatter's vector loads of a full tile (every tile goes through local memory)."""
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: 3000)
    layout = radix_sort.layout_for(device, 4, True, 1000)
    assert layout is not None and layout.per == 2
    a = np.random.default_rng(12).integers(-50, 50, 1001).astype(np.float32)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))


def test_pyopencl_fallback(device, monkeypatch):
    """Where fuseloop's sort cannot run (2^32 elements, a tiny local memory) pyopencl's
    still sorts."""
    with monkeypatch.context() as patch:
        patch.setattr(radix_sort, "local_memory", lambda device: 2048)
        assert radix_sort.layout_for(device, 4, True, 100) is None
    monkeypatch.setattr(radix_sort, "MAX_ELEMENTS", 10)
    a = np.array([3, -1, 7, -1, 0, 3, 100, 3, 0, 1, 5, 5], np.int8)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))


def _gpu_layout(device, monkeypatch) -> bool:
    """An H100's layout (256 work-items, 16 keys each, 8 copies of the count's
    histogram, the scan through local memory) on this device, where it fits."""
    if device.max_work_group_size < radix_sort.GPU_GROUP:
        return False
    monkeypatch.setattr(radix_sort, "CPU_GROUP", radix_sort.GPU_GROUP)
    monkeypatch.setattr(radix_sort, "CPU_COPIES", radix_sort.GPU_COPIES)
    monkeypatch.setattr(radix_sort, "CPU_SCAN_LOCAL", radix_sort.GPU_SCAN_LOCAL)
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: 48 * 1024)
    assert radix_sort.recipe_for(device, radix_sort.Layout(256, 16)) == (8, True)
    return True


def test_skewed_digits(device, monkeypatch):
    """The count kernel's sub-histograms and runs of one digit: tiles whose keys all
    share a digit but one, two digits alternating or in long runs, and rows (the row
    digit read from the positions in vectors), on this device's layout and an H100's."""
    tile = 4096
    one = np.full(2 * tile, 5, np.int32)
    one[3000] = 6  # (else every digit is constant and no pass runs)
    two = np.where(np.arange(2 * tile) % 2 == 0, 7, 7 + 2**24).astype(np.int32)
    runs = np.where((np.arange(2 * tile) // 700) % 2 == 0, -1.5, 2.5).astype(np.float32)
    rows = np.tile(np.array([1, -1], np.float32), (3, tile // 2 + 5))
    for layout in ("own", "gpu"):
        if layout == "gpu" and not _gpu_layout(device, monkeypatch):
            continue
        for a in (one, two, runs):
            x = fl.asarray(a)
            np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
            np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))
        x = fl.asarray(rows)
        np.testing.assert_array_equal(fl.sort(x, axis=1).get(), np.sort(rows, axis=1))
        np.testing.assert_array_equal(fl.argsort(x, axis=1).get(),
                                      np.argsort(rows, axis=1, kind="stable"))


def test_scan_in_chunks(device, monkeypatch):
    """More tiles than the scan kernel takes at once (WG * (PER + 1) counts a chunk: 2
    keys a work-item here), so that each digit's offsets carry from chunk to chunk."""
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: 3000)
    monkeypatch.setattr(radix_sort, "CPU_SCAN_LOCAL", True)
    layout = radix_sort.layout_for(device, 4, True, 1000)
    assert layout is not None and layout.per == 2
    n = 3 * layout.tile * layout.tile + 5  # (193 tiles: 3 chunks of 96 and more)
    a = np.random.default_rng(13).integers(-2**31, 2**31 - 1, n, dtype=np.int32)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))


def test_variant_choice(monkeypatch):
    """One-sweep only where other work-groups are sure to progress (NVIDIA GPUs), one row,
    fewer than 2^30 keys and local memory for its kernel; VARIANT forces either
    everywhere else."""
    from types import SimpleNamespace

    nvidia = SimpleNamespace(type="gpu", vendor="NVIDIA Corporation")
    other = SimpleNamespace(type="gpu", vendor="Advanced Micro Devices, Inc.")
    cpu = SimpleNamespace(type="cpu", vendor="GenuineIntel")
    assert radix_sort.variant_for(nvidia, 1 << 24, 1) == radix_sort.GPU_VARIANT == "fused"
    assert radix_sort.variant_for(other, 1 << 24, 1) == "classic"
    assert radix_sort.variant_for(cpu, 1 << 24, 1) == radix_sort.CPU_VARIANT
    assert radix_sort.variant_for(nvidia, 1 << 24, 2) == "classic"
    assert radix_sort.variant_for(nvidia, 1 << 30, 1) == "classic"
    # local memory for the classic scatter's tile, not for the one-sweep kernel's
    layout = radix_sort.Layout(256, 16)
    need = radix_sort._local_bytes(256, 16, 4, True)
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: need)
    assert radix_sort.variant_for(nvidia, 1 << 24, 1, layout, 4, True) == "classic"
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: need + 4 * 256 + 4)
    assert radix_sort.variant_for(nvidia, 1 << 24, 1, layout, 4, True) == "fused"
    try:
        radix_sort.VARIANT = "onesweep"
        assert radix_sort.variant_for(other, 1 << 20, 1) == "onesweep"
        assert radix_sort.variant_for(cpu, 1 << 20, 3) == "classic"
    finally:
        radix_sort.VARIANT = None


@pytest.mark.parametrize("variant", ["onesweep", "fused"])
def test_onesweep(device, monkeypatch, variant):
    """The one-sweep passes (after the key kernel, or fused: from the values) on an
    H100's layout (4096-key tiles, each one's digit offsets looked back over the tiles
    before it), against numpy: special and negative floats, ties within and across
    tiles, all keys equal but one, 32- and 64-bit keys, positions with the keys
    (argsort), descending."""
    if not _gpu_layout(device, monkeypatch):
        pytest.skip("the device's work-groups are smaller than a GPU's")
    monkeypatch.setattr(radix_sort, "VARIANT", variant)
    rng = np.random.default_rng(27)
    n = 6 * 4096 + 77
    floats = np.concatenate([rng.choice(_SPECIAL, n // 3), 50 * rng.standard_normal(n)])
    rng.shuffle(floats)
    one = np.full(n, 5, np.int32)
    one[3000] = 6  # (one pass, every tile but one of a single digit)
    cases = [floats[:n].astype(np.float32), floats[-n:].astype(np.float64),
             rng.integers(-3, 4, n).astype(np.int32),
             rng.choice(rng.integers(-2**62, 2**62, 40), n), one]
    if variant == "onesweep":  # (its later passes are the fused variant's: fewer builds)
        cases = [cases[0], cases[3]]
    for a in cases:
        x = fl.asarray(a)
        np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
        np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))
        ref = _descending_ref(a)
        np.testing.assert_array_equal(fl.argsort(x, descending=True).get(), ref)
        np.testing.assert_array_equal(fl.sort(x, descending=True).get(), a[ref])
    # (keys unless fused), the histograms and their starts, then a kernel a pass (the
    # last writing the values)
    x = fl.asarray(cases[0])
    assert launches(lambda: fl.sort(x).eval()) == (variant == "onesweep") + 2 + 4
    # all keys equal (fused: the histograms, then the key kernel): no pass
    x = fl.asarray(np.full(5000, -2.5, np.float32))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.arange(5000))
    np.testing.assert_array_equal(fl.sort(x).get(), np.full(5000, -2.5, np.float32))


def test_ranking_choice(monkeypatch):
    """Warp-match ranking where inline PTX is taken (NVIDIA's OpenCL GPUs), whole warps
    a group, a divisor of 256 work-items and local memory for its tile; RANKING forces
    either (the emulated match elsewhere)."""
    from types import SimpleNamespace

    nvidia = SimpleNamespace(type="gpu", vendor="NVIDIA Corporation", backend="opencl")
    cuda = SimpleNamespace(type="gpu", vendor="NVIDIA Corporation", backend="cuda")
    cpu = SimpleNamespace(type="cpu", vendor="GenuineIntel", backend="opencl")
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: 48 * 1024)
    layout = radix_sort.Layout(256, 16)
    assert radix_sort.ranking_for(nvidia, layout, 4, True) == "match"
    assert radix_sort.ranking_for(cuda, layout, 4, True) == "nibbles"
    assert radix_sort.ranking_for(cpu, layout, 4, True) == "nibbles"
    assert radix_sort.ranking_for(nvidia, radix_sort.Layout(16, 16), 4, True) == "nibbles"
    assert radix_sort.ranking_for(nvidia, radix_sort.Layout(256, 32), 4, True) == "nibbles"
    monkeypatch.setattr(radix_sort, "RANKING", "match")
    assert radix_sort.ranking_for(cpu, radix_sort.Layout(32, 16), 4, True) == "match"
    monkeypatch.setattr(radix_sort, "RANKING", "nibbles")
    assert radix_sort.ranking_for(nvidia, layout, 4, True) == "nibbles"


def test_match_ranking(device, monkeypatch):
    """The warp-match ranked pass (emulated: no inline PTX here) on an H100's layout
    (8 warps a group, 4096-key tiles) against numpy: special floats, ties within and
    across tiles and warps, a last tile in part, 32- and 64-bit keys, positions,
    descending, and a pass whose digit is the same in every key (copied)."""
    if not _gpu_layout(device, monkeypatch):
        pytest.skip("the device's work-groups are smaller than a GPU's")
    monkeypatch.setattr(radix_sort, "VARIANT", "fused")
    monkeypatch.setattr(radix_sort, "RANKING", "match")
    monkeypatch.setattr(radix_sort, "_PASSES", {})
    rng = np.random.default_rng(29)
    n = 3 * 4096 + 77
    floats = np.concatenate([rng.choice(_SPECIAL, n // 3), 50 * rng.standard_normal(n)])
    rng.shuffle(floats)
    ints = rng.integers(-3, 4, n).astype(np.int32)
    for a in (floats[:n].astype(np.float32), ints):
        x = fl.asarray(a)
        np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
        np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))
        ref = _descending_ref(a)
        np.testing.assert_array_equal(fl.argsort(x, descending=True).get(), ref)
    wide = np.round(floats[-n:]).astype(np.float64)  # (64-bit keys; ties)
    np.testing.assert_array_equal(fl.sort(fl.asarray(wide)).get(), np.sort(wide))
    used = {k[-2] for k in radix_sort._PASSES if k[0] == "onesweep"}
    assert used == {"match"}


def test_sweep_variants(device, monkeypatch):
    """The one-sweep pass kernel's variants together (bench_sort.py --pass-variants):
    8192-key tiles (SWEEP_PER), the look-back reading 8 status words at once by
    volatile loads, the raking scan, against numpy on 3 tiles and a part: special
    floats and ties across tiles (sort, argsort, descending).  "onesweep" (its key,
    histogram and starts kernels are test_onesweep's: two new builds; the settings
    are the fused variant's pass kernel's too); 64-bit keys would take more builds
    than this file's time budget allows (the settings do not touch the key's code)."""
    if not _gpu_layout(device, monkeypatch):
        pytest.skip("the device's work-groups are smaller than a GPU's")
    # (room for an 8192-key tile with positions and 64-bit keys: PoCL's local memory is
    # host memory)
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: 128 * 1024)
    monkeypatch.setattr(radix_sort, "VARIANT", "onesweep")
    monkeypatch.setattr(radix_sort, "SWEEP_PER", 32)
    monkeypatch.setattr(radix_sort, "LOOKBACK_VOLATILE", True)
    monkeypatch.setattr(radix_sort, "LOOKBACK", 8)
    monkeypatch.setattr(radix_sort, "RAKE_SCAN", True)
    base = radix_sort.Layout(256, 16)
    assert radix_sort.sweep_layout(device, base, 8, True) == (256, 32)
    rng = np.random.default_rng(28)
    n = 3 * 8192 + 77
    a = np.concatenate([rng.choice(_SPECIAL, n // 3),
                        rng.integers(-40, 40, n - n // 3)]).astype(np.float32)
    rng.shuffle(a)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a))
    np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"))
    np.testing.assert_array_equal(fl.argsort(x, descending=True).get(), _descending_ref(a))
    # where the tile does not fit, the layout's own
    monkeypatch.setattr(radix_sort, "local_memory", lambda device: 48 * 1024)
    assert radix_sort.sweep_layout(device, base, 4, True) == base
    assert radix_sort.sweep_layout(device, base, 4, False) == (256, 32)


@pytest.mark.parametrize("mode", [None, "early", "late", "side", "all"])
def test_speculative_first_pass(device, monkeypatch, mode):
    """SPECULATE: the fused variant's pass over byte 0 enqueued before the host knows
    which bytes vary; where byte 0 is the same in every key the pass copies its tiles
    straight (integer-valued floats, small integers shifted by 256s, all equal), and
    where it turns out the only pass the values come from its keys.  Against numpy on
    an H100's layout (4096-key tiles): sort, argsort (stability), descending; "late"
    (the read after the pass) and "side" (on a second queue) on two cases, the host's
    order being their only change; "all" (a pass every byte, constant ones copying, the
    last writing values) on three by sort, with its launches."""
    if not _gpu_layout(device, monkeypatch):
        pytest.skip("the device's work-groups are smaller than a GPU's")
    monkeypatch.setattr(radix_sort, "VARIANT", "fused")
    monkeypatch.setattr(radix_sort, "SPECULATE", mode)
    rng = np.random.default_rng(45)
    n = 3 * 4096 + 77
    floats = rng.choice(np.concatenate([_SPECIAL, 40 * rng.standard_normal(50)]), n)
    shifted = (256 * rng.integers(-20, 20, n)).astype(np.int32)  # (byte 0 constant)
    cases = {"float32": floats.astype(np.float32),
             "float64 integral": np.round(floats * 8).astype(np.float64),
             "int32 by 256s": shifted,
             "int64": rng.choice(rng.integers(-2**62, 2**62, 30), n),
             "uint8": rng.integers(0, 256, n).astype(np.uint8),
             "int16 high byte": (shifted // 256 * 256 + 7).astype(np.int16),
             "all equal": np.full(n, -2.5, np.float32)}
    if mode != "early":
        cases = {k: cases[k] for k in ("float32", "int32 by 256s")
                 + (("all equal",) if mode == "all" else ())}
    for name, a in cases.items():
        x = fl.asarray(a)
        ref = _descending_ref(a)
        np.testing.assert_array_equal(fl.sort(x).get(), np.sort(a), err_msg=name)
        np.testing.assert_array_equal(fl.sort(x, descending=True).get(), a[ref],
                                      err_msg=name)
        if mode == "all":  # (sort only: argsort's pass kernels would be two more builds)
            continue
        np.testing.assert_array_equal(fl.argsort(x).get(), np.argsort(a, kind="stable"),
                                      err_msg=name)
        np.testing.assert_array_equal(fl.argsort(x, descending=True).get(), ref,
                                      err_msg=name)
    if mode == "all":  # (the histograms, the starts, a pass a byte: the last values)
        for a in (cases["float32"], cases["all equal"], shifted):
            assert launches(lambda a=a: fl.sort(fl.asarray(a)).eval()) == 2 + 4
    if mode != "early":
        return
    # the histograms, the starts, byte 0's pass and the passes that vary (the last
    # writing the values); all equal: byte 0's pass (a copy), then the values
    assert launches(lambda: fl.sort(fl.asarray(cases["float32"])).eval()) == 2 + 4
    small = (256 * rng.integers(0, 40, n)).astype(np.int32)  # (bytes 0, 2 and 3 constant)
    assert launches(lambda: fl.sort(fl.asarray(small)).eval()) == 2 + 1 + 1
    np.testing.assert_array_equal(fl.sort(fl.asarray(small)).get(), np.sort(small))
    assert launches(lambda: fl.sort(fl.asarray(cases["all equal"])).eval()) == 2 + 1 + 1


def test_speculative_pass_copies_constant_digit(device, monkeypatch):
    """The SPEC pass kernel's check on the device: where the starts say the pass's
    digit counts every key, each tile is copied to its own place (no ranking, no
    look-back) and the next pass's state zeroed.  Starts that claim so for keys whose
    digits differ give the keys back unsorted, positions in order (a ranked pass would
    move them; real starts make the claim for every tile or none, as here, where every
    tile's first key has the claimed digit: a tile ranking alone would wait for the
    copying tiles' status words for ever)."""
    if not _gpu_layout(device, monkeypatch):
        pytest.skip("the device's work-groups are smaller than a GPU's")
    from fuseloop.evaluate import allocate

    layout = radix_sort.Layout(256, 16)
    recipe = radix_sort.recipe_for(device, layout)
    _, _, first = radix_sort._onesweep_kernels(
        4, True, layout, recipe, radix_sort._hist_copies(device, 4, recipe), 4, True)
    n = 2 * 4096 + 77
    tiles = -(-n // layout.tile)
    a = np.random.default_rng(46).standard_normal(n).astype(np.float32)
    a[::layout.tile] = a[0]  # (every tile's first key takes the claim's branch: all copy)
    bits = a.view(np.uint32)
    keys = np.where(bits >> 31, ~bits, bits | np.uint32(1 << 31))  # (fl_radix_keys')
    starts = np.zeros((8, 256), np.uint32)
    starts[0, (keys[0] & 0xFF) + 1:] = n  # (byte 0's first digit "counts" every key)
    state = np.zeros(32 + 2 * tiles * 256, np.uint32)
    state[1], state[32 + tiles * 256:] = 3, 9  # (the next pass's counter and words)
    src, hist, st = (fl.asarray(h) for h in (a, starts.ravel(), state))
    for x in (src, hist, st):
        x.eval()
    out_keys, out_vals = allocate(4 * n, device), allocate(4 * n, device)
    radix_sort._launch(first, (n, tiles), [out_keys, out_vals, st._storage],
                       [src._storage, out_vals, hist._storage],
                       [np.int32(v) for v in (0, 0, -1, 0, 2, 0)], device)
    u32 = np.dtype(np.uint32)
    assert not np.array_equal(np.sort(keys & 0xFF), keys & 0xFF)
    np.testing.assert_array_equal(fl.Array._concrete(out_keys, u32, (n,)).get(), keys)
    np.testing.assert_array_equal(fl.Array._concrete(out_vals, u32, (n,)).get(),
                                  np.arange(n))
    after = st.get()
    assert after[1] == 0 and not after[32 + tiles * 256:].any()
