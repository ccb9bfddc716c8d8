"""Tests for the percolator's index paths: the term dictionary (wildcards, prefixes, phrases),
range and sloppy-pair checks, the scanners behind one interface, and the garbage-collector
pause. Each against an independent reference: brute force or the every-query baseline."""

from __future__ import annotations

import gc
import random
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cep.percolator as perc_mod
import cep.percolator.scanners as scanners_mod
from cep.percolator import (
    _SCANNERS,
    NoFiltering,
    Percolator,
    PercolatorConfig,
    _TermKeys,
    available_automata,
)
from patterns.analysis import AnalysisConfig, Analyzer
from patterns.errors import CepError
from patterns.lucene import PhraseNode, QueryConfig


def same_as_baseline(queries: list[str], docs: list[dict[str, Any]], **options: Any) -> Any:
    """Register ``queries`` on the index (one document at a time and vectorised) and on the
    baseline; assert the same ids, spans and per-document stats; return the index."""
    qc = options.pop("query", QueryConfig())
    each = Percolator(PercolatorConfig(query=qc, **options))
    vector = Percolator(PercolatorConfig(query=qc, vector_threshold=1, **options))
    base = NoFiltering(PercolatorConfig(query=qc))
    for i, q in enumerate(queries):
        for s in (each, vector, base):
            s.register(i, q)
    want = base.percolate_batch(docs, highlight=True).results
    one = [each.percolate(d, highlight=True) for d in docs]
    batch = each.percolate_batch(docs, highlight=True).results
    vec = vector.percolate_batch(docs, highlight=True).results
    for got in (one, batch, vec):
        assert [r.ids for r in got] == [r.ids for r in want]
        assert [r.spans for r in got] == [r.spans for r in want]
        assert [r.errors for r in got] == [{}] * len(docs)
    # the per-document path and the vectorised path count candidates the same way
    assert [(r.candidates, r.verified) for r in one] == [
        (r.candidates, r.verified) for r in vec]
    return each


# --- analysis -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=40))
def test_ascii_terms_equal_the_token_regex(text: str) -> None:
    """Plain analysis splits ASCII text by byte translation; the regex is the reference."""
    assert Analyzer().terms(text) == [t.lower() for t in re.findall(r"[^\W_]+", text)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("aB9 .\x00é_-'"), max_size=12), max_size=6))
def test_terms_of_many_texts_equal_one_by_one(texts: list[str]) -> None:
    """Many texts analysed in one call (joined by NUL) give each text's own terms; NUL inside a
    text or non-ASCII text sends the batch the usual way."""
    for config in (AnalysisConfig(), AnalysisConfig.english()):
        an = Analyzer(config)
        assert an.terms_many(texts) == [an.terms(t) for t in texts]


class _Text(str):
    """A str subclass: the document view's general path."""


def _random_doc(rng: random.Random) -> dict[str, Any]:
    words = ["apple", "Pie", "tart", "of", "banks", "a-b", "Über"]
    text = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))  # noqa: E731
    doc: dict[str, Any] = {}
    for name in rng.sample(["id", "t", "u", "stream", "n", "tags", "nested"], rng.randint(0, 5)):
        kind = rng.random()
        if name == "n":
            doc[name] = rng.choice([3, 2.5, True, None, "7"])
        elif name == "tags":
            doc[name] = [text() for _ in range(rng.randint(0, 2))] + rng.choice([[], [4]])
        elif name == "nested":
            doc[name] = {"t": text()}
        else:
            doc[name] = _Text(text()) if kind < 0.1 else text()
    return doc


@pytest.mark.parametrize("default_fields", [None, ("t", "tags")])
@pytest.mark.parametrize("analysis", [AnalysisConfig(), AnalysisConfig.english()],
                         ids=["plain", "english"])
