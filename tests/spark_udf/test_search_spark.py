"""Search rules on Spark (the stateful stage on a stream, mapInArrow in a backfill, one index per worker) against the embedded engine."""

from __future__ import annotations

import json
import os
import pickle
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cep.engine import Engine
from cep.operator import OperatorOutput
from patterns.rules import load_rules
from spark_udf.search import _Live, file_stamp
from tests.spark_udf.conftest import write_events

REPO = Path(__file__).resolve().parents[2]
MEDIA = REPO / "rules" / "media.yaml"
HEADLINES = REPO / "rules" / "data" / "headlines_sample.jsonl"
SCHEMA = "id string, date string, title string"

def headlines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in HEADLINES.read_text().splitlines() if line.strip()]


def search_rules(path: Path = MEDIA) -> list[Any]:
    return [r for r in load_rules(path) if r.kind == "search"]


def spark_search_rows(rows: list[dict[str, Any]]) -> Counter:
    return Counter((r["rule"], r["id"], r["query_id"]) for r in rows if r["output"] == "match" and r["kind"] == "search")


def embedded_search_rows(rules: list[Any], events: list[dict[str, Any]]) -> Counter:
    eng = Engine(rules)
    out = eng.process(events)
    out.extend(eng.finish())
    return Counter((m["rule"], m["id"], str(m["query_id"])) for m in out.matches if "query_id" in m)


# ------------------------------------------------------------------ Spark


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_search_backfill_gives_the_embedded_engines_rows(spark: Any) -> None:
    from spark_udf.api import apply_rules

    rules = search_rules()
    result = apply_rules(spark.read.schema(SCHEMA).json(str(HEADLINES)), rules)
    rows = [r.asDict(recursive=True) for r in result.envelope.collect()]
    exp = embedded_search_rows(rules, headlines())
    assert spark_search_rows(rows) == exp and sum(exp.values()) > 150
    assert {r["output"] for r in rows} == {"match"}  # the sample is in time order: nothing late
    qantas = next(r for r in rows if r["query_id"] == "qantas")
    assert json.loads(qantas["metadata"]) == {"ticker": "QAN"}
    assert [(s["field"], s["start"] < s["end"]) for s in qantas["spans"]] == [("title", True)]
    assert qantas["date"] and qantas["title"] and qantas["kind"] == "search"
    assert result.counts()["matches"] == sum(exp.values())


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_search_backfill_reports_late_and_bad_times_as_the_embedded_engine_does(spark: Any, tmp_path: Path) -> None:
    from spark_udf.api import apply_rules

    events = headlines()[:300]
    events[50] = {**events[50], "date": "2003-02-01"}  # behind the watermark: late
    events[60] = {**events[60], "date": "not a date"}  # an error
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    rules = search_rules()
    rows = [r.asDict(recursive=True) for r in apply_rules(spark.read.schema(SCHEMA).json(str(path)), rules)
            .envelope.collect()]
    eng = Engine(rules)
    out = eng.process(events)
    assert spark_search_rows(rows) == embedded_search_rows(rules, events)
    for what, exp in (("late", out.late), ("error", out.errors)):
        got = Counter((r["rule"], json.loads(r["event"])["id"], r["reason"]) for r in rows if r["output"] == what)
        assert got == Counter((e["rule"], e["event"]["id"], e["reason"]) for e in exp) and len(exp) == 2


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_search_stream_gives_the_embedded_engines_rows(spark: Any, tmp_path: Path) -> None:
    from spark_udf.api import apply_rules

    events = headlines()
    for i in range(3):
        write_events(tmp_path / "in", i, events[i * 700:(i + 1) * 700])
    rules = search_rules()
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    query = apply_rules(frame, rules).write_stream(str(tmp_path / "out"), str(tmp_path / "ck"))
    query.awaitTermination()
    rows = [r.asDict(recursive=True) for r in spark.read.json(str(tmp_path / "out")).collect()]
    assert spark_search_rows(rows) == embedded_search_rows(rules, events)


