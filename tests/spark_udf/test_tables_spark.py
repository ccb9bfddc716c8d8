"""Temporal joins on Spark give the embedded engine's rows: a stream fed by a changelog input (late
changes, deletes, LEFT and inner joins, a partition by a joined column, joined search rules), restarted from its
checkpoint in the middle; a backfill of the bundled S&P 500 sector rules; the state reader."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from cep.engine import Engine
from patterns.rules import load_rules, parse_rules
from spark_udf.api import SparkRunConfig, apply_rules
from tests.spark_udf.conftest import sink_rows, write_events
from tests.spark_udf.tables_workload import (
    CHANGES,
    PAYMENTS,
    RULES,
    SEARCH_RULES,
    embedded,
    engine_outputs,
    own_columns,
    search_metadata,
    spark_outputs,
    workload,
)

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tables"

def _stream(spark: Any, tmp: Path, rules: Any):
    pays = spark.readStream.schema(PAYMENTS).option("maxFilesPerTrigger", 1).json(str(tmp / "payments"))
    changes = spark.readStream.schema(CHANGES).option("maxFilesPerTrigger", 1).json(str(tmp / "changes"))
    result = apply_rules({"payments": pays, "account_changes": changes}, rules, SparkRunConfig(buckets=2))
    q = result.write_stream(str(tmp / "out"), str(tmp / "ck"))
    q.awaitTermination()


def test_joined_stream_restarted_from_its_checkpoint_gives_the_embedded_rows(spark: Any, tmp_path: Path,
                                                                             capsys: Any) -> None:
    rules = parse_rules(SEARCH_RULES)  # the pattern and analytics rules and two joined search rules
    batches = workload(7, 3)  # 4 micro-batches: 2, then a restart, then 2
    for i, (changes, pays) in enumerate(batches[:2]):
        write_events(tmp_path / "changes", i, changes)
        write_events(tmp_path / "payments", i, pays)
    _stream(spark, tmp_path, rules)
    for i, (changes, pays) in enumerate(batches[2:], 2):  # more input, then the same query restarted
        write_events(tmp_path / "changes", i, changes)
        write_events(tmp_path / "payments", i, pays)
    _stream(spark, tmp_path, rules)
    got = spark_outputs([search_metadata(r) for r in sink_rows(spark, tmp_path / "out")])
    engine = embedded(rules, batches)
    engine.matches = [search_metadata(m) for m in engine.matches]
    want = engine_outputs(engine)
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert got[2] == want[2]
    # the workload reaches what it is about: every rule matched, late changes and deletes, LEFT errors
    by_rule = Counter(dict(m)["rule"] for m in got[0].elements())
    assert set(by_rule) == {"gold_pair", "tier_run", "per_country", "gold_per_account", "gold_docs", "inner_docs"}
    assert sum(n for (rule, reason), n in got[1].items() if rule is None and "late change" in reason) == 2
    late = Counter()
    for (rule, _), n in got[1].items():
        late[rule] += n
    # one late payment a file: late for every rule but inner_docs, whose 30 ms lateness keeps one on time
    assert [late[r] for r in ("gold_pair", "tier_run", "per_country", "gold_per_account", "gold_docs")] == [2] * 5
    assert 1 <= late["inner_docs"] < 2
    assert any(c.get("__deleted") for ch, _ in batches for c in ch)  # deletes reached the table
    assert any("(LEFT JOIN)" in reason for (_, reason) in got[2])

    # the state reader still reads a joined rule's groups (operator and table replica)
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(SEARCH_RULES)
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "ck"), "--rules", str(rules_file),
                           "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    shown = {r["name"]: r for r in view["rules"]}
    assert any("table 'accounts': rows held in 2 groups" in n for n in shown["gold_pair"]["notes"])  # kept by key
    assert any("table 'accounts': rows held in 1 groups" in n for n in shown["tier_run"]["notes"])  # one group
    assert shown["gold_pair"]["keys"] and shown["per_country"]["keys"]  # the operators' own state is read too
    assert any("table 'accounts': rows held in 2 groups" in n for n in shown["gold_docs"]["notes"])  # kept by key


def test_backfill_of_the_sector_rules_gives_the_embedded_rows(spark: Any, tmp_path: Path, capsys: Any) -> None:
    """The bundled example files (a pattern partitioned by a joined column, an analytics rule grouped
    by one) as `cep spark backfill` against `cep run`'s engine: the same rows."""
    bars = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"
    for name in ("sectors.yaml", "sector_volume.yaml"):
        rules = load_rules(FIXTURES / name)
        eng = Engine(rules, streams=["bars"])
        out = eng.process([json.loads(x) for x in bars.read_text().splitlines()], stream="bars")
        out.extend(eng.finish())
        assert out.matches
        args = ["backfill", str(FIXTURES / name), "--input", f"bars={bars}", "--output", str(tmp_path / name),
                "--buckets", "4", "--shuffle-partitions", "2"]
        assert spark_cli.main(args) == 0, capsys.readouterr().err
        rows = sink_rows(spark, tmp_path / name)
        assert spark_outputs(rows) == engine_outputs(out)


