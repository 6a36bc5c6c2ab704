"""In-kernel checks (fl.check and Stan's named helpers): one kernel, CheckError naming the
offending index and value, outputs left untouched on failure."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import CheckError, DTypeError


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_passing_check_is_one_kernel(device, dtype):
    h = np.linspace(0.5, 4, 1000).astype(dtype)
    x = fl.asarray(h)
    fl.reset_stats()
    z = fl.log(fl.check_positive(x, "x")).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(z, np.log(h), rtol=1e-6)
    assert z.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_failing_check_names_index_and_value(device, dtype):
    h = np.arange(1, 101).astype(dtype)
    h[37] = -5
    x = fl.asarray(h)
    with pytest.raises(CheckError, match=r"x is not positive: x\[37\] = -5") as info:
        (fl.check_positive(x, "x") * 2).get()
    assert info.value.index == 37 and info.value.value == -5
    assert isinstance(info.value, ValueError)


def test_check_on_matrix_and_expression(device):
    h = np.arange(12.0).reshape(3, 4)
    m = fl.asarray(h)
    fl.reset_stats()
    got = (fl.check(m * 2, m < 100, "big at {i}") + 1).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_array_equal(got, h * 2 + 1)
    with pytest.raises(CheckError, match=r"m\[9\] = 18\.0 out of range"):
        fl.check(m * 2, m != 9, "m[{i}] = {value} out of range").get()
    # several offenders: any one is named, with its own value
    with pytest.raises(CheckError) as info:
        fl.check(m * 2, m < 9, "m[{i}] = {value} out of range").get()
    assert info.value.index in (9, 10, 11) and info.value.value == 2 * info.value.index


def test_helpers(device):
    h = np.array([0.0, 1.0, np.inf, 3.0])
    with pytest.raises(CheckError, match=r"y is not finite: y\[2\] = inf"):
        fl.check_finite(fl.asarray(h), "y").get()
    with pytest.raises(CheckError, match=r"y is not finite: y\[1\] = nan"):
        fl.check_finite(fl.asarray(np.array([0.0, np.nan])), "y").get()
    np.testing.assert_array_equal(fl.check_nonnegative(fl.asarray(h[:2]), "y").get(), h[:2])
    with pytest.raises(CheckError, match=r"p is not in \[0, 1\]: p\[1\] = 1\.5"):
        fl.check_bounded(fl.asarray(np.array([0.5, 1.5, 0.2])), 0, 1, "p").get()
    ints = fl.asarray(np.array([3, 4, 5], np.int32))
    np.testing.assert_array_equal(fl.check_bounded(ints, 3, 5, "k").get(), [3, 4, 5])
    # the boolean form: the condition itself is checked and returned
    ok = fl.check(ints > 0, "k[{i}] is not positive").get()
    assert ok.dtype == np.bool_ and ok.all()


def test_nothing_written_on_failure(device):
    out = fl.asarray(np.full(4, 7.0))
    x = fl.asarray(np.array([1.0, -1.0, 2.0, 3.0]))
    with pytest.raises(CheckError):
        out[...] = fl.sqrt(fl.check_positive(x, "x"))
    np.testing.assert_array_equal(out.get(), 7.0)
    other = fl.asarray(np.full(4, 9.0))
    with pytest.raises(CheckError):
        fl.compute(x * 2, fl.check_positive(x, "x"), out=(other, out))
    np.testing.assert_array_equal(out.get(), 7.0)
    np.testing.assert_array_equal(other.get(), 9.0)
    with pytest.raises(CheckError):  # in place: x keeps its values
        x[...] = fl.check_positive(x, "x") + 1
    np.testing.assert_array_equal(x.get(), [1.0, -1.0, 2.0, 3.0])


def test_construction_errors(device):
    x = fl.asarray(np.arange(3.0))
    with pytest.raises(ValueError, match=r"unknown field.*\{idx\}"):
        fl.check(x, x > 0, "x[{idx}] bad")
    with pytest.raises(ValueError, match="malformed"):
        fl.check(x, x > 0, "x[{i] bad")
    with pytest.raises(DTypeError, match="boolean"):
        fl.check(x, x + 1, "bad")
    # literal braces and a name with braces are fine
    assert fl.check(x, x >= 0, "{{ok}} {i}").shape == (3,)
    assert fl.check_positive(x + 1, "f{x}").shape == (3,)
    with pytest.raises(CheckError, match=r"f\{x\} is not positive: f\{x\}\[0\] = 0\.0"):
        fl.check_positive(x, "f{x}").get()


@pytest.mark.parametrize("n", [100, 200000])  # one kernel, and two-stage
def test_check_inside_reduction(device, n):
    h = np.random.default_rng(7).random(n) + 0.1
    np.testing.assert_allclose(float(fl.sum(fl.log(fl.check_positive(fl.asarray(h))))),
                               np.log(h).sum(), rtol=1e-9)
    h[n // 3] = -2
    with pytest.raises(CheckError, match=rf"x\[{n // 3}\] = -2\.0"):
        float(fl.sum(fl.check_positive(fl.asarray(h), "x")))
