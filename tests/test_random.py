"""fl.random: bit-exact against pure-Python Philox4x32-10 and Threefry4x64-20, the
distributions by moments and Kolmogorov-Smirnov tests, and Monte-Carlo pi in one kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import DTypeError

M32 = (1 << 32) - 1
M64 = (1 << 64) - 1


# {{{ independent references (the published algorithms, written out here)

def philox4x32_10(ctr: list[int], key: list[int]) -> list[int]:
    """Philox4x32 with 10 rounds: counter of four 32-bit words, key of two."""
    c, k = list(ctr), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & M32, (p0 >> 32) ^ c[3] ^ k[1], p0 & M32]
    return c


_ROT = [(14, 16), (52, 57), (23, 40), (5, 37), (25, 33), (46, 12), (58, 22), (32, 32)]


def threefry4x64_20(ctr: list[int], key: list[int]) -> list[int]:
    """Threefry4x64 with 20 rounds: counter and key of four 64-bit words."""
    ks = [*key, 0x1BD11BDAA9FC1A22 ^ key[0] ^ key[1] ^ key[2] ^ key[3]]
    x = [(c + k) & M64 for c, k in zip(ctr, ks)]

    def rotl(v: int, s: int) -> int:
        return ((v << s) | (v >> (64 - s))) & M64

    for r in range(20):
        ra, rb = _ROT[r % 8]
        if r % 2 == 0:
            x[0] = (x[0] + x[1]) & M64
            x[1] = rotl(x[1], ra) ^ x[0]
            x[2] = (x[2] + x[3]) & M64
            x[3] = rotl(x[3], rb) ^ x[2]
        else:
            x[0] = (x[0] + x[3]) & M64
            x[3] = rotl(x[3], ra) ^ x[0]
            x[2] = (x[2] + x[1]) & M64
            x[1] = rotl(x[1], rb) ^ x[2]
        if r % 4 == 3:
            s = (r + 1) // 4
            x = [(x[j] + ks[(s + j) % 5]) & M64 for j in range(4)]
            x[3] = (x[3] + s) & M64
    return x


def block(method: str, index: int, key: int, counter: int) -> list[int]:
    """fuseloop's block for element ``index`` (see fuseloop.lower.random_ops)."""
    if method == "philox":
        return philox4x32_10([index & M32, index >> 32, counter & M32, counter >> 32],
                             [key & M32, key >> 32])
    return threefry4x64_20([index, counter, 0, 0], [key, 0, 0, 0])


def words64(method: str, index: int, key: int, counter: int) -> tuple[int, int]:
    r = block(method, index, key, counter)
    if method == "philox":
        return r[0] | r[1] << 32, r[2] | r[3] << 32
    return r[0], r[1]

# }}}


