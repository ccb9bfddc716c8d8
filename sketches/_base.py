"""Shared machinery of the sketches: the binary header, a checked reader, equality and copy."""

from __future__ import annotations

import struct
from typing import Any, ClassVar, Self, TypeVar

import numpy as np

from sketches.errors import IncompatibleSketchError, SketchFormatError

__all__ = ["FORMAT_VERSION", "Reader", "Sketch"]

FORMAT_VERSION = 1
"""Version byte written after the type byte by every ``to_bytes``."""

_REGISTRY: dict[int, type[Sketch]] = {}

S = TypeVar("S", bound="Sketch")


class Sketch:
    """Base of every sketch: binary header, equality on serialised state, copy, merge checks.

    Subclasses set ``TYPE_BYTE`` (the first byte of their serialisation) and implement
    ``_params`` (the constructor call that describes them), ``_write`` and ``_read``.
    """

    TYPE_BYTE: ClassVar[int] = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.TYPE_BYTE:
            _REGISTRY[cls.TYPE_BYTE] = cls

    # --- description -----------------------------------------------------------------------
    def _params(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self._params()

    # --- serialisation -----------------------------------------------------------------------
    def _write(self) -> list[bytes]:
        raise NotImplementedError

    @classmethod
    def _read(cls, reader: Reader) -> Self:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        """Serialise: a type byte, the format version byte, then the sketch's state."""
        return bytes((self.TYPE_BYTE, FORMAT_VERSION)) + b"".join(self._write())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Self:
        """Rebuild a sketch serialised by :meth:`to_bytes`.

        Raises:
            SketchFormatError: The data is of another sketch type, of an unknown format
                version, truncated, or has trailing bytes.
        """
        raw = bytes(data)
        _check_header(raw, cls)
        reader = Reader(raw, 2, cls.__name__)
        sketch = cls._read(reader)
        reader.finish()
        return sketch

    # --- value semantics ---------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable

    def copy(self) -> Self:
        """An independent deep copy."""
        return type(self).from_bytes(self.to_bytes())

    def __copy__(self) -> Self:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self.copy()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self).from_bytes, (self.to_bytes(),))

    # --- merging -----------------------------------------------------------------------------
    def _check_mergeable(self, other: object) -> None:
        if not isinstance(other, Sketch) or type(other) is not type(self):
            desc = other._params() if isinstance(other, Sketch) else f"{type(other).__name__}"
            raise IncompatibleSketchError(
                f"cannot merge {self._params()} with {desc}: different sketch types; merge "
                f"{type(self).__name__} sketches only with each other"
            )

    def _incompatible(self, other: Sketch, reason: str, fix: str) -> IncompatibleSketchError:
        return IncompatibleSketchError(
            f"cannot merge {self._params()} with {other._params()}: {reason}; {fix}"
        )


def sketch_from_bytes(data: bytes | bytearray | memoryview) -> Sketch:
    """Rebuild any sketch of this package from its bytes, dispatching on the type byte.

    Example:
        >>> from sketches import BloomFilter, from_bytes
        >>> bloom = BloomFilter(capacity=100, error_rate=0.01)
        >>> from_bytes(bloom.to_bytes()) == bloom
        True
    """
    raw = bytes(data)
    if not raw:
        raise SketchFormatError("cannot read a sketch from empty data: got 0 bytes")
    cls = _REGISTRY.get(raw[0])
    if cls is None:
        raise SketchFormatError(
            f"unknown sketch type byte 0x{raw[0]:02x}: expected one of "
            + ", ".join(f"0x{b:02x} ({c.__name__})" for b, c in sorted(_REGISTRY.items()))
            + _datasketches_hint(raw)
        )
    return cls.from_bytes(raw)


def _datasketches_hint(raw: bytes) -> str:
    if len(raw) >= 3 and raw[0] in (2, 3, 10) and raw[1] == 1 and raw[2] == 7:
        return "; the data looks like an Apache DataSketches HLL image: use HyperLogLog.from_datasketches"
    return ""


def _check_header(raw: bytes, cls: type[Sketch]) -> None:
    name = cls.__name__
    if len(raw) < 2:
        raise SketchFormatError(
            f"truncated {name} data: got {len(raw)} byte(s), a serialisation starts with a "
            "2-byte header (type, version)"
        )
    if raw[0] != cls.TYPE_BYTE:
        other = _REGISTRY.get(raw[0])
        found = f"a {other.__name__}" if other else "unknown"
        hint = f"; load it with {other.__name__}.from_bytes" if other else _datasketches_hint(raw)
        raise SketchFormatError(
            f"not a {name} serialisation: type byte is 0x{raw[0]:02x} ({found}), expected "
            f"0x{cls.TYPE_BYTE:02x}{hint}"
        )
    if raw[1] != FORMAT_VERSION:
        raise SketchFormatError(
            f"unsupported {name} format version {raw[1]}: this library reads version "
            f"{FORMAT_VERSION}; upgrade the sketches package that reads it"
        )


class Reader:
    """Reads little-endian fields from serialised bytes, failing clearly on truncation."""

    def __init__(self, raw: bytes, pos: int, name: str) -> None:
        self.raw = raw
        self.pos = pos
        self.name = name

    def _need(self, n: int) -> None:
        if self.pos + n > len(self.raw):
            raise SketchFormatError(
                f"truncated {self.name} data: needs at least {self.pos + n} bytes, "
                f"got {len(self.raw)}"
            )

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        st = struct.Struct("<" + fmt)
        self._need(st.size)
        values = st.unpack_from(self.raw, self.pos)
        self.pos += st.size
        return values

    def array(self, dtype: Any, count: int) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        self._need(dt.itemsize * count)
        out = np.frombuffer(self.raw, dtype=dt, count=count, offset=self.pos).astype(
            np.dtype(dtype), copy=True
        )
        self.pos += dt.itemsize * count
        return out

    def take(self, n: int) -> bytes:
        self._need(n)
        out = self.raw[self.pos : self.pos + n]
        self.pos += n
        return out

    def finish(self) -> None:
        extra = len(self.raw) - self.pos
        if extra:
            raise SketchFormatError(
                f"corrupt {self.name} data: {extra} unexpected trailing byte(s) after "
                f"{self.pos} bytes of sketch"
            )

    def corrupt(self, what: str) -> SketchFormatError:
        return SketchFormatError(f"corrupt {self.name} data: {what}")