def test_batch_terms_equal_the_document_view(analysis: AnalysisConfig,
                                             default_fields: Any) -> None:
    """A batch analyses each field for all documents at once; its terms and its 'one plain
    value' flags must be what each document's view says, whatever the documents hold."""
    rng = random.Random(5)
    config = PercolatorConfig(query=QueryConfig(analysis=analysis,
                                                default_fields=default_fields),
                              exclude_fields=("stream",))
    ctx = perc_mod._Context(config)
    for i in range(80):
        docs = [_random_doc(rng) for _ in range(rng.randint(0, 8))]
        if i % 2:  # headline-like: one text field each, now and then one that is not
            docs = [{"id": j, "t": " ".join(rng.sample(["Apple", "pie", "x1"], 2)), "n": j}
                    if rng.random() < 0.9 else d for j, d in enumerate(docs)]
        batch = perc_mod._Batch(docs, ctx)
        for fld in (None, "t", "tags", "nested.t", "n", "missing"):
            views = [perc_mod._DocView(d, ctx) for d in docs]
            terms, single = batch.terms(fld)
            assert terms == [v.terms(fld) for v in views], (fld, docs)
            assert single.tolist() == [v.single_terms(fld) is not None for v in views]
        # the one field every document's default text comes from, if there is one
        sole = {tuple(v.default_fields()) for v in views}
        plain_one = all(type(d.get(f)) is str for d, v in zip(docs, views)
                        for f in v.default_fields()) and all(
            not isinstance(x, list) for d in docs for x in d.values())
        want = (next(iter(sole))[0] if default_fields is None and len(sole) == 1
                and len(next(iter(sole))) == 1 and plain_one and docs else None)
        assert batch.sole_field() == want, docs


# --- the term dictionary --------------------------------------------------------------------


def _brute_keys(term: str, terms: dict[str, list[int]], prefixes: dict[str, list[int]],
                wildcards: list[tuple[str, int]]) -> set[int]:
    out = set(terms.get(term, ()))
    for p, ks in prefixes.items():
        if term.startswith(p):
            out.update(ks)
    for pattern, k in wildcards:
        body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
        if re.fullmatch(body, term, re.DOTALL):
            out.add(k)
    return out


def test_term_dictionary_equals_brute_force() -> None:
    rng = random.Random(7)
    alphabet = "abcé1"
    word = lambda lo, hi: "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))  # noqa: E731
    for _ in range(40):
        terms = {word(1, 4): [i] for i in range(6)}
        prefixes = {word(1, 3): [10 + i] for i in range(5)}
        wildcards = []
        for i in range(8):
            w = list(word(1, 5))
            for _ in range(rng.randint(1, 2)):
                w.insert(rng.randint(0, len(w)), rng.choice("*?"))
            wildcards.append(("".join(w), 100 + i))
        tk = _TermKeys(terms, prefixes, wildcards, [], limit=1000)
        for _ in range(60):
            t = word(1, 6)
            want = _brute_keys(t, terms, prefixes, wildcards)
            assert set(tk.resolve(t)) == want, (t, terms, prefixes, wildcards)
            assert set(tk.keys_of([t])[0]) == want  # remembered the same


def test_term_dictionary_limit_keeps_answers() -> None:
    tk = _TermKeys({}, {"ab": [1]}, [("a?c*", 2)], [], limit=2)
    got = [set(tk.resolve(t)) for t in ["abc", "abd", "axcd", "abc", "b"]]
    assert got == [{1, 2}, {1}, {2}, {1, 2}, set()]
    assert len(tk.cache) == 2  # the rest resolved again at each sighting