MIXED_PATTERN = """
  - name: qantas_streak
    sql: |
      SELECT * FROM news MATCH_RECOGNIZE (ORDER BY date
        MEASURES FIRST(A.id) AS first_id, LAST(A.id) AS last_id, COUNT(A.*) AS n
        AFTER MATCH SKIP PAST LAST ROW PATTERN (A{2}) DEFINE A AS title LIKE '%qantas%')
"""


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_a_rule_file_of_patterns_analytics_and_search_runs_in_one_call(spark: Any, tmp_path: Path) -> None:
    from spark_udf.api import apply_rules

    text = MEDIA.read_text().replace("data/news_queries.jsonl", str(MEDIA.parent / "data" / "news_queries.jsonl"))
    (tmp_path / "mixed.yaml").write_text(text + MIXED_PATTERN)
    # the queries file stays in the repository, outside the rule file's folder: allowed explicitly
    rules = list(load_rules(tmp_path / "mixed.yaml", queries_roots=[MEDIA.parent / "data"]))
    assert sorted({r.kind for r in rules}) == ["analytics", "pattern", "search"]
    result = apply_rules(spark.read.schema(SCHEMA).json(str(HEADLINES)), rules)
    rows = [r.asDict(recursive=True) for r in result.envelope.collect()]
    eng = Engine(rules)
    out = eng.process(headlines())
    out.extend(eng.finish())

    def keyed(r: dict[str, Any]) -> tuple:
        if r["rule"] == "busy_news_days":
            return (r["rule"], r["headlines"], r["day"])
        return (r["rule"], r["first_id"], r["last_id"], r["n"])

    assert spark_search_rows(rows) == embedded_search_rows([r for r in rules if r.kind == "search"], headlines())
    got = Counter(keyed(r) for r in rows if r["output"] == "match" and r["kind"] != "search")
    exp = Counter(keyed(m) for m in out.matches if "query_id" not in m)
    assert got == exp
    assert {k[0] for k in exp} == {"busy_news_days", "qantas_streak"}
    assert result.kind("search").count() == sum(spark_search_rows(rows).values())


def _late_copy(event: dict[str, Any], n: int, date: str) -> dict[str, Any]:
    """A headline that every rule of the mixed file reads, dated behind the stream's watermark."""
    return {"id": f"late-{n}", "date": date, "title": f"qantas troops leave for iraq war {event['title']}"}


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
def test_a_mixed_stream_reads_its_input_once_and_judges_late_documents_as_the_embedded_engine(
        spark: Any, tmp_path: Path) -> None:
    from spark_udf.api import ProgressCounts, SparkRunConfig, apply_rules

    text = MEDIA.read_text().replace("data/news_queries.jsonl", str(MEDIA.parent / "data" / "news_queries.jsonl"))
    (tmp_path / "mixed.yaml").write_text(text + MIXED_PATTERN)
    # the queries file stays in the repository, outside the rule file's folder: allowed explicitly
    rules = list(load_rules(tmp_path / "mixed.yaml", queries_roots=[MEDIA.parent / "data"]))
    events = headlines()
    # three micro-batches in time order; the later two open with documents dated behind the
    # largest date of the earlier ones (2003-02-22, then 2003-02-25): late for every rule
    files = [events[:700], [_late_copy(events[5], 1, "2003-02-20")] + events[700:1400],
             [_late_copy(events[9], 2, "2003-02-21"), _late_copy(events[11], 3, "2003-02-24")] + events[1400:]]
    for i, rows in enumerate(files):
        write_events(tmp_path / "in", i, rows)
    frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    result = apply_rules(frame, rules, SparkRunConfig(buckets=4, search_buckets=4))
    query = result.write_stream(str(tmp_path / "out"), str(tmp_path / "ck"))
    query.awaitTermination()
    rows = [r.asDict(recursive=True) for r in spark.read.json(str(tmp_path / "out")).collect()]

    eng = Engine(rules)  # the same micro-batches, one batch each, not finished (a stream has no end)
    out = eng.process([])
    for f in files:
        out.extend(eng.process(f))
    searches = [r for r in rules if r.kind == "search"]
    assert spark_search_rows(rows) == Counter(
        (m["rule"], m["id"], str(m["query_id"])) for m in out.matches if "query_id" in m)

    def keyed(r: dict[str, Any]) -> tuple:
        if r["rule"] == "busy_news_days":
            return (r["rule"], r["headlines"], r["day"])
        return (r["rule"], r["first_id"], r["last_id"], r["n"])

    assert Counter(keyed(r) for r in rows if r["output"] == "match" and r["kind"] != "search") == Counter(
        keyed(m) for m in out.matches if "query_id" not in m)
    late = Counter((r["rule"], json.loads(r["event"])["id"], r["reason"]) for r in rows if r["output"] == "late")
    assert late == Counter((e["rule"], e["event"]["id"], e["reason"]) for e in out.late)
    assert {(rule, doc) for rule, doc, _ in late} == {
        (r.name, f"late-{n}") for r in rules for n in (1, 2, 3)}  # search rules judge lateness too
    assert not [r for r in rows if r["output"] == "error"] and not out.errors
    qantas = next(r for r in rows if r["output"] == "match" and r["rule"] == "company_mentions")
    assert [(sp["field"], sp["start"] < sp["end"]) for sp in qantas["spans"]] == [("title", True)]
    # one scan of the source: the progress counts each input row once
    counts = ProgressCounts([r.name for r in rules])
    counts.merge_recent(query)
    assert counts.totals["input_rows"] == sum(len(f) for f in files) == 2003
    assert counts.totals["late"] == len(out.late) and counts.totals["matches"] == len(out.matches)
    assert [len(p["sources"]) for p in query.recentProgress] == [1] * len(query.recentProgress)
    assert len(searches) == 2


