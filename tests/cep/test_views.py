"""Table-table views: the incremental join's changelog against a pandas brute force (the join recomputed
at every change time, consecutive results diffed), rules joining a view, feeding the changelog back
as a table, and the rule-file errors of a bad view."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cep import Engine
from patterns.errors import RuleErrors
from patterns.rules import parse_rules

VIEW_RULES = """
tables:
  - {{name: cos, from: co_changes, primary_key: sym, columns: [sec, x], time_field: ts, lateness: {l1}}}
  - {{name: secs, from: sec_changes, primary_key: id, columns: [label, y], time_field: ts, lateness: {l2}}}
views:
  - name: v
    sql: SELECT c.x, s.label, s.y AS sy FROM cos AS c {kind} JOIN secs AS s ON {on}
rules: []
"""


# ---------------------------------------------------------------- the reference


def _late(times: list[int], lateness: int) -> list[bool]:
    """Late as a table judges it: behind the running maximum of the earlier changes minus the lateness."""
    out, top = [], None
    for t in times:
        out.append(top is not None and t < top - lateness)
        top = t if top is None else max(top, t)
    return out


def _as_of(changes: pd.DataFrame, key: str, t: int) -> pd.DataFrame:
    """The live rows of a changelog (sorted by time, then arrival) at time ``t``: per key the last
    change at or before t (ties: the later one), deletes dropped."""
    k = int(np.searchsorted(changes["ts"].to_numpy(), t, side="right"))
    last = changes.iloc[:k].drop_duplicates(key, keep="last")
    return last[~last["deleted"]].set_index(key)


def view_reference(left: list[dict], right: list[dict], l1: int, l2: int, kind: str, on: str) -> list[tuple]:
    """The view's changelog by brute force: the join recomputed from scratch with pandas at every time a
    change (on time) happened, consecutive results diffed. Rows (ts, op, sym, after) sorted by (ts, sym)."""
    def frame(rows: list[dict], lateness: int, cols: list[str]) -> pd.DataFrame:
        late = _late([r["ts"] for r in rows], lateness)
        kept = [dict(r, seq=i, deleted=bool(r.get("__deleted"))) for i, (r, x) in enumerate(zip(rows, late)) if not x]
        df = pd.DataFrame(kept, columns=[*cols, "ts", "seq", "deleted"]).astype({"deleted": bool})
        return df.sort_values(["ts", "seq"], kind="stable").reset_index(drop=True)

    lf, rf = frame(left, l1, ["sym", "sec", "x"]), frame(right, l2, ["id", "label", "y"])
    times = sorted(set(lf["ts"].tolist()) | set(rf["ts"].tolist()))
    prev: dict = {}
    out = []
    for t in times:
        a = _as_of(lf, "sym", t).reset_index()[["sym", "sec", "x"]]
        b = _as_of(rf, "id", t).reset_index()[["id", "label", "y"]]
        col = "sec" if on == "fk" else "sym"
        a[col], b["id"] = a[col].astype(object), b["id"].astype(object)  # NULL foreign keys meet int keys
        j = a.merge(b, left_on=col, right_on="id", how="left" if kind == "LEFT" else "inner")
        cur = {k: (_n(x), _n(lab), _n(y))
               for k, x, lab, y in zip(j["sym"].tolist(), j["x"].tolist(), j["label"].tolist(), j["y"].tolist())}
        for k in sorted(set(prev) | set(cur)):
            if k not in cur:
                out.append((t, "d", k, None))
            elif k not in prev:
                out.append((t, "c", k, cur[k]))
            elif cur[k] != prev[k]:
                out.append((t, "u", k, cur[k]))
        prev = cur
    return out


def _n(v):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _got(rows: list[dict]) -> list[tuple]:
    out = []
    for r in rows:
        a = r["after"]
        out.append((r["ts_ms"], r["op"], r["key"]["sym"], None if a is None else (a["x"], a["label"], a["sy"])))
    return out


# ---------------------------------------------------------------- the property


left_st = st.tuples(st.integers(0, 7), st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 3),
                    st.integers(0, 40), st.booleans())
right_st = st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 1), st.integers(0, 40), st.booleans())


def _run(rules, arrival, order, restore_at) -> tuple[list[dict], list[dict], Engine]:
    engine = Engine(rules, streams=["co_changes", "sec_changes"])
    rows, late = [], []
    i = batch_no = 0
    while i <= len(arrival):
        j = i
        while j < len(arrival) and (j == i or order.random() < 0.75):
            j += 1
        out = engine.process(arrival[i:j]) if j > i else engine.finish()
        rows += out.matches
        late += out.late
        if j == i:
            break
        batch_no += 1
        if batch_no == restore_at:
            fresh = Engine(rules, streams=["co_changes", "sec_changes"])
            fresh.restore(engine.snapshot())
            engine = fresh
        i = j
    return rows, late, engine


@settings(max_examples=25, deadline=None, derandomize=True)
@given(left=st.lists(left_st, max_size=40), right=st.lists(right_st, max_size=25),
       order=st.randoms(use_true_random=False), kind=st.sampled_from(["", "LEFT"]), on=st.sampled_from(["fk", "pk"]),
       l1=st.sampled_from([0, 5, 100]), l2=st.sampled_from([0, 5, 100]), restore_at=st.integers(0, 10))
def test_view_changelog_matches_brute_force(left, right, order, kind, on, l1, l2, restore_at):
    """Random changelogs with deletes (and NULL foreign keys), both tables interleaved in any order, cut
    into batches anywhere, a snapshot and a restore into a new engine between two batches: the view's
    changelog is the brute force's, and late changes are reported by their table."""
    rules = parse_rules(VIEW_RULES.format(l1=l1, l2=l2, kind=kind, on="c.sec = s.id" if on == "fk" else "c.sym = s.id"))
    lrows = [{"stream": "co_changes", "sym": k, "sec": f, "x": x, "ts": t, **({"__deleted": "true"} if d else {})}
             for k, f, x, t, d in left]
    rrows = [{"stream": "sec_changes", "id": k, "label": f"L{lab}", "y": y, "ts": t,
              **({"__deleted": "true"} if d else {})} for k, lab, y, t, d in right]
    tags = ["l"] * len(lrows) + ["r"] * len(rrows)
    order.shuffle(tags)
    li, ri = iter(lrows), iter(rrows)
    arrival = [next(li) if tag == "l" else next(ri) for tag in tags]
    rows, late, engine = _run(rules, arrival, order, restore_at)
    want = view_reference(lrows, rrows, l1, l2, "LEFT" if kind else "INNER", on)
    got = _got(rows)
    # in time order, then in the order the left table first saw each key (its first change applied)
    late1 = _late([r["ts"] for r in lrows], l1)
    seen: dict = {}
    for r, x in zip(lrows, late1):
        if not x:
            seen.setdefault(r["sym"], len(seen))
    assert sorted(got, key=lambda r: (r[0], seen[r[2]])) == got
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert sum(1 for x in late if x.get("table") == "cos") == sum(_late([r["ts"] for r in lrows], l1))
    assert sum(1 for x in late if x.get("table") == "secs") == sum(_late([r["ts"] for r in rrows], l2))
    st_ = engine.view_stats()["v"]
    assert (st_["inserts"], st_["updates"], st_["deletes"]) == tuple(
        sum(1 for r in want if r[1] == op) for op in ("c", "u", "d"))


