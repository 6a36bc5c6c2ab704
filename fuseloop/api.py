"""Inspection and synchronisation helpers of the public API."""

from __future__ import annotations

import math

from .array import Array
from .cache import get_kernel
from .errors import ShapeError
from .evaluate import _check_fp64, user_functions
from .expr.program import linearize
from .recipes import recipe_for
from .runtime import devices as _devices


def show_code(*exprs: Array) -> str:
    """The OpenCL source of the kernel that evaluating ``exprs`` together would run.

    Builds (or finds in the cache) the kernel but runs nothing.
    """
    import numpy as np

    if not exprs:
        raise TypeError("show_code needs at least one array expression")
    shapes = {e.shape for e in exprs}
    if len(shapes) != 1:
        raise ShapeError(f"show_code shows one kernel; these shapes differ: {sorted(shapes)}")
    shape = exprs[0].shape
    device = exprs[0].device
    program, _ = linearize([e._node for e in exprs], shape)
    index_dtype = np.dtype(np.int32) if math.prod(shape) < 2**31 else np.dtype(np.int64)
    _check_fp64(program.entries, device)
    kernel = get_kernel(program, index_dtype, device, recipe_for(device), user_functions)
    return kernel.plan.source


def synchronize() -> None:
    """Wait until all work enqueued on every device in use has finished."""
    for rt in list(_devices._runtimes.values()):
        rt.queue.finish()
