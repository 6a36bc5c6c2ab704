"""The stages of one kernel, in processing order, each with ``.as_text()``.

``fl.program(*exprs)`` linearises expressions the way an evaluation does and
returns a :class:`Linearized` stage (fuseloop's own IR and its structural key,
``.key``); ``.lower()`` turns it into a :class:`Lowered` stage (the Loopy
translation unit before and after the device's recipe); ``.compile()`` gives a
:class:`Compiled` stage (the generated source, the device binary, the argument
binding and grid), which runs when called::

    p = fl.program(x * 2 + y)
    print(p.as_text())
    print(p.lower().as_text())
    k = p.compile()        # a kernel cache hit builds nothing
    z = k()                # the traced inputs; k(x2, y2) runs on others

Every stage goes through the same code as evaluation: lowering, the recipe and
code generation are :mod:`fuseloop.lower.codegen` (which the kernel cache calls
on a miss), the compiled kernel is the kernel cache's, and calling a
:class:`Compiled` launches through :func:`fuseloop.evaluate.launch`.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

import numpy as np

from . import evaluate as _ev
from .array import Array, _common_device
from .cache import _binary_of, get_kernel
from .errors import NotOneKernelError, ShapeError
from .expr.program import Bindings, Program, linearize
from .launching import _check_fp64, kernel_for, size_class_of, user_functions
from .lower import codegen
from .passes.axis_merge import merged_reductions
from .runtime.devices import Device, find_device
from .tuning import tuned

__all__ = ["Compiled", "Linearized", "Lowered", "program"]


def program(*exprs: Array) -> Linearized:
    """The program stage of evaluating ``exprs`` together (one kernel).

    ``exprs`` are arrays of one shape on one device, as for ``fl.show_code``.
    Raises :class:`~fuseloop.errors.NotOneKernelError` when evaluation would use
    more than one kernel (a reduction that runs first, a two-stage reduction):
    ``fl.show_code`` shows all of those.
    """
    if not exprs:
        raise TypeError("fl.program needs at least one array expression")
    if not all(isinstance(e, Array) for e in exprs):
        kinds = sorted({type(e).__name__ for e in exprs if not isinstance(e, Array)})
        raise TypeError(f"fl.program takes fuseloop arrays, not {', '.join(kinds)}; "
                        "convert with fl.asarray first")
    shapes = {e.shape for e in exprs}
    if len(shapes) != 1:
        raise ShapeError(f"fl.program makes one kernel; these shapes differ: {sorted(shapes)}")
    shape = exprs[0].shape
    device = _common_device(list(exprs))
    roots = [e._node for e in exprs]
    if math.prod(shape) == 0:
        raise NotOneKernelError(f"arrays of shape {shape} have no elements: evaluating "
                                "them runs no kernel")
    fancy = any(r.fancy for r in roots)
    # (over fewer, longer dimensions, as evaluation has them)
    co = merged_reductions(roots, shape, [None] * len(roots), device) if fancy \
        else _ev._coalesced(roots, shape, [None] * len(roots))
    work_roots, work_shape = (co[0], co[1]) if co is not None else (roots, shape)
    if fancy and (_ev._reduces_to_materialise(work_roots, work_shape)
                  or _ev.two_stage_split(work_roots, work_shape, device) is not None):
        raise NotOneKernelError(
            f"evaluating these expressions (shape {shape}) runs more than one kernel "
            "(a reduction runs first, or in two stages); fl.show_code shows them all, "
            "and fl.program of each part gives its stages")
    prog, bindings = linearize(work_roots, work_shape, cache=False)
    return Linearized(prog, bindings, device, shape, tuple(e.dtype for e in exprs))


def _entry_text(entry: tuple) -> str:
    return f"{entry[0]:<7}" + " ".join(repr(part) for part in entry[1:])


class Linearized:
    """The program stage: fuseloop's linearised IR of one kernel, with its bindings.

    ``program`` is the :class:`~fuseloop.expr.program.Program` (the kernel
    cache's structural key), ``bindings`` the buffers, scalars and integer
    parameters it was traced with, ``key`` a short stable digest of the program
    (equal for expressions of equal structure, whatever their data).
    """

    def __init__(self, prog: Program, bindings: Bindings, device: Device,
                 shape: tuple[int, ...], dtypes: tuple[np.dtype, ...]) -> None:
        self.program = prog
        self.bindings = bindings
        self.device = device
        self.shape = shape  # the results' shape (the program's may be coalesced)
        self.dtypes = dtypes

    @property
    def key(self) -> str:
        """A digest of the program: the same for the same structure, in any process."""
        return hashlib.sha256(repr(self.program).encode()).hexdigest()[:16]

    def as_text(self) -> str:
        p, b = self.program, self.bindings
        work = "" if b.out_shape == self.shape else f" (computed as {b.out_shape})"
        lines = [f"program {self.key}: {len(p.outputs)} output(s) of shape {self.shape}"
                 f"{work}, dtypes {', '.join(d.name for d in self.dtypes)}"]
        if p.row_dims is not None:
            lines.append(f"row dimensions {p.row_dims}")
        if p.contraction is not None:
            lines.append(f"contraction {p.contraction!r}")
        lines += [f"  %{k:<3} {_entry_text(e)}" for k, e in enumerate(p.entries)]
        lines.append("outputs " + ", ".join(f"%{o}" for o in p.outputs))
        lines += [f"in{k}: buffer of {s.nbytes} bytes" for k, s in enumerate(b.storages)]
        lines += [f"s{k} = {v!r}" for k, v in enumerate(b.scalars)]
        if b.params:
            lines.append("params " + ", ".join(f"p{k}={v}" for k, v in enumerate(b.params)))
        return "\n".join(lines)

    def _choice(self, device: Device) -> tuple[np.dtype, Any, str, int, int]:
        index_dtype, recipe, n_rows, n_elem = _ev.launch_choice(
            self.program, self.bindings, device)
        # (what kernel_for will use: the tuning database's winner, if any)
        recipe = tuned(recipe, self.program, index_dtype, device, self.bindings.params,
                       n_rows, n_elem)
        sizes = size_class_of(recipe, self.program, self.bindings.params, n_rows, n_elem)
        return index_dtype, recipe, sizes, n_rows, n_elem

    def lower(self, device: Device | int | str | None = None) -> Lowered:
        """The Loopy stage for ``device`` (default: the arrays' device)."""
        dev = self.device if device is None else find_device(device)
        _check_fp64(self.program.entries, dev)
        index_dtype, recipe, sizes, _, _ = self._choice(dev)
        with codegen.loopy_section():
            before = codegen.lower(self.program, index_dtype, recipe, user_functions, sizes,
                                   device=dev)
            after = codegen.apply_recipe(before, recipe, dev)
        return Lowered(self, dev, index_dtype, recipe, sizes, before, after)

    def compile(self, device: Device | int | str | None = None) -> Compiled:
        """The compiled stage: the kernel cache's kernel (lowered and built on a miss)."""
        dev = self.device if device is None else find_device(device)
        index_dtype, recipe, sizes, n_rows, n_elem = self._choice(dev)
        kernel = kernel_for(self.program, index_dtype, dev, recipe, self.bindings.params,
                            n_rows, n_elem)
        return Compiled(self, dev, index_dtype, recipe, sizes, kernel)


class Lowered:
    """The Loopy stage: ``t_unit_before`` (lowered) and ``t_unit`` (after the recipe)."""

    def __init__(self, linearized: Linearized, device: Device, index_dtype: np.dtype,
                 recipe: Any, sizes: str, t_unit_before: Any, t_unit: Any) -> None:
        self.linearized = linearized
        self.device = device
        self.index_dtype = index_dtype
        self.recipe = recipe
        self.sizes = sizes  # the recipe's size class (Loopy assumptions)
        self.t_unit_before = t_unit_before
        self.t_unit = t_unit

    def as_text(self) -> str:
        r = self.recipe
        head = (f"program {self.linearized.key} on {self.device.name}: index dtype "
                f"{self.index_dtype.name}, recipe {r.name!r} (cache id {r.cache_id!r}), "
                f"size class {self.sizes!r}")
        return "\n".join([head, "--- lowered (before the recipe) ---", _plain(self.t_unit_before),
                          f"--- after recipe {r.name!r} ---", _plain(self.t_unit)])

    def compile(self) -> Compiled:
        """The compiled stage; on a kernel-cache miss this stage's ``t_unit`` is generated."""
        lin = self.linearized

        def from_this_stage(*_: Any) -> Any:
            with codegen.loopy_section():
                return codegen.generate(self.t_unit, self.device)

        kernel = get_kernel(lin.program, self.index_dtype, self.device, self.recipe,
                            user_functions,
                            self.sizes, make_plan=from_this_stage)
        return Compiled(lin, self.device, self.index_dtype, self.recipe, self.sizes, kernel)


class Compiled:
    """The compiled stage: a built kernel, ready to run.

    ``kernel`` is the kernel cache's :class:`~fuseloop.cache.CompiledKernel`;
    ``source``, ``binary``, ``arg_names`` and ``grid`` describe it.  Calling it
    runs the kernel on the traced inputs, or on arrays given in their place.
    """

    def __init__(self, linearized: Linearized, device: Device, index_dtype: np.dtype,
                 recipe: Any, sizes: str, kernel: Any) -> None:
        self.linearized = linearized
        self.device = device
        self.index_dtype = index_dtype
        self.recipe = recipe
        self.sizes = sizes
        self.kernel = kernel

    @property
    def name(self) -> str:
        return self.kernel.plan.name

    @property
    def source(self) -> str:
        """The OpenCL source."""
        return self.kernel.plan.source

    @property
    def binary(self) -> bytes | None:
        """The device binary the driver built (None where it offers none)."""
        return _binary_of(self.kernel.program)

    @property
    def arg_names(self) -> list[str]:
        """The kernel's arguments in order: ``out<k>`` outputs, ``in<k>`` input buffers,
        ``s<k>`` scalars, ``p<k>`` integer parameters, ``N`` rows, ``NE`` elements per
        row, ``err`` the gather error flag."""
        return list(self.kernel.plan.arg_names)

    @property
    def grid(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(global size, local size) in work-items, for the traced sizes."""
        lin = self.linearized
        _, _, n_rows, n_elem = _ev.launch_choice(lin.program, lin.bindings, self.device)
        params = lin.bindings.params
        local = tuple(self.kernel.lsize(n_rows, n_elem, params))
        groups = self.kernel.gsize(n_rows, n_elem, params)
        return tuple(g * w for g, w in zip(groups, local)), local

    def as_text(self) -> str:
        k = self.kernel
        args = [n if d is None else f"{n}: {d}" for n, d in zip(k.plan.arg_names,
                                                                  k.plan.arg_dtypes)]
        binary = self.binary
        global_size, local = self.grid
        return "\n".join([
            f"kernel {self.name} of program {self.linearized.key} on {self.device.name}, "
            f"recipe {self.recipe.name!r}, index dtype {self.index_dtype.name}",
            f"arguments ({', '.join(args)})",
            f"grid: global {global_size}, local {local} (sizes: {k.plan.gsize} groups of "
            f"{k.plan.lsize})",
            f"build options {k.plan.build_options}; binary "
            f"{'none' if binary is None else f'{len(binary)} bytes'}",
            "--- source ---", self.source])

    def __call__(self, *inputs: Any) -> Array | tuple[Array, ...]:
        """Run the kernel; return its result (a tuple for several expressions).

        With no arguments it reads the traced inputs; otherwise ``inputs`` replace
        them in order (``in0``, ``in1``, ...), each an array (or anything
        ``fl.asarray`` takes) of the traced buffer's dtype and size.
        """
        from .creation import asarray

        lin = self.linearized
        b = lin.bindings
        storages = list(b.storages)
        if inputs:
            if len(inputs) != len(storages):
                raise TypeError(f"this kernel reads {len(storages)} input buffer(s); "
                                f"got {len(inputs)} arrays")
            dtypes = _input_dtypes(lin.program)
            for k, x in enumerate(inputs):
                a = asarray(x, device=self.device).eval()
                want = dtypes.get(k)
                if a._storage is None or a._storage.nbytes != storages[k].nbytes or (
                        want is not None and a.dtype.char != want):
                    raise ShapeError(
                        f"input {k}: the kernel reads a buffer of {storages[k].nbytes} bytes"
                        f" of {np.dtype(want) if want else 'its traced dtype'}; got "
                        f"{a.dtype} of shape {a.shape} ({a.nbytes} bytes)")
                storages[k] = a._storage
        size = math.prod(lin.shape)
        outs = [_ev.allocate(size * d.itemsize, self.device) for d in lin.dtypes]
        _ev.launch(lin.program, Bindings(storages, list(b.scalars), list(b.params),
                                         b.out_shape, None, b.offset_slots), outs, self.device)
        results = tuple(Array._concrete(o, d, lin.shape) for o, d in zip(outs, lin.dtypes))
        return results[0] if len(results) == 1 else results


def _plain(t_unit: Any) -> str:
    """Loopy's text of ``t_unit`` without its terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(t_unit))


def _input_dtypes(prog: Program) -> dict[int, str]:
    """Input slot -> the dtype (character) its loads read."""
    out: dict[int, str] = {}
    e: Any  # an Entry, read by its kind tag
    for e in prog.entries:
        if e[0] == "load":
            out[e[1]] = e[2]
    return out
