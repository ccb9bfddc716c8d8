"""Patterns whose partial matches multiply with every row: the check's warning and the work budget.

``PATTERN ((A|B)* C)`` with aggregate conditions that always hold, C never, SKIP TO NEXT ROW, one
key ran at about 40 events per CPU second at the default cap. ``cep check`` now warns about such
patterns, and the runtime bounds the partial matches one event may advance on its key
(``max_steps_per_event``, 64 by default for a pattern the check warns about), dropping and counting
the excess like the partial-match cap (docs/reliability.md, "Work per event").
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cep.cli import main
from cep.engine import Engine
from cep.operator import PatternOperator
from patterns import ast as A
from patterns.errors import RuleErrors
from patterns.growth import GROWING_PATTERN_STEPS, find_growth
from patterns.rules import load_rules, parse_rule_text, parse_rules
from tests.reference import reference_matches

REPO = Path(__file__).resolve().parents[2]

PATHO = """rules:
  - name: patho
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.ts) AS t0
        AFTER MATCH SKIP TO NEXT ROW
        PATTERN ((A|B)* C)
        DEFINE A AS SUM(A.x) >= 0, B AS SUM(B.x) >= 0, C AS C.x < 0)
"""

WARNING = (
    "warning: rule 'patho': the partial matches of (A|B)* can multiply with every row: A and B can "
    "both take the same row, and A's condition looks back at the match (aggregates, other variables' "
    "rows, FIRST/LAST), so runs are not merged and each such row can double the runs of a start row. "
    "Make the alternatives exclusive (a condition that the rows of one fail), end runs sooner with "
    "WITHIN, or bound the work with max_partial_matches or max_steps_per_event (this rule's default "
    "budget: 64 partial matches per event; more are dropped and counted)"
)


def patho(options: str = "", skip: str = "TO NEXT ROW") -> str:
    text = PATHO.replace("AFTER MATCH SKIP TO NEXT ROW", f"AFTER MATCH SKIP {skip}")
    return text.replace("    sql: |", f"    {options}\n    sql: |") if options else text


def ones(n: int, key: int = 0) -> list[dict]:
    return [{"k": key, "ts": i, "x": 1} for i in range(n)]


def model(n: int, budget: int) -> tuple[int, int]:
    """(partial matches dropped, events that dropped some) for PATHO over ``n`` rows of x = 1.

    Written from the semantics, not the engine: every row can be A or B and never C. A start row's
    runs, in preference order, sit at A, B, C, A, B, C, ...: a row takes each A and B run on to
    A, B and C (3 runs each) and ends each C run; a new start row has 6. Over the budget, the
    oldest start rows' runs go first, the least preferred first within a start row.
    """
    starts: list[int] = []  # runs per live start row, oldest first
    dropped = hits = 0
    for _ in range(n):
        starts = [3 * (k - k // 3) for k in starts] + [6]
        excess = sum(starts) - budget
        if excess > 0:
            hits += 1
            kept = []
            for k in starts:
                gone = min(k, excess)
                dropped += gone
                excess -= gone
                if k > gone:
                    kept.append(k - gone)
            starts = kept
    return dropped, hits


# ---------------------------------------------------------------- the warning


def test_check_warns_with_a_caret_and_what_to_do_and_exits_0(tmp_path: Path, capsys) -> None:
    path = tmp_path / "patho.yaml"
    path.write_text(PATHO)
    assert main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: ok, 1 rule (patho), 1 warning\n"
    # the caret line shows the statement as the YAML block holds it (without the block's indent)
    assert err == f"{path}:8:18: {WARNING}\n  PATTERN ((A|B)* C)\n           ^^^^^^\n"


def test_load_rules_carries_the_warning_and_the_rule_runs(tmp_path: Path) -> None:
    path = tmp_path / "patho.yaml"
    path.write_text(PATHO)
    rules = load_rules(path)
    (w,) = rules.warnings
    assert (w.line, w.column, w.width) == (8, 18, 6)
    assert w.format().splitlines()[0] == f"{path}:8:18: {WARNING}"
    assert Engine(rules).run([ones(5)]).matches == []  # it runs: a warning refuses nothing


def test_a_bare_sql_rule_is_warned_about_too() -> None:
    sql = PATHO.split("sql: |\n")[1]
    rule = parse_rule_text(sql, "patho", "patho.sql")
    (w,) = rule.warnings
    assert w.format().splitlines()[1:] == ["        PATTERN ((A|B)* C)", "                 ^^^^^^"]


def test_each_rule_text_gets_its_own_caret() -> None:
    # the same statement laid out differently: equal compiled patterns, carets in different places
    one = parse_rule_text("SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts PATTERN ((A|B)* C) DEFINE A AS SUM(A.x) >= 0)")
    two = parse_rule_text("SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts\n   PATTERN   ((A|B)* C) DEFINE A AS SUM(A.x) >= 0)")
    assert one.compiled == two.compiled
    assert (one.warnings[0].line, one.warnings[0].column) == (1, 55)
    assert (two.warnings[0].line, two.warnings[0].column) == (2, 15)


def test_one_variable_at_two_places_of_a_loop_is_named_once() -> None:
    rule = parse_rule_text(
        "SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts PATTERN ((A A*)* C) DEFINE A AS SUM(A.x) >= 0, C AS C.x < 0)")
    (w,) = rule.warnings
    assert "the partial matches of (A A*)* can multiply with every row: A occurs at two places of it and a row " \
           "can be taken at either, and A's condition looks back" in w.message


@pytest.mark.parametrize("path", [p for p in sorted((REPO / "rules").glob("*.yaml")) if not p.name.endswith(".test.yaml")],
                         ids=lambda p: p.name)
def test_the_example_rules_get_no_warning(path: Path, capsys) -> None:
    assert load_rules(path).warnings == []
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_cep_run_prints_the_warning_and_the_partial_matches_the_budget_dropped(tmp_path: Path, capsys) -> None:
    path = tmp_path / "patho.yaml"
    path.write_text(PATHO)
    events = tmp_path / "ev.jsonl"
    events.write_text("".join(f'{{"k": "K", "ts": {i}, "x": 1}}\n' for i in range(300)))
    assert main(["run", str(path), "-i", str(events), "-o", str(tmp_path / "out.jsonl")]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:8:18: {WARNING}\n")
    dropped = int(err.split("partial matches dropped by the work budget ")[1].split()[0].replace(",", ""))
    assert dropped == model(300, 64)[0] == 21_042
    assert main(["run", str(path), "-i", str(events), "-o", str(tmp_path / "out.jsonl"), "-q", "--overwrite"]) == 0
    assert capsys.readouterr().err == ""  # --quiet: no warning, no summary


def test_cep_bench_shows_the_budget_drops(tmp_path: Path, capsys) -> None:
    path = tmp_path / "patho.yaml"
    path.write_text(PATHO)
    events = tmp_path / "ev.jsonl"
    events.write_text("".join(f'{{"k": "K", "ts": {i}, "x": 1}}\n' for i in range(100)))
    assert main(["bench", str(path), "-i", str(events), "--repeat", "1", "--progress", "off"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"{path}:8:18: {WARNING}")
    assert f"partial matches dropped: {model(100, 64)[0]:,} by the work budget" in out


# ---------------------------------------------------------------- the option


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "true", "lots", "null"])
def test_max_steps_per_event_must_be_a_positive_whole_number(value: str) -> None:
    with pytest.raises(RuleErrors) as e:
        parse_rules(patho(f"max_steps_per_event: {value}"))
    shown = {"true": "True", "lots": "'lots'", "null": "None"}.get(value, value)
    assert e.value.errors[0].message == (
        f"rule 'patho': max_steps_per_event must be at least 1, a whole number such as 1000; found {shown}")
    assert e.value.errors[0].line == 3  # the option's line


def test_the_default_budget_applies_to_warned_patterns_only() -> None:
    warned = PatternOperator.from_rule(parse_rules(patho()).rules[0]).automaton
    assert warned.max_steps == GROWING_PATTERN_STEPS == 64
    chosen = PatternOperator.from_rule(parse_rules(patho("max_steps_per_event: 500")).rules[0]).automaton
    assert chosen.max_steps == 500
    for path in sorted((REPO / "rules").glob("*.yaml")):
        if path.name.endswith(".test.yaml"):  # the rule files' tests (cep test)
            continue
        for rule in load_rules(path):
            if rule.kind == "pattern":
                assert PatternOperator.from_rule(rule).automaton.max_steps is None, rule.name


def test_changing_the_budget_resets_the_rule_on_reload() -> None:
    eng = Engine(parse_rules(patho()))
    report = eng.reload(parse_rules(patho("max_steps_per_event: 32")))
    assert report.changed == ["patho"]
    assert eng.reload(parse_rules(patho("max_steps_per_event: 32"))).kept == ["patho"]


# ---------------------------------------------------------------- the budget at run time


def test_the_counter_counts_every_partial_match_dropped() -> None:
    # Budget 4, x = 1 everywhere, so A and B hold on every row and C never does. A start row's
    # first row leaves 6 runs (A, B: each then at A, B or C); 2 are dropped (the least preferred).
    # On every later row, the 4 kept runs: A and B each go on to 3 (the C run dies): 9, plus 6 of
    # the new start row: 15; the oldest start row's 9 go, then 2 of the newest: 11 dropped.
    op = PatternOperator.from_rule(parse_rules(patho("max_steps_per_event: 4")).rules[0])
    n = 50
    for e in ones(n):
        op.process([e])
        assert op.live_partial_matches() == 4
    assert op.stats.budget_dropped == 2 + 11 * (n - 1) == model(n, 4)[0]
    assert op.stats.budget_hits == n
    assert op.stats.partial_matches_dropped == op.stats.cap_hits == 0
    counts = Engine(parse_rules(patho("max_steps_per_event: 4"))).operators["patho"].stats
    assert counts.budget_dropped == 0


def test_the_default_budget_bounds_every_event_and_the_count_adds_up() -> None:
    op = PatternOperator.from_rule(parse_rules(patho()).rules[0])
    peaks = []
    for e in ones(300):
        op.process([e])
        peaks.append(op.live_partial_matches())
    assert max(peaks) == 64
    assert op.stats.partial_matches_peak == 135  # before the budget dropped the excess
    assert (op.stats.budget_dropped, op.stats.budget_hits) == model(300, 64) == (21_042, 297)
    eng = Engine(parse_rules(patho()))
    eng.run([ones(300)])
    c = eng.counts()["patho"]
    assert (c.budget_dropped, c.budget_hits) == (op.stats.budget_dropped, op.stats.budget_hits)


def test_skip_key_forgets_the_key_at_the_budget() -> None:
    op = PatternOperator.from_rule(parse_rules(patho("max_steps_per_event: 4\n    on_cap: skip_key")).rules[0])
    op.process(ones(3))
    # each row: the new start row's 6 runs exceed 4, and every one of them is forgotten
    assert op.live_partial_matches() == 0
    assert (op.stats.budget_dropped, op.stats.budget_hits) == (18, 3)


def test_a_start_row_cut_by_the_budget_reports_the_match_it_had_found() -> None:
    # S X+ greedy: the start row at 0 has found S X (rows 0-1) when row 1 starts a second run;
    # 2 partial matches exceed the budget of 1, the oldest goes, and its match is reported
    sql = """rules:
  - name: r
    max_steps_per_event: 1
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(S.ts) AS t0, LAST(X.ts) AS t1 AFTER MATCH SKIP TO NEXT ROW PATTERN (S X+)
        DEFINE S AS S.x = 0, X AS SUM(X.x) >= 0)
