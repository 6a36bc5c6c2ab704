"""A base class for walks over expression nodes that do one thing per node type.

A subclass defines ``map_<type>`` methods (``map_apply``, ``map_leaf``, ...; see
``METHOD_NAMES``); calling the mapper on a node calls the method of the node's
exact type.  The table from type to method is built once per subclass (and
bound once per instance), so a call costs one dict look-up: as cheap as a chain
of ``type(node) is ...`` tests, without one per walk.  A node type the subclass
has no method for goes to :meth:`Mapper.map_unknown`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .nodes import (
    Apply,
    Concat,
    Gather,
    Iota,
    Leaf,
    Literal,
    Pointer,
    Reduce,
    Remap,
    Scalar,
    SparseProduct,
    UserCall,
)

#: node type -> the name of the method that handles it
METHOD_NAMES: dict[type, str] = {
    Apply: "map_apply",
    UserCall: "map_user_call",
    Leaf: "map_leaf",
    Scalar: "map_scalar",
    Literal: "map_literal",
    Iota: "map_iota",
    Reduce: "map_reduce",
    Gather: "map_gather",
    Remap: "map_remap",
    Concat: "map_concat",
    SparseProduct: "map_sparse",
    Pointer: "map_pointer",
}


class Mapper:
    """Dispatch on a node's type to ``map_<type>(node, *args)``.

    Subclasses that treat user calls as applications set ``map_user_call = map_apply``.
    """

    _method_names: ClassVar[dict[type, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._method_names = {t: name for t, name in METHOD_NAMES.items()
                             if callable(getattr(cls, name, None))}

    def __init__(self) -> None:
        #: node type -> bound method (a mapper is called once per node: bind once)
        self.methods: dict[type, Any] = {
            t: getattr(self, name) for t, name in self._method_names.items()}

    def __call__(self, node: Any, *args: Any) -> Any:
        method = self.methods.get(type(node))
        if method is None:
            return self.map_unknown(node, *args)
        return method(node, *args)

    def map_unknown(self, node: Any, *args: Any) -> Any:
        raise AssertionError(f"{type(self).__name__} has no method for "
                             f"{type(node).__name__} nodes")
