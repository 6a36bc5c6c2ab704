"""numpy's protocols on fuseloop arrays (``__array_ufunc__``, ``__array_function__``),
DLPack, and sharing buffers with pyopencl arrays (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import NoEquivalentError

H = np.arange(12.0).reshape(3, 4) - 4.5


# {{{ __array_ufunc__

def test_numpy_ufuncs_return_fuseloop_arrays(device):
    x = fl.asarray(H)
    for f in (np.sin, np.exp, np.abs, np.negative, np.sqrt):
        r = f(x)
        assert isinstance(r, fl.Array), f
        np.testing.assert_allclose(r.get(), f(H), rtol=1e-12, equal_nan=True)
    r = np.add(x, x)
    assert isinstance(r, fl.Array)
    np.testing.assert_array_equal(r.get(), H + H)
    mant, exp = np.frexp(x)  # (two outputs)
    assert isinstance(mant, fl.Array) and isinstance(exp, fl.Array)
    np.testing.assert_array_equal(mant.get(), np.frexp(H)[0])


def test_mixed_numpy_and_fuseloop_operands(device):
    x = fl.asarray(H)
    for r, expected in ((H + x, H + H), (x * H, H * H), (np.multiply(H, x), H * H),
                        (np.float64(2) * x, 2 * H), (H < x + 1, H < H + 1),
                        (np.maximum(x, 0), np.maximum(H, 0))):
        assert isinstance(r, fl.Array)
        np.testing.assert_array_equal(r.get(), expected)


def test_numpy_scalar_times_array_skips_the_general_dispatch(device, monkeypatch):
    """``a1 * x`` with a numpy scalar ``a1`` (numpy calls ``__array_ufunc__``): after the
    first call, a plain call goes straight to fuseloop's function (NPBench's deriche);
    keywords, lists and other libraries' arrays still take the general dispatch."""
    from fuseloop import array_protocol, interop

    x = fl.asarray(H)
    a = np.float64(2.5)
    np.testing.assert_array_equal((a * x).get(), a * H)
    general = []
    real = interop.array_ufunc
    monkeypatch.setattr(interop, "array_ufunc", lambda *p, **k: general.append(1) or real(*p, **k))
    assert np.multiply in array_protocol.DIRECT_UFUNCS
    r = a * x - np.float32(1) + np.int64(3) * x
    np.testing.assert_array_equal(r.get(), a * H - np.float32(1) + np.int64(3) * H)
    assert not general
    np.testing.assert_array_equal(np.multiply(x, [1.0, 2, 3, 4]).get(), H * [1.0, 2, 3, 4])
    y = fl.zeros_like(x)
    np.multiply(a, x, out=y)
    np.testing.assert_array_equal(y.get(), a * H)
    assert len(general) == 2


def test_ufunc_out_dtype_and_where(device):
    x = fl.asarray(H)
    out = fl.zeros((3, 4))
    r = np.add(x, 1, out=out)
    assert r is out
    np.testing.assert_array_equal(out.get(), H + 1)
    host_out = np.zeros((3, 4))
    assert np.multiply(x, 2, out=host_out) is host_out
    np.testing.assert_array_equal(host_out, H * 2)
    ints = fl.zeros((3, 4), np.int64)
    with pytest.raises(TypeError, match="same_kind"):
        np.add(x, 1, out=ints)
    np.add(x, 1, out=ints, casting="unsafe")
    np.testing.assert_array_equal(ints.get(), (H + 1).astype(np.int64))
    a = fl.asarray(np.arange(5, dtype=np.int32))
    r = np.add(a, a, dtype=np.float32)
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r.get(), np.arange(5, dtype=np.float32) * 2)
    out = fl.full((3, 4), -1.0)
    mask = H > 0
    np.sin(x, out=out, where=mask)
    expected = np.full((3, 4), -1.0)
    np.sin(H, out=expected, where=mask)
    np.testing.assert_allclose(out.get(), expected, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="needs out="):
        np.sin(x, where=mask)


