"""hypothesis strategies: random inputs and programs, each step drawn from the values
computed so far (:class:`Gen`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from fuzz.harness import ERROR_FAMILIES, RefLib, apply_step
from fuzz.profiles import CONFIG, CONTRACT_SIZES, Config, ContractSizes
from fuzz.programs import INDEX_DTYPES, INPLACE, IntIndex, MaskIndex, Program, resolve_key
from fuzz.reference import (
    COMPARISONS,
    DTYPES,
    F32,
    USER_FUNCTIONS,
    Ref,
    Scalar,
    quiet,
    ref_ufunc,
    truth,
)

UNARY_FUZZ = ("negative", "positive", "absolute", "sign", "square", "invert", "logical_not",
              "isnan", "isinf", "isfinite", "sqrt", "exp", "exp2", "expm1", "log", "log2",
              "log10", "log1p", "sin", "cos", "tanh", "arctan", "arcsinh", "floor", "ceil",
              "trunc", "rint")
BINARY_FUZZ = ("add", "subtract", "multiply", "true_divide", "floor_divide", "remainder",
               "fmod", "power", "minimum", "maximum", "fmin", "fmax", "hypot", "copysign",
               *COMPARISONS, "logical_and", "logical_or", "logical_xor", "bitwise_and",
               "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
REDUCTIONS = ("sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "argmax",
              "argmin")
STEP_KINDS = (["unary"] * 3 + ["binary"] * 6 + ["where", "clip", "astype"] + ["reduce"] * 3
              + ["index"] * 2 + ["shape"] * 3 + ["take", "concat", "call", "call", "rebuild",
                                                 "eval", "setitem", "inplace"]
              + ["adv"] * 2 + ["nonzero", "contract"])
# products written in place, the value reading the target (t += x @ y, t[...] =
# 1.5 * (x @ y) + -0.5 * t): recipes tile the output, and an element written by two
# tiles would take the epilogue twice.  bool operands are left out: fuseloop's
# bool @ bool is int64 where numpy's is bool.
CONTRACT_FORMS = ("add", "subtract", "gemm", "maximum")
CONTRACT_DTYPES = tuple(t for t in DTYPES if t != "bool")
MAX_PRODUCTS = 2_000_000  # elements of the reference's (..., m, k, n) products


MAX_ELEMENTS = 3 * 70001  # no broadcast beyond (gathers and masks make new lengths)
FLOAT_SPECIALS = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1.5, math.nan, math.inf, -math.inf)
BIG_INTS = (100, 127, 200, 255, 300, 40000, 2**31, 2**40, -(2**63), 2**64 - 1)


def _valid(name: str, kinds: tuple) -> bool:
    try:
        getattr(np, name).resolve_dtypes((*kinds, None))
    except TypeError:
        return False
    return True


def _element_strategy(dt: np.dtype) -> st.SearchStrategy:
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = int(info.min), int(info.max)
        edges = sorted({lo, hi, lo + 1, hi - 1, 0, 1} | ({-1} if dt.kind == "i" else set()))
        return st.one_of(st.integers(max(lo, -4), min(hi, 4)), st.sampled_from(edges),
                         st.integers(lo, hi))
    width = 32 if dt == F32 else 64
    return st.one_of(st.sampled_from(FLOAT_SPECIALS),
                     st.floats(-8, 8, width=width, allow_subnormal=False),
                     st.floats(width=width, allow_subnormal=False))


@st.composite
def _array(draw, dt: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    n = math.prod(shape)
    if n > 256:  # big arrays: random values from a drawn seed
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if dt.kind == "b":
            return rng.integers(0, 2, shape).astype(bool)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            return rng.integers(max(int(info.min), -100), min(int(info.max), 100), shape,
                                endpoint=True).astype(dt)
        return (rng.standard_normal(shape) * 4).astype(dt)
    elements = draw(st.lists(_element_strategy(dt), min_size=n, max_size=n))
    with quiet():
        return np.array(elements, dtype=object).astype(dt).reshape(shape)


@st.composite
def scalars(draw) -> Scalar:
    kind = draw(st.sampled_from(["py", "py", "np", "const", "const_dt"]))
    if kind in ("py", "const"):
        value = draw(st.one_of(st.integers(-3, 3), st.sampled_from(FLOAT_SPECIALS),
                               st.floats(-8, 8, width=32), st.booleans(),
                               st.sampled_from(BIG_INTS)))
        return Scalar(kind, value)
    dt = np.dtype(draw(st.sampled_from(DTYPES)))
    value = draw(_element_strategy(dt))
    return Scalar(kind, bool(value) if dt.kind == "b" else value, dt.name)


class Gen:
    """Draws the parameters of one step from the current environment of reference values."""

    def __init__(self, draw, env: list[Ref], writable: set[int], values: list[int]) -> None:
        self.draw, self.env, self.writable, self.values = draw, env, writable, values
        self.kind_of: dict[int, str] = {}
        self.index_writes = False  # writes only through index arrays and masks

    def pick(self, pred=lambda r: True) -> int | None:
        cands = [i for i, r in enumerate(self.env) if pred(r)]
        if not cands:
            return None
        if self.draw(st.booleans()):
            return cands[-1]  # chains: the most recent value
        return self.draw(st.sampled_from(cands))

    def compatible(self, shape) -> Any:
        def ok(r):
            try:
                out = np.broadcast_shapes(shape, r.shape)
            except ValueError:
                return False
            # (a selection's length against a big array's would make an outer product)
            return math.prod(out) <= MAX_ELEMENTS
        return ok

    def axis(self, ndim: int, allow_none=True, allow_tuple=True) -> Any:
        opts = ["none"] * allow_none + ["int"] * (ndim > 0) + ["tuple"] * allow_tuple
        how = self.draw(st.sampled_from(opts))
        if how == "none":
            return None
        if how == "int":
            return self.draw(st.integers(-ndim, ndim - 1))
        axes = self.draw(st.lists(st.integers(0, max(ndim - 1, 0)), unique=True,
                                  max_size=ndim)) if ndim else []
        return tuple(a - ndim if self.draw(st.booleans()) else a for a in axes)

    def basic_key(self, shape: tuple[int, ...]) -> tuple:
        d = self.draw
        nd = len(shape)

        def items(dims):
            out: list[Any] = []
            for n in dims:
                if n > 0 and d(st.integers(0, 3)) == 0:
                    out.append(d(st.integers(-n, n - 1)))
                else:
                    bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
                    out.append(slice(d(bound), d(bound),
                                     d(st.sampled_from([None, 1, 2, 3, -1, -2, -3]))))
            return out

        lead = d(st.integers(0, nd))
        key = items(shape[:lead])
        if d(st.booleans()):  # an Ellipsis, then items for some trailing axes
            trail = d(st.integers(0, nd - lead))
            key += [Ellipsis, *items(shape[nd - trail:])]
        for _ in range(d(st.integers(0, 1))):
            key.insert(d(st.integers(0, len(key))), None)
        return tuple(key)

    # {{{ one drawer per step kind

    def unary(self):
        x = self.pick()
        names = [n for n in UNARY_FUZZ if _valid(n, (self.env[x].dtype,))]
        return ("ufunc", self.draw(st.sampled_from(names)), (x,))

    def binary(self):
        d = self.draw
        a = self.pick()
        b: Any = None
        if d(st.integers(0, 2)) > 0:
            b = self.pick(self.compatible(self.env[a].shape))
        if b is None:
            b = d(scalars())
        ops = (b, a) if d(st.booleans()) else (a, b)
        kinds = tuple(self.env[o].dtype if isinstance(o, int) else o.resolve_kind()
                      for o in ops)
        names = [n for n in BINARY_FUZZ if _valid(n, kinds)]
        if not names:
            return None
        return ("ufunc", d(st.sampled_from(names)), ops)

    def operand_or_scalar(self, shape):
        i = self.pick(self.compatible(shape)) if self.draw(st.booleans()) else None
        return i if i is not None else self.draw(scalars())

    def where(self):
        c = self.pick()
        shape = self.env[c].shape
        return ("where", c, self.operand_or_scalar(shape), self.operand_or_scalar(shape))

    def clip(self):
        x = self.pick()
        shape = self.env[x].shape
        lo, hi = self.operand_or_scalar(shape), self.operand_or_scalar(shape)
        which = self.draw(st.sampled_from(["both", "lo", "hi"]))
        return ("clip", x, None if which == "hi" else lo, None if which == "lo" else hi)

    def astype(self):
        return ("astype", self.pick(), self.draw(st.sampled_from(DTYPES)))

    def reduce(self):
        d = self.draw
        x = self.pick()
        op = d(st.sampled_from(REDUCTIONS))
        nd = self.env[x].val.ndim
        axis = self.axis(nd, allow_tuple=op not in ("argmax", "argmin"))
        ddof = d(st.integers(0, 2)) if op in ("var", "std") else 0
        return ("reduce", op, x, axis, d(st.booleans()), ddof)

    def index(self):
        x = self.pick()
        return ("index", x, self.basic_key(self.env[x].shape))

    def shape(self):
        d = self.draw
        x = self.pick()
        shape = self.env[x].shape
        nd = len(shape)
        fname = d(st.sampled_from(["reshape", "ravel", "transpose", "swapaxes", "moveaxis",
                                   "flip", "roll", "expand_dims", "squeeze", "broadcast_to",
                                   "tile", "repeat", "diagonal", "triu", "tril"]))
        if fname == "reshape":
            size = math.prod(shape)
            dims: list[int] = []
            rest = size
            for _ in range(d(st.integers(0, 3))):
                divs = [k for k in range(1, min(rest, 8) + 1) if rest % k == 0] or [1]
                k = d(st.sampled_from(divs))
                dims.append(k)
                rest //= max(k, 1)
            dims.append(rest)
            if size and d(st.booleans()):
                dims[d(st.integers(0, len(dims) - 1))] = -1
            order = d(st.permutations(dims))
            return ("shape", fname, x, (tuple(order),))
        if fname == "ravel":
            return ("shape", fname, x, ())
        if fname == "transpose":
            return ("shape", fname, x, (tuple(d(st.permutations(range(nd)))),))
        if fname in ("swapaxes", "moveaxis"):
            if nd == 0:
                return None
            ax = st.integers(-nd, nd - 1)
            return ("shape", fname, x, (d(ax), d(ax)))
        if fname == "flip":
            return ("shape", fname, x, (self.axis(nd),))
        if fname == "roll":
            axis = self.axis(nd, allow_tuple=False)
            return ("shape", fname, x, (d(st.integers(-7, 7)), axis))
        if fname == "expand_dims":
            return ("shape", fname, x, (d(st.integers(-nd - 1, nd)),))
        if fname == "squeeze":
            units = [k for k, n in enumerate(shape) if n == 1]
            axis = d(st.sampled_from([None, *units])) if units else None
            return ("shape", fname, x, (axis,))
        if fname == "broadcast_to":
            new = tuple(d(st.integers(1, 3)) if n == 1 else n for n in shape)
            lead = tuple(d(st.lists(st.integers(1, 3), max_size=1)))
            return ("shape", fname, x, (lead + new,))
        if fname == "tile":
            return ("shape", fname, x, (tuple(d(st.lists(st.integers(1, 2), min_size=1,
                                                         max_size=2))),))
        if fname == "repeat":
            return ("shape", fname, x, (d(st.integers(0, 3)), self.axis(nd, allow_tuple=False)))
        if nd < 2:
            return None
        if fname == "diagonal":
            a1 = d(st.integers(0, nd - 1))
            a2 = d(st.sampled_from([k for k in range(nd) if k != a1]))
            return ("shape", fname, x, (d(st.integers(-2, 2)), a1, a2))
        return ("shape", fname, x, (d(st.integers(-2, 2)),))

    def take(self):
        d = self.draw
        x = self.pick()
        shape = self.env[x].shape
        axis = self.axis(len(shape), allow_tuple=False)
        n = math.prod(shape) if axis is None else shape[axis]
        if n == 0:
            return None
        idx_shape = d(st.sampled_from([(1,), (3,), (2, 2), ()]))
        idx = d(st.lists(st.integers(-n, n - 1), min_size=math.prod(idx_shape),
                         max_size=math.prod(idx_shape)))
        return ("take", x, np.array(idx, np.int64).reshape(idx_shape).tolist(), axis)

    def concat(self):
        d = self.draw
        x = self.pick()
        shape = self.env[x].shape
        fname = d(st.sampled_from(["concatenate", "stack"]))
        nd = len(shape)
        if fname == "concatenate":
            if nd == 0:
                return None
            axis = d(st.one_of(st.none(), st.integers(-nd, nd - 1)))
            ax = None if axis is None else axis % nd

            def fits(r):
                return ax is None or (r.val.ndim == nd and all(
                    p == q for k, (p, q) in enumerate(zip(r.shape, shape)) if k != ax))
        else:
            axis = d(st.integers(-nd - 1, nd))

            def fits(r):
                return r.shape == shape
        # (one piece alone is a copy; several, a lazy concatenation read in place)
        others = [self.pick(fits) for _ in range(d(st.integers(0, 3)))]
        return ("concat", fname, (x, *others), axis)

    def call(self):
        d = self.draw
        fname = d(st.sampled_from(sorted(USER_FUNCTIONS)))
        x = self.pick()
        if fname == "traced":
            return ("call", fname, (x, self.operand_or_scalar(self.env[x].shape)))
        y = self.pick(self.compatible(self.env[x].shape))
        return ("call", fname, (x, y))

    def rebuild(self):
        if not self.values:
            return None
        return ("rebuild", self.draw(st.sampled_from(self.values)))

    def eval(self):
        return ("eval", self.pick())

    def setitem(self):
        d = self.draw
        if not self.writable:
            return None
        t = d(st.sampled_from(sorted(self.writable)))
        shape = self.env[t].shape
        if shape and (self.index_writes or d(st.booleans())):  # index arrays, masks
            found = self.adv_target(t)
            if found is None:
                return None
            key, sub, distinct = found
            # a position written twice gets one of its values (numpy: the last): one value
            value = self.operand_or_scalar(sub) if distinct else d(scalars())
            return ("setitem", t, key, value)
        if shape and d(st.booleans()):  # a scatter: distinct positions along one axis
            ax = d(st.integers(0, len(shape) - 1))
            n = shape[ax]
            if n == 0:
                return None
            pos = d(st.lists(st.integers(0, n - 1), unique=True, min_size=1, max_size=3))
            idx = np.array([p - n if d(st.booleans()) else p for p in pos], np.int64)
            key = (slice(None),) * ax + (idx,)
            sub = shape[:ax] + idx.shape + shape[ax + 1:]
        else:
            key = self.basic_key(shape)
            with quiet():
                sub = self.env[t].val[key].shape
        return ("setitem", t, key, self.operand_or_scalar(sub))

    def inplace(self):
        d = self.draw
        if not self.writable:
            return None
        t = d(st.sampled_from(sorted(self.writable)))
        shape = self.env[t].shape
        op = d(st.sampled_from(sorted(INPLACE)))
        if shape and (self.index_writes or d(st.booleans())):  # x[i, j] += v, x[mask] *= v
            found = self.adv_target(t)
            if found is None:
                return None
            key, sub, distinct = found
            value = self.operand_or_scalar(sub) if distinct else d(scalars())
            return ("inplace", t, key, op, value)
        key = self.basic_key(shape) if d(st.booleans()) else None
        with quiet():
            sub = self.env[t].val[key].shape if key is not None else shape
        return ("inplace", t, key, op, self.operand_or_scalar(sub))

    def contract(self):
        """``t[key] += x @ y`` and the like, with operands of fitting shapes from the env."""
        d = self.draw
        if not self.writable:
            return None
        t = d(st.sampled_from(sorted(self.writable)))
        shape = self.env[t].shape
        if len(shape) < 2:
            return None
        key = self.basic_key(shape) if d(st.booleans()) else None
        with quiet():
            sub = self.env[t].val[key].shape if key is not None else shape
        if len(sub) < 2:
            return None
        xs = [i for i, r in enumerate(self.env) if r.val.ndim >= 2 and r.shape[-2] == sub[-2]
              and r.dtype.name in CONTRACT_DTYPES]
        if not xs:
            return None
        x = d(st.sampled_from(xs))
        k = self.env[x].shape[-1]
        ys = [i for i, r in enumerate(self.env) if r.val.ndim >= 2
              and r.shape[-2:] == (k, sub[-1]) and r.dtype.name in CONTRACT_DTYPES]
        if not ys:
            return None
        y = d(st.sampled_from(ys))
        try:
            batch = np.broadcast_shapes(self.env[x].shape[:-2], self.env[y].shape[:-2])
            np.broadcast_shapes(batch + sub[-2:], sub)
        except ValueError:
            return None
        if math.prod(batch) * sub[-2] * k * sub[-1] > MAX_PRODUCTS:
            return None
        return ("contract", t, key, x, y, d(st.sampled_from(CONTRACT_FORMS)))

    def adv(self):
        x = self.pick(lambda r: r.val.ndim > 0)
        if x is None:
            return None
        key = self.adv_key(self.env[x].shape)
        return None if key is None else ("adv", x, key)

    def nonzero(self):
        d = self.draw

        def certain(r):  # whether each element is certainly zero or certainly not
            t, f = truth(r)
            return bool((t | f).all())

        x = self.pick(certain)
        if x is None:
            return None
        fname = d(st.sampled_from(["nonzero", "flatnonzero", "argwhere"]))
        nd = self.env[x].val.ndim
        if fname == "nonzero":
            return ("nonzero", fname, x, d(st.integers(0, nd - 1))) if nd else None
        return ("nonzero", fname, x, None)

    # }}}

    # {{{ advanced keys: integer index arrays and boolean masks

    def exact(self, i: int) -> bool:
        return not self.env[i].err.any()

    def slice_or_int(self, n: int, ints: bool = True) -> Any:
        d = self.draw
        if ints and n > 0 and d(st.integers(0, 3)) == 0:
            return d(st.integers(-n, n - 1))
        if d(st.booleans()):
            return slice(None)
        bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
        return slice(d(bound), d(bound), d(st.sampled_from([None, 1, 2, -1, -2])))

    def host_index(self, vals: np.ndarray) -> IntIndex:
        d = self.draw
        form = d(st.sampled_from(["np", "np", "list", "fl", "lazy"]))
        if form == "list" and (vals.ndim == 0 or vals.size == 0):
            form = "np"  # (numpy reads [] as float and a bare int as an integer)
        dts = [t for t in INDEX_DTYPES if vals.size == 0 or (
            np.iinfo(t).min <= vals.min() and vals.max() <= np.iinfo(t).max)]
        dt = d(st.sampled_from(dts)) if form in ("np", "fl") else "int64"
        return IntIndex(form, vals.astype(dt))

    def int_array(self, n: int, shape: tuple[int, ...]) -> IntIndex | None:
        size = math.prod(shape)
        if size and n == 0:
            return None
        if not size:
            return self.host_index(np.zeros(shape, np.int64))
        vals = self.values_of(st.integers(-n, n - 1), size,
                              lambda rng: rng.integers(-n, n, size))
        return self.host_index(np.array(vals, np.int64).reshape(shape))

    def values_of(self, elements: st.SearchStrategy, size: int, big: Any) -> Any:
        if size > 256:  # (big arrays) random values from a drawn seed
            return big(np.random.default_rng(self.draw(st.integers(0, 2**32 - 1))))
        return self.draw(st.lists(elements, min_size=size, max_size=size))

    def env_index(self, src: int, n: int) -> IntIndex | None:
        """``v{src} % n`` (minus ``n``): a lazy index from a generated integer value."""
        dt = self.env[src].dtype
        if n == 0 or (dt.kind != "b" and n > np.iinfo(dt).max):
            return None
        neg = dt.kind == "i" and -n >= np.iinfo(dt).min and self.draw(st.booleans())
        idx = IntIndex("env", np.zeros(0, np.int64), src, n, neg)
        return IntIndex("env", np.asarray(idx.for_numpy(self.env)), src, n, neg)

    def arrange(self, items: list) -> tuple:
        """Trailing slices dropped, an Ellipsis for a run of slices, a None inserted."""
        d = self.draw
        while items and isinstance(items[-1], slice) and d(st.booleans()):
            items.pop()
        if d(st.integers(0, 3)) == 0:
            p = q = d(st.integers(0, len(items)))
            while q < len(items) and isinstance(items[q], slice) and d(st.booleans()):
                q += 1
            items[p:q] = [Ellipsis]
        if d(st.integers(0, 3)) == 0:
            items.insert(d(st.integers(0, len(items))), None)
        return tuple(items)

    def adv_key(self, shape: tuple[int, ...]) -> tuple | None:
        d = self.draw
        nd = len(shape)
        if nd == 0:
            return None
        if d(st.booleans()):
            return self.mask_key(shape)
        k = d(st.integers(1, min(nd, 3)))
        axes = sorted(d(st.lists(st.integers(0, nd - 1), unique=True, min_size=k, max_size=k)))
        env_cands = [i for i, r in enumerate(self.env) if r.dtype.kind in "biu"
                     and r.val.ndim <= 3 and r.val.size <= 64 and self.exact(i)]
        src = d(st.sampled_from(env_cands)) if env_cands and d(st.integers(0, 2)) == 0 \
            else None
        if src is not None:  # the broadcast index shape is the generated value's
            bshape = self.env[src].shape
        else:
            bshape = tuple(d(st.lists(st.sampled_from([1, 2, 3, 3, 0]), max_size=2)))
        env_slot = d(st.integers(0, k - 1)) if src is not None else None
        items: list[Any] = []
        for ax, n in enumerate(shape):
            if ax not in axes:
                items.append(self.slice_or_int(n))
                continue
            idx = self.env_index(src, n) if axes.index(ax) == env_slot else None
            if idx is None:
                if n == 0:
                    sub = (0,)
                else:  # a suffix of the broadcast shape, some axes of length 1
                    sub = bshape[d(st.integers(0, len(bshape))):]
                    sub = tuple(1 if d(st.integers(0, 3)) == 0 else m for m in sub)
                idx = self.int_array(n, sub)
                if idx is None:
                    return None
            items.append(idx)
        return self.arrange(items)

    def mask_key(self, shape: tuple[int, ...]) -> tuple | None:
        d = self.draw
        nd = len(shape)
        p = d(st.integers(0, nd - 1))
        mshape = shape[p:p + d(st.integers(1, nd - p))]
        form = d(st.sampled_from(["np", "list", "fl", "env", "cmp", "cmp", "cmp"]))
        mask = None
        if form == "env":
            cands = [i for i, r in enumerate(self.env) if r.dtype.kind == "b"
                     and r.shape == mshape and self.exact(i)]
            if cands:
                mask = MaskIndex("env", src=d(st.sampled_from(cands)))
        elif form == "cmp":  # a lazy comparison; usable where its outcome is certain
            src = self.pick(lambda r: r.shape == mshape)
            if src is not None:
                other = self.operand_or_scalar(mshape)
                op = d(st.sampled_from(COMPARISONS))
                try:
                    r = ref_ufunc(op, self.env[src],
                                  self.env[other] if isinstance(other, int) else other)
                except (TypeError, ValueError, OverflowError):
                    r = None
                if r is not None and r.shape == mshape and not r.err.any():
                    mask = MaskIndex("cmp", src=src, op=op, other=other)
        if mask is None:
            size = math.prod(mshape)
            vals = np.array(self.values_of(st.booleans(), size,
                                           lambda rng: rng.integers(0, 2, size)),
                            bool).reshape(mshape)
            form = form if form in ("np", "fl") or (form == "list" and size) else "np"
            mask = MaskIndex(form, vals)
        count = int(np.count_nonzero(mask.for_numpy(self.env)))
        items: list[Any] = [self.slice_or_int(n) for n in shape[:p]] + [mask]
        extra = d(st.integers(0, 4)) == 0  # an index array too, broadcasting with the mask's
        for n in shape[p + len(mshape):]:
            if extra and n:
                idx = self.int_array(n, d(st.sampled_from([(1,), (count,)])))
                if idx is not None:
                    items.append(idx)
                    extra = False
                    continue
            items.append(self.slice_or_int(n))
        return self.arrange(items)

    def adv_target(self, t: int) -> tuple | None:
        """(key, shape of the selection, whether it selects no position twice) for a write."""
        shape = self.env[t].shape
        key = self.adv_key(shape)
        if key is None:
            return None
        nkey = resolve_key(key, self.env, numpy=True)
        try:
            with quiet():
                pos = np.arange(math.prod(shape)).reshape(shape)[nkey]
        except IndexError:
            return None
        pos = np.asarray(pos)
        return key, pos.shape, np.unique(pos).size == pos.size

    # }}}


def _has_scalar_operand(step: tuple) -> bool:
    """Steps whose errors depend on scalar operands (numpy's OverflowError, TypeError)."""
    ops = step[2] if step[0] == "ufunc" else step[1:] if step[0] in ("where", "clip") else ()
    return any(isinstance(o, Scalar) for o in ops)


def _shares_input(r: Ref, inputs: list[Ref]) -> bool:
    return r.val.flags.writeable and any(np.shares_memory(r.val, a.val) for a in inputs)


@st.composite
def _inputs(draw, cfg: Config, index_writes: bool) -> list[np.ndarray]:
    """Inputs of a common (broadcast) shape, in every dtype."""
    big = cfg.big_arrays and draw(st.integers(0, 9)) == 0
    if big:
        base = (draw(st.sampled_from([40000, 70001])),)
    else:
        ndim = draw(st.integers(int(index_writes), max(cfg.max_ndim, int(index_writes))))
        base = tuple(draw(st.sampled_from(cfg.dims)) for _ in range(ndim))
    inputs = []
    for _ in range(draw(st.integers(1, cfg.max_inputs))):
        dt = np.dtype(draw(st.sampled_from(DTYPES)))
        drop = draw(st.integers(0, len(base)))
        drop = min(drop, len(base) - int(index_writes))
        shape = tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in base[drop:])
        inputs.append(draw(_array(dt, shape)))
    return inputs


