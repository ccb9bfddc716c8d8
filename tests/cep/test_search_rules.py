"""Search rules: rule-file syntax and every error with its place, rows against the every-query baseline,
the engine with every kind, snapshots, reloads, durable row ids, and the CLI."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

import cep.percolator.verify as verify_mod
from cep.cli import main
from cep.durable import DurableConfig, run_durable
from cep.engine import Engine
from cep.operator import StateVersionError
from cep.percolator import NoFiltering, Percolator, PercolatorConfig
from cep.search_rules import SearchOperator
from patterns.analysis import ENGLISH_STOPWORDS
from patterns.errors import RuleErrors
from patterns.rules import load_rules, parse_rules
from patterns.search_rules import MAX_FILE_ERRORS

REPO = Path(__file__).resolve().parents[2]
HEADLINES = REPO / "rules" / "data" / "headlines_sample.jsonl"


def headlines(n: int | None = None) -> list[dict[str, Any]]:
    lines = HEADLINES.read_text().splitlines()
    return [json.loads(x) for x in lines[:n]]


def search_rule(body: str, name: str = "s") -> str:
    return f"rules:\n  - name: {name}\n    kind: search\n    from: news\n{body}"


def errors_of(text: str, file: str = "r.yaml") -> list:
    with pytest.raises(RuleErrors) as ei:
        parse_rules(text, file)
    return ei.value.errors


def the_error(text: str, message: str, file: str = "r.yaml") -> Any:
    errs = errors_of(text, file)
    hits = [e for e in errs if message in e.message]
    assert hits, [e.message for e in errs]
    return hits[0]


# ---------------------------------------------------------------- the rule's syntax


def test_every_option_is_read_into_the_spec(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text(
        '{"format": "cep-percolator-queries", "version": 1, "config": {}}\n'  # Percolator.save's header
        '{"id": 3, "query": "pear*", "metadata": {"owner": "ann"}}\n\n'
        '{"id": "f2", "query": "fig"}\n')
    rules = tmp_path / "r.yaml"
    rules.write_text(search_rule(
        "    time_field: ts\n    lateness: 2 seconds\n    id_field: doc\n    default_fields: title\n"
        "    default_operator: and\n    allow_leading_wildcard: true\n    auto_phrase: true\n    highlight: true\n"
        "    analysis: {lowercase: false, stopwords: english, stemmer: english_minimal}\n"
        "    fields: [doc, ts, title]\n"
        "    query: apple pie\n"
        "    queries:\n      - {id: k1, query: '*ix', metadata: {tags: [a, b]}}\n      - id: 7\n        query: |\n"
        "          kiwi\n"
        "    queries_file: q.jsonl\n"))
    (rule,) = load_rules(rules)
    spec = rule.spec
    assert (rule.kind, rule.stream, rule.lateness_ms) == ("search", "news", 2000)
    assert [(q.id, q.query, q.metadata) for q in spec.queries] == [
        ("s", "apple pie", {}), ("k1", "*ix", {"tags": ["a", "b"]}), (7, "kiwi", {}),
        (3, "pear*", {"owner": "ann"}), ("f2", "fig", {})]
    qc = spec.query_config
    assert (qc.default_operator, qc.default_fields, qc.allow_leading_wildcard, qc.auto_phrase) == (
        "AND", ("title",), True, True)
    a = qc.analysis
    assert (a.lowercase, a.stopwords, a.stemmer) == (False, ENGLISH_STOPWORDS, "english_minimal")
    assert (spec.id_field, spec.time_field, spec.time_column, spec.fields, spec.all_fields, spec.highlight) == (
        "doc", "ts", "ts", ("doc", "ts", "title"), False, True)


def test_defaults() -> None:
    (rule,) = parse_rules(search_rule("    query: apple\n"))
    spec = rule.spec
    assert (spec.id_field, spec.time_field, spec.fields, spec.highlight) == ("id", None, ("id",), False)
    assert spec.query_config.default_fields is None and spec.query_config.default_operator == "OR"
    assert [(q.id, q.query) for q in spec.queries] == [("s", "apple")]
    (rule,) = parse_rules(search_rule("    time_field: ts\n    id_field: null\n    fields: '*'\n    query: a\n"))
    assert (rule.spec.fields, rule.spec.all_fields, rule.spec.id_field) == ((), True, None)
    (rule,) = parse_rules(search_rule("    time_field: ts\n    query: a\n"))
    assert rule.spec.fields == ("id", "ts")


@pytest.mark.parametrize("body,line,column,message", [
    ("    default_operator: XOR\n    query: a\n", 5, 23, "rule 's': 'default_operator' must be OR or AND, found 'XOR'"),
    ("    highlight: yes please\n    query: a\n", 5, 16, "rule 's': 'highlight' must be true or false, found 'yes please'"),
    ("    auto_phrase: 1\n    query: a\n", 5, 18, "rule 's': 'auto_phrase' must be true or false, found 1"),
    ("    analysis: {stemmer: porter}\n    query: a\n", 5, 15,
     "rule 's': unknown stemmer 'porter'; known stemmers: english_minimal (or null)"),
    ("    analysis: {stopwords: 3}\n    query: a\n", 5, 15,
     "rule 's': analysis.stopwords must be 'english' or a list of words, found 3"),
    ("    analysis: {colour: red}\n    query: a\n", 5, 15,
     "rule 's': unknown analysis setting 'colour'; known settings: lowercase, stopwords, stemmer"),
    ("    analysis: {lowercase: maybe}\n    query: a\n", 5, 15,
     "rule 's': analysis.lowercase must be true or false, found 'maybe'"),
    ("    analysis: english\n    query: a\n", 5, 15,
     "rule 's': 'analysis' must be a mapping such as {stopwords: english, stemmer: english_minimal}, found 'english'"),
    ("    default_fields: []\n    query: a\n", 5, 21,
     "rule 's': 'default_fields' must be a field name or a list of field names, found []"),
    ("    default_fields: [title, title]\n    query: a\n", 5, 21, "rule 's': 'default_fields' lists 'title' twice"),
    ("    fields: [id, rule]\n    query: a\n", 5, 13,
     "rule 's': 'fields' names 'rule', a field every row of a search rule has (query_id, metadata, spans, rule, _id); "
     "leave it out"),
    ("    fields: 3\n    query: a\n", 5, 13,
     "rule 's': 'fields' must be a list of event field names, or '*' for every field, found 3"),
    ("    id_field: [a]\n    query: a\n", 5, 15, "rule 's': 'id_field' must be a field name (or null for none), found ['a']"),
    ("    time_field: 5\n    query: a\n", 5, 17, "rule 's': 'time_field' must be the name of the event-time field, found 5"),
    ("    lateness: 5 minutes\n    query: a\n", 5, 15,
     "rule 's': 'lateness' needs a 'time_field': without event time no document is late"),
    ("    sql: SELECT 1\n    query: a\n", 5, 5, "unknown key 'sql' for a search rule; known keys: name, kind, description, "
     "lateness, time_unit, max_future_skew, enabled, from, query, queries, queries_file, default_fields, default_operator, analysis, "
     "allow_leading_wildcard, auto_phrase, id_field, time_field, fields, highlight, join"),
    ("    query: [a, b]\n", 5, 12, "rule 's': 'query' must be one Lucene query (text); write several under 'queries'"),
    ("    query:\n", 5, 11, "rule 's': 'query' must be one Lucene query (text); write several under 'queries'"),
    ("    queries: a\n", 5, 14, "rule 's': 'queries' must be a list of {id, query, metadata}"),
    ("    queries: []\n", 5, 14, "rule 's': 'queries' is an empty list; add at least one {id, query}"),
    ("    queries:\n      - just text\n", 6, 9, "rule 's': each entry of 'queries' must be a mapping {id, query, metadata}"),
    ("    queries:\n      - {query: y}\n", 6, 9, "rule 's': a query needs an 'id' (a string or an integer), found None"),
    ("    queries:\n      - {id: true, query: y}\n", 6, 14,
     "rule 's': a query needs an 'id' (a string or an integer), found True"),
    ("    queries:\n      - {id: b}\n", 6, 9, "rule 's': query 'b' needs a 'query' (Lucene query text)"),
    ("    queries:\n      - {id: c, query: z, meta: 1}\n", 6, 27,
     "rule 's': unknown key 'meta' in a query; known keys: id, query, metadata"),
    ("    queries:\n      - {id: c, query: z, metadata: [1]}\n", 6, 37,
     "rule 's': query 'c': 'metadata' must be a mapping, found [1]"),
    ("    queries:\n      - {id: a, query: x}\n      - {id: a, query: y}\n", 7, 14,
     "rule 's': duplicate query id 'a' (first defined at r.yaml:6)"),
    ("    query: x\n    queries:\n      - {id: s, query: y}\n", 7, 14,
     "rule 's': duplicate query id 's' (first defined at r.yaml:5)"),
    ("    queries_file: 3\n", 5, 19, "rule 's': 'queries_file' must be a path, found 3"),
    ("    queries_file: nosuch.jsonl\n", 5, 19,
     "rule 's': queries file not found: nosuch.jsonl (a relative path starts at the rule file's folder)"),
    ("    description: no queries\n", 2, 5, "rule 's': a search rule needs queries: add 'query', 'queries' or 'queries_file'"),
])
def test_option_errors_point_at_their_value(body: str, line: int, column: int, message: str) -> None:
    err = the_error(search_rule(body), message)
    assert err.message == message
    assert (err.line, err.column) == (line, column), err.format()
    assert err.format().startswith(f"r.yaml:{line}:{column}: {message}\n")


def test_from_is_required_and_must_be_a_name() -> None:
    err = the_error("rules:\n  - name: t\n    kind: search\n    query: a\n", "needs 'from")
    assert err.message == "rule 't': a search rule needs 'from: <stream>', the input stream its documents come from"
    assert (err.line, err.column) == (2, 5)
    err = the_error("rules:\n  - name: t\n    kind: search\n    from: [x]\n    query: a\n", "'from'")
    assert err.message == "rule 't': 'from' must be the name of the input stream, found ['x']"
    assert (err.line, err.column) == (4, 11)


@pytest.mark.parametrize("body,line,column,message,caret", [
    # plain, quoted and block scalars: the caret goes under the query's own text
    ("    query: apple AND\n", 5, 21, "expected a term, phrase, range or '(' after 'AND', but the query ends here",
     "apple AND\n         ^"),
    ("    query: 'apple AND (pie'\n", 5, 23, "missing ')': this '(' is never closed", "apple AND (pie\n          ^"),
    ("    queries:\n      - {id: a, query: '\"unterminated'}\n", 6, 25,
     "unterminated phrase: this '\"' has no closing '\"'", '"unterminated\n^'),
    ("    queries:\n      - id: d\n        query: |\n          apple AND\n          (pie OR\n", 9, 18,
     "expected a term, phrase, range or '(' after 'OR', but the query ends here", "(pie OR\n       ^"),
    ("    query: NOT apple\n", 5, 12, "only excludes", None),
])
def test_query_syntax_errors_point_into_the_rule_file(body: str, line: int, column: int, message: str,
                                                      caret: str | None) -> None:
    err = the_error(search_rule(body), message)
    assert (err.line, err.column) == (line, column), err.format()
    if caret is not None:
        assert err.format() == f"r.yaml:{line}:{column}: {err.message}\n{caret}"


def test_queries_file_errors_point_into_the_queries_file(tmp_path: Path) -> None:
    lines = [
        '{"id": "ok", "query": "apple"}',
        '{"id": "bad", "query": "apple AND (pie", "metadata": {"a": 1}}',
        '{"id": "esc", "query": "caf\\u00e9 \\"x\\" AND"}',
        "not json",
        "[1, 2]",
        '{"query": "x"}',
        '{"id": "ok", "query": "dup"}',
        '{"id": "m", "query": "x", "metadata": 3}',
        '{"id": "k", "query": "x", "metdata": {}}',
        '{"id": 5, "query": 7}',
        '{"id": "s", "query": "\\ud83d\\ude00 \\u2028 x AND"}',
        '{"id": "t", "\\u0071uery": "(x"}',  # an escaped key: the query cannot be found in the raw line
    ]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    rules = tmp_path / "r.yaml"
    rules.write_text(search_rule("    queries_file: q.jsonl\n"))
    with pytest.raises(RuleErrors) as ei:
        load_rules(rules)
    q = str(tmp_path / "q.jsonl")
    # the words after "invalid JSON:" are orjson's own
    got = [(e.file, e.line, e.column, e.width, re.sub(r"^(invalid JSON:) .*", r"\1 ...", e.message))
           for e in ei.value.errors]
    end3 = lines[2].rindex('"') + 1
    assert got == [
        (q, 2, lines[1].index("(") + 1, 1, "missing ')': this '(' is never closed"),
        (q, 3, end3, 1, "expected a term, phrase, range or '(' after 'AND', but the query ends here"),
        (q, 4, 1, 1, "invalid JSON: ..."),
        (q, 5, 1, 1, 'expected a JSON object {"id", "query", "metadata"} per line, found list'),
        (q, 6, 1, 1, "a query needs an 'id' (a string or an integer), found None"),
        (q, 7, 1, 1, f"duplicate query id 'ok' (first defined at {q}:1)"),
        (q, 8, 1, 1, "query 'm': 'metadata' must be a JSON object, found int"),
        (q, 9, lines[8].index('"metdata"') + 1, 9, "unknown key 'metdata' in a query; known keys: id, query, metadata"),
        (q, 10, 1, 1, "query 5 needs a 'query' string"),
        (q, 11, lines[10].rindex('"') + 1, 1, "expected a term, phrase, range or '(' after 'AND', but the query ends here"),
        (q, 12, 1, 1, "query 't', column 1 of its text: missing ')': this '(' is never closed"),
    ]
    # the caret sits under the raw JSON line, at the offending character of the query
    assert ei.value.errors[0].format().endswith(lines[1] + "\n" + " " * lines[1].index("(") + "^")


def test_queries_file_problems_as_a_whole(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(search_rule("    queries_file: q.jsonl\n"))
    (tmp_path / "q.jsonl").write_text("\n\n")
    (err,) = errors_of(rules.read_text(), str(rules))
    assert err.message == f"rule 's': queries file {tmp_path / 'q.jsonl'} holds no queries"
    (tmp_path / "q.jsonl").write_bytes(b'{"id": "a", "query": "\xff"}\n')
    (err,) = errors_of(rules.read_text(), str(rules))
    assert err.message.startswith(f"rule 's': queries file {tmp_path / 'q.jsonl'} is not UTF-8 text: ")
    (tmp_path / "q.jsonl").unlink()
    (tmp_path / "q.jsonl").mkdir()
    (err,) = errors_of(rules.read_text(), str(rules))
    assert err.message == f"rule 's': queries file {tmp_path / 'q.jsonl'} is a directory, not a regular file"
    (tmp_path / "q.jsonl").rmdir()
    (tmp_path / "q.jsonl").write_text("x\n" * (MAX_FILE_ERRORS + 10))
    errs = errors_of(rules.read_text(), str(rules))
    assert len(errs) == MAX_FILE_ERRORS + 1
    assert errs[-1].message == f"more errors in {tmp_path / 'q.jsonl'} are not listed (the first {MAX_FILE_ERRORS} are)"


def test_every_error_of_a_file_is_collected() -> None:
    text = (search_rule("    default_operator: XOR\n    query: 'a AND'\n    queries:\n      - {id: b}\n")
            + "  - name: t\n    kind: search\n    from: news\n    queries_file: nosuch.jsonl\n")
    assert [e.line for e in errors_of(text)] == [5, 6, 8, 12]


def test_the_bundled_example_checks() -> None:
    rs = load_rules(REPO / "rules" / "media.yaml")
    assert [(r.name, r.kind) for r in rs] == [
        ("company_mentions", "search"), ("desk_alerts", "search"), ("busy_news_days", "analytics")]
    assert len(rs.rules[1].spec.queries) == 6  # rules/data/news_queries.jsonl, relative to the rule file


# ---------------------------------------------------------------- rows against the every-query baseline

WORDS = re.compile(r"[a-z]{3,}")


def random_queries(docs: list[dict[str, Any]], n: int, seed: int) -> list[str]:
    """Seeded queries built from the headlines' own words: terms, phrases, prefixes, wildcards,
    booleans, field scoping and date ranges."""
    rng = random.Random(seed)
    vocab = sorted({w for d in docs for w in WORDS.findall(d["title"])})
    titles = [d["title"].split() for d in docs]
    out = []
    for _ in range(n):
        w = rng.choice(vocab)
        kind = rng.randrange(9)
        if kind == 0:
            out.append(w)
        elif kind == 1:
            t = rng.choice([t for t in titles if len(t) > 2])
            i = rng.randrange(len(t) - 1)
            out.append(f'"{t[i]} {t[i + 1]}"' + rng.choice(["", "~1", "~3"]))
        elif kind == 2:
            out.append(w[: rng.randint(3, 4)] + "*")
        elif kind == 3:
            out.append(w[0] + "?" + w[2:] + rng.choice(["", "*"]))
        elif kind == 4:
            out.append(f"{w} AND {rng.choice(vocab)}")
        elif kind == 5:
            out.append(f"({w} OR {rng.choice(vocab)}) AND NOT {rng.choice(vocab)}")
        elif kind == 6:
            out.append(f"title:{w} OR title:{rng.choice(vocab)}*")
        elif kind == 7:
            d = rng.randint(19, 27)
            out.append(f"{w} OR date:[2003-02-{d} TO 2003-02-{d + 1}]")
        else:
            out.append(f"+{w} -({rng.choice(vocab)} OR {rng.choice(vocab)})")
    return out


def rows_of(op: SearchOperator, docs: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(0, len(docs), size):
        rows += op.process(docs[i:i + size]).matches
    return rows + op.finish().matches


@pytest.mark.parametrize("size", [1, 37, 500])  # one at a time, per document, vectorised batches
def test_rows_equal_running_every_query_on_every_document(size: int) -> None:
    docs = headlines()
    queries = random_queries(docs, 300, seed=size)
    lines = "".join(f"      - {{id: q{i}, query: {json.dumps(q)}, metadata: {{n: {i}}}}}\n"
                    for i, q in enumerate(queries))
    (rule,) = parse_rules(search_rule("    highlight: true\n    fields: [id, date]\n    queries:\n" + lines))
    got = rows_of(SearchOperator.from_rule(rule), docs, size)

    base = NoFiltering()
    for i, q in enumerate(queries):
        base.register(f"q{i}", q, {"n": i})
    want = []
    for d, res in zip(docs, base.percolate_batch(docs, highlight=True).results):
        assert not res.errors
        for qid in res.ids:
            want.append({"id": d["id"], "date": d["date"], "query_id": qid, "metadata": {"n": int(qid[1:])},
                         "spans": [list(s) for s in res.spans[qid]], "rule": "s"})
    assert got == want
    assert len(want) > 2000  # the comparison is not vacuous


def test_the_example_rules_equal_the_baseline() -> None:
    docs = headlines()
    rs = load_rules(REPO / "rules" / "media.yaml")
    eng = Engine(rs)
    out = eng.run([docs[i:i + 256] for i in range(0, len(docs), 256)])
    assert not out.errors and not out.late
    for rule in rs.rules[:2]:
        base = NoFiltering(PercolatorConfig(query=rule.spec.query_config))
        for q in rule.spec.queries:
            base.register(q.id, q.query, q.metadata)
        want = [(d["id"], qid) for d, r in zip(docs, base.percolate_batch(docs).results) for qid in r.ids]
        got = [(r["id"], r["query_id"]) for r in out.matches if r["rule"] == rule.name]
        assert got == want and got
    mentions = [r for r in out.matches if r["rule"] == "company_mentions"]
    assert {r["query_id"] for r in mentions if "qantas" in r["title"]} == {"qantas"}
    assert sum(r["query_id"] == "qantas" for r in mentions) == 15  # "qantas" and "qantass" (no apostrophes)
    assert eng.counts()["company_mentions"].matches == len(mentions)


def test_row_shape_fields_and_metadata() -> None:
    (rule,) = parse_rules(search_rule(
        "    fields: '*'\n    queries:\n      - {id: a, query: apple, metadata: {desk: food, tags: [x]}}\n"))
    op = SearchOperator.from_rule(rule)
    rows = op.process([{"id": 1, "title": "apple", "n": 2.5, "rule": "theirs", "query_id": 9}]).matches
    assert rows == [{"id": 1, "title": "apple", "n": 2.5, "query_id": "a", "metadata": {"desk": "food", "tags": ["x"]},
                     "rule": "s"}]
    rows[0]["metadata"]["desk"] = "changed"  # each row has its own copy
    assert op.process([{"id": 2, "title": "apple"}]).matches[0]["metadata"]["desk"] == "food"
    (rule,) = parse_rules(search_rule("    fields: [id, missing]\n    query: apple\n"))
    assert SearchOperator.from_rule(rule).process([{"title": "apple"}]).matches == [
        {"id": None, "missing": None, "query_id": "s", "metadata": {}, "rule": "s"}]


def test_id_and_stream_fields_are_not_searched_by_bare_terms() -> None:
    (rule,) = parse_rules(search_rule("    query: news\n"))
    eng = Engine([rule])
    assert eng.process([{"id": "news", "title": "weather"}], stream="news").matches == []
    got = eng.process([{"id": 1, "title": "news today"}], stream="news").matches
    assert [r["id"] for r in got] == [1]
    (rule,) = parse_rules(search_rule("    query: 'stream:news'\n"))
    assert len(Engine([rule]).process([{"id": 1, "title": "x"}], stream="news").matches) == 1  # named, it is searched


def test_percolator_exclude_fields_and_register_parsed() -> None:
    for cls in (Percolator, NoFiltering):
        p = cls(PercolatorConfig(exclude_fields=["src"]))
        assert p.config.exclude_fields == ("src",)
        p.register_parsed("q", "apple", p.compile("apple"), {"o": 1})
        p.register("r", "src:apple")
        assert p.percolate({"src": "apple", "t": "pear"}).ids == ["r"]
        assert p.percolate({"src": "x", "t": "Apple"}).ids == ["q"]
        assert p.get("q").metadata == {"o": 1}  # type: ignore[union-attr]


def test_event_time_bad_and_late_documents() -> None:
    (rule,) = parse_rules(search_rule("    time_field: ts\n    lateness: 10\n    query: apple\n"))
    op = SearchOperator.from_rule(rule)
    out = op.process([
        {"id": 1, "ts": 100, "t": "apple"},
        {"id": 2, "ts": "yesterday", "t": "apple"},
        {"id": 3, "t": "apple"},
        {"id": 4, "ts": 95, "t": "apple"},  # within the lateness: on time
        {"id": 5, "ts": 89, "t": "apple"},  # behind the watermark 90
        {"id": 6, "ts": 150, "t": "apple"},
    ])
    assert [r["id"] for r in out.matches] == [1, 4, 6]
    assert [(e["line"], e["reason"]) for e in out.errors] == [
        (2, "event-time field 'ts': 'yesterday' is neither epoch milliseconds nor an ISO-8601 time"),
        (3, "event-time field 'ts': missing (null)")]
    (late,) = out.late
    assert late["line"] == 5 and late["event"]["id"] == 5 and late["rule"] == "s"
    assert late["reason"].startswith("late: event time ") and "is 1 ms behind the watermark" in late["reason"]
    assert op.watermark == 140
    c = op.counts
    assert (c.read, c.processed, c.late, c.errors, c.buffered) == (6, 3, 1, 2, 0)
    assert (op.stats.documents, op.stats.matches) == (3, 3)


def test_a_failing_query_is_counted_and_reported_never_failing_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    (rule,) = parse_rules(search_rule(
        "    queries:\n      - {id: ok, query: apple}\n      - {id: bad, query: '\"apple pie\"~2'}\n"))
    op = SearchOperator.from_rule(rule)
    bad_node = op.percolator.get("bad").node  # type: ignore[union-attr]
    real = verify_mod._evaluate

    def flaky(node: Any, view: Any) -> bool:
        if node == bad_node:
            raise RuntimeError("internal failure")
        return real(node, view)

    monkeypatch.setattr(verify_mod, "_evaluate", flaky)
    eng = Engine([rule])
    eng.operators["s"] = op
    out = eng.process([{"id": 1, "t": "apple pie"}, {"id": 2, "t": "pie apple"}, {"id": 3, "t": "pear"}])
    assert [(r["id"], r["query_id"]) for r in out.matches] == [(1, "ok"), (2, "ok")]
    assert [(e["line"], e["query_id"], e["reason"]) for e in out.errors] == [
        (i, "bad", "query 'bad' could not be evaluated (RuntimeError: internal failure); counted as no match")
        for i in (1, 2)]
    assert out.errors[0]["event"] == {"id": 1, "t": "apple pie"}
    assert (op.stats.eval_errors, op.stats.query_errors) == (2, {"bad": 2})
    c = eng.counts()["s"]
    assert (c.read, c.processed, c.errors, c.eval_errors, c.matches) == (3, 3, 0, 2, 2)


# ---------------------------------------------------------------- the engine: kinds together, snapshots, reloads

MIXED = """
rules:
  - name: rising
    sql: |
      SELECT * FROM news MATCH_RECOGNIZE (ORDER BY ts MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1
        PATTERN (A B+) DEFINE B AS B.score > PREV(B.score))
  - name: per_window
    kind: analytics
    sql: |
      SELECT COUNT(*) AS n, window_start FROM news GROUP BY TUMBLE(ts, INTERVAL '10' SECOND) HAVING COUNT(*) > 3
  - name: mentions
    kind: search
    from: news
    time_field: ts
    default_fields: [title]
    highlight: true
    queries:
      - {id: q, query: 'qantas OR telstra'}
      - {id: s, query: 'strike*'}
