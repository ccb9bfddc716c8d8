"""What ``cep explain`` tells: per input row the verdicts of one rule, then the rule's outcome.

Every rule kind explains itself in these terms, so one renderer (a terminal table, ``--json``)
serves patterns, windowed analytics and search rules alike.

Example:
    >>> v = Verdict("condition", "B.price 101.2 > PREV(B.price) 100.9: true", True, {"var": "B"})
    >>> row = ExplainedRow(3, 1_500_000_000_000, {"price": 101.2}, [v])
    >>> ex = Explanation("rise", "pattern", {"sym": "AAPL"}, [row], [Verdict("match", "1 match", True)])
    >>> ex.to_dict()["rows"][0]["verdicts"][0]["kind"]
    'condition'
    >>> ex.matched
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from patterns.errors import CepError

__all__ = ["Verdict", "ExplainedRow", "Explanation", "VERDICT_KINDS", "ExplainError"]


class ExplainError(CepError):
    """What ``cep explain`` cannot explain as asked (a key the rule has not, a key not in the input):
    a usage error (exit 2), the message says what to pass instead."""


VERDICT_KINDS = {
    # patterns
    "condition": "a pattern variable's condition on the row, with the values it read",
    "started": "a partial match started at the row",
    "extended": "a partial match took the row",
    "ended": "a partial match ended: the condition it needed failed on the row",
    "pruned": "a partial match was dropped by preferment or by the after-match skip",
    "dropped": "a partial match was dropped by a cap (max_partial_matches, the work budget)",
    "expired": "a partial match ran out of its WITHIN time",
    "deadline": "a deadline fired (absence completed, time-out row)",
    "match": "a complex event was emitted",
    "late": "the row was behind the watermark: reported late, not processed",
    "error": "the row could not be read (bad time, bad key): reported as an error",
    "nearest_miss": "no match: the longest partial match and the condition that ended it",
    # windowed analytics
    "window": "a window the row fell into, with the aggregates after it",
    "emitted": "a window's row was emitted (or corrected by a late row)",
    # search
    "clause": "a clause of a search query held or not on the document",
    "presearcher": "why the presearcher did or did not pick the query",
    "info": "anything else worth saying",
}


@dataclass
class Verdict:
    """One thing the engine found or did, in words (``text``) and as data (``data``, for tools).

    ``ok`` is True for a condition that held, a match, a clause that matched; False for the
    opposite; None when neither applies (a partial match extended, a window updated).
    """

    kind: str
    text: str
    ok: bool | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "ok": self.ok, **({"data": self.data} if self.data else {})}


@dataclass
class ExplainedRow:
    """An input row of the explained key (its position in that key's input, its event time in
    epoch ms, the event itself) and the verdicts the rule reached on it.

    ``index`` -1 is a moment rather than a row: the watermark passing deadlines (``ts`` is the
    watermark) or the end of the input; ``event`` then says which, under the key ``(time)``."""

    index: int
    ts: int | None
    event: dict[str, Any]
    verdicts: list[Verdict] = field(default_factory=list)
    line: int | None = None  # the event's line in its input file, when known

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "ts": self.ts, "event": self.event,
                "verdicts": [v.to_dict() for v in self.verdicts],
                **({"line": self.line} if self.line is not None else {})}


@dataclass
class Explanation:
    """One rule explained over one key (``key`` maps the rule's key columns to their values; empty
    for a rule without keys): the rows in event-time order and the outcome (matches emitted, or
    the nearest miss; the final windows; the queries that matched)."""

    rule: str
    kind: str
    key: dict[str, Any]
    rows: list[ExplainedRow] = field(default_factory=list)
    outcome: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats: a time range cut off the start, ...

    @property
    def matched(self) -> bool:
        """Whether the rule emitted anything for the key in the range."""
        return any(v.kind in ("match", "emitted") or (v.kind == "clause" and v.ok and v.data.get("query_matched"))
                   for v in self.outcome + [v for r in self.rows for v in r.verdicts])

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "kind": self.kind, "key": self.key,
                "rows": [r.to_dict() for r in self.rows],
                "outcome": [v.to_dict() for v in self.outcome], "notes": list(self.notes)}
