"""Property tests: the indexed percolator returns exactly what running every query returns."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.percolator import NoFiltering, Percolator, PercolatorConfig, available_automata
from patterns.analysis import AnalysisConfig
from patterns.errors import CepSyntaxError
from patterns.lucene import QueryConfig

VOCAB = ["a", "b", "ab", "abc", "bca", "c", "cab", "of", "the"]
FIELDS = ["", "", "t:", "u:", "tags:"]

term = st.sampled_from(VOCAB)
field = st.sampled_from(FIELDS)


def _wild(word: str, pos: int, star: bool) -> str:
    pos = min(pos, len(word) - 1)
    return word[:pos] + "?" + word[pos + 1:] + ("*" if star else "")


def _range(lo: int | None, hi: int | None, li: bool, hi_incl: bool, fld: str) -> str:
    a = "*" if lo is None else str(lo)
    b = "*" if hi is None else str(hi)
    return f"{fld}[{a} TO {b}{']' if hi_incl else '}'}".replace("[", "[" if li else "{", 1)


leaf = st.one_of(
    st.builds(lambda f, t: f + t, field, term),
    st.builds(
        lambda f, ws, slop: f + '"' + " ".join(ws) + '"' + (f"~{slop}" if slop else ""),
        field, st.lists(term, min_size=1, max_size=3), st.sampled_from([0, 0, 1, 2, 3]),
    ),
    st.builds(lambda f, t, k: f + t[: max(1, k)] + "*", field, term, st.integers(1, 3)),
    st.builds(lambda f, t, k, s: f + _wild(t, k, s), field, term.filter(lambda w: len(w) > 1),
              st.integers(1, 2), st.booleans()),
    st.builds(_range, st.none() | st.integers(0, 6), st.none() | st.integers(0, 6),
              st.booleans(), st.booleans(), st.sampled_from(["n:", "n:", "t:"])),
    st.builds(lambda a, b: f"d:[2003-01-0{a} TO 2003-01-0{b}]", st.integers(1, 5),
              st.integers(1, 5)),
    st.sampled_from(["u:*", "tags:*", "*:*"]),
)

query = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"{a} {op} {b}".replace("  ", " "), inner,
                  st.sampled_from(["AND", "OR", "", "AND NOT", "&&", "||", "OR NOT"]), inner),
        st.builds(lambda m, a: f"{m}({a})", st.sampled_from(["+", "-", "", "NOT "]), inner),
        st.builds(lambda f, a, b: f"{f}({a} {b})", st.sampled_from(["t:", "u:"]), inner, inner),
    ),
    max_leaves=5,
)

words = st.lists(st.sampled_from(VOCAB + ["x", "AB", "Cab,"]), max_size=6).map(" ".join)
number = st.one_of(st.integers(-1, 7), st.sampled_from(["3", "4.5", "x", None, True]))
date = st.one_of(
    st.integers(1, 6).map(lambda d: f"2003-01-0{d}T12:00:00Z"),
    st.integers(1, 6).map(lambda d: 1_041_379_200_000 + (d - 1) * 86_400_000),
    st.just("not a date"),
)
document = st.fixed_dictionaries(
    {"t": words},
    optional={"u": words, "tags": st.lists(words, max_size=3), "n": number, "d": date,
              "id": st.just("a b")},
)

CONFIGS = [
    QueryConfig(),
    QueryConfig(default_operator="AND"),
    QueryConfig(default_fields=("t", "tags"), analysis=AnalysisConfig.english()),
]


def _register(queries: list[str], *sets: Any) -> list[str]:
    ok = []
    for i, q in enumerate(queries):
        try:
            for s in sets:
                s.register(i, q, {"even": i % 2 == 0})
        except CepSyntaxError:
            continue
        ok.append(q)
    return ok


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    queries=st.lists(query, min_size=1, max_size=14),
    docs=st.lists(document, min_size=1, max_size=8),
    config=st.sampled_from(CONFIGS),
    scanner=st.sampled_from(["dict", "aho"]),
    automaton=st.sampled_from(available_automata()),  # the optional ones where installed
    tf=st.booleans(),
)
def test_index_equals_every_query(
    queries: list[str], docs: list[dict[str, Any]], config: QueryConfig, scanner: str,
    automaton: str, tf: bool,
) -> None:
    # with a table, its terms are resolved when the index is built (prefill_terms)
    freq = {"a": 0.5, "ab": 0.001, "c": 0.2, "cab": 0.01} if tf else None
    each = Percolator(PercolatorConfig(query=config, scanner=scanner, term_frequencies=freq,
                                       automaton=automaton))  # type: ignore[arg-type]
    vector = Percolator(PercolatorConfig(query=config, scanner=scanner, term_frequencies=freq,
                                         automaton=automaton,  # type: ignore[arg-type]
                                         vector_threshold=1))
    base = NoFiltering(PercolatorConfig(query=config))
    _register(queries, each, vector, base)
    want = base.percolate_batch(docs, highlight=True).results
    for got in (each.percolate_batch(docs, highlight=True).results,
                vector.percolate_batch(docs, highlight=True).results):
        assert [r.ids for r in got] == [r.ids for r in want]
        assert [r.spans for r in got] == [r.spans for r in want]
        assert [r.errors for r in got] == [r.errors for r in want] == [{}] * len(docs)
    flt = {"even": True}
    assert [r.ids for r in vector.percolate_batch(docs, metadata_filter=flt).results] == [
        r.ids for r in base.percolate_batch(docs, metadata_filter=flt).results]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.lists(query, min_size=1, max_size=10),
    second=st.lists(query, min_size=1, max_size=10),
    drop=st.lists(st.integers(0, 20), max_size=5),
    docs=st.lists(document, min_size=1, max_size=5),
    limit=st.sampled_from([1, 4, 100]),
)
def test_incremental_registration_equals_every_query(
    first: list[str], second: list[str], drop: list[int], docs: list[dict[str, Any]],
    limit: int,
) -> None:
    """Delta segments, replacements and deletions give the same answers as the baseline."""
    p = Percolator(PercolatorConfig(delta_limit=limit))
    base = NoFiltering()
    _register(first, p, base)
    p.percolate_batch(docs)  # builds the base segment
    for i, q in enumerate(second):  # ids overlap with the first batch: replacements
        try:
            p.register(i * 2, q)
            base.register(i * 2, q)
        except CepSyntaxError:
            pass
    for i in drop:
        assert p.delete(i) == base.delete(i)
    for threshold_docs in (docs, docs * 70):
        got = p.percolate_batch(threshold_docs).results
        want = base.percolate_batch(threshold_docs).results
        assert [r.ids for r in got] == [r.ids for r in want]
