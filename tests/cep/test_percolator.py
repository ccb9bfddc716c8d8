"""Tests for cep.percolator: matching semantics, presearcher plans, registration, results."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import cep.percolator.saved as saved_mod
import cep.percolator.verify as verify_mod
from cep.percolator import (
    NoFiltering,
    Percolator,
    PercolatorConfig,
    Presearcher,
)
from patterns.analysis import AnalysisConfig
from patterns.errors import CepError, CepSyntaxError
from patterns.lucene import QueryConfig, compile_query

EVERY_PATH = [
    pytest.param(dict(), id="dict-each"),
    pytest.param(dict(vector_threshold=1), id="dict-vector"),
    pytest.param(dict(scanner="aho"), id="aho-each"),
    pytest.param(dict(scanner="aho", vector_threshold=1), id="aho-vector"),
]


def matches(query: str, doc: dict[str, Any], query_config: QueryConfig | None = None,
            **options: Any) -> bool:
    """Whether ``doc`` matches ``query``, checked on the index and on the baseline (must agree)."""
    qc = query_config or QueryConfig()
    got = []
    for cls, opts in ((Percolator, options), (NoFiltering, {})):
        p = cls(PercolatorConfig(query=qc, **opts))
        p.register("q", query)
        got.append(p.percolate(doc).ids == ["q"])
    assert got[0] == got[1], f"index {got[0]} != baseline {got[1]} for {query!r} on {doc!r}"
    return got[0]


# --- matching semantics ---------------------------------------------------------------------

SEMANTICS = [
    # terms and default fields (every string field but the id)
    ("apple", {"t": "An Apple a day"}, True),
    ("apple", {"t": "pineapple"}, False),
    ("apple", {"n": 5, "t": "pear", "u": "apple!"}, True),
    ("apple", {"id": "apple", "t": "pear"}, False),
    ("apple", {"tags": ["pear", "Apple"]}, True),
    ("5", {"n": 5}, False),  # non-strings are not default fields
    ("n:5", {"n": 5}, True),  # ... but a named field's number is text
    ("n:true", {"n": True}, True),
    ("n:5", {"n": [4, 5]}, True),
    ("a.b:x", {"a": {"b": "x y"}}, True),
    ("a.b:x", {"a": {"c": "x"}}, False),
    ("title:apple", {"title": "apple", "body": "pear"}, True),
    ("title:apple", {"title": "pear", "body": "apple"}, False),
    ("title:apple", {"body": "apple"}, False),
    ("apple", {"t": None}, False),
    # booleans
    ("apple pear", {"t": "pear"}, True),
    ("+apple pear", {"t": "pear"}, False),
    ("+apple pear", {"t": "apple"}, True),
    ("apple -pear", {"t": "apple pear"}, False),
    ("apple AND pear OR fig", {"t": "apple pear"}, True),
    ("apple AND pear OR fig", {"t": "fig"}, False),  # Lucene: +apple +pear fig
    ("(apple AND pear) OR fig", {"t": "fig"}, True),
    ("apple AND NOT (pear OR fig)", {"t": "apple fig"}, False),
    ("apple AND NOT (pear AND fig)", {"t": "apple fig"}, True),
    ("*:*", {"t": "x"}, True),
    ("*", {}, True),
    # phrases and proximity
    ('"big apple"', {"t": "The Big Apple."}, True),
    ('"big apple"', {"t": "big red apple"}, False),
    ('"big apple"~1', {"t": "big red apple"}, True),
    ('"apple big"~1', {"t": "big apple"}, False),  # a transposition costs 2, as in Lucene
    ('"apple big"~2', {"t": "big apple"}, True),
    ('"a b c"~1', {"t": "a x b c"}, True),
    ('"a b c"~1', {"t": "a x b y c"}, False),
    ('"a a"', {"t": "a a"}, True),
    ('"a a"~1', {"t": "a"}, False),  # two phrase terms never share one position
    ('"a a"~1', {"t": "a b a"}, True),
    ('"big apple"', {"tags": ["big", "apple"]}, False),  # not across list values
    ('"big apple"', {"x": "big", "y": "apple"}, False),  # nor across fields
    ('t:"big apple"', {"t": ["red big", "apple big"]}, False),
    ('"x y"', {"t": "X-Y"}, True),
    # prefix and wildcard
    ("app*", {"t": "Applesauce"}, True),
    ("app*", {"t": "map"}, False),
    ("te?m", {"t": "team"}, True),
    ("te?m", {"t": "teem teams"}, True),
    ("te?m", {"t": "tem"}, False),
    ("te?m*", {"t": "tea meal"}, False),  # never across tokens
    ("t*m", {"t": "tm"}, True),
    ("a-b*", {"t": "a-b"}, False),
    ("t:*", {"t": "x"}, True),
    ("t:*", {"t": None}, False),
    ("t:*", {"t": []}, False),
    ("t:*", {"u": "x"}, False),
    ("t:[* TO *]", {"t": 0}, True),
    # numeric ranges
    ("n:[1 TO 5]", {"n": 5}, True),
    ("n:[1 TO 5}", {"n": 5}, False),
    ("n:{1 TO 5]", {"n": 1}, False),
    ("n:[1 TO 5]", {"n": "3.5"}, True),  # numeric strings are numbers
    ("n:[1 TO 5]", {"n": "three"}, False),  # a non-numeric string is a non-match, no error
    ("n:[1 TO 5]", {"n": True}, False),
    ("n:[1 TO 5]", {"n": float("nan")}, False),
    ("n:[* TO 0]", {"n": -3}, True),
    ("n:[10 TO *]", {"n": [1, 20]}, True),
    ("n:[1 TO 5]", {"m": 3}, False),
    ("[1 TO 5]", {"s": "4"}, True),  # unqualified: the default fields
    # date ranges
    ("d:[2003-01-01 TO 2003-01-31]", {"d": "2003-01-31T23:59:59Z"}, True),
    ("d:[2003-01-01 TO 2003-01-31}", {"d": "2003-01-31T00:00:00Z"}, False),
    ("d:{2003-01-01 TO *]", {"d": "2003-01-01T12:00:00"}, False),
    ("d:{2003-01-01 TO *]", {"d": "2003-01-02"}, True),
    ("d:[2003-01-01 TO *]", {"d": 1_041_379_200_000}, True),  # epoch milliseconds
    ("d:[2003-01-01 TO *]", {"d": "yesterday"}, False),
    ("d:[2003-01-01 TO *]", {"d": "2003-02-30"}, False),
    ("d:[2003-01-01T00:00:00+02:00 TO 2003-01-01T00:00:00Z]", {"d": "2002-12-31T23:00Z"}, True),
    # term ranges compare analysed tokens
    ("t:[b TO d]", {"t": "Apple Cherry"}, True),
    ("t:{b TO c}", {"t": "c"}, False),
    ("t:[b TO *]", {"t": "a"}, False),
]


@pytest.mark.parametrize("query, doc, expected", SEMANTICS)
@pytest.mark.parametrize("options", EVERY_PATH)
def test_semantics(query: str, doc: dict[str, Any], expected: bool,
                   options: dict[str, Any]) -> None:
    assert matches(query, doc, **options) is expected


def test_default_fields_and_operator() -> None:
    qc = QueryConfig(default_fields=("title",), default_operator="AND")
    assert matches("apple pear", {"title": "pear apple"}, qc)
    assert not matches("apple pear", {"title": "pear", "body": "apple"}, qc)
    assert matches("n:[1 TO 2] apple", {"title": "apple", "n": 1}, qc)
    assert matches("x", {"title": 7, "x": "y"}, QueryConfig(default_fields=("x", "title"))) is False
    assert matches("7", {"title": 7}, QueryConfig(default_fields=("title",)))


def test_stop_words_and_stemming_shared_by_queries_and_documents() -> None:
    qc = QueryConfig(analysis=AnalysisConfig.english())
    assert matches('"bank of america"', {"t": "Bank in America"}, qc)  # positions, as Lucene
    assert matches('"bank of america"', {"t": "bank big america"}, qc)
    assert not matches('"bank of america"', {"t": "bank america"}, qc)
    assert matches("companies", {"t": "one company"}, qc)
    assert matches('"banks america"', {"t": "bank america"}, qc)


def test_id_field_is_configurable() -> None:
    p = Percolator(PercolatorConfig(id_field=None))
    p.register("q", "apple")
    assert p.percolate({"id": "apple"}).ids == ["q"]


# --- presearcher ----------------------------------------------------------------------------


def plan(query: str, tf: dict[str, float] | None = None, **qc: Any) -> Any:
    return Presearcher(tf).plan(compile_query(query, QueryConfig(**qc)))


def test_presearcher_conjunction_indexes_the_most_selective_child() -> None:
    assert plan("cat AND elephant").keys == {(None, "t", "elephant")}
    freq = {"cat": 0.0001, "elephant": 0.2, "dog": 0.1, "emu": 0.01}
    assert plan("cat AND elephant", freq).keys == {(None, "t", "cat")}
    assert plan("cat AND elephant").required == ((None, "t", "elephant"), (None, "t", "cat"))
    assert plan("+cat +(dog OR emu)", freq).keys == {(None, "t", "cat")}


def test_presearcher_disjunction_prohibited_and_proven() -> None:
    p1 = plan("cat OR dog OR title:emu")
    assert p1.kind == "proven"
    assert p1.keys == {(None, "t", "cat"), (None, "t", "dog"), ("title", "t", "emu")}
    p2 = plan("cat -dog")
    assert p2.kind == "flat" and p2.keys == {(None, "t", "cat")}
    assert p2.forbidden == {(None, "t", "dog")}
    assert plan("pre*").kind == "proven" and plan("pre*").keys == {(None, "p", "pre")}
    assert plan('"big apple"').kind == "proven"
    assert plan('"big apple"').keys == {(None, "t", "big apple")}


def test_presearcher_wildcards_phrases_and_always_checked() -> None:
    # a wildcard is its own key, resolved per distinct document term: proven, never verified
    assert plan("elep?ant*").keys == {(None, "w", "elep?ant*")}
    assert plan("elep?ant*").kind == "proven"
    assert plan("??a", allow_leading_wildcard=True).keys == {(None, "w", "??a")}
    assert plan("t:elep?ant AND cat").kind == "flat"
    assert plan("t:elep?ant AND cat").required == (("t", "w", "elep?ant"), (None, "t", "cat"))
    assert plan('"big apple"~2').kind == "general"
    assert plan('"big elephant"~2').keys == {(None, "t", "elephant")}
    assert plan("n:[1 TO 2]").keys is None
    assert plan("cat OR n:[1 TO 2]").keys is None
    assert plan("*:*").keys is None and plan("t:*").keys is None
    assert plan("a-b*").keys == frozenset()  # can never match: never a candidate


def test_presearcher_flat_with_ranges() -> None:
    p1 = plan("cat AND n:[1 TO 2]")
    assert p1.kind == "flat" and len(p1.ranges) == 1 and p1.keys == {(None, "t", "cat")}
    assert plan("cat AND t:[a TO b]").kind == "general"


def test_presearcher_prefix_cost_uses_the_frequency_table() -> None:
    ps = Presearcher({"apple": 0.3, "apply": 0.2, "banana": 0.01})
    assert ps.cost((None, "p", "app")) == pytest.approx(0.5, abs=1e-6)
    assert ps.cost((None, "p", "ban")) == pytest.approx(0.01, abs=1e-6)
    assert ps.cost((None, "t", "zzz")) < ps.cost((None, "t", "banana"))


# --- registration, results, filters ---------------------------------------------------------


def test_register_replace_delete() -> None:
    p = Percolator()
    p.register("q", "apple", {"owner": "ann"})
    assert p.percolate({"t": "apple"}).ids == ["q"]
    p.register("q", "pear")  # replaces
    assert len(p) == 1 and "q" in p and p.get("q").query == "pear"  # type: ignore[union-attr]
    assert p.percolate({"t": "apple"}).ids == []
    assert p.percolate({"t": "pear"}).ids == ["q"]
    assert p.delete("q") and not p.delete("q") and p.get("q") is None
    assert p.percolate({"t": "pear"}).ids == []


def test_invalid_query_raises_and_changes_nothing() -> None:
    p = Percolator()
    p.register(1, "apple")
    with pytest.raises(CepSyntaxError):
        p.register(1, "apple AND")
    assert p.get(1).query == "apple"  # type: ignore[union-attr]


def test_unhashable_id_message() -> None:
    with pytest.raises(CepError, match=r"query id must be hashable \(a string or a number\)"):
        Percolator()._add(["x"], "a", None, compile_query("a"), plan("a"))  # type: ignore


def test_config_validation_message() -> None:
    with pytest.raises(ValueError, match="scanner must be 'dict' or 'aho', got 'trie'"):
        PercolatorConfig(scanner="trie")  # type: ignore[arg-type]


def test_register_many_and_queries_in_order() -> None:
    p = Percolator()
    assert p.register_many([("b", "x"), ("a", "y", {"k": 1})]) == 2
    assert [q.id for q in p.queries()] == ["b", "a"]
    assert p.percolate({"t": "y x"}).ids == ["b", "a"]  # registration order


@pytest.mark.parametrize("options", EVERY_PATH)
def test_metadata_and_filters(options: dict[str, Any]) -> None:
    p = Percolator(PercolatorConfig(**options))
    p.register("a", "apple", {"owner": "ann", "tags": ["fruit", "red"]})
    p.register("b", "apple OR pear", {"owner": "bob", "tags": ["fruit"]})
    p.register("c", "apple AND n:[1 TO 9]", {"owner": "ann"})
    doc = {"t": "apple", "n": 3}
    r = p.percolate(doc)
    assert r.ids == ["a", "b", "c"]
    assert r.metadata == {"a": {"owner": "ann", "tags": ["fruit", "red"]},
                          "b": {"owner": "bob", "tags": ["fruit"]}, "c": {"owner": "ann"}}
    assert p.percolate(doc, metadata_filter={"owner": "ann"}).ids == ["a", "c"]
    assert p.percolate(doc, metadata_filter={"tags": "red"}).ids == ["a"]
    assert p.percolate(doc, metadata_filter={"tags": ["fruit"]}).ids == ["b"]
    assert p.percolate(doc, metadata_filter={"owner": "zed"}).ids == []
    assert p.percolate(doc, metadata_filter=lambda m: m["owner"] == "bob").ids == ["b"]
    assert [q.id for q in r.queries] == ["a", "b", "c"]
    with pytest.raises(TypeError):
        r.queries[0].metadata["owner"] = "x"  # type: ignore[index]


@pytest.mark.parametrize("options", EVERY_PATH)
def test_highlight_spans(options: dict[str, Any]) -> None:
    p = Percolator(PercolatorConfig(**options))
    p.register("term", "apple")
    p.register("phrase", '"big apple"')
    p.register("slop", '"apple big"~2')
    p.register("prefix", "tit:appl*")
    p.register("wild", "b?g")
    p.register("range", "n:[1 TO 5] AND big")
    p.register("trange", "tit:[a TO b]")
    p.register("bool", "(big AND zebra) OR apple")
    doc = {"t": "The big Apple, big apple", "tit": ["x", "Apples"], "n": "4"}
    r = p.percolate(doc, highlight=True)
    assert r.spans["term"] == (("t", 8, 13), ("t", 19, 24))
    assert r.spans["phrase"] == (("t", 4, 13), ("t", 15, 24))
    assert r.spans["slop"] == (("t", 4, 13), ("t", 8, 18), ("t", 15, 24))
    assert r.spans["prefix"] == (("tit[1]", 0, 6),)
    assert r.spans["wild"] == (("t", 4, 7), ("t", 15, 18))
    assert r.spans["range"] == (("n", 0, 1), ("t", 4, 7), ("t", 15, 18))
    assert r.spans["trange"] == (("tit[1]", 0, 6),)
    assert r.spans["bool"] == (("t", 8, 13), ("t", 19, 24))  # the failed AND adds nothing
    assert p.percolate(doc).spans == {}


@pytest.mark.parametrize("options", EVERY_PATH)
def test_failing_query_is_reported_and_never_fails_the_batch(
    options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    p = Percolator(PercolatorConfig(**options))
    base = NoFiltering()
    for qs in (p, base):
        qs.register("ok", "apple")
        qs.register("bad", '"apple pie tart"~2')
        qs.register("ok2", "apple AND n:[1 TO 3]")
    bad_node = p.get("bad").node  # type: ignore[union-attr]
    real = verify_mod._evaluate

    def flaky(node: Any, view: Any) -> bool:
        if node == bad_node:
            raise RuntimeError("internal failure")
        return real(node, view)

    # (a sloppy phrase of three terms: two-term ones are checked in bulk in vectorised batches)
    monkeypatch.setattr(verify_mod, "_evaluate", flaky)
    docs = [{"t": "apple pie tart", "n": 2}, {"t": "pie apple tart"}]
    for qs in (p, base):
        out = qs.percolate_batch(docs)
        assert [r.ids for r in out.results] == [["ok", "ok2"], ["ok"]]
        assert out.results[0].errors == {"bad": "RuntimeError: internal failure"}
        assert out.results[1].errors == {"bad": "RuntimeError: internal failure"}
        assert out.stats.errors == 2 and out.stats.matches == 3


@pytest.mark.parametrize("options", EVERY_PATH)
def test_batch_stats(options: dict[str, Any]) -> None:
    p = Percolator(PercolatorConfig(**options))
    p.register("proven", "apple OR pear")
    p.register("flat", "apple AND pear")
    p.register("general", '"apple pear"~3')
    p.register("always", "n:[1 TO 2]")
    out = p.percolate_batch([{"t": "apple pear", "n": 1}, {"t": "fig"}])
    assert [r.ids for r in out.results] == [["proven", "flat", "general", "always"], []]
    assert out.stats.documents == 2 and out.stats.matches == 4
    # proven by the presearcher (a term hit; both keys of a two-term AND): no candidates
    assert [r.candidates for r in out.results] == [2, 1]
    assert [r.verified for r in out.results] == [2, 1]
    assert out.stats.candidates == 3 and out.stats.verified == 3 and out.stats.seconds >= 0
    p.register("flat3", "apple AND pear AND NOT fig")
    out = p.percolate_batch([{"t": "apple pear", "n": 1}])
    assert out.results[0].candidates == 3 and out.results[0].verified == 2


def test_empty_index_and_empty_batch() -> None:
    p = Percolator()
    assert p.percolate({"t": "x"}).ids == []
    assert p.percolate_batch([]).stats.documents == 0
    p.register("q", "x")
    assert p.percolate_batch([]).results == []
    assert p.percolate_batch(iter([{"t": "x"}])).results[0].ids == ["q"]
    assert repr(p.percolate({"t": "x"})) == "DocumentMatches(ids=['q'], errors={})"


# --- incremental rebuild, snapshots, threads -----------------------------------------------


def test_delta_segment_then_merge() -> None:
    p = Percolator(PercolatorConfig(delta_limit=3))
    for i in range(10):
        p.register(i, f"w{i}")
    assert len(p.snapshot().segments) == 1
    p.register("new", "w1")
    p.delete(2)
    snap = p.snapshot()
    assert len(snap.segments) == 2 and snap.dead == {2}
    doc = {"t": "w1 w2 w3"}
    assert p.percolate(doc).ids == [1, 3, "new"]
    assert p.percolate_batch([doc] * 70).results[0].ids == [1, 3, "new"]
    p.register(1, "zzz")  # replace: the old version's slot is dead
    assert p.percolate(doc).ids == [3, "new"]
    for i in range(10, 15):  # more than the limit: one segment again
        p.register(i, f"w{i}")
    assert len(p.snapshot().segments) == 1 and not p.snapshot().dead
    assert p.percolate(doc).ids == [3, "new"]
    p.rebuild()
    assert p.percolate({"t": "zzz"}).ids == [1]


def test_readers_are_safe_while_registering() -> None:
    p = Percolator(PercolatorConfig(delta_limit=50))
    p.register("base", "apple")
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            for i in range(600):
                p.register(f"q{i}", f"apple AND w{i % 7}")
                if i % 5 == 0:
                    p.delete(f"q{i - 3}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    t = threading.Thread(target=writer)
    t.start()
    seen = 0
    while not stop.is_set():
        r = p.percolate({"t": "apple w3"})
        assert "base" in r.ids
        seen += 1
    t.join()
    assert not errors and seen > 0
    base = NoFiltering()
    for q in p.queries():
        base.register(q.id, q.query)
    doc = {"t": "apple w3"}
    assert p.percolate(doc).ids == base.percolate(doc).ids


# --- save / load ----------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    cfg = PercolatorConfig(query=QueryConfig(default_operator="AND", default_fields=("t",),
                                             analysis=AnalysisConfig.english()),
                           term_frequencies={"bank": 0.5}, scanner="aho", delta_limit=7)
    p = Percolator(cfg)
    p.register("a", "banks america", {"owner": "ann"})
    p.register(7, '"bank of america"~1 OR n:[1 TO 2]')
    path = tmp_path / "queries.jsonl"
    p.save(path)
    q = Percolator.load(path)
    assert q.config == cfg and q.config.term_frequencies == {"bank": 0.5}
    assert [(x.id, x.query, dict(x.metadata)) for x in q.queries()] == [
        ("a", "banks america", {"owner": "ann"}), (7, '"bank of america"~1 OR n:[1 TO 2]', {})]
    doc = {"t": "Bank of America", "n": 5}
    assert q.percolate(doc).ids == p.percolate(doc).ids == ["a", 7]
    assert NoFiltering.load(path).percolate(doc).ids == ["a", 7]


def test_load_rejects_other_files(tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"hello": 1}\n')
    with pytest.raises(CepError, match="not a saved percolator query set"):
        Percolator.load(other)
    other.write_bytes(b"\x80 not json\n")
    with pytest.raises(CepError, match="not a saved percolator query set"):
        Percolator.load(other)
    old = tmp_path / "old.jsonl"
    old.write_bytes(b'{"format": "cep-percolator-queries", "version": 99}\n')
    with pytest.raises(CepError, match=r"saved query set version 99 is not supported \(this "
                                       r"build reads version 1\); re-register the queries"):
        Percolator.load(old)


def test_save_needs_json_ids_and_metadata(tmp_path: Path) -> None:
    p = Percolator()
    p.register(("a", 1), "x")
    with pytest.raises(CepError, match=r"cannot save query id \('a', 1\): ids must be strings "
                                       "or integers to be written as JSON"):
        p.save(tmp_path / "a.jsonl")
    p = Percolator()
    p.register("q", "x", {"when": object()})
    with pytest.raises(CepError, match="cannot save query 'q': its metadata is not JSON"):
        p.save(tmp_path / "b.jsonl")


# --- a saved built index --------------------------------------------------------------------

INDEX_QUERIES = [
    "apple", "apple AND pie", "apple -pie", '"big apple"', '"big apple"~2', "appl*", "pi?e",
    "t:pear OR u:plum", "+apple +(pie OR tart) -crumble", "apple AND n:[1 TO 5]",
    'date:[2003-01-01 TO 2003-12-31] AND pie', "u:*", '"apple pie"~1 AND NOT tart',
]
INDEX_DOCS = [
    {"id": 1, "t": "The Big Apple pie", "n": 3, "date": "2003-04-05"},
    {"id": 2, "t": "apple tart", "u": "plum crumble", "n": 9},
    {"id": 3, "t": "pie apple big", "tags": ["pear", "apple pie"]},
    {"id": 4, "t": "applesauce and pipe", "u": "x"},
    {"id": 5, "t": "nothing here", "date": "2004-01-01"},
]


@pytest.mark.parametrize("options", EVERY_PATH)
def test_saved_index_gives_the_same_matches(tmp_path: Path, options: dict[str, Any]) -> None:
    """A saved index (with a delta segment and a deleted query at the time) loads without
    parsing or building, matches like the original and the baseline, and keeps registering."""
    p = Percolator(PercolatorConfig(delta_limit=4, term_frequencies={"apple": 0.3}, **options))
    base = NoFiltering()
    for i, q in enumerate(INDEX_QUERIES):
        for s in (p, base):
            s.register(f"q{i}", q, {"owner": "ann" if i % 2 else "bob", "n": i})
    p.snapshot()
    for s in (p, base):  # a delta segment and a dead slot at save time
        s.register("late", "crumble OR sauce*")
        s.delete("q1")
    assert len(p.snapshot().segments) == 2 and p.snapshot().dead
    path = tmp_path / "index.bin"
    p.save_index(path)
    q = Percolator.load_index(path)
    assert q.config == p.config and q.config.term_frequencies == {"apple": 0.3}
    assert not q._dirty and len(q.snapshot().segments) == 2  # nothing rebuilt
    assert [(x.id, x.query, dict(x.metadata)) for x in q.queries()] == [
        (x.id, x.query, dict(x.metadata)) for x in p.queries()]

    def answers(s: Any, **kw: Any) -> list[Any]:
        one = [s.percolate(d, highlight=True, **kw) for d in INDEX_DOCS]
        many = s.percolate_batch(INDEX_DOCS * 20, highlight=True, **kw).results[:5]
        return [(r.ids, r.spans, r.metadata) for r in one + many]

    assert answers(q) == answers(p) == answers(base)
    assert answers(q, metadata_filter={"owner": "ann"}) == answers(
        base, metadata_filter={"owner": "ann"})
    # it goes on registering, replacing and deleting like the original
    for s in (q, base):
        s.register("new", '"nothing here" OR tart')
        s.register("q0", "plum")
        s.delete("q2")
    assert answers(q) == answers(base)
    q.rebuild()
    assert answers(q) == answers(base)


def test_saved_index_loads_into_the_baseline(tmp_path: Path) -> None:
    p = Percolator()
    p.register("a", "apple", {"owner": "ann"})
    path = tmp_path / "index.bin"
    p.save_index(path)
    b = NoFiltering.load_index(path)
    assert b.percolate({"t": "apple"}).metadata == {"a": {"owner": "ann"}}


def test_saved_index_refuses_damaged_and_foreign_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = Percolator()
    p.register("a", "apple")
    path = tmp_path / "index.bin"
    p.save_index(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[:-10])
    with pytest.raises(CepError, match=r"cut.bin: the saved index is damaged or cut short \(its "
                                       r"checksum does not match\); write it again"):
        Percolator.load_index(cut)
    monkeypatch.setattr(saved_mod, "_FINGERPRINT", ["another build"])
    with pytest.raises(CepError, match=r"index.bin: this index was written by another version "
                                       r"of cep's percolator.*load the queries instead"):
        Percolator.load_index(path)


def test_saved_index_unreadable_by_these_libraries_is_refused_clearly(tmp_path: Path) -> None:
    """Same code, other libraries (a numpy or Python whose pickles differ): the checksum and the
    code fingerprint pass, the pickle does not load; the error says so and what to do."""

    import orjson

    p = Percolator()
    p.register("a", "apple")
    path = tmp_path / "index.bin"
    p.save_index(path)
    header = orjson.loads(path.read_bytes().split(b"\n", 1)[0])
    # a reference to a module of the percolator this process lacks
    payload = b"ccep.percolator.no_such_module_of_cep\nthing\n."
    header.update(bytes=len(payload))
    header["sha256"] = saved_mod._index_digest(header, payload)
    path.write_bytes(orjson.dumps(header) + b"\n" + payload)
    with pytest.raises(CepError, match=r"index.bin: the saved index cannot be read here "
                                       r"\(ModuleNotFoundError: .*no_such_module_of_cep.*\).*load the queries"):
        Percolator.load_index(path)


def test_saved_index_needs_picklable_ids_and_metadata(tmp_path: Path) -> None:
    p = Percolator()
    p.register("q", "x", {"lock": threading.Lock()})
    with pytest.raises(CepError, match="cannot save the index: a query id or metadata value "
                                       "cannot be written"):
        p.save_index(tmp_path / "index.bin")
    assert not (tmp_path / "index.bin").exists()
