"""The package's line budget: lines per module, the total, and what is over budget.

Flags modules over MODULE_BUDGET lines and functions (methods included) over
FUNCTION_BUDGET lines, by their span in the source (``ast``: from the ``def`` or
its first decorator to the last line).  It reports and always exits 0: CI prints
it (``.ci/run``), splitting what it flags is left to review.

Usage: ``python .ci/line_budget.py [package folder, default fuseloop]``
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE_BUDGET = 800
FUNCTION_BUDGET = 80


def long_functions(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of each function longer than the budget."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                length = (child.end_lineno or child.lineno) - first + 1
                if length > FUNCTION_BUDGET:
                    found.append((name, first, length))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "fuseloop")
    total = 0
    over_modules: list[tuple[str, int]] = []
    over_functions: list[tuple[str, str, int, int]] = []
    rows = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        n = len(source.splitlines())
        total += n
        rows.append((str(path), n))
        if n > MODULE_BUDGET:
            over_modules.append((str(path), n))
        for name, first, length in long_functions(ast.parse(source, str(path))):
            over_functions.append((str(path), name, first, length))
    width = max((len(p) for p, _ in rows), default=0)
    for p, n in rows:
        print(f"{p:<{width}}  {n:>6}" + ("  over budget" if n > MODULE_BUDGET else ""))
    print(f"{'total (' + str(len(rows)) + ' modules)':<{width}}  {total:>6}")
    print(f"\nmodules over {MODULE_BUDGET} lines: {len(over_modules)}")
    for p, n in over_modules:
        print(f"  {p}: {n} lines")
    print(f"functions over {FUNCTION_BUDGET} lines: {len(over_functions)}")
    for p, name, first, length in sorted(over_functions, key=lambda f: -f[3]):
        print(f"  {p}:{first} {name}: {length} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
