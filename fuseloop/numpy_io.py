"""numpy's file, text and printing functions and its scalar helpers (issue 27).

Reading and writing are host work by nature: the readers (``load``, ``loadtxt``,
``genfromtxt``, ``fromfile``, ``frombuffer``, ``fromstring``, ``fromiter``,
``fromregex``) run numpy's and upload the result to the device (``device=``, or the
device of ``like=``); the writers (``save``, ``savez``, ``savez_compressed``,
``savetxt``) and the printers (``array2string``, ``array_str``, ``array_repr``) read
fuseloop arrays back with ``.get()`` and call numpy's.  Functions with no array data at
all (``binary_repr``, ``printoptions``, ``seterr``, ...) are numpy's own objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

import fuseloop as fl

from .array import Array
from .errors import DTypeError

# {{{ numpy's own: no array data involved (the same objects, so the same behaviour)

base_repr = np.base_repr
binary_repr = np.binary_repr
typename = np.typename
mintypecode = np.mintypecode
iterable = np.iterable
format_float_positional = np.format_float_positional
format_float_scientific = np.format_float_scientific
# fuseloop's repr and str print through numpy's array2string, so these apply to them too
printoptions = np.printoptions
set_printoptions = np.set_printoptions
get_printoptions = np.get_printoptions
# numpy's floating-point error handling: it governs numpy's host computations (host
# fallbacks included); device kernels never trap, they give inf and nan as IEEE says
geterr = np.geterr
seterr = np.seterr

# }}}


def _host(x: Any) -> Any:
    return x.get() if isinstance(x, Array) else x


def _device(device: Any, like: Any) -> Any:
    return like.device if device is None and isinstance(like, Array) else device


def _upload(host: Any, name: str, device: Any) -> Any:
    """numpy's result on the device; a dtype fuseloop lacks (strings, records, objects)
    raises DTypeError pointing at numpy's function."""
    if not isinstance(host, np.ndarray | np.generic):
        return host  # (load of a pickled object: numpy's value, untouched)
    try:
        return fl.asarray(np.asarray(host), device=device)
    except DTypeError as e:
        raise DTypeError(f"fl.{name}: the data read has dtype {host.dtype}, which fuseloop "
                         f"arrays cannot hold; read it with numpy.{name} instead ({e})"
                         ) from None


# {{{ readers

class NpzArrays(Mapping):
    """The arrays of an ``.npz`` file, uploaded to the device as they are read (numpy's
    ``NpzFile`` is read lazily too); use it as a context manager, or call ``close()``."""

    def __init__(self, npz: Any, device: Any) -> None:
        self._npz = npz
        self._device = device

    @property
    def files(self) -> list[str]:
        """The names of the arrays in the file."""
        return list(self._npz.files)

    def __getitem__(self, key: str) -> Any:
        return _upload(self._npz[key], "load", self._device)

    def __iter__(self) -> Iterator[str]:
        return iter(self._npz.files)

    def __len__(self) -> int:
        return len(self._npz.files)

    def close(self) -> None:
        """Close the underlying file."""
        self._npz.close()

    def __enter__(self) -> NpzArrays:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"fl.NpzArrays({self.files})"


def load(file: Any, *args: Any, device: Any = None, **kwargs: Any) -> Any:
    """``numpy.load``: an ``.npy`` file as a fuseloop array, an ``.npz`` file as a mapping
    of names to fuseloop arrays (:class:`NpzArrays`), uploaded to ``device``."""
    out = np.load(file, *args, **kwargs)
    if isinstance(out, np.lib.npyio.NpzFile):
        return NpzArrays(out, device)
    return _upload(out, "load", device)


def loadtxt(fname: Any, *args: Any, device: Any = None, like: Any = None,
            **kwargs: Any) -> Any:
    """``numpy.loadtxt``, the result uploaded."""
    out = np.loadtxt(fname, *args, **kwargs)
    return _upload(out, "loadtxt", _device(device, like))


def genfromtxt(fname: Any, *args: Any, device: Any = None, like: Any = None,
               **kwargs: Any) -> Any:
    """``numpy.genfromtxt`` (missing values filled as numpy fills them), uploaded.
    Named columns give a record array, which fuseloop cannot hold: use numpy's."""
    out = np.genfromtxt(fname, *args, **kwargs)
    return _upload(out, "genfromtxt", _device(device, like))


def fromfile(file: Any, *args: Any, device: Any = None, like: Any = None,
             **kwargs: Any) -> Array:
    """``numpy.fromfile`` (binary or text with ``sep``), uploaded."""
    return _upload(np.fromfile(file, *args, **kwargs), "fromfile", _device(device, like))


