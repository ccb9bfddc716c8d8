"""The versioned binary blob one hash bucket keeps in Spark's state store, and its checks.

Spark sees a fixed state schema, ``state binary, version int``, so its own state-schema check
never blocks a restart; what the bytes mean is versioned here. A blob is::

    b"CEPS" | u8 encoding version | u32 header length | header (JSON) | operator snapshot

The header names the rule, its kind, the bucket count and a fingerprint of everything the
snapshot's layout depends on (partition and time columns, the compiled pattern, the columns
and aggregates a row of state holds). Reading a blob checks, in order: the encoding version,
the rule fingerprint, the bucket count; each failure is a :class:`SparkStateError` that says
what changed and what to do.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from patterns.errors import CepError

__all__ = [
    "STATE_ENCODING_VERSION",
    "STATE_SCHEMA",
    "SparkStateError",
    "StateEncodingError",
    "RuleChangedError",
    "BucketHeader",
    "CODECS",
    "encode_state",
    "decode_state",
    "pattern_fingerprint",
]

STATE_ENCODING_VERSION = 1
"""Bumped whenever the blob layout or the embedded snapshot format changes incompatibly."""

STATE_SCHEMA = "state binary, version int"
"""The Spark state schema of every bucket: fixed forever, versioned inside."""

_MAGIC = b"CEPS"
_PREFIX = struct.Struct(">4sBI")

_NEW_CHECKPOINT = (
    "start a new checkpoint directory (and output path) to replay the input from the beginning, "
    "or run 'cep spark backfill' over the history first"
)


_HELD = {
    "pattern": (
        "partial matches",
        "PARTITION BY, ORDER BY, PATTERN, WITHIN, ROWS PER MATCH, or the columns, aggregates and PREV "
        "offsets its state holds",
    ),
    "analytics": ("windows", "its SQL statement, sketch sizes or lateness"),
}
"""Per rule kind: what a bucket's saved state holds, and what a change to cannot carry it over."""


class SparkStateError(CepError):
    """Spark state that this build or this rule file cannot carry over."""


class StateEncodingError(SparkStateError):
    """The checkpoint's state was written by another state encoding."""


class RuleChangedError(SparkStateError):
    """A rule changed in a way its saved partial matches cannot survive."""


@dataclass(frozen=True)
class BucketHeader:
    """What a saved bucket belongs to."""

    rule: str
    kind: str
    fingerprint: str
    buckets: int
    codec: str | None = None
    """How the snapshot is stored: None as is, 'zlib' compressed (written only when set, so
    blobs without it read as before)."""

    def to_json(self) -> bytes:
        head = {"rule": self.rule, "kind": self.kind, "fingerprint": self.fingerprint, "buckets": self.buckets}
        if self.codec is not None:
            head["codec"] = self.codec
        return json.dumps(head, sort_keys=True).encode()


CODECS = (None, "zlib")
"""Snapshot codecs: analytics state (sketch counters, Bloom bits, pane arrays) is mostly zeros,
and zlib at level 1 shrinks it 20-100x for well under a millisecond per 100 KB."""


def encode_state(header: BucketHeader, snapshot: bytes, version: int = STATE_ENCODING_VERSION) -> tuple[bytes, int]:
    """The ``(state, version)`` tuple Spark stores for one bucket.

    Example:
        >>> blob, v = encode_state(BucketHeader("r", "pattern", "ab12", 64), b"snap")
        >>> decode_state(blob, v, BucketHeader("r", "pattern", "ab12", 64))
        b'snap'
        >>> blob, v = encode_state(BucketHeader("r", "analytics", "cd34", 64, "zlib"), bytes(1000))
        >>> len(blob) < 200, decode_state(blob, v, BucketHeader("r", "analytics", "cd34", 64)) == bytes(1000)
        (True, True)
    """
    head = header.to_json()
    if header.codec == "zlib":
        snapshot = zlib.compress(snapshot, 1)
    return _PREFIX.pack(_MAGIC, version, len(head)) + head + snapshot, version


