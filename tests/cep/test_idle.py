"""Idle progress (cep.idle): a quiet input's rules move on with a (fake) wall clock.

The reference for an idle advance is an event: moving a rule's watermark to ``W`` without an
event must give exactly what a *heartbeat* would give, an event of a key of its own stamped
``W + lateness`` that matches nothing (it moves the rule's watermark to ``W`` the ordinary way).
Every rule kind is checked against it (the heartbeat key's own rows left out), on random streams
with random quiet spells, and the choice of when and how far to move is checked by hand.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.engine import Engine
from cep.idle import IdleProgress, check_idle_seconds, ticking
from patterns.rules import parse_rules

HB = "__heartbeat__"

RULES = {
    # a partial match that WITHIN ends: its best match so far comes out at start + 2 s
    "within": """
rules:
  - name: within
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, LAST(B.ts) AS t1, COUNT(B.*) AS nb
        PATTERN (A B*) WITHIN INTERVAL '2' SECOND DEFINE A AS A.v = 1, B AS B.v = 2)
""",
    # absence: a 1 not followed by a 2 of its key within 2 s comes out when the 2 s have passed
    "absence": """
rules:
  - name: absence
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0 PATTERN (A NOT B) WITHIN INTERVAL '2' SECOND DEFINE A AS A.v = 1, B AS B.v = 2)
""",
    # timed-out partial matches: their own output, when WITHIN ends them unmatched
    "timeout": """
rules:
  - name: timeout
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, COUNT(B.*) AS nb ONE ROW PER MATCH WITH TIMEOUT ROWS
        PATTERN (A B* C) WITHIN INTERVAL '2' SECOND DEFINE A AS A.v = 1, B AS B.v = 2, C AS C.v = 0)
""",
    # events held for the allowed lateness: released once the watermark reaches them
    "lateness": """
rules:
  - name: lateness
    lateness: 1500
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, B.ts AS t1 PATTERN (A B) DEFINE A AS A.v = 1, B AS B.v = 2)
""",
    # windows close at their end (and rows for late panes come as corrections within the lateness)
    "window": """
rules:
  - name: window
    kind: analytics
    lateness: 700
    sql: SELECT k, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)
""",
    "session": """
rules:
  - name: session
    kind: analytics
    sql: SELECT k, COUNT(*) AS n FROM ev GROUP BY k, SESSION(ts, INTERVAL '800' MILLISECOND)
