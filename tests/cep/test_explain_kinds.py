"""``cep explain`` for analytics and search rules: its verdicts equal the engine's output on the
example rules, and small hand-made cases show each verdict."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from cep import Engine
from cep.events import to_batch
from cep.explain.analytics import explain_analytics
from cep.explain.model import ExplainError
from cep.explain.search import explain_clauses, explain_search
from cep.percolator import Percolator
from cep.percolator.documents import _DocView
from cep.search_rules import SearchOperator
from patterns import load_rules
from patterns.rules import parse_rules

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "rules" / "data"
HOUR = 3_600_000


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def emitted(ex) -> list[dict]:
    return [v.data["row"] for v in ex.outcome if v.kind == "emitted"]


def rule(text: str):
    return parse_rules(text).rules[0]


# ------------------------------------------------------------------ analytics: the example rules
ANALYTICS = [("weblogs.yaml", "nasa_http_sample.jsonl"), ("ops.yaml", "nasa_http_sample.jsonl"),
             ("media.yaml", "headlines_sample.jsonl")]


def _cases():
    for rules_file, data in ANALYTICS:
        for r in load_rules(str(REPO / "rules" / rules_file)):
            if r.kind == "analytics":
                yield pytest.param(rules_file, data, r.name, id=f"{rules_file}:{r.name}")


@pytest.mark.parametrize("rules_file, data, name", list(_cases()))
def test_emitted_rows_are_the_engines(rules_file, data, name):
    """For several keys (seeded), the explanation's emitted rows are exactly the engine's rows
    for that key (keyless rules: every row, with a range so only a part is explained row by row)."""
    r = next(x for x in load_rules(str(REPO / "rules" / rules_file)) if x.name == name)
    events = read_jsonl(DATA / data)
    eng = Engine([r])
    want_all = [m for m in eng.process(events).matches + eng.finish().matches]
    batch = to_batch(events)
    keys = list(r.spec.keys)
    if keys:
        counts = Counter(tuple(m[k] for k in keys) for m in want_all)
        rng = random.Random(17)
        present = sorted({tuple(e.get(k) for k in keys) for e in events if all(e.get(k) is not None for k in keys)})
        picks = [k for k, _ in counts.most_common(2)] + rng.sample(present, 2)
        cases = [(dict(zip(keys, p)), None, None) for p in picks]
    else:
        t0 = min(e[r.spec.time_column] for e in events if isinstance(e[r.spec.time_column], int)) \
            if isinstance(events[0][r.spec.time_column], int) else None
        cases = [({}, t0 + HOUR // 2, t0 + HOUR // 2 + 60_000) if t0 is not None else ({}, None, None)]
    for key, lo, hi in cases:
        ex = explain_analytics(r, batch, key, lo, hi)
        want = [m for m in want_all if all(m[k] == key[k] for k in keys)]
        got = emitted(ex)
        if any(a.func == "APPROX_TOP_K" for a in r.spec.aggregates):
            # heavy-hitter counts depend on batching (docs/analytics.md): the rest is exact
            strip = {k for w in want for k, v in w.items() if isinstance(v, list)}
            got = [{k: v for k, v in g.items() if k not in strip} for g in got]
            want = [{k: v for k, v in w.items() if k not in strip} for w in want]
        assert got == want, (name, key)
        assert all(v.kind in ("window", "emitted", "late", "error", "info") for row in ex.rows for v in row.verdicts)


# ------------------------------------------------------------------ analytics: hand-made verdicts
def test_late_row_corrects_an_emitted_window():
    r = rule("""rules:
  - name: per_key
    kind: analytics
    lateness: 10 milliseconds
    sql: SELECT k, COUNT(*) AS n, window_start FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)
""")
    ev = [{"k": "a", "ts": 1}, {"k": "a", "ts": 12}, {"k": "a", "ts": 5}, {"k": "a", "ts": 25}, {"k": "a", "ts": 0}]
    ex = explain_analytics(r, ev, {"k": "a"}, None, None)
    late_ok = ex.rows[2]  # ts 5 after the clock reached 12: behind the window's end, within lateness
    win = next(v for v in late_ok.verdicts if v.kind == "window")
    assert win.data["fired"] is True and win.data["aggregates"] == {"COUNT(*)": 2}
    assert "corrected" in win.text
    assert [v.kind for v in ex.rows[4].verdicts] == ["late"]  # ts 0 once the watermark is 15
    rows = emitted(ex)
    assert {"k": "a", "n": 2, "window_start": 0, "rule": "per_key", "correction": True} in rows
    eng = Engine([r])
    assert rows == eng.process(ev).matches + eng.finish().matches
    correction = next(v for row in ex.rows for v in row.verdicts if v.kind == "emitted" and v.data["row"]["correction"])
    assert correction.data["after_row"] == 3  # the row at 25 moved the clock past 10 + lateness


def test_session_merge_is_told():
    r = rule("""rules:
  - name: visits
    kind: analytics
    lateness: 100 milliseconds
    sql: SELECT k, COUNT(*) AS n, window_start FROM t GROUP BY k, SESSION(ts, INTERVAL '10' MILLISECOND)
