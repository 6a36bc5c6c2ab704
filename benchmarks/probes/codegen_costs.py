"""CPU time of each kernel's lowering, recipe and Loopy code generation in a pytest run.

A pytest plugin: it wraps :func:`fuseloop.lower.codegen.lower`, ``apply_recipe`` and
``generate`` (what every cache miss runs, for every device and recipe a test uses)
and appends one line per generated kernel to ``$CODEGEN_COSTS.<pid>.tsv``: CPU
seconds of lowering, of the recipe and of code generation, the recipe, the kernel's
name and its count of instructions, inames and domains.  With ``CODEGEN_PROFILE=1``
each code generation also runs under cProfile (CPU clock; profiling slows Python about
twofold) and the summed profile goes to ``$CODEGEN_COSTS.<pid>.prof``.

    CODEGEN_COSTS=/tmp/cg FUSELOOP_CACHE_DIR=$(mktemp -d) PYTHONPATH=benchmarks/probes \\
        python -m pytest -q -p no:cacheprovider -p codegen_costs tests/test_reductions.py
    python benchmarks/probes/codegen_costs.py /tmp/cg [--top 25]

The second command sums the lines by recipe and prints the profile's top functions.
Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from collections import defaultdict
from typing import Any

_PROFILE: Any = None


def _out(ext: str) -> str:
    return f"{os.environ['CODEGEN_COSTS']}.{os.getpid()}.{ext}"


def _shape(t_unit: Any) -> str:
    knl = t_unit.default_entrypoint
    return f"{len(knl.instructions)}\t{len(knl.all_inames())}\t{len(knl.domains)}"


def pytest_configure(config: Any) -> None:
    if "CODEGEN_COSTS" not in os.environ:
        return
    import cProfile

    from fuseloop.lower import codegen

    global _PROFILE
    if os.environ.get("CODEGEN_PROFILE", "") not in ("", "0"):
        _PROFILE = cProfile.Profile(time.process_time)
    pending: dict[str, float] = {}
    lower, recipe, generate = codegen.lower, codegen.apply_recipe, codegen.generate

    def timed_lower(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return lower(*args, **kwargs)
        finally:
            pending["lower"] = time.process_time() - t0

    def timed_recipe(t_unit: Any, rcp: Any, device: Any) -> Any:
        t0 = time.process_time()
        try:
            return recipe(t_unit, rcp, device)
        finally:
            pending["recipe"] = time.process_time() - t0
            pending["name"] = rcp.name  # type: ignore[assignment]

    def timed_generate(t_unit: Any, device: Any) -> Any:
        t0 = time.process_time()
        if _PROFILE is not None:
            _PROFILE.enable()
        try:
            return generate(t_unit, device)
        finally:
            if _PROFILE is not None:
                _PROFILE.disable()
            dt = time.process_time() - t0
            with open(_out("tsv"), "a") as f:
                f.write(f"{pending.pop('lower', 0.0):.4f}\t{pending.pop('recipe', 0.0):.4f}\t"
                        f"{dt:.4f}\t{pending.pop('name', '?')}\t{device.type}\t"
                        f"{_shape(t_unit)}\n")

    codegen.lower, codegen.apply_recipe, codegen.generate = (
        timed_lower, timed_recipe, timed_generate)


def pytest_unconfigure(config: Any) -> None:
    if _PROFILE is not None:
        _PROFILE.dump_stats(_out("prof"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    rows = []
    for path in glob.glob(f"{args.prefix}.*.tsv"):
        with open(path) as f:
            rows += [line.rstrip("\n").split("\t") for line in f]
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for low, rcp, gen, name, dev, *_ in rows:
        for key in (f"{name} ({dev})", "all"):
            acc = by[key]
            acc[0] += 1
            acc[1] += float(low)
            acc[2] += float(rcp)
            acc[3] += float(gen)
    print(f"{'recipe':34s} {'kernels':>7s} {'lower':>8s} {'recipe':>8s} {'codegen':>8s}"
          f" {'codegen/kernel':>14s}")
    for key, (n, low, rcp, gen) in sorted(by.items(), key=lambda kv: -kv[1][3]):
        print(f"{key:34s} {n:7d} {low:8.2f} {rcp:8.2f} {gen:8.2f} {gen / n:14.3f}")
    profiles = glob.glob(f"{args.prefix}.*.prof")
    if profiles:
        import pstats

        stats = pstats.Stats(*profiles)
        for key in ("cumulative", "tottime"):
            stats.sort_stats(key).print_stats(args.top)


if __name__ == "__main__":
    main()
