"""Hostile and broken event input: every bad line is reported with its line and reason, the run goes on,
and the counts add up (per rule: read = processed + late + errors + buffered; bad lines once, engine-wide)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.cli import main
from cep.durable import DurableConfig, run_durable
from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules
from tests.reliability.fuzzing import time_bound

RULES = """
rules:
  - name: rise
    lateness: 50
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS t0, LAST(B.ts) AS t1, LAST(B.px) AS px
        PATTERN (A B{2,})
        WITHIN INTERVAL '1' MINUTE
        DEFINE B AS B.px > PREV(B.px))
  - name: any_two
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        ORDER BY ts MEASURES A.sym AS a, B.sym AS b PATTERN (A B) DEFINE B AS B.sym <> A.sym)
"""

DEEP = '{"a":' * 300 + "1" + "}" * 300
TOO_DEEP = "[" * 5000 + "]" * 5000

# (line bytes, what must happen to it): "bad" = a bad line (not an event), "error" = an event every
# rule refuses (time or key), "event" = an event that is processed or late
HOSTILE: list[tuple[bytes, str]] = [
    (b'{"sym": "X", "ts": 1', "bad"),  # truncated
    (b'{"sym": "X", "ts": 1, "px": 2}garbage', "bad"),
    (b"\xff\xfe{\"sym\": \"X\"}", "bad"),  # invalid UTF-8
    ('{"sym": "X\udcff", "ts": 1}'.encode("utf-8", "surrogatepass"), "bad"),  # lone surrogate
    (b'{"sym": "X", "ts": 1, "px": NaN}', "bad"),
    (b'{"sym": "X", "ts": 1, "px": Infinity}', "bad"),
    (b'{"sym": "X", "ts": 1, "px": 1e400}', "bad"),  # overflows a double
    (TOO_DEEP.encode(), "bad"),  # nested past the decoder's limit
    (b"[1, 2, 3]", "bad"),
    (b'"just a string"', "bad"),
    (b"null", "bad"),
    (b"{\"sym\": \"X\", \"ts\": 1, \"px\": 1}\x00", "bad"),
    (b'{"sym": "X", "ts": NaN}', "bad"),
    (b'{"sym": "X", "ts": 99999999999999999999999, "px": 1}', "error"),  # huge number as time
    (b'{"sym": "X", "ts": 18446744073709551615, "px": 1}', "error"),
    (b'{"sym": "X", "ts": -9000000000000000, "px": 1}', "error"),  # far past
    (b'{"sym": "X", "ts": "9999-12-31T00:00:00Z", "px": 1}', "error"),  # far future
    (b'{"sym": "X", "ts": "0001-01-01", "px": 1}', "error"),
    (b'{"sym": "X", "ts": 1e300, "px": 1}', "error"),
    (b'{"sym": "X", "ts": "soon", "px": 1}', "error"),
    (b'{"sym": "X", "ts": {"ms": 1}, "px": 1}', "error"),
    (b'{"sym": "X", "ts": [1], "px": 1}', "error"),
    (b'{"sym": "X", "ts": true, "px": 1}', "error"),
    (b'{"sym": "X", "px": 1}', "error"),  # missing time
    (b'{"sym": "X", "ts": null, "px": 1}', "error"),
    (('{"sym": "X", "ts": ' + DEEP + ', "px": 1}').encode(), "error"),  # deep but decodable
]
# events refused by the keyed rule only (the unkeyed rule takes them): key of the wrong type
KEY_ERRORS: list[bytes] = [
    b'{"sym": ["X"], "ts": %d, "px": 1}',
    b'{"sym": {"a": 1}, "ts": %d, "px": 1}',
    b'{"ts": %d, "px": 1}',
    b'{"sym": null, "ts": %d, "px": 1}',
]
# valid time and key, odd values: processed (a condition that cannot be evaluated is false)
ODD_VALUES: list[bytes] = [
    b'{"sym": "X", "ts": %d, "px": "abc"}',
    b'{"sym": "X", "ts": %d, "px": 123456789012345678901234567890}',
    b'{"sym": "X", "ts": %d, "px": 1e308}',
    b'{"sym": "X", "ts": %d, "px": {"nested": [1, 2]}}',
    b'{"sym": "X", "ts": %d, "px": null, "extra": "\\u0000"}',
    b'{"sym": 7, "ts": %d, "px": 2}',
    ('{"sym": "X", "ts": %d, "px": ' + DEEP + "}").encode(),
]


def good(i: int, rng: random.Random) -> bytes:
    return json.dumps({"sym": rng.choice("XYZ"), "ts": 1_000 + 10 * i, "px": rng.randint(1, 9)}).encode()


def build(rng: random.Random, n: int = 400, big_line: bool = False) -> tuple[bytes, dict[int, str]]:
    """Good events with every hostile line mixed in; returns the bytes and line -> expected fate."""
    lines: list[bytes] = []
    fate: dict[int, str] = {}
    hostile = [(b, f) for b, f in HOSTILE] + [(b, "key") for b in KEY_ERRORS] + [(b, "event") for b in ODD_VALUES]
    if big_line:
        hostile.append((b'{"sym": "X", "ts": 5, "blob": "' + b"x" * (10 << 20) + b'"', "bad"))  # 10 MB, truncated
        hostile.append((b'{"sym": "X", "ts": %d, "blob": "' + b"y" * (10 << 20) + b'", "px": 1}', "event"))
    slots = sorted(rng.sample(range(n), len(hostile)))
    rng.shuffle(hostile)
    h = iter(hostile)
    slot_set = set(slots)
    for i in range(n):
        if i in slot_set:
            text, what = next(h)
            if b"%d" in text:
                text = text.replace(b"%d", str(1_000 + 10 * i).encode())
            lines.append(text)
            fate[len(lines)] = what
        else:
            lines.append(good(i, rng))
    lines.insert(n // 2, b"")  # a blank line is skipped, not an error
    fate = {(k + 1 if k > n // 2 else k): v for k, v in fate.items()}
    return b"\n".join(lines) + b"\n", fate


def check_outputs(errors: list[dict], late: list[dict], fate: dict[int, str], counts: dict, bad_lines: int) -> None:
    by_line: dict[int, list[dict]] = {}
    for e in errors:
        assert e["reason"] and isinstance(e["line"], int)
        by_line.setdefault(e["line"], []).append(e)
    for line, what in fate.items():
        got = by_line.get(line, [])
        if what == "bad":
            assert len(got) == 1 and got[0]["rule"] is None, (line, got)
        elif what == "error":
            assert {g["rule"] for g in got} == {"rise", "any_two"}, (line, got)
            assert all("event-time field 'ts'" in g["reason"] for g in got)
        elif what == "key":
            assert [g["rule"] for g in got] == ["rise"] and "partition field 'sym'" in got[0]["reason"], (line, got)
        else:
            assert got == [], (line, got)
    assert set(by_line) <= set(fate), "a good line was reported as an error"
    assert bad_lines == sum(1 for w in fate.values() if w == "bad")
    for name, c in counts.items():
        assert c.read == c.processed + c.late + c.errors + c.buffered, (name, c)
        assert c.errors == sum(1 for e in errors if e["rule"] == name)
        assert c.late == sum(1 for e in late if e["rule"] == name)


def test_cli_run_reports_each_hostile_line_and_goes_on(tmp_path, capsys):
    data, fate = build(random.Random(3), big_line=True)
    (tmp_path / "r.yaml").write_text(RULES)
    (tmp_path / "ev.jsonl").write_bytes(data)
    out, err, late = tmp_path / "out.jsonl", tmp_path / "err.jsonl", tmp_path / "late.jsonl"
    with time_bound(60):
        code = main(["run", str(tmp_path / "r.yaml"), "-i", str(tmp_path / "ev.jsonl"), "-o", str(out),
                     "--errors", str(err), "--late", str(late), "--batch-size", "37"])
    assert code == 0
    errors = [json.loads(x) for x in err.read_text().splitlines()]
    summary = capsys.readouterr().err
    assert "errors" in summary
    # the same lines through the engine directly, to read its counters
    eng = Engine(parse_rules(RULES))
    late_rows: list[dict] = []
    for b in read_events(tmp_path / "ev.jsonl", 37):
        late_rows += eng.process(b).late
    late_rows += eng.finish().late
    check_outputs(errors, [json.loads(x) for x in late.read_text().splitlines()], fate, eng.counts(), eng.bad_lines)
    assert len(late_rows) == len(late.read_text().splitlines())
    assert out.read_text().count("\n") > 10  # the good events still match


def test_durable_run_reports_each_hostile_line_and_limits_line_length(tmp_path):
    data, fate = build(random.Random(4), big_line=True)
    (tmp_path / "r.yaml").write_text(RULES)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.jsonl").write_bytes(data)
    cfg = DurableConfig(rules=str(tmp_path / "r.yaml"), input=str(logs), state=str(tmp_path / "st"),
                        output=str(tmp_path / "out.jsonl"), errors=str(tmp_path / "err.jsonl"),
                        late=str(tmp_path / "late.jsonl"), batch_lines=37, checkpoint_every=100,
                        finish=True, quiet=True)
    with time_bound(60):
        assert run_durable(cfg) == 0
    errors = [json.loads(x) for x in (tmp_path / "err.jsonl").read_text().splitlines()]
    # the durable reader refuses lines longer than its limit (8 MiB) without holding them whole
    big = [e for e in errors if "longer than the limit" in e["reason"]]
    assert len(big) == 2 and all(e["rule"] is None for e in big)
    for e in big:
        fate[e["line"]] = "bad"
    from cep.durable import read_checkpoint

    ck = read_checkpoint(str(tmp_path / "st"))
    eng = Engine(parse_rules(RULES))
    eng.restore(ck.snapshot)
    late = [json.loads(x) for x in (tmp_path / "late.jsonl").read_text().splitlines()]
    check_outputs(errors, late, fate, eng.counts(), eng.bad_lines)


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@FUZZ
@given(st.lists(st.one_of(
    st.fixed_dictionaries({"sym": st.sampled_from(["X", "Y"]), "ts": st.integers(0, 500), "px": st.integers(0, 9)}),
    st.dictionaries(st.sampled_from(["sym", "ts", "px"]), json_values, max_size=3),
    st.binary(max_size=20),
), max_size=60), st.integers(1, 16))
def test_engine_counts_add_up_on_any_input(tmp_path_factory, items, batch):
    import orjson

    blob = b"\n".join(x if isinstance(x, bytes) else json.dumps(x).encode() for x in items) + b"\n"
    p = tmp_path_factory.mktemp("fuzz") / "e.jsonl"
    p.write_bytes(blob)
    expected_bad = 0
    for raw in blob.split(b"\n"):
        if raw.strip():
            try:
                expected_bad += not isinstance(orjson.loads(raw.strip()), dict)
            except orjson.JSONDecodeError:
                expected_bad += 1
    eng = Engine(parse_rules(RULES))
    with time_bound(10):
        for b in read_events(p, batch):
            eng.process(b)
        eng.finish()
    assert eng.bad_lines == expected_bad
    for name, c in eng.counts().items():
        assert c.read == c.processed + c.late + c.errors + c.buffered, (name, c)
        assert c.buffered == 0  # the end of input releases everything


@pytest.mark.parametrize("batch", [1, 5, 1000])
def test_hostile_lines_do_not_change_the_good_events_matches(tmp_path, batch):
    rng = random.Random(11)
    data, fate = build(rng)
    clean = b"\n".join(x for i, x in enumerate(data.split(b"\n"), 1) if i not in fate) + b"\n"
    res = []
    for blob in (data, clean):
        p = tmp_path / "e.jsonl"
        p.write_bytes(blob)
        eng = Engine(parse_rules(RULES.replace("\n  - name: any_two", "\n  - name: any_two\n    enabled: false")))
        rows = []
        for b in read_events(p, batch):
            rows += eng.process(b).matches
        rows += eng.finish().matches
        res.append(rows)
    # only the odd-valued events (kept: valid time and key) may add or break matches
    odd = {fate_line for fate_line, w in fate.items() if w == "event"}
    assert odd
    assert [r for r in res[0] if r["rule"] == "rise" and r["sym"] not in ("X", 7)] == \
        [r for r in res[1] if r["rule"] == "rise" and r["sym"] not in ("X", 7)]


WRONG_TYPE_SQL = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
  MEASURES A.ts AS a, C.ts AS c, SUM(B.x) AS s, A.x + 1 AS a1
  PATTERN (A B+ C) DEFINE B AS SUM(B.x) < 100, C AS C.x = -1)"""


