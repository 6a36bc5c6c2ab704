"""fuseloop: numpy-style lazy device arrays, fused into one Loopy/OpenCL kernel per evaluation."""

from __future__ import annotations

import sys as _sys
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

import numpy as _np

from . import errors
from . import iteration as _iteration  # noqa: F401  (it sets Array.__iter__)
from .array import Array, Constant
from .assignment import compute
from .cache import cache_dir, clear_memory_cache
from .caches import clear as clear_caches
from .caches import info as cache_info
from .creation import (
    arange,
    asarray,
    astype,
    empty,
    empty_like,
    eye,
    full,
    full_like,
    linspace,
    meshgrid,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .errors import HostFallbackWarning as HostFallbackWarning  # (fl.linalg's host fallbacks warn)
from .mathfuncs import MATH_FUNCTIONS as _MATH_FUNCTIONS
from .ops.scatter_add import attach as _attach_at
from .ops.shape import (
    broadcast_to,
    concatenate,
    diagonal,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    ravel,
    repeat,
    reshape,
    roll,
    squeeze,
    stack,
    swapaxes,
    tile,
    transpose,
    tril,
    triu,
)
from .runtime.devices import Device, device, devices, get_device, set_device
from .stats import reset_stats, stats
from .ufuncs import FUNCTIONS as _FUNCTIONS
from .ufuncs import where

globals().update(_FUNCTIONS)
globals().update(_MATH_FUNCTIONS)  # math builtins beyond the basic ufuncs (issue 28)
_attach_at(_FUNCTIONS)  # fl.add.at, fl.subtract.at, fl.maximum.at, fl.minimum.at

# {{{ names loaded on first use
# ``import fuseloop`` loads what building and evaluating an expression needs; the
# modules below load when one of their names is first read (``fl.sum``, ``from
# fuseloop import fft``), which then stays in this module's namespace.  The
# recipes, the lowering and Loopy load on the first kernel that is not in the
# kernel cache (see fuseloop/recipe_state.py and fuseloop/_lazy.py).

_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    ".api": ("show_code", "synchronize"),
    ".array_api_info": ("__array_namespace_info__",),
    ".checks": ("check", "check_bounded", "check_finite", "check_nonnegative",
                "check_positive"),
    ".constant_memory": ("constant",),
    ".dtype_api": ("can_cast", "finfo", "iinfo", "isdtype", "result_type"),
    ".explain": ("Explanation", "explain"),
    ".fuse": ("fuse",),
    ".functions": ("TracedFunction", "UserFunction", "function", "index"),
    ".grids": ("mgrid", "ndarray", "ogrid"),
    ".interop": ("from_dlpack", "from_pyopencl", "to_pyopencl"),
    ".multi": ("DeviceSet", "MultiArray"),  # several devices, one array (issue 29)
    # numpy's names beyond the standard (issue 27)
    ".numpy_misc": ("allclose", "argpartition", "array_equal", "array_equiv", "bitwise_count",
                    "common_type", "convolve", "correlate", "cross", "digitize", "divmod",
                    "ediff1d", "fix", "float_power", "gcd", "gradient", "i0", "interp",
                    "intersect1d", "iscomplex", "iscomplexobj", "isneginf", "isposinf",
                    "isreal", "isrealobj", "isscalar", "issubdtype", "lcm", "lexsort",
                    "matvec", "min_scalar_type", "partition", "polyadd", "polyder",
                    "polyint", "polymul", "polysub", "polyval", "promote_types",
                    "real_if_close", "setdiff1d", "setxor1d", "sinc", "sort_complex",
                    "spacing", "trapezoid", "union1d", "unique", "unwrap", "vecmat"),
    ".numpy_io": ("NpzArrays", "array2string", "array_repr", "array_str", "base_repr",
                  "binary_repr", "format_float_positional", "format_float_scientific",
                  "frombuffer", "fromfile", "fromiter", "fromregex", "fromstring",
                  "genfromtxt", "get_printoptions", "geterr", "iterable", "load", "loadtxt",
                  "mintypecode", "printoptions", "save", "savetxt", "savez",
                  "savez_compressed", "set_printoptions", "seterr", "typename"),
    ".numpy_more": ("apply_along_axis", "apply_over_axes", "asarray_chkfinite",
                    "asfortranarray", "bartlett", "blackman", "einsum_path", "fromfunction",
                    "hamming", "hanning", "histogram2d", "histogram_bin_edges", "histogramdd",
                    "isfortran", "kaiser", "mask_indices", "may_share_memory", "piecewise",
                    "poly", "polydiv", "polyfit", "put_along_axis", "require", "roots",
                    "shares_memory", "unpackbits"),
    ".numpy_stats": ("average", "corrcoef", "cov", "cumprod", "cumsum", "median",
                     "nanargmax", "nanargmin", "nancumprod", "nancumsum", "nanmax",
                     "nanmean", "nanmedian", "nanmin", "nanpercentile", "nanprod",
                     "nanquantile", "nanstd", "nansum", "nanvar", "percentile", "ptp",
                     "quantile"),
    ".numpy_select": ("choose", "compress", "copyto", "extract", "fill_diagonal", "place",
                      "put", "putmask", "select", "trim_zeros"),
    ".numpy_shape": ("append", "array_split", "asanyarray", "ascontiguousarray", "block",
                     "copy", "delete", "diag", "diag_indices", "diag_indices_from",
                     "diagflat", "dsplit", "fliplr", "flipud", "geomspace", "hsplit",
                     "identity", "indices", "insert", "ix_", "kron", "logspace", "ndim",
                     "pad", "ravel_multi_index", "resize", "rollaxis", "rot90", "row_stack",
                     "shape", "size", "split", "tri", "tril_indices", "tril_indices_from",
                     "triu_indices", "triu_indices_from", "unravel_index", "vander",
                     "vsplit"),
    ".ops.indexing": ("take",),
    ".ops.masks": ("argwhere", "flatnonzero", "nonzero"),
    ".ops.linalg": ("dot", "einsum", "inner", "matmul", "outer", "tensordot", "trace",
                    "vdot"),
    ".ops.manipulation": ("atleast_1d", "atleast_2d", "atleast_3d", "broadcast_arrays",
                          "broadcast_shapes", "clip", "column_stack", "concat", "diff",
                          "dstack", "hstack", "matrix_transpose", "take_along_axis",
                          "unstack", "vecdot", "vstack"),
    ".ops.masked": ("BitMask", "bitmask", "packbits"),
    ".ops.reductions": ("all", "amax", "amin", "any", "argmax", "argmin", "count_nonzero",
                        "max", "mean", "min", "prod", "std", "sum", "var"),
    ".ops.scan": ("cumulative_prod", "cumulative_sum"),
    # segmented primitives (VexCL's *_by_key)
    ".ops.segmented": ("exclusive_scan_by_key", "inclusive_scan_by_key", "reduce_by_key",
                       "sort_by_key"),
    ".ops.scatter_add": ("bincount", "histogram"),
    ".ops.sorting": ("argsort", "isin", "searchsorted", "sort", "unique_all",
                     "unique_counts", "unique_inverse", "unique_values"),
    ".ops.stencil": ("stencil", "stencil_function"),
    ".recipes": ("Recipe", "recipe_for", "register_recipe", "registered_recipes"),
    ".stages": ("Compiled", "Linearized", "Lowered", "program"),
    ".triangular": ("TriangularView", "tril_view", "triu_view"),
    ".tuner": ("TuneReport", "tune"),
}
#: name -> (module, attribute; None: the module itself)
_ON_FIRST_USE: dict[str, tuple[str, str | None]] = {
    name: (module, name) for module, names in _LAZY_MODULES.items() for name in names}
