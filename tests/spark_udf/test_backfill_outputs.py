"""Timed-out partial matches (``ONE ROW PER MATCH WITH TIMEOUT ROWS``) on Spark: ``output=timeout`` rows.

The orders example of ``rules/`` (an order placed and shipped within 2 days; the orders whose 2
days ran out are time-outs) through the Spark-free core under Spark's stateful-stage contract,
and through ``cep spark backfill`` with ``cep spark cat --output timeout``: the same rows as the
embedded engine's ``timeouts``. Also the backfill's summary of a mostly late (unsorted) input,
worded as ``cep run``'s.
"""

from __future__ import annotations

import json
import pickle
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from cep.cli import main as cep_main
from cep.cli import spark as spark_cli
from cep.engine import Engine
from patterns.rules import load_rules
from spark_udf.core import GroupCore
from tests.spark_udf.conftest import match_key
from tests.spark_udf.simulate import rows_of, run_stream

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")

REPO = Path(__file__).resolve().parents[2]
RULE_FILE = REPO / "rules" / "orders.yaml"
DATA = REPO / "rules" / "data" / "orders.jsonl"
TYPES = {"id": "string", "order_id": "string", "ts": "bigint", "type": "string", "customer": "string",
         "warehouse": "string", "amount": "double", "label": "string"}
COLUMNS = list(TYPES)


def orders() -> list[dict[str, Any]]:
    return [json.loads(x) for x in DATA.read_text().splitlines() if x.strip()]


def embedded() -> Any:
    engine = Engine(load_rules(RULE_FILE))
    out = engine.process(orders())
    out.extend(engine.finish())
    return out


def plain(row: dict[str, Any]) -> tuple:
    """A row without its engine-only ``_id``, order-free (NULL fields left out)."""
    return match_key({k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in row.items() if k != "_id"})


def own_rows(frame: pd.DataFrame, output: str, env_columns: dict[str, list]) -> Counter:
    out: Counter = Counter()
    for rec in rows_of(frame, output):
        row = {name: rec[e] for name, e, _ in env_columns[rec["rule"]] if e in rec}
        row["rule"] = rec["rule"]
        out[plain(row)] += 1
    return out


@pytest.mark.parametrize("per_batch,chunk,restart", [(631, 1000, False), (50, 7, True), (13, 3, False)])
def test_the_stream_core_writes_the_embedded_timeouts(per_batch: int, chunk: int, restart: bool) -> None:
    rules = list(load_rules(RULE_FILE))
    core, env = GroupCore.for_rules(rules, TYPES, 4)
    rows = orders()
    batches = [rows[i:i + per_batch] for i in range(0, len(rows), per_batch)]
    if restart:  # a fresh worker resumes from the saved state halfway
        half = len(batches) // 2
        first, state, timeouts, wm = run_stream(core, rules, batches[:half], COLUMNS, 4, chunk=chunk)
        fresh = pickle.loads(pickle.dumps(core))
        second, *_ = run_stream(fresh, rules, batches[half:], COLUMNS, 4, chunk=chunk, state=state,
                                timeouts=timeouts, watermark=wm)
        frame = pd.concat([first, second], ignore_index=True)
    else:
        frame, *_ = run_stream(core, rules, batches, COLUMNS, 4, chunk=chunk)
    exp = embedded()
    # a stream ends at its last watermark: the time-outs whose deadline it passed (here every one:
    # no order of the input's last 2 days is left unshipped)
    last = max(r["ts"] for r in rows)
    want = Counter(plain(r) for r in exp.timeouts if r["_deadline"] < last)
    columns = {r: env.columns_of(r) for r in env.rule_columns}
    got = own_rows(frame, "timeout", columns)
    assert got == want and sum(want.values()) == len(exp.timeouts) == 21
    assert all(r["_waiting_for"] == ["S"] for r in rows_of(frame, "timeout"))
    # complex events are unchanged by the timeout rows beside them
    matches = own_rows(frame, "match", columns)
    assert matches and set(matches) <= {plain(r) for r in exp.matches}


def test_timeout_columns_are_typed_like_the_event_time() -> None:
    rules = list(load_rules(RULE_FILE))
    _, env = GroupCore.for_rules(rules, TYPES, 4)
    cols = {name: typ for name, _, typ in env.columns_of("shipped_within_2_days")}
    assert (cols["_waiting_for"], cols["_deadline"]) == ("array<string>", "bigint")
    assert "_deadline" not in {name for name, _, _ in env.columns_of("not_shipped_within_2_days")}