def test_backfill_with_the_changelog_as_an_input_gives_the_engines_rows(spark: Any, tmp_path: Path,
                                                                       capsys: Any) -> None:
    """`cep spark backfill` with the changelog as a second named input: late changes and deletes
    applied in the changelog's order, late payments judged in theirs, everything released at the end."""
    batches = workload(5, 3)
    changes = [c for ch, _ in batches for c in ch]
    pays = [p for _, ps in batches for p in ps]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(c) + "\n" for c in changes))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pays))
    (tmp_path / "rules.yaml").write_text(SEARCH_RULES)
    eng = Engine(parse_rules(SEARCH_RULES), streams=["payments", "account_changes"])
    out = eng.process(changes, stream="account_changes")  # the order of the two inputs does not matter
    out.extend(eng.process(pays, stream="payments"))
    out.extend(eng.finish())
    out.matches = [search_metadata(m) for m in out.matches]
    args = ["backfill", str(tmp_path / "rules.yaml"), "--input", f"payments={tmp_path / 'p.jsonl'}",
            "--input", f"account_changes={tmp_path / 'c.jsonl'}", "--output", str(tmp_path / "out"),
            "--buckets", "2", "--shuffle-partitions", "2"]
    assert spark_cli.main(args) == 0, capsys.readouterr().err
    got = spark_outputs([search_metadata(r) for r in sink_rows(spark, tmp_path / "out")])
    assert got == engine_outputs(out)
    assert sum(n for (rule, reason), n in got[1].items() if rule is None and "late change" in reason) == 2
    assert {dict(m)["rule"] for m in got[0]} >= {"gold_docs", "inner_docs"}  # joined search rules on Spark too


def test_backfill_of_the_sp500_membership_rules_gives_the_rows_of_cep_run(spark: Any, tmp_path: Path,
                                                                          capsys: Any) -> None:
    """rules/sp500.yaml on its bundled data: a V-shape while in the index (kept by key: partitioned by
    the join's column) and a sector's down days (partitioned by the joined sector: one group), the
    membership changelog as the second input; `cep spark backfill` writes `cep run`'s 60 rows."""
    from cep.cli import main as cep_main

    data = REPO / "rules" / "data"
    inputs = ["--input", f"bars={data / 'sp500_daily_2017_members_sample.jsonl'}",
              "--input", f"sp500_changes={data / 'sp500_membership_sample.jsonl'}"]
    rules = str(REPO / "rules" / "sp500.yaml")
    assert cep_main(["run", rules, *inputs, "--output", str(tmp_path / "run.jsonl"), "--quiet"]) == 0
    want = Counter(own_columns(json.loads(x)) for x in (tmp_path / "run.jsonl").read_text().splitlines())
    args = ["backfill", rules, *inputs, "--output", str(tmp_path / "out"), "--buckets", "4", "--shuffle-partitions", "2"]
    assert spark_cli.main(args) == 0, capsys.readouterr().err
    rows = sink_rows(spark, tmp_path / "out")
    assert spark_outputs(rows)[0] == want
    assert sum(want.values()) == 60 and {dict(m)["rule"] for m in want} == {"v_shape_in_index", "sector_three_down_days"}
    assert not [r for r in rows if r["output"] != "match"]


def test_inputs_whose_names_differ_only_in_case_are_refused_where_spark_would_merge_them(spark: Any) -> None:
    from patterns.errors import CepError

    before = spark.conf.get("spark.sql.caseSensitive", "false")
    spark.conf.set("spark.sql.caseSensitive", "false")
    try:
        bars = spark.createDataFrame([(1, 2)], "symbol long, ts long")
        changes = spark.createDataFrame([(1, 2)], "Symbol long, ts long")
        with pytest.raises(CepError, match="column 'Symbol' of input stream 'changes' and column 'symbol' of 'bars' "
                                           "differ only in case"):
            apply_rules({"bars": bars, "changes": changes}, parse_rules(RULES))
    finally:
        spark.conf.set("spark.sql.caseSensitive", before)