_ON_FIRST_USE.update({
    # submodules: fl.fft (the Array API's fft extension), fl.random (counter-based random
    # numbers), fl.sparse (csr_matrix, ell_matrix), fl.recipes, fl.cuda (CUDA interop:
    # imports CuPy only when used)
    "fft": (".fft", None), "random": (".random", None), "sparse": (".sparse", None),
    "recipes": (".recipes", None), "cuda": (".cuda_interop", None),
    "linalg": (".ops.linalg", None),  # (fl.linalg: a namespace made when first read)
})

if _TYPE_CHECKING:  # (what type checkers see: the names as if imported here)
    from . import fft as fft
    from . import random as random
    from . import recipes as recipes
    from . import sparse as sparse
    from .api import show_code as show_code
    from .api import synchronize as synchronize
    from .array_api_info import (
        __array_namespace_info__ as __array_namespace_info__,
    )
    from .checks import (
        check as check,
    )
    from .checks import (
        check_bounded as check_bounded,
    )
    from .checks import (
        check_finite as check_finite,
    )
    from .checks import (
        check_nonnegative as check_nonnegative,
    )
    from .checks import (
        check_positive as check_positive,
    )
    from .constant_memory import (
        constant as constant,
    )
    from .dtype_api import (
        can_cast as can_cast,
    )
    from .dtype_api import (
        finfo as finfo,
    )
    from .dtype_api import (
        iinfo as iinfo,
    )
    from .dtype_api import (
        isdtype as isdtype,
    )
    from .dtype_api import (
        result_type as result_type,
    )
    from .explain import Explanation as Explanation
    from .explain import explain as explain
    from .functions import (
        TracedFunction as TracedFunction,
    )
    from .functions import (
        UserFunction as UserFunction,
    )
    from .functions import (
        function as function,
    )
    from .functions import (
        index as index,
    )
    from .fuse import fuse as fuse
    from .grids import (
        mgrid as mgrid,
    )
    from .grids import (
        ndarray as ndarray,
    )
    from .grids import (
        ogrid as ogrid,
    )
    from .interop import (
        from_dlpack as from_dlpack,
    )
    from .interop import (
        from_pyopencl as from_pyopencl,
    )
    from .interop import (
        to_pyopencl as to_pyopencl,
    )
    from .multi import (
        DeviceSet as DeviceSet,
    )
    from .multi import (
        MultiArray as MultiArray,
    )
    from .ops.indexing import take as take
    from .ops.linalg import _LinalgNamespace
    from .ops.linalg import (
        dot as dot,
    )
    from .ops.linalg import (
        einsum as einsum,
    )
    from .ops.linalg import (
        inner as inner,
    )
    from .ops.linalg import (
        matmul as matmul,
    )
    from .ops.linalg import (
        outer as outer,
    )
    from .ops.linalg import (
        tensordot as tensordot,
    )
    from .ops.linalg import (
        trace as trace,
    )
    from .ops.linalg import (
        vdot as vdot,
    )
    from .ops.manipulation import (
        atleast_1d as atleast_1d,
    )
    from .ops.manipulation import (
        atleast_2d as atleast_2d,
    )
    from .ops.manipulation import (
        atleast_3d as atleast_3d,
    )
    from .ops.manipulation import (
        broadcast_arrays as broadcast_arrays,
    )
    from .ops.manipulation import (
        broadcast_shapes as broadcast_shapes,
    )
    from .ops.manipulation import (
        clip as clip,
    )
    from .ops.manipulation import (
        column_stack as column_stack,
    )
    from .ops.manipulation import (
        concat as concat,
    )
    from .ops.manipulation import (
        diff as diff,
    )
    from .ops.manipulation import (
        dstack as dstack,
    )
    from .ops.manipulation import (
        hstack as hstack,
    )
    from .ops.manipulation import (
        matrix_transpose as matrix_transpose,
    )
    from .ops.manipulation import (
        take_along_axis as take_along_axis,
    )
    from .ops.manipulation import (
        unstack as unstack,
    )
    from .ops.manipulation import (
        vecdot as vecdot,
    )
    from .ops.manipulation import (
        vstack as vstack,
    )
    from .ops.masked import (
        BitMask as BitMask,
    )
    from .ops.masked import (
        bitmask as bitmask,
    )
    from .ops.masked import (
        packbits as packbits,
    )
    from .ops.masks import argwhere as argwhere
    from .ops.masks import flatnonzero as flatnonzero
    from .ops.masks import nonzero as nonzero
    from .ops.reductions import (
        all as all,
    )
    from .ops.reductions import (
        amax as amax,
    )
    from .ops.reductions import (
        amin as amin,
    )
    from .ops.reductions import (
        any as any,
    )
    from .ops.reductions import (
        argmax as argmax,
    )
    from .ops.reductions import (
        argmin as argmin,
    )
    from .ops.reductions import (
        count_nonzero as count_nonzero,
    )
    from .ops.reductions import (
        max as max,
    )
    from .ops.reductions import (
        mean as mean,
    )
    from .ops.reductions import (
        min as min,
    )
    from .ops.reductions import (
        prod as prod,
    )
    from .ops.reductions import (
        std as std,
    )
    from .ops.reductions import (
        sum as sum,
    )
    from .ops.reductions import (
        var as var,
    )
    from .ops.scan import (
        cumulative_prod as cumulative_prod,
    )
    from .ops.scan import (
        cumulative_sum as cumulative_sum,
    )
    from .ops.scatter_add import (
        bincount as bincount,
    )
    from .ops.scatter_add import (
        histogram as histogram,
    )
    from .ops.segmented import (
        exclusive_scan_by_key as exclusive_scan_by_key,
    )
    from .ops.segmented import (
        inclusive_scan_by_key as inclusive_scan_by_key,
    )
    from .ops.segmented import (
        reduce_by_key as reduce_by_key,
    )
    from .ops.segmented import (
        sort_by_key as sort_by_key,
    )
    from .ops.sorting import (
        argsort as argsort,
    )
    from .ops.sorting import (
        isin as isin,
    )
    from .ops.sorting import (
        searchsorted as searchsorted,
    )
    from .ops.sorting import (
        sort as sort,
    )
    from .ops.sorting import (
        unique_all as unique_all,
    )
    from .ops.sorting import (
        unique_counts as unique_counts,
    )
    from .ops.sorting import (
        unique_inverse as unique_inverse,
    )
    from .ops.sorting import (
        unique_values as unique_values,
    )
    from .ops.stencil import (
        stencil as stencil,
    )
    from .ops.stencil import (
        stencil_function as stencil_function,
    )
    from .recipes import (
        Recipe as Recipe,
    )
    from .recipes import (
        recipe_for as recipe_for,
    )
    from .recipes import (
        register_recipe as register_recipe,
    )
    from .recipes import (
        registered_recipes as registered_recipes,
    )
    from .stages import (
        Compiled as Compiled,
    )
    from .stages import (
        Linearized as Linearized,
    )
    from .stages import (
        Lowered as Lowered,
    )
    from .stages import (
        program as program,
    )
    from .triangular import (
        TriangularView as TriangularView,
    )
    from .triangular import (
        tril_view as tril_view,
    )
    from .triangular import (
        triu_view as triu_view,
    )
    from .tuner import (
        TuneReport as TuneReport,
    )
    from .tuner import (
        tune as tune,
    )

    linalg: _LinalgNamespace

