"""fuseloop's own LSD radix sort for OpenCL devices: ``sort`` and ``argsort``.

Why not pyopencl's ``RadixSort`` (the stack rule prefers a maintained library): on an
H100's OpenCL it sorted 2^24 float32 in 24.6 ms against CuPy's (CUB's) 0.55 ms, 45
times slower (4-bit digits, a scan kernel per pass built for generality).  This sort
takes 8-bit digits and keeps each pass to three short kernels.

The values first become unsigned keys whose order is the wanted order
(``radix_keys.KEYS``): integers with their sign bit flipped, floats by their bits
(all bits flipped for negatives, the sign bit for the rest), NaNs after everything,
descending by complementing the key of every non-NaN.  For ``argsort`` -0.0 and 0.0 get
one key and every NaN the largest key, so that ties stay in their original order, as
numpy's stable sort keeps them; for ``sort`` the key is one-to-one (NaN's sign aside)
and the sorted values are made from the sorted keys (by the last pass where they are as
wide as the keys, 4 or 8 bytes, else by one more kernel).  The key kernel also reduces
the keys' bitwise OR and AND, so that passes whose 8-bit digit is the same in every key
(the high bytes of small integers) are skipped; it reads and writes vectors of 4
(several in flight a work-item) and reduces the OR and AND once a work-item, then once a
group.

One pass over tiles of ``WG * PER`` keys (a work-group each):

1. ``count``: each tile's histogram of the digit, written digit-major, and added to
   the digits' totals (global atomics: 256 a tile).  A full tile is read in coalesced
   vectors of 4; on GPUs the local atomics go to 8 interleaved copies of the histogram
   (a work-item's copy by its id), and a work-item adds each run of one digit among its
   keys at once, so that skewed digits (a float's top byte has few values; all keys
   equal) do not queue a work-group's atomics on one word;
2. ``scan``: one work-group per digit replaces its row of tile counts by where each
   tile's keys of the digit go: the keys of smaller digits (from the totals) plus the
   exclusive scan of the row.  On GPUs, one exclusive scan of "the smaller digits'
   totals, then the row", in chunks loaded coalesced into local memory and scanned
   there; on CPUs each work-item scans its own stretch of the row (fewer barriers);
3. ``scatter``: each tile sorts itself stably by the digit in local memory (two
   counting sorts by 4-bit halves), then writes every key (and its position, the
   payload) to its tile's place for the digit + its rank there; consecutive work-items
   write consecutive keys of the sorted tile, so a digit's run is written coalesced.

The scatter is most of the sort's time (on an H100 ~258 us of a 2^24 pass that moves
~128 MB, ~45 us at full bandwidth): it is bound by its local-memory accesses and
barriers, not by global traffic, so its ranking is built to need few of either.
Each work-item takes PER consecutive keys (blocked: a stable rank is "items of smaller
digits, then earlier items of the digit", and blocked items make "earlier" a
work-item prefix).  A counting sort by a nibble counts the work-item's keys in
registers (16 8-bit counts in two 64-bit words, and each key's rank among its own keys
of its nibble, 4 a word), stores them as 8 words (two 16-bit counts each), scans that
table once (digit-major: a nibble's keys of lower work-items first; a tile of fewer
than 2^16 keys never carries from the low halves into the high ones) and moves each
key to its nibble's offset + its rank.  Against the previous version (counts
incremented in local memory key by key, 16 32-bit counts a work-item, Hillis-Steele
with two barriers a step, a scan of the digits' totals in every tile) this is about 12
local accesses a key instead of ~26, no chain of dependent local updates, and 26
barriers a tile instead of ~60; a full tile's first counting sort reads its keys
straight from global memory in vectors of 4.  Not taken: one 8-bit counting sort
(per-work-item counts of 256 digits are 128 KiB for 256 work-items, and ranking
within a warp-sized slice needs subgroup match or ballot, which NVIDIA's OpenCL lacks
and a portable kernel cannot assume); 32 keys a work-item (fits 48 KiB for ``sort``;
``benchmarks/bench_sort.py --sweep`` times it against 16).

One-sweep (``VARIANT``; NVIDIA GPUs by default, one row): the count and scan kernels of
every pass are replaced by one histogram kernel before the passes (every byte of the
keys at once, in local memory, then 256 global atomics a byte a work-group) and a
one-work-group scan of them into each digit's start; each pass is then one kernel that
takes a tile number from a counter (the order work-groups start), sorts its tile as the
scatter does, publishes its digits' counts and finds their offsets by decoupled
look-back (a digit a work-item walks back over the tiles before it, adding their counts
until one that holds its running total, then publishes its own).  "fused" also drops
the key kernel: the histogram kernel and the first pass read the values and make
their keys (and positions) as they load them; the histograms' counts, read back, say
which bytes vary.  The look-back waits on other work-groups, which OpenCL does not
promise to run (a CPU whose threads are descheduled spins: on this 2-core shared
machine's PoCL one-sweep took 15 times the CPU time of the classic passes), so other
devices keep the classic passes.

The one-sweep pass ranks its tile either as the scatter does ("nibbles") or, on
NVIDIA's OpenCL GPUs, by the whole digit at once with warp matching in inline PTX
(``RANKING``, :mod:`fuseloop.ops.radix_match`; on an H200 a pass of 2^24 float32 keys
204-212 us instead of 243, with positions 240 instead of 267-284).  Other settings,
off until a GPU run favours them (``benchmarks/bench_sort.py --pass-variants`` times
them taking turns): LOOKBACK_VOLATILE (status words read by plain volatile loads:
every step of every walk otherwise goes through the L2's atomic unit a word at a
time), RAKE_SCAN (scans with 2 barriers instead of 9) and SWEEP_PER (larger tiles:
fewer look-back walks and barriers a key, at more local memory a work-group).

The sort is stable, so sorting many rows at once is a sort by value followed by more
passes over the digits of the row number (read from the payload, the position).
Positions are 32-bit, so arrays of 2^32 elements or more and devices with too little
local memory for one tile take pyopencl's sort instead (see :func:`layout_for`).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

from .. import caches as _caches
from .. import launching
from ..array import Array
from ..backends import backend_for
from ..cache import KernelPlan, SourceKernel
from ..evaluate import allocate
from ..expr.nodes import Storage
from ..runtime.devices import Device, _runtime
from ..runtime.transfer import wait
from .radix_kernels import COMMON, COUNT, HIST, SCAN, SCATTER, STARTS, SWEEP_COMMON
from .radix_keys import BITS, KEYS
from .radix_match import MATCH, WARP, match_local_bytes, warp_ptx

#: the sorted digit's bits (256 buckets)
RADIX_BITS = 8
RADIX = 1 << RADIX_BITS
#: work-items per work-group on a GPU, and on a CPU device (PoCL runs a group's work-items
#: in a loop; a small group keeps its barriers cheap): powers of two up to RADIX
GPU_GROUP, CPU_GROUP = 256, 32
#: the most keys a work-item ranks per tile (fewer where local memory is short; the
#: scatter's counts take tiles below 2^16 keys and at most 255 keys a work-item)
MAX_PER_ITEM = 16
#: copies of the count kernel's histogram a work-group (a power of two; fewer where local
#: memory is short): on a GPU they spread the atomics of a warp's lanes that share a
#: digit; a CPU runs a group's work-items one after another, where copies only cost
GPU_COPIES, CPU_COPIES = 8, 1
#: the scan kernel through local memory (coalesced loads and stores of each digit's row,
#: a GPU's way), else each work-item its own stretch of the row (a CPU's, where the
#: local scan's extra barriers cost more than they save)
GPU_SCAN_LOCAL, CPU_SCAN_LOCAL = True, False
#: the most work-groups of the key kernel (each writes one partial OR and AND)
KEY_GROUPS = 1024
#: positions and offsets are uint: larger arrays take pyopencl's sort
MAX_ELEMENTS = (1 << 32) - 1
#: False sends every OpenCL sort to pyopencl's RadixSort (benchmarks/bench_sort.py
#: times both in one run)
ENABLED = True
#: the passes' way: "classic" (the key kernel, then count, scan and scatter kernels a
#: pass), "onesweep" (the key kernel, the digits' starts of every pass from one
#: histogram kernel, then one kernel a pass that sorts its tile and finds where the
#: tile's digits go by decoupled look-back) or "fused" (one-sweep without the key
#: kernel: the histograms and the first pass read the values and make their keys).
#: The look-back waits on other work-groups, which OpenCL does not promise to run
#: alongside: GPU_VARIANT is taken on GPUs whose vendor names one of
#: ONESWEEP_VENDORS (NVIDIA's run every started work-group to its end), CPU_VARIANT
#: on CPUs, "classic" elsewhere; VARIANT, when set, on every device (the benchmarks
#: compare them in one run).  Sorts of several rows are always "classic".
VARIANT: str | None = None
GPU_VARIANT, CPU_VARIANT = "fused", "classic"
ONESWEEP_VENDORS = ("nvidia",)
#: status words a one-sweep look-back step reads at once (a power of two)
LOOKBACK = 4
#: the look-back reads status words by volatile loads (True; on NVIDIA plain loads from
#: the L2, a warp's words of a tile in one transaction) or by atomics (False: the L2's
#: atomic unit, a word at a time, for every step of every walk)
LOOKBACK_VOLATILE = False
#: the one-sweep pass kernel's scans of its tile's counts by raking (True: 2 barriers a
#: scan, 32 work-items summing 8 sums each serially) or Hillis-Steele (False: 9 barriers
#: a scan for 256 work-items, every work-item busy)
RAKE_SCAN = False
#: how a one-sweep pass ranks its tile's keys: "nibbles" (two counting sorts by the
#: digit's 4-bit halves, any OpenCL device) or "match" (by the whole digit at once,
#: the lanes of a warp holding one digit found by PTX's match.any: see
#: :mod:`fuseloop.ops.radix_match`; on devices without inline PTX emulated through
#: local memory, for tests).  None: "match" on NVIDIA's OpenCL GPUs where its local
#: memory fits, else "nibbles"
RANKING: str | None = None
#: keys a work-item of the one-sweep passes (None: the layout's, as the classic
#: passes'): more keys make fewer, larger tiles (fewer look-back walks and barriers a
#: key, more local memory a work-group: taken only where the tile fits, else halved)
SWEEP_PER: int | None = None
#: the fused variant's first pass speculative (issue 27): None (off: the histograms are
#: read back before any pass, and passes whose byte is the same in every key are
#: skipped), "early" or "late": the digits' starts of every byte and the pass over byte
#: 0 are enqueued before the host has the histograms, so the device does not idle
#: while they travel; byte 0's pass, where it turns out the same in every key, copies
#: its keys straight (a stable identity; see SPEC in fl_radix_onesweep).  "early" reads
#: the starts before that pass (the host has them, and enqueues the later passes, while
#: it runs; the pass waits for the read's copy); "late" after it (the read waits for the
#: pass); "side" on a second queue of the device, after the starts (OpenCL: the pass
#: waits for nothing, the read for the starts only; elsewhere as "early").  Where byte
#: 0's pass turns out the only one, it wrote keys: the caller makes the values (one
#: more kernel).  "all": no read at all, a pass for every byte of the values, each
#: copying where its byte is constant (the last writing the values): nothing waits, at
#: a copy pass for each constant byte instead of a skipped one.
#: "early" is the default: on an H100 (bench_sort.py --speculate, one run, modes
#: alternating) it took 0.96-0.98 of the time of None for sort and argsort of random
#: and of integer-valued float32
SPECULATE: str | None = "early"
#: the one-sweep status words hold counts in 30 bits: larger arrays take "classic"
MAX_ONESWEEP = (1 << 30) - 1
#: words of the one-sweep state before its status arrays (the two tile counters)
_ST_HEAD = 32

_UNSIGNED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
#: the bits of +inf of a float this wide (unused by the integers)
_INF = {1: "MASK", 2: "0x7C00", 4: "0x7F800000", 8: "0x7FF0000000000000UL"}

# (key bytes, payload, layout) -> count, scan, scatter; (value bytes, group) -> keys, values
_PASSES: dict[tuple, tuple[SourceKernel, SourceKernel, SourceKernel]] = {}
_KEY_KERNELS: dict[tuple, tuple[SourceKernel, SourceKernel]] = {}
_lock = threading.Lock()
_caches.register("ops.radix_sort.passes", _PASSES.clear, lambda: len(_PASSES),
                 why="per key width, payload and layout")
_caches.register("ops.radix_sort.keys", _KEY_KERNELS.clear, lambda: len(_KEY_KERNELS),
                 why="per value width and work-group size")


class Layout(NamedTuple):
    """Work-items per group and keys per work-item of the radix passes."""

    group: int
    per: int

    @property
    def tile(self) -> int:
        return self.group * self.per


def _local_bytes(group: int, per: int, key_size: int, values: bool) -> int:
    """The scatter kernel's local memory (the largest of the three)."""
    def pad(count: int) -> int:
        return count + count // 32

    return (pad(group * per) * (key_size + (4 if values else 0)) + 4 * pad(8 * group)
            + 8 * group + 4 * RADIX + 64)