""",
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def engine(kind: str) -> Engine:
    return Engine(parse_rules(RULES[kind]))


def no_heartbeat(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("k") != HB]


def test_a_key_that_sends_nothing_more_has_its_within_match_end_once_idle_progress_passes_the_deadline():
    clock = FakeClock()
    eng = engine("within")
    idle = IdleProgress(30, clock=clock)
    out = eng.process([{"k": "x", "ts": 10_000, "v": 1}, {"k": "x", "ts": 10_500, "v": 2}])
    idle.input_seen()
    assert out.matches == [] and eng.next_deadlines() == {"within": 12_000}
    # the deadline is 2 s of event time away, but nothing moves before 30 s of quiet
    clock.now += 29.999
    assert idle.targets(eng) == {}
    clock.now += 0.001
    targets = idle.targets(eng)
    assert targets == {"within": 10_500 + 30_000}  # watermark when quiet + the wall time since
    rows = idle.apply(eng, targets).matches
    assert rows == [{"k": "x", "t0": 10_000, "t1": 10_500, "nb": 1, "rule": "within"}]
    assert eng.watermarks() == {"within": 40_500} and eng.next_deadlines() == {}
    clock.now += 3600
    assert idle.targets(eng) == {}  # nothing is due: the watermark stays
    # the watermark does not go back: an event behind it is late, one after it starts afresh
    out = eng.process([{"k": "x", "ts": 40_000, "v": 1}, {"k": "y", "ts": 40_600, "v": 1}])
    assert [r["event"]["ts"] for r in out.late] == [40_000]
    assert "behind the watermark 1970-01-01T00:00:40.500Z" in out.late[0]["reason"]


def test_a_rule_moves_only_when_its_deadline_is_due_then_straight_to_the_wall_clock():
    clock = FakeClock()
    eng = engine("within")
    idle = IdleProgress(0, clock=clock)  # 0: idle as soon as nothing comes
    eng.process([{"k": "x", "ts": 0, "v": 1}, {"k": "y", "ts": 1_000, "v": 1}])
    idle.input_seen()
    # deadlines 2,000 (x) and 3,000 (y); the watermark is 1,000 when the input goes quiet
    clock.now += 0.999
    assert idle.targets(eng) == {}
    assert idle.wait_seconds() == pytest.approx(0.001)  # due in 1 ms: the host looks again then
    clock.now += 0.5
    assert idle.targets(eng) == {"within": 2_499}
    assert [r["k"] for r in idle.apply(eng, idle.targets(eng)).matches] == ["x"]
    assert idle.wait_seconds() == pytest.approx(0.501)  # y's deadline: at 2,000 ms of quiet
    clock.now += 0.6
    assert [r["k"] for r in idle.apply(eng, idle.targets(eng)).matches] == ["y"]
    assert idle.advances == 2


def test_an_absence_of_a_key_that_sends_nothing_more_comes_out_once_the_wall_clock_passes_it():
    clock = FakeClock()
    eng = engine("absence")
    idle = IdleProgress(60, clock=clock)
    out = eng.process([{"k": "x", "ts": 0, "v": 1}, {"k": "y", "ts": 500, "v": 1}, {"k": "y", "ts": 900, "v": 2}])
    idle.input_seen()
    assert out.matches == [] and eng.next_deadlines() == {"absence": 2_000}
    clock.now += 59.9
    assert idle.targets(eng) == {}
    clock.now += 0.1
    assert idle.apply(eng, idle.targets(eng)).matches == [{"k": "x", "t0": 0, "rule": "absence"}]


def test_events_held_for_the_allowed_lateness_come_out_after_that_much_quiet():
    clock = FakeClock()
    eng = engine("lateness")
    idle = IdleProgress(5, clock=clock)
    out = eng.process([{"k": "x", "ts": 1_000, "v": 1}, {"k": "x", "ts": 2_000, "v": 2}])
    idle.input_seen()
    assert out.matches == [] and eng.counts()["lateness"].buffered == 2
    clock.now += 5
    targets = idle.targets(eng)
    assert targets == {"lateness": 2_000 - 1_500 + 5_000}
    assert idle.apply(eng, targets).matches == [{"k": "x", "t0": 1_000, "t1": 2_000, "rule": "lateness"}]
    assert eng.counts()["lateness"].buffered == 0


def test_a_window_closes_for_a_quiet_input():
    clock = FakeClock()
    eng = engine("window")
    idle = IdleProgress(1, clock=clock)
    eng.process([{"k": "x", "ts": 100, "v": 2}, {"k": "x", "ts": 900, "v": 3}])
    idle.input_seen()
    clock.now += 1
    rows = idle.apply(eng, idle.targets(eng)).matches
    assert rows == [{"k": "x", "n": 2, "s": 5, "rule": "window", "correction": False}]


def test_rules_without_an_event_time_or_anything_waiting_do_not_move():
    clock = FakeClock()
    eng = Engine(parse_rules(RULES["within"] + """
  - {name: news, kind: search, from: ev, time_field: ts, query: apple}
  - name: quiet
    sql: |
      SELECT * FROM other MATCH_RECOGNIZE (ORDER BY ts MEASURES A.ts AS t PATTERN (A B*)
        WITHIN INTERVAL '1' SECOND DEFINE A AS A.v = 1, B AS B.v = 2)
