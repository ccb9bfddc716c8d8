"""The query set: registration by id with metadata, metadata filters, save / load, and the
percolation calls every query set answers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Union

import orjson

from cep.percolator.config import PercolatorConfig, _gc_paused
from cep.percolator.documents import _MISSING, _Context
from cep.percolator.presearcher import Presearcher, QueryPlan
from cep.percolator.query import QueryId, RegisteredQuery
from cep.percolator.results import BatchResult, DocumentMatches
from cep.percolator.saved import (
    _FORMAT,
    _INDEX_FORMAT,
    _INDEX_VERSION,
    _VERSION,
    _code_fingerprint,
    _config_from_json,
    _config_to_json,
    _index_digest,
)
from cep.safe_pickle import UnsafeState
from cep.safe_pickle import loads as safe_loads
from patterns.errors import CepError
from patterns.files import strip_bom
from patterns.lucene import Node, compile_query

__all__ = ["MetadataFilter", "_QuerySet"]


MetadataFilter = Union[Mapping[str, Any], Callable[[Mapping[str, Any]], bool], None]


def _meta_ok(meta: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    for k, v in want.items():
        have = meta.get(k, _MISSING)
        if have is _MISSING:
            return False
        if isinstance(have, (list, tuple, set, frozenset)) and not isinstance(v, (list, tuple)):
            if v not in have:
                return False
        elif have != v:
            return False
    return True


class _QuerySet:
    """Registration by id with metadata; readers see immutable snapshots."""

    def __init__(self, config: PercolatorConfig | None = None) -> None:
        self.config = config or PercolatorConfig()
        self.presearcher = Presearcher(self.config.term_frequencies)
        self._ctx = _Context(self.config)
        self._lock = threading.RLock()
        self._queries: dict[QueryId, RegisteredQuery] = {}
        self._next_slot = 0
        self._dirty = True

    # registration
    def compile(self, query: str) -> Node:
        """Parse and analyse ``query`` with this set's configuration (raises CepSyntaxError)."""
        return compile_query(query, self.config.query)

    def register(
        self, query_id: QueryId, query: str, metadata: Mapping[str, Any] | None = None
    ) -> RegisteredQuery:
        """Add a query, or replace the one with the same id. Raises CepSyntaxError if invalid.

        Example:
            >>> from cep.percolator import Percolator
            >>> p = Percolator()
            >>> p.register("q1", "apple AND pie", {"owner": "ann"}).plan.kind
            'flat'
        """
        node = self.compile(query)
        plan = self.presearcher.plan(node)
        return self._add(query_id, query, metadata, node, plan)

    def register_parsed(
        self, query_id: QueryId, query: str, node: Node, metadata: Mapping[str, Any] | None = None
    ) -> RegisteredQuery:
        """Register a query already compiled with this set's ``config.query`` (a rule file's
        checked queries), without parsing it again.

        Example:
            >>> from cep.percolator import Percolator
            >>> p = Percolator()
            >>> _ = p.register_parsed("q", "apple", p.compile("apple"))
            >>> p.percolate({"t": "Apple"}).ids
            ['q']
        """
        return self._add(query_id, query, metadata, node, self.presearcher.plan(node))

    def _add(
        self, query_id: QueryId, query: str, metadata: Mapping[str, Any] | None, node: Node,
        plan: QueryPlan,
    ) -> RegisteredQuery:
        if not isinstance(query_id, Hashable):
            raise CepError(f"query id must be hashable (a string or a number), got {query_id!r}")
        meta = MappingProxyType(dict(metadata or {}))
        with self._lock:
            entry = RegisteredQuery(query_id, query, meta, node, plan, self._next_slot)
            self._next_slot += 1
            self._queries[query_id] = entry
            self._dirty = True
        return entry

    def register_many(
        self, queries: Iterable[tuple[QueryId, str] | tuple[QueryId, str, Mapping[str, Any]]]
    ) -> int:
        """Register several queries; returns how many. The first invalid one raises."""
        n = 0
        with _gc_paused(self.config.pause_gc):
            for item in queries:
                self.register(*item)  # type: ignore[arg-type]
                n += 1
        return n

    def delete(self, query_id: QueryId) -> bool:
        """Remove a query; False when there was none with that id.

        Example:
            >>> from cep.percolator import Percolator
            >>> p = Percolator(); _ = p.register(1, "x")
            >>> p.delete(1), p.delete(1), len(p)
            (True, False, 0)
        """
        with self._lock:
            if self._queries.pop(query_id, None) is None:
                return False
            self._dirty = True
            return True

    def get(self, query_id: QueryId) -> RegisteredQuery | None:
        """The registered query with this id, or None."""
        return self._queries.get(query_id)

    def __len__(self) -> int:
        return len(self._queries)

    def __contains__(self, query_id: object) -> bool:
        return query_id in self._queries

    def queries(self) -> list[RegisteredQuery]:
        """Every registered query, in registration order."""
        with self._lock:
            return sorted(self._queries.values(), key=lambda q: q.slot)

    # filters
    def _allowed(
        self, entries: Iterable[RegisteredQuery], metadata_filter: MetadataFilter,
    ) -> set[int] | None:
        if metadata_filter is None:
            return None
        if callable(metadata_filter):
            return {q.slot for q in entries if metadata_filter(q.metadata)}
        return {q.slot for q in entries if _meta_ok(q.metadata, metadata_filter)}

    # save / load
    def save(self, path: str | Path) -> None:
        """Write the query set to ``path`` as JSON lines: a header with the format, version and
        configuration, then one ``{"id", "query", "metadata"}`` line per query.

        Measured against a pickle of the parsed trees and plans (see docs/search.md), reading
        JSON and parsing again was as fast to load, and it is safe to load from anyone.

        Example:
            >>> import os, tempfile
            >>> from cep.percolator import Percolator
            >>> p = Percolator(); _ = p.register("q", "apple", {"owner": "ann"})
            >>> path = os.path.join(tempfile.mkdtemp(), "queries.jsonl")
            >>> p.save(path)
            >>> Percolator.load(path).percolate({"t": "Apple"}).metadata
            {'q': mappingproxy({'owner': 'ann'})}
        """
        with self._lock:
            rows = self.queries()
        tmp = Path(str(path) + ".tmp")
        header = {"format": _FORMAT, "version": _VERSION, "config": _config_to_json(self.config)}
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(header) + b"\n")
            for q in rows:
                if isinstance(q.id, bool) or not isinstance(q.id, (str, int)):
                    raise CepError(f"cannot save query id {q.id!r}: ids must be strings or "
                                   "integers to be written as JSON")
                try:
                    line = orjson.dumps({"id": q.id, "query": q.query,
                                         "metadata": dict(q.metadata)})
                except TypeError as exc:
                    raise CepError(f"cannot save query {q.id!r}: its metadata is not JSON "
                                   f"({exc})") from None
                fh.write(line + b"\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> Any:
        """Read a query set written by :meth:`save` (queries are parsed again and the index
        built on first use). A built index (:meth:`Percolator.save_index`) is refused here:
        it is read only by :meth:`load_index`, so a file taken for queries never unpickles."""
        with open(path, "rb") as fh:
            first = strip_bom(fh.readline(1 << 26))
            try:
                header = orjson.loads(first)
            except orjson.JSONDecodeError:
                header = None
            if isinstance(header, dict) and header.get("format") == _INDEX_FORMAT:
                raise CepError(f"{path}: this is a saved index (Percolator.save_index), not a query "
                               "set; read it with Percolator.load_index (cep percolate --index)")
            if not isinstance(header, dict) or header.get("format") != _FORMAT:
                raise CepError(f"{path}: not a saved percolator query set")
            if header.get("version") != _VERSION:
                raise CepError(
                    f"{path}: saved query set version {header.get('version')!r} is not "
                    f"supported (this build reads version {_VERSION}); re-register the queries"
                )
            out = cls(_config_from_json(header["config"]))
            with _gc_paused(out.config.pause_gc):
                for line in fh:
                    row = orjson.loads(line)
                    out.register(row["id"], row["query"], row["metadata"])
        return out

    @classmethod
    def load_index(cls, path: str | Path) -> Any:
        """Read a built index written by :meth:`Percolator.save_index`: checked against its
        checksum (header and payload) and the code fingerprint, then unpickled admitting only
        the percolator's own classes and plain values (:mod:`cep.safe_pickle`)."""
        with open(path, "rb") as fh:
            try:
                header = orjson.loads(fh.readline(1 << 26))
            except orjson.JSONDecodeError:
                header = None
            if not isinstance(header, dict) or header.get("format") != _INDEX_FORMAT:
                raise CepError(f"{path}: not a saved percolator index (Percolator.save_index); a query "
                               "set or JSON lines of queries is read with Percolator.load (cep percolate --queries)")
            return cls._load_index(path, header, fh)

    @classmethod
    def _load_index(cls, path: str | Path, header: dict[str, Any], fh: Any) -> Any:
        if header.get("version") != _INDEX_VERSION or header.get("code") != _code_fingerprint():
            raise CepError(
                f"{path}: this index was written by another version of cep's percolator, and "
                "a built index is only read by the code that wrote it; load the queries "
                "instead (Percolator.load on a file written by save(), or register them again) "
                "and write the index again with save_index()")
        payload = fh.read()
        if len(payload) != header.get("bytes") or _index_digest(header, payload) != header.get("sha256"):
            raise CepError(f"{path}: the saved index is damaged or cut short (its checksum does "
                           "not match); write it again with save_index()")
        out = cls(_config_from_json(header["config"]))
        with _gc_paused(out.config.pause_gc):
            try:
                state = safe_loads(payload, "the saved index")
            except UnsafeState as exc:
                raise CepError(f"{path}: {exc}; nothing in it was run") from None
            except Exception as exc:  # same code, other libraries (numpy, Python) than the writer's
                raise CepError(
                    f"{path}: the saved index cannot be read here ({type(exc).__name__}: {exc}); it was "
                    "written with other libraries than these; load the queries instead (Percolator.load on "
                    "a file written by save(), or register them again) and write the index again with "
                    "save_index()") from None
            out._restore(state)
        return out

    def _restore(self, state: dict[str, Any]) -> None:
        """Take the queries of a loaded index (see :meth:`Percolator.save_index`)."""
        self._queries = {q.id: q for q in state["queries"]}
        self._next_slot = state["next_slot"]
        self._dirty = True

    # percolation (shared driver)
    def percolate(
        self, doc: Mapping[str, Any], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> DocumentMatches:
        """The queries ``doc`` matches. ``metadata_filter``: a dict of required metadata values
        (a list-valued metadata entry must contain the value) or a predicate on the metadata.

        Example:
            >>> from cep.percolator import Percolator
            >>> p = Percolator()
            >>> _ = p.register("q1", '"big apple"', {"owner": "ann"})
            >>> _ = p.register("q2", "apple -pie", {"owner": "bob"})
            >>> r = p.percolate({"title": "The Big Apple"}, highlight=True)
            >>> r.ids, r.spans["q1"]
            (['q1', 'q2'], (('title', 4, 13),))
            >>> p.percolate({"title": "apple"}, metadata_filter={"owner": "ann"}).ids
            []
        """
        return self.percolate_batch([doc], highlight=highlight,
                                    metadata_filter=metadata_filter).results[0]

    def percolate_batch(
        self, docs: Iterable[Mapping[str, Any]], *, highlight: bool = False,
        metadata_filter: MetadataFilter = None,
    ) -> BatchResult:
        """Percolate many documents; results in input order plus the batch's stats."""
        raise NotImplementedError