def test_ufunc_reduce_accumulate_outer(device):
    x = fl.asarray(H)
    for uf in (np.add, np.multiply, np.maximum, np.minimum):
        for axis in (0, 1, None):
            r = uf.reduce(x, axis=axis)
            assert isinstance(r, fl.Array)
            np.testing.assert_allclose(r.get(), uf.reduce(H, axis=axis), rtol=1e-12)
    np.testing.assert_allclose(np.add.reduce(x, axis=1, keepdims=True, initial=10).get(),
                               np.add.reduce(H, axis=1, keepdims=True, initial=10))
    b = fl.asarray(H > 0)
    np.testing.assert_array_equal(np.logical_and.reduce(b, axis=0).get(),
                                  np.logical_and.reduce(H > 0, axis=0))
    a, c = np.arange(3), np.arange(4) * 10
    r = np.add.outer(fl.asarray(a), fl.asarray(c))
    assert isinstance(r, fl.Array)
    np.testing.assert_array_equal(r.get(), np.add.outer(a, c))
    np.testing.assert_array_equal(np.multiply.outer(fl.asarray(a), c).get(),
                                  np.multiply.outer(a, c))
    with pytest.raises(NotImplementedError, match="reduceat"):
        np.add.reduceat(x, [0, 2])
    if fl.add.__dict__.get("at") is not None:
        t = fl.zeros(4)
        np.add.at(t, fl.asarray(np.array([0, 1, 1, 3])), 1.0)
        np.testing.assert_array_equal(t.get(), [1, 2, 0, 1])
    with pytest.raises(NoEquivalentError, match="accumulate"):
        np.logical_xor.accumulate(b)


def test_unknown_ufunc_is_a_clear_error_not_a_host_copy(device):
    x = fl.asarray(H)
    # (numpy.isnat: datetimes, which fuseloop has not; numpy.spacing, the example here
    # before, is fuseloop's since issue 27)
    with pytest.raises(NoEquivalentError, match=r"numpy\.isnat.*\.get\(\)"):
        np.isnat(x)
    with pytest.raises(TypeError):  # (NoEquivalentError is a TypeError)
        np.isnat(x)
    assert isinstance(np.spacing(x), fl.Array)

# }}}


# {{{ __array_function__

def test_numpy_functions_dispatch_to_fuseloop(device):
    x, h2 = fl.asarray(H), H * 2
    cases = [
        (np.concatenate([x, x]), np.concatenate([H, H])),
        (np.concatenate([x, h2], axis=1), np.concatenate([H, h2], axis=1)),
        (np.stack([x, x], axis=1), np.stack([H, H], axis=1)),
        (np.where(x > 0, x, -x), np.where(H > 0, H, -H)),
        (np.sum(x), np.sum(H)), (np.sum(x, axis=1), np.sum(H, axis=1)),
        (np.mean(x, axis=0), np.mean(H, axis=0)), (np.max(x), np.max(H)),
        (np.reshape(x, (4, 3)), np.reshape(H, (4, 3))),
        (np.transpose(x), np.transpose(H)),
        (np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", H, H)),
        (np.linalg.norm(x), np.linalg.norm(H)),
        (np.clip(x, -1, 2), np.clip(H, -1, 2)),
        (np.dot(x, x.T), np.dot(H, H.T)), (np.matmul(x, x.T), np.matmul(H, H.T)),
        (np.zeros_like(x), np.zeros_like(H)),
    ]
    for r, expected in cases:
        assert isinstance(r, fl.Array), expected
        np.testing.assert_allclose(r.get(), expected, rtol=1e-12)
    assert np.sum(x) == np.sum(H)  # (a 0-d fuseloop array compares equal)
    out = fl.zeros(4)
    assert np.sum(x, axis=0, out=out) is out
    np.testing.assert_allclose(out.get(), H.sum(axis=0))
    c = np.copy(x)
    assert isinstance(c, fl.Array) and c is not x
    (nz,) = np.where(fl.asarray(np.array([0, 3, 0, 1])))
    np.testing.assert_array_equal(nz.get(), [1, 3])



def test_numpy_linalg_functions_loaded_on_first_use_dispatch(device):
    # fl.linalg loads its factorisations on first access (not listed by dir()): numpy's
    # np.linalg.solve / qr / cholesky of fuseloop arrays still reach them
    a = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]])
    b = np.array([1.0, 2.0, 3.0])
    x = np.linalg.solve(fl.asarray(a), fl.asarray(b))
    assert isinstance(x, fl.Array)
    np.testing.assert_allclose(x.get(), np.linalg.solve(a, b), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.cholesky(fl.asarray(a)).get(), np.linalg.cholesky(a),
                               rtol=1e-12)
    q, r = np.linalg.qr(fl.asarray(a))
    np.testing.assert_allclose(q.get() @ r.get(), a, atol=1e-12)