# {{{ Array API namespace (issue 27): names the standard adds to numpy's
__array_api_version__ = "2024.12"
newaxis = None
bool = _np.bool_  # (the standard's name for the boolean dtype)
# }}}

bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float32, float64 = _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
pi, e, inf, nan = _np.pi, _np.e, _np.inf, _np.nan

__version__ = "0.1.0"

__all__ = [
    "Array", "Constant", "Device", "Recipe", "TracedFunction", "UserFunction", "arange",
    "asarray", "astype", "cache_dir", "cache_info", "clear_caches", "clear_memory_cache",
    "clip", "compute", "constant",
    "device", "devices", "empty", "empty_like", "errors", "full", "full_like", "function",
    "get_device", "linspace", "ones", "ones_like", "recipe_for", "recipes", "register_recipe",
    "registered_recipes", "reset_stats", "set_device", "show_code", "stats", "synchronize",
    "where", "zeros", "zeros_like", *_FUNCTIONS,
    "all", "amax", "amin", "any", "argmax", "argmin", "count_nonzero", "max", "mean", "min",
    "prod", "std", "sum", "var", "take", "nonzero", "flatnonzero", "argwhere", "dot",
    "einsum", "inner", "linalg", "matmul",
    "outer", "tensordot", "trace", "vdot", "broadcast_to", "concatenate", "diagonal",
    "expand_dims", "flip", "moveaxis", "permute_dims", "ravel", "repeat", "reshape", "roll",
    "squeeze", "stack", "swapaxes", "tile", "transpose", "tril", "triu",
    "program", "Linearized", "Lowered", "Compiled", "explain", "Explanation", "tune",
    "TuneReport",
    *_MATH_FUNCTIONS, "random",
    # VexCL and Stan features (issue 28)
    "check", "check_bounded", "check_finite", "check_nonnegative", "check_positive",
    "bincount", "histogram", "stencil", "stencil_function", "index", "tril_view", "triu_view",
    "TriangularView",
    "exclusive_scan_by_key", "inclusive_scan_by_key", "reduce_by_key", "sort_by_key",
    "BitMask", "bitmask", "packbits",
    # the Array API's additions (issue 27)
    "__array_namespace_info__", "eye", "from_dlpack", "meshgrid", "can_cast",
    "finfo", "iinfo", "isdtype", "result_type", "broadcast_arrays", "broadcast_shapes",
    "concat", "diff", "matrix_transpose", "take_along_axis", "unstack", "vecdot",
    "cumulative_prod", "cumulative_sum", "newaxis", "bool", "argsort", "isin", "searchsorted",
    "sort", "unique_all", "unique_counts", "unique_inverse", "unique_values",
    "fft",
]
__all__ += [
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "column_stack",
    "dstack",
    "hstack",
    "mgrid",
    "ndarray",
    "ogrid",
    "vstack",
]
__all__.append("fuse")
__all__.append("HostFallbackWarning")
__all__.append("sparse")


