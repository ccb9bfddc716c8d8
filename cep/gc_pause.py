"""The cyclic garbage collector paused while a batch runs: the engine's own objects are not cyclic garbage."""

from __future__ import annotations

import gc

__all__ = ["gc_paused"]


class gc_paused:  # noqa: N801 - used as a function: ``with gc_paused():``
    """Suspend the cyclic garbage collector while the block runs (when ``pause`` and it runs), then
    turn it back on.

    Why: a batch makes many short-lived objects (output rows, start-row objects, row tuples) that
    reference counting frees; the collector, triggered by their allocations, would traverse every
    live object of the process over and over for nothing (about a sixth of the CPU of a V-shape
    over many keys, a fifth to a third of 200 rules). Cyclic garbage made inside the block is
    collected after it, on the next collection, so memory stays bounded by a batch. If the
    collector is already off (the caller paused it, or the application turned it off), nothing
    changes.

    Example:
        >>> import gc
        >>> with gc_paused():
        ...     gc.isenabled()
        False
        >>> gc.isenabled()
        True
    """

    __slots__ = ("_pause", "_off")

    # (a class, not a generator under contextlib.contextmanager: the operator enters it once per
    # rule and batch, mostly with the collector already off, and the generator's set-up cost
    # several times the check)
    def __init__(self, pause: bool = True) -> None:
        self._pause = pause
        self._off = False

    def __enter__(self) -> None:
        if self._pause and gc.isenabled():
            gc.disable()
            self._off = True

    def __exit__(self, *exc: object) -> None:
        if self._off:
            self._off = False
            gc.enable()
