"""What some OpenCL implementations cannot take, for tests that force a GPU's settings on
any device (shared by the linalg tests)."""

from __future__ import annotations

from typing import Any


def asserts_on_group_barriers(device: Any) -> bool:
    """Whether ``device`` is a PoCL 5+ CPU device, whose work-group compiler aborts the
    process (``region_entry_barrier``) on the linalg kernels' barriers in groups of more
    than one work-item; fuseloop gives a CPU groups of one, which have none."""
    runtime = getattr(device, "runtime", "") or ""
    if getattr(device, "type", None) != "cpu" or not runtime.startswith("PoCL "):
        return False
    major = runtime.split()[1].split(".")[0]
    return major.isdigit() and int(major) >= 5