@st.composite
def _contraction_start(draw, sizes: ContractSizes = CONTRACT_SIZES) -> tuple[list, list]:
    """Inputs ``t``, ``x``, ``y`` and the first steps: ``x`` or ``y`` maybe transposed
    (``swapaxes`` of an input stored the other way), then one product written into
    all of ``t`` or a strided window of it, the value reading the target."""
    m, n, k = (draw(st.sampled_from(c)) for c in (sizes.rows, sizes.cols, sizes.reduced))
    batch = draw(st.sampled_from(sizes.batches))
    if math.prod(batch) * m * k * n > MAX_PRODUCTS:
        batch = ()
    xdt = np.dtype(draw(st.sampled_from(["float32", "float64", "float32", "float64",
                                         *CONTRACT_DTYPES])))
    ydt = xdt if draw(st.integers(0, 3)) else np.dtype(draw(st.sampled_from(CONTRACT_DTYPES)))
    tdt = np.result_type(xdt, ydt)
    if tdt.kind in "iu" and draw(st.integers(0, 3)) == 0:
        tdt = np.dtype(np.float64)  # (same_kind: an integer product into a float target)
    window = draw(st.booleans())  # t[..., 1:, ::2]: offset rows, every other column
    tshape = (*batch, m + 1, 2 * n - 1) if window else (*batch, m, n)
    key = (Ellipsis, slice(1, None), slice(None, None, 2)) if window else None
    tx, ty = draw(st.booleans()), draw(st.booleans())
    # x's batch axes may be broadcast: all of them or none of them
    xbatch = batch if draw(st.integers(0, 2)) else tuple(1 for _ in batch)
    inputs = [draw(_array(tdt, tshape)),
              draw(_array(xdt, (*xbatch, k, m) if tx else (*xbatch, m, k))),
              draw(_array(ydt, (*batch, n, k) if ty else (*batch, k, n)))]
    steps: list[tuple] = []
    xi, yi = 1, 2
    for flag, src in ((tx, 1), (ty, 2)):
        if flag:
            steps.append(("shape", "swapaxes", src, (-1, -2)))
            if src == 1:
                xi = len(inputs) + len(steps) - 1
            else:
                yi = len(inputs) + len(steps) - 1
    steps.append(("contract", 0, key, xi, yi, draw(st.sampled_from(CONTRACT_FORMS))))
    return inputs, steps


