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


@lru_cache(maxsize=1024)
def broadcast_signature(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[bool, ...]:
    pad = len(out_shape) - len(shape)
    full = (1,) * pad + shape
    return tuple(s != 1 and o != 1 for s, o in zip(full, out_shape))


def linearize(roots: Sequence[Node], out_shape: tuple[int, ...]) -> tuple[Program, Bindings]:
    entries: list[tuple] = []
    interned: dict[tuple, int] = {}
    ref_of: dict[int, int] = {}
    slot_of_storage: dict[int, int] = {}
    storages: list[Storage] = []
    scalars: list[np.generic] = []
    keep_alive: list[Node] = []  # ids stay unique only while the nodes live

    def intern(entry: tuple) -> int:
        ref = interned.get(entry)
        if ref is None:
            ref = interned[entry] = len(entries)
            entries.append(entry)
        return ref

    def visit_leaf(node: Node) -> int:
        if isinstance(node, Leaf):
            key = id(node.storage)
            slot = slot_of_storage.get(key)
            if slot is None:
                slot = slot_of_storage[key] = len(storages)
                storages.append(node.storage)
            sig = broadcast_signature(node.shape, out_shape)
            return intern(("load", slot, node.dtype.name, sig))
        if isinstance(node, Scalar):
            scalars.append(node.value)
            # each scalar node is its own argument; values are data, not structure
            return intern(("arg", len(scalars) - 1, node.dtype.name))
        if isinstance(node, Literal):
            return intern(("lit", node.dtype.name, node.value.item()))
        if isinstance(node, Iota):
            return intern(("iota", node.dtype.name, broadcast_signature(node.shape, out_shape)))
        raise AssertionError(f"unknown leaf node {type(node).__name__}")

    for root in roots:
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            nid = id(node)
            if nid in ref_of:
                continue
            if not isinstance(node, Apply):
                ref_of[nid] = visit_leaf(node)
                keep_alive.append(node)
                continue
            if not expanded:
                stack.append((node, True))
                for arg in reversed(node.args):
                    if id(arg) not in ref_of:
                        stack.append((arg, False))
                continue
            refs = tuple(ref_of[id(a)] for a in node.args)
            loop = tuple(d.name for d in node.loop)
            if isinstance(node, UserCall):
                entry = ("call", node.function.key, loop, refs)
            else:
                entry = ("op", node.op, loop, refs)
            ref_of[nid] = intern(entry)
            keep_alive.append(node)

    outputs = tuple(ref_of[id(r)] for r in roots)
    program = Program(tuple(entries), outputs, tuple(s == 1 for s in out_shape))
    return program, Bindings(storages, scalars)


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
