"""What some devices cannot take: float64 (shared by the complex tests), and what some OpenCL
implementations cannot take, for tests that force a GPU's settings on any device (shared by
the linalg tests)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def asserts_on_group_barriers(device: Any) -> bool:
    """Whether ``device`` is a PoCL 5+ CPU device, whose work-group compiler aborts the
    process (``region_entry_barrier``) on the linalg kernels' barriers in groups of more
    than one work-item; fuseloop gives a CPU groups of one, which have none."""
    runtime = getattr(device, "runtime", "") or ""
    if getattr(device, "type", None) != "cpu" or not runtime.startswith("PoCL "):
        return False
    major = runtime.split()[1].split(".")[0]
    return major.isdigit() and int(major) >= 5


def skip_without_fp64(device: Any, dtype: Any) -> None:
    """Skips the test where ``dtype`` is made of 8-byte floats (float64, complex128) and
    ``device`` has none."""
    if np.dtype(dtype) in (np.float64, np.complex128) and not device.has_fp64:
        pytest.skip(f"{device.name} has no float64")
