"""VexCL's kernel generator example (its README's RK4 stepper), written with ``@fl.fuse``.

VexCL records a generic Runge-Kutta step on symbolic values and builds one kernel from
it; ``fl.fuse`` traces the same generic Python function on fuseloop's lazy arrays once
and replays the fused kernel on each later call.  The stepper below is plain Python and
also runs on numpy arrays (VexCL: "may be reused for host-side computations").  Unlike
VexCL's recorded kernel, ``dt`` stays a kernel argument: a new step size reuses the
kernel.  Each step is checked to be one kernel launch (``fl.stats()``) and the result
is compared with numpy.

Run: python examples/rk4_fuse.py
"""

import numpy as np

import fuseloop as fl


def runge_kutta_4(sys, x, dt):
    """One RK4 step of dx/dt = sys(x); ``x`` is a state or a tuple of states."""
    def axpy(a, k, y):  # y + a * k, over tuples of states too
        return tuple(v + a * kv for v, kv in zip(y, k)) if isinstance(y, tuple) else y + a * k

    def scaled(k):
        return tuple(dt * kv for kv in k) if isinstance(k, tuple) else dt * k

    k1 = scaled(sys(x))
    k2 = scaled(sys(axpy(0.5, k1, x)))
    k3 = scaled(sys(axpy(0.5, k2, x)))
    k4 = scaled(sys(axpy(1.0, k3, x)))
    if isinstance(x, tuple):
        return tuple(v + (a + 2 * b + 2 * c + d) / 6 for v, a, b, c, d in zip(x, k1, k2, k3, k4))
    return x + (k1 + 2 * k2 + 2 * k3 + k4) / 6


def sys_func(x):
    """The README's system: dx/dt = sin(x) (fl.sin on device arrays, np.sin on host)."""
    return fl.sin(x) if isinstance(x, fl.Array) else np.sin(x)


def lorenz(state, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
    x, y, z = state
    return sigma * (y - x), x * (rho - z) - y, x * y - beta * z


@fl.fuse
def rk4_step(x, dt):
    return runge_kutta_4(sys_func, x, dt)


@fl.fuse
def lorenz_step(state, dt):  # (a tuple of arrays is an argument as well)
    return runge_kutta_4(lorenz, state, dt)


def main():
    dev = fl.get_device()
    dtype = np.float64 if dev.has_fp64 else np.float32
    rtol = 1e-10 if dtype == np.float64 else 1e-4
    n = 1024 * 1024
    steps = 100
    print(f"device: {dev.name}, dtype: {np.dtype(dtype).name}, n = {n}")

    # x = 10.0 * vex::element_index() / n;
    x = (10.0 * fl.arange(n, dtype=dtype) / n).eval()
    x_host = 10.0 * np.arange(n, dtype=dtype) / n
    dt = 0.01
    x = rk4_step(x, dt)  # the first call traces (and compiles) the step
    x_host = runge_kutta_4(sys_func, x_host, dt)
    fl.reset_stats()
    for _ in range(steps - 1):
        x = rk4_step(x, dt)
        x_host = runge_kutta_4(sys_func, x_host, dt)
    launched = fl.stats()["kernels_launched"]
    assert launched == steps - 1, launched  # one kernel per step
    assert rk4_step.traces == 1
    np.testing.assert_allclose(x.get(), x_host, rtol=rtol, atol=rtol)
    print(f"ok  dx/dt = sin(x): {steps} RK4 steps, one kernel each")

    # an ensemble of Lorenz systems: three state arrays, three results, one kernel a step
    m = 4096
    rng = np.random.default_rng(3)
    host = tuple(rng.uniform(lo, hi, m).astype(dtype)
                 for lo, hi in ((-10, 10), (-10, 10), (10, 30)))
    state = tuple(fl.asarray(h) for h in host)
    fl.reset_stats()
    for k in range(steps):
        dt = 0.001 if k < steps // 2 else 0.002  # a new dt is a new argument, not a trace
        state = lorenz_step(state, dt)
        host = runge_kutta_4(lorenz, host, dt)
    assert fl.stats()["kernels_launched"] == steps
    assert lorenz_step.traces == 1
    for got, want in zip(state, host):
        np.testing.assert_allclose(got.get(), want, rtol=rtol * 100, atol=rtol * 100)
    print(f"ok  Lorenz ensemble of {m}: {steps} RK4 steps, one kernel each")


if __name__ == "__main__":
    main()
