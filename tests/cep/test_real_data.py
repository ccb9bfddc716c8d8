"""Real market data: the engine against the brute-force reference matcher on S&P 500 daily bars."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from cep.engine import Engine
from patterns.match_recognize import parse_statement
from patterns.rules import load_rules
from tests.reference import reference_matches

REPO = Path(__file__).resolve().parents[2]
V_SHAPE_CONDITIONS = {
    "START_ROW": lambda xs, i, asg: True,
    "DOWN": lambda xs, i, asg: i > 0 and xs[i] < xs[i - 1],
    "UP": lambda xs, i, asg: i > 0 and xs[i] > xs[i - 1] and xs[i] >= xs[asg[0][0]],
}
THREE_UP = {
    "R": lambda xs, i, asg: i > 0 and xs[i] > xs[i - 1],
    "D": lambda xs, i, asg: xs[i] < xs[[r for r, v, _ in asg if v == "R"][-1]] * 0.98,
}


def by_symbol(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["symbol"], []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r["date"])
    return out


def reference(rule_name: str, bars: dict[str, list[dict]]) -> list[tuple]:
    rules = {r.name: r for r in load_rules(REPO / "rules" / "trading.yaml")}
    stmt = parse_statement(rules[rule_name].source)
    conds = V_SHAPE_CONDITIONS if rule_name == "v_shape" else THREE_UP
    days = {"v_shape": None, "three_up_then_drop": 7}[rule_name]
    out = []
    for sym, rows in bars.items():
        xs = [r["close"] for r in rows]
        import datetime as dt

        ts = [int(dt.datetime.fromisoformat(r["date"]).replace(tzinfo=dt.timezone.utc).timestamp() * 1000) for r in rows]
        within = days * 86_400_000 if days else None

        def cond(var, i, asg, xs=xs):
            return conds[var](xs, i, asg)

        for m in reference_matches(len(xs), stmt.pattern, cond, "PAST_LAST_ROW", ts=ts, within=within):
            out.append((sym, rows[m[0][0]]["date"], rows[m[-1][0]]["date"]))
    return sorted(out)


def engine_rows(bars_rows: list[dict]) -> dict[str, list[tuple]]:
    eng = Engine(load_rules(REPO / "rules" / "trading.yaml"))
    out = eng.run([bars_rows[i : i + 500] for i in range(0, len(bars_rows), 500)])
    res: dict[str, list[tuple]] = {"v_shape": [], "three_up_then_drop": []}
    for r in out.matches:
        if r["rule"] == "v_shape":
            res["v_shape"].append((r["symbol"], r["start_date"], r["end_date"]))
        else:
            res["three_up_then_drop"].append((r["symbol"], r["first_up"], r["drop_date"]))
    return {k: sorted(v) for k, v in res.items()}


def check(rows: list[dict]) -> None:
    got = engine_rows(rows)
    bars = by_symbol(rows)
    for name in ("v_shape", "three_up_then_drop"):
        want = reference(name, bars)
        assert got[name] == want, name
        assert len(want) >= 2


def test_bundled_sample_matches_reference():
    rows = [json.loads(x) for x in (REPO / "rules/data/sp500_daily_2017_sample.jsonl").read_text().splitlines()]
    check(rows)


def test_sp500_five_years_matches_reference(shared_data):
    rows = []
    with open(shared_data / "sp500_daily_ohlcv_2013_2018.csv") as f:
        for r in csv.DictReader(f):
            if r["close"] and r["Name"] < "B":  # the symbols from A to AZ: ~40 stocks x 5 years
                rows.append({"symbol": r["Name"], "date": r["date"], "close": float(r["close"])})
    rows.sort(key=lambda r: r["date"])
    assert len(rows) > 30_000
    check(rows)
