"""Regression tests for the value and protocol defects of issue 23 (an independent
test campaign): fill values, 64-bit indices of lazy sources, copy and pickle,
``shape`` assignment, byte order, numpy's reduction keywords, ``__array__``'s
``copy``, pyopencl arrays and ``linspace``'s ``num``."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.expr.program import Target, linearize
from fuseloop.launching import INT32_LIMIT

BIG = 2**31 + 100  # a lazy length past int32's range (no buffer is allocated)


# {{{ 2. index expressions of lazy sources past 2**31

@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_strided_arange_longer_than_int32(device, dtype):
    got = fl.arange(BIG, dtype=dtype)[::2**30].get()
    np.testing.assert_array_equal(got, np.array([0, 2**30, 2**31], dtype=dtype))


def test_strided_linspace_longer_than_int32(device):
    n = BIG + 1
    got = fl.linspace(0.0, 1.0, n)[::2**30].get()
    np.testing.assert_allclose(got, np.array([0, 2**30, 2**31]) / (n - 1), rtol=1e-15)


def test_lazy_views_past_int32(device):
    # reversed, offset and two-dimensional views of a lazy source, mixed with a buffer
    np.testing.assert_array_equal(fl.arange(2**32)[::-2**30].get(),
                                  [2**32 - 1 - k * 2**30 for k in range(4)])
    np.testing.assert_array_equal(fl.arange(BIG)[-2:].get(), [BIG - 2, BIG - 1])
    grid = fl.arange(2**32).reshape(2**16, 2**16)[::2**15, ::2**15]
    np.testing.assert_array_equal(grid.get(), [[0, 2**15], [2**31, 2**31 + 2**15]])
    mixed = fl.arange(BIG)[::2**30] + fl.asarray(np.arange(3))
    np.testing.assert_array_equal(mixed.get(), [0, 2**30 + 1, 2**31 + 2])
    assert float(fl.arange(3 * 2**30, dtype=np.float64)[::2**30].sum()) == 3 * 2**30


def test_strided_target_counts_for_the_index_type(device):
    # a strided write target is no input: its reach must still widen the indices
    store = fl.zeros(4, np.int8)._storage
    value = fl.arange(3)._node
    _, small = linearize([value], (3,), targets=[Target(store, (2,), 0)])
    assert max(small.params, default=0) <= INT32_LIMIT
    _, big = linearize([value], (3,), targets=[Target(store, (2**30,), 0)])
    assert max(big.params) > INT32_LIMIT

# }}}


# {{{ 1. fill values follow np.full (numpy 2, NEP 50)

FILLS = [
    (2**63, None), (2**64 - 1, None), (-(2**63), None), (7, None), (True, None), (2.5, None),
    (np.uint64(2**63), None), (np.int8(-3), None),
    (300, np.int8), (-1, np.uint8), (-1, np.uint64), (2**63, np.int64), (2**64, np.uint64),
    (255, np.uint8), (-128, np.int8), (2**63, np.uint64), (2**70, np.float64),
    (np.int64(300), np.int8), (1.5, np.int32), (300, np.bool_), (1e300, np.float32),
]


@pytest.mark.parametrize("fill, dtype", FILLS)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_full_converts_fill_values_as_numpy(device, fill, dtype):
    try:
        want = np.full(3, fill, dtype=dtype)
    except OverflowError as exc:
        with pytest.raises(OverflowError, match=str(exc)[:20]):
            fl.full(3, fill, dtype=dtype)
        return
    got = fl.full(3, fill, dtype=dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.get(), want)


def test_full_like_does_not_wrap(device):
    proto = np.arange(3)
    with pytest.raises(OverflowError):
        np.full_like(proto, 2**63)
    with pytest.raises(OverflowError):
        fl.full_like(proto, 2**63)
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        fl.full_like(fl.zeros(3, np.uint8), -1)
    np.testing.assert_array_equal(fl.full_like(fl.zeros(3, np.uint8), 255).get(), [255] * 3)


def test_full_of_an_int_past_uint64_and_array_fills(device):
    with pytest.raises(OverflowError, match="neither int64 nor uint64"):
        fl.full(3, 2**64)
    np.testing.assert_array_equal(fl.full((2, 3), [1, 2, 3]).get(), np.full((2, 3), [1, 2, 3]))

# }}}


# {{{ 5. byte-swapped input, 8. pyopencl arrays, 9. linspace's num

def test_byte_swapped_input_is_converted(device):
    for host in (np.arange(4, dtype=">f4"), np.arange(6, dtype=">i8").reshape(2, 3)[:, ::2],
                 np.array([1, 2, 3], dtype=">u2")):
        x = fl.asarray(host)
        assert x.dtype == host.dtype.newbyteorder("=") and x.dtype.isnative
        np.testing.assert_array_equal(x.get(), host)
        np.testing.assert_array_equal((x + 1).get(), host + 1)
    assert fl.asarray([1, 2], dtype=">f8").dtype == np.float64
    assert fl.zeros(2, ">i4").dtype == np.int32


@pytest.mark.opencl_only
def test_pyopencl_array_same_context_copies_on_the_device(device, monkeypatch):
    import pyopencl as cl
    import pyopencl.array as cla

    import fuseloop.creation as creation

    host = np.arange(6.0).reshape(2, 3)
    src = cla.to_device(cl.CommandQueue(device.context), host)
    src += 1  # (a kernel on another queue of the context: waited for)
    with monkeypatch.context() as m:
        m.setattr(creation, "_pyopencl_host", None)  # no trip through the host
        x = fl.asarray(src)
    assert x.shape == (2, 3) and x.dtype == np.float64
    np.testing.assert_array_equal(x.get(), host + 1)
    src.fill(0.0)  # a copy, not the same buffer
    np.testing.assert_array_equal(x.get(), host + 1)
    np.testing.assert_array_equal(fl.asarray(src[1]).get(), [0, 0, 0])
    np.testing.assert_array_equal(fl.asarray(src, dtype=np.int32).get(), np.zeros((2, 3)))


@pytest.mark.opencl_only
def test_pyopencl_array_strided_or_from_another_context(device):
    import pyopencl as cl
    import pyopencl.array as cla

    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    src = cla.to_device(device.queue, host)
    np.testing.assert_array_equal(fl.asarray(src[:, 1]).get(), host[:, 1])
    np.testing.assert_array_equal(fl.asarray(src[1:, ::2]).get(), host[1:, ::2])
    # (the context is held: Intel's CPU runtime frees a context only its queue holds)
    other_context = cl.Context([device.cl_device])
    other = cl.CommandQueue(other_context)
    np.testing.assert_array_equal(fl.asarray(cla.to_device(other, host)).get(), host)
    np.testing.assert_array_equal(fl.asarray(cla.empty(other, (0, 2), np.float32)).get(),
                                  np.empty((0, 2), np.float32))


def test_linspace_num_must_be_an_integer(device):
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        fl.linspace(0, 1, num=2.5)
    np.testing.assert_allclose(fl.linspace(0, 1, num=np.int64(3)).get(), [0, 0.5, 1])

# }}}


# {{{ 3. copy, deepcopy and pickle

def _sources() -> list:
    h = np.arange(12.0).reshape(3, 4)
    return [(fl.asarray(h), h), (fl.asarray(h)[::2, 1:], h[::2, 1:]),
            (fl.asarray(h) * 2 + 1, h * 2 + 1), (fl.arange(5), np.arange(5)),
            (fl.asarray(np.float32(2.5)), np.asarray(np.float32(2.5)))]


def test_copy_copy_is_independent(device):
    h = np.arange(6.0)
    x = fl.asarray(h)
    c = copy.copy(x)
    c += 100
    np.testing.assert_array_equal(x.get(), h)
    np.testing.assert_array_equal(c.get(), h + 100)
    x[0] = -1  # and the other way round
    np.testing.assert_array_equal(c.get(), h + 100)
    v = x[1:]
    cv = copy.copy(v)
    x[...] = 0
    np.testing.assert_array_equal(cv.get(), h[1:])


def test_deepcopy_and_pickle(device):
    for x, h in _sources():
        d = copy.deepcopy(x)
        assert d is not x and d.dtype == h.dtype and d.shape == h.shape
        np.testing.assert_array_equal(d.get(), h)
        assert copy.deepcopy([x, x])[1] is not x
        p = pickle.loads(pickle.dumps(x))
        assert isinstance(p, fl.Array) and p.device is fl.get_device()
        assert p.dtype == h.dtype and p.shape == h.shape
        np.testing.assert_array_equal(p.get(), h)
    x = fl.asarray(np.arange(3.0))
    d = copy.deepcopy(x)
    x += 1
    np.testing.assert_array_equal(d.get(), [0, 1, 2])

# }}}


# {{{ 4. assigning shape

def test_shape_assignment_reshapes_in_place(device):
    h = np.arange(6.0)
    x = fl.asarray(h)
    x.shape = (2, 3)
    assert x.shape == (2, 3) and (x + 1).shape == (2, 3)
    np.testing.assert_array_equal((x + 1).get(), h.reshape(2, 3) + 1)
    x.shape = (-1,)
    assert x.shape == (6,)
    v = x[::2]  # a view: reshaped in place, still writing through to x
    v.shape = (3, 1)
    v[1, 0] = 100
    np.testing.assert_array_equal(x.get(), [0, 1, 100, 3, 4, 5])
    lazy = fl.asarray(h.reshape(2, 3)).T + 1  # a lazy array: computed if it must be
    lazy.shape = (6,)
    np.testing.assert_array_equal(lazy.get(), (h.reshape(2, 3).T + 1).reshape(6))


def test_shape_assignment_that_needs_a_copy_raises(device):
    h = np.arange(6.0).reshape(2, 3)
    t = fl.asarray(h).T
    with pytest.raises(AttributeError, match="Incompatible shape for in-place modification"):
        t.shape = (6,)
    assert t.shape == (3, 2)
    np.testing.assert_array_equal(t.get(), h.T)
    with pytest.raises(ValueError, match="cannot reshape array of size 6"):
        fl.asarray(h).shape = (4,)

# }}}


# {{{ 6. numpy's reduction functions on fuseloop arrays, 7. __array__'s copy

REDUCTIONS = ["sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "argmax",
              "argmin"]


@pytest.mark.parametrize("name", REDUCTIONS)
def test_numpy_reduction_functions(device, name):
    h = np.arange(1.0, 13.0).reshape(3, 4)
    x = fl.asarray(h)
    f = getattr(np, name)
    got = f(x)
    assert isinstance(got, fl.Array | np.generic | float | int | bool)
    np.testing.assert_allclose(np.asarray(got), f(h), rtol=1e-12)
    got = f(x, axis=0)
    assert isinstance(got, fl.Array)
    np.testing.assert_allclose(got.get(), f(h, axis=0), rtol=1e-12)
    kw = {} if name.startswith("arg") else {"keepdims": True}
    np.testing.assert_allclose(f(x, axis=1, **kw).get(), f(h, axis=1, **kw), rtol=1e-12)


def test_reduction_out_arguments(device):
    h = np.arange(1.0, 13.0).reshape(3, 4)
    x = fl.asarray(h)
    out = fl.zeros(4)
    assert np.sum(x, axis=0, out=out) is out
    np.testing.assert_array_equal(out.get(), h.sum(axis=0))
    assert x.max(axis=1, out=out[:3]) is not None
    np.testing.assert_array_equal(out.get(), [*h.max(axis=1), h.sum(axis=0)[3]])
    iout = fl.zeros((), np.int64)  # numpy casts into out unsafely
    np.testing.assert_array_equal(np.mean(x, out=iout).get(), int(h.mean()))
    host = np.zeros(4)
    assert np.min(x, axis=0, out=host) is host
    np.testing.assert_array_equal(host, h.min(axis=0))
    np.testing.assert_array_equal(np.std(x, axis=0, ddof=1).get(), np.std(h, axis=0, ddof=1))
    assert np.sum(x, where=True).get() == h.sum()
    with pytest.raises(TypeError, match="out= must be a fuseloop or numpy array"):
        np.sum(x, out=[0.0])
    with pytest.raises(ValueError, match="out= has shape"):
        np.sum(x, axis=0, out=fl.zeros(3))
    with pytest.raises(NotImplementedError, match="where="):
        np.sum(x, where=x > 2)


def test_array_protocol_copy_keyword(device):
    x = fl.asarray(np.arange(3.0))
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.asarray(x, copy=False)
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.array(x, copy=False)
    for got in (np.asarray(x), np.array(x, copy=True), np.asarray(x, dtype=np.float32)):
        np.testing.assert_array_equal(got, [0, 1, 2])
    a, b = np.asarray(x), np.asarray(x)
    a[0] = 9
    assert b[0] == 0 and x.get()[0] == 0

# }}}