def test_term_ids_give_the_keys_of_each_term() -> None:
    """Batches read the term dictionary through term ids and arrays (frozen now and then as
    new terms arrive, and past the remembered-terms limit); the answers are ``keys_of``."""
    rng = random.Random(9)
    alphabet = "abcd"
    word = lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7)))  # noqa: E731
    terms = {word(): [i] for i in range(30)}
    prefixes = {word()[:3]: [100 + i] for i in range(10)}
    wildcards = [("a?c*", 200), ("*bd", 201), ("d*a", 202)]
    phrases = [("ab cd", 300), ("ab cd a", 301), ("b b", 302)]
    for limit in (5, 3000):
        tk = _TermKeys(terms, prefixes, wildcards, phrases, limit=limit)
        ref = _TermKeys(terms, prefixes, wildcards, phrases, limit=limit)
        for _ in range(6):  # 1,500 new words and more per batch: the arrays are rebuilt
            batch = [word() for _ in range(rng.randint(0, 2500))]
            tids, at, kids = tk.key_hits(batch)
            got: list[list[int]] = [[] for _ in batch]
            for i, k in zip(at.tolist(), kids.tolist()):
                got[i].append(k)
            want = ref.keys_of(batch)
            assert [sorted(g) for g in got] == [sorted(w) for w in want]
            known = tids >= 0
            assert all(tk.ids[t] == i for t, i, k in zip(batch, tids.tolist(), known) if k)
            assert known.all() or len(tk.cache) >= limit


def test_phrase_hits_by_term_ids_equal_by_terms() -> None:
    rng = random.Random(4)
    vocab = ["a", "b", "c", "d"]
    for _ in range(200):
        phrases = {" ".join(rng.choice(vocab) for _ in range(rng.randint(2, 4)))
                   for _ in range(5)}
        table = [(p, i) for i, p in enumerate(sorted(phrases))]
        tk = _TermKeys({}, {}, [], table, 10)
        terms = [rng.choice(vocab + ["e"]) for _ in range(rng.randint(0, 12))]
        tids, _, _ = tk.key_hits(terms)
        got = tk.phrase_hits_ids(tids)
        assert sorted(zip(*(x.tolist() for x in got))) == sorted(zip(*tk.phrase_hits(terms)))


def test_readers_in_threads_remember_new_terms_safely() -> None:
    """Several threads percolating batches of words the dictionary never saw remember them
    (term ids, arrays rebuilt) while the others read: answers stay the baseline's."""
    words = [f"w{i}x" for i in range(3000)]
    queries = ["w1*", "w2?x", "w12x AND w7*", '"w3x w4x"']
    p = Percolator(PercolatorConfig(vector_threshold=1))
    base = NoFiltering()
    for i, q in enumerate(queries):
        p.register(i, q)
        base.register(i, q)
    rng = random.Random(2)
    docs = [{"t": " ".join(rng.choice(words) for _ in range(8))} for _ in range(400)]
    want = [r.ids for r in base.percolate_batch(docs).results]
    got: dict[int, list[Any]] = {}
    errors: list[BaseException] = []

    def reader(k: int) -> None:
        try:
            mine = docs[k::4]
            got[k] = [r.ids for r in p.percolate_batch(mine).results]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(got[k] == want[k::4] for k in range(4))


def test_phrase_keys_equal_brute_force() -> None:
    rng = random.Random(3)
    vocab = ["a", "b", "c", "d"]
    for _ in range(200):
        phrases = {" ".join(rng.choice(vocab) for _ in range(rng.randint(2, 4)))
                   for _ in range(5)}
        table = [(p, i) for i, p in enumerate(sorted(phrases))]
        terms = [rng.choice(vocab) for _ in range(rng.randint(0, 9))]
        joined = f" {' '.join(terms)} "
        want = sorted(k for p, k in table if f" {p} " in joined)
        assert sorted(set(_TermKeys({}, {}, [], table, 10).phrase_keys(terms))) == want


# --- wildcards and prefixes: no verification, same answers ----------------------------------

WILDCARDS = ["poli?e*", "te?m", "t:ca?s", "ca*s", "u:?at*", "d?g", "b*d*y"]
WILD_DOCS = [
    {"t": "Police teams", "u": "cats"},
    {"t": "politeness", "u": "bat man"},
    {"t": "term cars", "tags": ["dig", "dog"]},
    {"t": "nothing here", "u": ["rat", "hat"]},
    {"t": "bad day body", "u": "bodily"},
]