""")
    ev = [{"k": "a", "ts": 0}, {"k": "a", "ts": 18}, {"k": "a", "ts": 9}, {"k": "a", "ts": 500}]
    ex = explain_analytics(r, ev, {"k": "a"}, None, None)
    first = ex.rows[0].verdicts[0]
    assert "a new session" in first.text
    bridge = ex.rows[2].verdicts[0]
    assert "merged" in bridge.text
    assert (bridge.data["window_start"], bridge.data["window_end"]) == (0, 28)
    assert bridge.data["aggregates"] == {"COUNT(*)": 3}
    eng = Engine([r])
    assert emitted(ex) == eng.process(ev).matches + eng.finish().matches


def test_slide_rows_and_where_and_errors():
    r = rule("""rules:
  - name: burst
    kind: analytics
    sql: SELECT k, COUNT(*) AS n FROM t WHERE ok = 1 GROUP BY k, SLIDE(ts, INTERVAL '10' MILLISECOND) HAVING COUNT(*) >= 2
""")
    ev = [{"k": "a", "ts": 1, "ok": 1}, {"k": "b", "ts": 2, "ok": 1}, {"k": "a", "ts": 3, "ok": 0},
          {"k": "a", "ts": 5, "ok": 1}, {"k": "a", "ts": "soon", "ok": 1}, {"k": "a", "ts": 30, "ok": 1}]
    ex = explain_analytics(r, ev, {"k": "a"}, None, None)
    kinds = [[v.kind for v in row.verdicts] for row in ex.rows]
    assert kinds[1] == ["info"] and kinds[3] == ["error"]
    assert ex.rows[2].verdicts[0].data["aggregates"] == {"COUNT(*)": 2} and ex.rows[2].verdicts[0].ok
    assert ex.rows[4].verdicts[0].ok is False
    eng = Engine([r])
    want = [m for m in eng.process(ev).matches + eng.finish().matches if m["k"] == "a"]
    assert emitted(ex) == want


def test_time_range_and_unknown_key():
    r = rule("""rules:
  - name: per_key
    kind: analytics
    sql: SELECT k, COUNT(*) AS n FROM t GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)
""")
    ev = [{"k": "a", "ts": t} for t in range(0, 40, 3)]
    ex = explain_analytics(r, ev, {"k": "a"}, 10, 20)
    assert [row.ts for row in ex.rows] == [12, 15, 18]
    assert ex.notes and "3 of the key's 14 rows" in ex.notes[0]
    assert len(emitted(ex)) == 4
    with pytest.raises(ExplainError, match="rule 'per_key' is keyed by k; --key gave user: pass --key k=VALUE"):
        explain_analytics(r, ev, {"user": "a"}, None, None)
    with pytest.raises(ExplainError, match="rule 'per_key': no event of key k=zz in the input; it has 1 key, for example a"):
        explain_analytics(r, ev, {"k": "zz"}, None, None)


# ------------------------------------------------------------------ search: the example rules
def _search_rules():
    return [r for r in load_rules(str(REPO / "rules" / "media.yaml")) if r.kind == "search"]


@pytest.mark.parametrize("name", ["company_mentions", "desk_alerts"])
def test_query_verdicts_are_the_percolators(name):
    """For every document and query (the example rules; desk_alerts is news_queries.jsonl): the
    explained verdict is the percolator's answer (its batch path), and the clause tree agrees."""
    r = next(x for x in _search_rules() if x.name == name)
    docs = read_jsonl(DATA / "headlines_sample.jsonl")[:600]
    ids = [q.id for q in r.spec.queries]
    perc = Percolator(SearchOperator.from_rule(r).percolator.config)  # a fresh index, same settings
    for q in r.spec.queries:
        perc.register_parsed(q.id, q.query, q.node, q.metadata)
    truth = perc.percolate_batch(docs).results
    ex = explain_search(r, docs, {}, None, None, queries=[str(i) for i in ids])
    assert len(ex.rows) == len(docs)
    checked = 0
    for row, res in zip(ex.rows, truth):
        want = set(res.ids)
        verdicts = {v.data["query_id"]: v for v in row.verdicts if v.kind == "clause" and "query_matched" in v.data}
        assert set(verdicts) == set(ids)
        for qid, v in verdicts.items():
            assert v.ok == (qid in want), (row.event, qid)
            assert v.data["clauses_agree"], (row.event, qid)
            checked += 1
        picks = {v.data["query_id"]: v.ok for v in row.verdicts if v.kind == "presearcher"}
        assert all(picks[q] for q in want)  # no false negatives
    assert checked == len(docs) * len(ids)


