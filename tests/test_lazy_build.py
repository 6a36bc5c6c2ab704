"""Building and keying lazy expressions per call (issue 26, small arrays).

A subexpression read by two arguments of an operation keeps its operands once in the
node's signature (``expr.nodes.shared_prefix``), so a chain reusing its previous step is
found by signature, without a walk; larger expressions are keyed by the walk and
linearised once.  Benchmark: ``benchmarks/bench_lazy_build.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuseloop as fl
from fuseloop.dtypes import resolve_loop
from fuseloop.expr import program as prog
from fuseloop.expr.nodes import Apply
from fuseloop.expr.program import structure_entry


@pytest.fixture
def passes(monkeypatch):
    """The number of linearisations (runs of the passes) so far."""
    calls = []
    real = prog.run_passes
    monkeypatch.setattr(prog, "run_passes", lambda b: calls.append(1) or real(b))
    return calls


def _step_chain(r, steps, c=0.5):
    for _ in range(steps):
        r = fl.sin(r) * c + r * 0.25
    return r


def test_a_shared_step_is_found_by_signature(device, monkeypatch, passes):
    rh = np.linspace(-2, 2, 64, dtype=np.float32)
    r = _step_chain(fl.asarray(rh), 10)
    # r0 and two scalars a step: the step read twice is not written out twice
    assert r._node.sig and len(r._node.operands) == 21
    entry = structure_entry([r._node], r.shape)[0]
    assert len(passes) == 1

    def no_walk(*args, **kwargs):
        raise AssertionError("the structure was walked")

    monkeypatch.setattr(prog, "_walk", no_walk)
    again = _step_chain(fl.asarray(rh[::-1].copy()), 10, c=0.75)  # other data, values
    assert again._node.sig == r._node.sig
    assert structure_entry([again._node], again.shape)[0] is entry
    assert len(passes) == 1  # found: not linearised again
    for e, h, c in ((r, rh, 0.5), (again, rh[::-1], 0.75)):
        expect = h
        for _ in range(10):
            expect = np.sin(expect) * np.float32(c) + expect * np.float32(0.25)
        np.testing.assert_allclose(e.get(), expect, rtol=1e-5, atol=1e-6)


def test_sharing_patterns_have_their_own_signatures(device, checked):
    xh = np.arange(1, 7, dtype=np.float32)
    yh = xh[::-1].copy()
    x, y = fl.asarray(xh), fl.asarray(yh)
    t = x * 2.0
    cases = {
        "shared": (t + t, xh * 2 + xh * 2),
        "copies": (x * 2.0 + x * 2.0, xh * 2 + xh * 2),
        "shared, then more": (t + t * 3.0, xh * 2 + xh * 2 * 3),
        "copies, then more": (x * 2.0 + x * 2.0 * 3.0, xh * 2 + xh * 2 * 3),
        "other buffer": (t + (y * 2.0) * 3.0, xh * 2 + yh * 2 * 3),
    }
    sigs = {name: e._node.sig for name, (e, _) in cases.items()}
    assert all(sigs.values()) and len(set(sigs.values())) == 4
    # which buffers are the same is not in a signature: read at evaluation
    assert sigs["other buffer"] == sigs["copies, then more"]
    entries = [structure_entry([cases[k][0]._node], (6,))[0]
               for k in ("other buffer", "copies, then more")]
    assert entries[0] is not entries[1]
    assert len(cases["shared"][0]._node.operands) == 2  # x and 2.0, once
    # (copies: x, first in both, once; the two 2.0 nodes are two kernel arguments)
    assert len(cases["copies"][0]._node.operands) == 3
    for name, (e, want) in cases.items():
        np.testing.assert_allclose(e.get(), want, rtol=1e-6, err_msg=name)


def test_operators_and_apply_agree_on_shared_operands(device):
    """The lean operator joins shared operands in place: as Apply's constructor does."""
    x = fl.asarray(np.arange(1, 5, dtype=np.float32))
    t = fl.sin(x) * 0.5
    for a, b in ((t, t), (t, t * 0.25), (t, x), (x * 3.0, t)):
        lean = (a + b)._node
        loop = resolve_loop("add", (a.dtype, b.dtype))
        ref = Apply("add", (a._node, b._node), loop, a.shape)
        assert (lean.sig, lean.operands, lean.dtype, lean.shape) == \
            (ref.sig, ref.operands, ref.dtype, ref.shape)


def test_operators_test_shared_prefixes_as_apply_does(device):
    """The lean operator's inline first test of a shared prefix (operands beginning with
    the same buffer, then the same or another scalar) decides as Apply's constructor."""
    h = np.arange(1, 5, dtype=np.float32)
    x, y = fl.asarray(h), fl.asarray(h + 1)
    t = x * 2.0
    pairs = {
        "x then other scalars": (x * 2.0 * y * 3.0, x * 4.0 * y * 5.0, False),
        "x and t's scalar, then others": (t * 3.0, t * 4.0, True),
        "x, then one scalar each": (x * 2.0, x * 3.0, True),
        "x alone, then x and more": (x, t * 3.0, False),
        "x and a scalar, then x and others": (x + 1.0, t * 3.0, False),
        "then no operands (element indices)": (t, fl.arange(4, dtype=np.float32), False),
    }
    for name, (a, b, joined) in pairs.items():
        lean = (a + b)._node
        ref = Apply("add", lean.args, lean.loop, lean.shape)
        assert (lean.sig, lean.operands) == (ref.sig, ref.operands), name
        unjoined = len(a._node.operands) + len(b._node.operands)
        assert (len(lean.operands) < unjoined) == joined, name
        np.testing.assert_allclose((a + b).get(), a.get() + b.get(), rtol=1e-6, err_msg=name)


