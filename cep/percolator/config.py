"""The percolator's configuration (:class:`PercolatorConfig`), and the collector pause it asks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from cep.gc_pause import gc_paused
from patterns.lucene import QueryConfig

__all__ = ["PercolatorConfig", "_gc_paused"]


_SCANNER_NAMES = ("pyahocorasick", "ahocorasick_rs", "hyperscan")


@dataclass(frozen=True)
class PercolatorConfig:
    """How queries are parsed and indexed and how documents are read."""

    query: QueryConfig = field(default_factory=QueryConfig)
    """Query parsing and text analysis (default operator, default fields, analysis)."""
    id_field: str | None = "id"
    """Document field holding its identity; never searched as a default field."""
    exclude_fields: tuple[str, ...] = ()
    """More fields never searched as default fields (a query may still name them), such as
    the ``stream`` tag the engine adds to events."""
    term_frequencies: Mapping[str, float] | None = field(default=None, compare=False, hash=False)
    """Relative document frequency (0..1) per term, to pick a conjunction's rarest term; None
    estimates selectivity from term length."""
    scanner: Literal["dict", "aho"] = "dict"
    """``dict``: whole-token, prefix and wildcard keys through the term dictionary (one dict
    lookup per document term), exact phrases by Aho-Corasick; ``aho``: every key but wildcards
    by one Aho-Corasick pass over ``" tok1 tok2 ... "``."""
    automaton: Literal["auto", "pyahocorasick", "ahocorasick_rs", "hyperscan"] = "auto"
    """The library behind the Aho-Corasick passes; ``auto`` takes the fastest installed for the
    scanner's workload (measured: pyahocorasick for ``aho``'s dense hits, ahocorasick_rs, else
    pyahocorasick, for ``dict``'s phrases); pyahocorasick is always installed."""
    term_cache_size: int = 250_000
    """Distinct document terms whose keys each segment remembers per field (about 100 bytes
    each); past it, a new term is resolved again wherever it occurs (see :class:`_TermKeys`)."""
    prefill_terms: bool = True
    """Resolve the terms of ``term_frequencies`` (a vocabulary known beforehand) when the
    index is fully built, rather than on their first sighting in a document (delta segments
    always resolve on first sight)."""
    delta_limit: int = 2_000
    """Queries registered since the last full build go to a small delta segment until there are
    more than this many (or more than 1/8 of the base), then everything is rebuilt."""

    vector_threshold: int = 16
    """Batches of at least this many documents take the vectorised (numpy) path (measured at
    100k queries over headlines: one at a time is faster up to 8 documents, numpy from 16)."""
    pause_gc: bool = True
    """Suspend Python's cyclic garbage collector while a vectorised batch runs, an index is
    built, or queries are registered by ``register_many`` / ``load`` (it is turned back on
    before the call returns, if it was on). These allocate many objects that no collection
    could free; collections in the middle only traverse them: measured at 100k queries, about
    30% of the batch time and of the build."""

    def __post_init__(self) -> None:
        if self.scanner not in ("dict", "aho"):
            raise ValueError(f"scanner must be 'dict' or 'aho', got {self.scanner!r}")
        if self.automaton != "auto" and self.automaton not in _SCANNER_NAMES:
            raise ValueError(f"automaton must be 'auto' or one of {', '.join(_SCANNER_NAMES)}, "
                             f"got {self.automaton!r}")
        object.__setattr__(self, "exclude_fields", tuple(self.exclude_fields))


_gc_paused = gc_paused  # (the name the percolator's modules import)
