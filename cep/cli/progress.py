"""A progress bar on stderr for long runs (off when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time

from patterns.errors import count_noun

__all__ = ["Progress", "progress_line"]


def progress_line(frac: float, events: int, matches: int) -> str:
    """The bar and its counts, each with its noun.

    Example:
        >>> progress_line(0.5, 1, 1255)
        '[###############               ]  50.0% 1 event 1,255 matches'
    """
    bar = "#" * int(frac * 30)
    return f"[{bar:<30}] {frac:6.1%} {count_noun(events, 'event')} {count_noun(matches, 'match', 'matches')}"


class Progress:
    """A one-line progress bar on stderr, redrawn at most five times a second."""

    def __init__(self, total_bytes: int, enabled: bool):
        self.total = max(total_bytes, 1)
        self.enabled = enabled
        self.last = 0.0

    def update(self, done_bytes: int, events: int, matches: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        sys.stderr.write("\r" + progress_line(min(done_bytes / self.total, 1.0), events, matches))
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