@pytest.mark.spark
def test_backfill_timeout_rows_equal_cep_runs_timeouts(spark: Any, tmp_path: Path, capsys) -> None:
    assert cep_main(["run", str(RULE_FILE), "--input", str(DATA), "--output", str(tmp_path / "m.jsonl"),
                     "--timeouts", str(tmp_path / "t.jsonl"), "--quiet"]) == 0
    want = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(want) == 21
    assert spark_cli.main(["backfill", str(RULE_FILE), "--input", str(DATA), "--output", str(tmp_path / "bf"),
                           "--shuffle-partitions", "2", "--buckets", "4"]) == 0
    err = capsys.readouterr().err
    assert "306 complex events, 0 late, 0 errors, 21 timed out" in err
    assert spark_cli.main(["cat", str(tmp_path / "bf"), "--output", "timeout"]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {(r["output"], r["rule"]) for r in got} == {("timeout", "shipped_within_2_days")}
    strip = ("output", "kind")
    assert Counter(plain({k: v for k, v in r.items() if k not in strip}) for r in got) == Counter(plain(r) for r in want)


class _Counted:
    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def count(self) -> int:
        self.calls += 1
        return self.n


def test_the_backfill_late_share_counts_the_input_only_when_events_were_late() -> None:
    frames = {"": _Counted(1000)}
    assert spark_cli._late_share({"late_0": 0, "late_1": 0}, ["a", "b"], frames) is None
    assert frames[""].calls == 0  # no late event: no extra scan
    assert spark_cli._late_share({"late_0": 50, "late_1": 0}, ["a", "b"], frames) is None  # 5%: no warning
    warning = spark_cli._late_share({"late_0": 990, "late_1": 101}, ["a", "b"], frames)
    assert warning is not None and warning.startswith(
        "warning: rule 'a' found 990 of 1,000 events (99.0%) late; rule 'b' found 101 of 1,000 events (10.1%) late: "
        "is the input sorted by event time?")


@pytest.mark.spark
def test_a_backfill_of_an_input_sorted_by_symbol_says_most_events_were_late(spark: Any, tmp_path: Path, capsys) -> None:
    bars = [json.loads(x) for x in (REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl").read_text().splitlines()]
    by_symbol = tmp_path / "bars.jsonl"
    by_symbol.write_text("".join(json.dumps(r) + "\n" for r in sorted(bars, key=lambda r: (r["symbol"], r["date"]))))
    assert spark_cli.main(["backfill", str(REPO / "rules" / "trading.yaml"), "--input", str(by_symbol), "--output",
                           str(tmp_path / "bf"), "--shuffle-partitions", "2", "--buckets", "2", "--quiet"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"warning: rule 'v_shape' found ([\d,]+) of ([\d,]+) events", err)
    assert m, err
    assert int(m.group(2).replace(",", "")) == len(bars) and int(m.group(1).replace(",", "")) > len(bars) // 2
    assert "Sort it by the rules' ORDER BY field, or give the rule a 'lateness:'" in err


@pytest.mark.parametrize("time_type,unit,ts,deadline", [
    ("bigint", "s", [100, 101], 160.0),  # epoch seconds: the deadline may end on a fraction, so double
    ("double", "ms", [100_000.0, 101_000.0], 160_000.0),
    ("string", "ms", ["2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"], "2026-01-01T00:01:00.000Z"),
    ("timestamp", "ms", [pd.Timestamp("2026-01-01 00:00:00", tz="UTC"), pd.Timestamp("2026-01-01 00:00:01", tz="UTC")],
     pd.Timestamp("2026-01-01 00:01:00", tz="UTC")),
])
def test_a_timeout_rows_deadline_is_written_like_the_event_time(time_type, unit, ts, deadline) -> None:
    from patterns.rules import parse_rules

    rules = list(parse_rules(f"""rules:
  - name: w
    time_unit: {unit}
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0 ONE ROW PER MATCH WITH TIMEOUT ROWS
        PATTERN (A B) WITHIN INTERVAL '1' MINUTE DEFINE A AS A.x = 1, B AS B.x = 2)
"""))
    types = {"k": "string", "ts": time_type, "x": "bigint"}
    core, env = GroupCore.for_rules(rules, types, 1)
    cols = {name: (e, typ) for name, e, typ in env.columns_of("w")}
    assert cols["_deadline"][1] == {"bigint": "double"}.get(time_type, time_type)
    # one key whose A never sees its B; a later key's event (not a B) moves the watermark past the deadline
    later = {"bigint": 1000, "double": 1_000_000.0, "string": "2026-01-01T01:00:00Z",
             "timestamp": pd.Timestamp("2026-01-01 01:00:00", tz="UTC")}[time_type]
    rows = [{"k": "a", "ts": ts[0], "x": 1}, {"k": "b", "ts": ts[1], "x": 0}, {"k": "b", "ts": later, "x": 0}]
    frame = core.static_group(("w", 0), pd.DataFrame(rows, columns=list(types)))
    out = rows_of(frame, "timeout")
    assert len(out) == 1 and out[0][cols["_deadline"][0]] == deadline and list(out[0]["_waiting_for"]) == ["B"]
    assert not rows_of(frame, "error")


def test_a_waiting_for_that_is_not_a_list_is_a_row_problem_not_a_failed_batch() -> None:
    from spark_udf.core import _converter

    assert _converter("array<string>")(("B", "C")) == ["B", "C"]
    with pytest.raises(TypeError, match="expected a list of names"):
        _converter("array<string>")("B")


def test_a_failure_reading_the_first_rows_is_one_line_and_exit_3(monkeypatch, capsys) -> None:
    # the unit check's small job runs before the backfill job: its failure is one line too, not a traceback
    import argparse

    import spark_udf.api

    def fails(source, rules):
        raise RuntimeError("Python worker exited unexpectedly (crashed)")

    monkeypatch.setattr(spark_cli, "_read", lambda spark, args, streaming, path=None: (object(), None))
    monkeypatch.setattr(spark_udf.api, "apply_rules", lambda source, rules, cfg: object())
    monkeypatch.setattr(spark_udf.api, "time_unit_warnings", fails)
    args = argparse.Namespace(format="json", buckets=4, search_buckets=8, verbose=False, mode="error",
                              output="out", output_format="json")
    code, summary = spark_cli._job("backfill", args, None, list(load_rules(RULE_FILE)), [(None, str(DATA))], None,
                                   spark_cli._Clock())
    err = capsys.readouterr().err
    assert (code, summary) == (3, None)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cep spark backfill: reading the first rows failed")
    assert "Python worker exited unexpectedly" in lines[0] and "Traceback" not in err


@pytest.mark.spark
@pytest.mark.parametrize("fmt,writers", [("json", None), ("json", 1), ("parquet", None)])
def test_a_partitioned_write_gives_a_sorted_writes_rows_and_leaves_the_session_as_it_was(
        spark: Any, tmp_path: Path, monkeypatch: Any, fmt: str, writers: int | None) -> None:
    """Row formats are written as the rows come (open files per output folder, ``writers`` 1: Spark
    sorts what does not fit), Parquet after Spark's sort; either way the rows of Spark's own
    sorted write, and the user's settings as they were."""
    from pyspark.sql import DataFrameWriter

    from spark_udf import api

    if writers is not None:
        monkeypatch.setattr(api, "ROW_FORMAT_WRITERS", writers)
    seen: list[tuple[Any, Any]] = []
    save = DataFrameWriter.save

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((spark.conf.get("spark.sql.maxConcurrentOutputFileWriters", None),
                     spark.conf.get("spark.sql.optimizer.plannedWrite.enabled", None)))
        return save(self, *args, **kwargs)

    monkeypatch.setattr(DataFrameWriter, "save", spy)
    schema = ", ".join(f"{c} {t}" for c, t in TYPES.items())
    frame = spark.read.schema(schema).json(str(DATA))
    result = api.apply_rules(frame, load_rules(RULE_FILE))
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", "3")  # the user's own setting
    try:
        result.write(str(tmp_path / "ours"), fmt)
        assert spark.conf.get("spark.sql.maxConcurrentOutputFileWriters") == "3"
    finally:
        spark.conf.unset("spark.sql.maxConcurrentOutputFileWriters")
    assert spark.conf.get("spark.sql.optimizer.plannedWrite.enabled", None) in (None, "true")
    row_format = fmt != "parquet"
    assert seen == [(str(writers or api.ROW_FORMAT_WRITERS), "false") if row_format else ("3", None)]
    result.envelope.write.format(fmt).partitionBy("output", "rule").save(str(tmp_path / "sorted"))

    def rows(name: str) -> Counter:
        got = spark.read.format(fmt).load(str(tmp_path / name)).collect()
        return Counter(json.dumps({k: v for k, v in r.asDict(recursive=True).items() if v is not None}, sort_keys=True,
                                  default=str) for r in got)

    ours = rows("ours")
    assert sum(ours.values()) == result.envelope.count() > 300
    assert {json.loads(r)["output"] for r in ours} == {"match", "timeout"}
    assert ours == rows("sorted")
