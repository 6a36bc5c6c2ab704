"""numpy's advanced indexing: several integer-array indices and boolean masks."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl

H2 = np.arange(15.0).reshape(3, 5)
H3 = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
II = np.array([0, 2, -1])
JJ = np.array([1, -2, 4])

GATHER_KEYS = [
    (H2, (II, JJ)), (H2, ([0, 2], [1, 3])), (H2, (II[:, None], JJ)),
    (H2, (II[:, None], JJ[None, :2])),
    (H2, (0, JJ)), (H2, (II, -1)), (H2, (slice(None, None, -1), JJ)), (H2, (II, slice(1, 4))),
    (H2, (np.array(1), JJ)), (H2, (II.reshape(3, 1, 1), JJ)), (H2, (None, II, JJ)),
    (H3, (slice(None), II, JJ[:3] % 4 - 1)), (H3, (II, slice(None), JJ)), (H3, (II, 1, JJ)),
    (H3, (II[:2], [1, 2], [0, 4])), (H3, (1, slice(None), [0, 4])), (H3, (Ellipsis, [1], [2, 3])),
    (H3, ([2, 0], slice(1, 3), None, [4])), (H3, (slice(None), [[0], [3]], slice(None, 2))),
    (H3, ([1], Ellipsis, [0, 1])), (H2, ([], [])),
]


@pytest.mark.parametrize("h,key", GATHER_KEYS)
def test_gather_matches_numpy(device, h, key):
    x = fl.asarray(h)
    got, want = x[key], h[key]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.get(), want)
    # with fuseloop arrays as indices, and on a lazy array
    fkey = tuple(fl.asarray(np.asarray(k)) if isinstance(k, list | np.ndarray) and np.size(k)
                 else k for k in key)
    np.testing.assert_array_equal(((x * 1)[fkey] + 1).get(), want + 1)


def test_lazy_index_expressions(device):
    m = fl.asarray(H2)
    i = fl.arange(3) - 1  # -1, 0, 1
    j = fl.arange(3) * 2
    np.testing.assert_array_equal(m[i, j].get(), H2[np.arange(3) - 1, np.arange(3) * 2])
    np.testing.assert_array_equal(m[i[:, None], j].get(),
                                  H2[(np.arange(3) - 1)[:, None], np.arange(3) * 2])
    # the same index for two axes of different lengths: each is checked on its own
    np.testing.assert_array_equal(m[i, i].get(), H2[np.arange(3) - 1, np.arange(3) - 1])
    # 3 and 4 both offend: which one is reported depends on the device's work-items
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=r"index [34] is out of bounds "
                       r"for axis 0 with size 3"):
        m[i + 3, i + 3].get()


def test_gather_fuses_into_one_kernel(device):
    m = fl.asarray(H2)
    i, j = fl.asarray(II), fl.asarray(JJ)
    fl.reset_stats()
    got = (m[i, j] * 2 + m[j % 3, i]).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_array_equal(got, H2[II, JJ] * 2 + H2[JJ % 3, II])


@pytest.mark.parametrize("key,axis,value,size", [
    ((0, 7), 1, 7, 5), ((np.array([0]), np.array([7])), 1, 7, 5),
    ((np.array([3, 0]), np.array([1, 1])), 0, 3, 3), ((np.array([0]), np.array([-6])), 1, -6, 5),
])
def test_bounds_checked_per_axis(device, key, axis, value, size):
    m = fl.asarray(H2)
    with pytest.raises(fl.errors.IndexOutOfBoundsError,
                       match=f"index {value} is out of bounds for axis {axis} with size {size}"):
        m[key].get()
    with pytest.raises(IndexError):
        H2[key]


def test_index_into_an_empty_axis_raises_before_any_kernel(device, fresh_stats):
    """Every value is out of range for an axis of length 0; no kernel may try to read
    it (its clamp has no element to land on)."""
    empty = fl.zeros((0, 3))
    cases = [
        (lambda: empty[[0]], "index 0 is out of bounds for axis 0 with size 0"),
        (lambda: fl.take(empty, np.array([2, 0]), axis=0), r"index 2 .* axis 0 with size 0"),
        (lambda: fl.zeros((3, 0))[:, [1]], r"index 1 .* axis 1 with size 0"),
    ]
    for build, message in cases:
        fl.reset_stats()
        with pytest.raises(fl.errors.IndexOutOfBoundsError, match=message):
            build()
        assert fresh_stats()["kernels_launched"] == 0
    # a lazy index is computed to report its value; the empty axis is never read
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=r"index 4 .* axis 1 with size 0"):
        fl.zeros((3, 0))[:, fl.asarray(np.array([2, 5])) + 2]
    # an empty index into an empty axis is fine (numpy)
    assert empty[np.array([], dtype=np.int64)].get().shape == (0, 3)
    with pytest.raises(IndexError):
        np.zeros((0, 3))[[0]]


def test_index_values_are_checked_even_when_the_result_is_empty(device, fresh_stats):
    """numpy checks every index value it is given, also where another axis makes the
    result empty; an index broadcast to no values at all is never checked."""
    h = np.zeros((3, 4))
    a = fl.asarray(h)
    for form in (np.asarray, fl.asarray):
        idx = form(np.array([9]))
        with pytest.raises(IndexError):
            h[0:0, [9]]
        with pytest.raises(fl.errors.IndexOutOfBoundsError,
                           match="index 9 is out of bounds for axis 1 with size 4"):
            a[0:0, idx]
        with pytest.raises(fl.errors.IndexOutOfBoundsError,
                           match="index -5 is out of bounds for axis 1 with size 4"):
            a[0:0, form(np.array([-5]))]
        assert a[1:1, form(np.array([3]))].shape == h[1:1, [3]].shape == (0, 1)
    none = np.zeros(0, np.int64)
    assert a[none[:, None], [9]].shape == h[none[:, None], [9]].shape == (0, 1)
    assert a[fl.asarray(none)[:, None], fl.asarray(np.array([9]))].get().shape == (0, 1)
    # numpy's take checks nothing when it takes nothing; a non-empty take does
    assert fl.take(fl.zeros((0, 4)), [9], axis=1).shape == \
        np.take(np.zeros((0, 4)), [9], axis=1).shape == (0, 1)
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match=r"index 9 .* axis 1 with size 4"):
        fl.take(a, [9], axis=1)
    # one small checking kernel for each device index into an empty result (three);
    # host indices are checked on the host
    assert fresh_stats()["kernels_launched"] == 3


def test_host_and_mask_indices_are_checked_before_the_gather(device, monkeypatch):
    """A host index array is checked (and wrapped) when applied, where numpy raises;
    its gather, like a mask's (whose positions are in range by construction), then
    reads no error flag back, so evaluating it does not wait for the device.  A
    device index array is checked by its gather: one flag read."""
    from fuseloop.runtime.devices import _runtime

    x = fl.asarray(H2)
    with pytest.raises(fl.errors.IndexOutOfBoundsError,
                       match="index 3 is out of bounds for axis 0 with size 3"):
        x[np.array([0, 3])]  # raised at once: nothing to evaluate
    reads = []
    rt = _runtime(device)
    real_read = rt.enqueue_read

    def counting_read(queue, host, buffer, wait_for, blocking):
        reads.append(blocking)
        return real_read(queue, host, buffer, wait_for, blocking)

    host_ix, dev_ix = np.array([2, -1, 0]), fl.asarray(np.array([2, -1, 0]))
    cases = [(lambda: x[host_ix, 1:] * 2, H2[host_ix, 1:] * 2, 0),
             (lambda: fl.take(x, [4, -3], axis=1) + 1, np.take(H2, [4, -3], axis=1) + 1, 0),
             (lambda: x[H2 > 6.5] - 1, H2[H2 > 6.5] - 1, 0),
             (lambda: x[dev_ix, 1:] * 2, H2[host_ix, 1:] * 2, 1)]
    for build, want, flag_reads in cases:
        y = build()
        monkeypatch.setattr(rt, "enqueue_read", counting_read)
        y.eval()
        monkeypatch.setattr(rt, "enqueue_read", real_read)
        assert len(reads) == flag_reads, reads
        reads.clear()
        np.testing.assert_array_equal(y.get(), want)
    # the host check's wrapped positions are the kernel's only index: no wrap, no flag
    src = fl.show_code(x[host_ix] * 2)
    assert "err" not in src and "fl_idx_wrap" not in src
    assert "err" in fl.show_code(x[dev_ix] * 2)


def test_index_errors(device):
    m = fl.asarray(H2)
    with pytest.raises(fl.errors.InvalidIndexError, match=r"shapes \(2,\) \(3,\)"):
        m[[0, 1], [0, 1, 2]]
    with pytest.raises(fl.errors.InvalidIndexError, match="too many indices for array: array "
                       "is 2-dimensional, but 3 were indexed"):
        m[[0], [0], [0]]
    with pytest.raises(fl.errors.DTypeError, match="integer type, got float64"):
        m[[0], np.array([0.5])]
    with pytest.raises(fl.errors.InvalidIndexError, match="size of axis is 5 but size of "
                       "corresponding boolean axis is 4"):
        m[:, np.ones(4, bool)]
    with pytest.raises(fl.errors.InvalidIndexError, match="scalar boolean"):
        m[True]


@pytest.mark.parametrize("key", [(II, JJ), ([0, 2], [1, 3]), (II[:, None], JJ[:2]), (0, JJ),
                                 (II, 1)])
@pytest.mark.parametrize("op", ["set", "add", "array"])
def test_scatter_with_several_indices(device, key, op):
    x, ref = fl.asarray(H2), H2.copy()
    if op == "set":
        x[key] = -1.0
        ref[key] = -1.0
    elif op == "add":
        x[key] += 5
        ref[key] += 5
    else:
        v = np.arange(np.size(ref[key]), dtype=float).reshape(ref[key].shape) + 100
        x[key] = fl.asarray(v)
        ref[key] = v
        # II names row 2 twice (2 and -1): where a key repeats a position, which of
        # the values written there wins is unspecified (numpy: the last); one of them
        got = x.get()
        candidates = [[] for _ in range(ref.size)]
        pos = np.arange(ref.size).reshape(ref.shape)[key]
        for p, val in zip(np.broadcast_to(pos, v.shape).ravel(), v.ravel()):
            candidates[p].append(val)
        for p, (g, r, c) in enumerate(zip(got.ravel(), ref.ravel(), candidates)):
            assert g in c if len(c) > 1 else g == r, (np.unravel_index(p, ref.shape), g, c, r)
        return
    np.testing.assert_array_equal(x.get(), ref)


def test_scatter_3d_non_adjacent_and_lazy(device):
    x, ref = fl.asarray(H3), H3.copy()
    x[[0, 2], :, [1, 3]] = fl.asarray(np.arange(8).reshape(2, 4))
    ref[[0, 2], :, [1, 3]] = np.arange(8).reshape(2, 4)
    x[:, fl.arange(2), fl.arange(2) + 3] *= 2
    ref[:, np.arange(2), np.arange(2) + 3] *= 2
    np.testing.assert_array_equal(x.get(), ref)
    y, ref = fl.asarray(np.arange(4.0)), np.arange(4.0)
    y[[1, 2, 3, 0]] = y  # reads what it writes, at other positions
    ref[[1, 2, 3, 0]] = ref.copy()
    np.testing.assert_array_equal(y.get(), ref)


MASKS = [
    (H2, H2 > 6), (H2, H2 > 100), (H2, H2 > -1), (H3, H3 % 7 == 0), (H3, (H3 % 2 == 0)[:, :, 0]),
    (H3, np.array([True, False, True])), (H2, [True, False, True]),
]


@pytest.mark.parametrize("h,mask", MASKS)
def test_mask_read_matches_numpy(device, h, mask):
    x = fl.asarray(h)
    want = h[mask]
    for m in (mask, fl.asarray(np.asarray(mask))):
        got = x[m]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got.get(), want)


def test_mask_from_lazy_comparison_and_other_axes(device):
    x = fl.asarray(H3.astype(np.float32))
    h = H3.astype(np.float32)
    np.testing.assert_array_equal(x[(x * 2) > 50].get(), h[h * 2 > 50])
    cols = H3[0, 0] % 2 == 1
    np.testing.assert_array_equal(x[:, :, cols].get(), h[:, :, cols])
    np.testing.assert_array_equal(x[1, H3[0, :, 0] > 5].get(), h[1, H3[0, :, 0] > 5])
    np.testing.assert_array_equal(x[[0, 2], :, cols].get(), h[[0, 2], :, cols])
    rows = fl.asarray(np.array([False, True, True]))
    np.testing.assert_array_equal(x[rows, 1:3].get(), h[[False, True, True], 1:3])
    fl.reset_stats()
    x[x > 10].get()
    assert fl.stats()["scans"] == 1


def test_nonzero_flatnonzero_argwhere(device):
    for h in (H2 % 3 == 0, H3 % 4, np.zeros(5), np.array([0.0, np.nan, -0.0, 2.0])):
        x = fl.asarray(h)
        got = fl.nonzero(x)
        assert isinstance(got, tuple) and len(got) == h.ndim
        for g, w in zip(got, np.nonzero(h)):
            assert g.dtype == np.int64 and not g.is_lazy
            np.testing.assert_array_equal(g.get(), w)
        np.testing.assert_array_equal(fl.flatnonzero(x).get(), np.flatnonzero(h))
        np.testing.assert_array_equal(fl.argwhere(x).get(), np.argwhere(h))
        assert fl.argwhere(x).shape == np.argwhere(h).shape
    np.testing.assert_array_equal(fl.nonzero(fl.asarray(H2)[:, ::2] > 5)[1].get(),
                                  np.nonzero(H2[:, ::2] > 5)[1])
    with pytest.raises(ValueError, match="0d"):
        fl.nonzero(fl.asarray(np.float32(1)))


def test_masked_fill_is_one_kernel(device):
    x, ref = fl.asarray(H2), H2.copy()
    fl.reset_stats()
    x[x > 6] = 0
    assert fl.stats()["kernels_launched"] == 1 and fl.stats()["scans"] == 0
    ref[ref > 6] = 0
    np.testing.assert_array_equal(x.get(), ref)
    keep = x < 3  # a mask the caller keeps: computed by the same kernel, old values
    fl.reset_stats()
    x[keep] = 10
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_array_equal(keep.get(), ref < 3)
    ref[ref < 3] = 10
    rows = np.array([True, False, True])
    fl.reset_stats()
    x[rows] = fl.asarray(np.arange(5.0))  # one row for every selected row
    assert fl.stats()["kernels_launched"] == 1 and fl.stats()["scans"] == 0
    ref[rows] = np.arange(5.0)
    x[rows, ...] = 2.5
    ref[rows, ...] = 2.5
    np.testing.assert_array_equal(x.get(), ref)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8])
def test_mask_assignment_variants(device, dtype):
    h = (np.arange(12) % 5).reshape(3, 4).astype(dtype)
    x, ref = fl.asarray(h), h.copy()
    m = h > 2
    x[x > 2] += 3
    ref[m] += 3
    x[h == 0] = fl.asarray(np.arange(np.count_nonzero(h == 0)).astype(dtype))
    ref[h == 0] = np.arange(np.count_nonzero(h == 0))
    x[x > 100] = 7  # selects nothing
    x[:, h[0] == 1] = 9
    ref[:, h[0] == 1] = 9
    x[np.ones((3, 4), bool)] *= 2
    ref[np.ones((3, 4), bool)] *= 2
    x[h < 1] = 2.9  # converted to the array's dtype first, as numpy does
    ref[h < 1] = dtype(2.9) if np.dtype(dtype).kind == "f" else 2
    np.testing.assert_array_equal(x.get(), ref)
    with pytest.raises(ValueError):
        x[np.ones((3, 4), bool)] = fl.asarray(np.ones(5, dtype))


def test_arange_as_index(device):
    # a pure fl.arange index (an int64 iota, cast to the kernel's index type) did not
    # build: Loopy's bounds check could not read the negative-index wrap's condition
    h = np.arange(5.0)
    x = fl.asarray(h)
    np.testing.assert_array_equal(x[fl.arange(3)].get(), h[:3])
    x[fl.arange(2)] = 7.0
    h[:2] = 7.0
    np.testing.assert_array_equal(x.get(), h)


# (arrays of index values drawn afresh each call: i for axis 0, j for the last axis)
COPIED_KEYS = {
    "x[i, j]": lambda i, j: (i, j),
    "x[i, :]": lambda i, j: (i, slice(None)),
    "x[:, j]": lambda i, j: (slice(None), j),
    "x[i[:, None], j]": lambda i, j: (i[:, None], j),
    "x[i, 1:, j]": lambda i, j: (i, slice(1, None), j),  # (not adjacent: the gathered axes first)
    "x[-1, i, None]": lambda i, j: (-1, i, None),
}


@pytest.mark.parametrize("name", list(COPIED_KEYS))
def test_device_keys_copied_from_their_first_build(device, monkeypatch, name):
    """A key of device index arrays is built twice, then copied (``composite_of``) for
    arrays of the same structures: new index values, a new array of the same shape, a
    lazy one; the copy checks its indices, naming the axis, as the build does."""
    from fuseloop.ops import indexing

    builds: list[int] = []
    fancy = indexing._fancy
    monkeypatch.setattr(indexing, "_fancy", lambda a, k: builds.append(1) or fancy(a, k))
    rng = np.random.default_rng(7)
    make = COPIED_KEYS[name]
    h = rng.uniform(size=(4, 5, 6)).astype(np.float32)
    if name.startswith(("x[i, j]", "x[i, :]", "x[:, j]", "x[i[")):
        h = h[0]
    for call in range(4):
        h = h + 1
        i, j = rng.integers(-h.shape[0], h.shape[0], 5), rng.integers(0, h.shape[-1], 5)
        x = fl.asarray(h) * 2 if call == 3 else fl.asarray(h)
        got = x[make(fl.asarray(i), fl.asarray(j))]
        np.testing.assert_array_equal(got.get(), (h * 2 if call == 3 else h)[make(i, j)])
    assert len(builds) == 3  # the first two calls and the lazy array's (another structure)
    if "j" in name:  # (j indexes the last axis)
        bad = j.copy()
        bad[2] = h.shape[-1]
        with pytest.raises(IndexError, match=f"index {h.shape[-1]} is out of bounds for "
                           f"axis {h.ndim - 1} with size {h.shape[-1]}"):
            fl.asarray(h)[make(fl.asarray(i), fl.asarray(bad))].get()
        assert len(builds) == 3
