"""Exceptions raised by the sketches package, all rooted at :class:`SketchError`."""

from __future__ import annotations

__all__ = [
    "IncompatibleSketchError",
    "SketchError",
    "SketchFormatError",
    "SketchTypeError",
]


class SketchError(ValueError):
    """Root of every error this package raises on purpose.

    It derives from :class:`ValueError`, so callers that already catch bad values keep working.

    Example:
        >>> from sketches import HyperLogLog, SketchError
        >>> try:
        ...     HyperLogLog(p=2)
        ... except SketchError as err:
        ...     print(type(err).__name__)
        SketchError
    """


class IncompatibleSketchError(SketchError):
    """Two sketches cannot be merged because their parameters differ.

    The message shows both sides' parameters and how to build compatible sketches.
    """


class SketchFormatError(SketchError):
    """Serialised bytes are of the wrong sketch type, an unknown version, or truncated."""


class SketchTypeError(SketchError, TypeError):
    """A value cannot be hashed: it is not a str, bytes, int, float, bool or None."""