@pytest.mark.spark
def test_on_a_stream_search_rules_share_the_one_event_time_column(spark: Any, tmp_path: Path) -> None:
    from patterns.errors import CepError
    from patterns.rules import parse_rules
    from spark_udf.api import SparkRunConfig, apply_rules

    wire = "rules:\n  - {name: wire, kind: search, from: news, time_field: %s, query: qantas}\n"
    rules = list(parse_rules(wire % "published")) + [r for r in parse_rules("rules:" + MIXED_PATTERN)]
    schema = SCHEMA + ", published string"
    live = spark.readStream.schema(schema).json(str(tmp_path))
    with pytest.raises(CepError, match=re.escape(
            "rules order by different event-time fields ('date': qantas_streak; 'published': wire); one Spark query "
            "has one watermark, shared on a stream by every pattern and analytics rule and every search rule with a "
            "time_field: run the rules of each time field as a separate query (one rule file each)")):
        apply_rules(live, rules)
    # a backfill runs search rules apart from the keyed stage: no shared watermark (no arrival passes: plan only)
    apply_rules(spark.createDataFrame([], schema), rules, SparkRunConfig(arrival_order=False))
    with pytest.raises(CepError, match=re.escape(
            "rule 'wire': column 'nope' (time_field) is not in the input; a stream's watermark is read from it; "
            "input columns: id, date, title")):
        apply_rules(spark.readStream.schema(SCHEMA).json(str(tmp_path)), parse_rules(wire % "nope"))


QUERIES_V1 = [{"id": "fire", "query": "fire*"}, {"id": "war", "query": "war"}]
QUERIES_V2 = [{"id": "iraq", "query": "iraq", "metadata": {"desk": "world"}}, {"id": "war", "query": "war OR wars"}]


def _write_queries(path: Path, queries: list[Any] | str, stamp: int) -> None:
    # renamed into place whole, as a deployment should: a worker never reads half a file
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(queries if isinstance(queries, str) else "".join(json.dumps(q) + "\n" for q in queries))
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, path)


def _watching_rule(folder: Path, timed: bool = False) -> Path:
    rules = folder / "watch.yaml"
    rules.write_text("""rules:
  - name: desk
    kind: search
    from: news
    default_fields: [title]
    queries:
      - {id: qantas, query: qantas}
    queries_file: queries.jsonl
""" + ("    time_field: date\n" if timed else ""))
    return rules


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")
@pytest.mark.parametrize("timed", [False, True], ids=["map_in_arrow", "stateful_stage"])
def test_a_running_stream_picks_up_a_changed_queries_file_between_micro_batches(
        spark: Any, tmp_path: Path, timed: bool) -> None:
    """Without an event time the rule runs in a mapInArrow; with one, in the stream's stateful stage."""
    from spark_udf.api import apply_rules

    queries = tmp_path / "queries.jsonl"
    _write_queries(queries, QUERIES_V1, 1_600_000_000)
    path = _watching_rule(tmp_path, timed)
    events = headlines()
    parts = [events[:600], events[600:1200], events[1200:1800]]
    write_events(tmp_path / "in", 0, parts[0])
    frame = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    query = apply_rules(frame, load_rules(path)).write_stream(
        str(tmp_path / "out"), str(tmp_path / "ck"), trigger="processing-time=0 seconds")
    try:
        query.processAllAvailable()
        version1 = load_rules(path)
        _write_queries(queries, QUERIES_V2, 1_600_000_100)
        version2 = load_rules(path)
        write_events(tmp_path / "in", 1, parts[1])
        query.processAllAvailable()
        _write_queries(queries, '{"id": "broken", "query": "(unclosed"}\n{"id": "iraq", "query": "iraq"}\n',
                       1_600_000_200)  # a query that does not load is left out, the others run
        version3 = [replace(r, spec=replace(r.spec, queries=tuple(q for q in r.spec.queries if q.id != "war")))
                    for r in version2]
        write_events(tmp_path / "in", 2, parts[2])
        query.processAllAvailable()
        stateful = bool(query.lastProgress["stateOperators"])
    finally:
        query.stop()
    assert stateful == timed
    rows = [r.asDict(recursive=True) for r in spark.read.json(str(tmp_path / "out")).collect()]
    exp = (embedded_search_rows(list(version1), parts[0]) + embedded_search_rows(list(version2), parts[1])
           + embedded_search_rows(list(version3), parts[2]))
    assert spark_search_rows(rows) == exp
    assert {q for _, _, q in exp} == {"qantas", "fire", "war", "iraq"}
    errors = [r for r in rows if r["output"] == "error"]
    assert errors and all(r["rule"] == "desk" and "changed; 1 problem: what does not load is left out, running 2 "
                          "queries" in r["reason"] for r in errors)
    assert all(r["source"] == str(queries.resolve()) for r in errors)


