"""Regression tests for bugs found by the differential fuzzer (tests/test_fuzz.py).

Each is a minimal hand-written example compared against numpy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuseloop as fl


def test_asarray_keeps_zero_dimensional_shape(device):
    for host in (np.array(False), np.array(3, np.int8), np.float32(2.5), 7.0):
        x = fl.asarray(host)
        assert x.shape == np.shape(host) == ()
        np.testing.assert_array_equal(x.get(), np.asarray(host))
        assert (x + 1).shape == np.shape(np.asarray(host) + 1) == ()
        np.testing.assert_array_equal((x + 1).get(), np.asarray(host) + 1)


def test_bool_scalar_kernel_arguments(device):
    # numpy bool scalars became kernel arguments that pyopencl could not pack (std::bad_cast)
    h = np.array([True, False, True])
    x = fl.asarray(h)
    np.testing.assert_array_equal(fl.logical_and(x, 0).get(), np.logical_and(h, 0))
    np.testing.assert_array_equal((x | np.True_).get(), h | np.True_)
    np.testing.assert_array_equal(fl.where(x, False, True).get(), np.where(h, False, True))
    y = fl.asarray(h)
    y[1:] = 0
    ref = h.copy()
    ref[1:] = 0
    np.testing.assert_array_equal(y.get(), ref)


def test_scatter_whose_axes_could_be_merged(device):
    # the scatter index was dropped when the output's axes were merged into one loop:
    # rows of a C-ordered array, or a single index, were written to the first positions
    v = np.arange(6.0).reshape(2, 3)
    a, ref = fl.asarray(np.zeros((3, 3))), np.zeros((3, 3))
    a[np.array([2, 0])] = fl.asarray(v)
    ref[[2, 0]] = v
    np.testing.assert_array_equal(a.get(), ref)
    b, ref = fl.asarray(np.zeros(4, np.int8)), np.zeros(4, np.int8)
    b[np.array([3])] = 1
    ref[[3]] = 1
    np.testing.assert_array_equal(b.get(), ref)
    c, ref = fl.asarray(np.zeros((2, 3), bool)), np.zeros((2, 3), bool)
    c[:, np.array([-1])] = fl.asarray(np.array(1, np.int8))
    ref[:, [-1]] = np.array(1, np.int8)
    np.testing.assert_array_equal(c.get(), ref)


def test_two_gathers_in_one_kernel(device):
    h = np.arange(10.0)
    x = fl.asarray(h)
    i, j = np.array([0, 2]), np.array([1, 3])
    np.testing.assert_array_equal((fl.take(x, i) + fl.take(x, j)).get(),
                                  np.take(h, i) + np.take(h, j))
    np.testing.assert_array_equal(fl.take(fl.take(x, np.array([3, 4])), np.array([1])).get(),
                                  np.take(np.take(h, [3, 4]), [1]))
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match="12"):
        (fl.take(x, i) + fl.take(x, np.array([1, 12]))).get()


def test_assigned_value_may_have_leading_unit_axes(device):
    # numpy drops leading length-1 axes of an assigned value; fuseloop raised ShapeError
    a, ref = fl.zeros(()), np.zeros(())
    a[...] = fl.asarray(np.ones(1))
    ref[...] = np.ones(1)
    np.testing.assert_array_equal(a.get(), ref)
    v = np.arange(3.0).reshape(1, 1, 3)
    b, ref = fl.zeros((2, 3)), np.zeros((2, 3))
    b[:] = fl.asarray(v) * 2
    ref[:] = v * 2
    np.testing.assert_array_equal(b.get(), ref)
    c, ref = fl.zeros(4), np.zeros(4)
    c[np.array([0, 2])] = fl.asarray(np.ones((1, 2)))
    ref[[0, 2]] = np.ones((1, 2))
    np.testing.assert_array_equal(c.get(), ref)
    with pytest.raises(ValueError):  # an in-place operand may not (numpy raises too)
        c += fl.asarray(np.ones((1, 4)))


def test_mixed_uint64_int_comparison_with_constant(device):
    # numpy's loop for equal(uint64, int8) is (uint64, int64 spelt 'q'); the bounds of a
    # Python int were looked up by dtype character and missed it (KeyError: 'q')
    h = np.array([0, 5, 2**63 + 1], np.uint64)
    x = fl.asarray(h)
    np.testing.assert_array_equal((x == fl.constant(0, np.int8)).get(), h == np.int8(0))
    np.testing.assert_array_equal(fl.less(x, fl.constant(7, np.int16)).get(), h < np.int16(7))
    i = np.array([1, -3, 4], np.int8)
    np.testing.assert_array_equal((x < fl.asarray(i)).get(), h < i)


def test_scattered_value_kept_by_caller_keeps_its_value(device):
    # a[idx] = v with a lazy v that reads a and is kept: v was neither evaluated before the
    # write nor by the scatter kernel, so it later read the new contents of a
    h = np.array([0, 0, 0, 1], np.int8)
    x = fl.asarray(h)
    s = fl.sum(x)
    x[np.array([0, 1])] = s
    ref = h.copy()
    ref_s = ref.sum()
    ref[[0, 1]] = ref_s
    np.testing.assert_array_equal(x.get(), ref)
    assert int(s) == ref_s
    y = fl.asarray(h)
    t = y[::-1] + 1
    y[np.array([3, 2, 1, 0])] = t
    ref_t = h[::-1] + 1
    ref = h.copy()
    ref[[3, 2, 1, 0]] = ref_t
    np.testing.assert_array_equal(y.get(), ref)
    np.testing.assert_array_equal(t.get(), ref_t)


def test_clip_follows_numpy_dtypes_and_python_int_bounds(device):
    # fl.clip was maximum() then minimum(): a Python int bound out of the array's range
    # raised OverflowError, and mixed bound dtypes gave numpy's dtype only by accident
    h = np.array([-100, 5, 100], np.int8)
    x = fl.asarray(h)
    for lo, hi in [(0, 200), (-1000, 1000), (200, np.int64(5)), (np.int8(-3), np.uint8(7)),
                   (2.5, 3), (None, 300), (fl.constant(-2**63), 0)]:
        got = fl.clip(x, lo, hi)
        want = np.clip(h, lo.value if isinstance(lo, fl.Constant) else lo, hi)
        assert got.dtype == want.dtype, (lo, hi)
        np.testing.assert_array_equal(got.get(), want)
    y = fl.clip(x, -1000, None)  # no bound left: a copy, as numpy
    x[...] = 0
    np.testing.assert_array_equal(y.get(), h)


def test_folded_typed_constants_keep_their_dtype(device):
    # arithmetic on fl.constant(v, dtype) folded the plain values (int64/float64 results)
    with np.errstate(over="ignore"):
        want = np.int8(100) + np.int8(100)
    c = fl.constant(100, np.int8) + fl.constant(100, np.int8)
    assert c.dtype == want.dtype and c.value == want
    a = fl.absolute(fl.constant(-3, np.int8))
    h = np.array([1, 2], np.int8)
    got = fl.asarray(h) + a
    assert got.dtype == (h + np.absolute(np.int8(-3))).dtype
    np.testing.assert_array_equal(got.get(), h + np.absolute(np.int8(-3)))
    w = fl.constant(2, np.float32) * 1.5  # still folds, keeping float32
    assert w.dtype == np.float32 and w.value == 3.0


def test_negating_int_min_wraps_like_numpy(device):
    # found by the long fuzz profile: C compilers fold -(-x) to x (signed overflow is
    # undefined in OpenCL C), so sign(-...-INT_MIN) came out +1
    for dt in (np.int32, np.int64):
        h = np.array([np.iinfo(dt).min, -1, 0, 5], dt)
        x = fl.asarray(h)
        e, r = x, h
        for _ in range(7):
            e, r = -e, -r
        np.testing.assert_array_equal(fl.sign(e).get(), np.sign(r))
        np.testing.assert_array_equal((x - 1 + 1).get(), h - 1 + 1)
        np.testing.assert_array_equal((x * 2 // 2).get(), h * 2 // 2)


def test_flip_of_a_0d_array_is_a_copy(device):
    # found by the long fuzz profile: numpy's flip of a 0-d array returns a copy
    a = fl.asarray(np.array(0, np.int8))
    b = fl.flip(a)
    a += 1
    assert int(b) == 0 and int(a) == 1
    with pytest.raises(fl.errors.AxisError):
        fl.flip(a, 0)


@pytest.mark.parametrize("name, args", [("flip", ()), ("roll", (0,)), ("roll", (3, 0)),
                                        ("tile", ((1,),)), ("tile", (2,)), ("repeat", (1,)),
                                        ("repeat", (2,)), ("repeat", (1, -1))])
def test_copying_shape_functions_do_not_alias(device, name, args):
    # found by the long fuzz profile: numpy's roll, tile and repeat return copies (and flip
    # of a 0-d array); a later in-place write to the input must not show through
    for h in (np.array([True, False, True]), np.array(True), np.arange(3, dtype=np.int8)):
        if name == "repeat":
            if h.ndim == 0 and len(args) > 1:
                continue  # an axis of a 0-d array: numpy raises
        elif (h.ndim == 0) != (name == "flip"):  # flip is a view in numpy, except of 0-d
            continue
        want = getattr(np, name)(h, *args).copy()
        v = fl.asarray(h)
        got = getattr(fl, name)(v, *args)  # lazy: not evaluated before the write
        if h.dtype == bool:
            v[...] = ~v
        else:
            v += 1
        np.testing.assert_array_equal(got.get(), want)


@pytest.mark.parametrize("dt", [np.uint32, np.uint64])
def test_unsigned_subtract_and_negative_sum_exactly(device, dt):
    # found by the long fuzz profile (sum of a negated 0-d uint64 was off by one on one
    # PoCL): Loopy typed the -1 factor of a - b and -a by numpy's rules, int64 with
    # uint64 being float64, so the sum accumulated in double and lost bits
    top = np.iinfo(dt).max
    a = np.array([top - 12345, 5, 2, top // 3], dt)
    b = np.array([3, top // 4 + 1, 7, top], dt)
    x, y = fl.asarray(a), fl.asarray(b)
    np.testing.assert_array_equal((x - y).get(), a - b)
    for got, want in ((fl.sum(x - y), np.sum(a - b)), (fl.sum(-x), np.sum(-a)),
                      (fl.sum(-x, dtype=dt), np.sum(-a, dtype=dt)),
                      (fl.sum(fl.negative(fl.asarray(np.array(2, dt)))),
                       np.sum(-np.array(2, dt)))):
        assert "double" not in fl.show_code(got)
        assert got.get() == want and got.dtype == want.dtype


@pytest.mark.parametrize("dest, index, value, ok", [
    ((0, 1), (slice(None), [0]), (2, 0, 1), True),
    ((0, 1), (slice(None), [0]), (2, 3, 0, 1), True),
    ((0, 1), (slice(None), [0]), (1, 0, 1), True),
    ((0, 1), (slice(None), [0]), (2, 0, 2), False),
    ((0, 1), (slice(None), [0]), (2, 1), False),
    ((0, 1), (slice(None), [0]), (5,), False),
    ((0, 1, 2), (slice(None), slice(None), [0]), (0, 1, 2), False),
    ((0, 1, 2), (slice(None), slice(None), [0]), (2, 0, 1, 1), True),
    ((0, 1), ([],), (5, 3), False),
    ((0, 1), (slice(None),), (2, 0, 1), False),  # a basic slice: numpy refuses
])
def test_value_shapes_for_empty_targets(device, dest, index, value, ok):
    # found by the long fuzz profile: an empty fancy-indexed target takes a value with
    # extra leading axes of any length (numpy), but not one that does not broadcast
    index = tuple(np.array(i, np.int64) if isinstance(i, list) else i for i in index)
    h = np.zeros(dest, bool)
    a = fl.asarray(h)
    v = np.zeros(value, bool)
    if ok:
        h[index] = v
        a[index] = fl.asarray(v)
        assert a.get().shape == dest
    else:
        with pytest.raises(ValueError):
            h[index] = v
        with pytest.raises(ValueError):
            a[index] = fl.asarray(v)


@pytest.mark.parametrize("ddof", [1, 2, 3])
def test_var_with_no_degrees_of_freedom(device, ddof):
    # found by the long fuzz profile: numpy divides by max(n - ddof, 0), so a nonzero sum
    # of squares gives inf there (fuseloop gave NaN); an all-equal input still gives NaN
    for h in (np.array([0, 1], np.int8), np.array([3.0, 3.0], np.float32),
              np.array([[1.0, 2.0], [5.0, 5.0]])):
        x = fl.asarray(h)
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for axis in (None, -1):
                want = np.var(h, axis=axis, ddof=ddof)
                got = fl.var(x, axis=axis, ddof=ddof).get()
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(fl.std(x, axis=axis, ddof=ddof).get(),
                                              np.std(h, axis=axis, ddof=ddof))


def test_masked_fill_with_a_constant(device):
    # found by the fuzzer's index writes: x[mask] = fl.constant(...) raised TypeError in
    # the masked fill (np.array of a Constant); converted as assign converts it now
    h = np.array([[0, 5], [-3, 7]], np.int8)
    for c, value in [(fl.constant(0), 0), (fl.constant(300, np.int32), np.int32(300)),
                     (fl.constant(2.9), 2.9), (fl.constant(-1.5, np.float32), np.float32(-1.5))]:
        x, ref = fl.asarray(h), h.copy()
        x[x > 0] = c
        with np.errstate(over="ignore"):
            ref[ref > 0] = value
        np.testing.assert_array_equal(x.get(), ref)
        x[np.zeros((2, 2), bool)] = c  # selects nothing
        np.testing.assert_array_equal(x.get(), ref)
    x = fl.asarray(h)
    with pytest.raises(OverflowError):
        h[h > 0] = 300
    with pytest.raises(OverflowError):
        x[x > 0] = fl.constant(300)


def test_gather_along_a_unit_axis_is_checked(device):
    # found by the fuzzer's out-of-range test: an index along a length-1 axis of a strided
    # view (stride 0 in the address) was clamped but never checked: (x * 2)[[1], 0] on a
    # 1x3 array read element 0 instead of raising
    h = np.arange(3, dtype=np.int32).reshape(1, 3)
    x = fl.asarray(h)
    for key in [(np.array([1]), 0), (np.array([0, -2]), slice(None, None, -1)),
                (np.array([0, 1]), np.array([2, 0]))]:
        with pytest.raises(IndexError):
            h[key]
        with pytest.raises(fl.errors.IndexOutOfBoundsError, match="for axis 0 with size 1"):
            (x * 2)[key].get()
    y = fl.asarray(np.arange(1, dtype=np.int32).reshape(1, 1, 1))
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match="index 1 is out of bounds"):
        (y + 1)[np.array([1]), :, ::-1].get()
    np.testing.assert_array_equal((x * 2)[np.array([0, -1]), 1].get(), h[[0, -1], 1] * 2)


@pytest.mark.parametrize("recipe", ["device's own", "gpu-coalesced"])
def test_checked_unit_axis_gather_schedules_under_every_recipe(device, recipe, restore_recipes):
    # found by the GPU long fuzz: the check of an index along a unit axis (added for
    # the test above) made the load wait for it, and Loopy could not schedule the GPU
    # recipe's kernel (CycleError); the load reads no position, so it need not wait
    from fuseloop.recipes import gpu_coalesced

    if recipe == "gpu-coalesced":
        fl.register_recipe(device.type, gpu_coalesced, name="test-gpu-coalesced-unit")
    h = np.array([False])
    v0 = fl.asarray(h)
    v5 = v0 + fl.absolute(v0)
    np.testing.assert_array_equal(v5[None, v0 % 1].get(), (h + np.abs(h))[None, h % 1])
    with pytest.raises(fl.errors.IndexOutOfBoundsError, match="index 1 is out of bounds"):
        v5[None, v0 % 1 + 1].get()


def test_scatter_index_that_reads_the_target(device):
    # found by the fuzzer's index writes: x[x % n] = v computed the index inside the
    # scatter kernel, reading x while writing it (numpy computes the index first)
    h = np.array([1, 0], np.int8)
    x, ref = fl.asarray(h), h.copy()
    x[x % 2] = 5
    ref[ref % 2] = 5
    np.testing.assert_array_equal(x.get(), ref)
    x, ref = fl.asarray(h), h.copy()
    k = x % 2
    x[k] += 5  # Python: x.__setitem__(k, x[k] + 5), both with the same lazy k
    ref[ref % 2] += 5
    np.testing.assert_array_equal(x.get(), ref)
    np.testing.assert_array_equal(k.get(), h % 2)
    h = np.array([2, 0, 1])
    x, ref = fl.asarray(h), h.copy()
    x[x[::-1]] = fl.asarray(np.array([7, 8, 9]))  # a concrete view of the target
    ref[ref[::-1].copy()] = [7, 8, 9]
    np.testing.assert_array_equal(x.get(), ref)
    h = np.array([[1, 0], [0, 1]], np.int8)
    x, ref = fl.asarray(h), h.copy()
    x[x[0], x[1]] = 3
    ref[ref[0].copy(), ref[1].copy()] = 3
    np.testing.assert_array_equal(x.get(), ref)


def _centred_products(rng: np.random.Generator) -> None:
    xh, yh = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    x, y = fl.asarray(xh), fl.asarray(yh)
    d, dh = x - x.mean(axis=0), xh - xh.mean(axis=0)
    np.testing.assert_allclose((d.T @ d).get(), dh.T @ dh, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fl.matmul(d, d.T).get(), dh @ dh.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(((x * 2) @ y.T).get(), (xh * 2) @ yh.T, rtol=1e-12)


def test_product_of_centred_columns(device):
    # d.T @ d fused the column means into a reduction kernel whose per-row mean sat
    # outside the element loop, off the grid's first axis: Loopy rejected it ("does not
    # use all group hw axes"); numpy_stats.cov had evaluated d first
    _centred_products(np.random.default_rng(11))


def test_two_stage_threshold_set_at_run_time(device, monkeypatch, fresh_stats):
    # a lower fuseloop.splits.TWO_STAGE_MIN_LENGTH split reductions too short for two
    # pieces into one, which the lowering could not index (KeyError in
    # prepare_reductions); and the run plans' key read evaluate's copy of the setting,
    # so a plan recorded before a change kept the old split
    from fuseloop import splits

    monkeypatch.setattr(splits, "TWO_STAGE_MIN_LENGTH", 1024)
    monkeypatch.setattr(splits, "ONE_LAUNCH", False)  # (a split shows as two launches)
    xh = np.arange(4096, dtype=np.float64)
    x = fl.asarray(xh)
    assert float(fl.sum(x * 1)) == xh.sum()
    np.testing.assert_array_equal((x * 1).reshape(4, 1024).sum(axis=1).get(),
                                  xh.reshape(4, 1024).sum(axis=1))
    yh = np.arange(20000, dtype=np.float64)
    y = fl.asarray(yh)
    launched = []
    for limit in (1024, 10**9):  # split, then not
        monkeypatch.setattr(splits, "TWO_STAGE_MIN_LENGTH", limit)
        before = fl.stats()["kernels_launched"]
        assert float(fl.sum(y * 3)) == 3 * yh.sum()
        launched.append(fl.stats()["kernels_launched"] - before)
    assert launched == [2, 1]