def test_references_match_published_vectors():
    # Random123's known answers (kat_vectors) for zero and all-ones counters and keys
    assert philox4x32_10([0] * 4, [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox4x32_10([M32] * 4, [M32] * 2) == [
        0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert threefry4x64_20([0] * 4, [0] * 4) == [
        0x09218EBDE6C85537, 0x55941F5266D86105, 0x4BD25E16282434DC, 0xEE29EC846BD2E40B]
    assert threefry4x64_20([M64] * 4, [M64] * 4) == [
        0x29C24097942BBA1B, 0x0371BBFB0F6F4E11, 0x3C231FFA33F83A1C, 0xCD29113FDE32D168]


KEYS = [(0, 0), (1, 0), (0xDEADBEEFCAFEF00D, 7), (M64, M64), (12345, 1 << 40)]


@pytest.mark.parametrize("method", ["philox", "threefry"])
@pytest.mark.parametrize("key,counter", KEYS)
def test_bits_bit_exact(device, method, key, counter):
    got = fl.random.bits(4 * 9, key=key, counter=counter, method=method).get()
    assert got.dtype == (np.uint32 if method == "philox" else np.uint64)
    want = [w for j in range(9) for w in block(method, j, key, counter)]
    assert [int(v) for v in got] == want


@pytest.mark.parametrize("method", ["philox", "threefry"])
def test_uniform_and_integers_bit_exact(device, method):
    key, counter, n = 0xFEEDFACE12345678, 3, 50
    ws = [words64(method, i, key, counter) for i in range(n)]
    u64 = fl.random.uniform(n, key=key, counter=counter, method=method).get()
    np.testing.assert_array_equal(u64, [(w >> 11) * 2.0 ** -53 for w, _ in ws])
    u32 = fl.random.uniform(n, dtype=np.float32, key=key, counter=counter,
                            method=method).get()
    assert u32.dtype == np.float32
    np.testing.assert_array_equal(u32, np.array([(w >> 40) * 2.0 ** -24 for w, _ in ws],
                                                np.float32))
    for low, high, dt in ((-5, 17, np.int64), (0, 3, np.uint8), (-(1 << 63), (1 << 63) - 1,
                                                                  np.int64),
                          (1 << 63, 1 << 64, np.uint64)):
        got = fl.random.integers(n, low, high, dtype=dt, key=key, counter=counter,
                                 method=method).get()
        assert got.dtype == dt
        assert [int(v) for v in got] == [low + ((w * (high - low)) >> 64) for w, _ in ws]
    # the normals: Box-Muller of the same words (log and cospi: the device's rounding)
    z = fl.random.normal(n, key=key, counter=counter, method=method).get()
    u1 = np.array([((w >> 11) + 1) * 2.0 ** -53 for w, _ in ws])
    u2 = np.array([(v >> 11) * 2.0 ** -53 for _, v in ws])
    np.testing.assert_allclose(z, np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2),
                               rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("method", ["philox", "threefry"])
def test_distributions(device, method, dt):
    stats = pytest.importorskip("scipy.stats")
    n = 200_000
    u = fl.random.uniform(n, dtype=dt, key=2024, counter=5, method=method).get()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / n)
    assert stats.kstest(u.astype(np.float64), "uniform").pvalue > 1e-3
    z = fl.random.normal(n, dtype=dt, key=2024, counter=6, method=method).get()
    assert z.dtype == dt
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)
    assert stats.kstest(z.astype(np.float64), "norm").pvalue > 1e-3
    w = fl.random.normal(n, 3.0, 2.0, dt, key=2024, counter=6, method=method).get()
    np.testing.assert_allclose(w, 3 + 2 * z, rtol=1e-6 if dt == np.float32 else 1e-14)
    k = fl.random.integers(n, 10, key=9, counter=1, method=method).get()
    counts = np.bincount(k, minlength=10)
    assert counts.size == 10 and stats.chisquare(counts).pvalue > 1e-3
    # streams of other counters and keys are uncorrelated
    v = fl.random.uniform(n, dtype=dt, key=2024, counter=7, method=method).get()
    assert abs(np.corrcoef(u, v)[0, 1]) < 5 / np.sqrt(n)


def _global_params(source: str) -> list[str]:
    head = re.search(r"__kernel void .*?(\w+)\(([^)]*)\)\s*$", source, re.M)
    assert head is not None
    return [p for p in head.group(2).split(",") if "__global" in p]


def test_monte_carlo_pi_in_one_kernel(device):
    # VexCL's example: the random numbers live only in the reduction's kernel
    n = 10_000
    x = fl.random.uniform(n, key=11, counter=0)
    y = fl.random.uniform(n, key=11, counter=1)
    inside = fl.sum(x * x + y * y < 1)
    sources = fl.show_code(inside)
    assert sources.count("__kernel") + sources.count("__global__ void") == 1
    assert len(_global_params(sources)) == 1  # the result; no buffer of random numbers
    fl.reset_stats()
    pi = 4 * float(inside) / n
    assert fl.stats()["kernels_launched"] == 1
    assert abs(pi - np.pi) < 4 * 4 * np.sqrt(np.pi / 4 * (1 - np.pi / 4) / n)
    # a large one: as many kernels as the same reduction of a plain expression
    n = 1_000_000
    g = fl.random.Generator(key=12)
    x, y = g.uniform(size=n), g.uniform(size=n)
    fl.reset_stats()
    pi = 4 * float(fl.mean(x * x + y * y < 1))
    launched = fl.stats()["kernels_launched"]
    a = fl.arange(n) * 1e-6
    fl.reset_stats()
    float(fl.mean(a * a < 0.5))
    assert launched == fl.stats()["kernels_launched"]
    assert abs(pi - np.pi) < 4 * 4 * np.sqrt(np.pi / 4 * (1 - np.pi / 4) / n)


def test_new_key_reuses_the_kernel(device):
    fl.random.uniform(1000, key=1).get()
    fl.reset_stats()
    a = fl.random.uniform(1000, key=2, counter=9).get()
    assert fl.stats()["kernels_compiled"] == 0
    b = fl.random.uniform(1000, key=2, counter=9).get()
    np.testing.assert_array_equal(a, b)  # reproducible
    assert not np.array_equal(a, fl.random.uniform(1000, key=3, counter=9).get())


def test_generator_advances_its_counter(device):
    g = fl.random.Generator(key=5, counter=10, method="threefry")
    a, b = g.random(size=(3, 4)), g.standard_normal(size=7)
    assert g.counter == 12 and "threefry" in repr(g)
    np.testing.assert_array_equal(
        a.get(), fl.random.uniform((3, 4), key=5, counter=10, method="threefry").get())
    np.testing.assert_array_equal(
        b.get(), fl.random.normal(7, key=5, counter=11, method="threefry").get())
    c = g.integers(3, 9, size=5, dtype=np.int16)
    assert c.dtype == np.int16 and ((c.get() >= 3) & (c.get() < 9)).all()
    assert g.uniform(2.0, 3.0, size=4).get().min() >= 2.0


def test_shapes_and_views(device):
    full = fl.random.uniform((6, 5), key=4).get()
    flat = fl.random.uniform(30, key=4).get()
    np.testing.assert_array_equal(full.ravel(), flat)  # the C-order flat index
    np.testing.assert_array_equal(fl.random.uniform((6, 5), key=4)[1::2, ::-1].get(),
                                  full[1::2, ::-1])
    assert fl.random.uniform(key=4).shape == ()


def test_errors(device):
    with pytest.raises(ValueError, match="method"):
        fl.random.uniform(3, method="mt19937")
    with pytest.raises(ValueError, match="key"):
        fl.random.uniform(3, key=-1)
    with pytest.raises(ValueError, match="counter"):
        fl.random.Generator(counter=1 << 64)
    with pytest.raises(DTypeError):
        fl.random.uniform(3, dtype=np.int32)
    with pytest.raises(DTypeError):
        fl.random.integers(3, 5, dtype=np.float32)
    with pytest.raises(ValueError, match="low < high"):
        fl.random.integers(3, 5, 5)
    with pytest.raises(ValueError, match="low < high"):
        fl.random.integers(3, 0, 300, dtype=np.uint8)


def test_both_generators_in_one_kernel(device):
    # each helper carries Random123's headers; their include guards let them meet
    parts = [fl.random.uniform(10, key=1), fl.random.normal(10, method="threefry"),
             fl.random.bits(10, counter=2), fl.random.integers(10, 5, method="threefry")]
    fl.reset_stats()
    got = (parts[0] + parts[1] + parts[2] + parts[3]).get()
    assert fl.stats()["kernels_launched"] == 1
    np.testing.assert_allclose(got, sum(p.get() for p in parts), rtol=1e-15)
