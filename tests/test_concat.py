"""Lazy ``concatenate``/``stack``: numpy's results, read in the consuming kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest
from launch_counts import launches, launches_and_result

import fuseloop as fl
from fuseloop.errors import ShapeError
from fuseloop.expr import program as prog
from fuseloop.expr.nodes import Concat, Remap
from fuseloop.ops.shape import view
from fuseloop.recipes import gpu_coalesced, recipe_for


@pytest.fixture(autouse=True)
def _check_caches(monkeypatch):
    """Every structure-cache hit and run-plan replay is compared with a fresh linearisation."""
    monkeypatch.setattr(prog, "CHECK_STRUCTURE_CACHE", True)


def rand(shape, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed).random(shape) * 10
    return r.astype(dtype)


CASES = [  # piece shapes, axis
    ([(3,), (5,)], 0),
    ([(2, 3), (4, 3), (1, 3)], 0),
    ([(3, 2), (3, 5)], 1),
    ([(3, 2), (3, 5)], -1),
    ([(2, 3, 4), (2, 1, 4), (2, 2, 4)], 1),
    ([(2, 3, 4), (2, 3, 1)], -1),
    ([(2, 3), (4,), (1, 1)], None),
    ([(4, 3)], 0),
    ([(0, 3), (2, 3), (0, 3), (3, 3)], 0),
    ([(0, 3), (0, 3)], 0),
    ([(2, 0), (2, 4)], 1),
]


@pytest.mark.parametrize("shapes,axis", CASES)
def test_concatenate_matches_numpy(device, shapes, axis):
    for seed in (0, 1):  # the second time through the structure cache and run plans
        hs = [rand(s, seed=seed + k) for k, s in enumerate(shapes)]
        xs = [fl.asarray(h) for h in hs]
        ref = np.concatenate(hs, axis=axis)
        got = fl.concatenate(xs, axis=axis)
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_array_equal(got.get(), ref)
        np.testing.assert_allclose((got * 2 - 1).get(), ref * 2 - 1, rtol=1e-6)
        np.testing.assert_allclose(fl.sum(got, axis=-1).get(), ref.sum(axis=-1), rtol=1e-5)


def test_dtype_promotion(device):
    a = np.arange(5, dtype=np.int32)
    b = rand(3, np.float32)
    c = np.array([True, False])
    d = np.arange(4, dtype=np.uint8)
    for hs in ([a, b], [c, d], [c, a, b], [d, c]):
        got = fl.concatenate([fl.asarray(h) for h in hs])
        ref = np.concatenate(hs)
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got.get(), ref)
    got = fl.stack([fl.asarray(c), fl.asarray(c)], axis=1)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got.get(), np.stack([c, c], axis=1))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_stack_matches_numpy(device, axis):
    hs = [rand((2, 3), seed=k) for k in range(3)]
    got = fl.stack([fl.asarray(h) for h in hs], axis=axis)
    np.testing.assert_array_equal(got.get(), np.stack(hs, axis=axis))


def test_many_pieces(device):
    hs = [rand((k % 4, 3), seed=k) for k in range(50)]  # some empty
    got = fl.concatenate([fl.asarray(h) for h in hs])
    assert type(got._node) is Concat and len(got._node.pieces) == 37
    ref = np.concatenate(hs)
    n, val = launches_and_result(lambda: got * 3)
    np.testing.assert_allclose(val, ref * 3, rtol=1e-6)
    assert n == 1
    np.testing.assert_allclose(fl.sum(got, axis=0).get(), ref.sum(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(got[::-7].get(), ref[::-7])
    ones = [fl.ones(1, dtype=np.int64) * k for k in range(50)]
    np.testing.assert_array_equal(fl.concatenate(ones).get(), np.arange(50))


def test_consumers_fuse_into_one_kernel(device):
    a, b = rand(1000, seed=1), rand(700, seed=2)
    x, y = fl.asarray(a), fl.asarray(b)
    n, val = launches_and_result(lambda: fl.sum(fl.concatenate([x, y]) * 2))
    assert n == 1
    np.testing.assert_allclose(val, np.sum(np.concatenate([a, b]) * 2), rtol=1e-5)
    x2, y2 = fl.asarray(rand((4, 5), seed=3)), fl.asarray(rand((4, 5), seed=4))
    n, val = launches_and_result(lambda: fl.stack([x2, y2]) + 1)
    assert n == 1
    np.testing.assert_allclose(val, np.stack([x2.get(), y2.get()]) + 1)
    # a large sum runs in two stages, as without the concatenation
    big = [rand(40000, seed=5), rand(30001, seed=6)]
    n, val = launches_and_result(lambda: fl.concatenate([fl.asarray(h) for h in big]).sum())
    np.testing.assert_allclose(val, np.concatenate(big).sum(), rtol=1e-4)


def test_pieces_are_expressions_and_views(device):
    h = rand((6, 4), seed=7)
    g = rand((4, 3), seed=8)
    x, y = fl.asarray(h), fl.asarray(g)
    pieces = [x[1:5, ::-1] * 2, y.T, fl.broadcast_to(y[:, 0], (2, 4)), fl.sin(x[::2]),
              fl.arange(4).reshape(1, 4).astype(np.float32)]
    ref_pieces = [h[1:5, ::-1] * 2, g.T, np.broadcast_to(g[:, 0], (2, 4)),
                  np.sin(h[::2]), np.arange(4).reshape(1, 4)]
    got = fl.concatenate(pieces)
    ref = np.concatenate(ref_pieces).astype(np.float32)
    n, val = launches_and_result(lambda: got + 1)
    assert n == 1
    np.testing.assert_allclose(val, ref + 1, rtol=1e-6)
    # pieces that hold reductions and gathers
    red = fl.concatenate([x.sum(axis=1), y.max(axis=0), x[np.array([0, -1, 2])][:, 0]])
    np.testing.assert_allclose(red.get(), np.concatenate(
        [h.sum(axis=1), g.max(axis=0), h[[0, -1, 2]][:, 0]]), rtol=1e-6)
    with pytest.raises(IndexError):
        fl.concatenate([x, x[np.array([7])]]).get()


def test_views_of_a_concatenation(device):
    hs = [rand((2, 5, 3), seed=9), rand((3, 5, 3), seed=10), rand((1, 5, 3), seed=11)]
    c = fl.concatenate([fl.asarray(h) for h in hs])
    r = np.concatenate(hs)
    views = {
        "slice": lambda a: a[1:4], "step": lambda a: a[::2, 1], "neg": lambda a: a[::-1],
        "negstep": lambda a: a[-2::-3, :, 1:], "index": lambda a: a[3],
        "index_neg": lambda a: a[-1],
        "inner": lambda a: a[:, 2], "T": lambda a: a.T, "swap": lambda a: a.swapaxes(0, 1),
        "flip": lambda a: a[::-1, ::-1], "empty": lambda a: a[2:2],
        "newaxis": lambda a: a[:, None],
        "diag": lambda a: a[:, :, 0].diagonal(), "diag1": lambda a: a[:, :, 0].diagonal(-2),
        "bcast": lambda a: a[None, 1:3] + a[:2][:, None],
    }
    for name, f in views.items():
        got = f(c)
        n, val = launches_and_result(lambda got=got: got * 1)
        np.testing.assert_array_equal(val, f(r), err_msg=name)
        assert n == (1 if val.size else 0), name


def test_reshape_of_a_concatenation(device):
    a, b = rand((2, 6), seed=12), rand((4, 6), seed=13)
    c = fl.concatenate([fl.asarray(a), fl.asarray(b)])
    r = np.concatenate([a, b])
    for shape in [(36,), (6, 3, 2), (12, 3), (3, 12), (1, 36, 1), (2, 3, 6)]:
        got = c.reshape(shape)
        n, val = launches_and_result(lambda got=got: got + 0)
        np.testing.assert_array_equal(val, r.reshape(shape), err_msg=str(shape))
        if shape in [(36,), (12, 3), (1, 36, 1)]:
            assert n == 1, shape  # the joined axis stays whole: no copy
    c1 = fl.concatenate([fl.asarray(a), fl.asarray(a)], axis=1)  # interleaved: one copy
    np.testing.assert_array_equal(fl.ravel(c1).get(), np.concatenate([a, a], 1).ravel())


@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2), -1])
def test_reductions_of_a_concatenation(device, axis):
    hs = [rand((3, 4, 2), seed=14), rand((3, 1, 2), seed=15), rand((3, 5, 2), seed=16)]
    c = fl.concatenate([fl.asarray(h) for h in hs], axis=1)
    r = np.concatenate(hs, axis=1)
    for op in ("sum", "max", "argmin"):
        if op == "argmin" and isinstance(axis, tuple):
            continue
        n, val = launches_and_result(lambda op=op: getattr(fl, op)(c, axis=axis))
        np.testing.assert_allclose(val, getattr(np, op)(r, axis=axis), rtol=1e-5)
        if op != "argmin":
            assert n == 1, op


def test_gather_and_matmul_of_a_concatenation(device):
    a, b = rand((3, 4), seed=17), rand((5, 4), seed=18)
    c = fl.concatenate([fl.asarray(a), fl.asarray(b)])
    r = np.concatenate([a, b])
    idx = np.array([7, 0, -1, 3, 4, 2])
    np.testing.assert_array_equal(c[idx].get(), r[idx])
    np.testing.assert_array_equal(c[:, np.array([3, 0])].get(), r[:, [3, 0]])
    np.testing.assert_array_equal(fl.concatenate([c, c])[fl.asarray(idx) + 8].get(),
                                  np.concatenate([r, r])[idx + 8])
    w = rand((4, 6), seed=19)
    np.testing.assert_allclose((c @ fl.asarray(w)).get(), r @ w, rtol=1e-5)
    np.testing.assert_allclose((fl.asarray(w).T @ c.T).get(), w.T @ r.T, rtol=1e-5)


def test_nested_concatenations(device):
    a, b, c = rand(3, seed=20), rand(4, seed=21), rand(2, seed=22)
    x, y, z = (fl.asarray(h) for h in (a, b, c))
    got = fl.concatenate([fl.concatenate([x, y])[1:], z, fl.concatenate([z, x])[::-1]])
    ref = np.concatenate([np.concatenate([a, b])[1:], c, np.concatenate([c, a])[::-1]])
    n, val = launches_and_result(lambda: got)
    np.testing.assert_array_equal(val, ref)
    assert n == 1


def test_remap_of_a_concatenation(device):
    # a map that mixes two result axes into the joined one cannot split into pieces
    a, b = rand((3, 2), seed=23), rand((4, 2), seed=24)
    c = fl.concatenate([fl.asarray(a), fl.asarray(b)])
    r = np.concatenate([a, b])
    v = view(c, (4, 3, 2), (0, 0), ((1, 1, 0), (0, 0, 1)))  # v[i, j, k] = c[i + j, k]
    assert type(v._node) is Remap
    ref = np.array([[[r[i + j, k] for k in range(2)] for j in range(3)] for i in range(4)])
    np.testing.assert_array_equal(v.get(), ref)
    np.testing.assert_array_equal(v[1:, ::-1].sum(axis=1).get(), ref[1:, ::-1].sum(axis=1))


def test_assignment_of_a_concatenation(device):
    a, b = rand(4, seed=25), rand(6, seed=26)
    x, y = fl.asarray(a), fl.asarray(b)
    out = fl.zeros(12, dtype=np.float32)
    n = launches(lambda: out.__setitem__(slice(1, 11), fl.concatenate([x, y])))
    assert n == 1
    np.testing.assert_array_equal(out.get(), np.concatenate([[0], a, b, [0]]))
    out2 = fl.zeros((2, 10), dtype=np.float64)
    out2[...] = fl.concatenate([x, y])  # broadcast, cast
    np.testing.assert_array_equal(out2.get(), np.broadcast_to(np.concatenate([a, b]), (2, 10)))
    # the target is read by the value: numpy's result, not a partly overwritten one
    h = np.arange(10, dtype=np.int32)
    t = fl.asarray(h)
    t[...] = fl.concatenate([t[5:], t[:5]])
    np.testing.assert_array_equal(t.get(), np.concatenate([h[5:], h[:5]]))
    t = fl.asarray(h)
    t[2:] = fl.concatenate([t[:3], t[7:], t[3:5]]) * 2
    h2 = h.copy()
    h2[2:] = np.concatenate([h[:3], h[7:], h[3:5]]) * 2
    np.testing.assert_array_equal(t.get(), h2)


def test_result_does_not_alias_its_inputs(device):
    a, b = rand(4, seed=27), rand(3, seed=28)
    x, y = fl.asarray(a), fl.asarray(b)
    c = fl.concatenate([x, y])
    s = fl.stack([x[:3], y])
    one = fl.concatenate([x])
    x[...] = 0
    y += 1
    np.testing.assert_array_equal(c.get(), np.concatenate([a, b]))
    np.testing.assert_array_equal(s.get(), np.stack([a[:3], b]))
    np.testing.assert_array_equal(one.get(), a)
    # and the result is a new buffer, not a view of an input
    z = fl.asarray(a)
    d = fl.concatenate([z]).eval()
    d[0] = 100
    np.testing.assert_array_equal(z.get(), a)


def _per_piece(device):
    """Whether the device's recipe gives each piece of a concatenation a loop of its own."""
    return recipe_for(device).concat_chunk is not None


