"""Kernels built together: the new kernels of one evaluation as few programs.

A driver's build of a program may have a large part that does not depend on its kernels
(PoCL 3.0 on a 2-core VM: eight small kernels built as eight programs took 2.1 CPU s, as
one program 0.47; ``benchmarks/probes/build_batch_cost.py``), so the kernels that an
evaluation's run plan (or one ``fl.compute``) misses are built together
(:func:`build_together`, called by :mod:`fuseloop.prebuild`): as few programs as can
hold them where the device's backend says so (``Backend.joins_kernels``), else one
program each, built in parallel (NVIDIA's compiler costs per kernel: one program of
eight took longer than eight programs in two compile workers).

Which kernels share a program: those of the same build options whose sources split
into a *preamble* (the text before the kernel's declaration: Loopy's macros, fuseloop's
helper functions) and a body holding the kernel alone (:func:`split`), at most one of
those preambles defining more than macros: two such could define one function.  The
program is, per preamble, the preamble, its kernels renamed (kernel names are unique in
a program) and an ``#undef`` of the macros it defined, so each kernel sees its own
preamble's macros only (:func:`combine`).

Each kernel's plan then holds the program's source and its own name in it, so its disk
entry alone builds the program again in a later process (PoCL: a hit of its own kernel
cache, the source being the same); kernels of one program found in one process share one
build (``cache._shared``).  Entries stay one per kernel, each written atomically.

A program that fails to build is built again kernel by kernel, so that a failing kernel
does not keep the others from the cache; the evaluation's own launch of the failing one
builds it once more and raises its :class:`~fuseloop.errors.KernelBuildError`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from . import cache as _cache
from .cache import Request
from .cache_disk import KernelPlan
from .errors import KernelBuildError
from .runtime.devices import Device
from .stats import increment

#: most kernels one program holds (a program's disk entries each hold its whole
#: source, and a binary of it where the driver keeps one)
MAX_KERNELS = 16
# a line of the kernel's body other than code: only pragmas (``#pragma unroll``) may
# stay there, a macro defined in one kernel's body would reach the next kernel's
_BODY_DIRECTIVE = re.compile(r"^[ \t]*#(?![ \t]*pragma\b)", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)


def split(plan: KernelPlan) -> tuple[str, str] | None:
    """``(preamble, body)`` of ``plan``'s source, split where the line declaring its
    kernel starts; None when the source does not have that shape (the kernel's name
    not exactly once, preprocessor lines in the body): built alone."""
    found = list(re.finditer(rf"\b{re.escape(plan.name)}\b", plan.source))
    if len(found) != 1:
        return None
    start = plan.source.rfind("\n", 0, found[0].start()) + 1
    preamble, body = plan.source[:start], plan.source[start:]
    if _BODY_DIRECTIVE.search(body):
        return None
    return preamble, body


def _macros_only(preamble: str) -> bool:
    """Whether ``preamble`` holds preprocessor lines only (and their continuations): it
    defines no function, type or variable that another kernel's could clash with."""
    continued = False
    for line in preamble.splitlines():
        text = line.strip()
        if text and not continued and not text.startswith("#"):
            return False
        continued = text.endswith("\\")
    return True


def _segments(plans: Sequence[KernelPlan], members: Sequence[int]) -> list[list[int]]:
    """``members`` (positions in ``plans``) by preamble and build options, in order of
    first appearance."""
    by_preamble: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for k in members:
        key = (_parts(plans[k])[0], tuple(plans[k].build_options))
        by_preamble.setdefault(key, []).append(k)
    return list(by_preamble.values())


def _parts(plan: KernelPlan) -> tuple[str, str]:
    parts = split(plan)
    assert parts is not None  # (a plan of a group)
    return parts


