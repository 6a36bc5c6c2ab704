"""fuseloop: numpy-style lazy device arrays, fused into one Loopy/OpenCL kernel per evaluation."""

from __future__ import annotations

from difflib import get_close_matches as _close

import numpy as _np

from . import errors, recipes
from .api import show_code, synchronize
from .array import Array, Constant
from .array_api_info import __array_namespace_info__
from .assignment import compute
from .cache import cache_dir, clear_memory_cache
from .caches import clear as clear_caches
from .caches import info as cache_info
from .constant_memory import constant
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
from .dtype_api import can_cast, finfo, iinfo, isdtype, result_type
from .explain import Explanation, explain
from .functions import TracedFunction, UserFunction, function, index
from .fuse import fuse as fuse  # (re-exported: in __all__ below the list)
from .grids import mgrid, ndarray, ogrid
from .ops.indexing import take
from .ops.linalg import _LinalgNamespace, dot, einsum, inner, matmul, outer, tensordot, trace, vdot
from .ops.manipulation import (
    atleast_1d,
    atleast_2d,
    atleast_3d,
    broadcast_arrays,
    broadcast_shapes,
    clip,
    column_stack,
    concat,
    diff,
    dstack,
    hstack,
    matrix_transpose,
    take_along_axis,
    unstack,
    vecdot,
    vstack,
)
from .ops.masks import argwhere, flatnonzero, nonzero
from .ops.reductions import (
    all,
    amax,
    amin,
    any,
    argmax,
    argmin,
    count_nonzero,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)
from .ops.scan import cumulative_prod, cumulative_sum
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
from .ops.sorting import (
    argsort,
    isin,
    searchsorted,
    sort,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
)
from .recipes import Recipe, recipe_for, register_recipe, registered_recipes
from .runtime.devices import Device, device, devices, get_device, set_device
from .stages import Compiled, Linearized, Lowered, program
from .stats import reset_stats, stats
from .triangular import TriangularView, tril_view, triu_view
from .ufuncs import FUNCTIONS as _FUNCTIONS
from .ufuncs import where

globals().update(_FUNCTIONS)

# {{{ math builtins beyond the basic ufuncs (issue 28)
from . import random  # noqa: E402  (counter-based random numbers, fl.random)
from .mathfuncs import MATH_FUNCTIONS as _MATH_FUNCTIONS  # noqa: E402

globals().update(_MATH_FUNCTIONS)
# }}}
# {{{ VexCL and Stan features (issue 28): checks, ufunc.at, bincount, histogram, stencils
from .checks import (  # noqa: E402
    check,
    check_bounded,
    check_finite,
    check_nonnegative,
    check_positive,
)
from .ops.scatter_add import attach as _attach_at  # noqa: E402
from .ops.scatter_add import bincount, histogram  # noqa: E402
from .ops.stencil import stencil, stencil_function  # noqa: E402

_attach_at(_FUNCTIONS)  # fl.add.at, fl.subtract.at, fl.maximum.at, fl.minimum.at
from . import sparse as sparse  # noqa: E402  (fl.sparse.csr_matrix, ell_matrix)

# masks that skip work (fl.compute(expr, out=y, where=mask)); segmented primitives
# (VexCL's *_by_key)
from .ops.masked import BitMask, bitmask, packbits  # noqa: E402
from .ops.segmented import (  # noqa: E402
    exclusive_scan_by_key,
    inclusive_scan_by_key,
    reduce_by_key,
    sort_by_key,
)

# }}}
linalg = _LinalgNamespace()
from .errors import HostFallbackWarning as HostFallbackWarning  # noqa: E402  (fl.linalg's host fallbacks warn)

# {{{ numpy's protocols, DLPack, pyopencl arrays without a copy (issue 27)
from .interop import from_dlpack, from_pyopencl, to_pyopencl  # noqa: E402

# {{{ Array API namespace (issue 27): names the standard adds to numpy's (imports above)
__array_api_version__ = "2024.12"
newaxis = None
bool = _np.bool_  # (the standard's name for the boolean dtype)
from . import fft as fft  # noqa: E402  (the standard's fft extension: fl.fft.fft, ...)

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


# imported on first use (not needed to evaluate anything): name -> module
_ON_FIRST_USE = {"tune": "tuner", "TuneReport": "tuner",
                 # several devices, one array (issue 29)
                 "MultiArray": "multi", "DeviceSet": "multi"}
__all__ += ["DeviceSet", "MultiArray", "from_pyopencl", "to_pyopencl"]


def __getattr__(name: str) -> object:
    if name == "cuda":  # fl.cuda: CUDA interop (imports CuPy only when used)
        from . import cuda_interop

        globals()["cuda"] = cuda_interop
        return cuda_interop
    if name in _ON_FIRST_USE:
        import importlib

        value = getattr(importlib.import_module(f".{_ON_FIRST_USE[name]}", __name__), name)
        globals()[name] = value
        return value
    hint = _close(name, __all__, n=3)
    more = f"; did you mean {', '.join(hint)}?" if hint else ""
    raise errors.UnknownFunctionError(f"fuseloop has no function or attribute {name!r}{more}")