# ------------------------------------------------------------------ the worker side, without Spark


def test_a_worker_reloads_a_changed_queries_file_only_when_its_content_changed(tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    _write_queries(queries, QUERIES_V1, 1_600_000_000)
    (rule,) = load_rules(_watching_rule(tmp_path))
    live = _Live(rule.name, rule.spec, 0, file_stamp(str(queries)))
    first = live.op
    doc = [{"id": 1, "title": "qantas fire war iraq"}]
    out = OperatorOutput()
    live.refresh(out)
    assert live.op is first and not out.errors
    os.utime(queries, (1_600_000_050, 1_600_000_050))  # touched, same content: nothing rebuilt
    live.refresh(out)
    assert live.op is first
    _write_queries(queries, QUERIES_V2, 1_600_000_100)
    live.refresh(out)
    assert sorted(m["query_id"] for m in live.op.process(doc).matches) == ["iraq", "qantas", "war"]
    _write_queries(queries, '{"id": "qantas", "query": "x"}\n{"id": "fire", "query": "fire*"}\n', 1_600_000_200)
    live.refresh(out)
    live.refresh(out)
    (err,) = out.errors  # reported once per content
    assert err["reason"].startswith(f"queries file {queries.resolve()} changed; 1 problem: what does not load is "
                                    "left out, running 2 queries: ")
    assert "duplicate query id 'qantas' (first defined at the rule file)" in err["reason"]
    assert sorted(m["query_id"] for m in live.op.process(doc).matches) == ["fire", "qantas"]
    queries.unlink()
    live.refresh(out)
    live.refresh(out)
    assert [e["reason"] for e in out.errors[1:]] == [
        f"queries file {queries.resolve()} cannot be read (FileNotFoundError); running the rule file's 1 queries only"]
    assert [m["query_id"] for m in live.op.process(doc).matches] == ["qantas"]


def test_the_shipped_query_sets_rebuild_the_same_index() -> None:
    from spark_udf.search import pack_query_sets

    rules = search_rules()
    blob, digest = pack_query_sets(rules)
    assert pack_query_sets(search_rules())[1] == digest  # the same rules: the same cache entry
    sets = pickle.loads(blob)
    events = headlines()[:400]
    for r in rules:
        spec, lateness, unit, skew = sets[r.name]
        live = _Live(r.name, spec, lateness, None, unit, skew)
        got = Counter((m["rule"], m["id"], str(m["query_id"])) for m in live.op.process(events).matches)
        assert got == embedded_search_rows([r], events)


def _stage_core(rules: list[Any], streams: tuple[str, ...] = ()) -> Any:
    """The worker side of a stream's search groups, with the broadcast played by a plain object."""
    from types import SimpleNamespace

    from spark_udf.core import InputLayout
    from spark_udf.kinds import SearchKind
    from spark_udf.schema import Envelope
    from spark_udf.search import SearchCore, pack_query_sets

    types = {"id": "string", "date": "string", "title": "string", "stream": "string"}
    env = Envelope.build({r.name: ("search", SearchKind().output_fields(r, types)) for r in rules})
    blob, digest = pack_query_sets(rules)
    layout = InputLayout(streams)
    routes = {r.name: layout.route(r) for r in rules if layout.route(r) is not None}
    return SearchCore.build(rules, env, types, SimpleNamespace(value=blob), digest, None,
                            {r.name: None for r in rules}, routes)


def _frame_rows(frames: list[Any]) -> list[dict[str, Any]]:
    return [r for f in frames if f is not None for r in f.to_dict("records")]


def test_a_stream_group_judges_documents_against_the_query_watermark_with_one_index_per_worker() -> None:
    import numpy as np
    import pandas as pd

    from cep.events import parse_times
    from spark_udf.search import _WORKER_CACHE

    rules = search_rules()
    core = _stage_core(rules)
    events = headlines()
    batches = [events[:300], [_late_copy(events[1], 1, "2003-02-19")] + events[300:900],
               [_late_copy(events[2], 2, "2003-02-20")] + events[900:1200]]
    got, watermark = [], 0
    first = None
    for b in batches:  # M: the largest event time of every earlier micro-batch
        chunks = [pd.DataFrame(b[i:i + 250]) for i in range(0, len(b), 250)]  # a group's rows in several chunks
        got.append(core.stream_group(iter(chunks), watermark))
        lives = _WORKER_CACHE[core.content_hash]
        first = first or {n: live.op for n, live in lives.items()}
        assert {n: live.op for n, live in lives.items()} == first  # the index is built once, not per call
        ms, ok, _ = parse_times(np.array([e["date"] for e in b], dtype=object))
        watermark = max(watermark, int(ms[ok].max()))
    rows = _frame_rows(got)
    eng = Engine(rules)
    out = eng.process([])
    for b in batches:
        out.extend(eng.process(b))
    assert Counter((r["rule"], r["id"], r["query_id"]) for r in rows if r["output"] == "match") == Counter(
        (m["rule"], m["id"], str(m["query_id"])) for m in out.matches)
    late = Counter((r["rule"], json.loads(r["event"])["id"], r["reason"]) for r in rows if r["output"] == "late")
    assert late == Counter((e["rule"], e["event"]["id"], e["reason"]) for e in out.late) and len(late) == 4


ROUTED = """rules:
  - {name: news_only, kind: search, from: news, time_field: date, default_fields: [title], query: qantas}
  - {name: every_stream, kind: search, from: anything, default_fields: [title], query: qantas}
"""


def test_a_search_rule_whose_from_names_an_input_stream_reads_that_streams_rows_only(tmp_path: Path) -> None:
    import pandas as pd

    (tmp_path / "routed.yaml").write_text(ROUTED)
    rules = list(load_rules(tmp_path / "routed.yaml"))
    events = [{**e, "stream": "news" if i % 3 else "wire"} for i, e in enumerate(headlines())]
    core = _stage_core(rules, ("news", "wire"))
    rows = _frame_rows([core.stream_group(iter([pd.DataFrame(events)]), 0)])
    out = Engine(rules, streams=["news", "wire"]).process(events)
    got = Counter((r["rule"], r["id"]) for r in rows if r["output"] == "match")
    assert got == Counter((m["rule"], m["id"]) for m in out.matches)
    assert {rule for rule, _ in got} == {"news_only", "every_stream"}
    wire = {e["id"] for e in events if e["stream"] == "wire"}
    assert not {i for rule, i in got if rule == "news_only"} & wire
    assert {i for rule, i in got if rule == "every_stream"} & wire


def test_malformed_records_are_reported_and_the_other_rows_percolated() -> None:
    import pandas as pd

    from spark_udf.core import CORRUPT_COL, MALFORMED, SOURCE_COL

    rules = search_rules()
    core = _stage_core(rules)
    core.malformed = True  # as in a mapInArrow that no keyed stage relieves of the reader's corrupt records
    events = headlines()[:200]
    pdf = pd.DataFrame(events).assign(**{CORRUPT_COL: None, SOURCE_COL: "in.json"})
    pdf.loc[7, CORRUPT_COL] = '{"id": "abc-7", "date": '
    got = _frame_rows([core.stream_group(iter([pdf]), 0)])
    errors = [r for r in got if r["output"] == "error"]
    assert [(e["rule"], e["reason"], e["event"], e["source"]) for e in errors] == [
        (None, MALFORMED, '{"id": "abc-7", "date": ', "in.json")]
    clean = events[:7] + events[8:]
    assert Counter((r["rule"], r["id"], r["query_id"]) for r in got if r["output"] == "match") == \
        embedded_search_rows(rules, clean)
