"""Stencils staged through local-memory tiles (gpu-coalesced's ``tile`` parameter,
fuseloop.recipes.stencil_tiles), run with the GPU recipe forced onto PoCL: the code
read for the local array and its barrier, the results against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.recipes import gpu_coalesced

PAD_MODE = {"clamp": "edge", "wrap": "wrap", "constant": "constant"}


@pytest.fixture
def gpu_elementwise(restore_recipes):
    # the rule's tiles (the recipe's default is no tile: see its ``tile`` parameter)
    fl.register_recipe("cpu", gpu_coalesced.with_params(tile=None), name="test-gpu-coalesced")
    with fl.device("cpu"):
        yield


def _tiled(src: str) -> bool:
    return "__local" in src and "barrier(CLK_LOCAL_MEM_FENCE)" in src


def _np_stencil(h, w, boundary, cval=0.0):
    w = np.asarray(w)
    cen = [k // 2 for k in w.shape]
    pad = [(c, k - 1 - c) for c, k in zip(cen, w.shape)]
    extra = {"constant_values": cval} if boundary == "constant" else {}
    p = np.pad(h, pad, mode=PAD_MODE[boundary], **extra)
    out = np.zeros(h.shape, np.result_type(h, w))
    for k in np.ndindex(*w.shape):
        out += w[k] * p[tuple(slice(a, a + n) for a, n in zip(k, h.shape))]
    return out


def _laplace5(x):
    c = x[1:-1, 1:-1]
    return x[1:-1, 2:] + x[1:-1, :-2] + x[:-2, 1:-1] + x[2:, 1:-1] - 4 * c


def _laplace7(x):
    return (x[1:-1, 1:-1, 2:] + x[1:-1, 1:-1, :-2] + x[1:-1, 2:, 1:-1] + x[1:-1, :-2, 1:-1]
            + x[2:, 1:-1, 1:-1] + x[:-2, 1:-1, 1:-1] - 6 * x[1:-1, 1:-1, 1:-1])


W5 = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float64)


def test_codegen_local_tile_where_the_rule_says(gpu_elementwise):
    h = np.random.default_rng(0).random((37, 45))
    x = fl.asarray(h)
    assert _tiled(fl.show_code(_laplace5(x)))
    assert _tiled(fl.show_code(fl.stencil(x, W5, boundary="clamp")))
    # a 1-D stencil and a 2-D one reaching along one axis only: no tile
    v = fl.asarray(h.ravel())
    assert "__local" not in fl.show_code(v[2:] + v[:-2] - 2 * v[1:-1])
    assert "__local" not in fl.show_code(x[:, 2:] + x[:, :-2])
    # the parameter turns it off
    with fl.recipes.use(gpu_coalesced.with_params(tile=False)):
        src = fl.show_code(_laplace5(x))
    assert "__local" not in src and "barrier" not in src
    # tile_local=False: the grid of tiles (the output's own axes, no index divisions)
    # reading global memory
    with fl.recipes.use(gpu_coalesced.with_params(tile=None, tile_local=False)):
        grid = fl.stencil(x, W5, boundary="wrap")
        src = fl.show_code(grid)
        assert "__local" not in src and "fl_idx_div" not in src, src
        assert "reqd_work_group_size(32, 8, 1)" in src, src
        np.testing.assert_allclose(grid.get(), _np_stencil(h, W5, "wrap"), rtol=1e-13,
                                   atol=1e-13)


def test_tile_parameter_space_and_tuning_database_round_trip():
    p = gpu_coalesced.params["tile"]
    for value in (None, False, (1, 16, 32)):
        back = p.from_json(p.to_json(value))
        assert back == value and type(back) is type(value)
        assert gpu_coalesced.with_params(tile=back).values["tile"] == value
    with pytest.raises(fl.errors.RecipeError, match="'tile'"):
        gpu_coalesced.with_params(tile=(8, 32))  # three sizes: planes, rows, columns
    assert gpu_coalesced.with_params(tile=False).size_class is None  # one kernel for all shapes
    assert gpu_coalesced.values["tile"] is False  # measured slower on an H100: off by default


@pytest.mark.parametrize("boundary", ["clamp", "wrap", "constant"])
def test_2d_stencil_boundaries_fused(gpu_elementwise, boundary):
    rng = np.random.default_rng(1)
    h, g = rng.random((37, 45)), rng.random((37, 45))
    x, y = fl.asarray(h), fl.asarray(g)
    w = rng.random((3, 3))
    expr = 2 * fl.stencil(x, w, boundary=boundary, cval=1.5) + fl.sin(y)
    assert _tiled(fl.show_code(expr))
    np.testing.assert_allclose(expr.get(), 2 * _np_stencil(h, w, boundary, 1.5) + np.sin(g),
                               rtol=1e-13, atol=1e-13)


def test_slice_stencils_2d_3d_odd_sizes_and_other_shapes(gpu_elementwise):
    rng = np.random.default_rng(2)
    for shape in ((37, 45), (20, 70)):  # one structure, two shapes: a kernel per shape
        h = rng.random(shape)
        np.testing.assert_allclose(_laplace5(fl.asarray(h)).get(), _laplace5(h), rtol=1e-13,
                                   atol=1e-13)
    h3, g3 = rng.random((11, 13, 37)), rng.random((9, 11, 35))
    x3 = fl.asarray(h3)
    expr = _laplace7(x3) * fl.asarray(g3) + 1
    assert _tiled(fl.show_code(expr))
    np.testing.assert_allclose(expr.get(), _laplace7(h3) * g3 + 1, rtol=1e-13, atol=1e-13)


def test_3d_stencil_and_small_tiles(gpu_elementwise):
    rng = np.random.default_rng(3)
    h = rng.random((7, 10, 19)).astype(np.float32)
    w = np.zeros((3, 3, 3), np.float32)
    w[1, 1, :] = w[1, :, 1] = w[:, 1, 1] = 1
    w[1, 1, 1] = -6
    x = fl.asarray(h)
    # tiles of 2 x 4 x 8 (many partial ones); the 1-D stencil below is not tiled
    with fl.recipes.use(gpu_coalesced.with_params(tile=(2, 4, 8))):
        got = fl.stencil(x, w, boundary="wrap")
        assert _tiled(fl.show_code(got))
        np.testing.assert_allclose(got.get(), _np_stencil(h, w, "wrap"), rtol=1e-5, atol=1e-5)
        v = rng.random(1000)
        one = fl.stencil(fl.asarray(v), [1.0, -2.0, 1.0], boundary="constant", cval=3.0)
        np.testing.assert_allclose(one.get(), _np_stencil(v, [1.0, -2.0, 1.0], "constant", 3.0),
                                   rtol=1e-13)


def test_stencil_function_and_a_view(gpu_elementwise):
    rng = np.random.default_rng(4)
    big = rng.random((40, 50))
    x = fl.asarray(big)[1:, 3:]  # a view: strides and an offset of its own
    h = big[1:, 3:]
    got = fl.stencil(x, W5, boundary="clamp")
    assert _tiled(fl.show_code(got))
    np.testing.assert_allclose(got.get(), _np_stencil(h, W5, "clamp"), rtol=1e-13, atol=1e-13)
    # a view whose columns start past half a row: its neighbours' offsets straddle it
    v = fl.asarray(big)[:, 24:]
    assert _tiled(fl.show_code(_laplace5(v)))
    np.testing.assert_allclose(_laplace5(v).get(), _laplace5(big[:, 24:]), rtol=1e-13,
                               atol=1e-13)
    op = fl.stencil_function(lambda a, b, c, d, e, f, g, i, j:
                             fl.maximum(b, i) - fl.minimum(d, f), (3, 3))
    got = op(fl.asarray(big), boundary="clamp")
    assert _tiled(fl.show_code(got))
    p = np.pad(big, 1, mode="edge")
    want = np.maximum(p[:-2, 1:-1], p[2:, 1:-1]) - np.minimum(p[1:-1, :-2], p[1:-1, 2:])
    np.testing.assert_allclose(got.get(), want, rtol=1e-13)