def group(plans: Sequence[KernelPlan], most: int = MAX_KERNELS) -> list[list[int]]:
    """The positions of ``plans`` in groups that may share a program: same build
    options, at most one preamble that defines more than macros (two such could both
    define one function), at most ``most`` kernels; a plan :func:`split` refuses is a
    group of its own."""
    alone: list[list[int]] = []
    splittable = []
    for k, plan in enumerate(plans):
        if split(plan) is None:
            alone.append([k])
        else:
            splittable.append(k)
    programs: list[tuple[tuple[str, ...], list[bool], list[int]]] = []
    for segment in _segments(plans, splittable):
        options = tuple(plans[segment[0]].build_options)
        functions = not _macros_only(_parts(plans[segment[0]])[0])
        for i in range(0, len(segment), most):
            chunk = segment[i:i + most]
            into = next((p for p in programs if p[0] == options
                         and not (functions and p[1][0])
                         and len(p[2]) + len(chunk) <= most), None)
            if into is None:
                programs.append((options, [functions], list(chunk)))
            else:
                into[1][0] |= functions
                into[2].extend(chunk)
    return [sorted(members) for _, _, members in programs] + alone


def combine(plans: Sequence[KernelPlan]) -> list[KernelPlan]:
    """The plans of one program holding ``plans``' kernels (one :func:`group`), each
    kernel renamed ``<name>_b<k>``; each plan keeps its arguments and grid and gets the
    program's source and its kernel's new name.  The source: per preamble (the one
    defining functions first), the preamble, its kernels, and an ``#undef`` of every
    macro it defined, so that each kernel sees its own preamble's macros and no
    other's (the functions of the first stay declared: names no later kernel uses)."""
    names = [f"{plan.name}_b{k}" for k, plan in enumerate(plans)]
    segments = sorted(_segments(plans, range(len(plans))),
                      key=lambda seg: _macros_only(_parts(plans[seg[0]])[0]))
    text = []
    for segment in segments:
        preamble = _parts(plans[segment[0]])[0]
        text.append(preamble)
        for k in segment:
            body = _parts(plans[k])[1]
            text.append(re.sub(rf"\b{re.escape(plans[k].name)}\b", names[k], body)
                        .rstrip("\n") + "\n\n")
        text.extend(f"#undef {m}\n" for m in dict.fromkeys(_DEFINE.findall(preamble)))
    source = "".join(text)
    return [replace(plan, name=name, source=source) for plan, name in zip(plans, names)]


_KERNEL_LINE = re.compile(r"^__kernel\b", re.M)
_UNDEF_LINE = re.compile(r"^#undef\b[^\n]*\n", re.M)


def shown_alone(plan: KernelPlan) -> KernelPlan:
    """``plan`` with its own kernel's source where it holds a program of several
    (:func:`combine`'s, as a disk entry does): its preamble (the text after the
    ``#undef`` lines before it, up to the first kernel there) and its body (to its
    closing brace), so that ``fl.show_code`` and the stages show one kernel; other
    plans as they are."""
    src = plan.source
    found = re.search(rf"\b{re.escape(plan.name)}\b", src)
    if found is None or len(_KERNEL_LINE.findall(src)) < 2:
        return plan
    start = src.rfind("\n", 0, found.start()) + 1
    depth, end = 0, src.find("{", found.end())
    while 0 <= end < len(src):
        depth += {"{": 1, "}": -1}.get(src[end], 0)
        end += 1
        if depth == 0:
            break
    begin = max((m.end() for m in _UNDEF_LINE.finditer(src, 0, start)), default=0)
    first = _KERNEL_LINE.search(src, begin)
    if depth or first is None:
        return plan
    return replace(plan, source=src[begin:first.start()] + src[start:end] + "\n")


def _build_group(plans: list[KernelPlan], device: Device) -> list[Any]:
    """The built kernels of one group's plans: one program, or (one kernel, or the
    program refused) one program each; a kernel that fails is None in its place."""
    if len(plans) > 1:
        shared = combine(plans)
        try:
            return _cache.compile_plans(shared, device)
        except KernelBuildError:
            pass  # (one of them, or their sum: each alone tells which)
    out: list[Any] = []
    for plan in plans:
        try:
            out.extend(_cache.compile_plans([plan], device))
        except KernelBuildError:
            out.append(None)
    return out


