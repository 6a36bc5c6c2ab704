"""The program passes of fuseloop.passes, each run alone (no device needed)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fuseloop.expr import ir
from fuseloop.expr.mapper import Mapper
from fuseloop.expr.nodes import Apply, Leaf, Reduce, Scalar, Storage
from fuseloop.expr.program import Target, linearize
from fuseloop.passes import (
    PASSES,
    Build,
    detect_contraction,
    emit_entries,
    place_outputs,
    run_passes,
    size_roots,
    split_rows,
)

F8 = np.dtype("float64")


def leaf(shape: tuple[int, ...], strides: tuple[int, ...] | None = None, offset: int = 0
         ) -> Leaf:
    n = int(np.prod(shape)) if shape else 1
    return Leaf(Storage(None, 8 * max(n, 1) * 4, None), F8, shape, strides, offset)


def add(a, b, shape):
    return Apply("add", (a, b), (F8, F8, F8), shape)


def mul(a, b, shape):
    return Apply("multiply", (a, b), (F8, F8, F8), shape)


def test_passes_in_order():
    assert PASSES == (emit_entries, place_outputs, size_roots, split_rows, detect_contraction)
    for run in PASSES:
        assert run.__doc__


def test_records_are_tagged_tuples():
    e = ir.Load(0, "d", (("r", 0),), "c", 0)
    assert e.kind == "load" and e[0] == "load" and e.slot == 0 and e.at == (("r", 0),)
    assert e == ("load", 0, "d", (("r", 0),), "c", 0)
    assert hash(e) == hash(("load", 0, "d", (("r", 0),), "c", 0))
    back = pickle.loads(pickle.dumps(e))
    assert back == e and type(back) is ir.Load
    assert repr(e) == repr(ir.Load(0, "d", (("r", 0),), "c", 0))
    with pytest.raises(TypeError, match="missing"):
        ir.Load(0, "d")
    assert ir.operand_refs(ir.Gather(3, 4, ("p", 0))) == (3, 4)
    assert ir.operand_refs(ir.Op("add", ("d", "d", "d"), (1, 2))) == (1, 2)
    assert ir.operand_refs(ir.Arg(0, "d")) == ()


def test_emit_entries_shares_loads_and_broadcasts():
    x = leaf((3, 4))
    row = leaf((4,))
    y = add(mul(x, x, (3, 4)), row, (3, 4))
    b = Build([y], (3, 4))
    emit_entries(b)
    kinds = [e.kind for e in b.entries]
    # x is loaded once (hash-consed), the row once, at the broadcast index
    assert kinds == ["load", "op", "load", "op"]
    assert b.entries[0].strides == "c"  # in the output's own order: the flat index
    assert b.entries[2].at == (("r", 1),) and b.entries[2].strides == (1,)
    assert b.entries[3].refs == (1, 2) and b.outputs == (3,)
    assert len(b.storages) == 2 and b.storages[0] is x.storage


def test_emit_entries_scalars_are_never_merged():
    x = leaf((5,))
    s1, s2 = Scalar(np.float64(2)), Scalar(np.float64(2))
    b = Build([add(mul(x, s1, (5,)), mul(x, s2, (5,)), (5,))], (5,))
    emit_entries(b)
    args = [e for e in b.entries if e.kind == "arg"]
    assert [a.slot for a in args] == [0, 1] and b.scalar_nodes == [s1, s2]


def test_emit_entries_strided_leaf_uses_parameters():
    x = leaf((4, 3), strides=(1, 4))  # a transpose
    b = Build([x], (4, 3))
    emit_entries(b)
    (e,) = b.entries
    # (a view's offset is a parameter at 0 too: not a plain leaf)
    assert e.strides == (1, ("p", 1)) and e.offset == ("p", 0) and b.params == [0, 4]


def test_emit_entries_reduction_loop():
    x = leaf((3, 4))
    b = Build([Reduce("sum", x, (1,), F8)], (3,))
    emit_entries(b)
    red = b.entries[-1]
    assert red.kind == "reduce" and red.rid == 0 and b.reductions == 1
    assert b.entries[red.child].at == (("r", 0), ("j", 0, 0))
    assert b.params[red.total[1]] == 4


def test_split_rows_alone():
    # a hand-made build: a reduction along output dimension 0 of a (3, 5) output
    b = Build([], (3, 5))
    b.entries = [ir.Load(0, "d", (("r", 0), ("j", 0, 0)), (("p", 0), 1), 0),
                 ir.Reduce("sum", "d", 0, 0, (("r", 0),), (("p", 1),), ("p", 1), None),
                 ir.Load(1, "d", (("r", 0), ("r", 1)), "c", 0),
                 ir.Op("add", ("d", "d", "d"), (1, 2))]
    split_rows(b)
    assert b.row_dims == (0,)
    # a full reduction added to every element: one row, the whole output within it
    b.entries = [ir.Load(0, "d", (("j", 0, 0),), (1,), 0),
                 ir.Reduce("sum", "d", 0, 0, (), (("p", 1),), ("p", 1), None),
                 ir.Load(1, "d", (("r", 0), ("r", 1)), "c", 0),
                 ir.Op("add", ("d", "d", "d"), (1, 2))]
    split_rows(b)
    assert b.row_dims == ()
    # without a reduction: one flat loop
    b.entries = [ir.Load(1, "d", (("r", 0), ("r", 1)), "c", 0)]
    split_rows(b)
    assert b.row_dims is None
    # a reduction varying along every output dimension: no elements within a row
    b = Build([], (3,))
    b.entries = [ir.Load(0, "d", (("r", 0), ("j", 0, 0)), (("p", 0), 1), 0),
                 ir.Reduce("sum", "d", 0, 0, (("r", 0),), (("p", 1),), ("p", 1), None)]
    split_rows(b)
    assert b.row_dims is None


def test_size_roots_alone():
    b = Build([], (1, 7, 7))
    size_roots(b)
    assert b.root_sizes == (1, ("p", 0), ("p", 0)) and b.params == [7]


def test_place_outputs_alone():
    x = leaf((3, 4))
    plain = Build([x], (3, 4), [None])
    place_outputs(plain)
    assert plain.out_specs == [()]
    target = Target(Storage(None, 8 * 40, None), (1, 10), 2)  # a transposed view, offset 2
    b = Build([x], (3, 4), [target])
    place_outputs(b)
    ((at, kinds, offset),) = b.out_specs
    assert at == (("r", 0), ("r", 1))
    assert kinds == (1, ("p", 0)) and offset == ("p", 1) and b.params == [10, 2]


def test_detect_contraction_alone():
    # A @ W as sum over k of A[m, k] * W[k, n]: reshape through broadcasting leaves
    a3 = leaf((40, 8, 1), strides=(8, 1, 0))
    w3 = leaf((1, 8, 40), strides=(0, 40, 1))
    prod = mul(a3, w3, (40, 8, 40))
    b = Build([Reduce("sum", prod, (1,), F8)], (40, 40))
    emit_entries(b)
    size_roots(b)
    split_rows(b)
    assert b.row_dims is None
    detect_contraction(b)
    c = b.contraction
    assert c is not None and b.entries[c.reduce].kind == "reduce"
    assert {b.entries[c.x].slot, b.entries[c.y].slot} == {0, 1}
    # too small to be worth a tiled kernel
    small = Build([Reduce("sum", mul(leaf((4, 8, 1), (8, 1, 0)), leaf((1, 8, 4), (0, 4, 1)),
                                     (4, 8, 4)), (1,), F8)], (4, 4))
    run_passes(small)
    assert small.contraction is None


def test_linearize_is_the_passes():
    x = leaf((6,))
    y = add(mul(x, Scalar(np.float64(3)), (6,)), leaf((6,)), (6,))
    program, bindings = linearize([y], (6,), cache=False)
    b = run_passes(Build([y], (6,)))
    assert program.entries == tuple(b.entries) and program.outputs == b.outputs
    assert bindings.params == b.params
    assert all(isinstance(e, tuple) and e.kind for e in program.entries)
    hash(program)


class _Count(Mapper):
    def map_leaf(self, node):
        return 1

    def map_apply(self, node):
        return 1 + sum(self(a) for a in node.args)

    map_user_call = map_apply


def test_mapper_dispatches_on_type():
    x = leaf((2,))
    assert _Count()(add(x, mul(x, x, (2,)), (2,))) == 5
    with pytest.raises(AssertionError, match="Scalar"):
        _Count()(Scalar(np.float64(1)))
