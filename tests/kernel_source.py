"""Reading a generated kernel's source in either backend's language: Loopy's OpenCL C or
its CUDA C (``fuseloop.backends.cuda``), for the tests that assert what a kernel's code
does and must run on both."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """How one language spells what the source-reading tests look for."""

    name: str
    entry: str  # a regex matching each kernel entry point's qualifier
    local_memory: str  # the qualifier of memory a work-group (block) shares
    barrier: str  # a work-group barrier's call
    local_ids: tuple[str, str, str]  # Loopy's work-item id along axes 0, 1, 2
    group_size: str  # a regex of the declared work-group size (its numbers, grouped)

    def local_id(self, axis: int) -> str:
        return self.local_ids[axis]

    def reads_local_id(self, text: str) -> bool:
        """Whether ``text`` reads a work-item id along any axis."""
        return any(lid in text for lid in self.local_ids)


OPENCL = Dialect("opencl", r"\b__kernel\b", "__local", "barrier",
                 ("lid(0)", "lid(1)", "lid(2)"),
                 r"reqd_work_group_size\((\d+), (\d+), (\d+)\)")
# (Loopy's CUDA target declares the threads of a block, not its axes: __launch_bounds__)
CUDA = Dialect("cuda", r'\bextern "C" __global__', "__shared__", "__syncthreads",
               ("tIdx(x)", "tIdx(y)", "tIdx(z)"), r"__launch_bounds__\((\d+)\)")

# Loopy's hint that a loop be unrolled: OpenCL C 2.0's attribute in Loopy's own OpenCL
# (fuseloop.lower.codegen rewrites it to the pragma), the pragma in its CUDA
_UNROLL_HINT = re.compile(r"opencl_unroll_hint|#pragma unroll")


def dialect(source: str) -> Dialect:
    """The language ``source`` is written in, from its kernels' qualifiers."""
    for known in (CUDA, OPENCL):
        if re.search(known.entry, source):
            return known
    raise ValueError(f"no OpenCL or CUDA kernel in this source:\n{source[:400]}")


def entry_points(source: str) -> int:
    """How many kernels ``source`` defines."""
    return len(re.findall(dialect(source).entry, source))


def group_threads(source: str) -> int:
    """The work-items of one work-group (threads of a block) the kernel declares."""
    found = re.search(dialect(source).group_size, source)
    assert found, f"no declared work-group size in:\n{source[:400]}"
    return math.prod(int(n) for n in found.groups())


def unroll_hinted(source: str) -> bool:
    """Whether ``source`` asks its compiler to unroll a loop."""
    return _UNROLL_HINT.search(source) is not None
