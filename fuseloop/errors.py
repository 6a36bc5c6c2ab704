"""Exception classes raised by fuseloop.

Each class derives from the built-in exception a numpy user would expect
(``ValueError`` for bad shapes, ``TypeError`` for bad dtypes, ...), so existing
``except`` clauses keep working, and from :class:`FuseloopError` so that all of
fuseloop's errors can be caught at once.
"""

from __future__ import annotations


class FuseloopError(Exception):
    """Base class of every error fuseloop raises on purpose."""


class ShapeError(FuseloopError, ValueError):
    """Shapes that do not broadcast, or an assignment of the wrong shape."""


class DTypeError(FuseloopError, TypeError):
    """A dtype fuseloop or the device cannot handle, or an invalid cast."""


class DeviceError(FuseloopError, ValueError):
    """Arrays on different devices, or a device that cannot run the request."""


class DeviceNotFoundError(DeviceError, LookupError):
    """A device specification (``FUSELOOP_DEVICE``, ``fl.set_device``) matched nothing."""


class KernelBuildError(FuseloopError, RuntimeError):
    """The OpenCL compiler rejected a generated kernel.

    ``source`` holds the generated OpenCL and ``build_log`` the compiler's log.
    """

    def __init__(self, message: str, source: str = "", build_log: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.build_log = build_log

    def __str__(self) -> str:
        parts = [super().__str__()]
        if self.build_log:
            parts.append("--- compiler log ---\n" + self.build_log.strip())
        if self.source:
            numbered = "\n".join(
                f"{n:4d} | {line}" for n, line in enumerate(self.source.splitlines(), 1)
            )
            parts.append("--- generated source ---\n" + numbered)
        return "\n".join(parts)


class RecipeError(FuseloopError, ValueError):
    """A registered recipe returned something fuseloop cannot use."""


class NotOneKernelError(FuseloopError, ValueError):
    """Expressions that evaluation computes with more than one kernel, given to
    ``fl.program`` (whose stages are one kernel each)."""


class UnknownFunctionError(FuseloopError, AttributeError):
    """A function name fuseloop does not provide."""


class NoEquivalentError(FuseloopError, TypeError):
    """A numpy function or ufunc, called on fuseloop arrays, that fuseloop does not
    provide (numpy's protocols dispatch to fuseloop; nothing is copied to the host)."""


class DeviceMemoryError(FuseloopError, MemoryError):
    """An allocation larger than the device can provide."""


class OutOfMemoryError(DeviceMemoryError):
    """The driver refused an allocation that fuseloop's own accounting let through.

    Each backend raises its own subclass (``Backend.OutOfMemory``) for its driver's
    refusals; callers catch this class, let go of buffers and may try once more."""


class IndexOutOfBoundsError(FuseloopError, IndexError):
    """An index (a slice position or a gathered index value) outside an axis."""


def index_value_out_of_bounds(value: int, axis: int | None, size: int) -> IndexOutOfBoundsError:
    """The error for an index array's ``value`` outside axis ``axis`` (None: not known)
    of length ``size``, found by the device's check (``fuseloop.evaluate.launch``) or
    on the host: both read the same."""
    where = "an axis" if axis is None else f"axis {axis}"
    return IndexOutOfBoundsError(
        f"index {value} is out of bounds for {where} with size {size} "
        "(an integer-array index, fl.take or x[idx]); valid indices are -n..n-1 "
        "for an axis of length n")


class AxisError(FuseloopError, ValueError, IndexError):
    """An axis argument out of range or repeated (numpy's AxisError is both too)."""


class InvalidIndexError(FuseloopError, IndexError):
    """An index that cannot apply to the array: too many indices, index arrays whose
    shapes do not broadcast together, or a boolean mask of the wrong shape."""


class RuntimeUnavailableError(FuseloopError, RuntimeError):
    """fuseloop's OpenCL runtime cannot be used in this process any more: in a child
    made by ``os.fork`` after the parent used OpenCL, or after interpreter exit began."""


class BackendFeatureError(FuseloopError, RuntimeError):
    """An operation the device's backend does not offer yet (on a CUDA device: the
    operations whose kernels are OpenCL C or come from pyopencl); the message names
    the operation, the device and the backends that have it."""


class TracingError(FuseloopError, TypeError):
    """A function given to ``fl.fuse`` that cannot be traced: it needs the value of a
    traced array or scalar (Python control flow on data, ``float(x)``, ``x.get()``),
    writes into an argument, or takes an argument of a type it cannot trace."""


class CheckError(FuseloopError, ValueError):
    """An in-kernel check (``fl.check``, ``fl.check_positive``, ...) failed.

    ``index`` is an offending flat index, ``value`` the checked value there (``"?"``
    when it could not be read back)."""

    index: int = -1
    value: object = None


class HostFallbackWarning(UserWarning):
    """An operation fuseloop runs on the host (numpy) rather than on the device,
    copying its operands there and its results back (``fl.linalg.qr``; complex
    ``eigh`` and ``svd``, ...: no device algorithm for them yet)."""


class SignatureError(FuseloopError, ValueError):
    """An ``fl.function`` signature that is not ``type name(type a, type b, ...)``."""


class DependencyCycleError(FuseloopError, ValueError):
    """User functions that call each other in a cycle (OpenCL C has no recursion):
    a body calling its own function, or a traced function calling itself."""


class PointerArgumentError(FuseloopError, TypeError):
    """A user function's pointer parameter (``global const float *x``) given something
    other than a device array of the pointed-to dtype (a scalar, a numpy array, ...)."""


class ConstantMemoryError(FuseloopError, ValueError):
    """An array for constant memory (``fl.constant(array)``) larger than the device's
    constant buffer, or a constant array passed where a ``global`` pointer is declared."""


class NotSquareError(ShapeError):
    """A triangular view or triangular solve of a matrix that is not square."""


class UnknownOpError(FuseloopError, ValueError):
    """An operation name (``op=``) the function does not provide (``fl.reduce_by_key``
    and the scans by key take ``"add"``, ``"mul"``, ``"max"`` and ``"min"``)."""


class MaskError(FuseloopError, TypeError):
    """A ``where=`` mask that is neither boolean nor declared packed words
    (``fl.bitmask``), or packed words of a type that cannot hold bits."""


class OneLaunchRefused(FuseloopError, RuntimeError):
    """Internal: a two-stage reduction's stages cannot share one launch on this device
    (their grids or Loopy targets differ); caught by the evaluation, which launches them
    one after the other (``fuseloop.lower.one_launch``)."""


class HaloTransferError(FuseloopError, RuntimeError):
    """A copy of a split array's rows between two devices (a stencil's halo, through the
    host) failed; raised at the next synchronisation or read back, once: what was
    computed from those rows is invalid, the devices' queues work again."""