@settings(max_examples=2, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["", "LEFT"]), restore_at=st.integers(1, 30))
def test_view_with_a_hundred_rows_per_foreign_key(seed, kind, restore_at):
    """About a hundred left rows pointing at each of two right keys, relabelled often, both changelogs cut
    into many batches: every right change fans out to its rows, as the brute force says."""
    import random

    rng = random.Random(seed)
    rules = parse_rules(VIEW_RULES.format(l1=20, l2=0, kind=kind, on="c.sec = s.id"))
    lrows = [{"stream": "co_changes", "sym": rng.randrange(200), "sec": rng.randrange(2), "x": rng.randrange(3),
              "ts": t // 5 + rng.randrange(30), **({"__deleted": "true"} if rng.random() < 0.05 else {})}
             for t in range(450)]
    rrows = [{"stream": "sec_changes", "id": rng.randrange(2), "label": f"L{rng.randrange(4)}", "y": 0, "ts": t * 10,
              **({"__deleted": "true"} if rng.random() < 0.1 else {})} for t in range(15)]
    arrival = sorted(lrows + rrows, key=lambda r: r["ts"] + rng.random() * 10)  # some changes late
    rows, _, _ = _run(rules, arrival, rng, restore_at)
    lrows = [r for r in arrival if r["stream"] == "co_changes"]  # each table's arrival order
    rrows = [r for r in arrival if r["stream"] == "sec_changes"]
    want = view_reference(lrows, rrows, 20, 0, "LEFT" if kind else "INNER", "fk")
    assert sorted(_got(rows), key=repr) == sorted(want, key=repr)
    assert max(sum(1 for r in want if r[0] == t and r[1] == "u") for t in {r["ts"] for r in rrows}) > 50


def test_foreign_key_update_changes_every_row_pointing_at_it():
    """An update of the right row emits an update of each left row pointing at it, at its time; the
    changes come out once both watermarks have passed them."""
    rules = parse_rules(VIEW_RULES.format(l1=0, l2=0, kind="", on="c.sec = s.id"))
    eng = Engine(rules, streams=["co_changes", "sec_changes"])
    out = eng.process([{"id": 1, "label": "tech", "y": 0, "ts": 0}], stream="sec_changes")
    out = eng.process([{"sym": s, "sec": 1, "x": i, "ts": 1} for i, s in enumerate("ABC")], stream="co_changes")
    assert out.matches == []  # the sectors' watermark (0) has not passed time 1
    out = eng.process([{"id": 1, "label": "it", "y": 0, "ts": 5}], stream="sec_changes")
    assert out.matches == []  # the companies' watermark (1) has not passed time 1 either
    out = eng.process([{"sym": "A", "sec": 1, "x": 0, "ts": 9}], stream="co_changes")  # the same row again
    assert [(r["op"], r["key"]["sym"], r["ts_ms"]) for r in out.matches] == [("c", "A", 1), ("c", "B", 1), ("c", "C", 1)]
    out = eng.process([{"id": 1, "label": "it", "y": 0, "ts": 9, "__deleted": "true"}], stream="sec_changes")
    out.extend(eng.finish())
    assert [(r["op"], r["key"]["sym"], r["after"] and r["after"]["label"], r["ts_ms"]) for r in out.matches] == [
        ("u", "A", "it", 5), ("u", "B", "it", 5), ("u", "C", "it", 5),
        ("d", "A", None, 9), ("d", "B", None, 9), ("d", "C", None, 9)]
    assert out.matches[0]["before"] == {"sym": "A", "x": 0, "label": "tech", "sy": 0}


RULE_ON_VIEW = """
tables:
  - {name: cos, from: co_changes, primary_key: sym, columns: [sec], time_field: ts}
  - {name: secs, from: sec_changes, primary_key: id, columns: [label], time_field: ts}
views:
  - name: v
    sql: SELECT s.label FROM cos AS c LEFT JOIN secs AS s ON c.sec = s.id
rules:
  - name: seen
    sql: |
      SELECT * FROM trades AS t JOIN v FOR SYSTEM_TIME AS OF t.ts ON t.sym = v.sym
      MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES A.ts AS ts, A.label AS label
        AFTER MATCH SKIP PAST LAST ROW PATTERN (A) DEFINE A AS TRUE)
"""


def test_a_rule_joins_a_view_as_of_its_events():
    """A pattern rule joins the view like a table: each event sees the view's row as of its time, and
    waits until the view (both its tables) has passed it."""
    eng = Engine(parse_rules(RULE_ON_VIEW), streams=["co_changes", "sec_changes", "trades"])
    feed = [
        ({"id": 1, "label": "a", "ts": 0}, "sec_changes"),
        ({"sym": "X", "sec": 1, "ts": 0}, "co_changes"),
        ({"sym": "X", "ts": 3}, "trades"),
        ({"id": 1, "label": "b", "ts": 5}, "sec_changes"),
        ({"sym": "X", "ts": 6}, "trades"),
        ({"sym": "X", "sec": 2, "ts": 8}, "co_changes"),
        ({"sym": "X", "ts": 9}, "trades"),
        ({"id": 9, "label": "z", "ts": 20}, "sec_changes"),
        ({"sym": "Y", "sec": 1, "ts": 20}, "co_changes"),
    ]
    joined = []
    for rec, stream in feed:
        joined += [(r["ts"], r["label"]) for r in eng.process([rec], stream=stream).matches if r.get("rule") == "seen"]
    joined += [(r["ts"], r["label"]) for r in eng.finish().matches if r.get("rule") == "seen"]
    # at 9 the company points at sector 2, which has no row: the view's LEFT row has label NULL
    assert joined == [(3, "a"), (6, "b"), (9, None)]


def test_changelog_fed_back_as_a_debezium_table_gives_the_view(tmp_path):
    """The view's rows are Debezium envelopes: read back by a `format: debezium` table, lookups give
    the view's own table's answers."""
    from cep.events import batch_from_records
    from cep.tables import Table
    from patterns.tables import TableSpec

    rules = parse_rules(VIEW_RULES.format(l1=0, l2=0, kind="LEFT", on="c.sec = s.id"))
    eng = Engine(rules, streams=["co_changes", "sec_changes"])
    rng = np.random.default_rng(7)
    rows = []
    for t in range(60):
        if rng.random() < 0.6:
            rows += eng.process([{"sym": int(rng.integers(6)), "sec": int(rng.integers(3)), "x": t, "ts": t,
                                  **({"__deleted": "true"} if rng.random() < 0.1 else {})}], stream="co_changes").matches
        else:
            rows += eng.process([{"id": int(rng.integers(3)), "label": f"L{t}", "y": t, "ts": t}],
                                stream="sec_changes").matches
    rows += eng.finish().matches
    assert {r["op"] for r in rows} == {"c", "u", "d"}
    back = Table(TableSpec("back", "v_changes", ("sym",), ("x", "label", "sy"), format="debezium"))
    back.apply(batch_from_records(json.loads(json.dumps(rows))))
    view_table = eng.views["v"].table
    keys, times = np.repeat(np.arange(7), 62), np.tile(np.arange(-1, 61), 7)
    for col in ("x", "label", "sy"):
        want = view_table.gather(view_table.lookup([keys], times), [col])[col].tolist()
        got = back.gather(back.lookup([keys], times), [col])[col].tolist()
        assert [None if v != v else v for v in got] == [None if v != v else v for v in want]


def test_static_tables_and_snapshot_rows(tmp_path):
    """Rows of a snapshot file hold from the beginning of time: their join comes out as op 'r'."""
    (tmp_path / "secs.csv").write_text("id,label,y\n1,tech,0\n")
    (tmp_path / "r.yaml").write_text(VIEW_RULES.format(l1=0, l2=0, kind="LEFT", on="c.sec = s.id").replace(
        "lateness: 0}\nviews", "lateness: 0, snapshot: secs.csv}\nviews"))
    eng = Engine(str(tmp_path / "r.yaml"), streams=["co_changes"])  # secs' changelog is no input: static
    out = eng.process([{"sym": "A", "sec": 1, "x": 1, "ts": 4}], stream="co_changes")
    out.extend(eng.finish())
    assert [(r["op"], r["after"]["label"], r["ts_ms"]) for r in out.matches] == [("c", "tech", 4)]
    (tmp_path / "cos.csv").write_text("sym,sec,x\nB,1,0\n")
    (tmp_path / "r2.yaml").write_text((tmp_path / "r.yaml").read_text().replace(
        "columns: [sec, x], time_field: ts", "columns: [sec, x], time_field: ts, snapshot: cos.csv"))
    eng = Engine(str(tmp_path / "r2.yaml"), streams=["trades"])  # both static: the join at the first call
    out = eng.process([{"sym": "B", "ts": 1}], stream="trades")
    assert [(r["op"], r["key"], r["after"]["label"]) for r in out.matches] == [("r", {"sym": "B"}, "tech")]


# ---------------------------------------------------------------- errors


def _errors(text: str) -> list[str]:
    with pytest.raises(RuleErrors) as e:
        parse_rules(text, "f.yaml")
    return [x.format().splitlines()[0] for x in e.value.errors]


def _view(sql: str) -> str:
    return VIEW_RULES.format(l1=0, l2=0, kind="", on="c.sec = s.id").replace(
        "sql: SELECT c.x, s.label, s.y AS sy FROM cos AS c  JOIN secs AS s ON c.sec = s.id", f"sql: {sql}")


@pytest.mark.parametrize("sql, message", [
    ("SELECT c.x FROM cos AS c JOIN sectors AS s ON c.sec = s.id",
     "f.yaml:7:40: unknown table 'sectors' (declared tables and views: cos, secs); a view joins tables declared "
     "under 'tables:' or views declared before it"),
    ("SELECT c.x FROM cos AS c JOIN secs AS s ON c.sec = s.label",
     "f.yaml:7:61: ON ... = s.label: 'label' is not in table 'secs''s primary key (id); a view looks the right row "
     "up by its primary key (foreign key = primary key)"),
    ("SELECT c.x FROM cos AS c JOIN secs AS s ON c.sector = s.id",
     "f.yaml:7:53: c.sector: table 'cos' has no column 'sector'; its key and columns: sym, sec, x"),
    ("SELECT c.z FROM cos AS c JOIN secs AS s ON c.sec = s.id",
     "f.yaml:7:17: c.z: table 'cos' has no column 'z'; its key and columns: sym, sec, x"),
    ("SELECT c.x, s.y AS x FROM cos AS c JOIN secs AS s ON c.sec = s.id",
     "f.yaml:7:22: view column 'x' is selected twice; give one another name (AS)"),
    ("SELECT s.id FROM cos AS c JOIN secs AS s ON c.sec = s.id",
     "f.yaml:7:17: 'id' is table 'secs''s primary key, equal to the left table's 'sec' (ON); select that column instead"),
    ("SELECT c.x FROM cos AS c JOIN secs FOR SYSTEM_TIME AS OF c.ts AS s ON c.sec = s.id",
     "f.yaml:7:45: FOR SYSTEM_TIME AS OF: a view joins both tables at every time (its changelog has a row whenever "
     "either side changes the join); write the join without it"),
    ("SELECT c.x FROM cos AS c RIGHT JOIN secs AS s ON c.sec = s.id",
     "f.yaml:7:35: RIGHT JOIN: a view is an inner JOIN or a LEFT JOIN (the left table's key is the view's key)"),
    ("SELECT c.x FROM cos AS c JOIN secs AS s ON c.sec = s.id WHERE c.x > 1",
     "f.yaml:7:66: unexpected 'WHERE' after the join: a view is SELECT ... FROM ... [LEFT] JOIN ... ON ... (no WHERE, "
     "GROUP BY or further joins)"),
    ("SELECT c.x FROM cos AS c JOIN secs AS s ON c.sec = c.x",
     "f.yaml:7:53: ON c.sec = c.x: each equality names a column of the left table (c or cos) and one of the right "
     "table (s or secs), each qualified by its name or alias"),
    ("SELECT * FROM cos JOIN cos ON cos.sec = cos.sym",
     "f.yaml:7:33: 'cos' names both tables; give them aliases (FROM cos AS a JOIN cos AS b)"),
    ("SELECT x FROM cos AS c JOIN secs AS s",
     "f.yaml:7:47: expected ON (ON <left>.<column> = <right>.<key column>), found the end of the statement"),
])
def test_view_errors(sql, message):
    assert _errors(_view(sql)) == [message]


def test_view_declaration_errors():
    assert _errors("tables:\n  - {name: t, from: s, primary_key: id, columns: [a], time_field: ts}\n"
                   "views:\n  - name: t\n    sql: SELECT * FROM t AS a JOIN t AS b ON a.a = b.id\n  - name: w\n"
                   "    sq: x\nrules: []\n") == [
        "f.yaml:4:11: view name 't' is already a table's name; rules join tables and views by name",
        "f.yaml:7:5: unknown key 'sq' for a view; known keys: name, description, sql",
        "f.yaml:6:5: view 'w' needs 'sql:', SELECT ... FROM <table> [LEFT] JOIN <table> ON ...",
    ]


def test_cep_check_reports_a_bad_view_with_its_place(tmp_path, capsys):
    from cep.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(VIEW_RULES.format(l1=0, l2=0, kind="LEFT", on="c.sec = s.label"))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert (f"{bad}:7:86: ON ... = s.label: 'label' is not in table 'secs''s primary key (id); a view looks the right "
            "row up by its primary key (foreign key = primary key)\n") in err
    assert "\n" + " " * 76 + "^^^^^^^\n" in err
    bad.write_text(VIEW_RULES.format(l1=0, l2=0, kind="LEFT", on="c.sec = s.id"))
    assert main(["check", str(bad)]) == 0


def test_companies_joined_with_gics_codes_on_real_bars():
    """The docs' example on the bundled 2017 bars: the view starts as the join of both snapshots (op r),
    a change of the IT sector's code updates both IT companies at its time, a company moving sector
    updates its row; the rule sees the code as of each bar (IT bars before the change, and MSFT's
    until it moves), checked against the bars themselves."""
    from patterns.rules import load_rules

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "tables"
    repo = Path(__file__).resolve().parents[2]
    bars = [json.loads(x) for x in (repo / "rules/data/sp500_daily_2017_sample.jsonl").read_text().splitlines()]
    eng = Engine(load_rules(fixtures / "company_codes.yaml"), streams=["bars", "gics_changes", "company_changes"])
    t_code, t_move = "2017-07-03", "2017-04-03"
    rows = eng.process([{"sector": "Information Technology", "code": 99, "changed_at": t_code}], "gics_changes").matches
    rows += eng.process([{"Symbol": "MSFT", "Security": "Microsoft", "GICS Sector": "Utilities",
                          "changed_at": t_move}], "company_changes").matches
    rows += eng.process(bars, "bars").matches
    rows += eng.finish().matches
    changes = [(r["op"], r["key"]["Symbol"], r["after"] and r["after"]["code"]) for r in rows if r.get("view")]
    assert changes == [("r", s, c) for s, c in [("AMZN", 25), ("AAPL", 45), ("XOM", 10), ("JPM", 40), ("MSFT", 45)]] + [
        ("u", "MSFT", 55), ("u", "AAPL", 99)]
    got = sorted((r["symbol"], r["date"]) for r in rows if r.get("rule") == "coded_bars")
    want = sorted((b["symbol"], b["date"]) for b in bars
                  if (b["symbol"] == "AAPL" and b["date"] < t_code) or (b["symbol"] == "MSFT" and b["date"] < t_move))
    assert got == want and len(want) > 100


def test_bench_and_run_report_the_view_and_its_size(tmp_path, capsys):
    """`cep bench` ends with a line per view (changes emitted, keys, versions, rows, memory; under
    `views` in --json), and `cep run`'s summary has a line per table and per view with their size."""
    from cep.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(VIEW_RULES.format(l1=0, l2=0, kind="LEFT", on="c.sec = s.id"))
    cos, secs = tmp_path / "cos.jsonl", tmp_path / "secs.jsonl"
    cos.write_text("".join(json.dumps({"sym": k % 7, "sec": k % 3, "x": k, "ts": k * 10}) + "\n" for k in range(30)))
    secs.write_text("".join(json.dumps({"id": k % 3, "label": f"L{k}", "y": 0, "ts": k * 25}) + "\n" for k in range(12)))
    out_json = tmp_path / "b.json"
    assert main(["bench", str(rules), "--input", f"co_changes={cos}", "--input", f"sec_changes={secs}",
                 "--repeat", "1", "--json", str(out_json)]) == 0
    v = json.loads(out_json.read_text())["views"]["v"]
    assert (v["keys"], v["live_keys"]) == (7, 7) and v["inserts"] == 7 and v["updates"] > 7 and v["bytes"] > 0
    assert (f"view v: 7 inserts, {v['updates']:,} updates, 0 deletes; 7 live keys of 7, {v['versions']:,} versions, "
            f"{v['rows']:,} rows; ") in capsys.readouterr().out
    out = tmp_path / "out.jsonl"
    assert main(["run", str(rules), "--input", f"co_changes={cos}", "--input", f"sec_changes={secs}",
                 "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "  table cos: changes read 30, applied 30, late 0, errors 0, snapshot rows 0; live keys 7 of 7, versions " in err
    assert f"  view v: inserts 7, updates {v['updates']:,}, deletes 0; live keys 7 of 7, versions {v['versions']:,}" in err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == v["inserts"] + v["updates"] and {r["view"] for r in rows} == {"v"}


def test_composite_keys_and_a_view_of_a_view():
    """A right table keyed by two columns (ON names both), and a second view joining the first one to a
    third table: each level's changelog follows the one below, at the change times."""
    rules = parse_rules("""
tables:
  - {name: cos, from: co, primary_key: sym, columns: [region, sec], time_field: ts}
  - {name: secs, from: se, primary_key: [region, id], columns: [label], time_field: ts}
  - {name: regions, from: re, primary_key: code, columns: [zone], time_field: ts}
views:
  - name: v1
    sql: SELECT c.region, s.label FROM cos AS c JOIN secs AS s ON c.region = s.region AND c.sec = s.id
  - name: v2
    sql: SELECT v.label, r.zone FROM v1 AS v LEFT JOIN regions AS r ON v.region = r.code
rules: []
""")
    eng = Engine(rules, streams=["co", "se", "re"])
    rows = []
    rows += eng.process([{"region": "eu", "id": 1, "label": "a", "ts": 0}, {"region": "us", "id": 1, "label": "b", "ts": 0}],
                        "se").matches
    rows += eng.process([{"code": "eu", "zone": "Z1", "ts": 0}], "re").matches
    rows += eng.process([{"sym": "X", "region": "eu", "sec": 1, "ts": 1}, {"sym": "Y", "region": "us", "sec": 1, "ts": 1},
                         {"sym": "Z", "region": "us", "sec": 2, "ts": 1}], "co").matches
    rows += eng.process([{"region": "us", "id": 1, "label": "b2", "ts": 5}], "se").matches
    rows += eng.process([{"code": "us", "zone": "Z2", "ts": 7}], "re").matches
    rows += eng.process([{"sym": "X", "region": "us", "sec": 1, "ts": 9}], "co").matches
    rows += eng.finish().matches
    got = [(r["view"], r["op"], r["key"]["sym"], r["after"], r["ts_ms"]) for r in rows]
    assert got == [
        ("v1", "c", "X", {"sym": "X", "region": "eu", "label": "a"}, 1),
        ("v1", "c", "Y", {"sym": "Y", "region": "us", "label": "b"}, 1),  # Z: no sector (us, 2): inner
        ("v2", "c", "X", {"sym": "X", "label": "a", "zone": "Z1"}, 1),
        ("v2", "c", "Y", {"sym": "Y", "label": "b", "zone": None}, 1),
        # the end of input: each view's changes in time order, the views in the file's order
        ("v1", "u", "Y", {"sym": "Y", "region": "us", "label": "b2"}, 5),
        ("v1", "u", "X", {"sym": "X", "region": "us", "label": "b2"}, 9),
        ("v2", "u", "Y", {"sym": "Y", "label": "b2", "zone": None}, 5),
        ("v2", "u", "Y", {"sym": "Y", "label": "b2", "zone": "Z2"}, 7),
        ("v2", "u", "X", {"sym": "X", "label": "b2", "zone": "Z2"}, 9),
    ]


def test_reload_keeps_the_views_and_refuses_a_changed_one(tmp_path):
    path = tmp_path / "r.yaml"
    text = VIEW_RULES.format(l1=0, l2=0, kind="LEFT", on="c.sec = s.id")
    path.write_text(text)
    eng = Engine(str(path), streams=["co_changes", "sec_changes"])
    eng.process([{"sym": 1, "sec": 2, "x": 0, "ts": 3}], "co_changes")
    view = eng.views["v"]
    path.write_text(text.replace("rules: []", "rules:\n  - name: r\n    sql: SELECT * FROM t MATCH_RECOGNIZE "
                                               "(ORDER BY ts PATTERN (A) DEFINE A AS TRUE)"))
    assert eng.reload(str(path)).accepted and eng.views["v"] is view
    path.write_text(text.replace("s.y AS sy", "s.y AS why"))
    rep = eng.reload(str(path))
    assert not rep.accepted and rep.errors == [
        "the views changed: a view's rows come from its tables' changelogs as this run has read them; a reload "
        "keeps the views as they are (restart from an empty state to change them)"]


def test_rows_of_the_beginning_of_time_feed_back_too(tmp_path):
    """The join of two snapshot files comes out as op 'r' with ts_ms null; a Debezium table reads
    those rows as valid from the beginning of time (a snapshot's), then the later changes."""
    from cep.events import batch_from_records
    from cep.tables import MIN_TIME, Table
    from patterns.tables import TableSpec

    (tmp_path / "secs.csv").write_text("id,label,y\n1,tech,0\n2,oil,0\n")
    (tmp_path / "cos.csv").write_text("sym,sec,x\nA,1,5\nB,2,6\n")
    text = VIEW_RULES.format(l1=0, l2=0, kind="", on="c.sec = s.id")
    text = text.replace("time_field: ts, lateness: 0}\n  - {name: secs", "time_field: ts, lateness: 0, snapshot: cos.csv}\n"
                        "  - {name: secs").replace("lateness: 0}\nviews", "lateness: 0, snapshot: secs.csv}\nviews")
    (tmp_path / "r.yaml").write_text(text)
    eng = Engine(str(tmp_path / "r.yaml"), streams=["sec_changes"])  # the companies are their snapshot
    rows = eng.process([{"id": 1, "label": "it", "y": 1, "ts": 50}], stream="sec_changes").matches
    rows += eng.finish().matches
    assert [(r["op"], r["key"]["sym"], r["ts_ms"]) for r in rows] == [("r", "A", None), ("r", "B", None), ("u", "A", 50)]
    back = Table(TableSpec("back", "s", ("sym",), ("label",), format="debezium"))
    out = back.apply(batch_from_records(json.loads(json.dumps(rows))))
    assert out.errors == [] and back.counts.applied == 3
    keys = np.array(["A", "B", "A"], dtype=object)
    assert back.gather(back.lookup([keys], np.array([MIN_TIME, -10**12, 50])))["label"].tolist() == ["tech", "oil", "it"]