"""), streams=["ev", "other"])
    eng.process([{"k": "x", "ts": 0, "v": 1, "t": "apple"}], "ev")
    idle = IdleProgress(0, clock=clock)
    clock.now += 1000
    # 'quiet' has seen no event (no watermark to start from), 'news' holds nothing back
    assert eng.watermarks() == {"within": 0, "news": 0, "quiet": None}
    assert idle.targets(eng) == {"within": 1_000_000}
    # asked explicitly (an external clock), a rule without events moves; a search rule has no clock
    # to move and an unknown name is no rule here
    assert eng.advance_watermarks({"news": 5, "quiet": 5, "nope": 5}).matches == []
    assert eng.watermarks() == {"within": 0, "news": 0, "quiet": 5}


def test_new_input_ends_the_quiet_spell():
    clock = FakeClock()
    eng = engine("within")
    idle = IdleProgress(10, clock=clock)
    eng.process([{"k": "x", "ts": 0, "v": 1}])
    idle.input_seen()
    clock.now += 9
    eng.process([{"k": "y", "ts": 100, "v": 0}])
    idle.input_seen()
    clock.now += 9  # 18 s since the first batch, 9 s since the last
    assert idle.targets(eng) == {}
    clock.now += 1
    assert idle.targets(eng) == {"within": 100 + 10_000}


def test_the_moved_watermark_is_part_of_the_snapshot():
    clock = FakeClock()
    eng = engine("within")
    idle = IdleProgress(0, clock=clock)
    eng.process([{"k": "x", "ts": 0, "v": 1}])
    idle.input_seen()
    clock.now += 5
    idle.apply(eng, idle.targets(eng))
    again = engine("within")
    again.restore(eng.snapshot())
    assert again.watermarks() == {"within": 5_000}
    assert len(again.process([{"k": "x", "ts": 4_999, "v": 1}]).late) == 1


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_a_bad_idle_time_is_refused_with_the_value(value):
    assert f"found {value!r}" in check_idle_seconds(value)
    with pytest.raises(ValueError, match="seconds of wall time, 0 or more"):
        IdleProgress(value)


# ------------------------------------------------------------------ against heartbeat events

def heartbeat_rows(kind: str, steps: list) -> tuple[list[list[dict]], list[dict]]:
    """The rows of each step when each idle advance is replaced by a heartbeat event at target + lateness."""
    eng = engine(kind)
    rule = eng.rules[0]
    rows: list[list[dict]] = []
    late: list[dict] = []
    for step in steps:
        if step[0] == "events":
            out = eng.process(step[1])
        else:
            target = step[1][rule.name]
            out = eng.process([{"k": HB, "ts": target + rule.lateness_ms, "v": 0}])
        rows.append(no_heartbeat(out.matches) + no_heartbeat(out.timeouts))
        late += out.late
    end = eng.finish()
    rows.append(no_heartbeat(end.matches) + no_heartbeat(end.timeouts))
    return rows, late


events = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 2_500), st.sampled_from([0, 1, 2])),
    min_size=1, max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(RULES)), evs=events, cuts=st.lists(st.integers(1, 40), max_size=6),
       quiets=st.lists(st.floats(0, 4), min_size=6, max_size=6), after=st.sampled_from([0.0, 0.5, 2.0]))
def test_an_idle_advance_gives_the_rows_of_a_heartbeat_event(kind, evs, cuts, quiets, after):
    # events in rising time with some jitter (late ones too), cut into batches with quiet spells
    t, recs = 0, []
    for key, dt, v in evs:
        t += dt
        recs.append({"k": key, "ts": max(0, t - (dt % 3) * 400), "v": v})
    bounds = sorted({c for c in cuts if c < len(recs)} | {0, len(recs)})
    clock = FakeClock()
    eng = engine(kind)
    idle = IdleProgress(after, clock=clock)
    steps: list = []
    rows: list[list[dict]] = []  # the rows of each step: they come out when the heartbeat's would
    late: list[dict] = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        out = eng.process(recs[lo:hi])
        steps.append(("events", recs[lo:hi]))
        rows.append(out.matches + out.timeouts)
        late += out.late
        idle.input_seen()
        # the host looks now and then while the input is quiet
        for _ in range(3):
            clock.now += quiets[i % len(quiets)] / 3
            targets = idle.targets(eng)
            if targets:
                steps.append(("idle", targets))
                moved = idle.apply(eng, targets)
                rows.append(moved.matches + moved.timeouts)
    end = eng.finish()
    rows.append(end.matches + end.timeouts)
    ref_rows, ref_late = heartbeat_rows(kind, steps)
    assert rows == ref_rows
    assert [x["event"] for x in late] == [x["event"] for x in ref_late]


# ------------------------------------------------------------------ reading a blocking input

def test_ticking_hands_over_items_in_order_and_none_while_the_reader_waits():
    go = threading.Event()

    def items():
        yield 1
        go.wait()  # a pipe with nothing to read
        yield 2

    it = ticking(items(), lambda: 0.01)
    assert next(it) == 1
    assert next(it) is None  # the reader is blocked: the caller gets a turn
    go.set()
    rest = [x for x in it if x is not None]
    assert rest == [2]


def test_ticking_raises_the_readers_error_in_the_callers_thread():
    def items():
        yield 1
        raise OSError("pipe broke")

    it = ticking(items(), lambda: 10.0)
    assert next(it) == 1
    with pytest.raises(OSError, match="pipe broke"):
        next(it)