@pytest.fixture
def ternary_on_cpu(restore_recipes):
    """The GPU recipe (which keeps the per-element selection) on the CPU device."""
    fl.register_recipe("cpu", gpu_coalesced, name="test-gpu-coalesced")
    with fl.device("cpu") as dev:
        yield dev


def _check_selection(src, pieces):
    """Each element loads from one piece, inside a branch of a nest of conditionals."""
    assert src.count("__kernel") + src.count("__global__ void") == 1
    # one store per element the recipe writes (a GPU recipe unrolls: several)
    stores = re.findall(r"out0\[[^\]]*\] = (.*);", src)
    assert stores
    for value in stores:
        assert value.count("?") == pieces - 1  # one conditional per boundary
        for k in range(pieces):  # each piece loaded once, inside a branch of the conditional
            assert len(re.findall(rf"\bin{k}\[", value)) == 1
            assert re.search(rf"[?:] in{k}\[", value)
    for k in range(pieces):  # and nowhere else
        assert len(re.findall(rf"\bin{k}\[", src)) == len(stores)


_LOOP = re.compile(r"for \(int i_k(\d+) = lo_k\1; i_k\1 <= -1 \+ hi_k\1; \+\+i_k\1\)\s*")


def _piece_loops(src):
    """``{piece: body}`` of the per-piece loops in ``src``, and the source outside them."""
    loops, outside, pos = {}, [], 0
    for m in _LOOP.finditer(src):
        outside.append(src[pos:m.start()])
        k = m.end()
        if src[k] == "{":
            depth, end = 0, k
            while True:
                depth += {"{": 1, "}": -1}.get(src[end], 0)
                end += 1
                if depth == 0:
                    break
        else:
            end = src.index(";", k) + 1
        assert int(m.group(1)) not in loops
        loops[int(m.group(1))] = src[k:end]
        pos = end
    outside.append(src[pos:])
    return loops, "".join(outside)