def test_clause_tree_agrees_on_random_queries():
    """Seeded random queries over headline words: the clause tree's root equals the reference."""
    from cep.percolator.verify import _evaluate
    from patterns.lucene import compile_query

    docs = read_jsonl(DATA / "headlines_sample.jsonl")[:150]
    words = sorted({w for d in docs for w in d["title"].split()})
    rng = random.Random(5)
    ctx = Percolator()._ctx
    shapes = ['{a}', '"{a} {b}"', '"{a} {b}"~2', '{a} AND NOT {b}', '+{a} +({b} OR {c})', '{p}*', 'title:{a} OR {b}',
              '{a} OR ({b} AND -{c})', 'title:[{a} TO {b}]', 'date:[2003-02-01 TO 2003-02-19]', '{w}?*']
    for _ in range(300):
        a, b, c = rng.sample(words, 3)
        q = rng.choice(shapes).format(a=a, b=b, c=c, p=a[:3], w=a[:2])
        try:
            node = compile_query(q)
        except Exception:
            continue
        for d in rng.sample(docs, 10):
            view = _DocView(d, ctx)
            assert explain_clauses(node, view)[0].ok == _evaluate(node, view), (q, d)


# ------------------------------------------------------------------ search: hand-made verdicts
def _one(query: str, doc: dict, **kw):
    r = rule(f"""rules:
  - name: s
    kind: search
    from: news
    queries:
      - {{id: q, query: '{query}'}}
""")
    return explain_search(r, [doc], {}, None, None, **kw)


def test_must_not_clause_fails():
    ex = _one("bhp AND NOT steel", {"id": 1, "title": "bhp steel profits up"})
    vs = ex.rows[0].verdicts
    top = next(v for v in vs if "query_matched" in v.data)
    assert top.ok is False
    neg = next(v for v in vs if v.data.get("occur") == "must_not")
    assert neg.ok is True and "found steel" in neg.text
    assert not ex.matched


def test_phrase_not_adjacent():
    ex = _one('"air nz"', {"id": 1, "title": "air travel to nz"}, queries=["q"])
    vs = ex.rows[0].verdicts
    phrase = vs[-1]
    assert phrase.ok is False and "not adjacent" in phrase.text and "air at [0]" in phrase.text
    assert next(v for v in vs if v.kind == "presearcher").ok is False  # the exact phrase is the index key


def test_presearcher_non_candidate_and_named_query():
    doc = {"id": 1, "title": "rain floods the city"}
    assert _one("drought", doc).rows[0].verdicts == []  # neither matched nor picked: not explained
    vs = _one("drought", doc, queries=["q"]).rows[0].verdicts
    pre = vs[0]
    assert pre.kind == "presearcher" and pre.ok is False and "drought" in pre.text
    assert vs[1].ok is False and vs[-1].ok is False


def test_presearcher_always_and_proven():
    ex = _one("n:[1 TO 5]", {"id": 1, "n": 3})
    pre = ex.rows[0].verdicts[0]
    assert pre.ok is True
    ex = _one("rain OR snow", {"id": 1, "title": "rain again"})
    pre = ex.rows[0].verdicts[0]
    assert pre.data["how"] == "proven" and "rain" in pre.text
    assert ex.matched and ex.rows[0].verdicts[-1].kind == "match"