"""
    events = [{"k": 0, "ts": i, "x": x} for i, x in enumerate([0, 0, 1, 1, 1])]
    eng = Engine(parse_rules(sql))
    assert eng.run([events]).matches == [{"k": 0, "t0": 0, "t1": 1, "rule": "r"}, {"k": 0, "t0": 1, "t1": 4, "rule": "r"}]
    assert eng.counts()["r"].budget_dropped == 1
    unbounded = Engine(parse_rules(sql.replace("max_steps_per_event: 1", "max_steps_per_event: 100")))
    assert unbounded.run([events]).matches == [{"k": 0, "t0": 0, "t1": 4, "rule": "r"},
                                              {"k": 0, "t0": 1, "t1": 4, "rule": "r"}]


def test_the_budget_applies_to_merged_runs_too() -> None:
    # history-free conditions (the lazy DFA): each start row is one partial match; every row
    # starts one that never ends (SKIP TO NEXT ROW, C never)
    sql = """rules:
  - name: r
    max_steps_per_event: 10
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0
        AFTER MATCH SKIP TO NEXT ROW PATTERN (A B* C) DEFINE A AS A.x >= 0, B AS B.x >= 0, C AS C.x < 0)
"""
    op = PatternOperator.from_rule(parse_rules(sql).rules[0])
    assert op.automaton.dfa and parse_rules(sql).warnings == []
    op.process(ones(100))
    assert op.live_partial_matches() == 10
    assert op.stats.budget_dropped == 90


def test_batching_does_not_change_what_the_budget_keeps() -> None:
    rnd = random.Random(7)
    events = [{"k": rnd.randrange(3), "ts": i, "x": rnd.choice([1, 1, 1, -1])} for i in range(600)]
    text = patho("max_steps_per_event: 16", skip="PAST LAST ROW")
    whole = Engine(parse_rules(text))
    rows = whole.run([events]).matches
    one_by_one = Engine(parse_rules(text))
    rows2 = one_by_one.run([[e] for e in events]).matches
    chunks = Engine(parse_rules(text))
    rows3 = chunks.run([events[i : i + 37] for i in range(0, len(events), 37)]).matches
    key = lambda r: (r["k"], str(r["t0"]))  # noqa: E731  (keys' rows interleave by batch)
    assert sorted(rows, key=key) == sorted(rows2, key=key) == sorted(rows3, key=key) and rows
    assert vars(whole.counts()["patho"]) == vars(one_by_one.counts()["patho"]) == vars(chunks.counts()["patho"])
    assert whole.counts()["patho"].budget_dropped > 0


# ---------------------------------------------------------------- exact while the budget is not hit

SESSIONS = """
SELECT * FROM s MATCH_RECOGNIZE (
  PARTITION BY user ORDER BY ts
  MEASURES FIRST(L.ts) AS login_at, COUNT(P.*) AS payments, SUM(P.amount) AS spent, LAST(O.ts) AS logout_at
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (L (V | P)* O)
  DEFINE
    L AS L.action = 'login',
    V AS V.action IN ('view', 'cart'),
    P AS P.amount > 0 AND SUM(P.amount) <= 500,
    O AS O.action = 'logout'
)"""

BARS = """
SELECT * FROM s MATCH_RECOGNIZE (
  PARTITION BY user ORDER BY ts
  MEASURES FIRST(S.ts) AS start_at, COUNT(U.*) AS ups, COUNT(G.*) AS big, LAST(D.ts) AS drop_at
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (S (U | G)+ D)
  WITHIN INTERVAL '1' HOUR
  DEFINE
    S AS S.close < PREV(S.close),
    U AS U.close > PREV(U.close),
    G AS G.volume > 900 AND COUNT(G.*) <= 2,
    D AS D.close < PREV(D.close) * 0.99
)"""


def session_events(seed: int, keys: int = 3, per_key: int = 400) -> list[dict]:
    """Web sessions: a login, views and carts, payments (the only rows with an amount), a logout."""
    rnd = random.Random(seed)
    events = []
    for k in range(keys):
        ts = k
        rows: list[tuple[str, int]] = []
        while len(rows) < per_key:
            rows.append(("login", 0))
            for _ in range(rnd.randint(0, 25)):
                if rnd.random() < 0.2:
                    rows.append(("pay", rnd.randint(10, 200)))
                else:
                    rows.append((rnd.choice(["view", "cart"]), 0))
            if rnd.random() < 0.8:
                rows.append(("logout", 0))
        for action, amount in rows[:per_key]:
            events.append({"user": f"u{k}", "ts": ts, "action": action, "amount": amount})
            ts += 1000
    return sorted(events, key=lambda e: e["ts"])


def bar_events(seed: int, keys: int = 3, per_key: int = 400) -> list[dict]:
    """Minute bars: a random walk, with a volume above 900 on one bar in twenty."""
    rnd = random.Random(seed)
    events = []
    for k in range(keys):
        close = 100.0
        for i in range(per_key):
            close = round(close * (1 + rnd.gauss(0, 0.01)), 2)
            volume = rnd.randint(901, 3000) if rnd.random() < 0.05 else rnd.randint(10, 900)
            events.append({"user": f"u{k}", "ts": i * 60_000 + k, "close": close, "volume": volume})
    return sorted(events, key=lambda e: e["ts"])


def _session_cond(events):
    def cond(var: str, i: int, asg) -> bool:
        e = events[i]
        if var == "L":
            return e["action"] == "login"
        if var == "V":
            return e["action"] in ("view", "cart")
        if var == "P":
            return e["amount"] > 0 and sum(events[r]["amount"] for r, v, _ in asg if v == "P") <= 500
        return e["action"] == "logout"

    def measures(asg) -> dict:
        paid = [events[r]["amount"] for r, v, _ in asg if v == "P"]
        return {"login_at": events[asg[0][0]]["ts"], "payments": len(paid), "spent": sum(paid) if paid else None,
                "logout_at": events[asg[-1][0]]["ts"]}

    return cond, measures, None


def _bars_cond(events):
    def prev_close(i: int):
        return events[i - 1]["close"] if i > 0 else None

    def cond(var: str, i: int, asg) -> bool:
        e, p = events[i], prev_close(i)
        if var == "S":
            return p is not None and e["close"] < p
        if var == "U":
            return p is not None and e["close"] > p
        if var == "G":
            return e["volume"] > 900 and sum(1 for _, v, _ in asg if v == "G") <= 2
        return p is not None and e["close"] < p * 0.99

    def measures(asg) -> dict:
        return {"start_at": events[asg[0][0]]["ts"], "ups": sum(1 for _, v, _ in asg if v == "U"),
                "big": sum(1 for _, v, _ in asg if v == "G"), "drop_at": events[asg[-1][0]]["ts"]}

    return cond, measures, 3_600_000


@pytest.mark.parametrize(("sql", "make", "reference"), [(SESSIONS, session_events, _session_cond),
                                                         (BARS, bar_events, _bars_cond)], ids=["sessions", "bars"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_realistic_warned_pattern_is_exact_under_the_default_budget(sql, make, reference, seed) -> None:
    rule = parse_rule_text(sql, "r")
    assert rule.warnings  # the conditions are not provably exclusive ...
    events = make(seed)
    op = PatternOperator(rule.compiled, name="r")
    assert op.automaton.max_steps == GROWING_PATTERN_STEPS
    rows = op.process(events).matches + op.finish().matches
    # ... but the rows rarely take both, so the runs stay few and the budget is never hit
    assert op.stats.budget_hits == op.stats.budget_dropped == 0
    assert 0 < op.stats.partial_matches_peak <= GROWING_PATTERN_STEPS
    unbounded = PatternOperator(rule.compiled, name="r", max_steps_per_event=10**9)
    assert rows == unbounded.process(events).matches + unbounded.finish().matches
    expected = []
    for k in sorted({e["user"] for e in events}):
        mine = [e for e in events if e["user"] == k]
        cond, measures, within = reference(mine)
        pattern = rule.compiled.statement.pattern
        for asg in reference_matches(len(mine), pattern, cond, "PAST_LAST_ROW", None,
                                     [e["ts"] for e in mine], within):
            expected.append({"user": k, **measures(asg), "rule": "r"})
    key = lambda r: (r["user"], str(r))  # noqa: E731
    assert sorted(rows, key=key) == sorted(expected, key=key)
    assert len(rows) > 20


# ---------------------------------------------------------------- the analysis agrees with the runtime

GROWS = [
    ("S (A|B)* E", True),
    ("S (A A*)* E", True),
    ("S (A+)* E", True),  # A+ is A A*: a row can go on in the inner loop or start the outer one again
    ("S (A B*)* E", True),
    ("S PERMUTE(A, B)* E", True),
    ("S ((A|B) C)* E", True),
    ("S (A|B){2,} E", True),
    ("S A* B* E", False),  # the runs of a start row grow with the rows, not with 2^rows
    ("S (A B)* E", False),
    ("S (A{2})* E", False),
    ("S (A|B){1,6} E", False),  # bounded: at most 2^6 runs
    ("S A+ B+ C* E", False),
]


@pytest.mark.parametrize(("pattern", "grows"), GROWS)
def test_warned_patterns_multiply_their_runs_and_others_do_not(pattern: str, grows: bool) -> None:
    # every variable but S (the first row only) and E (never) holds on every row, on a sum over
    # the match; one start row, no budget, no cap: 4 more rows multiply the runs by 4 or more
    # when they double every second row, and by less than (16/12)^3 when they grow like rows^3
    names = sorted({v for v in "ABC" if v in pattern})
    defines = ", ".join(["S AS S.i = 0", "E AS E.x < 0"] + [f"{v} AS SUM({v}.x) >= 0" for v in names])
    rule = parse_rule_text(f"SELECT * FROM s MATCH_RECOGNIZE (ORDER BY i MEASURES S.i AS s0 "
                           f"PATTERN ({pattern}) DEFINE {defines})")
    assert (find_growth(rule.compiled) is not None) == grows, rule.warnings
    op = PatternOperator(rule.compiled, name="r", max_partial_matches=10**6, max_steps_per_event=10**6)
    op.process([{"i": i, "x": 1} for i in range(12)])
    before = op.live_partial_matches()
    op.process([{"i": i, "x": 1} for i in range(12, 16)])
    after = op.live_partial_matches()
    if grows:
        assert after >= 4 * before > 0
    else:
        assert after < (16 / 12) ** 3 * before or after == before == 0  # (a bounded group ends)


# ---------------------------------------------------------------- against the reference matcher


def _random_growing_case(rnd: random.Random):
    """A pattern with an alternation in an unbounded loop, the differential test's conditions."""
    from tests.cep.test_nfa_reference import CONDITIONS, VARS

    def small() -> A.Pattern:
        items = [A.PVar(rnd.choice(VARS)) for _ in range(rnd.randint(1, 2))]
        return items[0] if len(items) == 1 else A.PSeq(tuple(items))

    loop = A.PQuant(A.PAlt((small(), small())), rnd.choice([0, 1]), None, rnd.random() < 0.7)
    items = [A.PVar(rnd.choice(VARS))] if rnd.random() < 0.7 else []
    items.append(loop)
    items += [A.PVar(rnd.choice(VARS))] if rnd.random() < 0.8 else []
    pattern = items[0] if len(items) == 1 else A.PSeq(tuple(items))
    present = {v for v in VARS if v in _text(pattern)}
    conds = {v: rnd.randrange(len(CONDITIONS)) if v in present else 5 for v in VARS}
    conds[rnd.choice(sorted(present))] = rnd.choice([7, 8])  # a sum or a count: looks back
    for v in VARS:
        needs = {6: "A", 9: "B"}.get(conds[v])
        if needs and needs not in present:
            conds[v] = 5
    skip = rnd.choice(["PAST_LAST_ROW", "TO_NEXT_ROW"])
    within = rnd.choice([None, None, 4, 7])
    keys = [[rnd.randint(0, 4) for _ in range(rnd.randint(1, 14))] for _ in range(rnd.randint(1, 2))]
    return pattern, conds, skip, within, keys


