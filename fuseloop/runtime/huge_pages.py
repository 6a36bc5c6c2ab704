"""Transparent huge pages under a CPU device's large buffers.

A CPU device's buffers are this process's memory, allocated by the driver (PoCL: with
``malloc``).  Where the kernel gives transparent huge pages only to memory that asks for
them (``madvise`` in ``/sys/kernel/mm/transparent_hugepage/enabled``, a common default),
those buffers get 4 KiB pages while numpy's large arrays get huge ones (numpy asks), and a
memory-bound kernel reading 4 KiB pages is slower for its TLB misses
(``benchmarks/probes/pocl_huge_pages.py`` measures it).  So the backend advises the huge pages lying
wholly inside a new buffer (``madvise(MADV_HUGEPAGE)``) before anything writes to it: the
first write then faults in whole huge pages.  Pages already written stay as they are,
so a block reused from the pool keeps what it got when it was new.

What the policy means for a buffer of a CPU device:

* ``madvise``: advised, from one huge page up (:func:`advise_from`);
* ``always``: every large anonymous mapping gets huge pages already: nothing to do;
* ``never``, or no policy to read (not Linux): advice would be ignored: nothing to do.

Never on other devices: a GPU's buffers are not this process's pages.
``FUSELOOP_HUGE_PAGES=0`` turns the advice off (read when a device is opened).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

THP = Path("/sys/kernel/mm/transparent_hugepage")
#: ``0``/``off``/``no``/``false``: never advise huge pages (read when a device is opened)
ENV = "FUSELOOP_HUGE_PAGES"
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
_libc: ctypes.CDLL | None = None


def _selected(path: Path) -> str | None:
    """The bracketed choice of a sysfs policy file (``always [madvise] never``)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def page_size(root: Path = THP) -> int:
    """Bytes of a huge page of the kernel's page tables (``hpage_pmd_size``: 2 MiB on
    x86-64); 2 MiB where it cannot be read."""
    try:
        return int((root / "hpage_pmd_size").read_text())
    except (OSError, ValueError):
        return 2 << 20


def policy(root: Path = THP) -> str:
    """The kernel's policy for huge pages of :func:`page_size`: ``always``, ``madvise``,
    ``never``, or ``none`` (no policy to read).  A policy of that page size of its own
    (``hugepages-2048kB/enabled``, Linux 6.8+) wins over the global one unless it is
    ``inherit``."""
    own = _selected(root / f"hugepages-{page_size(root) >> 10}kB" / "enabled")
    chosen = own if own is not None and own != "inherit" else _selected(root / "enabled")
    return chosen if chosen in ("always", "madvise", "never") else "none"


def advise_from(device_type: str, root: Path = THP) -> int | None:
    """The least buffer size (bytes) whose huge pages a device of ``device_type`` advises
    before first use, or None for none (see the module's docstring)."""
    if device_type != "cpu" or policy(root) != "madvise":
        return None
    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    return page_size(root)


def advise(address: int, nbytes: int, page: int) -> int:
    """``madvise(MADV_HUGEPAGE)`` over the whole pages of ``page`` bytes inside ``nbytes``
    bytes from ``address`` (not beyond: memory next to a buffer is not its own); the bytes
    advised (0: none lie wholly inside, or the kernel refused)."""
    global _libc
    start = -(-address // page) * page
    end = (address + nbytes) // page * page
    if end <= start:
        return 0
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except (OSError, TypeError):  # (no C library to load by that name: not Linux)
            return 0
    madvise = getattr(_libc, "madvise", None)
    if madvise is None:
        return 0
    failed = madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_HUGEPAGE)
    return 0 if failed else end - start


__all__ = ["ENV", "THP", "advise", "advise_from", "page_size", "policy"]