# ---------------------------------------------------------------- the command over the other kinds


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from cep.cli import main

    rc = main(["explain", *args, "--color", "never"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_search_headline_counts_the_query_matches(capsys):
    rc, out, _ = _cli(capsys, str(REPO / "rules/media.yaml"), "--input", str(REPO / "rules/data/headlines_sample.jsonl"),
                      "--rule", "company_mentions")
    assert rc == 0
    head = out.splitlines()[0]
    n = out.count("row emitted for query")
    assert n > 0 and head.endswith(f": {n:,} query matches"), head


def test_cli_analytics_headline_and_a_key_not_in_the_input(capsys):
    args = [str(REPO / "rules/weblogs.yaml"), "--input", str(REPO / "rules/data/nasa_http_sample.jsonl"),
            "--rule", "distinct_urls_per_host"]
    rc, out, _ = _cli(capsys, *args, "--key", "pppa006.compuserve.com")
    assert rc == 0 and out.splitlines()[0].endswith(": no row emitted")
    rc, out, err = _cli(capsys, *args, "--key", "nosuchhost")
    assert rc == 2 and out == ""
    assert "rule 'distinct_urls_per_host': no event of key host=nosuchhost in the input; it has 289 keys" in err


def test_cli_search_one_document_and_a_named_query_that_was_no_candidate(capsys):
    rc, out, _ = _cli(capsys, str(REPO / "rules/media.yaml"), "--input", str(REPO / "rules/data/headlines_sample.jsonl"),
                      "--rule", "company_mentions", "--key", "abc-3", "--query", "telstra")
    assert rc == 0
    assert out.splitlines()[0] == "rule company_mentions (search), key id=abc-3: 1 query match"
    assert "presearcher: not a candidate: none of the query's index terms (telstra) occurs in the document" in out
    assert "query 'telstra' did not match" in out and "row emitted for query 'air_nz'" in out
    rc, out, _ = _cli(capsys, str(REPO / "rules/media.yaml"), "--input", str(REPO / "rules/data/headlines_sample.jsonl"),
                      "--rule", "company_mentions", "--key", "abc-3")
    assert rc == 0 and "telstra" not in out


FIX = REPO / "tests/fixtures/explain"


def test_cli_analytics_a_numeric_key_given_as_text(capsys):
    # --key 404 is text; the status column holds numbers: the key is the input's 404
    rc, out, _ = _cli(capsys, str(FIX / "per_status.yaml"), "--input", str(REPO / "rules/data/nasa_http_sample.jsonl"),
                      "--key", "404")
    assert rc == 0
    assert out.splitlines()[0] == "rule per_status (analytics), key status=404: 3 rows emitted", out


def test_cli_analytics_a_late_row_of_another_input_on_the_same_line_is_not_the_keys(capsys):
    # line 3 of the second input (key b, ts 3) is late; line 3 of the first (key a) is not
    rc, out, _ = _cli(capsys, str(FIX / "two_inputs.yaml"), "--input", str(FIX / "two_inputs_a.jsonl"),
                      "--input", str(FIX / "two_inputs_b.jsonl"), "--key", "a", "--from", "100", "--to", "200")
    assert rc == 0
    assert "3 rows of the key: 3 processed, 0 late, 0 errors; 1 row emitted" in out, out
    rc, out, _ = _cli(capsys, str(FIX / "two_inputs.yaml"), "--input", str(FIX / "two_inputs_a.jsonl"),
                      "--input", str(FIX / "two_inputs_b.jsonl"), "--key", "b", "--from", "100", "--to", "200")
    assert "3 rows of the key: 2 processed, 1 late, 0 errors" in out, out


def test_cli_analytics_slide_window_on_the_row_where_kept(capsys):
    rc, out, _ = _cli(capsys, str(FIX / "slide_where.yaml"), "--input", str(FIX / "slide_where.jsonl"), "--key", "/x")
    assert rc == 0
    lines = out.splitlines()
    where = next(i for i, line in enumerate(lines) if "WHERE left the row out" in line)
    assert "SLIDE" not in lines[where]
    assert "status=404" in lines[where + 1] and "COUNT(*) = 2; HAVING holds" in lines[where + 1]


def test_cli_search_a_document_id_not_in_the_input(capsys):
    rc, out, err = _cli(capsys, str(REPO / "rules/media.yaml"), "--input", str(REPO / "rules/data/headlines_sample.jsonl"),
                        "--rule", "company_mentions", "--key", "nope")
    assert rc == 2 and out == ""
    assert "no event of key id=nope in the input" in err


def test_cli_a_rule_with_a_temporal_join_is_refused_not_explained_wrongly(tmp_path, capsys):
    (tmp_path / "rules.yaml").write_text("""\
tables:
  - {name: customers, from: customer_changes, primary_key: id, columns: [tier], time_field: updated_at}
rules:
  - name: gold
    sql: |
      SELECT * FROM payments AS p JOIN customers FOR SYSTEM_TIME AS OF p.ts AS c ON p.customer = c.id
      MATCH_RECOGNIZE (PARTITION BY customer ORDER BY ts MEASURES A.ts AS t PATTERN (A)
        DEFINE A AS c.tier = 'gold')
""")
    (tmp_path / "p.jsonl").write_text('{"customer": 7, "ts": 1}\n')
    (tmp_path / "c.jsonl").write_text('{"id": 7, "tier": "gold", "updated_at": 0}\n')
    rc, out, err = _cli(capsys, str(tmp_path / "rules.yaml"), "-i", f"payments={tmp_path / 'p.jsonl'}",
                        "-i", f"customer_changes={tmp_path / 'c.jsonl'}", "--key", "7")
    assert rc == 2 and out == ""
    assert "rule 'gold' joins table 'customers': explaining rules with a temporal join is not supported yet" in err
    # the explain function refuses it too, for a caller that does not go through the command
    from cep.explain.pattern import explain_pattern
    from patterns.rules import load_rules as load

    gold = load(str(tmp_path / "rules.yaml")).rules[0]
    with pytest.raises(ExplainError, match="rule 'gold' joins table 'customers': explaining rules with a temporal"):
        explain_pattern(gold, to_batch([{"customer": 7, "ts": 1}]), {"customer": 7}, None, None)