def _text(p: A.Pattern) -> str:
    from tests.cep.test_nfa_reference import pattern_text

    return pattern_text(p)


def test_warned_patterns_equal_the_reference_whenever_the_budget_is_not_hit() -> None:
    from patterns.compiler import nullable
    from tests.cep.test_nfa_reference import (
        build_sql,
        engine_assignments,
        events_for,
        reference_assignments,
    )

    rnd = random.Random(2026)
    compared = hit = 0
    while compared + hit < 300:
        pattern, conds, skip, within, keys = _random_growing_case(rnd)
        if nullable(pattern):
            continue
        sql = build_sql(pattern, conds, skip, within * 2 if within else None)
        rule = parse_rule_text(sql)
        if not rule.warnings:
            continue  # (the conditions came out exclusive or local)
        op = PatternOperator(rule.compiled, name="r")
        events = events_for(keys)
        got = op.process(events).matches + op.finish().matches
        if op.stats.budget_hits:
            hit += 1
            assert op.stats.budget_dropped > 0
            continue
        compared += 1
        for k, xs in enumerate(keys):
            ts = [i * 2 + k for i in range(len(xs))]
            want = reference_assignments(pattern, conds, skip, xs, ts, within * 2 if within else None)
            assert engine_assignments(got, k) == want, (sql, k, xs)
    assert compared >= 200 and hit > 0  # most cases stay under the budget; some do not
