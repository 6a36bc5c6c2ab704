"""Installed distributions' metadata without :mod:`importlib.metadata`.

Importing ``importlib.metadata`` (and the email parser behind it) costs about ten
milliseconds, a tenth of ``import fuseloop``; fuseloop needs only whether a
distribution is installed and its version.  Both come from its ``*.dist-info``
(or ``*.egg-info``) directory on ``sys.path``, found here as the standard
library finds it: the first path entry that holds one whose normalised name
matches.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

__all__ = ["metadata_dir", "version"]

_SUFFIXES = (".dist-info", ".egg-info")


def _normalised(name: str) -> str:
    # (PEP 503: runs of "-", "_" and "." are one "_" in metadata directory names)
    return re.sub(r"[-_.]+", "_", name).lower()


def metadata_dir(dist: str) -> Path | None:
    """The metadata directory of the installed distribution ``dist``, or None."""
    want = _normalised(dist)
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                for e in it:
                    name = e.name
                    if name.endswith(_SUFFIXES) and \
                            _normalised(name.rpartition(".")[0].partition("-")[0]) == want:
                        return Path(e.path)
        except OSError:  # (not a directory: a zip file, a missing entry)
            continue
    return None


def version(dist: str) -> str | None:
    """The ``Version`` field of the installed ``dist``'s metadata, or None when it is
    not found this way (the caller may then ask :mod:`importlib.metadata`)."""
    where = metadata_dir(dist)
    if where is None:
        return None
    for name in ("METADATA", "PKG-INFO"):
        try:
            text = (where / name).read_text(encoding="utf-8")
        except OSError:
            continue
        for line in text.partition("\n\n")[0].splitlines():
            if line.startswith("Version:"):
                return line[len("Version:"):].strip()
    return None
