"""Long documents through the byte token stream (cep/percolator/tokens.py): the same terms as
the analyzer, the same term ids as the dictionary, the same matches as running every query;
with the compiled loops (numba) and with numpy alone."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.percolator import NoFiltering, Percolator, PercolatorConfig
from cep.percolator import percolator as perc
from cep.percolator import tokens as tok
from cep.percolator.term_keys import _TermKeys
from patterns.analysis import Analyzer
from patterns.errors import CepSyntaxError

# words of every kind the stream treats apart: short ASCII, exactly 8 / 16 bytes, longer than
# 16 bytes, non-ASCII (one lower-cased word grows a combining dot), digits
VOCAB = ["a", "ab", "abc", "cab", "of", "the", "stock", "eightchr", "sixteencharacter",
         "seventeencharacte", "averyveryverylongwordindeed", "müller", "İstanbul", "straße",
         "日本", "2003", "x9"]
SEPARATORS = [" ", " ", " ", ", ", ". ", "\n", "-", "'s ", " _ ", "\x00", "\t"]


@pytest.fixture(params=["numba", "numpy"])
def kernels(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run with the compiled loops (where numba is installed) and with numpy alone."""
    tok._kernels()  # loaded once: restoring an empty list would load them again
    saved = list(tok._COMPILED)
    if request.param == "numpy":
        tok._COMPILED[:] = [None]
    elif tok._kernels() is None:
        pytest.skip("numba is not installed")
    try:
        yield request.param
    finally:
        tok._COMPILED[:] = saved


def _text(draw: Any, size: int) -> str:
    # long texts from a drawn seed: drawing hundreds of words one by one is slow to generate
    rng = random.Random(draw(st.integers(0, 2**32)))
    words = VOCAB + [w.upper() for w in VOCAB[:6]]
    n = rng.choice([0, 1, rng.randrange(size + 1), size])
    return "".join(rng.choice(words) + rng.choice(SEPARATORS) for _ in range(n))


@st.composite
def texts(draw: Any) -> str:
    return _text(draw, 300)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(parts=st.lists(texts(), min_size=1, max_size=6), pre=st.lists(st.booleans(), max_size=6))
def test_stream_terms_are_the_analyzers(parts: list[str], pre: list[bool]) -> None:
    an = Analyzer()
    for param in ("numba", "numpy"):
        tok._kernels()
        saved = list(tok._COMPILED)
        if param == "numpy":
            tok._COMPILED[:] = [None]
        try:
            # some parts analysed beforehand (as documents read through their view are)
            raw = [not (i < len(pre) and pre[i]) for i in range(len(parts))]
            given_parts = [p if r else " ".join(an.terms(p)) for p, r in zip(parts, raw)]
            s = tok._stream_of(given_parts, raw, len(parts), an.terms)
            got: list[list[str]] = [[] for _ in parts]
            for i in range(len(s)):
                got[int(s.doc[i])].append(s.term(i))
            assert got == [an.terms(p) for p in parts]
            assert s.lens.tolist() == [len(g) for g in got]
        finally:
            tok._COMPILED[:] = saved


@settings(max_examples=20, deadline=None, derandomize=True)
@given(known=st.lists(st.sampled_from(VOCAB + ["b", "bb", "ba", "zz"]), unique=True),
       extra=st.lists(st.text(alphabet="abcdeü", min_size=1, max_size=20), max_size=60),
       text=texts())