def _onesweep_fits(device: Device, layout: Layout, key_size: int, values: bool) -> bool:
    """Whether the one-sweep kernel (the run ends and the tile number beside the
    scatter's local memory) fits ``device`` with ``layout``."""
    return (_local_bytes(layout.group, layout.per, key_size, values) + 4 * RADIX + 4
            <= local_memory(device))


def local_memory(device: Device) -> int:
    """The bytes of local memory a work-group of ``device`` may use."""
    return getattr(device.cl_device, "local_mem_size", 0) or 32768


def layout_for(device: Device, key_size: int, values: bool, n: int) -> Layout | None:
    """The radix passes' layout on ``device`` for ``n`` keys of ``key_size`` bytes (with
    32-bit positions when ``values``), or None where this sort cannot run: ``n`` of
    2^32 or more (positions are uint), or local memory too small for a tile of one key
    per work-item."""
    if n > MAX_ELEMENTS or not ENABLED:
        return None
    group = CPU_GROUP if device.type == "cpu" else GPU_GROUP
    # (a power of two, at most RADIX: the count kernel's histogram is RADIX words)
    while group > min(device.max_work_group_size, RADIX) or group & (group - 1):
        group //= 2
    if group < 2:
        return None
    local = local_memory(device)
    per = min(MAX_PER_ITEM, 255, ((1 << 16) - 1) // group)
    while per >= 1 and _local_bytes(group, per, key_size, values) > local:
        per //= 2
    return Layout(group, per) if per >= 1 else None


def _plan(name: str, body: str, args: list[str], dtypes: list[str | None], gsize: str,
          group: int, options: list[str]) -> SourceKernel:
    return SourceKernel(KernelPlan(name=name, source=body, arg_names=args, gsize=[gsize],
                                   lsize=[str(group)], arg_dtypes=dtypes,
                                   build_options=options))


class Recipe(NamedTuple):
    """How the count and scan kernels run on a device (see GPU_COPIES, GPU_SCAN_LOCAL)."""

    copies: int
    scan_local: bool


def recipe_for(device: Device, layout: Layout) -> Recipe:
    """The count kernel's copies of its histogram (local memory allowing) and the scan's
    way on ``device``."""
    cpu = device.type == "cpu"
    copies = min(CPU_COPIES if cpu else GPU_COPIES, layout.group)
    while copies > 1 and 4 * RADIX * (copies + 1) + 64 > local_memory(device):
        copies //= 2
    return Recipe(max(copies, 1), CPU_SCAN_LOCAL if cpu else GPU_SCAN_LOCAL)


def variant_for(device: Device, n: int, rows: int, layout: Layout | None = None,
                key_size: int = 4, values: bool = True) -> str:
    """The passes' way for ``rows`` rows of ``n`` keys in all on ``device`` (see
    VARIANT): one-sweep sorts one row of fewer than 2^30 keys, where its kernel's
    local memory fits (``layout``, keys of ``key_size`` bytes, with positions when
    ``values``)."""
    if rows > 1 or n > MAX_ONESWEEP:
        return "classic"
    if layout is not None and not _onesweep_fits(device, layout, key_size, values):
        return "classic"
    if VARIANT is not None:
        return VARIANT
    if device.type == "cpu":
        return CPU_VARIANT
    vendor = (device.vendor or "").lower()
    return GPU_VARIANT if any(v in vendor for v in ONESWEEP_VENDORS) else "classic"


def sweep_layout(device: Device, layout: Layout, key_size: int, values: bool) -> Layout:
    """The one-sweep passes' layout: ``layout`` with SWEEP_PER keys a work-item where
    set and the one-sweep kernel's local memory fits (halved until it does; the
    ranking's 16-bit counts take tiles below 2^16 keys)."""
    if SWEEP_PER is None:
        return layout
    per = min(SWEEP_PER, 255, ((1 << 16) - 1) // layout.group)
    while per > layout.per and not _onesweep_fits(device, Layout(layout.group, per),
                                                  key_size, values):
        per //= 2
    return Layout(layout.group, per) if per >= 1 else layout


def ranking_for(device: Device, layout: Layout, key_size: int, values: bool) -> str:
    """How ``device``'s one-sweep passes rank a tile with ``layout`` (see RANKING):
    "match" needs whole warps and a divisor of RADIX work-items a group."""
    ptx = warp_ptx(device)
    wanted = RANKING if RANKING is not None else "match" if ptx else "nibbles"
    g = layout.group
    if (wanted != "match" or g % WARP or RADIX % g
            or match_local_bytes(g, layout.per, key_size, values, ptx)
            > local_memory(device)):
        return "nibbles"
    return "match"


def _ranked(device: Device, layout: Layout, key_size: int, values: bool) -> dict[str, Any]:
    """:func:`_onesweep_kernels`' ranking arguments on ``device``."""
    return {"ranking": ranking_for(device, layout, key_size, values),
            "ptx": warp_ptx(device)}


def _hist_copies(device: Device, key_size: int, recipe: Recipe) -> int:
    """The one-sweep histogram kernel's copies of its histograms (one a key byte)."""
    copies = recipe.copies
    while copies > 1 and 4 * RADIX * key_size * (copies + 1) + 64 > local_memory(device):
        copies //= 2
    return copies


def _options(key_size: int, values: bool, layout: Layout, recipe: Recipe,
             value_size: int = 0) -> list[str]:
    """Build options; ``value_size``: U (and U4) the values' bits instead of the keys'."""
    u = value_size or key_size
    return [f"-DKT={_UNSIGNED[key_size]}", f"-DVKT={_UNSIGNED[key_size]}4",
            f"-DHAS_VALUES={int(values)}", f"-DNSUB={recipe.copies}",
            f"-DSCAN_LOCAL={int(recipe.scan_local)}",
            f"-DWG={layout.group}", f"-DPER={layout.per}", f"-DU={_UNSIGNED[u]}",
            f"-DU4={_UNSIGNED[u]}4", f"-DBITS={8 * u}", f"-DINF={_INF[u]}"]


def _onesweep_kernels(key_size: int, values: bool, layout: Layout, recipe: Recipe,
                      copies: int, value_size: int = 0, spec: bool = False,
                      ranking: str = "nibbles", ptx: bool = False
                      ) -> tuple[SourceKernel, SourceKernel, SourceKernel]:
    """The one-sweep histogram, starts and pass kernels for keys of ``key_size``
    bytes (``copies`` of the histograms); ``value_size``: the histogram and the pass
    read values of that many bytes and make their keys (the fused variant's first
    pass; its starts kernel is the same as without); ``spec``: the pass copies its
    tiles straight where its digit is the same in every key (see SPECULATE);
    ``ranking``: the pass's way of ranking (see RANKING; ``ptx``: by inline PTX)."""
    key = ("onesweep", key_size, values, layout, recipe, copies, value_size, LOOKBACK,
           LOOKBACK_VOLATILE, RAKE_SCAN, spec, ranking, ptx)
    found = _PASSES.get(key)
    if found is not None:
        return found
    opts = [*_options(key_size, values, layout, recipe, value_size), "-DONESWEEP=1",
            f"-DNBYTES={key_size}", f"-DHNSUB={copies}", f"-DFROM_SRC={int(value_size > 0)}",
            f"-DLOOKBACK={LOOKBACK}", f"-DLB_VOLATILE={int(LOOKBACK_VOLATILE)}",
            f"-DRAKE_SCAN={int(RAKE_SCAN)}", f"-DWARP_PTX={int(ptx)}",
            *(["-DSPEC=1"] if spec else [])]
    g = layout.group
    # (the histogram kernel depends on neither the positions nor the tile, the starts
    # kernel on nothing but the work-group: fewer builds)
    hist_opts = [o for o in opts
                 if not o.startswith(("-DHAS_VALUES", "-DNSUB", "-DSCAN", "-DLOOKBACK",
                                      "-DLB_", "-DRAKE", "-DPER", "-DSPEC",
                                      "-DWARP"))]
    made = (
        _plan("fl_radix_hist", COMMON + BITS + HIST,
              ["in0", "out0", "out1", "s0", "s1", "s2", "s3", "p0", "p1"],
              [None, None, None, "int32", "int32", "int32", "int32", "int64", "int64"],
              "p[2]", g, [*hist_opts, "-DHAS_VALUES=0"]),
        _plan("fl_radix_starts", COMMON + STARTS, ["out0", "s0"], [None, "int32"], "1", g,
              [f"-DWG={g}", "-DPER=1", "-DHAS_VALUES=0", "-DNBYTES=8"]),
        _plan("fl_radix_onesweep",
              COMMON + BITS + (SWEEP_COMMON + MATCH if ranking == "match" else SCATTER),
              ["in0", "in1", "in2", "out0", "out1", "out2", "s0", "s1", "s2", "s3", "s4",
               "s5", "p0", "p1"],
              [None, None, None, None, None, None, "int32", "int32", "int32", "int32",
               "int32", "int32", "int64", "int64"], "p[1]", g, opts))
    with _lock:
        return _PASSES.setdefault(key, made)


def _pass_kernels(key_size: int, values: bool, layout: Layout,
                  recipe: Recipe) -> tuple[SourceKernel, SourceKernel, SourceKernel]:
    """The count, scan and scatter kernels for keys of ``key_size`` bytes."""
    key = (key_size, values, layout, recipe)
    found = _PASSES.get(key)
    if found is not None:
        return found
    opts = [*_options(key_size, values, layout, recipe), "-DONESWEEP=0"]
    g = layout.group
    pass_args = ["s0", "s1", "s2", "p0", "p1"]
    pass_types: list[str | None] = ["int32", "int32", "int64", "int64", "int64"]
    out_args = ["s0", "s1", "s2", "s3", "s4", "p0", "p1"]
    out_types: list[str | None] = ["int32", "int32", "int64", "int32", "int32", "int64",
                                   "int64"]
    made = (
        _plan("fl_radix_count", COMMON + COUNT,
              ["in0", "in1", "out0", "out1", *pass_args],
              [None, None, None, None, *pass_types], "p[1]", g, opts),
        _plan("fl_radix_scan", COMMON + SCAN, ["out0", "in0", "p1"],
              [None, None, "int64"], str(RADIX), g, opts),
        _plan("fl_radix_scatter", COMMON + BITS + SCATTER,
              ["in0", "in1", "in2", "out0", "out1", "out2", *out_args],
              [None, None, None, None, None, None, *out_types], "p[1]", g, opts))
    with _lock:
        return _PASSES.setdefault(key, made)


def _key_kernels(size: int, group: int) -> tuple[SourceKernel, SourceKernel]:
    """The kernels making keys of values of ``size`` bytes and values of sorted keys."""
    key = (size, group)
    found = _KEY_KERNELS.get(key)
    if found is not None:
        return found
    opts = [f"-DU={_UNSIGNED[size]}", f"-DKT={_UNSIGNED[max(size, 4)]}",
            f"-DU4={_UNSIGNED[size]}4", f"-DKT4={_UNSIGNED[max(size, 4)]}4",
            f"-DBITS={8 * size}", f"-DINF={_INF[size]}", f"-DWG={group}"]
    made = (
        _plan("fl_radix_keys", BITS + KEYS,
              ["in0", "out0", "out1", "out2", "out3", "s0", "s1", "s2", "s3", "p0"],
              [None, None, None, None, None, "int32", "int32", "int32", "int32", "int64"],
              "p[1]", group, opts),
        _plan("fl_radix_values", BITS + KEYS, ["in0", "out0", "s0", "s1", "p0"],
              [None, None, "int32", "int32", "int64"], "p[1]", group, opts))
    with _lock:
        return _KEY_KERNELS.setdefault(key, made)


def _kind(dt: np.dtype) -> np.int32:
    return np.int32(2 if dt.kind == "f" else 1 if dt.kind == "i" else 0)


def _launch(kernel: SourceKernel, params: tuple[int, ...], outs: list[Storage],
            ins: list[Storage], scalars: list, dev: Device) -> None:
    plan = launching.plan_for(kernel.get(dev), params, 0, 0, dev)
    assert plan is not None  # (only a one-output plan can be refused)
    launching.enqueue(plan, outs, ins, scalars, False, dev)


def _varying_shifts(partials: Storage, groups: int, key_size: int,
                    bits: int) -> list[int]:
    """The shifts of the digits that differ between keys (from the partial ORs and
    ANDs: one read from the device)."""
    kdt = np.dtype(f"u{key_size}")
    got = Array._concrete(partials, kdt, (2, groups)).get()
    o, a = np.bitwise_or.reduce(got[0]), np.bitwise_and.reduce(got[1])
    differ = int(o ^ a)
    return [s for s in range(0, bits, RADIX_BITS) if (differ >> s) & (RADIX - 1)]


class Sorted(NamedTuple):
    """The sorted keys (None when the last pass wrote the values instead), each one's
    flat position (uint32) when asked for, and the values when :func:`sort_keys` wrote
    them."""

    keys: Storage | None
    positions: Storage | None
    values: Array | None


def sort_keys(src: Array, row: int, descending: bool, canon: bool, positions: bool,
              layout: Layout, want_values: bool = False) -> Sorted:
    """Sort the rows of ``row`` elements of the contiguous, evaluated ``src`` (its
    bits: bool as uint8) stably by key, with positions when ``positions`` (always
    with more than one row); ``want_values`` (not with ``canon``): the last pass writes
    the sorted values instead of keys where they are as wide (4 or 8 bytes)."""
    dev, n, dt = src.device, src.size, src.dtype
    key_size = max(dt.itemsize, 4)
    rows = n // row
    values = positions or rows > 1
    variant = variant_for(dev, n, rows, layout, key_size, values)
    if variant != "classic":
        layout = sweep_layout(dev, layout, key_size, values)
    if variant == "fused":
        done = _fused(src, descending, canon, values, layout, want_values)
        if done is not None:
            return done
    to_keys, _ = _key_kernels(dt.itemsize, layout.group)
    keys = [allocate(n * key_size, dev), allocate(n * key_size, dev)]
    vals = [allocate(n * 4, dev), allocate(n * 4, dev)] if values else [keys[0], keys[1]]
    # (16 values a work-item at least: 4 vectors of 4 in flight)
    groups = max(1, min(KEY_GROUPS, -(-n // (16 * layout.group))))
    partials = allocate(2 * groups * key_size, dev)  # (the groups' ORs, then ANDs)
    totals = allocate(8 * RADIX * 4, dev)  # (a histogram a key byte: see fl_radix_hist)
    assert src._storage is not None
    flags = [_kind(dt), np.int32(descending), np.int32(canon), np.int32(values)]
    _launch(to_keys, (n, groups), [keys[0], vals[0], partials, totals], [src._storage],
            flags, dev)
    shifts = [(s, 0) for s in _varying_shifts(partials, groups, key_size,
                                              8 * dt.itemsize)]
    if rows > 1:
        shifts += [(s, 1) for s in range(0, (rows - 1).bit_length(), RADIX_BITS)]
    out = None
    if want_values and shifts and dt.itemsize == key_size:
        assert not canon  # (canon keys have no values)
        out = Array._concrete(allocate(n * key_size, dev), dt, (n,))
    tiles = -(-n // layout.tile)
    if shifts and variant == "onesweep":
        _onesweep(keys, vals, totals, [s for s, _ in shifts], out, layout, dt, descending,
                  values, n)
        return Sorted(None if out is not None else keys[0], vals[0] if values else None, out)
    count, scan, scatter = _pass_kernels(key_size, values, layout,
                                         recipe_for(dev, layout))
    if shifts:
        counts = allocate(RADIX * tiles * 4, dev)
    params = (n, tiles)
    for p, (shift, by_row) in enumerate(shifts):
        scalars = [np.int32(shift), np.int32(by_row), np.int64(row)]
        _launch(count, params, [counts, totals], [keys[0], vals[0]], scalars, dev)
        _launch(scan, params, [counts], [totals], [], dev)
        last = out is not None and p == len(shifts) - 1
        if last:
            assert out is not None and out._storage is not None  # (a concrete array)
            keys[1] = out._storage
        _launch(scatter, params, [keys[1], vals[1], totals], [keys[0], vals[0], counts],
                [*scalars, _kind(dt) if last else np.int32(-1), np.int32(descending)], dev)
        keys.reverse()
        vals.reverse()
    return Sorted(None if out is not None else keys[0], vals[0] if values else None, out)


class _Sweep(NamedTuple):
    """What every one-sweep pass of a sort shares."""

    hist: Storage  # (the digits' starts of each byte, after fl_radix_starts)
    state: Storage
    out: Array | None  # (the values, written by the last pass)
    dt: np.dtype
    descending: bool
    canon: bool
    n: int
    tiles: int


def _sweep_state(dev: Device, n: int, layout: Layout) -> tuple[Storage, int]:
    """The one-sweep state (see fl_radix_onesweep) and its words to zero before the
    first pass (the counters and the first pass's status words)."""
    tiles = -(-n // layout.tile)
    return allocate(4 * (_ST_HEAD + 2 * tiles * RADIX), dev), _ST_HEAD + tiles * RADIX


def _sweep_passes(sweep: _Sweep, one: SourceKernel, shifts: list[int], keys: list[Storage],
                  vals: list[Storage], first: tuple[SourceKernel, Storage] | None = None,
                  start: int = 0) -> None:
    """The one-sweep passes over ``shifts``; ``keys`` and ``vals`` swapped after each
    as in :func:`sort_keys`; ``first``: the first pass's kernel and the values it reads
    (the fused variant); ``start``: the passes run before these (their state's parity
    goes on from there)."""
    dev, dt = sweep.hist.device, sweep.dt
    for p, shift in enumerate(shifts, start):
        last = sweep.out is not None and p == start + len(shifts) - 1
        if last:
            assert sweep.out is not None and sweep.out._storage is not None  # (concrete)
            keys[1] = sweep.out._storage
        kernel, src = first if first is not None and p == start else (one, keys[0])
        _launch(kernel, (sweep.n, sweep.tiles), [keys[1], vals[1], sweep.state],
                [src, vals[0], sweep.hist],
                [np.int32(shift), np.int32(p % 2), _kind(dt) if last else np.int32(-1),
                 np.int32(sweep.descending), _kind(dt), np.int32(sweep.canon)], dev)
        keys.reverse()
        vals.reverse()


def _onesweep(keys: list[Storage], vals: list[Storage], hist: Storage, shifts: list[int],
              out: Array | None, layout: Layout, dt: np.dtype, descending: bool,
              values: bool, n: int) -> None:
    """:func:`sort_keys`'s passes the one-sweep way (see VARIANT) over the keys made by
    fl_radix_keys (which zeroed ``hist``)."""
    dev = hist.device
    key_size = max(dt.itemsize, 4)
    recipe = recipe_for(dev, layout)
    to_hist, to_starts, one = _onesweep_kernels(
        key_size, values, layout, recipe, _hist_copies(dev, key_size, recipe),
        **_ranked(dev, layout, key_size, values))
    state, zero = _sweep_state(dev, n, layout)
    mask = np.int32(sum(1 << (s // RADIX_BITS) for s in shifts))
    groups = max(1, min(KEY_GROUPS, -(-n // (16 * layout.group))))
    _launch(to_hist, (zero, n, groups), [hist, state], [keys[0]],
            [mask, _kind(dt), np.int32(descending), np.int32(0)], dev)
    _launch(to_starts, (), [hist], [], [mask], dev)
    sweep = _Sweep(hist, state, out, dt, descending, False, n, -(-n // layout.tile))
    _sweep_passes(sweep, one, shifts, keys, vals)


def _fused(src: Array, descending: bool, canon: bool, values: bool, layout: Layout,
           want_values: bool) -> Sorted | None:
    """:func:`sort_keys` of one row the fused one-sweep way (see VARIANT): the
    histograms and the first pass read the values (no key kernel); None where every
    key is the same (the caller's way then makes the keys)."""
    dev, n, dt = src.device, src.size, src.dtype
    assert src._storage is not None
    key_size = max(dt.itemsize, 4)
    recipe = recipe_for(dev, layout)
    copies = _hist_copies(dev, key_size, recipe)
    way = _ranked(dev, layout, key_size, values)
    to_hist, _, first = _onesweep_kernels(key_size, values, layout, recipe, copies,
                                          dt.itemsize, SPECULATE is not None, **way)
    _, to_starts, one = _onesweep_kernels(key_size, values, layout, recipe, copies, **way)
    hist = allocate(8 * RADIX * 4, dev)
    backend_for(dev).fill(dev, hist.buffer, np.zeros(1, np.uint32), 8 * RADIX * 4)
    state, zero = _sweep_state(dev, n, layout)
    groups = max(1, min(KEY_GROUPS, -(-n // (16 * layout.group))))
    every = (1 << dt.itemsize) - 1
    _launch(to_hist, (zero, n, groups), [hist, state], [src._storage],
            [np.int32(every), _kind(dt), np.int32(descending), np.int32(canon)], dev)
    if SPECULATE is not None:
        _launch(to_starts, (), [hist], [], [np.int32(every)], dev)
        sweep = _Sweep(hist, state, None, dt, descending, canon, n, -(-n // layout.tile))
        if SPECULATE == "all":  # (every pass copying where its byte is constant)
            one = _onesweep_kernels(key_size, values, layout, recipe, copies, 0, True,
                                    **way)[2]
        return _speculated(sweep, src._storage, first, one, values, want_values)
    # (one read from the device, as the key kernel's OR and AND: the bytes that vary)
    got = Array._concrete(hist, np.dtype(np.uint32), (8, RADIX)).get()
    shifts = [RADIX_BITS * b for b in range(dt.itemsize) if np.count_nonzero(got[b]) > 1]
    if not shifts:
        return None
    _launch(to_starts, (), [hist], [], [np.int32(sum(1 << (s // RADIX_BITS)
                                                         for s in shifts))], dev)
    keys = [allocate(n * key_size, dev), allocate(n * key_size, dev)]
    vals = [allocate(n * 4, dev), allocate(n * 4, dev)] if values else [keys[0], keys[1]]
    out = None
    if want_values and dt.itemsize == key_size:
        out = Array._concrete(allocate(n * key_size, dev), dt, (n,))
    sweep = _Sweep(hist, state, out, dt, descending, canon, n, -(-n // layout.tile))
    _sweep_passes(sweep, one, shifts, keys, vals, (first, src._storage))
    return Sorted(None if out is not None else keys[0], vals[0] if values else None, out)


def _speculated(sweep: _Sweep, src: Storage, first: SourceKernel, one: SourceKernel,
                values: bool, want_values: bool) -> Sorted:
    """:func:`_fused`'s passes with SPECULATE, after the starts of every byte: the pass
    over byte 0 is enqueued before the host reads the starts (see SPECULATE), then the
    passes of the later bytes that vary."""
    dev, n, dt = sweep.hist.device, sweep.n, sweep.dt
    key_size = max(dt.itemsize, 4)
    nbytes = 4 * RADIX * dt.itemsize
    if SPECULATE == "all":
        return _all_passes(sweep, src, first, one, values, want_values)
    reading = (_start_read(sweep.hist, nbytes, SPECULATE == "side")
               if SPECULATE != "late" else None)
    keys = [allocate(n * key_size, dev), allocate(n * key_size, dev)]
    vals = [allocate(n * 4, dev), allocate(n * 4, dev)] if values else [keys[0], keys[1]]
    _sweep_passes(sweep, first, [0], keys, vals, (first, src))
    if reading is None:
        reading = _start_read(sweep.hist, nbytes)
    else:
        _runtime(dev).submit(_runtime(dev).queue)  # (the pass under way while we wait)
    starts = _finish_read(reading, dev).view(np.uint32).reshape(dt.itemsize, RADIX)
    # (a byte varies where no digit counts every key: counts from the starts' steps)
    counts = np.diff(starts.astype(np.int64), axis=1, append=n)
    later = [RADIX_BITS * b for b in range(1, dt.itemsize) if counts[b].max() < n]
    if later:
        out = None
        if want_values and dt.itemsize == key_size:
            out = Array._concrete(allocate(n * key_size, dev), dt, (n,))
        _sweep_passes(sweep._replace(out=out), one, later, keys, vals, start=1)
        return Sorted(None if out is not None else keys[0], vals[0] if values else None,
                      out)
    # (byte 0's pass was the last or copied the keys straight: its keys, not values)
    return Sorted(keys[0], vals[0] if values else None, None)


def _all_passes(sweep: _Sweep, src: Storage, first: SourceKernel, one: SourceKernel,
                values: bool, want_values: bool) -> Sorted:
    """SPECULATE "all": a pass for every byte of the values, each copying its keys
    straight where its byte is constant (``one`` built so), the last writing the values;
    no read from the device at all."""
    dev, n, dt = sweep.hist.device, sweep.n, sweep.dt
    key_size = max(dt.itemsize, 4)
    keys = [allocate(n * key_size, dev), allocate(n * key_size, dev)]
    vals = [allocate(n * 4, dev), allocate(n * 4, dev)] if values else [keys[0], keys[1]]
    out = None
    if want_values and dt.itemsize == key_size:
        out = Array._concrete(allocate(n * key_size, dev), dt, (n,))
    _sweep_passes(sweep._replace(out=out), one,
                  [RADIX_BITS * b for b in range(dt.itemsize)], keys, vals, (first, src))
    return Sorted(None if out is not None else keys[0], vals[0] if values else None, out)


_Reading = tuple[Any, np.ndarray, Any]


def _start_read(storage: Storage, nbytes: int, side: bool = False) -> _Reading:
    """Enqueue the read of ``storage``'s first ``nbytes`` bytes without waiting (into
    page-locked memory where the backend has it: a GPU's read into ordinary memory may
    hold the host until done) and hand the queue to the device; ``side``: on the
    device's second queue (OpenCL), after what its queue holds, so that what is
    enqueued there next does not wait for the read."""
    dev = storage.device
    slot = backend_for(dev).staging_slot(dev, nbytes)
    host = slot.host[:nbytes] if slot is not None else np.empty(nbytes, np.uint8)
    rt = _runtime(dev)
    rt.flush()  # (deferred launches first)
    queue, after = rt.queue, None
    if side and dev.backend == "opencl":
        queue, after = _side_queue(rt), [rt.marker(rt.queue)]
        rt.submit(rt.queue)
    event = rt.enqueue_read(queue, host, storage.buffer, after, False)
    if slot is not None:
        slot.event = event
    rt.submit(queue)
    return event, host, slot


# (a device runtime's id -> it, held so that the id stays its, and its second queue,
# for SPECULATE "side")
_SIDE: dict[int, tuple[Any, Any]] = {}
_caches.register("ops.radix_sort.side_queues", _SIDE.clear, lambda: len(_SIDE),
                 why="a second queue per device runtime (SPECULATE side)")


def _side_queue(rt: Any) -> Any:
    """A second in-order queue on ``rt``'s OpenCL context and device (made once)."""
    found = _SIDE.get(id(rt))
    if found is not None and found[0] is rt:
        return found[1]
    import pyopencl as cl

    queue = cl.CommandQueue(rt.context, rt.device.cl_device)
    with _lock:
        _SIDE[id(rt)] = (rt, queue)
    return queue


def _finish_read(reading: _Reading, dev: Device) -> np.ndarray:
    """The bytes :func:`_start_read` reads, once read."""
    event, host, slot = reading
    wait(event, dev)
    got = host.copy() if slot is not None else host
    if slot is not None:
        slot.release()
    return got


def values_of(keys: Storage, dt: np.dtype, n: int, descending: bool,
              layout: Layout, device: Device) -> Array:
    """The values (of ``dt``, bool as uint8) of ``n`` keys sorted by :func:`sort_keys`
    with ``canon=False``."""
    _, from_keys = _key_kernels(dt.itemsize, layout.group)
    out = Array._concrete(allocate(n * dt.itemsize, device), dt, (n,))
    assert out._storage is not None
    _launch(from_keys, (n, -(-n // layout.group)), [out._storage], [keys],
            [_kind(dt), np.int32(descending)], device)
    return out


__all__ = ["Layout", "Recipe", "Sorted", "layout_for", "ranking_for", "recipe_for", "sort_keys",
           "sweep_layout", "values_of", "variant_for"]
