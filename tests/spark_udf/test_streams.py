"""FROM routing on Spark: named input streams give the rows `cep run --input NAME=PATH` gives."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep import cli
from cep.cli import spark as spark_cli
from cep.cli.inputs import _merged_batches
from cep.engine import Engine
from patterns.errors import CepError
from patterns.rules import load_rules
from tests.spark_udf.conftest import sink_rows, write_events

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "rules" / "data"

# Two rules read every stream (FROM events names none of the inputs), the others one stream each;
# read unrouted, the clicks rules would see the searches too (status NULL breaks a run of clicks,
# searches add to the hourly counts) and the search rule would percolate clicks.
RULES = (REPO / "rules" / "sessions.yaml").read_text() + """
  - name: click_runs
    sql: |
      SELECT * FROM clicks MATCH_RECOGNIZE (
        PARTITION BY session ORDER BY ts
        MEASURES FIRST(A.url) AS first_url, LAST(A.ts) AS last_ts, COUNT(A.*) AS n
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A{3})
        DEFINE A AS A.status < 400)
  - name: clicks_per_hour
    kind: analytics
    sql: |
      SELECT COUNT(*) AS clicks, window_start AS hour FROM clicks GROUP BY TUMBLE(ts, INTERVAL '1' HOUR)
  - name: searched_for
    kind: search
    from: searches
    time_field: ts
    default_fields: [q, landing]
    fields: [session, ts, q]
    queries:
      - {id: google, query: 'google*'}
      - {id: tools, query: 'xdotool OR fpm OR logstash OR selenium OR css'}
      - {id: rage, query: '"rage face" OR rageface'}
"""
SCHEMA = "session string, ts long, q string, landing string, url string, status long"
EVERY_STREAM = ("search_then_click", "search_without_click")  # sessions.yaml's rules: FROM events


def _read(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _plain(row: dict[str, Any]) -> tuple:
    """A match as a hashable value: its non-NULL fields but the envelope's and search metadata."""
    skip = {"output", "kind", "metadata", "spans"}
    return tuple(sorted((k, v) for k, v in row.items() if v is not None and k not in skip
                        and not (k == "retract" and v is False)))


def _problems(rows: list[dict[str, Any]], what: str) -> Counter:
    out = Counter()
    for r in rows:
        if r.get("output", what) != what:
            continue
        ev = r["event"] if isinstance(r["event"], dict) else json.loads(r["event"])
        out[(r["rule"], ev.get("session"), ev.get("ts"))] += 1
    return out


@pytest.mark.spark
def test_a_backfill_of_named_inputs_gives_the_rows_of_cep_run(spark: Any, tmp_path: Path, capsys) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    searches, clicks = _read("searches"), _read("clicks")
    # out of order inside each input: late in that input's order (cep run merges inputs in event
    # time, each in its own order), and a click without a time: an error of every rule reading clicks
    searches.insert(30, {**searches[4], "session": "late-search"})
    clicks.insert(12, {**clicks[3], "session": "late-click"})
    clicks.insert(15, {"session": "no-time", "url": "/", "status": 200})
    s_path, c_path = _jsonl(tmp_path / "s" / "searches.jsonl", searches), _jsonl(tmp_path / "c" / "clicks.jsonl", clicks)
    named = ["--input", f"searches={s_path}", "--input", f"clicks={c_path}"]
    assert cli.main(["run", str(rules), *named, "--output", str(tmp_path / "run.jsonl"), "--late",
                     str(tmp_path / "late.jsonl"), "--errors", str(tmp_path / "errors.jsonl")]) == 0
    exp = {p: [json.loads(x) for x in (tmp_path / f"{p}.jsonl").read_text().splitlines()]
           for p in ("run", "late", "errors")}
    capsys.readouterr()
    assert spark_cli.main(["backfill", str(rules), *named, "--schema", SCHEMA, "--output", str(tmp_path / "bf"),
                           "--shuffle-partitions", "2", "--buckets", "4"]) == 0
    rows = sink_rows(spark, tmp_path / "bf")
    assert Counter(_plain(r) for r in rows if r["output"] == "match") == Counter(_plain(r) for r in exp["run"])
    assert {r["rule"] for r in exp["run"]} == {*EVERY_STREAM, "click_runs", "clicks_per_hour", "searched_for"}
    assert _problems(rows, "late") == _problems(exp["late"], "late")
    assert set(_problems(rows, "late")) == {
        *((r, "late-search", searches[4]["ts"]) for r in EVERY_STREAM), ("searched_for", "late-search", searches[4]["ts"]),
        *((r, "late-click", clicks[3]["ts"]) for r in EVERY_STREAM), ("click_runs", "late-click", clicks[3]["ts"]),
        ("clicks_per_hour", "late-click", clicks[3]["ts"])}
    errors = Counter((r["rule"], r["reason"]) for r in rows if r["output"] == "error")
    assert errors == Counter((r["rule"], r["reason"]) for r in exp["errors"])
    assert {rule for rule, _ in errors} == {*EVERY_STREAM, "click_runs", "clicks_per_hour"}
    # the search rule read the searches alone: every row names a search's query
    assert all(r["q"] for r in rows if r["output"] == "match" and r["rule"] == "searched_for")


