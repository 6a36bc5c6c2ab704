"""Command line: ``fuseloop devices``, ``demo``, ``cache --info`` / ``info``, ``cache --clear`` /
``clear``, ``bench``, ``tune`` (``--show``, ``--clear``, ``--workloads``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np


def _devices(_args: argparse.Namespace) -> int:
    import fuseloop as fl
    from fuseloop.runtime.icd import registration

    found = fl.devices()
    notes = [f"note: {n}" for n in registration().notes]
    if not found:
        print("\n".join(["no OpenCL devices found", *notes]))
        return 1
    default = fl.get_device()
    print(f"{'':2}{'#':>2}  {'type':<5} {'fp64':<4} {'memory':>10}  name  [runtime]")
    for d in found:
        mark = "*" if d is default else " "
        print(f"{mark:2}{d.index:>2}  {d.type:<5} {'yes' if d.has_fp64 else 'no':<4} "
              f"{d.global_mem_size / 2**30:>7.1f} GiB  {d.name}  [{d.runtime or d.platform}]")
        if not d.usable:
            print(f"{'':6}cannot build kernels: {d.problem}")
    print("* = default device (FUSELOOP_DEVICE selects another: an index, gpu, cpu, or a "
          "substring of a name or runtime such as pocl or intel)")
    for note in notes:
        print(note)
    if not any(d.usable for d in found):
        print("no device here can build kernels (see above)")
        return 1
    return 0


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _demo(args: argparse.Namespace) -> int:
    import fuseloop as fl

    if args.device is not None:
        fl.set_device(args.device)
    dev = fl.get_device()
    n = 2**args.log2
    print(f"fuseloop demo on {dev}, {n} float32 elements\n")
    rng = np.random.default_rng(0)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, y = fl.asarray(xh), fl.asarray(yh)

    fl.reset_stats()
    z = 2 * x + x * y - 3 * y
    print("z = 2*x + x*y - 3*y   # lazy: nothing has run yet,", fl.stats()["kernels_launched"],
          "kernels launched")
    t = time.perf_counter()
    zh = z.get()
    first = time.perf_counter() - t
    np.testing.assert_allclose(zh, 2 * xh + xh * yh - 3 * yh, rtol=1e-5, atol=1e-6)
    print(f"z.get(): first evaluation {first * 1e3:.0f} ms (generate, compile, run);"
          f" matches numpy; stats: {fl.stats()}")
    print("\nthe kernel that ran:\n" + fl.show_code(2 * x + x * y - 3 * y))

    out = fl.empty_like(x)

    def run_fused() -> None:
        out[...] = 2 * x + x * y - 3 * y
        fl.synchronize()

    run_fused()
    t_fl = _best(run_fused)
    t_np = _best(lambda: 2 * xh + xh * yh - 3 * yh)
    gbs = 3 * 4 * n / 1e9
    print(f"cached evaluation: fuseloop {t_fl * 1e3:.2f} ms ({gbs / t_fl:.1f} GB/s), "
          f"numpy {t_np * 1e3:.2f} ms ({gbs / t_np:.1f} GB/s): {t_np / t_fl:.1f}x numpy")

    fl.reset_stats()
    fl.compute(x + y, x - y)
    print(f"\na, b = fl.compute(x + y, x - y): {fl.stats()['kernels_launched']} kernel")
    fl.reset_stats()
    x += 1
    print(f"x += 1: {fl.stats()['kernels_launched']} kernel, in place")
    squared_radius = fl.function("float squared_radius(float x, float y)",
                                 "return x * x + y * y;")
    r = fl.sqrt(squared_radius(x, y))
    np.testing.assert_allclose(r.get(), np.sqrt((xh + 1) ** 2 + yh**2), rtol=1e-5)
    print("user function squared_radius(x, y) fused into sqrt(...): matches numpy")
    print(f"\nfinal stats: {fl.stats()}")
    return 0


def _format_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _cache_info(args: argparse.Namespace) -> int:
    import json

    from .cache import disk_cache_info, memory_cache_size

    info = disk_cache_info()
    info["memory_max_entries"] = memory_cache_size()
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    memory = (f"memory cache:   at most {info['memory_max_entries']} kernels per process "
              "(FUSELOOP_MEMORY_CACHE_SIZE)")
    if info["disabled"]:
        print("disk cache: disabled (FUSELOOP_CACHE_DIR="
              f"{os.environ.get('FUSELOOP_CACHE_DIR', '')!r}); kernels are cached in memory only")
        print(f"schema version: {info['schema_version']}")
        print(memory)
        return 0
    where = "set by FUSELOOP_CACHE_DIR" if info["source"] == "FUSELOOP_CACHE_DIR" else "default"
    print(f"directory:      {info['directory']} ({where}"
          f"{'' if info['exists'] else ', does not exist yet'})")
    print(f"schema version: {info['schema_version']}")
    older = info["entries"] - info["current_schema_entries"]
    print(f"entries:        {info['entries']}"
          + (f" ({older} from older schema versions)" if older else ""))
    print(f"total size:     {_format_bytes(info['total_bytes'])}")
    bound = (f"{_format_bytes(info['max_bytes'])} ({info['max_bytes']} bytes), least recently "
             "used entries go first" if info["max_bytes"] > 0 else "none")
    print(f"size bound:     {bound} (FUSELOOP_DISK_CACHE_MAX_BYTES)")
    print(memory)
    return 0


def _cache_clear(_args: argparse.Namespace) -> int:
    from .cache import cache_dir, clear_disk_cache

    directory = cache_dir()
    if directory is None:
        print("disk cache: disabled (FUSELOOP_CACHE_DIR); nothing to clear")
        return 0
    removed, freed = clear_disk_cache(directory)
    print(f"removed {removed} kernel cache entries ({_format_bytes(freed)}) from {directory}")
    return 0


def _cache_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """'info' or 'clear', from the subcommand or the flag (exactly one of them)."""
    sub, flag = args.cache_command, args.cache_flag
    if sub is None and flag is None:
        parser.error("name what to do: info or clear (or --info, --clear)")
    if sub is not None and flag is not None and sub != flag:
        parser.error(f"'{sub}' and '--{flag}' ask for different things; give one")
    command = sub or flag
    if args.cache_json and command != "info":
        parser.error("--json goes with --info")
    args.json = getattr(args, "json", False) or args.cache_json
    return command


def _tune(args: argparse.Namespace) -> int:
    import fuseloop as fl

    from . import tuning
    from .tuner import show

    device = fl.get_device()
    path = tuning.db_path(device)
    if args.clear:
        n = tuning.clear_database(device)
        print(f"removed {n} tuning entries for {device.name}" + (f" ({path})" if path else ""))
        return 0
    if args.show or not args.workloads:
        lines = show(device)
        where = path if path is not None else "nowhere: the disk cache is off"
        print(f"tuning database for {device.name}: {len(lines)} entries ({where})")
        print("\n".join(lines))
        return 0
    from .bench.tune_suite import main as tune_main

    names = [n for part in args.workloads for n in part.split(",") if n]
    try:
        return tune_main(names, args.size, args.matmul_size, args.budget, args.repeat,
                         progress=not args.no_progress)
    except ValueError as exc:  # an unknown workload name
        print(f"fuseloop: error: {exc}", file=sys.stderr)
        return 2


def _tune_parser(sub: Any) -> None:
    tune = sub.add_parser("tune", help="the tuning database: show, clear, or tune "
                          "benchmark workloads", description="tune --show: the default "
                          "device's tuned kernels; --clear: delete them; --workloads NAMES "
                          "--budget S: tune benchmark workloads (default and broad suites) "
                          "and print default vs tuned times")
    tune.add_argument("--show", action="store_true", help="list the database's entries")
    tune.add_argument("--clear", action="store_true", help="delete the device's entries")
    tune.add_argument("--workloads", nargs="+", default=None,
                      help="workload names or groups (comma or space separated)")
    tune.add_argument("--budget", type=float, default=30.0,
                      help="seconds of search per workload (default 30)")
    tune.add_argument("--size", type=int, default=1 << 20,
                      help="element count of 1-D and 2-D workloads (default 2^20)")
    tune.add_argument("--matmul-size", type=int, default=256,
                      help="matrix order of matmul workloads (default 256)")
    tune.add_argument("--repeat", type=int, default=7, help="timed runs per measurement")
    tune.add_argument("--no-progress", action="store_true", help="no progress bar")


def _bench(argv: list[str]) -> int:
    import importlib

    try:
        bench = importlib.import_module("fuseloop.bench")
    except ImportError as exc:
        missing = getattr(exc, "name", None) == "fuseloop.bench"
        reason = "is not part of this installation" if missing else f"could not be imported: {exc}"
        print(f"fuseloop: error: the benchmark suite (fuseloop.bench) {reason}",
              file=sys.stderr)
        return 2
    entry = getattr(bench, "main", None)
    if entry is None:
        print("fuseloop: error: fuseloop.bench has no main(argv) function", file=sys.stderr)
        return 2
    rc = entry(argv)
    return rc if isinstance(rc, int) else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # everything after "bench" belongs to the benchmark suite
        return _bench(argv[1:])
    parser = argparse.ArgumentParser(prog="fuseloop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("devices", help="list the OpenCL devices fuseloop sees")
    demo = sub.add_parser("demo", help="a short tour on the default device")
    demo.add_argument("--device", default=None, help="device spec (gpu, cpu, index, name)")
    demo.add_argument("--log2", type=int, default=22, help="array size as a power of two")
    cache = sub.add_parser("cache", help="inspect or clear the on-disk kernel cache",
                           description="cache info / --info: directory, entries, size, "
                           "bounds; cache clear / --clear: delete fuseloop's entries")
    what = cache.add_mutually_exclusive_group()
    what.add_argument("--info", action="store_const", const="info", dest="cache_flag",
                      help="the same as 'cache info'")
    what.add_argument("--clear", action="store_const", const="clear", dest="cache_flag",
                      help="the same as 'cache clear'")
    cache.add_argument("--json", action="store_true", dest="cache_json",
                       help="with --info: print the figures as JSON")
    cache_sub = cache.add_subparsers(dest="cache_command", metavar="{info,clear}")
    info = cache_sub.add_parser("info", help="directory, entries, size, bounds, schema version")
    info.add_argument("--json", action="store_true", help="print the figures as JSON")
    cache_sub.add_parser("clear", help="delete fuseloop's cache entries (nothing else)")
    _tune_parser(sub)
    sub.add_parser("bench", help="run the benchmark suite (fuseloop.bench); "
                   "arguments after 'bench' go to it", add_help=False)
    args = parser.parse_args(argv)
    command = args.command
    if command == "cache":
        command = _cache_command(cache, args)
    from .errors import FuseloopError

    commands = {"devices": _devices, "demo": _demo, "info": _cache_info, "clear": _cache_clear,
                "tune": _tune}
    try:
        return commands[command](args)
    except FuseloopError as exc:
        print(f"fuseloop: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