"""


def mixed_events(n: int = 600, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    docs = headlines(n)
    return [{"id": d["id"], "ts": i * 1000, "title": d["title"], "score": rng.randint(0, 9)} for i, d in enumerate(docs)]


def run_engine(rules: Any, events: list[dict[str, Any]], size: int, stream: str | None = None) -> list[dict[str, Any]]:
    eng = Engine(rules)
    rows = []
    for i in range(0, len(events), size):
        rows += eng.process(events[i:i + size], stream).matches
    return rows + eng.finish().matches


def test_the_engine_runs_every_kind_in_one_pass() -> None:
    rs = parse_rules(MIXED)
    events = mixed_events()
    together = run_engine(rs, events, 97, "news")
    by_rule: dict[str, list] = {}
    for r in together:
        by_rule.setdefault(r["rule"], []).append(r)
    assert set(by_rule) == {"rising", "per_window", "mentions"}
    for rule in rs:  # each rule gives in company what it gives alone
        assert by_rule[rule.name] == run_engine([rule], events, 97, "news")
    # the search rule's rows arrive with their batch, not at the end
    eng = Engine(rs)
    first = eng.process(events[:200], "news").matches
    assert {r["rule"] for r in first} >= {"mentions"}


def test_snapshot_and_restore_mid_stream_change_nothing() -> None:
    rs = parse_rules(MIXED)
    events = mixed_events()
    want = run_engine(rs, events, 50)
    eng = Engine(rs)
    eng.set_row_ids(True)
    got = []
    for i in range(0, 300, 50):
        got += eng.process(events[i:i + 50]).matches
    blob = eng.snapshot()
    eng2 = Engine(parse_rules(MIXED))
    eng2.set_row_ids(True)
    eng2.restore(blob)
    op1, op2 = eng.operators["mentions"], eng2.operators["mentions"]
    assert (op1.counts, op1.stats, op1.max_ts, op1.seq) == (op2.counts, op2.stats, op2.max_ts, op2.seq)
    for i in range(300, len(events), 50):
        got += eng2.process(events[i:i + 50]).matches
    got += eng2.finish().matches
    assert [{k: v for k, v in r.items() if k != "_id"} for r in got] == want
    ids = [r["_id"] for r in got if r["rule"] == "mentions"]
    assert len(ids) == len(set(ids)) and ids[0].startswith("mentions:#")
    # ids continue the numbering of the first engine's events: the same as one uninterrupted engine
    eng3 = Engine(rs)
    eng3.set_row_ids(True)
    ref = [r["_id"] for i in range(0, len(events), 50) for r in eng3.process(events[i:i + 50]).matches
           if r["rule"] == "mentions"]
    assert ids == ref


def test_restore_refuses_another_kind_or_version() -> None:
    rs = parse_rules(MIXED)
    op = Engine(rs).operators["mentions"]
    pattern_blob = Engine(rs).operators["rising"].snapshot()
    for blob in (pattern_blob, b"\x09junk", b""):
        with pytest.raises(StateVersionError, match="rule 'mentions': not a search-rule snapshot of state version 1"):
            op.restore(blob)
    op.restore(op.snapshot())  # its own round-trips


def test_reload_keeps_an_unchanged_search_rule_and_resets_a_changed_one() -> None:
    rs = parse_rules(MIXED)
    eng = Engine(rs)
    eng.process(mixed_events(100))
    same = parse_rules(MIXED.replace("    highlight: true\n", "    highlight: true\n    description: same\n"))
    rep = eng.reload(same)
    assert rep.kept == ["rising", "per_window", "mentions"] and eng.counts()["mentions"].read == 100
    changed = parse_rules(MIXED.replace("'strike*'", "'strike* OR walkout'"))
    rep = eng.reload(changed)
    assert rep.changed == ["mentions"] and eng.counts()["mentions"].read == 0
    assert eng.operators["mentions"].percolator.get("s").query == "strike* OR walkout"  # type: ignore[union-attr]


# ---------------------------------------------------------------- durable runs


def test_durable_run_row_ids_are_deterministic_and_survive_a_restart(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(search_rule("    default_fields: [title]\n    queries_file: q.jsonl\n", name="news_desk"))
    (tmp_path / "q.jsonl").write_text((REPO / "rules" / "data" / "news_queries.jsonl").read_text())
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = HEADLINES.read_text().splitlines(keepends=True)

    def cfg(state: str, out: str, **kw: Any) -> DurableConfig:
        return DurableConfig(rules=str(rules), input=str(logs), state=str(tmp_path / state),
                             output=str(tmp_path / f"{out}.jsonl"), batch_lines=64, checkpoint_every=300,
                             quiet=True, **kw)

    (logs / "a.jsonl").write_text("".join(lines[:900]))
    assert run_durable(cfg("st", "out")) == 0
    first = (tmp_path / "out.jsonl").read_bytes()
    with open(tmp_path / "out.jsonl", "ab") as fh:  # what a killed run might have left after its checkpoint
        fh.write(b'{"half a row": ')
    (logs / "b.jsonl").write_text("".join(lines[900:]))
    assert run_durable(cfg("st", "out", finish=True)) == 0
    out = (tmp_path / "out.jsonl").read_bytes()
    assert out.startswith(first)
    assert run_durable(cfg("st2", "ref", finish=True)) == 0
    assert out == (tmp_path / "ref.jsonl").read_bytes()
    rows = [json.loads(x) for x in out.splitlines()]
    ids = [r["_id"] for r in rows]
    assert len(ids) == len(set(ids)) and len(rows) > 100
    line_of = {json.loads(x)["id"]: i for i, x in enumerate(lines, 1)}
    for r in rows:
        file, line = ("a.jsonl", line_of[r["id"]]) if line_of[r["id"]] <= 900 else ("b.jsonl", line_of[r["id"]] - 900)
        assert r["_id"] == f"news_desk:{file}:{line}:{r['query_id']}"


# ---------------------------------------------------------------- the CLI


def test_cep_check_lists_every_error_and_counts_them(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rules = tmp_path / "r.yaml"
    (tmp_path / "q.jsonl").write_text('{"id": 1, "query": "a AND"}\nnot json\n')
    rules.write_text(search_rule("    default_operator: XOR\n    query: '(a'\n    queries_file: q.jsonl\n"))
    assert main(["check", str(rules)]) == 2
    err = capsys.readouterr().err
    assert f"{rules}:5:23: rule 's': 'default_operator' must be OR or AND, found 'XOR'" in err
    assert f"{rules}:6:13: missing ')': this '(' is never closed" in err
    assert f"{tmp_path / 'q.jsonl'}:1:" in err and f"{tmp_path / 'q.jsonl'}:2:1: invalid JSON" in err
    assert err.rstrip().endswith(f"{rules}: 4 errors")
    assert main(["check", str(REPO / "rules" / "media.yaml")]) == 0
    assert "ok, 3 rules (company_mentions, desk_alerts, busy_news_days)" in capsys.readouterr().out


def test_cep_run_mixes_search_and_analytics_rules(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["run", str(REPO / "rules" / "media.yaml"), "--input", str(HEADLINES), "--output", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    kinds = {r["rule"] for r in rows}
    assert kinds == {"company_mentions", "desk_alerts", "busy_news_days"}
    first = next(r for r in rows if r["rule"] == "company_mentions")
    assert first == {"id": "abc-3", "date": "2003-02-19", "title": "air nz staff in aust strike for pay rise",
                     "query_id": "air_nz", "metadata": {"ticker": "AIR", "exchange": "NZX"},
                     "spans": [["title", 0, 6]], "rule": "company_mentions"}
    err = capsys.readouterr().err
    assert "cep run: 2,000 events" in err and "company_mentions: read 2,000, processed 2,000" in err


def test_cep_run_several_inputs_with_search_rules_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(search_rule("    query: apple OR other\n    fields: [id, stream]\n"))
    (tmp_path / "a.jsonl").write_text('{"id": 1, "t": "apple"}\n{"id": 2, "t": "pear"}\n')
    (tmp_path / "b.jsonl").write_text('{"id": 3, "t": "apple pie"}\n{"id": 4, "t": "plum"}\n')
    out = tmp_path / "out.jsonl"
    assert main(["run", str(rules), "--input", f"news={tmp_path / 'a.jsonl'}", "--input",
                 f"other={tmp_path / 'b.jsonl'}", "--output", str(out), "--quiet"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    # no rule has event time: the inputs are read one after the other; the rule reads the stream
    # its `from` names (news), and the stream tag is not searched by bare terms
    assert [(r["id"], r["stream"]) for r in rows] == [(1, "news")]