def test_host_valued_numpy_functions_still_work(device):
    x = fl.asarray(H)
    assert np.shape(x) == (3, 4) and np.ndim(x) == 2 and np.size(x) == 12
    assert np.result_type(x, np.float32) == np.float64
    assert np.allclose(x, H) and np.array_equal(x, H)
    host = np.asarray(x)
    assert type(host) is np.ndarray
    np.testing.assert_array_equal(host, H)
    np.testing.assert_allclose(x, H)
    np.testing.assert_array_equal(x + 1, H + 1)


def test_unknown_function_is_a_clear_error(device):
    x = fl.asarray(H)
    # (datetimes, which fuseloop has not: numpy.trapezoid and numpy.apply_along_axis,
    # the examples before, are fuseloop's)
    with pytest.raises(NoEquivalentError,
                       match=r"no equivalent of numpy\.is_busday.*\.get\(\)"):
        np.is_busday(x)
    with pytest.raises(NoEquivalentError, match=r"numpy\.linalg\.lstsq"):
        np.linalg.lstsq(x[:3, :3], x[:3, 0])
    # (functions fuseloop gained since: dispatched, not refused)
    assert isinstance(np.sort(x), fl.Array)
    assert isinstance(np.trapezoid(x), fl.Array)
    with pytest.raises(NoEquivalentError, match="does not support the argument"):
        np.concatenate([x, x], dtype=np.float32)

# }}}


# {{{ DLPack

@pytest.mark.opencl_only
def test_dlpack_round_trips(device):
    x = fl.asarray(H)
    # (a host copy: asked for explicitly where the device's memory is not the host's)
    host = {} if device.type == "cpu" else {"device": "cpu"}
    h = np.from_dlpack(x, **host)
    assert type(h) is np.ndarray
    np.testing.assert_array_equal(h, H)
    np.testing.assert_array_equal(np.from_dlpack(x[:, 1:3] * 2, **host), H[:, 1:3] * 2)
    if device.type != "cpu":
        with pytest.raises(BufferError, match="device='cpu'"):
            np.from_dlpack(x)
    with pytest.raises(BufferError):
        x.__dlpack__(copy=False)
    with pytest.raises(BufferError):
        x.__dlpack__(dl_device=(4, 0))
    y = fl.from_dlpack(H)
    assert isinstance(y, fl.Array) and y.device is device
    np.testing.assert_array_equal(y.get(), H)
    assert fl.from_dlpack(x) is x
    with pytest.raises(BufferError):
        fl.from_dlpack(H, copy=False)
    assert len(x.__dlpack_device__()) == 2

# }}}


# {{{ pyopencl

@pytest.mark.opencl_only
def test_pyopencl_without_a_copy_both_ways(device):
    import pyopencl.array as cla

    x = fl.asarray(H)
    p = x.to_pyopencl()
    assert isinstance(p, cla.Array) and p.shape == x.shape and p.dtype == x.dtype
    assert p.base_data.int_ptr == x._storage.buffer.int_ptr
    assert fl.to_pyopencl(x).base_data.int_ptr == x._storage.buffer.int_ptr
    p.fill(7.0)  # (the same buffer: fuseloop sees the write)
    np.testing.assert_array_equal(x.get(), np.full((3, 4), 7.0))

    src = cla.to_device(device.queue, H)
    y = fl.from_pyopencl(src, copy=False)
    assert y._storage.buffer.int_ptr == src.base_data.int_ptr
    np.testing.assert_array_equal((y + 1).get(), H + 1)
    y[0] = 0.0
    np.testing.assert_array_equal(src.get()[0], np.zeros(4))
    del src  # (y keeps the pyopencl array alive)
    np.testing.assert_array_equal(y.get()[1], H[1])
    strided = cla.to_device(device.queue, H)[:, ::2]
    with pytest.raises(BufferError, match="not C-contiguous"):
        fl.from_pyopencl(strided, copy=False)
    np.testing.assert_array_equal(fl.from_pyopencl(strided).get(), H[:, ::2])
    # a lazy or strided fuseloop array is evaluated into a buffer of its own first
    np.testing.assert_array_equal(fl.to_pyopencl(fl.asarray(H)[:, 1]).get(), H[:, 1])

# }}}