__all__ += ["DeviceSet", "MultiArray", "from_pyopencl", "to_pyopencl"]


def __getattr__(name: str) -> _Any:
    found = _ON_FIRST_USE.get(name)
    if found is None:
        from difflib import get_close_matches

        hint = get_close_matches(name, __all__, n=3)
        more = f"; did you mean {', '.join(hint)}?" if hint else ""
        raise errors.UnknownFunctionError(
            f"fuseloop has no function or attribute {name!r}{more}")
    import importlib

    module, attr = found
    value: _Any = importlib.import_module(module, __name__)
    if name == "linalg":
        from .ops.linalg import _LinalgNamespace

        value = _LinalgNamespace()
    elif attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_ON_FIRST_USE})


#: public functions named as the module that holds them (``fl.explain``, ``fl.fuse``)
_SHADOWED = frozenset(name for name, (module, attr) in _ON_FIRST_USE.items()
                      if module == f".{name}" and attr is not None)


class _Package(_ModuleType):
    """fuseloop's module: the import system binds a submodule, when first imported, as
    an attribute of its package; for the names of :data:`_SHADOWED` the function stays
    what ``fl.<name>`` gives (read through :func:`__getattr__`), whoever imports the
    module first (``fuseloop.tuner`` imports ``fuseloop.explain``)."""

    def __setattr__(self, name: str, value: _Any) -> None:
        if name in _SHADOWED and isinstance(value, _ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