@pytest.mark.parametrize("scanner", ["dict", "aho"])
def test_wildcards_are_proven_and_match_like_the_baseline(scanner: str) -> None:
    p = same_as_baseline(WILDCARDS, WILD_DOCS, scanner=scanner,
                         query=QueryConfig(allow_leading_wildcard=True))
    assert {q.plan.kind for q in p.queries()} == {"proven"}
    out = p.percolate_batch(WILD_DOCS)
    assert out.stats.candidates == 0 and out.stats.verified == 0


def test_terms_first_seen_after_registration() -> None:
    """Wildcards and prefixes resolve terms the frequency table never had, terms seen by one
    segment and then by a delta segment registered later, and a rebuilt index."""
    tf = {"police": 0.1, "teams": 0.01}  # the vocabulary known at build time
    p = Percolator(PercolatorConfig(term_frequencies=tf, delta_limit=10))
    base = NoFiltering()
    for s in (p, base):
        s.register("w", "poli?e*")
        s.register("p", "polic*")
    early = [{"t": "police"}, {"t": "policeman policewoman"}]
    assert [r.ids for r in p.percolate_batch(early).results] == [["w", "p"], ["w", "p"]]
    seg = p.snapshot().segments[0]
    lexicon = seg.merged or seg.lexicons[0][1]
    assert "police" in lexicon.cache and "policeman" in lexicon.cache
    for s in (p, base):  # a delta segment: its own dictionary
        s.register("w2", "police?an")
    later = [{"t": "policeman"}, {"t": "policewoman"}, {"t": "politeman"}, {"t": "polite"}]
    assert len(p.snapshot().segments) == 2
    for docs in (later, later * 40):  # one at a time, then vectorised
        got = [r.ids for r in p.percolate_batch(docs).results]
        assert got == [r.ids for r in base.percolate_batch(docs).results]
    assert got[:4] == [["w", "p", "w2"], ["w", "p"], ["w"], ["w"]]
    p.rebuild()
    assert [r.ids for r in p.percolate_batch(later).results] == got[:4]


def test_prefill_resolves_the_vocabulary_at_build() -> None:
    tf = {"police": 0.1, "pole": 0.01, "cat": 0.2}
    for prefill in (True, False):
        p = Percolator(PercolatorConfig(term_frequencies=tf, prefill_terms=prefill))
        p.register("w", "po?e")
        seg = p.snapshot().segments[0]
        cache = seg.lexicons[0][1].cache
        assert (set(cache) == set(tf)) if prefill else not cache
        assert p.percolate({"t": "polite pole"}).ids == ["w"]


# --- phrases: the term dictionary where a field holds one value, else the automaton ---------

PHRASES = ['"new york"', '"new york city"', 't:"big apple"', '"york new"', 'tags:"a b"',
           '"state of art"']
PHRASE_DOCS = [
    {"t": "New York City now", "u": "big apple"},
    {"t": "the big apple", "tags": ["new", "york", "a b"]},
    {"t": ["new", "york"], "u": "york new"},
    {"t": "new, york! city", "tags": "a b"},
    {"t": "state of the art"}, {"t": "state of art"},
]


@pytest.mark.parametrize("analysis", [AnalysisConfig(), AnalysisConfig.english()],
                         ids=["plain", "english"])
def test_phrases_single_and_multi_valued(analysis: AnalysisConfig) -> None:
    qc = QueryConfig(analysis=analysis)
    same_as_baseline(PHRASES, PHRASE_DOCS, query=qc)
    same_as_baseline(PHRASES, PHRASE_DOCS, query=qc, scanner="aho")


def test_one_field_searched_by_default_and_by_name() -> None:
    """The merged dictionary serves documents whose only text field is also named by queries;
    documents with two text fields or lists take the per-field dictionaries."""
    queries = ["apple", "t:apple", "t:pie*", "appl?", '"apple pie"', 't:"apple pie"',
               "u:apple"]
    docs = [{"t": "apple pie", "n": 3}, {"t": "apple", "u": "pie"}, {"u": "apple pie"},
            {"t": ["apple pie"], "u": "x"}, {"id": "apple", "t": "pies"}]
    p = same_as_baseline(queries, docs)
    assert p.snapshot().segments[0].merged is not None