def test_a_buffer_read_again_joins_by_its_position(device):
    """``r * b`` where ``r`` already reads the buffer ``b``: the lean operator's
    remembered join (expr.nodes.joined_at_table, used from the second time) gives
    Apply's signature and operands, and which of ``r``'s buffers is read again is in
    the signature."""
    h = np.arange(1, 5, dtype=np.float32)
    x, y = fl.asarray(h), fl.asarray(h + 1)
    sigs = []
    for b in (x, y, x, y):
        r = x * y
        lean = (r * b)._node
        ref = Apply("multiply", lean.args, lean.loop, lean.shape)
        assert (lean.sig, lean.operands) == (ref.sig, ref.operands)
        assert lean.operands == r._node.operands  # (b's buffer once)
        sigs.append(lean.sig)
    assert sigs[0] == sigs[2] and sigs[1] == sigs[3] and sigs[0] != sigs[1]
    np.testing.assert_allclose((x * y * x).get(), h * (h + 1) * h, rtol=1e-6)
    np.testing.assert_allclose((x * y * y).get(), h * (h + 1) * (h + 1), rtol=1e-6)


def test_one_buffer_then_a_longer_operand_list_starting_with_it(device, checked):
    """``x * (x + y*z)``: the later argument's operands begin with the earlier one's only
    buffer and are longer than two (building it raised IndexError)."""
    h = np.arange(1, 5, dtype=np.float32)
    x = fl.asarray(h)
    y, z = x + 1, x + 2
    e = x * (x + y * z)
    lean = e._node
    ref = Apply("multiply", lean.args, lean.loop, lean.shape)
    assert (lean.sig, lean.operands) == (ref.sig, ref.operands)
    np.testing.assert_allclose(e.get(), h * (h + (h + 1) * (h + 2)), rtol=1e-6)


def test_shared_steps_keep_numpy_dtypes_and_shapes(device, checked):
    """Python scalars stay weak (NEP 50) and shapes broadcast through shared steps."""
    col = np.arange(1, 4, dtype=np.float32)[:, None]
    row = np.linspace(0, 1, 4, dtype=np.float32)
    xc, yr = fl.asarray(col), fl.asarray(row)
    t = xc * 2.0
    e = t + t * yr  # (3, 1) step shared with its product by a (4,) row
    want = col * 2.0 + col * 2.0 * row
    assert e.shape == want.shape == (3, 4) and e.dtype == want.dtype == np.float32
    np.testing.assert_allclose(e.get(), want, rtol=1e-6)
    i = fl.asarray(np.arange(5, dtype=np.int32))
    s = i * 3
    f = s + s * 1.5  # int32 step, then a float Python scalar: float64 as numpy has it
    want_f = np.arange(5, dtype=np.int32) * 3 + np.arange(5, dtype=np.int32) * 3 * 1.5
    assert f.dtype == want_f.dtype
    if device.has_fp64:
        np.testing.assert_allclose(f.get(), want_f)


def test_a_long_chain_is_found_by_signature(device, monkeypatch, passes):
    """``r = r * c + y`` 50 times: y, read by every step, is one operand (52 in all)."""
    xh = np.arange(8, dtype=np.float32)

    def build(y, c):
        r = fl.asarray(xh)
        for _ in range(50):
            r = r * c + y
        return r

    e = build(fl.asarray(xh + 1), 0.5)
    assert e._node.sig and len(e._node.operands) == 52
    entry = structure_entry([e._node], e.shape)[0]
    monkeypatch.setattr(prog, "_walk", None)  # (not walked: found by signature)
    other = build(fl.asarray(xh - 1), 0.25)
    assert structure_entry([other._node], other.shape)[0] is entry and len(passes) == 1


def test_a_large_expression_is_linearised_once(device, passes):
    """450 operations (about 2500 tokens of key): keyed by the walk, linearised once."""
    xh = np.arange(8, dtype=np.float32)

    def build(y, c):
        r = fl.asarray(xh)
        for _ in range(150):
            r = r * c + y * 0.5
        return r

    e = build(fl.asarray(xh + 1), 0.5)
    assert e._node.sig == 0  # (too many operands for a signature)
    hit = structure_entry([e._node], e.shape)
    assert hit is not None and len(passes) == 1
    other = build(fl.asarray(xh - 1), 0.25)
    assert structure_entry([other._node], other.shape)[0] is hit[0]
    assert len(passes) == 1


def test_large_structures_kept_are_bounded(device, monkeypatch):
    monkeypatch.setattr(prog, "LARGE_MAX", 2)
    prog.clear_structure_cache()
    x = fl.asarray(np.arange(4, dtype=np.float32))
    found = []
    for k in range(4):  # four structures of over 512 tokens (other literals)
        r = x
        for _ in range(90):  # (two operands a step: walked)
            r = r * 0.5 + x * 0.5
        r = r + fl.constant(float(k))
        found.append(structure_entry([r._node], r.shape))
    assert all(hit is not None for hit in found) and len(prog.structures) == 2
    prog.clear_structure_cache()
    assert prog._large[0] == 0


def test_first_positions_of_long_operand_lists():
    a, b, c = object(), object(), object()
    many = tuple(object() for _ in range(20))
    for ops in ((a, b, a, c, b), (a, *many, b, a, *many[::3], c, b)):
        assert prog._firsts(ops) == tuple(ops.index(o) for o in ops)