def _shown_alone(compiled: Any, own: KernelPlan) -> None:
    """A kernel built with others holds its own source (renamed), not its program's:
    ``fl.show_code`` and the stages show one kernel (a kernel found on disk: its
    program's source cut to it, :func:`shown_alone`)."""
    name = compiled.plan.name
    if name != own.name:
        compiled.plan = replace(compiled.plan, source=re.sub(
            rf"\b{re.escape(own.name)}\b", name, own.source))


def _from_cache(requests: Sequence[Request], device: Device
                ) -> tuple[list[tuple], list[tuple[Request, str | None]]]:
    """For claimed ``requests``: the memory keys found in memory or on disk (now in
    memory: the steps of ``cache.get_kernel``'s miss), and the others with their disk
    keys (None: the disk cache is off), to be built."""
    found: list[tuple] = []
    missing: list[tuple[Request, str | None]] = []
    on_disk = _cache.cache_dir() is not None
    for request in requests:
        if _cache._cached(request.mem_key) is not None:
            continue  # (built by another thread since: not built here)
        increment("memory_cache_misses")
        key = request.disk_key() if on_disk else None
        compiled = None if key is None else _cache._disk_hit(key, device)
        if compiled is not None:
            _cache._store(request.mem_key, compiled)
            found.append(request.mem_key)
        else:
            missing.append((request, key))
    if missing:
        _cache._workers.prestart(device)  # (a worker starts while Loopy works)
    return found, missing


def build_together(requests: Sequence[Request], device: Device, threads: bool) -> list[tuple]:
    """Build the kernels of ``requests`` the memory cache lacks: each from its disk
    entry where one is found, the others one program a :func:`group` (with
    ``threads``, each program in a thread of its own, so that the compile workers
    build several at once; a program of one kernel starts as soon as its plan is
    made, while Loopy makes the next).  Returns the memory-cache keys now cached;
    kernels that another thread is building, or that fail, are left out (a failing
    one raises when its evaluation builds it)."""
    claimed = _cache.claim([r.mem_key for r in requests])
    try:
        todo = [r for r in requests if r.mem_key in claimed]
        done, fresh = _from_cache(todo, device)
        # (one program a group where the driver's build has a large fixed part, else
        # one a kernel: see Backend.joins_kernels)
        joins = _cache.backend_for(device).joins_kernels(device)
        plans: list[KernelPlan] = []
        planned: list[tuple[Request, str | None]] = []
        built: list[tuple[list[int], list[Any]]] = []  # (a group, its built kernels)
        running: list[threading.Thread] = []

        def build(members: list[int]) -> None:
            built.append((members, _build_group([plans[k] for k in members], device)))

        def start(members: list[int]) -> None:
            if not threads:
                build(members)
                return
            running.append(threading.Thread(target=build, args=(members,), daemon=True,
                                            name="fuseloop-build"))
            running[-1].start()

        for request, disk_key in fresh:
            try:
                plans.append(request.plan())
            except Exception:
                continue  # (its evaluation lowers it again and reports what is wrong)
            planned.append((request, disk_key))
            if not joins:
                start([len(plans) - 1])
        for members in group(plans) if joins else ():
            start(members)
        for t in running:
            t.join()
        for members, kernels in built:
            for k, compiled in zip(members, kernels):
                if compiled is not None:
                    request, disk_key = planned[k]
                    _cache._write_entry(disk_key, compiled, device)  # (the program's source)
                    _shown_alone(compiled, plans[k])
                    _cache._store(request.mem_key, compiled)
                    done.append(request.mem_key)
        return done
    finally:
        _cache.release(claimed)
