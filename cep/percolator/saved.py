"""The saved files' format: headers, the configuration as JSON, a built index's code fingerprint."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

import orjson

from cep.percolator.config import PercolatorConfig
from patterns.analysis import AnalysisConfig
from patterns.errors import CepError
from patterns.files import strip_bom
from patterns.lucene import QueryConfig

__all__ = ["saved_config", "_FORMAT", "_VERSION", "_INDEX_FORMAT", "_INDEX_VERSION",
           "_code_fingerprint", "_config_to_json", "_config_from_json", "_index_digest"]


_FORMAT = "cep-percolator-queries"
_VERSION = 1
_INDEX_FORMAT = "cep-percolator-index"
_INDEX_VERSION = 2  # 2: the checksum covers the header too; loaded by a restricted unpickler


def _index_digest(header: dict[str, Any], payload: bytes) -> str:
    """SHA-256 over the header (all but its own ``sha256``, keys sorted) and the payload: editing
    either (the settings in the header change every answer) is caught as damage."""
    head = {k: v for k, v in header.items() if k != "sha256"}
    digest = hashlib.sha256(orjson.dumps(head, option=orjson.OPT_SORT_KEYS) + b"\n")
    digest.update(payload)
    return digest.hexdigest()


_FINGERPRINT: list[str] = []


def _code_fingerprint() -> str:
    """A digest of the code whose objects a saved index holds (every module of this package, by
    name and content, the query parser and the analysis): an index is read back only by the code
    that wrote it."""
    if not _FINGERPRINT:
        digest = hashlib.sha256()
        for path in sorted(Path(__file__).parent.glob("*.py")):  # this package's modules
            digest.update(path.name.encode() + b"\0")
            digest.update(path.read_bytes())
        for module in ("patterns.lucene", "patterns.analysis"):
            source = getattr(importlib.import_module(module), "__file__", None)
            try:
                digest.update(Path(source).read_bytes() if source else module.encode())
            except OSError:  # pragma: no cover - no source at hand
                digest.update(module.encode())
        _FINGERPRINT.append(digest.hexdigest()[:32])
    return _FINGERPRINT[0]


def _config_to_json(config: PercolatorConfig) -> dict[str, Any]:
    q, a = config.query, config.query.analysis
    return {
        "query": {
            "default_operator": q.default_operator,
            "default_fields": list(q.default_fields) if q.default_fields is not None else None,
            "allow_leading_wildcard": q.allow_leading_wildcard,
            "auto_phrase": q.auto_phrase,
            "analysis": {"lowercase": a.lowercase, "stopwords": sorted(a.stopwords),
                         "stemmer": a.stemmer},
        },
        "id_field": config.id_field,
        "exclude_fields": list(config.exclude_fields),
        "term_frequencies": (dict(config.term_frequencies)
                             if config.term_frequencies is not None else None),
        "scanner": config.scanner,
        "automaton": config.automaton,
        "term_cache_size": config.term_cache_size,
        "prefill_terms": config.prefill_terms,
        "delta_limit": config.delta_limit,
        "vector_threshold": config.vector_threshold,
        "pause_gc": config.pause_gc,
    }


def saved_config(path: str | Path) -> tuple[str, PercolatorConfig] | None:
    """For a file written by :meth:`Percolator.save` or :meth:`Percolator.save_index`: its kind
    (``"queries"`` or ``"index"``) and the configuration it was saved with; None for any other
    file (such as plain JSON lines of queries). Raises OSError if the file cannot be read.

    Example:
        >>> import os, tempfile
        >>> from cep.percolator import Percolator
        >>> p = Percolator(PercolatorConfig(query=QueryConfig(default_operator="AND")))
        >>> path = os.path.join(tempfile.mkdtemp(), "queries.jsonl")
        >>> p.save(path)
        >>> kind, config = saved_config(path)
        >>> kind, config.query.default_operator
        ('queries', 'AND')
    """
    with open(path, "rb") as fh:
        first = strip_bom(fh.readline(1 << 26))
    try:
        header = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(header, dict) or "config" not in header:
        return None
    kind = {_FORMAT: "queries", _INDEX_FORMAT: "index"}.get(str(header.get("format")))
    if kind is None:
        return None
    try:
        return kind, _config_from_json(header["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CepError(f"{path}: the saved configuration cannot be read ({exc})") from None


def _config_from_json(data: dict[str, Any]) -> PercolatorConfig:
    q = dict(data["query"])
    a = q.pop("analysis")
    analysis = AnalysisConfig(a["lowercase"], frozenset(a["stopwords"]), a["stemmer"])
    fields = q.pop("default_fields")
    query = QueryConfig(default_fields=tuple(fields) if fields is not None else None,
                        analysis=analysis, **q)
    return PercolatorConfig(query=query, **{k: v for k, v in data.items() if k != "query"})
