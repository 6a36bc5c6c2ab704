"""Inspection and synchronisation helpers of the public API."""

from __future__ import annotations

from .array import Array
from .errors import ShapeError
from .expr.nodes import register_readers
from .runtime import devices as _devices
from .runtime import transfer as _transfer
from .runtime.transfer import finish


def show_code(*exprs: Array) -> str:
    """The OpenCL source of the kernels that evaluating ``exprs`` together would run.

    Builds (or finds in the cache) the kernels but runs nothing.  Expressions
    with reductions may need more than one kernel (a full reduction runs in
    two stages, for instance); their sources are shown in order.
    """
    from . import evaluate

    if not exprs:
        raise TypeError("show_code needs at least one array expression")
    shapes = {e.shape for e in exprs}
    if len(shapes) != 1:
        raise ShapeError(f"show_code shows one kernel; these shapes differ: {sorted(shapes)}")
    shape = exprs[0].shape
    device = exprs[0].device
    with evaluate.capturing_sources() as sources:
        evaluate.run([e._node for e in exprs], shape, device)
    if len(sources) == 1:
        return sources[0]
    return "\n".join(f"/* kernel {k + 1} of {len(sources)} */\n{src}"
                     for k, src in enumerate(sources))


def synchronize() -> None:
    """Wait until all work enqueued on every device in use has finished.

    Also lets go of recent lazy arrays that nothing holds any more (see
    ``fuseloop.expr.nodes.recent_lazy``), so their buffers are freed by the time it returns.
    """
    register_readers()
    # (every device with a runtime, listed or not; deferred small launches go first)
    runtimes = list(_devices._runtimes.values())
    if len(runtimes) > 1:
        # every device handed its work before the host waits for any: finishing one
        # device's queue at a time would start the next only after the last one's
        # wait (an OpenCL driver need not submit a queue until it is flushed)
        for rt in runtimes:
            rt.flush()
            rt.submit(rt.bare_queue)
    for rt in runtimes:
        finish(rt.device)
    # (a deferred scatter check's or gather flag's error surfaces here)
    for hook in tuple(_transfer.before_read):
        hook()
