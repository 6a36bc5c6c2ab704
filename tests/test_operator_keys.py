"""The lean operators' nodes and remembered entries equal the general constructor's.

``fuseloop.array``'s operators build their nodes in place from one look-up of
``operator_loops._sig_loops`` (keyed by the operands' signatures or, for an operand
without one, its dtype's char and shape).  Whatever they store must be what
``Apply(op, args, loop, shape)`` works out from scratch: signature, operands, offsets,
buffers, dtype, shape.  No kernel runs here.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop import operator_loops
from fuseloop.dtypes import SUPPORTED_DTYPES
from fuseloop.expr.nodes import MAX_OPERANDS, Apply

FIELDS = ("op", "loop", "loop_key", "dtype", "shape", "sig", "operands", "offs", "storages",
          "fancy")


def _rebuilt(node: Apply) -> Apply:
    return Apply(node.op, node.args, node.loop, node.shape)


def _same(a: Apply, b: Apply) -> None:
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), (f, getattr(a, f), getattr(b, f))


def _chain(x, y, steps):
    r = x
    for _ in range(steps):
        r = r * 0.999 + y
        r = 2.0 - r
    return r


@pytest.mark.parametrize("steps", [1, 5, MAX_OPERANDS + 5])
def test_lean_nodes_equal_the_general_constructors(device, steps):
    """Array with array, with a Python scalar on either side, a view, a reduction; signed
    nodes and, past MAX_OPERANDS operands, unsigned ones (keyed by dtype char and shape)."""
    h = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    x, y = fl.asarray(h), fl.asarray(h[0].copy())
    got = [_chain(x, y, steps), _chain(x[1:], y, steps) * x[:2], x - x.mean(axis=0),
           3 * (x[:, 1:] + x[:, :-1]) / 2]
    if steps > MAX_OPERANDS:
        assert got[0]._node.sig == 0  # (unsigned: its operators were keyed by dtype char)
    for a in got:
        node = a._node
        _same(node, _rebuilt(node))
        for child in node.args:  # (the operands' nodes too, one level down)
            if type(child) is Apply:
                _same(child, _rebuilt(child))
    np.testing.assert_allclose(got[3].get(), 3 * (h[:, 1:] + h[:, :-1]) / 2, rtol=1e-6)


def test_unsigned_operands_are_keyed_by_dtype_char(device):
    """An unsigned operand's entry is kept under its dtype's char and shape: the canonical
    dtypes' chars are distinct, so no two dtypes share an entry."""
    assert len({d.char for d in SUPPORTED_DTYPES}) == len(SUPPORTED_DTYPES)
    h = np.arange(4, dtype=np.float32)
    s = fl.concatenate([fl.asarray(h), fl.asarray(h)])  # (a concatenation: no signature)
    sd = fl.concatenate([fl.asarray(h.astype(np.float64))] * 2)
    assert s._node.sig == 0 == sd._node.sig
    operator_loops._sig_loops.clear()
    a, b = s + 1.5, sd + 1.5
    assert ("add", ("f", (8,)), float) in operator_loops._sig_loops
    assert ("add", ("d", (8,)), float) in operator_loops._sig_loops
    assert a.dtype == np.float32 and b.dtype == np.float64
    np.testing.assert_allclose(a.get(), np.concatenate([h, h]) + 1.5)
