"""Idle progress: when a live input goes quiet, event time moves on with the wall clock (opt-in).

Event time moves only with events, so in a live run whose input goes quiet a deadline ("not
shipped within 2 days", a ``WITHIN`` running out, a window's end) never passes. With
``--idle-progress D`` (``cep run --follow`` with ``--state``, and ``cep run --input -``), once no
input has come for ``D`` seconds of wall time, each rule's watermark may move on as if an event
stamped with its largest event time plus the wall time since the input went quiet had arrived:

    target = w0 + (now - last input), in milliseconds

where ``w0`` is the rule's watermark when the input went quiet. A rule moves only when its target
reaches its next deadline (:meth:`cep.engine.Engine.next_deadlines`), and then straight to the
target, so a quiet run does no work until something is due, and an event arriving after a quiet
spell is late only behind a watermark that released or ended something. New input ends the quiet
spell; the watermarks stay where they moved. A rule that has no event time yet does not move.
docs/semantics.md ("Idle progress") has the decision and how it compares with Flink and Esper.

Example:
    >>> from cep.engine import Engine
    >>> from patterns.rules import parse_rule_text
    >>> eng = Engine([parse_rule_text('''SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
    ...   MEASURES A.ts AS t0 PATTERN (A B*) WITHIN INTERVAL '10' SECOND
    ...   DEFINE A AS v = 1, B AS v = 2)''', "open")])
    >>> now = [0.0]
    >>> idle = IdleProgress(60, clock=lambda: now[0])
    >>> eng.process([{"k": "x", "ts": 1000, "v": 1}]).matches
    []
    >>> idle.input_seen()
    >>> now[0] = 59.0; idle.targets(eng)  # not quiet for 60 s yet
    {}
    >>> now[0] = 60.0; targets = idle.targets(eng); targets  # 1,000 + 60 s: past the deadline 11,000
    {'open': 61000}
    >>> idle.apply(eng, targets).matches
    [{'k': 'x', 't0': 1000, 'rule': 'open'}]
"""

from __future__ import annotations

import math
import queue
import threading
import time
from typing import Any, Callable, Iterable, Iterator

__all__ = ["IdleProgress", "check_idle_seconds", "ticking"]


def check_idle_seconds(value: float) -> str | None:
    """Why ``value`` is no ``--idle-progress`` (None when it is one).

    Example:
        >>> check_idle_seconds(30.0) is None, check_idle_seconds(-1.0)
        (True, '--idle-progress takes seconds of wall time, 0 or more; found -1.0')
    """
    if not math.isfinite(value) or value < 0:
        return f"--idle-progress takes seconds of wall time, 0 or more; found {value!r}"
    return None


class IdleProgress:
    """Decides when and how far a quiet input's rules move on with the wall clock.

    ``after_seconds``: wall time with no input before the watermarks may move (``D``).
    ``clock``: the wall clock in seconds (default ``time.monotonic``; a fake one in tests).
    The host calls :meth:`input_seen` after every batch, asks :meth:`targets` while no input
    comes, and hands what it gets to :meth:`apply` (a durable run records the targets first, so
    that a restart replays the same advance: :meth:`cep.engine.Engine.advance_watermarks`).
    """

    def __init__(self, after_seconds: float, clock: Callable[[], float] | None = None):
        problem = check_idle_seconds(after_seconds)
        if problem is not None:
            raise ValueError(problem)
        self.after = float(after_seconds)
        self.clock = clock or time.monotonic
        self.quiet_since = self.clock()
        self.bases: dict[str, int] | None = None  # each rule's watermark when the input went quiet
        self.due: dict[str, int] = {}  # rule -> wall milliseconds of quiet at which its next deadline passes
        self.advances = 0

    def input_seen(self) -> None:
        """Input came (or the rules changed): a new quiet spell starts now."""
        self.quiet_since = self.clock()
        self.bases = None
        self.due = {}

    def quiet_ms(self) -> int | None:
        """Wall milliseconds since the input went quiet, or None while that is less than ``D``."""
        quiet = self.clock() - self.quiet_since
        return int(quiet * 1000) if quiet >= self.after else None

    def targets(self, engine: Any) -> dict[str, int]:
        """The rules due to move now and the watermark each moves to (empty: nothing is due)."""
        p = self.quiet_ms()
        if p is None:
            return {}
        if self.bases is None:
            self.bases = {n: w for n, w in engine.watermarks().items() if w is not None}
            self._refresh(engine, self.bases, -1)
        return {n: self.bases[n] + p for n, need in self.due.items() if need <= p}

    def apply(self, engine: Any, targets: dict[str, int]) -> Any:
        """Move the rules to ``targets``; what that releases or ends (an EngineOutput)."""
        out = engine.advance_watermarks(targets)
        self.advances += 1
        if self.bases is not None:
            done = max((t - self.bases[n] for n, t in targets.items() if n in self.bases), default=-1)
            self._refresh(engine, [n for n in targets if n in self.bases], done)
        return out

    def _refresh(self, engine: Any, names: Iterable[str], done: int) -> None:
        """Look up the next deadlines of ``names`` (one call per rule, not per look at the input)."""
        names = list(names)
        deadlines = engine.next_deadlines(names)
        assert self.bases is not None
        for n in names:
            d = deadlines.get(n)
            if d is None:
                self.due.pop(n, None)
            else:
                # never due again at a quiet time already applied (a deadline the move did not clear)
                self.due[n] = max(d - self.bases[n], done + 1)

    def wait_seconds(self, longest: float = 1.0) -> float:
        """How long the host may wait for input before something may be due (at most ``longest``)."""
        quiet = self.clock() - self.quiet_since
        if quiet < self.after:
            left = self.after - quiet
        elif self.bases is None:
            left = 0.0  # quiet long enough: look now
        elif self.due:
            left = min(self.due.values()) / 1000 - quiet
        else:
            left = longest
        return min(longest, max(0.001, left))


_END = object()


def ticking(items: Iterable[Any], timeout: Callable[[], float]) -> Iterator[Any]:
    """``items``, read in a thread of their own, with None whenever ``timeout()`` seconds pass without one.

    For an input that blocks while it has nothing (standard input): the caller gets a turn to
    move time on while the reader waits. The reader stays at most one item ahead; an error it
    meets is raised here, in order.

    Example:
        >>> list(ticking(iter([1, 2]), lambda: 10.0))
        [1, 2]
    """
    q: queue.Queue = queue.Queue(maxsize=1)

    def read() -> None:
        try:
            for item in items:
                q.put((item, None))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            q.put((_END, e))
            return
        q.put((_END, None))

    threading.Thread(target=read, name="cep-input", daemon=True).start()
    while True:
        try:
            item, err = q.get(timeout=timeout())
        except queue.Empty:
            yield None
            continue
        if item is _END:
            if err is not None:
                raise err
            return
        yield item