# --- decided by keys and numbers, sloppy pairs ----------------------------------------------

RANGE_QUERIES = ["apple AND n:[1 TO 5]", "apple AND n:{1 TO 5}", "apple AND n:[3 TO *]",
                 "apple AND n:{* TO 3}", "+apple +(pie OR tart) +n:[2 TO 4]",
                 "apple AND d:[2003-01-02 TO 2003-01-03]", "pie AND n:[1 TO 2] AND d:[* TO *]"]
RANGE_DOCS = [
    {"t": "apple pie", "n": 1}, {"t": "apple", "n": 5}, {"t": "apple tart", "n": 3},
    {"t": "apple", "n": "4.5"}, {"t": "apple", "n": True}, {"t": "apple", "n": float("nan")},
    {"t": "apple pie", "n": [0, 2]}, {"t": "apple", "d": "2003-01-03T23:00:00Z"},
    {"t": "apple", "d": 1_041_465_600_000}, {"t": "apple"}, {"t": "pie", "n": 2, "d": "x"},
    {"t": "apple", "n": 2**60},
]


def test_ranges_decided_with_the_keys() -> None:
    p = same_as_baseline(RANGE_QUERIES, RANGE_DOCS)
    # all flat but the last (``d:[* TO *]`` is "has a value": a general plan)
    assert [q.plan.kind for q in p.queries()] == ["flat"] * 6 + ["general"]


SLOPPY = ['"apple pie"~1', '"pie apple"~2', '"apple pie"~3', 'u:"a b"~1', '"apple apple"~2',
          '"apple pie tart"~2', '"a b"~1 AND c']
SLOPPY_DOCS = [
    {"t": "apple x pie"}, {"t": "pie apple"}, {"t": "apple x y pie apple"},
    {"t": "pie x x x apple"}, {"u": ["a x", "b"], "t": "c"}, {"u": "b x a", "t": "c"},
    {"t": "apple apple"}, {"t": "apple x apple pie tart"}, {"t": ["apple", "pie"]},
    {"t": "a b c"},
]


def test_sloppy_pairs_vectorised_like_the_baseline() -> None:
    same_as_baseline(SLOPPY, SLOPPY_DOCS)
    same_as_baseline(SLOPPY, SLOPPY_DOCS, query=QueryConfig(analysis=AnalysisConfig.english()))
    same_as_baseline(SLOPPY, SLOPPY_DOCS * 3, scanner="aho")


def test_phrase_evaluation_from_the_term_list_equals_positions() -> None:
    """The reference evaluator reads a single plain value's positions from its term list;
    the positions table (built per value) must say the same."""
    rng = random.Random(11)
    ctx = Percolator()._ctx
    vocab = ["a", "b", "c"]
    for _ in range(300):
        terms = tuple(rng.choice(vocab) for _ in range(rng.randint(2, 3)))
        slop = rng.choice([0, 1, 2, 3])
        node = PhraseNode(None, terms, tuple(range(len(terms))), slop)
        view = perc_mod._DocView({"t": " ".join(rng.choice(vocab) for _ in range(6))}, ctx)
        assert view.single_terms(None) is not None
        want = all(x in view.termset(None) for x in terms) and any(
            perc_mod._phrase_windows(p, node, True) for p in view.positions(None))
        assert perc_mod._evaluate(node, view) == want, (node, view.doc)


GROUPED = ["+a +(b OR c)", "+a +(b OR c) -d", "(a OR b) AND c", "+(a OR b) +(c OR d)",
           "a AND (b OR c) AND d", "+a +(a OR b)"]
GROUPED_DOCS = [{"t": t} for t in ["a b", "a c d", "b c", "a", "a d", "b d", "c", "a b c d"]]


def test_groups_pair_with_the_first_key() -> None:
    p = same_as_baseline(GROUPED, GROUPED_DOCS)
    # "+a +(b OR c)" and "+a +(a OR b)" are decided by the keys found; "+a +(b OR c) -d" is a
    # candidate (its forbidden key is checked), the others need keys "a b" lacks
    first = p.percolate_batch(GROUPED_DOCS[:1])
    assert first.results[0].ids == [0, 1, 5] and first.stats.candidates == 1