def _param_values(expr, shape):
    """The kernel parameters ``p<k>`` of ``expr``'s program, by name."""
    _, bindings = prog.linearize([expr._node], shape, cache=False)
    return {f"p{k}": v for k, v in enumerate(bindings.params)}


def _check_piece_loops(src, expr, lengths, buffers):
    """One loop per piece, each reading only its own buffers (``buffers[p]``: the
    ``in<k>`` numbers) at the loop's index shifted by the piece's start, over the
    elements of the work-item's chunk inside the piece: never outside its bounds."""
    assert src.count("__kernel") + src.count("__global__ void") == 1
    params = _param_values(expr, expr.shape)
    total = sum(lengths)
    params["N"] = total
    loops, outside = _piece_loops(src)
    assert sorted(loops) == list(range(len(lengths)))
    assert not re.search(r"\bin\d+\[", outside)  # no load outside the loops
    assert "?" not in "".join(loops.values())  # no selection
    start = 0
    for p, n in enumerate(lengths):
        body = loops[p]
        assert len(re.findall(r"\bout0\[", body)) == 1
        # the loop's bounds: the chunk, cut to [start, start + n)
        lo = re.search(rf"lo_k{p} = (.*);", src).group(1)
        hi = re.search(rf"hi_k{p} = (.*);", src).group(1)
        if p == 0:
            assert lo == "4096 * gid(0)"
        else:
            m = re.fullmatch(r"max\(4096 \* gid\(0\), (p\d+)\)", lo)
            assert m and params[m.group(1)] == start, lo
        m = re.fullmatch(r"min\(4096 \* gid\(0\) \+ 4096, (p\d+|N)\)", hi)
        assert m and params[m.group(1)] == start + n, hi
        for k, index in _loads(body):
            assert k in buffers[p], (p, k)
            if p == 0:
                assert index == "i_k0"
            else:
                m = re.fullmatch(rf"i_k{p} \+ -1 \* (p\d+)", index)
                assert m and params[m.group(1)] == start, index
        start += n


