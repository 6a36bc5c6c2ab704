"""A loop's statement into a view, replayed from its plan in one frame (issue 26).

``A[i, j] += A[i, j - 1]`` or ``path[i, :] = minimum(...)`` in a loop is an assignment
whose run plan is remembered under its signature and target (``run_plans``' plans by
signature) and replayed by the plan's Ready or Moving (``plan_ready``,
``plan_moving``).  The general route there, ``evaluate.run`` into the target, asks in
turn: the pending flags, the host path, capturing and recording, the flags' scope, the
signature's look-up table, each a frame.  :func:`replay_into` asks what decides those
for this statement at once, replays it where its Ready or Moving runs it, and else
hands the signed key it made to ``run_plans.run`` (in the flags' scope, as
``evaluate.run`` would), so nothing is computed twice.
"""

from __future__ import annotations

import math

from . import evaluate as _ev
from . import flags as _flags
from . import host_path as _host
from . import run_plans as _rp
from .expr import program as _prog
from .expr.nodes import Node
from .expr.program import Target
from .runtime.devices import Device
from .signed_keys import _free_views, _signed_key


def replay_into(root: Node, out_shape: tuple[int, ...], device: Device, target: Target
                ) -> bool:
    """``evaluate.run([root], out_shape, device, [target])`` of a statement into a view
    (no mask or scatter) whose signature was met before; False (nothing done) where
    anything else applies: the caller runs it."""
    # (the host path's test on a CPU device only: host_path.host_device needs one)
    if _ev.capturing_threads[0] or _ev.recording_threads[0] or _prog.CHECK_STRUCTURE_CACHE \
            or (device.type == "cpu" and _host.within_limit(math.prod(out_shape), (root,))
                and _host.eligible((root,), out_shape, device, (target,))):
        return False
    free = _free_views((root,))
    if free is None or _rp._target_sigs.get(free[0]) is not True:
        return False  # (met first, or not looked up by signature: run's rules)
    targets = (target,)
    signed = _signed_key((root,), out_shape, device, targets, free)
    if signed is None:
        return False
    entry = _rp._signed.get(signed[0])
    if entry is not None and entry[4] is None and not _flags._unread:
        common = _rp.pick_common(entry, signed, device)
        if common:
            plan, storages, scalars, offsets = common
            # (their launches read no error flag; a step writing the target reads the
            # pending ones first)
            if _rp.run_prepared(plan, storages, scalars, device, offsets) is not None:
                return True
            _flags.check_pending()  # (evaluate.run's, before a target is written)
            # (the general replay, which makes its Ready or Moving)
            _flags.deferring(_rp._replay_signed, plan, storages, scalars, device, offsets,
                             False, True)
            return True
    elif entry is None and not _flags._unread \
            and _rp.replay_grown(signed, out_shape, device) is not None:
        return True  # (at lengths of its own: plan_growing)
    _flags.check_pending()
    _flags.deferring(_rp.run, [root], out_shape, device, [target], signed)
    return True