# --- scanners -------------------------------------------------------------------------------

AUTOMATA = [pytest.param(name, marks=() if name in available_automata() else
                         pytest.mark.skip(reason=f"optional {name} is not installed"))
            for name in _SCANNERS]


@pytest.mark.parametrize("name", AUTOMATA)
def test_scanner_finds_every_occurrence(name: str) -> None:
    words = [" new york ", " york ", " café ", " new", " ü "]
    sc = _SCANNERS[name](words, [10, 11, 12, 13, 14])
    texts = [" new york york ", " café ü new ", "", " newyork ", " ü café new york "]

    def brute(text: str) -> list[int]:
        return sorted(v for w, v in zip(words, [10, 11, 12, 13, 14])
                      for i in range(len(text)) if text.startswith(w, i))

    assert [sorted(sc.find(t)) for t in texts] == [brute(t) for t in texts]
    docs, values = sc.find_batch(texts)
    got: list[list[int]] = [[] for _ in texts]
    for d, v in zip(docs.tolist(), values.tolist()):
        got[d].append(v)
    assert [sorted(g) for g in got] == [brute(t) for t in texts]


@pytest.mark.parametrize("name", AUTOMATA)
def test_every_automaton_gives_the_same_matches(name: str) -> None:
    queries = ["apple", '"big apple"', "app*", "t:pie", '"new york" AND café', "ca?é",
               "apple -pie", '"apple pie"~2']
    docs = [{"t": "Big Apple pie"}, {"t": "New York café"}, {"t": ["big", "apple"]},
            {"t": "applesauce", "u": "café new york"}]
    for scanner in ("dict", "aho"):
        same_as_baseline(queries, docs, scanner=scanner, automaton=name)


def test_auto_takes_the_measured_fastest_installed() -> None:
    sparse = "ahocorasick_rs" if "ahocorasick_rs" in available_automata() else "pyahocorasick"
    for scanner, want in (("dict", sparse), ("aho", "pyahocorasick")):
        p = Percolator(PercolatorConfig(scanner=scanner))  # type: ignore[arg-type]
        p.register("q", '"a b"')
        assert p.snapshot().segments[0].automaton_name == want


def test_automaton_config_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="automaton must be 'auto' or one of pyahocorasick, "
                                         "ahocorasick_rs, hyperscan, got 'fast'"):
        PercolatorConfig(automaton="fast")  # type: ignore[arg-type]
    monkeypatch.setattr(scanners_mod, "available_automata", lambda: ["pyahocorasick"])
    p = Percolator(PercolatorConfig(automaton="hyperscan"))
    p.register("q", '"a b"')
    with pytest.raises(CepError, match="automaton 'hyperscan' is not installed: pip install "
                                       "hyperscan, or use automaton='auto'"):
        p.percolate({"t": "a b"})
    auto = Percolator()
    auto.register("q", '"a b"')
    assert auto.percolate({"t": "a b"}).ids == ["q"]
    assert auto.snapshot().segments[0].automaton_name == "pyahocorasick"


# --- garbage collector, configuration files -------------------------------------------------


