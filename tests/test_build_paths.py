"""The build layer's short paths (issue 26): basic views made in one pass over the key,
the product of two vectors built without the general contraction front end, and the
write back of an in-place operator through a view: numpy's results and errors, with
the host path off (as on a GPU) so that every value comes from the device's kernels."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import IndexOutOfBoundsError, InvalidIndexError, ShapeError

KEYS = [
    3, -1, -6, (2, 4), (-1, -9), (0, 0),
    slice(None, 3), slice(2, None), slice(None, None, -1), slice(5, 1, -2),
    slice(1, None, 3), slice(-3, -1), slice(4, 2), slice(0, 0), slice(None, 100),
    (1, slice(None, 4)), (slice(None, 4), 7), (slice(1, 5, 2), slice(None, None, -3)),
    (None, 2), (2, None), (None, slice(1, 3), None, 4), (Ellipsis, 3), (1, Ellipsis),
    (), (slice(None), slice(None)), (slice(None), -2), (-6, slice(-100, 100)),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_basic_views_match_numpy(device_path, key):
    host = np.arange(60.0).reshape(6, 10)
    a = fl.asarray(host, device=device_path)
    for base, host_base in ((a, host), (a[1:, ::2], host[1:, ::2]), (a[::-1, 3:], host[::-1, 3:])):
        try:
            want = host_base[key]
        except IndexError as e:  # (the views of fewer rows or columns)
            with pytest.raises(IndexError, match=str(e)):
                base[key]
            continue
        for _ in range(3):  # (a leaf's second view of a key on: remembered by key)
            got = base[key]
            np.testing.assert_array_equal(got.get(), want)
            assert got.shape == want.shape


def test_views_of_a_lazy_array_match_numpy(device_path):
    host = np.arange(24.0).reshape(4, 6)
    lazy = fl.asarray(host, device=device_path) * 2
    for key in [(1, slice(None, 3)), (slice(None, None, -1), 2), (None, 3), -1]:
        np.testing.assert_array_equal(lazy[key].get(), (host * 2)[key])


@pytest.mark.parametrize("key", [(6, 0), (0, 10), (-7, 0), (0, -11), 6, (slice(None), 10)],
                         ids=repr)
def test_out_of_range_index_raises_numpy_error(device_path, key):
    host = np.zeros((6, 10))
    a = fl.asarray(host, device=device_path)
    with pytest.raises(IndexError) as want:
        host[key]
    for _ in range(2):
        with pytest.raises(IndexOutOfBoundsError) as got:
            a[key]
        assert str(got.value) == str(want.value)


def test_too_many_indices_and_zero_step_raise(device_path):
    a = fl.asarray(np.zeros((6, 10)), device=device_path)
    for _ in range(2):
        with pytest.raises(InvalidIndexError, match="too many indices"):
            a[1, 2, 3]
        with pytest.raises(ValueError, match="slice step cannot be zero"):
            a[::0]
        with pytest.raises(InvalidIndexError, match="only integers, slices"):
            a[1.5]  # (numpy's IndexError)


def test_bool_and_numpy_int_keys_are_not_taken_as_ints(device_path):
    host = np.arange(12.0).reshape(3, 4)
    a = fl.asarray(host, device=device_path)
    np.testing.assert_array_equal(a[np.int64(2), 1:3].get(), host[np.int64(2), 1:3])
    for _ in range(2):  # (a bool is no int 1: numpy makes it a 0-d mask, refused here)
        with pytest.raises(InvalidIndexError, match="scalar boolean index"):
            a[True]
        with pytest.raises(InvalidIndexError, match="scalar boolean index"):
            a[1, True]


DTYPES = ["float64", "float32", "int32", "int8", "uint16", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7])
def test_vector_products_match_numpy(device_path, dtype, n):
    rng = np.random.default_rng(n)
    x = (rng.random(n) * 10).astype(dtype)
    y = (rng.random(n) * 10).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * (rng.random(n) * 3).astype(dtype)
    fx, fy = fl.asarray(x, device=device_path), fl.asarray(y, device=device_path)
    tol = 1e-5 if np.dtype(dtype).char in "fF" else 1e-12
    for got, want in ((fx @ fy, x @ y), (fl.dot(fx, fy), np.dot(x, y)),
                      (fl.matmul(fx, fy), np.matmul(x, y))):
        assert got.shape == () and got.dtype == want.dtype
        np.testing.assert_allclose(got.get(), want, rtol=tol)


def test_boolean_vector_product_keeps_its_integer_count(device_path):
    # (fuseloop counts booleans in a wider integer, as its contractions always did)
    x = np.array([True, False, True, True])
    fx = fl.asarray(x, device=device_path)
    assert int((fx @ fx).get()) == 3
    assert int(fl.dot(fx, fx).get()) == 3


def test_vector_products_of_moving_views_compile_no_kernel_per_iteration(device_path):
    n = 24
    host = np.random.default_rng(2).random((n, n))
    a = fl.asarray(host, device=device_path)
    compiled = []
    for i in range(1, n):
        fl.reset_stats()
        for j in (0, i // 2, i - 1):
            np.testing.assert_allclose((a[i, :j] @ a[j, :j]).get(), host[i, :j] @ host[j, :j])
            np.testing.assert_allclose((a[i, ::-2] @ a[::-2, j]).get(),
                                       host[i, ::-2] @ host[::-2, j])
            np.testing.assert_allclose(fl.dot(a[i, 1:j + 1], a[:j, i]).get(),
                                       np.dot(host[i, 1:j + 1], host[:j, i]))
        compiled.append(fl.stats()["kernels_compiled"])
    assert sum(compiled[n // 2:]) == 0, compiled


def test_vector_products_with_other_operands(device_path):
    x = np.arange(5.0)
    fx = fl.asarray(x, device=device_path)
    with pytest.raises(ShapeError, match="mismatch in the core dimension"):
        fx @ fx[:4]
    with pytest.raises(ShapeError, match="not aligned"):
        fl.dot(fx, fx[:4])
    np.testing.assert_allclose((fx @ x).get(), x @ x)  # (a host operand: copied over)
    np.testing.assert_allclose(((fx * 2) @ (fx + 1)).get(), (x * 2) @ (x + 1))
    np.testing.assert_allclose((fx @ fx.astype(np.float32)).get(), x @ x.astype(np.float32))


def test_in_place_write_back_through_views(device_path):
    host = np.arange(30.0).reshape(5, 6)
    a = fl.asarray(host, device=device_path)
    want = host.copy()
    for i in range(1, 5):
        a[i, 2] -= a[i - 1, :3] @ a[i, :3]
        want[i, 2] -= want[i - 1, :3] @ want[i, :3]
        a[i, 1:4] += a[i - 1, 1:4]
        want[i, 1:4] += want[i - 1, 1:4]
        a[i, ::-2] *= 0.5
        want[i, ::-2] *= 0.5
    np.testing.assert_allclose(a.get(), want)


def test_assigning_another_view_of_the_same_buffer_writes(device_path):
    host = np.arange(12.0).reshape(3, 4)
    a = fl.asarray(host, device=device_path)
    want = host.copy()
    a[0, 0] = a[2, 3]  # (an element of the same buffer at another place)
    want[0, 0] = want[2, 3]
    a[1] = a[2]
    want[1] = want[2]
    a[2] = a[2, ::-1]  # (the same elements in another order)
    want[2] = want[2, ::-1].copy()
    a[0, 1:3] = a[0, 1:3]  # (itself: nothing to write)
    np.testing.assert_array_equal(a.get(), want)


def test_views_of_a_leaf_viewed_at_many_keys(device_path):
    # (past VIEWS_MAX keys a leaf's views are walked, no longer remembered by key)
    from fuseloop.ops import indexing

    host = np.arange(80.0).reshape(8, 10)
    a = fl.asarray(host, device=device_path)
    keys = [(i, slice(None, j)) for i in range(8) for j in range(10)]
    assert len(keys) > indexing.VIEWS_MAX
    for _ in range(2):
        for key in keys:
            np.testing.assert_array_equal(a[key].get(), host[key])
    with pytest.raises(IndexOutOfBoundsError, match="index 8 is out of bounds for axis 0"):
        a[8, :3]
    np.testing.assert_array_equal(a[None, 2, ::-3].get(), host[None, 2, ::-3])
