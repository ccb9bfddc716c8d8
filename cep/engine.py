"""The embedded engine: many rules in one pass over one or several event streams.

Example:
    >>> from patterns.rules import parse_rules
    >>> engine = Engine(parse_rules('''
    ... rules:
    ...   - name: rise
    ...     sql: |
    ...       SELECT * FROM ticks MATCH_RECOGNIZE (
    ...         PARTITION BY sym ORDER BY ts
    ...         MEASURES FIRST(A.px) AS low, LAST(B.px) AS high
    ...         PATTERN (A B+)
    ...         DEFINE B AS B.px > PREV(B.px))
    ... '''))
    >>> out = engine.process([{"sym": "X", "ts": t, "px": p} for t, p in enumerate([5, 6, 7, 3])])
    >>> out.matches + engine.finish().matches
    [{'sym': 'X', 'low': 5, 'high': 7, 'rule': 'rise'}]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from cep.events import to_batch
from cep.operator import OperatorOutput, StateVersionError
from patterns.rules import Rule, RuleSet, load_rules

__all__ = ["Engine", "EngineOutput", "Counts"]

SNAPSHOT_MAGIC = b"CEPENG"
SNAPSHOT_VERSION = 1


EngineOutput = OperatorOutput


@dataclass
class Counts:
    """Per-rule counters: read = processed + late + errors + buffered."""

    read: int
    processed: int
    late: int
    errors: int
    buffered: int
    matches: int
    partial_matches_peak: int
    partial_matches_dropped: int
    cap_hits: int
    eval_errors: int


# rule kind -> "module:Class" of its operator; every operator has from_rule(rule), process(batch),
# finish(), snapshot(), restore(bytes), and the counters `counts` and `stats`.
OPERATORS = {
    "pattern": "cep.operator:PatternOperator",
    "analytics": "cep.analytics:WindowOperator",
    "search": "cep.search_rules:SearchOperator",
}


def make_operator(rule: Rule) -> Any:
    """The runtime operator of one rule, by its kind."""
    import importlib

    module, _, cls = OPERATORS[rule.kind].partition(":")
    return getattr(importlib.import_module(module), cls).from_rule(rule)


class Engine:
    """Runs every rule of a rule set over pushed events; each output row names its rule.

    A rule reads the input stream its ``FROM`` names when the engine has a stream of that name;
    otherwise it reads every stream (events carry their stream's name in the ``stream`` field).
    """

    def __init__(self, rules: RuleSet | Iterable[Rule] | str, streams: Iterable[str] | None = None):
        if isinstance(rules, str):
            rules = load_rules(rules)
        self.rules = list(rules)
        self.streams = set(streams or ())
        self.operators: dict[str, Any] = {r.name: make_operator(r) for r in self.rules}
        self.bad_lines = 0

    def _reads(self, rule: Rule, stream: str | None) -> bool:
        if stream is None or rule.stream not in self.streams:
            return True
        return rule.stream == stream

    def process(self, events: Any, stream: str | None = None) -> EngineOutput:
        """Push a batch (EventBatch, dict, list of dicts, pandas or Arrow) through every rule."""
        batch = to_batch(events)
        out = EngineOutput()
        for bl in batch.bad:
            self.bad_lines += 1
            out.errors.append({"rule": None, **bl.to_dict()})
        if stream is not None:
            self.streams.add(stream)
            if "stream" not in batch.columns:
                batch.columns["stream"] = np.full(batch.n, stream, dtype=object)
        for rule in self.rules:
            if self._reads(rule, stream):
                out.extend(self.operators[rule.name].process(batch))
        return out

    def finish(self) -> EngineOutput:
        """End of input: flush every rule (final watermark)."""
        out = EngineOutput()
        for rule in self.rules:
            out.extend(self.operators[rule.name].finish())
        return out

    def run(self, batches: Iterable[Any]) -> EngineOutput:
        """Process every batch then finish; everything emitted, in order."""
        out = EngineOutput()
        for b in batches:
            out.extend(self.process(b))
        out.extend(self.finish())
        return out

    def counts(self) -> dict[str, Counts]:
        """Counters per rule."""
        res = {}
        for name, op in self.operators.items():
            c, s = op.counts, op.stats
            res[name] = Counts(
                c.read, c.processed, c.late, c.errors, c.buffered, s.matches,
                getattr(s, "partial_matches_peak", 0), getattr(s, "partial_matches_dropped", 0),
                getattr(s, "cap_hits", 0), getattr(s, "eval_errors", 0),
            )
        return res

    def snapshot(self) -> bytes:
        """Every rule's state as bytes: restore into an engine built from the same rules."""
        import pickle

        parts = {name: op.snapshot() for name, op in self.operators.items()}
        body = pickle.dumps({"rules": parts, "streams": sorted(self.streams), "bad_lines": self.bad_lines}, protocol=5)
        return SNAPSHOT_MAGIC + bytes([SNAPSHOT_VERSION]) + body

    def restore(self, data: bytes) -> None:
        """Restore a snapshot; rules absent from it start empty, rules absent here are dropped."""
        import pickle

        if not data.startswith(SNAPSHOT_MAGIC) or len(data) < 7 or data[6] != SNAPSHOT_VERSION:
            raise StateVersionError(
                "not an engine snapshot of this version (expected magic CEPENG and version "
                f"{SNAPSHOT_VERSION}); start from an empty state or use the engine that wrote it"
            )
        state = pickle.loads(data[7:])
        for name, blob in state["rules"].items():
            if name in self.operators:
                self.operators[name].restore(blob)
        self.streams = set(state["streams"])
        self.bad_lines = state["bad_lines"]