def test_table_lookup_is_the_dictionary(known: list[str], extra: list[str], text: str) -> None:
    an = Analyzer()
    ids = {t: i for i, t in enumerate(dict.fromkeys([t.lower() for t in known] + extra))}
    for param in ("numba", "numpy"):
        tok._kernels()
        saved = list(tok._COMPILED)
        if param == "numpy":
            tok._COMPILED[:] = [None]
        try:
            table = tok._TokenTable({})
            items = list(ids.items())
            table.add_many(items[: len(items) // 2])  # grown in two steps
            table.add_many(items[len(items) // 2:])
            table.add_many(items[:3])  # adding again changes nothing
            body = " ".join(an.terms(text) + list(ids))
            s = tok._stream_of([body], [True], 1, an.terms)
            want = [ids.get(s.term(i), -1) if len(s.term(i).encode()) <= 16 else -1
                    for i in range(len(s))]
            assert table.lookup(s).tolist() == want
        finally:
            tok._COMPILED[:] = saved


def test_stream_hits_equal_string_hits(kernels: str) -> None:
    # the term dictionary answers the same from strings and from a stream, unseen terms
    # included (resolved and remembered on the way), prefixes and wildcards too
    tk = _TermKeys({"stock": [0], "müller": [1], "averyveryverylongwordindeed": [2]},
                   {"st": [3], "sixteen": [4]}, [("e?ght*", 5), ("*ndeed", 6)],
                   [("of the", 7), ("of the stock", 8), ("the stock", 9)], 1000)
    an = Analyzer()
    docs = ["Stock of the Müller eightchr", "averyveryverylongwordindeed sixteencharacter stoc",
            "", "of the of the stock"]
    s = tok._stream_of(docs, [True] * 4, 4, an.terms)
    flat = [t for d in docs for t in an.terms(d)]
    want = [x.tolist() for x in _TermKeys({"stock": [0], "müller": [1],
                                           "averyveryverylongwordindeed": [2]},
                                          {"st": [3], "sixteen": [4]},
                                          [("e?ght*", 5), ("*ndeed", 6)],
                                          [("of the", 7), ("of the stock", 8),
                                           ("the stock", 9)], 1000).key_hits(flat)]
    for _ in range(2):  # the second time every term is remembered
        assert [x.tolist() for x in tk.key_hits_stream(s)] == want
    # phrases from term ids (compiled or numpy) against phrases from the strings
    assert [x.tolist() for x in tk.phrase_hits_ids(tk.key_hits_stream(s)[0])] == list(
        tk.phrase_hits(flat))


def test_stream_past_the_term_limit(kernels: str) -> None:
    # a dictionary that remembers 2 terms resolves the others at every occurrence
    tk = _TermKeys({"b": [0]}, {"a": [1]}, [], [], 2)
    an = Analyzer()
    docs = ["a b c aa ab", "ab aa b zz", "ac"]
    flat = [t for d in docs for t in an.terms(d)]
    want = [x.tolist() for x in _TermKeys({"b": [0]}, {"a": [1]}, [], [], 2).key_hits(flat)]
    got = [x.tolist() for x in tk.key_hits_stream(tok._stream_of(docs, [True] * 3, 3, an.terms))]
    assert got == want
    assert len(tk.ids) == 2  # the rest was resolved each time, not remembered


term = st.sampled_from([w.lower() for w in VOCAB if w.isascii()] + ["müller"])
leaf = st.one_of(
    term,
    st.builds(lambda ws, slop: '"' + " ".join(ws) + '"' + (f"~{slop}" if slop else ""),
              st.lists(term, min_size=2, max_size=3), st.sampled_from([0, 0, 1, 3])),
    st.builds(lambda t, k: t[: max(1, k)] + "*", term, st.integers(1, 5)),
    st.builds(lambda t, k: t[:k] + "?" + t[k + 1:], term.filter(lambda w: len(w) > 2),
              st.integers(1, 2)),
    st.builds(lambda f, t: f"{f}:{t}", st.sampled_from(["title", "body"]), term),
    st.builds(lambda a, b: f"n:[{a} TO {b}]", st.integers(0, 5), st.integers(3, 9)),
)
query = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"({a}) {op} ({b})", inner,
                  st.sampled_from(["AND", "OR", "AND NOT"]), inner),
        st.builds(lambda a: f"+({a}) -zz", inner),
    ),
    max_leaves=4,
)


@st.composite
def long_document(draw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": draw(st.integers(0, 10**6)), "body": _text(draw, 250)}
    if draw(st.booleans()):
        doc["title"] = _text(draw, 12)
    if draw(st.integers(0, 4)) == 0:  # a list field: this document is read through its view
        doc["tags"] = [_text(draw, 5), _text(draw, 5)]
    doc["n"] = draw(st.integers(0, 9))
    return doc


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(queries=st.lists(query, min_size=1, max_size=12),
       docs=st.lists(long_document(), min_size=16, max_size=24),
       tf=st.booleans())
def test_long_documents_equal_every_query(queries: list[str], docs: list[dict[str, Any]],
                                          tf: bool) -> None:
    freq = {"stock": 0.3, "the": 0.9, "müller": 0.01, "eightchr": 0.05} if tf else None
    base = NoFiltering(PercolatorConfig())
    index = Percolator(PercolatorConfig(term_frequencies=freq))
    for i, q in enumerate(queries):
        try:
            base.register(i, q)
            index.register(i, q)
        except CepSyntaxError:
            continue
    want = [r.ids for r in base.percolate_batch(docs).results]
    tok._kernels()
    saved = list(tok._COMPILED)
    try:
        for param in ("numba", "numpy"):
            if param == "numpy":
                tok._COMPILED[:] = [None]
            got = index.percolate_batch(docs)  # a batch of 16 or more: the stream path
            assert [r.ids for r in got.results] == want
            assert got.stats.errors == 0
        # a batch cut into parts (see percolator._parts): the same answers and totals
        whole = index.percolate_batch(docs).stats
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(perc, "_PART_CHARS", 3000)
            mp.setattr(perc, "_PART_DOCS", 7)
            assert len(perc._parts(docs)) > 3
            got = index.percolate_batch(docs)
        assert [r.ids for r in got.results] == want
        assert (got.stats.candidates, got.stats.matches, got.stats.documents) == (
            whole.candidates, whole.matches, len(docs))
    finally:
        tok._COMPILED[:] = saved
    assert [index.percolate(d).ids for d in docs[:4]] == want[:4]


def test_long_documents_really_match() -> None:
    # the property above is not vacuous: its kind of document matches its kind of query
    docs = [{"body": "The stock of Müller rose; sixteencharacter eightchr " * 40, "n": 4}] * 16
    p = Percolator()
    p.register("a", '"stock of" AND müller AND n:[3 TO 5]')
    p.register("b", "sixteen* AND e?ghtchr")
    p.register("c", "averyveryverylongwordindeed")
    got = p.percolate_batch(docs)
    assert [r.ids for r in got.results] == [["a", "b"]] * 16