@pytest.mark.parametrize("lanes", [True, False])
def test_a_value_of_the_wrong_type_in_an_aggregate_or_a_measure(monkeypatch, lanes):
    """Text where SUM wants a number ends the partial matches whose aggregate took it (a condition
    error, counted); a measure that cannot be computed is NULL in its row (counted); nothing raises."""
    import cep.lanes
    from cep.operator import PatternOperator
    from patterns.rules import parse_rule_text

    monkeypatch.setattr(cep.lanes, "USE_LANES", lanes)
    xs = {1: [0, 1, "a", 2, -1], 2: [0, 1, 2, 3, -1], 3: ["b", 5, -1]}
    events = sorted(({"k": k, "ts": i, "x": x} for k, v in xs.items() for i, x in enumerate(v)), key=lambda e: e["ts"])
    op = PatternOperator(parse_rule_text(WRONG_TYPE_SQL).compiled, name="r")
    rows = op.process(events).matches + op.finish().matches
    got = sorted((r["k"], r["a"], r["c"], r["s"], r["a1"]) for r in rows)
    # key 1: the runs from rows 0 and 1 cannot take "a" into SUM(B.x); A may be "a" (no condition)
    # and then B+ = 2 and C = -1. key 3: A.x + 1 over "b" is NULL.
    assert got == [(1, 2, 4, 2, None), (2, 0, 4, 6, 1), (3, 0, 2, 5, None)]
    assert op.counts.late == 0 and op.counts.errors == 0
    # SUM over "a" (the runs from rows 0 and 1 of key 1), C.x = -1 over "a" and "b", A.x + 1 twice
    assert op.stats.eval_errors == 2 + 2 + 2


def test_cli_run_goes_on_past_a_value_of_the_wrong_type(tmp_path, capsys):
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - name: r\n    sql: |\n" + "".join(f"      {ln}\n" for ln in WRONG_TYPE_SQL.splitlines()))
    events = tmp_path / "e.jsonl"
    events.write_text("".join(json.dumps({"k": 1, "ts": i, "x": x}) + "\n" for i, x in enumerate([0, 1, "a", 2, -1])))
    assert main(["run", str(rules), "--input", str(events)]) == 0
    out = capsys.readouterr()
    assert [json.loads(ln)["a"] for ln in out.out.splitlines()] == [2]
    assert "condition errors" in out.err
