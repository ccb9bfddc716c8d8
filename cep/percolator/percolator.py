"""The percolator: an indexed query set; the presearcher picks candidates, only those are
verified."""

from __future__ import annotations

import gc
import pickle
import time
from collections.abc import Iterable, Mapping
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from cep.percolator.arrays import _pick, _unique
from cep.percolator.config import PercolatorConfig, _gc_paused
from cep.percolator.documents import _Batch, _DocView
from cep.percolator.highlight import _highlight
from cep.percolator.loops import _loops
from cep.percolator.query import QueryId
from cep.percolator.query_index import _Snapshot
from cep.percolator.query_set import MetadataFilter, _QuerySet
from cep.percolator.results import (
    BatchResult,
    BatchStats,
    DocumentMatches,
    _BatchMatches,
    _BatchSlots,
)
from cep.percolator.saved import (
    _INDEX_FORMAT,
    _INDEX_VERSION,
    _code_fingerprint,
    _config_to_json,
    _index_digest,
)
from cep.percolator.segment import _Segment
from patterns.errors import CepError

__all__ = ["Percolator"]


_SETTLE_AT = 20_000  # queries in a freshly built segment worth one full collection
_PART_DOCS = 2_000  # documents the numpy path takes at once, at most
_PART_CHARS = 200_000  # and characters of text (strings at the top of the documents)
# The compiled loops keep no array per key hit and one small one per token: measured on 10,000
# Reuters articles, one part of all of them ran 1.3x faster than parts of 200,000 characters
_COMPILED_PART_DOCS = 20_000
_COMPILED_PART_CHARS = 20_000_000


def _parts(docs: list[Mapping[str, Any]], compiled: bool = False) -> list[int]:
    """Where to cut a batch into parts of at most ``_PART_DOCS`` documents and about
    ``_PART_CHARS`` characters (with the compiled loops, ``_COMPILED_PART_*``):
    ``[0, ..., len(docs)]``."""
    most, most_chars = ((_COMPILED_PART_DOCS, _COMPILED_PART_CHARS) if compiled
                        else (_PART_DOCS, _PART_CHARS))
    cuts = [0]
    chars = 0
    for i, doc in enumerate(docs):
        if i - cuts[-1] >= most or chars >= most_chars:
            cuts.append(i)
            chars = 0
        for v in doc.values():
            if type(v) is str:
                chars += len(v)
    cuts.append(len(docs))
    return cuts


