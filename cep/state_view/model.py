"""The plain data a state view is made of: one :class:`RuleView` per rule, a :class:`StateView` around them."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cep.events import format_time
from patterns.errors import CepError

__all__ = ["RuleView", "StateView", "StateViewError", "NotAState", "UnreadableState", "RuleMismatch",
           "plain", "key_dict", "key_text", "time_text"]


class StateViewError(CepError):
    """A state that cannot be shown; ``exit_code`` is the command's (2 usage, 3 unreadable)."""

    exit_code = 3


class NotAState(StateViewError):
    """The path is not a state directory (or checkpoint) at all: a usage error."""

    exit_code = 2


class UnreadableState(StateViewError):
    """A state that is there but cannot be read: damaged, foreign, or of another version."""

    exit_code = 3


class RuleMismatch(StateViewError):
    """The rules given do not fit the state (a rule changed since it was written, an unknown --rule)."""

    exit_code = 2


def plain(v: Any) -> Any:
    """A value as JSON can hold it: numpy scalars unwrapped, tuples as lists, NaN as None, bytes as base64.

    Example:
        >>> plain((np.int64(3), float("nan"), b"\\x01", {"a": np.float32(0.5)}))
        [3, None, 'base64:AQ==', {'a': 0.5}]
    """
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "base64:" + base64.b64encode(bytes(v)).decode()
    if isinstance(v, (list, tuple, np.ndarray)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def key_dict(columns: list[str] | tuple[str, ...], key: Any) -> dict[str, Any]:
    """A partition or group key as ``{column: value}``: one column holds the value, several a tuple.

    Example:
        >>> key_dict(["sym"], "AAPL"), key_dict(["a", "b"], (1, "x")), key_dict([], ())
        ({'sym': 'AAPL'}, {'a': 1, 'b': 'x'}, {})
    """
    if not columns:
        return {}
    if len(columns) == 1:
        return {columns[0]: plain(key)}
    return {c: plain(v) for c, v in zip(columns, key)}


def key_text(key: dict[str, Any]) -> str:
    """How ``--key`` names a key: the value of a one-column key, ``a=1,b=x`` for several, ``()`` for none.

    Example:
        >>> key_text({"sym": "AAPL"}), key_text({"a": 1, "b": "x"}), key_text({})
        ('AAPL', 'a=1,b=x', '()')
    """
    if not key:
        return "()"
    if len(key) == 1:
        return str(next(iter(key.values())))
    return ",".join(f"{k}={v}" for k, v in key.items())


def time_text(ms: Any) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC text (None stays None)."""
    return None if ms is None else format_time(int(ms))


@dataclass
class RuleView:
    """One rule's state: its clock, counters, totals, and the state of each key that has some."""

    name: str
    kind: str
    watermark: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    keys: list[dict[str, Any]] = field(default_factory=list)
    sketches: list[dict[str, Any]] = field(default_factory=list)  # rule-wide sketches (FIRST_SEEN filters)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "watermark": self.watermark,
            "watermark_time": time_text(self.watermark),
            "counts": self.counts,
            "totals": self.totals,
            "keys": self.keys,
            "sketches": self.sketches,
            "notes": self.notes,
        }


@dataclass
class StateView:
    """Everything ``cep state`` shows: where the state came from, its positions, and every rule."""

    source: dict[str, Any]
    rules: list[RuleView]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**self.source, "rules": [r.to_json() for r in self.rules], "notes": self.notes}
