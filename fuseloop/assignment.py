"""Writing results: assignment into existing arrays and several results in one kernel."""

from __future__ import annotations

from typing import Any

from .array import Array, Constant, _coerce, _operand_node
from .dtypes import scalar_to
from .errors import DeviceError, ShapeError
from .evaluate import cast_node, reads_outside, run, run_into
from .expr.nodes import Leaf, Literal, Node, broadcast_shapes
from .expr.program import Target
from .trace_hooks import check_traced, trace_checks


def _broadcasts_after(value_shape: tuple[int, ...], dest_shape: tuple[int, ...]) -> bool:
    """Whether ``value_shape`` without its extra leading axes broadcasts to ``dest_shape``."""
    tail = value_shape[len(value_shape) - len(dest_shape):] if dest_shape else ()
    return len(value_shape) >= len(dest_shape) and all(
        v in (1, d) for v, d in zip(tail, dest_shape))


class NodeValue:
    """An expression node being assigned, not wrapped in an Array (no reader entry)."""

    __slots__ = ("node",)

    def __init__(self, node: Node) -> None:
        self.node = node


def assign(target: Array, value: Any, *, cast: str, value_is_held: bool,
           scatter: tuple[Any, tuple[int, ...]] | None = None, also: Array | None = None) -> None:
    """Write ``value`` (Array, node or scalar) into all of ``target``, in one kernel.

    ``target`` may be a strided view; ``scatter=(dest, shape)`` writes a value of
    ``shape`` to the positions a gathered index names (``a[idx] = v``): ``dest`` is
    the :class:`Target`, or a function giving it, called once the value is known to
    fit and before anything is written (it may check the indices and raise).  ``also``: a
    lazy array the caller keeps (``x[x > 0] = v``'s mask), computed in the same kernel.
    """
    if trace_checks:  # (fl.fuse refuses writes into a traced function's arguments)
        check_traced(target, "assignment")
    value = _coerce(value)
    held_array: Array | None = None
    if isinstance(value, NodeValue):
        node = value.node
    elif isinstance(value, Array):
        if value.device is not target.device:
            raise DeviceError(
                f"cannot assign an array on {value.device} into one on {target.device}")
        if value_is_held and value._storage is None:
            if value.shape == target.shape and scatter is None:
                held_array = value
            else:
                value.eval()  # the caller keeps it: give it its own buffer first
        node = value._node
    else:
        node = _operand_node(value, target.dtype) if not isinstance(value, Constant) else \
            Literal(scalar_to(value.value, value.dtype or target.dtype))
    dest_shape = target.shape if scatter is None else scatter[1]
    extra = len(node.shape) - len(dest_shape)
    if extra > 0 and not isinstance(value, NodeValue) and all(
            n == 1 for n in node.shape[:extra]):
        # as numpy, an assigned value may have leading unit axes (not an in-place operand)
        from .expr.views import affine_view

        node = affine_view(node, node.shape[extra:], (0,) * len(node.shape),
                           [[int(d == k - extra) for d in range(len(dest_shape))]
                            for k in range(len(node.shape))])
    if node.shape != dest_shape and broadcast_shapes(node.shape, dest_shape) != dest_shape:
        if scatter is not None and 0 in dest_shape and _broadcasts_after(node.shape, dest_shape):
            return  # numpy: an empty fancy-indexed target takes a value with leading axes more
        raise ShapeError(
            f"could not broadcast input array from shape {node.shape} into shape {dest_shape}")
    node = cast_node(node, target.dtype)
    if target._storage is None:
        target.eval()
    storage = target._storage
    assert storage is not None
    leaf = target._node
    if also is not None and held_array is None and also.is_lazy and also.shape == target.shape:
        held_array = also
    if scatter is not None:
        dest: Any = scatter[0]
        if callable(dest):
            dest = dest()
        held_array = None
    elif target.is_contiguous:
        dest = storage
    else:
        assert isinstance(leaf, Leaf)  # (concrete: it has a buffer)
        dest = Target(storage, leaf.view_strides(), leaf.offset)
    # lazy arrays still reading the old contents are evaluated before the write
    # (those reading only elements this write leaves alone need not wait)
    written = None if scatter is not None else (
        leaf.shape, leaf.view_strides(), leaf.offset)  # type: ignore[attr-defined]
    pending = [r for r in storage.live_readers() if r._storage is None and r is not held_array
               and r is not value and (written is None or not reads_outside(
                   r._node, storage, written, target.dtype.itemsize))]
    if pending:
        compute(*pending)
    if held_array is not None:
        # the caller keeps the value: materialise it too, in the same kernel
        out = run([node, held_array._node], target.shape, target.device, [dest, None])
        held_array._become(out[1])
    elif dest is storage:
        run_into(node, dest_shape, target.device, storage)
    else:
        run([node], dest_shape, target.device, [dest])


def compute(*arrays: Array) -> tuple[Array, ...]:
    """Evaluate several arrays, one kernel for each group of equal shape and device.

    ``a, b = fl.compute(x + y, x - y)`` reads ``x`` and ``y`` once and writes both
    results (VexCL's tuple assignment).  Returns the arrays, now concrete.
    """
    groups: dict[tuple, list[Array]] = {}
    seen: set[int] = set()
    for a in arrays:
        if not isinstance(a, Array):
            raise TypeError(f"fl.compute takes fuseloop arrays, got {type(a).__name__}")
        if a._storage is None and id(a) not in seen:
            seen.add(id(a))
            groups.setdefault((a.device.index, a.shape), []).append(a)
    for (_, shape), members in groups.items():
        outs = run([m._node for m in members], shape, members[0].device)
        for m, s in zip(members, outs):
            m._become(s)
    return arrays