@pytest.mark.spark
def test_a_stream_of_named_inputs_gives_the_embedded_engines_rows(spark: Any, tmp_path: Path, capsys) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    searches, clicks = _read("searches"), _read("clicks")
    cut = 1_432_000_000_000  # both inputs in two files: micro-batch 0 before it, 1 after
    first = min(searches[0]["ts"], clicks[0]["ts"])
    late = [{"session": "late-search", "ts": first + 1000, "q": "rage face", "landing": "/"}]
    files = {
        "searches": [[r for r in searches if r["ts"] < cut], late + [r for r in searches if r["ts"] >= cut]],
        "clicks": [[r for r in clicks if r["ts"] < cut],
                   [{"session": "late-click", "ts": first + 2000, "url": "/", "status": 200},
                    {"session": "no-time", "url": "/", "status": 200}] + [r for r in clicks if r["ts"] >= cut]],
    }
    paths = {name: [write_events(tmp_path / name, i, rows) for i, rows in enumerate(parts)]
             for name, parts in files.items()}
    assert spark_cli.main(["run", str(rules), "--input", f"searches={tmp_path / 'searches'}", "--input",
                           f"clicks={tmp_path / 'clicks'}", "--schema", SCHEMA, "--max-files-per-trigger", "1",
                           "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
                           "--shuffle-partitions", "2", "--buckets", "4", "--search-buckets", "4"]) == 0
    err = capsys.readouterr().err
    rows = sink_rows(spark, tmp_path / "out")

    # the embedded engine: each micro-batch's two files merged as `cep run` merges named inputs
    eng = Engine(load_rules(rules), streams=list(files))
    out = eng.process([])
    for i in range(2):
        for batch, _ in _merged_batches([(n, str(paths[n][i])) for n in files], "ts", None, 100_000):
            out.extend(eng.process(batch))
    assert Counter(_plain(r) for r in rows if r["output"] == "match") == Counter(_plain(m) for m in out.matches)
    assert {m["rule"] for m in out.matches} == {*EVERY_STREAM, "click_runs", "clicks_per_hour", "searched_for"}
    assert _problems(rows, "late") == _problems(out.late, "late")
    assert {(rule, s) for rule, s, _ in _problems(rows, "late")} == {
        *((r, "late-search") for r in EVERY_STREAM), ("searched_for", "late-search"),
        *((r, "late-click") for r in EVERY_STREAM), ("click_runs", "late-click"), ("clicks_per_hour", "late-click")}
    assert Counter((r["rule"], r["reason"]) for r in rows if r["output"] == "error") == Counter(
        (r["rule"], r["reason"]) for r in out.errors)
    m = re.search(r"(\d+) micro-batches, ([\d,]+) input rows", err)
    assert m and int(m.group(2).replace(",", "")) == sum(len(p) for parts in files.values() for p in parts)
    assert int(m.group(1)) == 3  # two micro-batches with data, then the one that moves the watermark


@pytest.mark.spark
def test_named_inputs_are_tagged_and_unioned_by_column_name(spark: Any, tmp_path: Path) -> None:
    from spark_udf.api import SparkRunConfig, apply_rules

    rules = load_rules_text(RULES)
    s = spark.createDataFrame([("a", 1, "rage face")], "session string, ts long, q string")
    c = spark.createDataFrame([("a", 2, "/x", 200)], "session string, ts long, url string, status long")
    result = apply_rules({"searches": s, "clicks": c}, rules, SparkRunConfig(buckets=1, arrival_order=False))
    got = {r["rule"]: r for r in result.envelope.collect() if r["output"] == "match"}
    assert sorted(got) == ["clicks_per_hour", "search_then_click", "searched_for"]
    assert got["clicks_per_hour"]["clicks"] == 1  # the clicks alone
    assert (got["search_then_click"]["query"], got["search_then_click"]["clicked"]) == ("rage face", "/x")
    assert result.envelope.columns[:1] == ["output"] and "stream" not in result.envelope.columns
    with pytest.raises(CepError, match=r"column 'ts' is bigint in input stream 'searches' but string in 'clicks'; "
                                        r"give it one type in every input"):
        apply_rules({"searches": s, "clicks": c.withColumn("ts", c.ts.cast("string"))}, rules)
    live = spark.readStream.schema("session string, ts long").json(str(tmp_path))
    with pytest.raises(CepError, match=r"input streams mix streaming \(searches\) and static \(clicks\) DataFrames"):
        apply_rules({"searches": live, "clicks": c}, rules)


def load_rules_text(text: str) -> list[Any]:
    from patterns.rules import parse_rules

    return list(parse_rules(text))


def test_an_input_name_given_twice_is_a_usage_error(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    assert spark_cli.main(["backfill", str(rules), "--input", "a=x.json", "--input", "a=y.json", "--output", "o"]) == 2
    assert "--input a=... is given 2 times; give each input its own name" in capsys.readouterr().err
    assert spark_cli.main(["backfill", str(rules), "--input", "x", "--output", "o", "--search-buckets", "0"]) == 2
    assert "--search-buckets must be at least 1, found 0" in capsys.readouterr().err
