"""A payments stream joined to an accounts table fed by its changelog: rules, a seeded workload and the
embedded engine's rows, shared by the Spark and the plain-Python tests of temporal joins on Spark."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from cep.engine import Engine

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
SEARCH_RULES = RULES.replace("rules:\n", """rules:
  - name: gold_docs
    kind: search
    from: payments
    time_field: ts
    join: {table: accounts, on: {account: id}, kind: left}
    fields: [account, ts, amount, tier, country]
    queries:
      - {id: gold, query: 'tier:gold'}
      - {id: nl_silver, query: 'tier:silver AND country:NL', metadata: {desk: nl}}
  - name: inner_docs
    kind: search
    from: payments
    time_field: ts
    lateness: 30ms
    join: {table: accounts, on: account}
    fields: [account, ts, tier]
    query: 'tier:*'
""", 1)
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
            for j, t in enumerate(sorted(rnd.sample(range(base, base + 100), 5))):
                a = rnd.randint(1, 7)  # account 7 has no row until a change gives it one
                if j == 2 or rnd.random() < 0.2:  # at least one delete a file
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




def search_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """A search row's query metadata as JSON text (the engine's dict, Spark's string column)."""
    import json

    out = dict(row)
    for k, v in row.items():
        if k.split("__")[0] == "metadata" and v is not None:
            out[k] = json.dumps(json.loads(v) if isinstance(v, str) else v, sort_keys=True)
    return out