def _loads(src):
    """``(k, index)`` of every global load ``in<k>[index]`` in ``src``."""
    out = []
    for m in re.finditer(r"\bin(\d+)\[", src):
        depth, k = 1, m.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(src[k], 0)
            k += 1
        out.append((int(m.group(1)), src[m.end():k - 1]))
    return out


def _load_indices(src):
    """The index expression of every global load ``inK[...]`` in ``src``."""
    return [index for _, index in _loads(src)]


def test_generated_code_reads_one_piece_per_element(device):
    xs = [fl.asarray(rand(5 + k, seed=k)) for k in range(3)]
    expr = fl.concatenate(xs) * 2
    src = fl.show_code(expr)
    if _per_piece(device):
        _check_piece_loops(src, expr, [5, 6, 7], [{0}, {1}, {2}])
    else:
        _check_selection(src, 3)


def test_gpu_recipe_keeps_the_selection(ternary_on_cpu):
    xs = [fl.asarray(rand(5 + k, seed=k)) for k in range(3)]
    _check_selection(fl.show_code(fl.concatenate(xs) * 2), 3)
    x, y = fl.asarray(rand(5, seed=1)), fl.asarray(rand(3, seed=2))
    _check_clamped(fl.show_code(fl.concatenate([x * x + x, y, x])))
    got = (fl.concatenate(xs) * 2).get()
    np.testing.assert_allclose(got, np.concatenate([x.get() for x in xs]) * 2, rtol=1e-6)


