"""Complex numbers ordered as numpy orders them: real parts, then imaginary parts, and
numpy's NaN rules (``max``/``argmax`` take the first element with a NaN part; ``sort``
puts ``R+nanj``, ``nan+Rj``, ``nan+nanj`` after the numbers, in that order)."""

from __future__ import annotations

import numpy as np

import fuseloop as fl

NAN = np.nan
# ties in the real part, equal values, every NaN class (built with complex(): in Python
# 1 + nan * 1j is nan+nanj)
WITH_NANS = np.array([complex(NAN, 1), 2 + 0j, complex(1, NAN), complex(NAN, NAN), 1 + 1j,
                      complex(NAN, 0), complex(0, NAN), -1 + 2j, 1 + 0j, 1 + 1j,
                      complex(-1, NAN), complex(NAN, -3), 2 - 1j])
NUMBERS = np.array([[1 + 2j, 1 + 1j, 3 - 1j, 0 + 5j, 3 - 1j],
                    [2 + 0j, 2 - 1j, -2 + 9j, 2 + 0j, 1 + 1j],
                    [0 + 0j, -0.5 + 0j, -0.5 - 3j, 7 + 0j, 7 - 0.5j]])


def _same(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


def test_sort_argsort_and_unique_follow_numpy(device):
    dtype = np.complex64  # (float32 keys; max/min below: complex128)
    v = WITH_NANS.astype(dtype)
    x = fl.asarray(v)
    _same(fl.argsort(x).get(), np.argsort(v, kind="stable"))
    _same(fl.sort(x).get(), np.sort(v))
    h = NUMBERS.astype(dtype)
    m = fl.asarray(h)
    _same(fl.sort(m, axis=0).get(), np.sort(h, axis=0))
    _same(fl.argsort(m, axis=1).get(), np.argsort(h, axis=1, kind="stable"))
    _same(fl.sort(m, axis=1, descending=True).get(), np.sort(h, axis=1)[:, ::-1])
    _same(fl.unique_values(m).get(), np.unique(h))
    counts = fl.unique_counts(m)
    want = np.unique(h, return_counts=True)
    _same(counts.values.get(), want[0])
    _same(counts.counts.get(), want[1])


def test_max_min_argmax_argmin_follow_numpy(device):
    h = NUMBERS
    x = fl.asarray(h)
    _same(fl.max(x).get(), np.max(h))
    _same(fl.min(x, axis=0, keepdims=True).get(), np.min(h, axis=0, keepdims=True))
    _same(fl.argmax(x, axis=1).get(), np.argmax(h, axis=1))
    _same(fl.argmin(x).get(), np.argmin(h))
    # the first element with a NaN part, whichever part
    rows = np.array([[1 + 1j, complex(1, NAN), complex(NAN, 0), 3 + 0j],
                     [5 + 0j, complex(NAN, 2), 5 + 1j, complex(0, NAN)],
                     [-1 + 0j, 4 + 0j, 4 - 1j, -1 - 1j]])
    r = fl.asarray(rows)
    _same(fl.max(r, axis=1).get(), np.max(rows, axis=1))
    _same(fl.argmin(r, axis=1).get(), np.argmin(rows, axis=1))
