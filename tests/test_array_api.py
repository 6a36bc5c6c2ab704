"""The Array API namespace (issue 27): inspection, dtype functions, creation,
manipulation and statistics functions the standard adds to numpy's, against numpy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import AxisError, DTypeError, ShapeError

# {{{ no device: dtype functions, namespace


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_finfo_matches_numpy_as_python_floats(dt):
    info, ref = fl.finfo(getattr(fl, dt)), np.finfo(dt)
    assert info.bits == ref.bits and info.dtype == np.dtype(dt)
    for name in ("eps", "max", "min", "smallest_normal"):
        value = getattr(info, name)
        assert type(value) is float and value == float(getattr(ref, name))


@pytest.mark.parametrize("dt", ["int8", "uint16", "int32", "uint64"])
def test_iinfo_matches_numpy_as_python_ints(dt):
    info, ref = fl.iinfo(np.dtype(dt)), np.iinfo(dt)
    assert (info.bits, info.min, info.max) == (ref.bits, ref.min, ref.max)
    assert type(info.max) is int and info.dtype == np.dtype(dt)


def test_finfo_of_complex_dtypes_describes_the_parts():
    for c, r in ((fl.complex64, np.float32), (fl.complex128, np.float64)):
        info = fl.finfo(c)
        assert info.dtype == r and info.eps == float(np.finfo(r).eps)
        assert info.bits == np.finfo(c).bits


def test_finfo_iinfo_refuse_the_other_kind():
    with pytest.raises(DTypeError, match="iinfo"):
        fl.finfo(fl.int32)
    with pytest.raises(DTypeError, match="finfo"):
        fl.iinfo(fl.float32)
    with pytest.raises(TypeError, match="dtype or an array"):
        fl.finfo(1.5)


def test_result_type_can_cast_isdtype():
    assert fl.result_type(fl.int8, fl.uint8) == np.int16
    assert fl.result_type(fl.float32, 1.0) == np.float32  # a Python float is weak
    assert fl.result_type(fl.int16, True) == np.int16
    assert fl.can_cast(fl.int8, fl.int16) and not fl.can_cast(fl.int16, fl.int8)
    assert fl.isdtype(fl.int8, "signed integer") and fl.isdtype(fl.uint8, "integral")
    assert fl.isdtype(fl.float32, ("bool", "real floating"))
    assert fl.isdtype(fl.float64, "numeric") and not fl.isdtype(fl.bool, "numeric")
    assert fl.isdtype(fl.bool, fl.bool) and not fl.isdtype(fl.int8, fl.int16)
    with pytest.raises(ValueError, match="unknown dtype kind"):
        fl.isdtype(fl.int8, "integer")
    with pytest.raises(TypeError, match="takes a dtype"):
        fl.isdtype("int8", "integral")
    with pytest.raises(ValueError, match="besides Python scalars"):
        fl.result_type(1, 2.0)


def test_namespace_constants():
    assert fl.__array_api_version__ == "2024.12"
    assert fl.newaxis is None and fl.bool is np.bool_
    info = fl.__array_namespace_info__()
    assert info.capabilities()["boolean indexing"] is True
    assert info.default_device() in info.devices()
    assert set(info.dtypes(kind="unsigned integer")) == {"uint8", "uint16", "uint32",
                                                         "uint64"}
    assert info.default_dtypes()["indexing"] == np.int64


def test_info_complex_dtypes(device):
    info = fl.__array_namespace_info__()
    want = np.complex128 if device.has_fp64 else np.complex64
    assert info.default_dtypes(device=device)["complex floating"] == want
    assert set(info.dtypes(device=device, kind="complex floating")) == (
        {"complex64", "complex128"} if device.has_fp64 else {"complex64"})


def test_linalg_rtol_keyword(device):
    # the Array API's spelling (keyword-only rtol) next to numpy's rcond/tol
    a = np.diag([1.0, 1e-3, 0.0]).astype(np.float32)
    with warnings.catch_warnings():  # real input: on the device
        warnings.simplefilter("error", fl.HostFallbackWarning)
        assert int(fl.linalg.matrix_rank(a, rtol=1e-2).get()) == 1
        got = fl.linalg.pinv(a, rtol=1e-2).get()
    np.testing.assert_allclose(got, np.linalg.pinv(a, rtol=1e-2), atol=1e-6)


def test_linalg_named_results_and_complex_input(device):
    a = np.array([[2.0, 1.0j], [-1.0j, 3.0]], np.complex64)  # Hermitian
    x = fl.asarray(a)
    with warnings.catch_warnings():  # complex eigh, svd, slogdet, qr: on the device (issue 27)
        warnings.simplefilter("error", fl.HostFallbackWarning)
        w, v = res = fl.linalg.eigh(x)
        assert res.eigenvalues is w and res.eigenvectors is v
        np.testing.assert_allclose(w.get(), np.linalg.eigvalsh(a), rtol=1e-5)
        assert fl.linalg.svd(x).S.shape == (2,)
        s = fl.linalg.slogdet(x)
        q = fl.linalg.qr(x)
    np.testing.assert_allclose(s.logabsdet.get(), np.linalg.slogdet(a).logabsdet, rtol=1e-5)
    np.testing.assert_allclose((q.Q.get() @ q.R.get()), a, atol=1e-5)
    r = fl.linalg.slogdet(fl.asarray(np.eye(3, dtype=np.float32) * 2))  # real: on the device
    assert float(r.sign.get()) == 1 and abs(float(r.logabsdet.get()) - 3 * np.log(2)) < 1e-5
    with pytest.warns(fl.HostFallbackWarning):
        assert fl.linalg.slogdet(fl.asarray(np.ones((0, 2, 2), np.float32))).sign.shape == (0,)


def test_vecdot_conjugates_complex_first_argument(device):
    x1, x2 = np.array([1j, 2j, 3j]), np.array([1, 2j, 3])
    got = fl.linalg.vecdot(fl.asarray(x1), fl.asarray(x2)).get()
    assert abs(complex(got) - (4 - 10j)) < 1e-12
    assert abs(complex(fl.vecdot(fl.asarray(x1), fl.asarray(x2)).get()) - np.vdot(x1, x2)) < 1e-12


# }}}

# {{{ array methods and creation


def test_array_namespace_and_devices(device):
    x = fl.asarray(np.arange(6.0).reshape(2, 3))
    assert x.__array_namespace__() is fl
    assert x.__array_namespace__(api_version="2023.12") is fl
    with pytest.raises(ValueError, match=r"2030\.12"):
        x.__array_namespace__(api_version="2030.12")
    assert x.to_device(device) is x
    np.testing.assert_array_equal(x.mT.get(), np.arange(6.0).reshape(2, 3).T)
    assert complex(fl.asarray(2.5)) == 2.5 + 0j


@pytest.mark.opencl_only
def test_dlpack_host_copies_only(device):
    x = fl.asarray(np.arange(5, dtype=np.int32), device=device)
    np.testing.assert_array_equal(np.from_dlpack(x, device="cpu"), np.arange(5))
    if device.type == "cpu":  # (kDLCPU: its buffers are host memory; a copy is exported)
        assert x.__dlpack_device__() == (1, 0)
        np.testing.assert_array_equal(np.from_dlpack(x), np.arange(5))
    else:
        assert x.__dlpack_device__() == (4, device.index)
        with pytest.raises(BufferError, match="device='cpu'"):
            np.from_dlpack(x)
    y = fl.from_dlpack(np.arange(4.0))
    np.testing.assert_array_equal(y.get(), np.arange(4.0))
    with pytest.raises(BufferError, match="copy=False"):
        fl.from_dlpack(np.arange(4.0), copy=False)


def test_asarray_copy_semantics(device):
    x = fl.asarray(np.arange(4.0))
    assert fl.asarray(x) is x and fl.asarray(x, copy=False) is x
    y = fl.asarray(x, copy=True)
    y[0] = 7.0
    assert x.get()[0] == 0.0 and y.get()[0] == 7.0
    with pytest.raises(ValueError, match="copy=False"):
        fl.asarray(x, dtype=np.float32, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        fl.asarray([1, 2], copy=False)
    x += 1  # the array API tests' pattern: a copy, then an in-place operator
    np.testing.assert_array_equal(x.get(), np.arange(4.0) + 1)


def test_default_float_dtype(device):
    want = np.float64 if device.has_fp64 else np.float32
    assert fl.zeros(3).dtype == want and fl.ones((2, 2)).dtype == want
    assert fl.empty(2).dtype == want and fl.eye(2).dtype == want
    assert fl.full(2, 3).dtype == np.int64 and fl.full(2, True).dtype == np.bool_


@pytest.mark.parametrize("args", [(3,), (3, 5), (4, 2)])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_eye(device, args, k):
    np.testing.assert_array_equal(fl.eye(*args, k=k, dtype=np.int32).get(),
                                  np.eye(*args, k=k, dtype=np.int32))


def test_eye_diagonal_outside(device):
    for k in (2**63, -(2**63) - 1, 3, -2):
        np.testing.assert_array_equal(fl.eye(2, 3, k=k).get(), np.zeros((2, 3)))
    assert fl.eye(0, k=2**63).shape == (0, 0)


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid(device, indexing):
    a, b, c = np.arange(3), np.arange(4.0), np.arange(2, dtype=np.int8)
    got = fl.meshgrid(fl.asarray(a), fl.asarray(b), fl.asarray(c), indexing=indexing)
    for g, r in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(g.get(), r)
    with pytest.raises(ValueError, match="indexing"):
        fl.meshgrid(fl.asarray(a), indexing="yx")


def test_astype_function(device):
    x = fl.asarray(np.array([1.7, -2.2]))
    y = fl.astype(x, fl.int32, device=device)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.get(), [1, -2])
    assert fl.astype(x, x.dtype, copy=False) is x


# }}}

# {{{ manipulation


def test_concat_unstack_broadcast(device):
    a, b = np.arange(6).reshape(2, 3), np.arange(3, dtype=np.int8).reshape(1, 3)
    np.testing.assert_array_equal(fl.concat((fl.asarray(a), fl.asarray(b))).get(),
                                  np.concatenate((a, b)))
    np.testing.assert_array_equal(fl.concat([fl.asarray(a), fl.asarray(b)], axis=None).get(),
                                  np.concatenate((a, b), axis=None))
    parts = fl.unstack(fl.asarray(a), axis=1)
    assert len(parts) == 3
    np.testing.assert_array_equal(parts[2].get(), a[:, 2])
    assert fl.broadcast_shapes((2, 1), (3,)) == (2, 3)
    with pytest.raises(ShapeError, match="broadcast"):
        fl.broadcast_shapes((2,), (3,))
    x, y = fl.broadcast_arrays(fl.asarray(a), fl.asarray(b))
    assert x.shape == (2, 3)
    np.testing.assert_array_equal(y.get(), np.broadcast_to(b, (2, 3)))
    with pytest.raises(AxisError):
        fl.unstack(fl.asarray(a), axis=2)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_along_axis(device, axis):
    rng = np.random.default_rng(1)
    a = rng.random((3, 4))
    idx = np.argsort(a, axis=axis)
    np.testing.assert_array_equal(
        fl.take_along_axis(fl.asarray(a), fl.asarray(idx), axis=axis).get(),
        np.take_along_axis(a, idx, axis=axis))
    # broadcasting index, negative values
    idx = np.array([[-1], [0], [2]]) if axis != 0 else np.array([[-1, 0, 1, 2]])
    np.testing.assert_array_equal(
        fl.take_along_axis(fl.asarray(a), fl.asarray(idx), axis=axis).get(),
        np.take_along_axis(a, idx, axis=axis))


def test_take_along_axis_errors(device):
    a = fl.asarray(np.arange(6.0).reshape(2, 3))
    with pytest.raises(ShapeError, match="dimensions"):
        fl.take_along_axis(a, fl.asarray(np.array([0, 1])), axis=1)
    with pytest.raises(TypeError, match="integers"):
        fl.take_along_axis(a, fl.asarray(np.array([[0.0]])), axis=1)


def test_matrix_transpose_vecdot(device):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    b = np.arange(4, dtype=np.int32)
    np.testing.assert_array_equal(fl.matrix_transpose(fl.asarray(a)).get(),
                                  np.swapaxes(a, -1, -2))
    got = fl.vecdot(fl.asarray(a), fl.asarray(b))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.get(), np.vecdot(a, b))
    np.testing.assert_array_equal(fl.vecdot(fl.asarray(a), fl.asarray(a), axis=1).get(),
                                  np.vecdot(a, a, axis=1))
    with pytest.raises(ShapeError, match="differ"):
        fl.vecdot(fl.asarray(a), fl.asarray(np.arange(1)))  # broadcasts, but 4 != 1
    with pytest.raises(ShapeError):
        fl.matrix_transpose(fl.asarray(b))


@pytest.mark.parametrize("n", [0, 1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_diff(device, n, axis):
    a = np.array([[1, 4, 9, 16], [2, 3, 5, 7], [0, 0, 1, 1]], dtype=np.int16)
    np.testing.assert_array_equal(fl.diff(fl.asarray(a), n=n, axis=axis).get(),
                                  np.diff(a, n=n, axis=axis))
    np.testing.assert_array_equal(
        fl.diff(fl.asarray(a), axis=axis, prepend=fl.asarray(np.int16(5)), append=2).get(),
        np.diff(a, axis=axis, prepend=np.int16(5), append=2))
    m = a > 2
    np.testing.assert_array_equal(fl.diff(fl.asarray(m), axis=axis).get(),
                                  np.diff(m, axis=axis))


# }}}

# {{{ statistics


def test_var_std_correction(device):
    a = np.arange(12.0).reshape(3, 4) ** 1.5
    x = fl.asarray(a)
    np.testing.assert_allclose(fl.var(x, axis=1, correction=1).get(), a.var(axis=1, ddof=1))
    np.testing.assert_allclose(x.std(correction=2).get(), a.std(ddof=2))
    with pytest.raises(ValueError, match="disagree"):
        fl.var(x, ddof=1, correction=2)


def test_clip_keywords(device):
    a = np.arange(-3, 4, dtype=np.int8)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.clip(x, min=-1).get(), np.clip(a, -1, None))
    np.testing.assert_array_equal(fl.clip(x, max=2).get(), np.clip(a, None, 2))
    np.testing.assert_array_equal(fl.clip(x, -2, 1).get(), np.clip(a, -2, 1))
    assert fl.clip(x).dtype == np.int8


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint16, np.float32, np.bool_])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cumulative_sum_prod(device, dt, axis):
    rng = np.random.default_rng(2)
    a = rng.integers(0, 3, (3, 4, 5)).astype(dt)
    x = fl.asarray(a)
    for flf, npf in ((fl.cumulative_sum, np.cumulative_sum),
                     (fl.cumulative_prod, np.cumulative_prod)):
        got, ref = flf(x, axis=axis), npf(a, axis=axis)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.get(), ref)
        got = flf(x[:, 1:], axis=axis, include_initial=True)  # a strided view as input
        np.testing.assert_array_equal(got.get(), npf(a[:, 1:], axis=axis,
                                                     include_initial=True))


def test_cumulative_sum_prod_complex(device):
    # pyopencl's scan kernels had no complex header (cfloat_t unknown: a build failure);
    # (prod only: a scan's build costs ~10 s on the CI machine, sum's code is the same)
    a = np.array([[1 + 2j, 3 - 1j, 0.5j], [2, 1j, -1]], dtype=np.complex64)
    np.testing.assert_allclose(
        fl.cumulative_prod(fl.asarray(a), axis=1, include_initial=True).get(),
        np.cumulative_prod(a, axis=1, include_initial=True), rtol=1e-6)


def test_cumulative_sum_in_a_narrow_dtype_wraps(device):
    # pyopencl's scan refuses values under 4 bytes (a TypeError): scanned as uint32
    a = np.array([[200, 100, 7], [255, 3, 2]], dtype=np.uint8)
    got = fl.cumulative_sum(fl.asarray(a), axis=1, dtype=np.uint8, include_initial=True)
    want = np.cumulative_sum(a, axis=1, dtype=np.uint8, include_initial=True)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.get(), want)


def test_cumulative_sum_1d_lazy_input_and_errors(device):
    a = np.arange(100, dtype=np.int64)
    x = fl.asarray(a)
    np.testing.assert_array_equal(fl.cumulative_sum(x * 2 - 1).get(), np.cumsum(a * 2 - 1))
    got = fl.cumulative_sum(x, dtype=np.float32)
    assert got.dtype == np.float32
    assert fl.cumulative_sum(fl.asarray(np.zeros(0))).shape == (0,)
    with pytest.raises(ShapeError, match="axis is required"):
        fl.cumulative_sum(fl.asarray(np.ones((2, 2))))
    with pytest.raises(AxisError):
        fl.cumulative_prod(x, axis=1)


# }}}

# {{{ sorting, searching, sets

_FLOATS = np.array([3.0, np.nan, -0.0, 0.0, -1.0, 2.0, -np.inf, 2.0, np.inf, -1.0])


@pytest.mark.parametrize("dt", [np.float64, np.float32, np.int8, np.int64, np.uint16,
                                np.bool_])
def test_sort_argsort_stable(device, dt):
    a = _FLOATS if dt in (np.float64, np.float32) else np.array(
        [3, 1, 7, 1, 0, 3, 200, 3, 0, 1]) % (2 if dt == np.bool_ else 256)
    a = np.stack([a, a[::-1]]).astype(dt)
    x = fl.asarray(a)
    for axis in (0, 1, -1):
        np.testing.assert_array_equal(fl.sort(x, axis=axis).get(), np.sort(a, axis=axis))
        np.testing.assert_array_equal(fl.argsort(x, axis=axis).get(),
                                      np.argsort(a, axis=axis, kind="stable"))
    # descending and stable: ties keep their order, NaNs last (Python's sort is stable)
    def key(v):
        return (bool(np.isnan(v)), 0.0 if np.isnan(v) else -float(v))

    ref = [sorted(range(row.size), key=lambda j, row=row: key(row[j])) for row in a]
    np.testing.assert_array_equal(fl.argsort(x, descending=True).get(), ref)
    np.testing.assert_array_equal(fl.sort(x, descending=True).get(),
                                  np.take_along_axis(a, np.array(ref), 1))


def test_sort_errors(device):
    with pytest.raises(ShapeError, match="at least one dimension"):
        fl.sort(fl.asarray(np.float64(1)))
    with pytest.raises(AxisError):
        fl.argsort(fl.asarray(np.zeros((2, 2))), axis=2)


def test_searchsorted(device):
    a = np.sort(_FLOATS)
    v = np.array([[-np.inf, 0.0, 2.0], [np.nan, 10.0, -5.0]])
    for side in ("left", "right"):
        np.testing.assert_array_equal(
            fl.searchsorted(fl.asarray(a), fl.asarray(v), side=side).get(),
            np.searchsorted(a, v, side=side))
    perm = np.argsort(_FLOATS, kind="stable")
    np.testing.assert_array_equal(
        fl.searchsorted(fl.asarray(_FLOATS), fl.asarray(v), sorter=fl.asarray(perm)).get(),
        np.searchsorted(_FLOATS, v, sorter=perm))
    with pytest.raises(ShapeError, match="1-D"):
        fl.searchsorted(fl.asarray(np.zeros((2, 2))), fl.asarray(v))
    with pytest.raises(ValueError, match="side"):
        fl.searchsorted(fl.asarray(a), fl.asarray(v), side="middle")


def test_unique_family(device):
    a = np.array([[3, -2, 7], [-2, 0, 3], [3, 9, 0]], dtype=np.int16)
    x = fl.asarray(a)
    values, indices, inverse, counts = np.unique(a, return_index=True, return_inverse=True,
                                                 return_counts=True)
    got = fl.unique_all(x)
    np.testing.assert_array_equal(got.values.get(), values)
    np.testing.assert_array_equal(got.indices.get(), indices)
    np.testing.assert_array_equal(got.inverse_indices.get(), inverse.reshape(a.shape))
    np.testing.assert_array_equal(got.counts.get(), counts)
    np.testing.assert_array_equal(fl.unique_values(x).get(), values)
    np.testing.assert_array_equal(fl.unique_counts(x).counts.get(), counts)
    np.testing.assert_array_equal(fl.unique_inverse(x).inverse_indices.get(),
                                  inverse.reshape(a.shape))
    # each NaN is distinct; -0.0 equals 0.0
    f = fl.unique_values(fl.asarray(np.array([np.nan, 0.0, -0.0, np.nan, 1.0]))).get()
    assert f.shape == (4,) and np.isnan(f[2:]).all() and list(f[:2]) == [0.0, 1.0]
    assert fl.unique_values(fl.asarray(np.zeros(0))).shape == (0,)


def test_isin(device):
    a = np.array([[1, 5, 2], [7, 2, 0]])
    b = np.array([2, 7, 9])
    for invert in (False, True):
        np.testing.assert_array_equal(
            fl.isin(fl.asarray(a), fl.asarray(b), invert=invert).get(),
            np.isin(a, b, invert=invert))


# }}}

# {{{ repeat with counts per element, reshape(copy=), linalg spellings


def test_repeat_counts_per_element(device):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    for counts, axis in (([1, 0, 2], 1), ([2, 1], 0), ([1, 2, 0, 0, 1, 1], None), ([3], 0)):
        got = fl.repeat(fl.asarray(a), fl.asarray(np.array(counts)), axis=axis)
        np.testing.assert_array_equal(got.get(), np.repeat(a, counts, axis=axis))
    with pytest.raises(ShapeError, match="3 counts"):
        fl.repeat(fl.asarray(a), [1, 2, 3], axis=0)
    with pytest.raises(ValueError, match="negative"):
        fl.repeat(fl.asarray(a), [1, -1], axis=0)


def test_reshape_copy(device):
    x = fl.asarray(np.arange(6).reshape(2, 3))
    y = fl.reshape(x, (3, 2), copy=True)
    x[0, 0] = 9
    assert y.get()[0, 0] == 0
    with pytest.raises(ValueError, match="copy=False"):
        fl.reshape(x.T, (6,), copy=False)
    np.testing.assert_array_equal(fl.reshape(x, (6,), copy=False).get(), x.get().ravel())


def test_linalg_spellings(device):
    m = np.arange(18.0).reshape(2, 3, 3)
    x = fl.asarray(m)
    np.testing.assert_array_equal(fl.linalg.trace(x, offset=1).get(),
                                  np.linalg.trace(m, offset=1))
    np.testing.assert_array_equal(fl.linalg.diagonal(x, offset=-1).get(),
                                  np.linalg.diagonal(m, offset=-1))
    np.testing.assert_array_equal(fl.linalg.matrix_transpose(x).get(),
                                  np.linalg.matrix_transpose(m))
    np.testing.assert_allclose(fl.linalg.vecdot(x, x[0]).get(), np.linalg.vecdot(m, m[0]))
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(fl.linalg.outer(fl.asarray(v), fl.asarray(v)).get(),
                               np.linalg.outer(v, v))
    np.testing.assert_allclose(fl.linalg.cross(x, fl.asarray(v)).get(), np.cross(m, v))
    for ord, axis in ((2, None), (1, (0, 2)), (np.inf, 1)):
        np.testing.assert_allclose(
            fl.linalg.vector_norm(x, ord=ord, axis=axis, keepdims=True).get(),
            np.linalg.vector_norm(m, ord=ord, axis=axis, keepdims=True))
    with pytest.raises(ShapeError, match="length 3"):
        fl.linalg.cross(x[..., :2], x[..., :2])


# }}}

# {{{ smaller fixes found by the Array API test suite


def test_zero_d_boolean_array_index(device):
    a = np.arange(6).reshape(2, 3)
    x = fl.asarray(a)
    for flag in (True, False):
        m = fl.asarray(np.bool_(flag))
        np.testing.assert_array_equal(x[m].get(), a[np.array(flag)])
        np.testing.assert_array_equal(fl.asarray(np.float64(2.0))[m].get(),
                                      np.array(2.0)[np.array(flag)])
    x[fl.asarray(np.bool_(False))] = 9
    np.testing.assert_array_equal(x.get(), a)
    x[np.array(True)] = fl.asarray(np.arange(3))
    np.testing.assert_array_equal(x.get(), np.broadcast_to(np.arange(3), (2, 3)))


def test_arange_float_stop_gives_float(device):
    got = fl.arange(1, 7.0, 2)
    ref = np.arange(1, 7.0, 2)
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got.get(), ref)
    assert fl.arange(1, 7, 2).dtype == np.int64


def test_vector_norm_of_complex_is_real(device):
    # the 2-norm summed x * x (a complex result, and not |x|**2)
    a = np.array([[1 + 2j, 3 - 1j, 0.5j], [2, 1j, -1]], dtype=np.complex64)
    x = fl.asarray(a)
    got = fl.compute(fl.linalg.vector_norm(x, axis=1), fl.linalg.vector_norm(x, ord=1, axis=1))
    for g, o in zip(got, (2, 1)):
        want = np.linalg.vector_norm(a, ord=o, axis=1)
        assert g.dtype == want.dtype
        np.testing.assert_allclose(g.get(), want, rtol=1e-6)


def test_zero_d_results_gain_unit_axes(host):
    # a 0-d product of elements (a scalar node: host_ops computes it at once) reshaped,
    # stacked: linalg.cross of two 3-vectors stacks three of them
    a = np.array([1, 2, 3], dtype=np.uint8)
    x = fl.asarray(a)
    p = x[1] * x[2]
    assert fl.reshape(p, (1, 1)).shape == (1, 1)
    np.testing.assert_array_equal(fl.stack([p, x[0]]).get(), np.stack([a[1] * a[2], a[0]]))
    np.testing.assert_array_equal(fl.linalg.cross(x, x + 1).get(), np.cross(a, a + 1))


# }}}