def _check_clamped(src):
    # x * x + x reads x into a temporary computed for every element: its position
    # is clamped into x, so the elements of other pieces never read outside it
    loads = _load_indices(src)
    stores = len(re.findall(r"\bout0\[", src))  # a GPU recipe unrolls: several
    assert stores and len(loads) == 3 * stores
    assert all("min(" in i or "max(" in i for i in loads), loads


def test_piece_loads_are_clamped(device):
    x, y = fl.asarray(rand(5, seed=1)), fl.asarray(rand(3, seed=2))
    expr = fl.concatenate([x * x + x, y, x])
    src = fl.show_code(expr)
    if _per_piece(device):
        # each piece's loop reads its own piece only, unclamped (x is in0 in two pieces)
        _check_piece_loops(src, expr, [5, 3, 5], [{0}, {1}, {0}])
        assert not any("min(" in i or "max(" in i for i in _load_indices(src))
    else:
        _check_clamped(src)
    got = fl.concatenate([x * x + x, y, x]).get()
    np.testing.assert_allclose(got, np.concatenate([x.get() ** 2 + x.get(), y.get(), x.get()]),
                               rtol=1e-6)


def test_kernel_reused_across_sizes(device):
    def run(n, m):
        a, b = fl.asarray(rand(n, seed=n)), fl.asarray(rand(m, seed=m))
        return (fl.concatenate([a, b]) * 2 + 1).get()

    run(7, 9)
    before = fl.stats()["kernels_lowered"]
    got = run(13, 3)
    assert fl.stats()["kernels_lowered"] == before
    np.testing.assert_allclose(got, np.concatenate([rand(13, seed=13), rand(3, seed=3)]) * 2 + 1,
                               rtol=1e-6)