@st.composite
def programs(draw, cfg: Config = CONFIG, kinds: tuple = STEP_KINDS,
             index_writes: bool = False, contraction: bool = False) -> Program:
    """Programs of steps drawn from ``kinds``; ``index_writes``: every write goes through
    index arrays or a mask, and the inputs have at least one axis; ``contraction``:
    the program starts with a product written in place (:func:`_contraction_start`)."""
    planned: list[tuple] = []
    if contraction:
        inputs, planned = draw(_contraction_start())
    else:
        inputs = draw(_inputs(cfg, index_writes))
    prog = Program(inputs)
    env = [Ref(a.copy()) for a in inputs]
    writable = set(range(len(inputs)))
    values: list[int] = []
    lib = RefLib()
    gen = Gen(draw, env, writable, values)
    gen.index_writes = index_writes
    written: set[int] = set()  # inputs written to (compared at the end)
    done: list[tuple] = []
    lo, hi = (0, 3) if contraction else (cfg.min_steps, cfg.max_steps)
    for i in range(len(planned) + draw(st.integers(lo, hi))):
        step = planned[i] if i < len(planned) else getattr(gen, draw(st.sampled_from(kinds)))()
        if step is None:
            continue
        try:
            value = apply_step(lib, step, env, done)
        except (TypeError, ValueError, OverflowError) as exc:
            if "C long" in str(exc):
                # numpy cannot convert a Python int beyond int64 for a bool loop
                # (logical_and(bool_array, 2**64 - 1)); fuseloop converts it: not compared
                continue
            if _has_scalar_operand(step) or step[0] in ("setitem", "inplace", "contract"):
                family = next(n for n, c in ERROR_FAMILIES.items() if isinstance(exc, c))
                prog.steps.append((("error", step, family), None))
                done.append(prog.steps[-1])
            continue
        except IndexError:
            continue
        out = None
        if value is not None:
            out = len(env)
            env.append(value)
            values.append(out)
            gen.kind_of[out] = gen.kind_of[step[1]] if step[0] == "rebuild" else step[0]
            if step[0] in ("index", "shape") and _shares_input(value, env[:len(inputs)]):
                writable.add(out)
        if step[0] in ("setitem", "inplace", "contract"):
            written |= {k for k in range(len(inputs)) if np.shares_memory(env[k].val,
                                                                          env[step[1]].val)}
        prog.steps.append((step, out))
        done.append((step, out))
    if not values and not written:
        reject()
    extra = draw(st.lists(st.sampled_from(values), max_size=2, unique=True)) if values else []
    prog.outputs = list(dict.fromkeys([*values[-1:], *extra, *sorted(written)]))
    prog.together = draw(st.booleans())
    return prog
