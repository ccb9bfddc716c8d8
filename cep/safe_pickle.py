"""Loading the engine's own pickled state without running anyone's code: a restricted unpickler.

Operator snapshots, durable checkpoints, Spark state and saved percolator indexes are pickles of
our own objects. ``pickle.loads`` on a crafted file runs any callable it names (``os.system``),
and a checksum does not help: whoever can write the file can recompute it. This unpickler
resolves only

* plain values: the containers and scalars of ``builtins`` and ``collections``, ``datetime``;
* numpy arrays, dtypes and scalars (their reconstructors), and
* the engine's own state classes, from an explicit list of modules (:data:`STATE_MODULES`),
  plus :class:`functools.partial` over the percolator's verification functions;

anything else (``os.system``, ``subprocess.Popen``, ``builtins.eval``, a function of the command
line) is refused with :class:`UnsafeState` before it is called, so a crafted file fails loudly
and nothing runs.

Example:
    >>> import pickle, os
    >>> loads(pickle.dumps({"a": [1, 2.5, "x", (None, True)]}))
    {'a': [1, 2.5, 'x', (None, True)]}
    >>> class Evil:
    ...     def __reduce__(self):
    ...         return (os.system, ("echo pwned",))
    >>> loads(pickle.dumps(Evil()))
    Traceback (most recent call last):
    ...
    cep.safe_pickle.UnsafeState: state: refused to load posix.system: it is not part of the engine's state (a crafted or foreign file?)
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from patterns.errors import CepError

__all__ = ["UnsafeState", "loads", "STATE_MODULES"]


class UnsafeState(CepError):
    """A pickle names something that is not part of the engine's state."""


_PLAIN: dict[str, frozenset[str]] = {
    "builtins": frozenset({
        "dict", "list", "tuple", "set", "frozenset", "bytes", "bytearray", "int", "float", "complex",
        "str", "bool", "slice", "range", "object", "NoneType", "Ellipsis", "NotImplemented",
    }),
    "collections": frozenset({"OrderedDict", "defaultdict", "deque", "Counter"}),
    "datetime": frozenset({"datetime", "date", "time", "timedelta", "timezone"}),
    "copyreg": frozenset({"_reconstructor"}),
    "numpy": frozenset({"ndarray", "dtype", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16",
                        "uint32", "uint64", "float16", "float32", "float64", "complex64", "complex128",
                        "str_", "bytes_", "object_", "datetime64", "timedelta64"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy.core.numeric": frozenset({"_frombuffer"}),
    "numpy._core.numeric": frozenset({"_frombuffer"}),
    "functools": frozenset({"partial"}),
    "types": frozenset({"MappingProxyType", "SimpleNamespace"}),
}

STATE_MODULES: tuple[str, ...] = (
    "cep.operator", "cep.nfa", "cep.expressions", "cep.events", "cep.seen", "cep.search_rules",
    "cep.engine", "cep.analytics", "cep.percolator", "patterns", "sketches",
)
"""Modules (and their submodules) whose classes may appear in state. The command line
(``cep.cli``), durable runs' file handling (``cep.durable``) and ``spark_udf`` are not here:
their callables act on the world (open files, start jobs) and are never part of a snapshot."""

_FUNCTIONS_OK = ("cep.percolator.",)
"""Modules whose plain functions may be loaded too (the percolator pickles partials of its
verification functions and rebuilds registered queries through a function; none of them acts
on the world); everywhere else only classes are admitted."""


_PLAIN_TYPES = (frozenset, set, dict, list, tuple, str, bytes, int, float)


def _bound_method(obj: Any, name: str) -> Any:
    """``getattr`` as pickle uses it for bound methods, on plain values only (``frozenset.issubset``
    in a query's verification partial); a general getattr would let a file walk from any admitted
    class to its module's globals."""
    if isinstance(obj, type) and obj.__module__.startswith("sketches.") and name == "from_bytes":
        return getattr(obj, name)  # sketches pickle as (cls.from_bytes, (their bytes,))
    public = not name.startswith("_") or name in ("__contains__", "__getitem__")
    # plain values, and the query trees of ``patterns`` (pure data with pure methods such as
    # RangeNode.contains); never a class itself, nor a runtime object whose methods write files
    tree = not isinstance(obj, type) and type(obj).__module__.startswith("patterns.")
    if public and (type(obj) in _PLAIN_TYPES or tree):
        return getattr(obj, name)
    raise UnsafeState(f"refused getattr({type(obj).__name__}, {name!r}): only methods of plain values "
                      "and query trees are part of the engine's state (a crafted or foreign file?)")


def _ours(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in STATE_MODULES)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name == "getattr":
            return _bound_method
        if name in _PLAIN.get(module, ()) or (module == "numpy.dtypes" and name.endswith("DType")):
            return super().find_class(module, name)
        if _ours(module) and not module.startswith("cep.cli"):
            obj = super().find_class(module, name)
            if isinstance(obj, type) or module.startswith(_FUNCTIONS_OK):
                return obj
        raise UnsafeState(f"refused to load {module}.{name}: it is not part of the engine's state "
                          "(a crafted or foreign file?)")


def loads(data: bytes | bytearray | memoryview, what: str = "state") -> Any:
    """Unpickle ``data`` admitting only plain values, numpy and the engine's own state classes.

    Raises:
        UnsafeState: the data names anything else (``what`` says what was being read); nothing
            it names has been called. Damaged data raises what :mod:`pickle` raises.
    """
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except UnsafeState as e:
        raise UnsafeState(f"{what}: {e}") from None
