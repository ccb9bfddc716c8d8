"""Temporal joins on Spark give the embedded engine's rows: a stream fed by a changelog input (late
changes, deletes, LEFT and inner joins, a partition by a joined column), restarted from its
checkpoint in the middle; a backfill of the bundled S&P 500 sector rules; the state reader."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from cep.engine import Engine
from patterns.rules import load_rules, parse_rules
from spark_udf.api import SparkRunConfig, apply_rules
from tests.spark_udf.conftest import event_of, sink_rows, write_events

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tables"

RULES = """
tables:
  - name: accounts
    from: account_changes
    primary_key: id
    columns: [tier, country]
    time_field: ts
rules:
  - name: gold_pair
    sql: |
      SELECT * FROM payments AS p LEFT JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a ON p.account = a.id
      MATCH_RECOGNIZE (
        PARTITION BY account ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(A.ts) AS t1, LAST(A.country) AS country
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A A) DEFINE A AS A.tier = 'gold')
  - name: tier_run
    sql: |
      SELECT * FROM payments AS p JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a ON p.account = a.id
      MATCH_RECOGNIZE (
        PARTITION BY tier ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, COUNT(*) AS n, SUM(A.amount) AS total
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A{3}) DEFINE A AS A.amount > 0)
  - name: per_country
    kind: analytics
    sql: |
      SELECT country, COUNT(*) AS n, SUM(amount) AS total, window_start
      FROM payments AS p LEFT JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a ON p.account = a.id
      GROUP BY country, TUMBLE(ts, INTERVAL '100' MILLISECOND)
  - name: gold_per_account
    kind: analytics
    sql: |
      SELECT account, COUNT(*) AS n, window_start
      FROM payments AS p JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a ON p.account = a.id
      WHERE tier = 'gold'
      GROUP BY account, TUMBLE(ts, INTERVAL '100' MILLISECOND)
"""
PAYMENTS = "account long, ts long, amount long"
CHANGES = "id long, ts long, tier string, country string, __deleted string"


def workload(seed: int, files: int) -> list[tuple[list[dict], list[dict]]]:
    """Per micro-batch (changes, payments): file i covers times [100 i, 100 i + 100); from the
    second on, a late change and a late payment lead their files, and some changes are deletes."""
    rnd = random.Random(seed)
    out = []
    for i in range(files):
        base = 100 * i
        changes: list[dict] = []
        if i == 0:
            changes = [{"id": a, "ts": a, "tier": rnd.choice(["gold", "silver"]), "country": rnd.choice("NL DE".split())}
                       for a in range(1, 7)]
        else:
            last = max(c["ts"] for c in out[-1][0])
            changes.append({"id": 1, "ts": last - 1, "tier": "gold", "country": "XX"})  # late: not applied
            for t in sorted(rnd.sample(range(base, base + 100), 5)):
                a = rnd.randint(1, 7)  # account 7 has no row until a change gives it one
                if rnd.random() < 0.25:
                    changes.append({"id": a, "ts": t, "__deleted": "true"})
                else:
                    changes.append({"id": a, "ts": t, "tier": rnd.choice(["gold", "silver"]),
                                    "country": rnd.choice("NL DE FR".split())})
        pays = [{"account": rnd.randint(1, 7), "ts": t, "amount": rnd.randint(1, 50)}
                for t in sorted(rnd.sample(range(base + 6, base + 100), 14))]
        if i:
            pays.insert(0, {"account": 2, "ts": base - 40, "amount": 5})  # late: behind the earlier files
        out.append((changes, pays))
    # the changelog moves on (another key), so that the table's watermark passes every payment: while
    # payments wait for it, Spark holds a window rule's clock at the micro-batch watermark the first
    # waiting payment found, the engine at that payment's own arrival clock (docs/spark.md, "Tables")
    out.append(([{"id": 99, "ts": 100 * files + 500, "tier": "silver", "country": "NL"}], []))
    return out


def embedded(rules: Any, batches: list[tuple[list[dict], list[dict]]]) -> Any:
    """The engine fed the same micro-batches: each batch's changes, then its payments; no finish."""
    eng = Engine(rules, streams=["payments", "account_changes"])
    out = eng.process([])
    for changes, pays in batches:
        out.extend(eng.process(changes, stream="account_changes"))
        out.extend(eng.process(pays, stream="payments"))
    return out


