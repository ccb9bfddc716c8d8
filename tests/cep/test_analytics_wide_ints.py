"""Integers past 64 bits in windowed analytics and in pattern MEASURES: exact answers, pinned against plain Python."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rule_text, parse_rules

SQL = ("SELECT k, COUNT(*) AS n, COUNT(v) AS c, COUNT(DISTINCT v) AS d, APPROX_COUNT_DISTINCT(v) AS ad, "
       "SUM(w) AS s, MIN(v) AS lo, MAX(v) AS hi, window_start FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)")


def _rule(sql: str = SQL) -> Any:
    text = f"rules:\n  - name: r\n    kind: analytics\n    sql: |\n      {sql}\n"
    return parse_rules(text).rules[0]


def _value(rnd: random.Random) -> Any:
    """Ints of every width (past 64 bits, past a double's range, equal to a float or not), floats
    that equal some of them, and NULL."""
    r = rnd.random()
    if r < 0.1:
        return None
    if r < 0.3:
        # (2**63 .. 2**64-1: the sketches' hash would take their 64-bit images, -2**63 .. -1)
        return rnd.choice([-1, 0, 7, 2**62, -(2**63), -(2**63) + 1, 2**63, 2**63 + 1, 2**64 - 1])
    if r < 0.5:
        return rnd.choice([2**64, 2**64 + 1, -(2**64) - 1, 2**70, 2**70 + 3, 3 * 2**80])
    if r < 0.6:
        return rnd.choice([10**400, -(10**400) - 1])  # past a double's range
    if r < 0.75:
        return rnd.choice([2.0**70, 2.0**64, 2.0**63, 0.5, -1.0])  # equal to some of the ints above
    return rnd.randrange(-(2**100), 2**100)


def _sum_value(rnd: random.Random) -> Any:
    r = rnd.random()
    if r < 0.1:
        return None
    if r < 0.5:
        return rnd.randrange(-(2**63), 2**63)
    return rnd.choice([1, -1]) * rnd.randrange(2**63, 2**130)


def _pick(vs: list, f: Any) -> Any:
    """Python's min/max, an int where an int and a float tie (the engine's answer whatever the order)."""
    if not vs:
        return None
    best = f(vs)
    return next((v for v in vs if type(v) is int and v == best), best)


def _expected(events: list[dict]) -> list[dict]:
    cells: dict[tuple, list[dict]] = {}
    for e in events:
        cells.setdefault((e["k"], e["ts"] // 10 * 10), []).append(e)
    out = []
    for (k, start), rows in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        vs = [e["v"] for e in rows if e["v"] is not None]
        ws = [e["w"] for e in rows if e["w"] is not None]
        out.append({"k": k, "n": len(rows), "c": len(vs), "d": len(set(vs)), "s": sum(ws) if ws else None,
                    "lo": _pick(vs, min), "hi": _pick(vs, max), "window_start": start})
    return out


def _got(outs: list) -> list[dict]:
    rows = [r for o in outs for r in o.matches]
    for r in rows:
        assert abs(r["ad"] - r["d"]) <= max(1, r["d"] // 50), r  # (a sketch: exact at these sizes)
    keep = ("k", "n", "c", "d", "s", "lo", "hi", "window_start")
    return sorted(({k: r[k] for k in keep} for r in rows), key=lambda r: (r["window_start"], r["k"]))


def _typed(rows: list[dict]) -> list:
    return [{k: (type(v).__name__, v) for k, v in r.items()} for r in rows]


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), nbatches=st.integers(1, 5), restore=st.booleans())
def test_wide_ints_aggregate_exactly_as_python_does(seed: int, nbatches: int, restore: bool) -> None:
    """Batches that split windows, and a snapshot restored into a fresh engine after the first."""
    rnd = random.Random(seed)
    events = [{"k": rnd.choice("ab"), "ts": t, "v": _value(rnd), "w": _sum_value(rnd)}
              for t in sorted(rnd.randrange(0, 40) for _ in range(rnd.randrange(20, 90)))]
    cuts = sorted(rnd.sample(range(1, len(events)), min(nbatches - 1, len(events) - 1)))
    eng = Engine([_rule()])
    outs = []
    for lo, hi in zip([0, *cuts], [*cuts, len(events)]):
        outs.append(eng.process(events[lo:hi]))
        assert not outs[-1].errors, outs[-1].errors[:2]
        if restore and lo == 0:
            data = eng.snapshot()
            eng = Engine([_rule()])
            eng.restore(data)
    outs.append(eng.finish())
    assert _typed(_got(outs)) == _typed(_expected(events))


def test_wide_ints_from_a_json_lines_file(tmp_path: Path) -> None:
    """Read exactly by the decoder (cep/json_exact.py), then aggregated exactly."""
    events = [{"k": "a", "ts": i, "v": v, "w": w} for i, (v, w) in enumerate(
        [(2**64 + 1, 2**64 + 1), (2**64 + 1, 1), (2**64, -(2**80)), (18446744073709551616.0, None), (-(10**30), 5)])]
    path = tmp_path / "e.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    eng = Engine([_rule()])
    outs = [eng.process(b) for b in read_events(path, batch_size=2)] + [eng.finish()]
    assert not any(o.errors for o in outs)
    assert _typed(_got(outs)) == _typed(_expected(events))
    [row] = _got(outs)
    assert row["d"] == 3 and row["s"] == 2**64 + 7 - 2**80 and row["lo"] == -(10**30) and row["hi"] == 2**64 + 1


def test_a_value_no_aggregate_takes_is_reported_with_its_field() -> None:
    eng = Engine([_rule()])
    out = eng.process([{"k": "a", "ts": 1, "v": [2**64], "w": 1}, {"k": "a", "ts": 2, "v": 2**64, "w": {"x": 1}},
                       {"k": "a", "ts": 3, "v": 2**64 + 1, "w": 2**70}])
    out.extend(eng.finish())  # (an event with a bad value is reported and left out, the others counted)
    reasons = sorted({e["reason"] for e in out.errors})
    assert reasons == [
        "COUNT(DISTINCT v): [18446744073709551616] is a list; expected a string, number or bytes",
        "SUM(w): {'x': 1} is a dict, expected a number",
    ], reasons
    [row] = out.matches
    assert (row["n"], row["c"], row["d"], row["ad"], row["s"], row["hi"]) == (1, 1, 1, 1, 2**70, 2**64 + 1)


MEASURES = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES "
            "APPROX_COUNT_DISTINCT(A.v) AS ad, COUNT(DISTINCT A.v) AS d, SUM(A.v) AS s, MIN(A.v) AS lo, "
            "MAX(A.v) AS hi, COUNT(A.v) AS c AFTER MATCH SKIP PAST LAST ROW PATTERN (A{4} B) DEFINE B AS B.x = 1)")


def test_aggregates_in_measures_over_wide_ints() -> None:
    rnd = random.Random(5)
    eng = Engine([parse_rule_text(MEASURES, "m")])
    events, want = [], []
    for j in range(30):
        vs = [_value(rnd) for _ in range(4)]
        vs = [v if not isinstance(v, float) else 2**70 for v in vs]  # (SUM of ints: exact)
        events += [{"k": 1, "ts": 5 * j + i, "v": v, "x": 0} for i, v in enumerate(vs)]
        events.append({"k": 1, "ts": 5 * j + 4, "v": 0, "x": 1})
        got = [v for v in vs if v is not None]
        want.append((len(set(got)), sum(got) if got else None, min(got, default=None), max(got, default=None), len(got)))
    out = eng.process(events)
    out.extend(eng.finish())
    assert eng.counts()["m"].eval_errors == 0
    assert [(r["ad"], r["d"], r["s"], r["lo"], r["hi"], r["c"]) for r in out.matches] == [(w[0], *w) for w in want]


def test_heavy_hitters_report_wide_ints_as_ints_and_an_infinite_mean_is_inf() -> None:
    sql = ("SELECT k, APPROX_TOP_K(v, 3) AS t, AVG(w) AS a, AVG(v) AS av FROM s "
           "GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)")
    eng = Engine([_rule(sql)])
    vs = [2**64 + 1, 2**64 + 1, -(2**90), 7]
    out = eng.process([{"k": "a", "ts": i, "v": v, "w": w} for i, (v, w) in enumerate(zip(vs, [10**400, 0.5, 1, 2]))])
    out.extend(eng.finish())
    assert not out.errors
    [row] = out.matches
    assert row["t"][0] == [2**64 + 1, 2] and type(row["t"][0][0]) is int
    assert sorted(x[0] for x in row["t"][1:]) == [-(2**90), 7]
    assert row["a"] == float("inf")  # (the mean of 10**400 and small numbers: past a double's range)
    assert row["av"] == sum(vs) / 4


def test_unsigned_64_bit_ints_are_not_their_negative_images() -> None:
    """2**64-1 and -1 have the same 64 bits (as do 2**63 and -2**63): the sketches' hash alone
    would count them as one value; and 2**63 equals the float 2.0**63, one value to Python."""
    for vals, distinct in (([2**64 - 1, -1], 2), ([2**63, -(2**63)], 2), ([2**63, 2.0**63], 1),
                           ([2**64 - 1, -1, 2**64 - 1, 5], 3)):
        events = [{"k": "a", "ts": i, "v": v, "w": 1} for i, v in enumerate(vals)]
        eng = Engine([_rule()])
        rows = [r for o in (eng.process(events), eng.finish()) for r in o.matches]
        assert [(r["d"], r["ad"]) for r in rows] == [(distinct, distinct)], vals


def test_first_seen_tells_unsigned_64_bit_values_and_keys_from_their_images() -> None:
    """FIRST_SEEN (cep/seen.py) hashes keys and values: 2**64-1 is not -1 in either."""
    from cep.seen import SeenFilter, key_hashes
    import numpy as np

    f = SeenFilter()
    first, _ = f.first_seen(key_hashes(["a", "a"]), np.array([2**64 - 1, -1], dtype=object))
    assert first.tolist() == [True, True]
    first, _ = f.first_seen(key_hashes(["a"]), np.array([2**64 - 1], dtype=np.uint64))
    assert first.tolist() == [False]
    keys = key_hashes([2**64 - 1, -1, (2**63, "x"), (-(2**63), "x")])
    assert len(set(keys.tolist())) == 4