def test_gc_is_paused_only_during_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real = perc_mod._Segment.match_batch

    def spy(self: Any, *args: Any) -> Any:
        seen.append(gc.isenabled())
        return real(self, *args)

    monkeypatch.setattr(perc_mod._Segment, "match_batch", spy)
    docs = [{"t": "apple"}] * 2
    p = Percolator(PercolatorConfig(vector_threshold=1))
    p.register("q", "apple")
    assert gc.isenabled()
    assert p.percolate_batch(docs).results[0].ids == ["q"]
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:  # a caller's choice is left alone
        p.percolate_batch(docs)
        assert not gc.isenabled()
    finally:
        gc.enable()
    off = Percolator(PercolatorConfig(vector_threshold=1, pause_gc=False))
    off.register("q", "apple")
    off.percolate_batch(docs)
    assert seen == [False, False, True]

    def boom(self: Any, *args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(perc_mod._Segment, "match_batch", boom)
    with pytest.raises(RuntimeError):
        p.percolate_batch(docs)
    assert gc.isenabled()


def test_config_round_trip_and_older_files(tmp_path: Path) -> None:
    config = PercolatorConfig(automaton="pyahocorasick", term_cache_size=5, prefill_terms=False,
                              pause_gc=False, scanner="aho")
    p = Percolator(config)
    p.register("q", "te?m*")
    path = tmp_path / "q.jsonl"
    p.save(path)
    again = Percolator.load(path)
    assert again.config == config
    # a file written before these settings existed loads with their defaults
    header = orjson.loads(path.read_bytes().splitlines()[0])
    for name in ("automaton", "term_cache_size", "prefill_terms", "pause_gc"):
        del header["config"][name]
    old = tmp_path / "old.jsonl"
    old.write_bytes(orjson.dumps(header) + b"\n" + path.read_bytes().splitlines()[1] + b"\n")
    loaded = Percolator.load(old)
    assert loaded.config.automaton == "auto" and loaded.config.prefill_terms
    assert loaded.percolate({"t": "teams"}).ids == ["q"]


def test_batch_results_hold_slots_as_arrays() -> None:
    p = Percolator(PercolatorConfig(vector_threshold=1))
    p.register("a", "apple", {"owner": "ann"})
    p.register("b", "pie")
    r = p.percolate_batch([{"t": "apple pie"}]).results[0]
    assert isinstance(r._slots, np.ndarray)
    assert [q.id for q in r.queries] == ["a", "b"] and r.metadata["a"]["owner"] == "ann"


def test_batch_results_read_their_batch_when_asked() -> None:
    """A vectorised batch's results build their id lists when read (a new list each time)
    and answer like the per-document path's."""
    p = Percolator(PercolatorConfig(vector_threshold=1))
    p.register("a", "apple", {"owner": "ann"})
    p.register("b", "pie AND NOT tart")
    docs = [{"t": "apple pie"}, {"t": "tart"}, {"t": "pie"}]
    got = p.percolate_batch(docs).results
    each = [p.percolate(d) for d in docs]
    assert [r.ids for r in got] == [r.ids for r in each] == [["a", "b"], [], ["b"]]
    r = got[0]
    assert r.ids == r.ids and r.ids is not r.ids
    assert (r.spans, r.errors, r.candidates, r.verified) == (
        each[0].spans, each[0].errors, each[0].candidates, each[0].verified)
    assert repr(r) == "DocumentMatches(ids=['a', 'b'], errors={})"
    assert got[2].metadata == {"b": {}}


def test_vectorised_results_copy_and_pickle_as_plain_results() -> None:
    """A result read from a vectorised batch copies and pickles as a plain DocumentMatches that
    keeps its ids, queries and metadata (and only its own queries)."""
    import copy
    import pickle

    from cep.percolator import DocumentMatches

    p = Percolator(PercolatorConfig(vector_threshold=1))
    for i, q in enumerate(["apple", "pear OR apple", "plum", "apple AND pie"]):
        p.register(f"q{i}", q, {"n": i})
    results = p.percolate_batch([{"t": "apple pie"}, {"t": "plum"}, {"t": "nothing"}]).results
    assert type(results[0]) is not DocumentMatches  # the vectorised path ran
    for r in results:
        for twin in (copy.copy(r), pickle.loads(pickle.dumps(r))):
            assert type(twin) is DocumentMatches
            assert (twin.ids, twin.metadata, twin.candidates, twin.verified) == (
                r.ids, r.metadata, r.candidates, r.verified)
    assert results[0].ids == ["q0", "q1", "q3"] and results[0].metadata == {"q0": {"n": 0}, "q1": {"n": 1}, "q3": {"n": 3}}
    assert len(pickle.dumps(results[1])) < len(pickle.dumps(results[0]))  # its own queries only