def _plain(v: Any) -> Any:
    return int(v) if isinstance(v, float) and v.is_integer() else v


def own_columns(row: dict[str, Any]) -> tuple:
    """A match as (column, value) pairs under the rule's own names, NULLs and envelope fields left out."""
    suffix = f"__{row['rule']}"
    skip = ("output", "kind", "source", "line", "reason", "event", "correction", "retract")
    return tuple(sorted((k.removesuffix(suffix), _plain(v)) for k, v in row.items()
                        if v is not None and k not in skip and not (k == "retract" or k.startswith("retract__"))))


def spark_outputs(rows: list[dict[str, Any]]) -> tuple[Counter, Counter, Counter]:
    matches = Counter(own_columns(r) for r in rows if r["output"] == "match")
    late = Counter((r["rule"], r["reason"]) for r in rows if r["output"] == "late")
    errors = Counter((r["rule"], r["reason"]) for r in rows if r["output"] == "error")
    return matches, late, errors


def engine_outputs(out: Any) -> tuple[Counter, Counter, Counter]:
    matches = Counter(own_columns({k: v for k, v in m.items() if k not in ("correction", "retract")})
                      for m in out.matches)
    late = Counter((r["rule"], r["reason"]) for r in out.late)
    errors = Counter((r["rule"], r["reason"]) for r in out.errors)
    return matches, late, errors


def _stream(spark: Any, tmp: Path, rules: Any):
    pays = spark.readStream.schema(PAYMENTS).option("maxFilesPerTrigger", 1).json(str(tmp / "payments"))
    changes = spark.readStream.schema(CHANGES).option("maxFilesPerTrigger", 1).json(str(tmp / "changes"))
    result = apply_rules({"payments": pays, "account_changes": changes}, rules, SparkRunConfig(buckets=2))
    q = result.write_stream(str(tmp / "out"), str(tmp / "ck"))
    q.awaitTermination()


def test_joined_stream_restarted_from_its_checkpoint_gives_the_embedded_rows(spark: Any, tmp_path: Path,
                                                                             capsys: Any) -> None:
    rules = parse_rules(RULES)
    batches = workload(7, 3)  # 4 micro-batches: 2, then a restart, then 2
    for i, (changes, pays) in enumerate(batches[:2]):
        write_events(tmp_path / "changes", i, changes)
        write_events(tmp_path / "payments", i, pays)
    _stream(spark, tmp_path, rules)
    for i, (changes, pays) in enumerate(batches[2:], 2):  # more input, then the same query restarted
        write_events(tmp_path / "changes", i, changes)
        write_events(tmp_path / "payments", i, pays)
    _stream(spark, tmp_path, rules)
    got = spark_outputs(sink_rows(spark, tmp_path / "out"))
    want = engine_outputs(embedded(rules, batches))
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert got[2] == want[2]
    # the workload reaches what it is about: every rule matched, late changes and deletes, LEFT errors
    by_rule = Counter(dict(m)["rule"] for m in got[0].elements())
    assert set(by_rule) == {"gold_pair", "tier_run", "per_country", "gold_per_account"}
    assert sum(n for (rule, reason), n in got[1].items() if rule is None and "late change" in reason) == 2
    assert sum(n for (rule, _), n in got[1].items() if rule is not None) == 2 * 4  # one late payment a file, 4 rules
    assert any(c.get("__deleted") for ch, _ in batches for c in ch)  # deletes reached the table
    assert any("(LEFT JOIN)" in reason for (_, reason) in got[2])

    # the state reader still reads a joined rule's groups (operator and table replica)
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES)
    assert spark_cli.main(["state", "--checkpoint", str(tmp_path / "ck"), "--rules", str(rules_file),
                           "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    pair = next(r for r in view["rules"] if r["rule"] == "gold_pair")
    assert any("table 'accounts': a replica in each of its 2 groups" in n for n in pair["notes"])
    assert next(r for r in view["rules"] if r["rule"] == "tier_run")["notes"][0].startswith(
        "table 'accounts': a replica in each of its 1 groups")


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
