"""A progress bar on stderr for long runs (off when stderr is not a terminal)."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


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
        frac = min(done_bytes / self.total, 1.0)
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r[{bar:<30}] {frac:6.1%} {events:,} events {matches:,} matches")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
