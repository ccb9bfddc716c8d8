"""The cyclic garbage collector does not run while Engine.process and finish work, and is back on after."""

from __future__ import annotations

import gc

from cep.engine import Engine
from patterns.rules import parse_rule_text

SQL = """SELECT * FROM s MATCH_RECOGNIZE (
  PARTITION BY k ORDER BY ts
  MEASURES A.ts AS a_ts, B.ts AS b_ts
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B)
  DEFINE A AS A.v < 5, B AS B.v >= 5)"""


def test_no_collection_runs_while_a_batch_is_processed() -> None:
    rule = parse_rule_text(SQL, "r")
    events = [{"k": i % 50, "ts": i, "v": (i // 50) % 10} for i in range(20_000)]  # a match every 10 rows of a key
    started: list[str] = []
    inside = [False]

    def watch(phase: str, info: dict) -> None:
        if phase == "start" and inside[0]:
            started.append(f"generation {info['generation']}")

    gc.callbacks.append(watch)
    try:
        eng = Engine([rule])
        gc.collect()  # (allocation counts at zero: a collection can start only inside)
        inside[0] = True
        out = eng.process(events)
        inside[0] = False
        gc.collect()  # (what the batch deferred: collected after it, as the first allocation would)
        inside[0] = True
        end = eng.finish()
        inside[0] = False
    finally:
        gc.callbacks.remove(watch)
    assert len(out.matches) + len(end.matches) > 1_500  # (rows kept alive: enough to trigger collections)
    # at most the one collection each call defers to its end (as the collector comes back on);
    # without the pause this batch starts about 280
    assert len(started) <= 2, started
    assert gc.isenabled()


def test_an_application_that_turned_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    try:
        eng = Engine([parse_rule_text(SQL, "r")])
        eng.process([{"k": 1, "ts": 1, "v": 1}])
        assert not gc.isenabled()
    finally:
        gc.enable()