def frombuffer(buffer: Any, *args: Any, device: Any = None, like: Any = None,
               **kwargs: Any) -> Array:
    """``numpy.frombuffer``: the buffer's bytes copied to the device (not a view)."""
    return _upload(np.frombuffer(buffer, *args, **kwargs), "frombuffer",
                   _device(device, like))


def fromstring(string: Any, *args: Any, device: Any = None, like: Any = None,
               **kwargs: Any) -> Array:
    """``numpy.fromstring`` (text with ``sep``), uploaded."""
    return _upload(np.fromstring(string, *args, **kwargs), "fromstring",
                   _device(device, like))


def fromiter(iter: Any, dtype: Any, count: int = -1, *, device: Any = None,
             like: Any = None) -> Array:
    """``numpy.fromiter``: the iterable consumed on the host, uploaded."""
    return _upload(np.fromiter(iter, dtype, count), "fromiter", _device(device, like))


def fromregex(file: Any, regexp: Any, dtype: Any, encoding: Any = None, *,
              device: Any = None) -> Array:
    """``numpy.fromregex``, its record array uploaded as a plain one: fuseloop has no
    structured dtypes, so fields of one dtype become columns (shape ``(n, fields)``; one
    field: shape ``(n,)``).  Fields of different dtypes raise DTypeError."""
    from numpy.lib.recfunctions import structured_to_unstructured

    out = np.fromregex(file, regexp, dtype, encoding=encoding)
    fields: Mapping[str, Any] = out.dtype.fields or {}
    kinds = {f[0] for f in fields.values()}
    if len(kinds) != 1:
        raise DTypeError(f"fl.fromregex: the fields of {out.dtype} differ in dtype; fuseloop "
                         "arrays hold one dtype: read them with numpy.fromregex instead")
    plain = structured_to_unstructured(out)
    return _upload(plain[:, 0] if len(fields) == 1 else plain, "fromregex", device)

# }}}


# {{{ writers and printers

def save(file: Any, arr: Any, *args: Any, **kwargs: Any) -> None:
    """``numpy.save`` of the array's values (read back from the device)."""
    np.save(file, _host(arr), *args, **kwargs)


def savez(file: Any, *args: Any, allow_pickle: bool = True, **kwds: Any) -> None:
    """``numpy.savez`` of the arrays' values (read back from the device)."""
    np.savez(file, *map(_host, args), allow_pickle=allow_pickle,
             **{k: _host(v) for k, v in kwds.items()})


def savez_compressed(file: Any, *args: Any, allow_pickle: bool = True, **kwds: Any) -> None:
    """``numpy.savez_compressed`` of the arrays' values (read back from the device)."""
    np.savez_compressed(file, *map(_host, args), allow_pickle=allow_pickle,
                        **{k: _host(v) for k, v in kwds.items()})


def savetxt(fname: Any, X: Any, *args: Any, **kwargs: Any) -> None:
    """``numpy.savetxt`` of the array's values (read back from the device)."""
    np.savetxt(fname, _host(X), *args, **kwargs)


def array2string(a: Any, *args: Any, **kwargs: Any) -> str:
    """``numpy.array2string`` of the array's values."""
    return np.array2string(_host(a), *args, **kwargs)


def array_str(a: Any, max_line_width: Any = None, precision: Any = None,
              suppress_small: Any = None) -> str:
    """``numpy.array_str`` of the array's values (what ``str(x)`` prints)."""
    return np.array_str(_host(a), max_line_width, precision, suppress_small)


def array_repr(arr: Any, max_line_width: Any = None, precision: Any = None,
               suppress_small: Any = None) -> str:
    """``repr(arr)`` with numpy's print options overridden: for a fuseloop array
    ``fl.Array([...], dtype=..., device=...)``, as ``repr`` gives it."""
    if not isinstance(arr, Array):
        return np.array_repr(arr, max_line_width, precision, suppress_small)
    prefix = "fl.Array("
    body = np.array2string(arr.get(), max_line_width, precision, suppress_small,
                           separator=", ", prefix=prefix)
    return f"{prefix}{body}, dtype={arr.dtype}, device={arr.device.name!r})"

# }}}


__all__ = [
    "NpzArrays", "array2string", "array_repr", "array_str", "base_repr", "binary_repr",
    "format_float_positional", "format_float_scientific", "frombuffer", "fromfile",
    "fromiter", "fromregex", "fromstring", "genfromtxt", "get_printoptions", "geterr",
    "iterable", "load", "loadtxt", "mintypecode", "printoptions", "save", "savetxt",
    "savez", "savez_compressed", "set_printoptions", "seterr", "typename",
]
