"""``@fl.fuse``: functions traced once per signature and replayed.

Results are compared with numpy; ``Fused.traces`` counts traces, ``fl.stats()`` the
launches and compilations of a replayed call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.errors import TracingError

RNG = np.random.default_rng(7)


def _host(shape, dtype=np.float32, low=0.5, high=2.0):
    return RNG.uniform(low, high, shape).astype(dtype)


def _close(got, want, dtype=np.float32):
    tol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_with_scalar_argument(device, dtype, fresh_stats):
    @fl.fuse
    def f(x, y, a):
        return ((x * 2 + y) * x - y) / a + fl.sin(x) * a

    xh, yh = _host(1000, dtype), _host(1000, dtype)
    x, y = fl.asarray(xh), fl.asarray(yh)
    for a in (3.0, 0.25, -7.5):
        got = f(x, y, a)
        assert got.dtype == dtype and got.shape == (1000,)
        _close(got.get(), ((xh * 2 + yh) * xh - yh) / a + np.sin(xh) * a, dtype)
    assert f.traces == 1  # a new scalar value is a new kernel argument, not a new trace
    fl.reset_stats()
    f(x, y, 1.5)
    s = fl.stats()
    assert s["kernels_launched"] == 1
    assert s["kernels_compiled"] == 0 and s["kernels_lowered"] == 0


def test_python_scalars_are_weak_numpy_scalars_strong(device):
    @fl.fuse
    def f(x, a):
        return x * a

    x = fl.asarray(_host(10))
    assert f(x, 2.0).dtype == np.float32  # a Python float takes the array's dtype
    r = f(x, np.float64(2.0))  # a numpy float64 promotes, as numpy does
    assert r.dtype == np.float64
    _close(r.get(), x.get() * np.float64(2.0), np.float64)
    assert f.traces == 2
    assert f(x, 3).dtype == np.float32 and f.traces == 3  # an int is another kind


def test_scalar_host_expressions_follow_the_argument(device):
    @fl.fuse
    def f(x, dt):
        half = 0.5 * dt
        return x + half * x + dt ** 2 - abs(-dt)

    xh = _host(64)
    x = fl.asarray(xh)
    for dt in (0.1, 0.3):
        _close(f(x, dt).get(), xh + np.float32(0.5 * dt) * xh + np.float32(dt ** 2)
               - np.float32(dt))
    assert f.traces == 1


def test_scalar_expression_of_another_type_runs_as_python(device):
    @fl.fuse
    def f(i, n):
        return i * 2 ** n

    ih = np.arange(-5, 5, dtype=np.int32)
    i = fl.asarray(ih)
    for n in (2, 3, -1, 1):  # (2 ** -1 is a float: the kernel was made for an int scalar)
        got = f(i, n)
        want = ih * 2 ** n
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.get(), want)
    assert f.traces == 1


def test_broadcasting_and_new_shapes_retrace(device):
    @fl.fuse
    def f(x, y):
        return x * y - y

    xh, yh = _host((4, 5)), _host(5)
    got = f(fl.asarray(xh), fl.asarray(yh))
    assert got.shape == (4, 5)
    _close(got.get(), xh * yh - yh)
    xh2 = _host((3, 5))
    _close(f(fl.asarray(xh2), fl.asarray(yh)).get(), xh2 * yh - yh)
    assert f.traces == 2
    xh3 = xh2.astype(np.float64)
    r = f(fl.asarray(xh3), fl.asarray(yh))
    assert r.dtype == np.float64 and f.traces == 3
    _close(r.get(), xh3 * yh - yh, np.float64)
    f(fl.asarray(_host((3, 5))), fl.asarray(_host(5)))
    assert f.traces == 3  # (each signature is kept)


def test_reductions_inside(device, fresh_stats):
    @fl.fuse
    def softmax_centered(x):
        e = fl.exp(x - x.max(axis=-1, keepdims=True))
        sm = e / e.sum(axis=-1, keepdims=True)
        return sm - sm.mean(), x.sum()

    for _ in range(3):
        xh = _host((16, 300))
        a, b = softmax_centered(fl.asarray(xh))
        e = np.exp(xh - xh.max(axis=-1, keepdims=True))
        sm = e / e.sum(axis=-1, keepdims=True)
        _close(a.get(), sm - sm.mean())
        np.testing.assert_allclose(b.get(), xh.sum(), rtol=1e-5)
    assert softmax_centered.traces == 1


def test_two_stage_reduction_replayed(device, fresh_stats):
    @fl.fuse
    def total(x, w):
        return (x * w).sum()

    xh = _host(100_000)
    x = fl.asarray(xh)
    for w in (1.0, 2.0):
        np.testing.assert_allclose(total(x, w).get(), (xh * np.float32(w)).sum(), rtol=1e-4)
    assert total.traces == 1


def test_several_results_in_one_kernel(device, fresh_stats):
    @fl.fuse
    def f(x, y):
        return x + y, x - y, x * y

    xh, yh = _host(500), _host(500)
    x, y = fl.asarray(xh), fl.asarray(yh)
    f(x, y)
    fl.reset_stats()
    s, d, p = f(x, y)
    assert fl.stats()["kernels_launched"] == 1
    _close(s.get(), xh + yh)
    _close(d.get(), xh - yh)
    _close(p.get(), xh * yh)


def test_results_of_other_kinds(device):
    const = fl.asarray(np.arange(4, dtype=np.float32))

    @fl.fuse
    def f(x, a):
        return [x, const, a * 2, x + const, 7]

    xh = _host(4)
    x = fl.asarray(xh)
    for a in (1.5, 2.5):
        same, c, a2, s, seven = f(x, a)
        assert same is x and c is const and a2 == a * 2 and seven == 7
        _close(s.get(), xh + np.arange(4))


def test_results_must_be_arrays_scalars_or_sequences(device):
    @fl.fuse
    def f(x):
        return {"double": x * 2}

    with pytest.raises(TracingError, match="returned a dict"):
        f(fl.asarray(_host(3)))


def test_contraction_inside(device):
    @fl.fuse
    def f(a, b, s):
        return fl.tanh(a * s) @ b + 1

    for s in (0.5, 1.5):
        ah, bh = _host((12, 20)), _host((20, 7))
        got = f(fl.asarray(ah), fl.asarray(bh), s)
        np.testing.assert_allclose(got.get(), np.tanh(ah * np.float32(s)) @ bh + 1,
                                   rtol=1e-4)
    assert f.traces == 1


def test_keyword_arguments(device):
    @fl.fuse
    def f(x, y, scale=1.0):
        return (x - y) * scale

    xh, yh = _host(8), _host(8)
    x, y = fl.asarray(xh), fl.asarray(yh)
    _close(f(x, y).get(), xh - yh)
    _close(f(x, y=y, scale=3.0).get(), (xh - yh) * 3)
    _close(f(y=y, x=x, scale=0.5).get(), (xh - yh) * 0.5)
    _close(f(x, y=y, scale=4.0).get(), (xh - yh) * 4)
    assert f.traces == 3


def test_static_arguments(device):
    @fl.fuse(static_argnums=1, static_argnames="mode")
    def f(x, power, mode="add"):
        r = x
        for _ in range(power - 1):  # Python control flow on static values
            r = r * x
        return r + 1 if mode == "add" else r - 1

    xh = _host(16)
    x = fl.asarray(xh)
    _close(f(x, 3).get(), xh ** 3 + 1)
    _close(f(x, 2, mode="sub").get(), xh ** 2 - 1)
    _close(f(x, power=2, mode="sub").get(), xh ** 2 - 1)  # static by name too
    _close(f(x, 3).get(), xh ** 3 + 1)
    assert f.traces == 3
    with pytest.raises(TracingError, match="hashable"):
        f(x, [1, 2])


def test_cache_hit_does_not_trace(device):
    calls = []

    @fl.fuse
    def f(x):
        calls.append(1)
        return x * 3

    x = fl.asarray(_host(32))
    for _ in range(5):
        f(x)
    f(fl.asarray(_host(32)))  # other buffers, same signature
    assert len(calls) == 1 and f.traces == 1


def test_arguments_lazy_and_views(device):
    @fl.fuse
    def f(x, y):
        return x * 2 - y

    xh, yh = _host(20), _host(10)
    x, y = fl.asarray(xh), fl.asarray(yh)
    _close(f(x[::2], y).get(), xh[::2] * 2 - yh)
    _close(f(x[1::2], y + 1).get(), xh[1::2] * 2 - (yh + 1))
    assert f.traces == 2  # (another offset: another signature)


def test_data_dependent_control_flow_is_a_clear_error(device):
    @fl.fuse
    def clipped(x, limit):
        if x.max() > limit:
            return fl.minimum(x, limit)
        return x

    x = fl.asarray(_host(10))
    with pytest.raises(TracingError) as info:
        clipped(x, 1.0)
    msg = str(info.value)
    assert "clipped()" in msg and "bool()" in msg and "'x'" in msg
    assert "static_argnums" in msg and "fl.where" in msg
    assert "test_fuse.py" in msg  # the line of the function that needed the value

    @fl.fuse
    def by_scalar(x, a):
        return x * 2 if a > 0 else x

    with pytest.raises(TracingError, match="traced scalar 'a'"):
        by_scalar(x, 1.0)

    @fl.fuse
    def reads(x):
        return x * float(x.sum())

    with pytest.raises(TracingError, match=r"float\(\)"):
        reads(x)

    @fl.fuse
    def gets(x):
        return x.get()

    with pytest.raises(TracingError, match=r"\.get\(\)"):
        gets(x)

    @fl.fuse
    def prints(x):
        print(x * 2)
        return x

    with pytest.raises(TracingError, match=r"print\(\)"):
        prints(x)

    @fl.fuse
    def masks(x):
        return x[x > 1]

    with pytest.raises(TracingError, match="argument 'x'"):
        masks(x)


def test_writes_into_arguments_update_them(device):
    # (more in test_fuse_writes.py)
    @fl.fuse
    def bump(x):
        x += 1
        return x

    xh = _host(6)
    x = fl.asarray(xh)
    for k in range(1, 3):
        assert bump(x) is x
        _close(x.get(), xh + k)
    assert bump.traces == 1 and bump.eager_signatures == 0

    @fl.fuse
    def local(x):
        y = x * 2
        y += 1  # (an intermediate of the function: allowed)
        return y

    for _ in range(2):
        xh = _host(6)
        _close(local(fl.asarray(xh)).get(), xh * 2 + 1)
    assert local.traces == 1


def test_tuple_and_list_arguments(device, fresh_stats):
    @fl.fuse
    def step(state, coeffs):
        x, v = state
        k, damping = coeffs
        return x + v * 0.1, v - (k * x + damping * v) * 0.1

    xh, vh = _host(64), _host(64)
    state = (fl.asarray(xh), fl.asarray(vh))
    for k in (1.0, 2.0):
        x, v = step(state, [k, 0.5])
        _close(x.get(), xh + vh * np.float32(0.1))
        _close(v.get(), vh - (k * xh + np.float32(0.5) * vh) * np.float32(0.1))
    assert step.traces == 1
    fl.reset_stats()
    step(state, [3.0, 0.5])
    assert fl.stats()["kernels_launched"] == 1
    step(list(state), [3.0, 0.5])  # a list is another signature than a tuple
    assert step.traces == 2

    @fl.fuse
    def pick(pair):
        return pair[0], pair[1][1] * 2

    a, b = fl.asarray(xh), fl.asarray(vh)
    for _ in range(2):
        same, doubled = pick((a, (b, a)))
        assert same is a  # (an argument is returned as itself)
        _close(doubled.get(), xh * 2)
    with pytest.raises(TracingError, match="an item of a tuple or list argument"):
        pick((a, "b"))

    @fl.fuse
    def decide(x, limits):
        return x * 2 if limits[1] > 0 else x

    with pytest.raises(TracingError, match="traced scalar 'limits\\[1\\]'"):
        decide(a, (0.0, 1.0))


def test_unsupported_argument_types(device):
    @fl.fuse
    def f(x, y):
        return x + y

    x = fl.asarray(_host(3))
    for bad, name in ((np.ones(3, np.float32), "ndarray"), ({"a": 1}, "dict"),
                      ("a", "str"), (1j, "complex")):
        with pytest.raises(TracingError, match=f"argument 'y' of f\\(\\) is a {name}"):
            f(x, bad)


def test_functions_it_cannot_replay_run_as_python(device):
    z = fl.full(10, 5.0, dtype=np.float32)

    @fl.fuse
    def shift(x):
        z[1:] = x[:-1]  # writes into an array it closes over (its contents: not replayed)
        return z * 2

    for _ in range(3):
        xh = _host(10)
        got = shift(fl.asarray(xh))
        want = np.full_like(xh, 5.0)
        want[1:] = xh[:-1]
        _close(got.get(), want * 2)
    assert shift.traces == 1 and shift.eager_signatures == 1

    @fl.fuse
    def shift_computed(x):
        z = x * 0 + 5  # (computed by a kernel: the write into it is replayed)
        z[1:] = x[:-1]
        return z * 2

    for _ in range(3):
        xh = _host(10)
        got = shift_computed(fl.asarray(xh))
        want = np.full_like(xh, 5.0)
        want[1:] = xh[:-1]
        _close(got.get(), want * 2)
    assert shift_computed.traces == 1 and shift_computed.eager_signatures == 0


def test_results_of_unrecorded_kernels_are_not_replayed_stale(device):
    # a sort and a scan run kernels the recorder never sees (hand-written, pyopencl's):
    # a replay would read the first call's sorted values, so such a signature runs as
    # Python, whether their result is read by a recorded kernel or returned as it is
    @fl.fuse
    def sorted_plus_scan(x):
        return fl.sort(x) * 2 + fl.cumsum(x)

    @fl.fuse
    def just_sorted(x):
        return fl.sort(x)

    for _ in range(3):
        xh = _host(300)
        np.testing.assert_allclose(sorted_plus_scan(fl.asarray(xh)).get(),
                                   np.sort(xh) * 2 + np.cumsum(xh), rtol=1e-5)
        np.testing.assert_array_equal(just_sorted(fl.asarray(xh)).get(), np.sort(xh))
    assert sorted_plus_scan.traces == 1 and sorted_plus_scan.eager_signatures == 1
    assert just_sorted.traces == 1 and just_sorted.eager_signatures == 1

    @fl.fuse
    def with_constants(x):  # (a fill and an upload made while tracing are constants)
        return x + fl.full(x.shape, 3.0, dtype=x.dtype) * fl.asarray(np.arange(300.0))

    for _ in range(2):
        xh = _host(300)
        _close(with_constants(fl.asarray(xh)).get(), xh + 3.0 * np.arange(300.0))
    assert with_constants.eager_signatures == 0


def test_unrecorded_kernels_of_a_function_without_array_arguments():
    # in a new process no device was used before the trace: the device it opens must
    # be watched as well, or the sort's buffer passes for a constant
    script = textwrap.dedent("""
        import numpy as np
        import fuseloop as fl
        f = fl.fuse(lambda s: fl.sort(fl.sin(fl.arange(200) * s)))
        ok = [bool(np.allclose(f(s).get(), np.sort(np.sin(np.arange(200) * s)), atol=1e-5))
              for s in (1.0, 2.0)]
        print(ok, f.eager_signatures)
    """)
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ),
                         capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[-2] == "[True, True] 1", out.stdout + out.stderr


def test_nested_fused_functions_and_closures(device, fresh_stats):
    w = fl.asarray(_host(50))

    @fl.fuse
    def inner(x, a):
        return x * a + w

    @fl.fuse
    def outer(x, a):
        return inner(x, a) - inner(x, 2 * a)

    xh = _host(50)
    x = fl.asarray(xh)
    for a in (1.0, 3.0):
        _close(outer(x, a).get(), (xh * a + w.get()) - (xh * 2 * a + w.get()))
    fl.reset_stats()
    outer(x, 5.0)
    assert fl.stats()["kernels_launched"] == 1  # the inner calls fused into the outer kernel


def test_rk4_step_is_one_kernel(device, fresh_stats):
    sigma, rho, beta = 10.0, 28.0, 8.0 / 3.0

    def lorenz(x, y, z):
        return sigma * (y - x), x * (rho - z) - y, x * y - beta * z

    @fl.fuse
    def rk4(x, y, z, dt):
        k1 = lorenz(x, y, z)
        k2 = lorenz(*(v + 0.5 * dt * k for v, k in zip((x, y, z), k1)))
        k3 = lorenz(*(v + 0.5 * dt * k for v, k in zip((x, y, z), k2)))
        k4 = lorenz(*(v + dt * k for v, k in zip((x, y, z), k3)))
        return tuple(v + dt / 6 * (a + 2 * b + 2 * c + d)
                     for v, a, b, c, d in zip((x, y, z), k1, k2, k3, k4))

    n = 256
    hx, hy, hz = (np.linspace(-1, 1, n), np.linspace(0.5, 1.5, n), np.full(n, 20.0))
    x, y, z = fl.asarray(hx), fl.asarray(hy), fl.asarray(hz)
    state = (hx, hy, hz)
    dt = 0.001
    x, y, z = rk4(x, y, z, dt)
    fl.reset_stats()
    for _ in range(10):
        x, y, z = rk4(x, y, z, dt)
    assert fl.stats()["kernels_launched"] == 10
    assert rk4.traces == 1

    def np_lorenz(v):
        x, y, z = v
        return np.array([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])

    v = np.array(state)
    for _ in range(11):
        k1 = np_lorenz(v)
        k2 = np_lorenz(v + 0.5 * dt * k1)
        k3 = np_lorenz(v + 0.5 * dt * k2)
        k4 = np_lorenz(v + dt * k3)
        v = v + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    for got, want in zip((x, y, z), v):
        np.testing.assert_allclose(got.get(), want, rtol=1e-12, atol=1e-12)


def test_cleared_caches_still_replay(device):
    @fl.fuse
    def f(x, a):
        return x * a - 1

    xh = _host(40)
    x = fl.asarray(xh)
    f(x, 2.0)
    f(x, 2.0)
    fl.clear_caches()  # (also the memory kernel cache: the kept launch plan is stale)
    _close(f(x, 3.0).get(), xh * 3 - 1)
    _close(f(x, 4.0).get(), xh * 4 - 1)


def test_integer_arguments(device):
    @fl.fuse
    def f(i, k):
        return (i * k) % 7 + (i >> 1)

    ih = np.arange(-20, 20, dtype=np.int32)
    i = fl.asarray(ih)
    for k in (3, 5):
        np.testing.assert_array_equal(f(i, k).get(), (ih * k) % 7 + (ih >> 1))
    assert f.traces == 1


def test_threads_replay_one_signature(device):
    import threading

    @fl.fuse
    def f(x, a):
        return x * a + 1

    xh = _host(300)
    x = fl.asarray(xh)
    f(x, 1.0)
    errors = []

    def work(a):
        try:
            for _ in range(20):
                np.testing.assert_allclose(f(x, a).get(), xh * np.float32(a) + 1, rtol=1e-6)
        except Exception as exc:  # (reported by the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(float(k),)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and f.traces == 1


def test_empty_and_zero_dimensional_arrays(device):
    @fl.fuse
    def f(x, y):
        return x * 2 + y, x.sum()

    for _ in range(2):
        e, s = f(fl.asarray(np.zeros(0, np.float32)), fl.asarray(np.float32(3)))
        assert e.shape == (0,) and e.get().shape == (0,)
        assert float(s.get()) == 0.0
        xh = np.float32(1.5)
        a, b = f(fl.asarray(xh), fl.asarray(np.float32(2)))
        assert a.shape == () and float(a.get()) == 5.0 and float(b.get()) == 1.5
    assert f.traces == 2


def test_methods_with_a_static_self(device):
    class Scaled:
        def __init__(self, k):
            self.k = k

        @fl.fuse(static_argnums=0)
        def apply(self, x):
            return x * self.k

        @fl.fuse
        def unmarked(self, x):
            return x

    xh = _host(5)
    x = fl.asarray(xh)
    a, b = Scaled(2.0), Scaled(3.0)
    _close(a.apply(x).get(), xh * 2)
    _close(b.apply(x).get(), xh * 3)
    _close(a.apply(x).get(), xh * 2)
    assert Scaled.apply.traces == 2
    with pytest.raises(TracingError, match="argument 'self' of unmarked\\(\\) is a Scaled"):
        a.unmarked(x)


def test_a_recipe_in_use_reaches_kept_plans(device, fresh_stats):
    # a fused signature's plan and .eval()'s flat plan are kept between calls and
    # confirmed by the recipes token, not by asking recipe_for: a use() block (and
    # leaving it) must still change the kernel they launch
    xh, yh = _host(64), _host(64)
    x, y = fl.asarray(xh), fl.asarray(yh)
    f = fl.fuse(lambda a, b: a * 2 + b)
    for _ in range(3):  # (traced, planned, then the kept plans)
        _close(f(x, y).get(), xh * 2 + yh)
        _close((x * 3 - y).get(), xh * 3 - yh)
    other = fl.recipes.recipe_for(device, "elementwise").with_params(version="kept-plans")
    fl.reset_stats()
    with fl.recipes.use(other):
        for _ in range(2):
            _close(f(x, y).get(), xh * 2 + yh)
            _close((x * 3 - y).get(), xh * 3 - yh)
    assert fresh_stats()["memory_cache_misses"] == 2  # each kernel again, for `other`
    fl.reset_stats()
    _close(f(x, y).get(), xh * 2 + yh)
    _close((x * 3 - y).get(), xh * 3 - yh)
    s = fresh_stats()
    assert s["memory_cache_misses"] == 0 and s["kernels_launched"] == 2


@pytest.mark.parametrize("as_gpu", [False, True])
def test_cross_entropy_replay_reads_its_flag_once(device, monkeypatch, as_gpu):
    """A replayed call with a device-index gather reads the gather's error flag once,
    after all of its kernels were launched (two on a CPU; one on a GPU, whose combining
    kernel runs the rows' stage in its launch: lower/one_launch); an index out of range
    still raises."""
    import dataclasses

    from fuseloop import flags
    from fuseloop.bench.broad import cross_entropy

    reads: list[int] = []
    check = flags.check

    def counted(buf, dev):
        reads.append(fl.stats()["kernels_launched"])
        check(buf, dev)

    monkeypatch.setattr(flags, "check", counted)
    dev = dataclasses.replace(device, type="gpu", max_work_group_size=256) if as_gpu \
        else device
    with fl.device(dev):
        f = fl.fuse(lambda x, rows, labels: cross_entropy(fl, x, rows, labels))
        h = RNG.uniform(-4, 4, (40, 300)).astype(np.float32)
        labels = RNG.integers(0, 300, 40)
        x, rows = fl.asarray(h), fl.asarray(np.arange(40))
        m = h.astype(np.float64).max(axis=1)
        lse = m + np.log(np.exp(h - m[:, None]).sum(axis=1))
        want = (lse - h[np.arange(40), labels]).mean()
        for _ in range(3):
            fl.reset_stats()
            reads.clear()
            _close(float(f(x, rows, fl.asarray(labels))), want)
            launched = fl.stats()["kernels_launched"]
            assert launched >= 1 and reads == [launched], (reads, launched)
        assert f.traces == 1
        labels[3] = 300
        with pytest.raises(IndexError):
            f(x, rows, fl.asarray(labels))