def decode_state(
    blob: bytes, version: int, expected: BucketHeader, expected_version: int = STATE_ENCODING_VERSION
) -> bytes:
    """The operator snapshot inside a stored bucket, after checking it belongs to ``expected``.

    Raises :class:`StateEncodingError` when the encoding differs and :class:`RuleChangedError`
    when the rule's state layout or the bucket count changed.

    Example:
        >>> blob, v = encode_state(BucketHeader("r", "pattern", "ab12", 64), b"snap")
        >>> decode_state(blob, v, BucketHeader("r", "pattern", "ab12", 16))
        Traceback (most recent call last):
        ...
        spark_udf.state.RuleChangedError: rule 'r': the checkpoint's state was written with 64 key buckets, this run uses 16; the bucket count is fixed by the first run of a checkpoint: pass --buckets 64 (buckets=64), or start a new checkpoint directory (and output path) to replay the input from the beginning, or run 'cep spark backfill' over the history first
    """
    blob = bytes(blob)
    if version != expected_version or len(blob) < _PREFIX.size or blob[:4] != _MAGIC or blob[4] != version:
        got = version if blob[:4] == _MAGIC else f"{version} (not a cep bucket blob)"
        raise StateEncodingError(
            f"rule {expected.rule!r}: the checkpoint holds Spark operator state of encoding version "
            f"{got}; this build reads version {expected_version}. Finish the stream with the "
            f"version that wrote it, or {_NEW_CHECKPOINT}"
        )
    _, _, n = _PREFIX.unpack_from(blob)
    try:
        head = json.loads(blob[_PREFIX.size : _PREFIX.size + n])
    except ValueError:
        raise StateEncodingError(
            f"rule {expected.rule!r}: the checkpoint's state header is corrupt; {_NEW_CHECKPOINT}"
        ) from None
    if head.get("kind") != expected.kind:
        raise RuleChangedError(
            f"rule {expected.rule!r}: its state was saved by a {head.get('kind')!r} rule, the rule "
            f"file now has a {expected.kind!r} rule of that name. Give the new rule another name "
            f"(its old state is then dropped), or {_NEW_CHECKPOINT}"
        )
    if head.get("buckets") != expected.buckets:
        raise RuleChangedError(
            f"rule {expected.rule!r}: the checkpoint's state was written with {head.get('buckets')} key "
            f"buckets, this run uses {expected.buckets}; the bucket count is fixed by the first run "
            f"of a checkpoint: pass --buckets {head.get('buckets')} (buckets={head.get('buckets')}), "
            f"or {_NEW_CHECKPOINT}"
        )
    if head.get("fingerprint") != expected.fingerprint:
        held, what = _HELD.get(expected.kind, ("state", "what its state depends on"))
        raise RuleChangedError(
            f"rule {expected.rule!r} changed since the checkpoint was written in a way its saved "
            f"{held} cannot survive ({what}). Choose one: "
            "rename the rule so it starts afresh beside the old state (which is then dropped); "
            f"pass --on-rule-change reset (on_rule_change='reset') to drop this rule's {held} "
            f"and continue; or {_NEW_CHECKPOINT}"
        )
    body = blob[_PREFIX.size + n :]
    codec = head.get("codec")
    if codec not in CODECS:
        raise StateEncodingError(
            f"rule {expected.rule!r}: the checkpoint's state is stored with codec {codec!r}; this build "
            f"reads {', '.join(repr(c) for c in CODECS)}. Finish the stream with the version that wrote it, "
            f"or {_NEW_CHECKPOINT}"
        )
    return zlib.decompress(body) if codec == "zlib" else body


def pattern_fingerprint(automaton: Any) -> str:
    """A digest of what a pattern operator's snapshot layout depends on.

    Changing DEFINE conditions, MEASURES that read no new column, skip strategy or lateness
    keeps the fingerprint: saved partial matches carry over.
    """
    mr = automaton.mr
    aggs = list(getattr(automaton.layout, "_agg_keys", {}) or [(a.func, a.vars) for a in automaton.aggs])
    parts = (
        tuple(mr.partition_by),
        mr.order_by,
        tuple(automaton.ins),
        tuple(automaton.var_names),
        tuple(automaton.columns),
        tuple(repr(a) for a in aggs),
        mr.within_ms,
        mr.rows_per_match,
        automaton.max_back,
    )
    # rows held back for NEXT in DEFINE, and where unmatched rows were output up to, are state
    # too; added only when used, so rules without them keep the fingerprints of saved checkpoints
    extra = (getattr(automaton, "lookahead", 0), bool(getattr(mr, "with_unmatched", False)))
    if extra != (0, False):
        parts = parts + (extra,)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]
