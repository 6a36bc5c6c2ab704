"""Products whose epilogue reads the array they are written into (issue 23).

``C += A @ B`` and ``C[:] = alpha * A @ B + beta * C`` run as one kernel that
reads each element of ``C`` where it writes it.  That is only right when every
output element is written once: the CPU recipe's last column block, shifted
back into range, used to apply the epilogue again to columns the block before
it had already updated (wrong columns 20-31 of a 40 x 36 result).  Sizes here
are multiples of no block (CPU 6 x 16, GPU 128 x 128 and 64 x 64, the small
configurations below); the narrowest stay with the reduction kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.expr.program import linearize
from fuseloop.recipes import contraction as rc

# (m, k, n): rows, reduced length, columns
SIZES = [(40, 40, 36), (64, 64, 100), (17, 33, 51), (35, 40, 33), (33, 5, 51),
         (40, 20, 1), (1, 20, 40)]
BATCHED = [(3, 40, 40, 36), (2, 37, 20, 50)]
FORMS = ["iadd", "axpby", "isub_view"]

# recipes run on this device besides its default one: the GPU recipes work on
# PoCL's CPU device too, and other block shapes move the shifted last block
# (one form each, and float64 where the recipe picks other tiles for it: every
# recipe, form and dtype is a kernel to compile)
OTHER_RECIPES = [
    ("cpu-blocked-4x8-g2", rc.blocked(rc.CpuBlocks(4, 8, 2)), np.float32),
    ("cpu-blocked-5x32", rc.blocked(rc.CpuBlocks(5, 32)), np.float64),
    ("gpu-tiled", rc.gpu_tiled, np.float32),
    ("gpu-tiled", rc.gpu_tiled, np.float64),
    ("gpu-tiles-32-blocked", rc.tiled(rc.TileConfig(32, 32, 4, 8, 8, "blocked")), np.float32),
    ("gpu-tiles-32-strided", rc.tiled(rc.TileConfig(32, 32, 4, 8, 8, "strided")), np.float32),
    ("untiled", rc.untiled, np.float32),
]


def _use_recipe(device, name, func):
    for dev_type in (device.type, "nvidia"):
        fl.register_recipe(dev_type, func, name=f"test-{name}", kind="contraction")


def _data(shape_a, shape_b, shape_c, dtype, seed):
    rng = np.random.default_rng(seed)
    return tuple((rng.random(s) - 0.5).astype(dtype) for s in (shape_a, shape_b, shape_c))


def _apply(form, A, B, C):
    """Write the product into ``C`` in place, through the fuseloop expression ``form``."""
    if form == "iadd":
        C += A @ B
    elif form == "axpby":
        C[:] = 1.5 * (A @ B) + 0.25 * C
    else:  # a strided view of a wider array, its epilogue reading the view
        C[..., ::2] -= A @ B


def _want(form, a, b, c):
    a, b, c = (x.astype(np.float64) for x in (a, b, c))
    if form == "iadd":
        return c + a @ b
    if form == "axpby":
        return 1.5 * (a @ b) + 0.25 * c
    out = c.copy()
    out[..., ::2] -= a @ b
    return out


def _check(form, a, b, c, dtype):
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    cols = b.shape[-1]
    if min(a.shape[-2], cols) >= 32:  # big enough for a contraction kernel
        view = C[..., ::2] if form == "isub_view" else C
        prog = linearize([(view + A @ B)._node], view.shape)[0]
        assert prog.contraction is not None
    _apply(form, A, B, C)
    got, want = C.get(), _want(form, a, b, c)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    bad = ~np.isclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1.0))
    assert not bad.any(), (
        f"{int(bad.sum())} wrong elements in rows {np.unique(np.nonzero(bad)[-2])}, "
        f"columns {np.unique(np.nonzero(bad)[-1])}")


def _skip_f64(device, dtype):
    if dtype == np.float64 and not device.has_fp64:
        pytest.skip("no float64")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("form", FORMS)
def test_inplace_product(device, form, dtype):
    _skip_f64(device, dtype)
    for seed, (m, k, n) in enumerate(SIZES):
        width = 2 * n - 1 if form == "isub_view" else n
        a, b, c = _data((m, k), (k, n), (m, width), dtype, seed)
        _check(form, a, b, c, dtype)
    for seed, (nb, m, k, n) in enumerate(BATCHED):
        width = 2 * n - 1 if form == "isub_view" else n
        a, b, c = _data((nb, m, k), (nb, k, n), (nb, m, width), dtype, seed)
        _check(form, a, b, c, dtype)


@pytest.mark.parametrize("name,func,dtype", OTHER_RECIPES,
                         ids=[f"{r[0]}-{np.dtype(r[2]).name}" for r in OTHER_RECIPES])
def test_inplace_product_other_recipes(device, restore_recipes, name, func, dtype):
    _skip_f64(device, dtype)
    _use_recipe(device, name, func)
    for seed, (m, k, n) in enumerate([(40, 40, 36), (64, 64, 100), (35, 40, 33), (33, 5, 51)]):
        a, b, c = _data((m, k), (k, n), (m, n), dtype, seed)
        _check("axpby", a, b, c, dtype)
    a, b, c = _data((3, 37, 20), (3, 20, 50), (3, 37, 50), dtype, 9)
    _check("axpby", a, b, c, dtype)


def test_inplace_product_with_transposed_operand_and_tanh(device):
    # the epilogue reads the target twice and through a function
    a, b, c = _data((45, 30), (37, 30), (45, 37), np.float32, 7)
    A, B, C = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    C[:] = fl.tanh(A @ B.T + C) * C
    want = np.tanh(a.astype(np.float64) @ b.T + c) * c
    np.testing.assert_allclose(C.get(), want, rtol=1e-5, atol=1e-6)
