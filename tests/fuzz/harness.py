"""Running a program with numpy (the reference) and with fuseloop, and comparing the two
within the reference's bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import note, reject

import fuseloop as fl
from fuseloop.expr import program as prog_module
from fuzz.programs import (
    GEMM_ALPHA,
    GEMM_BETA,
    INPLACE,
    Program,
    as_view_key,
    describe,
    resolve_key,
)
from fuzz.reference import (
    DENORM_FLOOR,
    F32,
    F64,
    INF,
    SLACK,
    USER_FUNCTIONS,
    Ref,
    Scalar,
    cast_ref,
    numpy_operand,
    quiet,
    ref_clip,
    ref_matmul,
    ref_reduce,
    ref_ufunc,
    ref_where,
)

# programs, steps and compared elements so far (printed at the end of tests/test_fuzz.py)
COUNTS = {"programs": 0, "steps": 0, "error_steps": 0, "exact": 0, "bounded": 0, "free": 0}

class RefLib:
    """numpy, through :class:`Ref`."""

    def input(self, a):
        return Ref(a.copy())

    def operand(self, o, env):
        return env[o] if isinstance(o, int) else o

    def ufunc(self, name, *ops):
        return ref_ufunc(name, *ops)

    def where(self, c, x, y):
        return ref_where(c, x, y)

    def clip(self, x, lo, hi):
        return ref_clip(x, lo, hi)

    def astype(self, x, dt):
        return cast_ref(x, np.dtype(dt))

    def reduce(self, op, x, axis, keepdims, ddof):
        return ref_reduce(op, x, axis, keepdims, ddof)

    def index(self, x, key):
        return x.view(lambda a: a[as_view_key(key)])

    def shape(self, fname, x, args):
        return x.view(lambda a: getattr(np, fname)(a, *args))

    def take(self, x, idx, axis):
        return x.view(lambda a: np.take(a, np.asarray(idx, np.int64), axis=axis))

    def key(self, key, env):
        return resolve_key(key, env, numpy=True)

    def adv(self, x, key):
        # a copy (numpy reads 0-d index arrays as integers: a view where one is left)
        return Ref(np.array(x.val[key]), np.array(x.err[key], F64))

    def nonzero(self, fname, x, k):
        val = getattr(np, fname)(x.val)
        return Ref(val[k] if fname == "nonzero" else val)

    def concat(self, fname, xs, axis):
        val = getattr(np, fname)([x.val for x in xs], axis=axis)
        parts = [cast_ref(x, val.dtype) for x in xs]
        err = getattr(np, fname)([p.err for p in parts], axis=axis)
        return Ref(val, err)

    def call(self, fname, *ops):
        return USER_FUNCTIONS[fname][1](*ops)

    def eval(self, x):
        return None

    def setitem(self, t, key, value):
        key = as_view_key(key)
        v = value if isinstance(value, Ref) else Ref(np.asarray(value.for_numpy()))
        err = cast_ref(v, t.dtype).err
        with quiet():
            try:
                t.val[key] = numpy_operand(value)
            except (OverflowError, ValueError):
                if not (isinstance(value, Scalar) and value.kind in ("np", "const_dt")):
                    raise
                # documented deviation: a typed scalar that an integer array cannot hold
                # (out of range, NaN) is converted like an array (C cast); numpy may raise
                t.val[key] = np.asarray(value.for_numpy()).astype(t.dtype)
        t.err[key] = err

    def inplace(self, t, key, op, value):
        key = None if key is None else as_view_key(key)
        view = t if key is None else t.view(lambda a: a[key])
        err = cast_ref(ref_ufunc(op, view, value), t.dtype).err
        with quiet():
            if key is None:
                INPLACE[op](t.val, numpy_operand(value))
            else:
                tmp = t.val[key]
                tmp = INPLACE[op](tmp, numpy_operand(value))
                t.val[key] = tmp
        t.err[key if key is not None else ...] = err

    def matmul(self, x, y):
        return ref_matmul(x, y)

    def read(self, t, key):
        return t if key is None else t.view(lambda a: a[as_view_key(key)])


class FlLib:
    """fuseloop."""

    def input(self, a):
        return fl.asarray(a)

    def operand(self, o, env):
        return env[o] if isinstance(o, int) else o.for_fl()

    def ufunc(self, name, *ops):
        return getattr(fl, name)(*ops)

    def where(self, c, x, y):
        return fl.where(c, x, y)

    def clip(self, x, lo, hi):
        return fl.clip(x, lo, hi)

    def astype(self, x, dt):
        return x.astype(dt)

    def reduce(self, op, x, axis, keepdims, ddof):
        kw = {"ddof": ddof} if op in ("var", "std") else {}
        return getattr(fl, op)(x, axis=axis, keepdims=keepdims, **kw)

    def index(self, x, key):
        return x[key]

    def shape(self, fname, x, args):
        return getattr(fl, fname)(x, *args)

    def take(self, x, idx, axis):
        return fl.take(x, np.asarray(idx, np.int64), axis=axis)

    def key(self, key, env):
        return resolve_key(key, env, numpy=False)

    def adv(self, x, key):
        return x[key]

    def nonzero(self, fname, x, k):
        val = getattr(fl, fname)(x)
        return val[k] if fname == "nonzero" else val

    def concat(self, fname, xs, axis):
        return getattr(fl, fname)(xs, axis=axis)

    def call(self, fname, *ops):
        return USER_FUNCTIONS[fname][0](*ops)

    def eval(self, x):
        x.eval()

    def setitem(self, t, key, value):
        t[key] = value

    def inplace(self, t, key, op, value):
        if key is None:
            out = INPLACE[op](t, value)
            assert out is t
        else:
            tmp = t[key]
            tmp = INPLACE[op](tmp, value)
            t[key] = tmp

    def matmul(self, x, y):
        return x @ y

    def read(self, t, key):
        return t if key is None else t[key]


def contract(lib: Any, t: Any, key: tuple | None, x: Any, y: Any, form: str) -> None:
    """Write ``x @ y`` into ``t[key]`` (all of ``t`` for None) in place, the value
    reading the target: one contraction kernel whose epilogue reads what it writes."""
    prod = lib.matmul(x, y)
    if form in ("add", "subtract"):
        lib.inplace(t, key, form, prod)
        return
    old = lib.read(t, key)
    alpha, beta = (lib.operand(c, []) for c in (GEMM_ALPHA, GEMM_BETA))
    value = lib.ufunc("add", lib.ufunc("multiply", alpha, prod),
                      lib.ufunc("multiply", beta, old)) if form == "gemm" else \
        lib.ufunc(form, prod, old)
    lib.setitem(t, key if key is not None else (Ellipsis,), value)


def apply_step(lib: Any, step: tuple, env: list, steps: list) -> Any:
    """Run one step; returns the new value, or None for steps that only act."""
    kind = step[0]

    def opd(o):
        return lib.operand(o, env) if o is not None else None

    if kind == "ufunc":
        return lib.ufunc(step[1], *(opd(o) for o in step[2]))
    if kind == "where":
        return lib.where(*(opd(o) for o in step[1:]))
    if kind == "clip":
        return lib.clip(*(opd(o) for o in step[1:]))
    if kind == "astype":
        return lib.astype(env[step[1]], step[2])
    if kind == "reduce":
        _, op, x, axis, keepdims, ddof = step
        return lib.reduce(op, env[x], axis, keepdims, ddof)
    if kind == "index":
        return lib.index(env[step[1]], step[2])
    if kind == "shape":
        return lib.shape(step[1], env[step[2]], step[3])
    if kind == "take":
        return lib.take(env[step[1]], step[2], step[3])
    if kind == "concat":
        return lib.concat(step[1], [env[x] for x in step[2]], step[3])
    if kind == "adv":
        return lib.adv(env[step[1]], lib.key(step[2], env))
    if kind == "nonzero":
        return lib.nonzero(step[1], env[step[2]], step[3])
    if kind == "call":
        return lib.call(step[1], *(opd(o) for o in step[2]))
    if kind == "rebuild":
        original = next(s for s, out in steps if out == step[1])
        return apply_step(lib, original, env, steps)
    if kind == "eval":
        return lib.eval(env[step[1]])
    if kind == "setitem":
        return lib.setitem(env[step[1]], lib.key(step[2], env), opd(step[3]))
    if kind == "inplace":
        key = step[2] if step[2] is None else lib.key(step[2], env)
        return lib.inplace(env[step[1]], key, step[3], opd(step[4]))
    if kind == "contract":
        _, t, key, x, y, form = step
        return contract(lib, env[t], key, env[x], env[y], form)
    raise AssertionError(kind)


ERROR_FAMILIES = {"OverflowError": OverflowError, "TypeError": TypeError,
                  "ValueError": ValueError}


def run_program(lib: Any, prog: Program, check: list[Ref] | None = None) -> list:
    """Interpret ``prog``; with ``check`` (the reference env), compare dtypes and shapes."""
    env = [lib.input(a) for a in prog.inputs]
    done: list[tuple] = []
    for step, out in prog.steps:
        if step[0] == "error":
            family = ERROR_FAMILIES[step[2]]
            try:
                apply_step(lib, step[1], env, done)
            except family:
                pass
            else:
                raise AssertionError(f"numpy raises {step[2]} for `{describe(step[1])}`, "
                                     "fuseloop does not")
            done.append((step, out))
            continue
        value = apply_step(lib, step, env, done)
        done.append((step, out))
        if out is not None:
            assert out == len(env)
            env.append(value)
            if check is not None:
                want = check[out]
                assert (value.dtype, value.shape) == (want.dtype, want.shape), (
                    f"v{out} = {describe(step)}: fuseloop gives {value.dtype}{list(value.shape)},"
                    f" numpy {want.dtype}{list(want.shape)}")
    return env


def compare(label: str, got: np.ndarray, want: Ref) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (label, got.dtype, want.dtype)
    w, err = want.val, want.err
    care = err < INF
    if w.dtype.kind != "f":
        bad = care & (got != w)
    else:
        g, x = got.astype(F64), w.astype(F64)
        finite = np.isfinite(x)
        with quiet():
            same_nf = (np.isnan(g) & np.isnan(x)) | (g == x)
            close = np.isfinite(g) & (np.abs(g - x) <= err * SLACK)
            zero_sign = (err == 0) & (x == 0) & (np.signbit(g) != np.signbit(x))
        bad = care & np.where(finite, ~close | zero_sign, ~same_nf)
    if bad.any():
        where = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:6]]
        rows = "\n".join(f"  at {ix}: fuseloop {got[ix]!r}, numpy {w[ix]!r} (bound {err[ix]:.3g})"
                         for ix in where)
        raise AssertionError(f"{label}: {int(bad.sum())} of {bad.size} elements differ\n{rows}")


def _set_denormal_floor(device: Any) -> None:
    import pyopencl as cl

    for dt, cfg in ((F32, device.cl_device.single_fp_config),
                    (F64, device.cl_device.double_fp_config if device.has_fp64 else 0)):
        DENORM_FLOOR[dt] = 0.0 if cfg & cl.device_fp_config.DENORM else float(np.finfo(dt).tiny)


def check_program(prog: Program, device: Any) -> None:
    _set_denormal_floor(device)
    note(prog.listing())
    refs = run_program(RefLib(), prog)
    if not device.has_fp64 and any(r.dtype == F64 for r in refs):
        reject()
    _evaluate_and_compare(prog, refs)
    for k in prog.outputs:
        err = refs[k].err
        COUNTS["exact"] += int((err == 0).sum())
        COUNTS["free"] += int((err == INF).sum())
        COUNTS["bounded"] += int(((err > 0) & (err < INF)).sum())
    # Again with new arrays: the cached structures and run plans of the first pass
    # are replayed; then once more re-deriving each and comparing it with the cache.
    _evaluate_and_compare(prog, refs)
    prog_module.CHECK_STRUCTURE_CACHE = True
    try:
        _evaluate_and_compare(prog, refs)
    finally:
        prog_module.CHECK_STRUCTURE_CACHE = False
    COUNTS["programs"] += 1
    COUNTS["steps"] += len(prog.steps)
    COUNTS["error_steps"] += sum(s[0] == "error" for s, _ in prog.steps)


def _evaluate_and_compare(prog: Program, refs: list[Ref]) -> None:
    env = run_program(FlLib(), prog, check=refs)
    outs = [env[k] for k in prog.outputs]
    if prog.together:
        fl.compute(*outs)
    for k, o in zip(prog.outputs, outs):
        compare(f"v{k}", o.get(), refs[k])

