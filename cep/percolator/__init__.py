"""The percolator: standing Lucene queries indexed by their terms, matched against documents.

One concept per module; a module imports only modules listed above it:

- ``config``: :class:`PercolatorConfig`, and the collector pause it asks for.
- ``saved``: the saved files' format (headers, configuration as JSON, code fingerprint).
- ``presearcher``: the keys a matching document must contain, and each query's plan.
- ``documents``: a document as the matcher sees it, one at a time or a batch at once.
- ``verify``: exact evaluation of a query on a document, and the checks left to a candidate.
- ``highlight``: the spans a matching query matched.
- ``query``: a registered query; ``results``: what percolation returns.
- ``arrays``: CSR postings and other array helpers of the index.
- ``scanners``: the Aho-Corasick libraries, behind one interface.
- ``term_keys``: the term dictionary (document term -> keys it holds).
- ``segment``: one index segment; ``query_index``: the segments readers use.
- ``query_set``: registration, metadata filters, save / load.
- ``percolator``: :class:`Percolator`, the indexed query set.
- ``baseline``: :class:`NoFiltering`, every query on every document.
"""

from __future__ import annotations

# Besides the public names: the private ones tests and benchmarks read here, and every class or
# function a pickle of results or of a built index names (pickles written before the package
# split name them ``cep.percolator.<name>``).
from cep.percolator.baseline import NoFiltering
from cep.percolator.config import PercolatorConfig
from cep.percolator.documents import Span
from cep.percolator.documents import _Batch as _Batch
from cep.percolator.documents import _Context as _Context
from cep.percolator.documents import _DocView as _DocView
from cep.percolator.percolator import Percolator
from cep.percolator.presearcher import Key, Presearcher, QueryPlan
from cep.percolator.query import QueryId, RegisteredQuery
from cep.percolator.query import _registered as _registered
from cep.percolator.query_index import _Snapshot as _Snapshot
from cep.percolator.query_set import _QuerySet as _QuerySet
from cep.percolator.results import BatchResult, BatchStats, DocumentMatches
from cep.percolator.results import _BatchMatches as _BatchMatches
from cep.percolator.results import _BatchSlots as _BatchSlots
from cep.percolator.saved import saved_config
from cep.percolator.scanners import _SCANNERS as _SCANNERS
from cep.percolator.scanners import _AhoCorasickRs as _AhoCorasickRs
from cep.percolator.scanners import _Hyperscan as _Hyperscan
from cep.percolator.scanners import _PyAhoCorasick as _PyAhoCorasick
from cep.percolator.scanners import available_automata as available_automata
from cep.percolator.segment import _Segment as _Segment
from cep.percolator.term_keys import _TermKeys as _TermKeys
from cep.percolator.verify import _evaluate as _evaluate
from cep.percolator.verify import _keys_and_groups_hold as _keys_and_groups_hold
from cep.percolator.verify import _keys_hold as _keys_hold
from cep.percolator.verify import _node_holds as _node_holds
from cep.percolator.verify import _one_range_holds as _one_range_holds
from cep.percolator.verify import _phrase_windows as _phrase_windows
from cep.percolator.verify import _ranges_all_hold as _ranges_all_hold
from patterns.lucene import QueryConfig as QueryConfig

__all__ = [
    "PercolatorConfig",
    "Key",
    "QueryPlan",
    "Presearcher",
    "RegisteredQuery",
    "DocumentMatches",
    "BatchStats",
    "BatchResult",
    "Percolator",
    "NoFiltering",
    "Span",
    "QueryId",
    "saved_config",
]
