"""MATCHES(col, ..., 'lucene query') in DEFINE: "this event matches search query Q" as a condition.

The reference is independent of the pattern engine's evaluation: the indexed percolator decides,
for every event, whether it matches the query; the same rule with the condition replaced by that
precomputed flag must give the same rows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cep.engine import Engine
from cep.percolator import Percolator, PercolatorConfig
from patterns.errors import RuleErrors
from patterns.lucene import QueryConfig
from patterns.rules import parse_rules

REPO = Path(__file__).resolve().parents[2]
HEADLINES = [json.loads(x) for x in (REPO / "rules" / "data" / "headlines_sample.jsonl").read_text().splitlines()]
QUERIES = [json.loads(x)["query"] for x in (REPO / "rules" / "data" / "news_queries.jsonl").read_text().splitlines()]

RULE = """
rules:
  - name: news_then_drop
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (
        PARTITION BY ticker ORDER BY ts
        MEASURES N.title AS title, N.ts AS news_at, D.ts AS drop_at, D.close AS close
        PATTERN (N X*? D) WITHIN INTERVAL '1' DAY
        DEFINE N AS {cond}, D AS D.close < 0.97 * N.close)
"""


def events(seed: int) -> list[dict]:
    """Headlines and prices of five tickers interleaved, an hour apart."""
    rnd = random.Random(seed)
    out = []
    price = {t: 100.0 for t in "ABCDE"}
    for i, h in enumerate(HEADLINES):
        t = rnd.choice("ABCDE")
        price[t] *= 1 + rnd.gauss(0, 0.02)
        out.append({"ticker": t, "ts": i * 3_600_000, "title": h["title"] if rnd.random() < 0.5 else None,
                    "close": round(price[t], 2)})
    return out


def flagged(evs: list[dict], query: str) -> list[dict]:
    p = Percolator(PercolatorConfig(query=QueryConfig(default_fields=("title",)), id_field=None))
    p.register("q", query)
    res = p.percolate_batch([{"title": e["title"]} if e["title"] is not None else {} for e in evs])
    return [{**e, "hit": int(bool(r.ids))} for e, r in zip(evs, res.results)]


@pytest.mark.parametrize("query", QUERIES)
def test_matches_equals_the_percolator_on_every_event(query):
    evs = events(hash(query) % 1000)
    sql_query = query.replace("'", "''")
    got = Engine(parse_rules(RULE.format(cond=f"MATCHES(N.title, '{sql_query}')"))).run([evs]).matches
    want = Engine(parse_rules(RULE.format(cond="N.hit = 1"))).run([flagged(evs, query)]).matches
    assert got == want
    # in chunks: the flags are per row, so batching changes nothing
    eng = Engine(parse_rules(RULE.format(cond=f"MATCHES(N.title, '{sql_query}')")))
    rows = []
    for i in range(0, len(evs), 77):
        rows += eng.process(evs[i : i + 77]).matches
    rows += eng.finish().matches
    assert sorted(map(repr, rows)) == sorted(map(repr, want))


def test_at_least_one_query_finds_news_followed_by_a_drop():
    total = 0
    for query in QUERIES:
        sql_query = query.replace("'", "''")
        total += len(Engine(parse_rules(RULE.format(cond=f"MATCHES(N.title, '{sql_query}')"))).run([events(1)]).matches)
    assert total > 0


def test_several_columns_and_field_queries():
    rules = parse_rules(RULE.format(cond="MATCHES(N.title, N.body, 'title:drought OR body:rain')"))
    evs = [
        {"ticker": "A", "ts": 0, "title": "farmers hit by drought", "body": "", "close": 10.0},
        {"ticker": "A", "ts": 1, "title": "", "body": "", "close": 9.0},
        {"ticker": "B", "ts": 2, "title": "nothing here", "body": "heavy rain expected", "close": 10.0},
        {"ticker": "B", "ts": 3, "title": "", "body": "", "close": 9.0},
        {"ticker": "C", "ts": 4, "title": "rain", "body": "drought", "close": 10.0},  # fields swapped
        {"ticker": "C", "ts": 5, "title": "", "body": "", "close": 9.0},
    ]
    rows = Engine(rules).run([evs]).matches
    assert sorted(r["ticker"] for r in rows) == ["A", "B"]


@pytest.mark.parametrize(
    "cond, message",
    [
        ("MATCHES(N.title, 'apple AND')", "MATCHES query:"),
        ("MATCHES(N.title, 42)", "MATCHES takes columns of the current row and then a Lucene query string"),
        ("MATCHES(N.title || 'x', 'apple')", "MATCHES takes columns of the current row"),
        ("MATCHES(N.title, 'apple') OR N.close > LAST(D.close)", "must be part of a condition on the current row only"),
        ("PREV(MATCHES(N.title, 'apple'))", "MATCHES(...) inside PREV(...) is not supported"),
    ],
)
def test_misused_matches_is_a_positioned_error(cond, message):
    with pytest.raises(RuleErrors) as e:
        parse_rules(RULE.format(cond=cond))
    assert message in str(e.value) and "^" in str(e.value)


def test_query_errors_point_into_the_string():
    with pytest.raises(RuleErrors) as e:
        parse_rules(RULE.format(cond="MATCHES(N.title, 'apple AND')"))
    (err,) = e.value.errors
    line = err.format().splitlines()
    # the caret sits under the end of the query text, inside the quotes
    caret_col = line[-1].index("^")
    assert line[-2][caret_col - 1 : caret_col + 1] in ("D'", "'", "D")


def test_matches_in_measures_is_an_error():
    sql = RULE.replace("MEASURES N.title AS title", "MEASURES MATCHES(N.title, 'x') AS m")
    with pytest.raises(RuleErrors, match="MATCHES\\(...\\) is a DEFINE condition"):
        parse_rules(sql.format(cond="N.close > 0"))
