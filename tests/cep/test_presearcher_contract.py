"""Contract tests for the presearcher: it never drops a document a query matches (no false
negatives), whatever the query's shape, and how much it lets through (the candidate ratio) is
measured and reported. The reference is every query evaluated on every document."""

from __future__ import annotations

import csv
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.percolator import NoFiltering, Percolator, PercolatorConfig, _Batch, _DocView
from patterns.analysis import AnalysisConfig
from patterns.errors import CepSyntaxError
from patterns.lucene import QueryConfig
from tests.cep.test_percolator_properties import CONFIGS, document, query


def presearch(p: Percolator, doc: dict[str, Any]) -> tuple[set[int], set[int]]:
    """Slots the presearcher lets through for ``doc``: (matches its keys prove, the rest: left
    to check on the document's numbers or verify)."""
    snap = p.snapshot()
    view = _DocView(doc, p._ctx)
    proven: set[int] = set()
    check: set[int] = set()
    for seg in snap.segments:
        ranged: dict[int, Any] = {}
        check |= seg.candidates(seg.scan(view), proven, ranged) | set(ranged)
    return proven - snap.dead, check - proven - snap.dead


def selected(p: Percolator, doc: dict[str, Any]) -> set[int]:
    proven, check = presearch(p, doc)
    return proven | check


def truth(base: NoFiltering, docs: list[dict[str, Any]]) -> list[set[int]]:
    return [{q.slot for q in r.queries} for r in base.percolate_batch(docs).results]


def register(queries: list[str], p: Percolator, base: NoFiltering) -> int:
    n = 0
    for i, q in enumerate(queries):
        try:
            p.register(i, q)
        except CepSyntaxError:
            continue
        base.register(i, q)
        n += 1
    return n


# One query per extraction rule (Lucene Monitor's TermFilteredPresearcher rules, and ours).
SHAPES = [
    "apple",                                # a term
    "appl*", "a?ple", "*ple", "ap*le",      # prefix, wildcards (leading: allowed below)
    '"big apple"', '"big apple"~2',         # exact and sloppy phrases
    '"the big apple"', '"apple of eye"',    # phrases across stop words (english analysis)
    "apple AND pie", "apple pie",           # conjunction (most selective child), OR default
    "apple OR pear*", "(apple OR pear) AND (pie OR tart)",
    "apple -pie", "+apple +(pie OR tart) -crumble", "apple AND NOT (pie OR tart)",
    "t:apple", "t:(apple pie)", "tags:apple", "u:\"big apple\"",
    "n:[1 TO 5]", "n:{* TO 3}", "apple AND n:[2 TO *]", "d:[2003-01-01 TO 2003-01-31]",
    "u:*", "*:*", "apple OR u:*", "t:[a TO m]",
    "apples", "bank",                       # stemming (english analysis)
]
SHAPE_DOCS = [
    {"t": "Big Apple pie", "n": 3, "d": "2003-01-05"},
    {"t": "an apple of my eye", "u": "the big apple", "tags": ["apple", "pear"]},
    {"t": "apples and banks", "n": "7"},
    {"t": "pineapple tart", "u": "", "n": [0, 4]},
    {"t": "big fat apple", "tags": ["crumble"], "d": 1_041_465_600_000},
    {"t": "nothing at all"},
    {"u": "apple", "t": ["pie", "big apple"]},
]


@pytest.mark.parametrize("analysis", [AnalysisConfig(), AnalysisConfig.english()],
                         ids=["plain", "english"])
