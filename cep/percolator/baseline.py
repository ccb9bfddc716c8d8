"""The baseline query set: every query evaluated on every document, no index."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from cep.percolator import verify
from cep.percolator.documents import _DocView
from cep.percolator.highlight import _highlight
from cep.percolator.query import QueryId
from cep.percolator.query_set import MetadataFilter, _QuerySet
from cep.percolator.results import BatchResult, BatchStats, DocumentMatches

__all__ = ["NoFiltering"]


class NoFiltering(_QuerySet):
    """The baseline: every query evaluated on every document, no index.

    Example:
        >>> b = NoFiltering(); _ = b.register("q", "apple AND NOT pie")
        >>> b.percolate({"t": "apple tart"}).ids
        ['q']
    """

    def percolate_batch(
        self, docs: Iterable[Mapping[str, Any]], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> BatchResult:
        t0 = time.perf_counter()
        entries = self.queries()
        by_slot = {q.slot: q for q in entries}
        allowed = self._allowed(entries, metadata_filter)
        if allowed is not None:
            entries = [q for q in entries if q.slot in allowed]
        results = []
        n_match = n_err = 0
        for doc in docs:
            view = _DocView(doc, self._ctx)
            matched = []
            errors: dict[QueryId, str] = {}
            for q in entries:
                try:
                    if verify._evaluate(q.node, view):  # looked up per call: tests patch it
                        matched.append(q)
                except Exception as exc:
                    errors[q.id] = f"{type(exc).__name__}: {exc}"
            spans = {q.id: _highlight(q.node, view) for q in matched} if highlight else None
            results.append(DocumentMatches([q.id for q in matched], [q.slot for q in matched],
                                           by_slot, spans, errors, len(entries), len(entries)))
            n_match += len(matched)
            n_err += len(errors)
        n = len(results)
        stats = BatchStats(n, n * len(entries), n * len(entries), n_match, n_err,
                           time.perf_counter() - t0)
        return BatchResult(results, stats)