class Percolator(_QuerySet):
    """An indexed query set: the presearcher picks candidates, only those are verified.

    Registration marks the index stale; the next percolation rebuilds it (new queries go to a
    small delta segment; see :attr:`PercolatorConfig.delta_limit`). Percolation reads an
    immutable snapshot, so it is safe while other threads register queries.

    Example:
        >>> p = Percolator()
        >>> for qid, q in [("a", "apple AND pie"), ("b", "pi*"), ("c", '"apple pie"~1')]:
        ...     _ = p.register(qid, q)
        >>> p.percolate({"id": 7, "text": "Pie with apple"}).ids
        ['a', 'b']
    """

    def __init__(self, config: PercolatorConfig | None = None) -> None:
        super().__init__(config)
        self._snapshot = _Snapshot((), frozenset(), {})

    def snapshot(self) -> _Snapshot:
        """The current index, rebuilt first if queries changed since the last build."""
        if self._dirty:
            with self._lock:
                if self._dirty:
                    with _gc_paused(self.config.pause_gc):
                        self._snapshot = self._rebuild(self._snapshot)
                        self._dirty = False
                    self._settle(self._snapshot)
        return self._snapshot

    def save_index(self, path: str | Path) -> None:
        """Write the built index to ``path``, so that :meth:`load` starts without parsing a
        query or building anything (measured at 100,000 queries: see docs/search.md).

        The file is a JSON header line (format, version, configuration, checksum) and a pickle
        of the queries and the index. Read only index files you wrote: a pickle may run code
        when read; the checksum catches a damaged file, not a forged one. An index is read only
        by the code that wrote it (else :meth:`load` says so): keep the queries too
        (:meth:`save`), the portable form. Read it back with :meth:`load_index`.

        Example:
            >>> import os, tempfile
            >>> p = Percolator(); _ = p.register("q", "apple AND pie", {"owner": "ann"})
            >>> path = os.path.join(tempfile.mkdtemp(), "index.bin")
            >>> p.save_index(path)
            >>> again = Percolator.load_index(path)
            >>> again.percolate({"t": "Apple pie"}).ids, again.get("q").metadata["owner"]
            (['q'], 'ann')
        """
        with self._lock:
            snap = self.snapshot()
            rows = self.queries()
            state = {"queries": rows, "next_slot": self._next_slot, "snapshot": snap}
            try:
                payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise CepError(f"cannot save the index: a query id or metadata value cannot "
                               f"be written ({exc})") from None
        header = {"format": _INDEX_FORMAT, "version": _INDEX_VERSION, "code": _code_fingerprint(),
                  "queries": len(rows), "bytes": len(payload), "config": _config_to_json(self.config)}
        header["sha256"] = _index_digest(header, payload)
        tmp = Path(str(path) + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(header) + b"\n")
            fh.write(payload)
        tmp.replace(path)

    def _restore(self, state: dict[str, Any]) -> None:
        super()._restore(state)
        snap = state["snapshot"]
        if snap is not None:
            self._snapshot = snap
            self._dirty = False
            self._settle(snap)

    def rebuild(self) -> None:
        """Rebuild the whole index now (one segment)."""
        with self._lock:
            with _gc_paused(self.config.pause_gc):
                live = sorted(self._queries.values(), key=lambda q: q.slot)
                self._snapshot = _Snapshot((_Segment(live, self.config),), frozenset(),
                                           {q.slot: q for q in live})
                self._dirty = False
            self._settle(self._snapshot)

    def _settle(self, snap: _Snapshot) -> None:
        # A large index built with the collector paused is a million young objects: the
        # collections they are due would land on the first documents (twice, as they age).
        # One full collection now makes them old, in the build's time instead.
        if self.config.pause_gc and gc.isenabled() and len(snap.segments) == 1 \
                and snap.segments[0].nlocal >= _SETTLE_AT:
            gc.collect()

    def _rebuild(self, old: _Snapshot) -> _Snapshot:
        live = {q.slot: q for q in self._queries.values()}
        config = self.config
        base = old.segments[0] if old.segments else None
        if base is not None:
            indexed = set(base.slots)
            delta_entries = [q for q in live.values() if q.slot not in indexed]
            dead = frozenset(s for s in indexed if s not in live)
            limit = max(self.config.delta_limit, len(base.slots) // 8)
            if len(delta_entries) <= limit and len(dead) <= limit:
                delta_entries.sort(key=lambda q: q.slot)
                segs = ((base, _Segment(delta_entries, config, prefill=False))
                        if delta_entries else (base,))
                return _Snapshot(segs, dead, live)
        entries = sorted(live.values(), key=lambda q: q.slot)
        return _Snapshot((_Segment(entries, config),), frozenset(), live)

    def percolate_batch(
        self, docs: Iterable[Mapping[str, Any]], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> BatchResult:
        docs = docs if isinstance(docs, list) else list(docs)
        if len(docs) < self.config.vector_threshold:
            return self._percolate_each(docs, highlight, metadata_filter)
        with _gc_paused(self.config.pause_gc):
            cuts = _parts(docs, compiled=self._ctx.plain and _loops() is not None)
            if len(cuts) == 2:
                return self._percolate_vectorised(docs, highlight, metadata_filter)
            # A large batch in parts: each part's arrays (a token per term, a code per key
            # hit) stay small enough to be reused memory; fresh memory costs page faults
            # (measured on Reuters articles: parts of about 250 articles ran 1.2-1.5x faster
            # than 2,000 at once, and 10,000 at once slower still)
            t0 = time.perf_counter()
            snap = self.snapshot()  # one snapshot for every part
            parts = [self._percolate_vectorised(docs[a:b], highlight, metadata_filter, snap)
                     for a, b in zip(cuts, cuts[1:])]
            results = [r for part in parts for r in part.results]
            stats = BatchStats(len(docs), *(sum(getattr(part.stats, f) for part in parts)
                                            for f in ("candidates", "verified", "matches",
                                                      "errors")),
                               time.perf_counter() - t0)
            return BatchResult(results, stats)

    def percolate(
        self, doc: Mapping[str, Any], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> DocumentMatches:
        # One document, without the batch's bookkeeping (same answers; see _QuerySet).
        snap = self.snapshot()
        allowed = (None if metadata_filter is None
                   else self._allowed(snap.by_slot.values(), metadata_filter))
        view = _DocView(doc, self._ctx)
        slots, errors, cand_count, verified = self._match_one(snap, view, allowed)
        return self._result(snap, view, slots, _pick(snap.ids, slots), errors,
                            highlight, cand_count, verified)

    percolate.__doc__ = _QuerySet.percolate.__doc__

    @staticmethod
    def _match_one(
        snap: _Snapshot, view: _DocView, allowed: set[int] | None,
    ) -> tuple[list[int], dict[int, str], int, int]:
        """(matching slots in order, errors by slot, candidates, verified) for one document."""
        matched: set[int] = set()
        errors: dict[int, str] = {}
        cand_count = verified = 0
        for seg in snap.segments:
            hits = seg.scan(view)
            ranged: dict[int, Any] = {}
            cands = seg.candidates(hits, matched, ranged)
            if ranged:  # (_ranges_hold, inline: a headline has several)
                cand_count += len(ranged)
                numbers = view.numbers
                for slot, checks in ranged.items():
                    if allowed is not None and slot not in allowed:
                        continue
                    verified += 1
                    for fld, kind, lo, lo_in, hi, hi_in in checks:
                        for x in numbers(fld, kind):
                            if (x > lo or (lo_in and x == lo)) and (x < hi or (hi_in and x == hi)):
                                break
                        else:
                            break
                    else:
                        matched.add(slot)
            if not cands:
                continue
            cand_count += len(cands)
            if allowed is not None:
                cands &= allowed
            for slot, (keys_ok, doc_ok) in zip(cands, _pick(seg.verify, cands)):
                if keys_ok is not None and not keys_ok(hits):
                    continue
                if doc_ok is None:
                    matched.add(slot)
                    continue
                verified += 1
                try:
                    if doc_ok(view):
                        matched.add(slot)
                except Exception as exc:  # one bad query never fails the batch
                    errors[slot] = f"{type(exc).__name__}: {exc}"
        if allowed is not None:
            matched &= allowed
        if snap.dead:
            matched -= snap.dead
        return sorted(matched), errors, cand_count, verified

    def _percolate_each(
        self, docs: list[Mapping[str, Any]], highlight: bool, metadata_filter: MetadataFilter,
    ) -> BatchResult:
        t0 = time.perf_counter()
        snap = self.snapshot()
        allowed = self._allowed(snap.by_slot.values(), metadata_filter)
        ctx = self._ctx
        match_one = self._match_one
        results = []
        n_cand = n_ver = n_match = n_err = 0
        for doc in docs:
            view = _DocView(doc, ctx)
            slots, errors, cand_count, verified = match_one(snap, view, allowed)
            res = self._result(snap, view, slots, _pick(snap.ids, slots), errors, highlight,
                               cand_count, verified)
            results.append(res)
            n_cand += cand_count
            n_ver += verified
            n_match += len(slots)
            n_err += len(res.errors)
        stats = BatchStats(len(results), n_cand, n_ver, n_match, n_err, time.perf_counter() - t0)
        return BatchResult(results, stats)

    @staticmethod
    def _result(
        snap: _Snapshot, view: _DocView, slots: list[int] | np.ndarray, ids: list[QueryId],
        slot_errors: dict[int, str], highlight: bool, candidates: int, verified: int,
    ) -> DocumentMatches:
        by_slot = snap.by_slot
        errors = ({by_slot[s].id: msg for s, msg in slot_errors.items() if s not in snap.dead}
                  if slot_errors else {})
        spans = None
        if highlight:
            spans = {}
            for slot in (slots if isinstance(slots, list) else slots.tolist()):
                q = by_slot[slot]
                try:
                    spans[q.id] = _highlight(q.node, view)
                except Exception as exc:  # pragma: no cover - highlighting mirrors matching
                    errors[q.id] = f"{type(exc).__name__}: {exc}"
        return DocumentMatches(ids, slots, by_slot, spans, errors, candidates, verified)

    def _percolate_vectorised(
        self, docs: list[Mapping[str, Any]], highlight: bool, metadata_filter: MetadataFilter,
        snap: _Snapshot | None = None,
    ) -> BatchResult:
        t0 = time.perf_counter()
        snap = self.snapshot() if snap is None else snap
        n = len(docs)
        allowed_set = self._allowed(snap.by_slot.values(), metadata_filter)
        allowed = None
        size = len(snap.ids)
        if allowed_set is not None:
            allowed = np.zeros(size, dtype=bool)
            if allowed_set:
                allowed[list(allowed_set)] = True
        batch = _Batch(docs, self._ctx)
        errors: dict[int, dict[int, str]] = {}
        verified = np.zeros(n, dtype=np.int64)
        cand_count = np.zeros(n, dtype=np.int64)
        m_docs, m_slots = [], []
        for seg in snap.segments:
            d, s, c = seg.match_batch(batch, allowed, errors, verified)
            m_docs.append(d)
            m_slots.append(s)
            cand_count += c
        m_doc = np.concatenate(m_docs)
        m_slot = np.concatenate(m_slots)
        keep = ~snap.dead_mask[m_slot] if snap.dead else None
        if allowed is not None:
            keep = allowed[m_slot] if keep is None else keep & allowed[m_slot]
        if keep is not None:
            m_doc, m_slot = m_doc[keep], m_slot[keep]
        width = max(size, 1)
        codes = _unique(m_doc * width + m_slot, n * width)
        m_doc = codes // width
        m_slot = codes - m_doc * width
        bounds = np.searchsorted(m_doc, np.arange(n + 1)).tolist()
        shared = _BatchSlots(snap.ids_arr, m_slot, bounds, cand_count.tolist(),
                             verified.tolist(), snap.by_slot)
        results: list[DocumentMatches] = list(map(_BatchMatches, repeat(shared, n), range(n)))
        n_err = 0
        for i in sorted(set(errors) | (set(range(n)) if highlight else set())):
            a, b = bounds[i], bounds[i + 1]
            res = self._result(snap, batch.view(i), m_slot[a:b], snap.ids_arr[m_slot[a:b]].tolist(),
                               errors.get(i, {}), highlight, shared.candidates[i],
                               shared.verified[i])
            n_err += len(res.errors)
            results[i] = res
        stats = BatchStats(n, int(cand_count.sum()), int(verified.sum()), len(m_slot), n_err,
                           time.perf_counter() - t0)
        return BatchResult(results, stats)
