"""Linearise an expression DAG into a hashable SSA program.

The program is a tuple of entries in dependency order; entries refer to earlier
ones by position.  It is both the structural part of the cache key and the input
of lowering, so the key is computed without touching Loopy.  Entries are
hash-consed: an array read twice is loaded once and a subexpression built twice
(even as separate Python objects) is computed once.

Entries:

* ``("load", slot, dtype, sig)``: element of input buffer ``slot``; ``sig[d]``
  tells whether the input varies along output dimension ``d`` (broadcasting).
* ``("arg", slot, dtype)``: scalar kernel argument ``slot``.
* ``("lit", dtype, value)``: literal baked into the source.
* ``("iota", dtype, sig)``: flat index within the node's own shape.
* ``("op", name, loop, refs)`` / ``("call", key, loop, refs)``: elementwise op.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .nodes import Apply, Iota, Leaf, Literal, Node, Scalar, Storage, UserCall


class Program(NamedTuple):
    entries: tuple[tuple, ...]
    outputs: tuple[int, ...]
    out_ones: tuple[bool, ...]  # which output dimensions have length 1


class Bindings(NamedTuple):
    """The run-time values a program is launched with."""

    storages: list[Storage]
    scalars: list[np.generic]
    sizes: tuple[int, ...]  # length of each collapsed output dimension


@lru_cache(maxsize=1024)
def broadcast_signature(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[bool, ...]:
    pad = len(out_shape) - len(shape)
    full = (1,) * pad + shape
    return tuple(s != 1 and o != 1 for s, o in zip(full, out_shape))


def linearize(roots: Sequence[Node], out_shape: tuple[int, ...]) -> tuple[Program, Bindings]:
    # The hot path of every evaluation.  Node ids stay unique during the walk
    # because the roots keep every node alive.
    entries: list[tuple] = []
    interned: dict[tuple, int] = {}
    ref_of: dict[int, int] = {}
    slot_of_storage: dict[int, int] = {}
    storages: list[Storage] = []
    scalars: list[np.generic] = []

    def visit(node: Node) -> int:
        ref = ref_of.get(id(node))
        if ref is not None:
            return ref
        cls = type(node)
        if cls is Apply:
            entry: tuple = ("op", node.op, node.loop_key,  # type: ignore[attr-defined]
                            tuple([visit(a) for a in node.args]))  # type: ignore[attr-defined]
        elif cls is Leaf:
            skey = id(node.storage)  # type: ignore[attr-defined]
            slot = slot_of_storage.get(skey)
            if slot is None:
                slot = slot_of_storage[skey] = len(storages)
                storages.append(node.storage)  # type: ignore[attr-defined]
            entry = ("load", slot, node.dtype.char, broadcast_signature(node.shape, out_shape))
        elif cls is Scalar:
            # each scalar node is its own argument: values are data, not structure
            entry = ("arg", len(scalars), node.dtype.char)
            scalars.append(node.value)  # type: ignore[attr-defined]
        elif cls is UserCall:
            entry = ("call", node.function.key, node.loop_key,  # type: ignore[attr-defined]
                     tuple([visit(a) for a in node.args]))  # type: ignore[attr-defined]
        elif cls is Literal:
            entry = ("lit", node.dtype.char, node.value.item())  # type: ignore[attr-defined]
        elif cls is Iota:
            entry = ("iota", node.dtype.char, broadcast_signature(node.shape, out_shape))
        else:
            raise AssertionError(f"unknown node {cls.__name__}")
        ref = interned.get(entry)
        if ref is None:
            ref = interned[entry] = len(entries)
            entries.append(entry)
        ref_of[id(node)] = ref
        return ref

    limit = sys.getrecursionlimit()
    try:
        outputs = tuple([visit(r) for r in roots])
    except RecursionError:
        # very deep expression chains: retry with room for them
        entries.clear(), interned.clear(), ref_of.clear()
        slot_of_storage.clear(), storages.clear(), scalars.clear()
        sys.setrecursionlimit(max(limit, 200_000))
        try:
            outputs = tuple([visit(r) for r in roots])
        finally:
            sys.setrecursionlimit(limit)
    if len(out_shape) == 1 and out_shape[0] != 1:
        return (Program(tuple(entries), outputs, (False,)),
                Bindings(storages, scalars, out_shape))
    # Canonical form: broadcast signatures over collapsed dimensions, so that e.g.
    # (7, 9) and (63,) arrays without broadcasting share one kernel.
    raw = Program(tuple(entries), outputs, _ones_mask(out_shape))
    groups = collapse_groups(raw)
    canonical = []
    for e in entries:
        if e[0] == "load":
            e = (e[0], e[1], e[2], tuple(e[3][g[0]] for g in groups))
        elif e[0] == "iota":
            e = (e[0], e[1], tuple(e[2][g[0]] for g in groups))
        canonical.append(e)
    sizes = tuple(math.prod(out_shape[d] for d in g) for g in groups)
    program = Program(tuple(canonical), outputs, (False,) * len(groups))
    return program, Bindings(storages, scalars, sizes)


@lru_cache(maxsize=256)
def _ones_mask(shape: tuple[int, ...]) -> tuple[bool, ...]:
    return tuple(s == 1 for s in shape)


def collapse_groups(program: Program) -> tuple[tuple[int, ...], ...]:
    """Group output dimensions that every input treats alike.

    Adjacent dimensions that all inputs either both traverse or both broadcast
    merge into one; length-1 dimensions drop out.  Arrays that all share the
    output's shape collapse to a single flat dimension.
    """
    sigs = [e[3] if e[0] == "load" else e[2] for e in program.entries if e[0] in ("load", "iota")]
    kept = [d for d, one in enumerate(program.out_ones) if not one]
    groups: list[list[int]] = []
    for d in kept:
        if groups and all(sig[groups[-1][-1]] == sig[d] for sig in sigs):
            groups[-1].append(d)
        else:
            groups.append([d])
    return tuple(tuple(g) for g in groups)
