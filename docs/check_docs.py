"""Check that the documentation's code runs.

Runs every ``examples/*.py`` and every fenced ```` ```python ```` block in ``README.md`` and
``docs/*.md`` whose first non-blank line starts with ``import``, each in a fresh Python
process from the repository root. Blocks that do not start with ``import`` are fragments
(they rely on names from an earlier block) and are not run. The checks run with
``FUSELOOP_HOST_PATH=0``: the examples count kernels, and on PoCL the host path would
compute their small arrays with numpy instead (api.md, "Small work on the CPU").

Usage: ``python docs/check_docs.py [--list] [--timeout SECONDS] [PATTERN ...]``
(PATTERNs select checks whose name contains any of them). Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def doc_blocks() -> list[tuple[str, str]]:
    """(name, code) for each runnable python block of README.md and docs/*.md."""
    found = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if not md.exists():
            continue
        text = md.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            code = m.group(1)
            first = next((ln for ln in code.splitlines() if ln.strip()), "")
            if not first.lstrip().startswith(("import ", "from ")):
                continue
            line = text.count("\n", 0, m.start()) + 1
            found.append((f"{md.relative_to(ROOT)}:{line}", code))
    return found


def examples() -> list[tuple[str, Path]]:
    return [(str(p.relative_to(ROOT)), p) for p in sorted((ROOT / "examples").glob("*.py"))]


def run(name: str, argv: list[str], timeout: float) -> bool:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "FUSELOOP_HOST_PATH": "0"})
    except subprocess.TimeoutExpired:
        print(f"FAIL {name}: timed out after {timeout:.0f} s")
        return False
    dt = time.perf_counter() - t0
    if proc.returncode == 0:
        print(f"ok   {name} ({dt:.1f} s)")
        return True
    print(f"FAIL {name} (exit code {proc.returncode}, {dt:.1f} s)")
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-30:]
    for ln in tail:
        print(f"     | {ln}")
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="*", help="only run checks whose name contains one")
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per check")
    args = ap.parse_args()

    checks: list[tuple[str, list[str]]] = []
    for name, path in examples():
        checks.append((name, [sys.executable, str(path)]))
    for name, code in doc_blocks():
        checks.append((name, [sys.executable, "-c", code]))
    if args.patterns:
        checks = [c for c in checks if any(p in c[0] for p in args.patterns)]
    if args.list:
        for name, _ in checks:
            print(name)
        return 0
    if not checks:
        print("no checks selected")
        return 1

    failed = [name for name, argv in checks if not run(name, argv, args.timeout)]
    print(f"{len(checks) - len(failed)}/{len(checks)} passed")
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