def test_errors(device):
    a = fl.asarray(rand((2, 3)))
    with pytest.raises(ValueError, match="need at least one array"):
        fl.concatenate([])
    with pytest.raises(ValueError, match="need at least one array"):
        fl.stack([])
    with pytest.raises(ShapeError, match=r"\(2, 3\) and \(3, 2\)"):
        fl.concatenate([a, a.T])
    with pytest.raises(ShapeError, match="must match exactly"):
        fl.concatenate([a, a[0]])
    with pytest.raises(ShapeError, match="zero-dimensional"):
        fl.concatenate([a[0, 0], a[0, 1]])
    with pytest.raises(ShapeError, match="same shape"):
        fl.stack([a, a[:1]])
    with pytest.raises(fl.errors.AxisError):
        fl.concatenate([a, a], axis=2)


# {{{ per-piece loops (the CPU recipe): boundaries anywhere in a work-item's chunk

PIECE_CASES = {  # lengths of 1-D pieces
    "inside_one_chunk": [3, 5, 2],
    "boundary_inside_a_chunk": [5000, 3000],
    "boundary_on_a_chunk": [4096, 4096, 1],
    "pieces_smaller_than_a_chunk": [1, 7, 100, 1, 1, 9],
    "odd_sizes": [4097, 1, 8191, 13],
    "many_chunks": [3 * 4096 + 17, 2 * 4096 - 5, 4096 * 2],
    "one_element_pieces": [1] * 20,
}


@pytest.mark.parametrize("lengths", PIECE_CASES.values(), ids=PIECE_CASES.keys())
def test_piece_loops_match_numpy(device, lengths):
    hs = [rand(n, seed=k) for k, n in enumerate(lengths)]
    xs = [fl.asarray(h) for h in hs]
    ref = np.concatenate(hs)
    expr = fl.concatenate(xs) * 2 + 1
    if _per_piece(device):
        _check_piece_loops(fl.show_code(expr), expr, lengths, [{k} for k in range(len(lengths))])
    n, val = launches_and_result(lambda: expr)
    assert n == 1
    np.testing.assert_allclose(val, ref * 2 + 1, rtol=1e-6)
    # into part of a larger buffer (an offset target), and into a strided one
    out = fl.zeros(ref.size + 3, dtype=np.float32)
    out[2:-1] = fl.concatenate(xs) - 1
    np.testing.assert_allclose(out.get(), np.concatenate([[0, 0], ref - 1, [0]]), rtol=1e-6)
    out2 = fl.zeros(2 * ref.size, dtype=np.float64)
    out2[::2] = fl.concatenate(xs)
    np.testing.assert_array_equal(out2.get()[::2], ref)
    np.testing.assert_array_equal(out2.get()[1::2], 0)


def test_piece_loops_with_empty_pieces(device):
    lengths = [0, 5, 0, 0, 4100, 0, 3, 0]
    hs = [rand(n, seed=k) for k, n in enumerate(lengths)]
    xs = [fl.asarray(h) for h in hs]
    expr = fl.concatenate(xs) * 3
    if _per_piece(device):  # empty pieces are dropped: three loops
        _check_piece_loops(fl.show_code(expr), expr, [5, 4100, 3], [{0}, {1}, {2}])
    np.testing.assert_allclose(expr.get(), np.concatenate(hs) * 3, rtol=1e-6)


def test_piece_loops_many_pieces(device):
    lengths = [(k * 37) % 101 + 1 for k in range(64)]
    hs = [rand(n, seed=k) for k, n in enumerate(lengths)]
    xs = [fl.asarray(h) for h in hs]
    expr = fl.exp(fl.concatenate(xs)) * 2
    if _per_piece(device):
        _check_piece_loops(fl.show_code(expr), expr, lengths,
                           [{k} for k in range(len(lengths))])
    np.testing.assert_allclose(expr.get(), np.exp(np.concatenate(hs)) * 2, rtol=1e-5)
    # more pieces than MAX_PIECE_LOOPS keep the selection
    more = fl.concatenate(xs + xs[:3]) * 2
    np.testing.assert_allclose(more.get(), np.concatenate(hs + hs[:3]) * 2, rtol=1e-6)
    assert "i_k0" not in fl.show_code(more)


