"""The cyclic garbage collector paused while a batch runs: the engine's own objects are not cyclic garbage."""

from __future__ import annotations

import gc

__all__ = ["gc_paused", "StartupCollector"]


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


class StartupCollector:
    """A command's start without the cyclic collector: off from the command's start until its first
    batch is through, then every object made so far frozen (``gc.freeze``) and the collector on.

    Why: a process's start makes most of its long-lived objects (the rules compiled, numba's
    compiler and type system loaded at the first batch, pandas and pyarrow): while they are made,
    the collector runs again and again over all of them, and after that every full collection
    traverses them again (``cep run`` of 200 rules over 74,129 bars: 1.69 -> 1.31 CPU s for the
    whole process; README "Many rules"). Frozen, they are left out of every collection;
    reference counting still frees them. What the start leaves as cyclic garbage is kept (frozen)
    rather than collected: a few objects made once per process. So only a process the command
    owns (``own``: the ``cep`` console script, ``python -m cep.cli``) does it, never ``main([...])``
    called from a host's code or tests, whose objects are not the command's to freeze, nor the
    library (:class:`cep.engine.Engine`). If the collector is already off (the caller turned it
    off), nothing changes.

    Example:
        >>> import gc
        >>> start = StartupCollector(own=True)
        >>> gc.isenabled()
        False
        >>> start.done(); start.done()  # (the second call does nothing)
        >>> gc.isenabled()
        True
        >>> gc.unfreeze()
        >>> StartupCollector(own=False).done(); gc.isenabled()
        True
    """

    __slots__ = ("_off",)

    def __init__(self, own: bool) -> None:
        self._off = own and gc.isenabled()
        if self._off:
            gc.disable()

    def done(self) -> None:
        """The start is over (the first batch is through, or the command ends): freeze, collector on."""
        if self._off:
            self._off = False
            gc.freeze()
            gc.enable()