@pytest.mark.parametrize("scanner", ["dict", "aho"])
def test_no_false_negatives_for_every_rule(analysis: AnalysisConfig, scanner: str) -> None:
    config = QueryConfig(analysis=analysis, allow_leading_wildcard=True)
    p = Percolator(PercolatorConfig(query=config, scanner=scanner))  # type: ignore[arg-type]
    base = NoFiltering(PercolatorConfig(query=config))
    assert register(SHAPES, p, base) == len(SHAPES)
    for doc, want in zip(SHAPE_DOCS, truth(base, SHAPE_DOCS)):
        assert want <= selected(p, doc), (doc, want - selected(p, doc))
    assert any(truth(base, SHAPE_DOCS))  # the table really matches


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    queries=st.lists(query, min_size=1, max_size=12),
    docs=st.lists(document, min_size=1, max_size=6),
    config=st.sampled_from(CONFIGS),
    scanner=st.sampled_from(["dict", "aho"]),
)
def test_no_false_negatives_on_random_queries(
    queries: list[str], docs: list[dict[str, Any]], config: QueryConfig, scanner: str,
) -> None:
    p = Percolator(PercolatorConfig(query=config, scanner=scanner))  # type: ignore[arg-type]
    base = NoFiltering(PercolatorConfig(query=config))
    register(queries, p, base)
    for doc, want in zip(docs, truth(base, docs)):
        assert want <= selected(p, doc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    queries=st.lists(query, min_size=1, max_size=12),
    docs=st.lists(document, min_size=1, max_size=8),
    config=st.sampled_from(CONFIGS),
)
def test_a_batch_finds_the_keys_each_document_finds(
    queries: list[str], docs: list[dict[str, Any]], config: QueryConfig,
) -> None:
    """The vectorised scan (all documents' terms at once) finds, per document, exactly the keys
    the one-document scan finds: both paths start from the same presearcher answer."""
    p = Percolator(PercolatorConfig(query=config))
    # (the reference with the same configuration: a query whose stop words leave a group with
    # only NOT in it is refused under another analysis, e.g. 't:(b +(-(a)))' without stop words)
    register(queries, p, NoFiltering(PercolatorConfig(query=config)))
    for seg in p.snapshot().segments:
        codes, _, _ = seg.scan_batch(_Batch(docs, p._ctx))
        k = max(seg.nkeys, 1)
        got = [set((codes[codes // k == i] % k).tolist()) for i in range(len(docs))]
        assert got == [seg.scan(_DocView(d, p._ctx)) for d in docs]


@pytest.mark.data
def test_candidate_ratio_on_headlines(shared_data: Path,
                                      record_property: Any, capsys: Any) -> None:
    """On real headlines with the benchmark's query mix: no false negatives, and the share of
    (query, headline) pairs the presearcher lets through, reported next to the share that
    match (the best a presearcher could do)."""
    from benchmarks.bench_percolator import generate_queries

    with open(shared_data / "abcnews_headlines_2003.csv", newline="", encoding="utf-8") as fh:
        docs = [{"publish_date": int(r["publish_date"]), "headline_text": r["headline_text"]}
                for r in islice(csv.DictReader(fh), 800)]
    queries = generate_queries(1_000, docs, seed=3, data=shared_data)
    p = Percolator()
    base = NoFiltering()
    assert register([q for _, q, _ in queries], p, base) == len(queries)
    proven = checked = matched = 0
    for doc, want in zip(docs, truth(base, docs)):
        sure, check = presearch(p, doc)
        assert want <= sure | check, (doc, want - sure - check)
        assert sure <= want  # what the keys prove does match
        proven += len(sure)
        checked += len(check)
        matched += len(want)
    pairs = len(queries) * len(docs)
    ratio = (proven + checked) / pairs
    record_property("candidate_ratio", round(ratio, 5))
    record_property("checked_ratio", round(checked / pairs, 5))
    record_property("match_ratio", round(matched / pairs, 5))
    with capsys.disabled():
        print(f"\npresearcher, {len(docs)} headlines x {len(queries)} queries: lets through "
              f"{ratio:.3%} of the pairs ({proven / pairs:.3%} proven by their keys, "
              f"{checked / pairs:.3%} left to check); {matched / pairs:.3%} match")
    assert matched > 0
    assert ratio < 0.02 and proven + checked < 1.5 * matched  # filters, close to the matches