def test_piece_loops_2d_and_stack(device):
    a, b, c = rand((3000, 3), seed=1), rand((1, 3), seed=2), rand((2001, 3), seed=3)
    x, y, z = fl.asarray(a), fl.asarray(b), fl.asarray(c)
    row = rand(3, seed=4)
    expr = fl.concatenate([x, y, z]) * fl.asarray(row) + 1
    ref = np.concatenate([a, b, c]) * row + 1
    st = fl.stack([x, x * 2, x[::-1]])
    if _per_piece(device):
        src = fl.show_code(expr)
        loops, _ = _piece_loops(src)
        assert sorted(loops) == [0, 1, 2]
        # the pieces are read contiguously: at the loop's index less where they start
        assert re.search(r"\bin0\[i_k0\]", loops[0])
        assert re.search(r"\bin1\[i_k1 \+ -1 \* p\d+\]", loops[1])
        assert re.search(r"\bin2\[i_k2 \+ -1 \* p\d+\]", loops[2])
        src = fl.show_code(st - 1)
        loops, _ = _piece_loops(src)
        assert sorted(loops) == [0, 1, 2]
        assert re.search(r"\bin0\[i_k0\]", loops[0])
        assert re.search(r"\bin0\[i_k1 \+ -1 \* p\d+\]", loops[1])
    np.testing.assert_allclose(expr.get(), ref, rtol=1e-6)
    np.testing.assert_allclose((st - 1).get(), np.stack([a, a * 2, a[::-1]]) - 1, rtol=1e-6)


def test_piece_loops_other_concatenations_and_views(device):
    a, b, c, d = (rand(n, seed=n) for n in (5000, 3000, 2000, 6000))
    x, y, z, w = (fl.asarray(h) for h in (a, b, c, d))
    # two concatenations with other boundaries: one gets the loops, the other selects
    got = fl.concatenate([x, y]) + fl.concatenate([z, w])
    np.testing.assert_allclose(got.get(), np.concatenate([a, b]) + np.concatenate([c, d]),
                               rtol=1e-6)
    # the same boundaries: both resolved in each loop
    got = fl.concatenate([x, y]) * fl.concatenate([x * 2, y - 1])
    if _per_piece(device):
        loops, _ = _piece_loops(fl.show_code(got))
        assert sorted(loops) == [0, 1] and "?" not in "".join(loops.values())
    np.testing.assert_allclose(got.get(), np.concatenate([a, b]) * np.concatenate([a * 2, b - 1]),
                               rtol=1e-6)
    # views and nesting: selections inside the loops, or no loops at all
    cat = fl.concatenate([x, y])
    r = np.concatenate([a, b])
    for view_fn in (lambda v: v[::-1], lambda v: v[1:-2:3], lambda v: v[4990:5010]):
        np.testing.assert_allclose((view_fn(cat) * 2).get(), view_fn(r) * 2, rtol=1e-6)
    got = fl.concatenate([fl.concatenate([z, x])[1:], y, fl.concatenate([y, z])[::-2]])
    ref = np.concatenate([np.concatenate([c, a])[1:], b, np.concatenate([b, c])[::-2]])
    np.testing.assert_array_equal(got.get(), ref)
    # gathers (checked indices) inside the pieces' loops
    idx = np.array([0, 4999, -1, 17], dtype=np.int64)
    got = fl.concatenate([x[fl.asarray(idx)], y]) * 2
    np.testing.assert_allclose(got.get(), np.concatenate([a[idx], b]) * 2, rtol=1e-6)
    with pytest.raises(IndexError):
        fl.concatenate([x[fl.asarray(np.array([1, 5000]))], y]).get()


def test_piece_loops_reused_across_sizes(device):
    def run(n, m, k):
        hs = [rand(n, seed=n), rand(m, seed=m), rand(k, seed=k)]
        got = (fl.concatenate([fl.asarray(h) for h in hs]) * 2).get()
        np.testing.assert_allclose(got, np.concatenate(hs) * 2, rtol=1e-6)

    run(5000, 3001, 7)
    before = fl.stats()["kernels_lowered"]
    run(13, 9000, 4096)  # other boundaries, other chunks: the same kernel
    run(2, 5, 3)
    assert fl.stats()["kernels_lowered"] == before

# }}}
