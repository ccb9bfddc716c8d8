"""Windowed analytics rules against exact references: every window type, lateness, sketches, errors."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from cep.analytics import WindowOperator
from cep.engine import Engine
from cep.operator import StateVersionError
from patterns.rules import RuleSet
from sketches import HyperLogLog
from tests.cep.test_analytics_reference import (
    SELECT,
    final_view,
    reference_panes,
    reference_sessions_final,
    reference_sessions_in_order,
    reference_slide,
    rule,
    window_sql,
)


def run(r, events, chunks=None) -> tuple[list[dict], list[dict], list[dict], Engine]:
    """(matches, late, errors, engine) of one rule over events cut into ``chunks`` (sizes)."""
    eng = Engine(RuleSet((r,)))
    matches, late, errors = [], [], []
    i = 0
    for size in chunks or [len(events)]:
        out = eng.process(events[i : i + size])
        matches += out.matches
        late += out.late
        errors += out.errors
        i += size
    assert i == len(events)
    out = eng.finish()
    return matches + out.matches, late + out.late, errors + out.errors, eng


def stream(seed: int, n: int = 300, keys: str = "abcd", span: int = 600, disorder: int = 0) -> list[dict]:
    """Seeded events in roughly increasing time; ``disorder`` ms of jitter puts some out of order."""
    rnd = random.Random(seed)
    ts = sorted(rnd.randrange(span) for _ in range(n))
    out = []
    for t in ts:
        t2 = max(0, t - rnd.randrange(disorder + 1)) if disorder and rnd.random() < 0.3 else t
        out.append({"k": rnd.choice(keys), "ts": t2, "v": rnd.randrange(-5, 50), "u": rnd.randrange(12)})
    return out


# ------------------------------------------------------------------ exact references, every window


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("lateness,disorder", [(0, 0), (0, 30), (25, 20), (40, 80)])
@pytest.mark.parametrize("size,step", [(50, 50), (60, 20), (45, 30)])
def test_tumbling_and_hopping_match_the_reference(seed, lateness, disorder, size, step):
    kind = "TUMBLE" if size == step else "HOP"
    r = rule(SELECT.format(window=window_sql(kind, size, step), min_n=2), lateness)
    ev = stream(seed, disorder=disorder)
    got, late, _errors, eng = run(r, ev)
    want = reference_panes(ev, size, step, lateness, 2)
    assert got == want
    c = eng.counts()["r"]
    assert c.read == c.processed + c.late + c.errors + c.buffered == len(ev)
    assert c.late == len(late)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("size,step", [(50, 50), (60, 20)])
def test_a_keys_first_event_after_the_window_end_is_on_time_as_in_the_reference(seed, size, step):
    """Firing is per (key, window): another key's data in the window does not make this key's
    first event a correction (with HAVING COUNT(*) >= 1 such a row passes at once)."""
    kind = "TUMBLE" if size == step else "HOP"
    r = rule(SELECT.format(window=window_sql(kind, size, step), min_n=1), 40)
    ev = stream(seed, n=150, keys="abcdefghij", disorder=80)  # keys absent from many windows
    got, _late, _errors, _eng = run(r, ev, chunks=[37] * (len(ev) // 37) + [len(ev) % 37])
    assert got == reference_panes(ev, size, step, 40, 1)
    assert any(row["correction"] for row in got)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gap", [5, 20])
def test_sessions_in_order_match_the_reference(seed, gap):
    r = rule(SELECT.format(window=window_sql("SESSION", gap), min_n=2), 0)
    ev = stream(seed)
    got, _late, _err, _eng = run(r, ev)
    assert got == reference_sessions_in_order(ev, gap, 2)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("lateness,disorder", [(0, 40), (30, 25), (60, 100)])
@pytest.mark.parametrize("gap", [4, 15])
def test_sessions_out_of_order_end_in_the_reference_sessions(seed, lateness, disorder, gap):
    """Corrections and retractions applied in order leave exactly the sessions of every event not late."""
    r = rule(SELECT.format(window=window_sql("SESSION", gap), min_n=2), lateness)
    ev = stream(seed, n=200, disorder=disorder)
    got, _late, _err, _eng = run(r, ev)
    assert final_view(got) == reference_sessions_final(ev, gap, lateness, 2)
    if lateness == 0:
        assert not any(x["correction"] for x in got)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("lateness,disorder", [(0, 0), (0, 30), (30, 25)])
@pytest.mark.parametrize("size", [1, 25, 100])
def test_slide_matches_the_reference(seed, lateness, disorder, size):
    r = rule(SELECT.format(window=window_sql("SLIDE", size), min_n=2), lateness)
    ev = stream(seed, n=200, disorder=disorder)
    got, _late, _err, eng = run(r, ev)
    assert got == reference_slide(ev, size, lateness, 2)
    assert eng.counts()["r"].buffered == 0


def test_final_view_of_tumbling_windows_is_every_event_not_late():
    ev = stream(7, disorder=60)
    r = rule(SELECT.format(window=window_sql("TUMBLE", 40), min_n=1), 30)
    got, late, _e, _eng = run(r, ev)
    late_ids = {id(x) for x in late}
    assert not late_ids & {id(e) for e in ev}  # late rows carry copies of the event
    accepted = [e for e in ev if e not in [x["event"] for x in late]]
    exact = Counter((e["k"], e["ts"] // 40 * 40) for e in accepted)
    assert {k: v["n"] for k, v in final_view(got).items()} == dict(exact)


# ------------------------------------------------------------------ lateness and corrections


def test_a_late_event_within_the_lateness_corrects_the_window():
    r = rule("SELECT k, COUNT(*) AS n, window_start FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)", 5)
    op = WindowOperator.from_rule(r)
    assert op.process([{"k": "a", "ts": 1}, {"k": "a", "ts": 11}]).matches == [
        {"k": "a", "n": 1, "window_start": 0, "rule": "r", "correction": False}]
    assert op.process([{"k": "a", "ts": 8}]).matches == []  # clock 11, watermark 6: not late
    assert op.process([{"k": "a", "ts": 15}]).matches == [  # watermark 10: window [0, 10) is final
        {"k": "a", "n": 2, "window_start": 0, "rule": "r", "correction": True}]
    out = op.process([{"k": "a", "ts": 9}])  # behind the watermark 10
    assert out.matches == [] and len(out.late) == 1
    assert out.late[0]["reason"].startswith("late: event time 1970-01-01T00:00:00.009Z is 1 ms behind the watermark")
    assert op.counts.late == 1


def test_a_correction_that_fails_having_is_a_retraction():
    sql = "SELECT k, MAX(v) AS top, window_start FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND) HAVING MIN(v) > 0"
    op = WindowOperator.from_rule(rule(sql, 20))
    assert op.process([{"k": "a", "ts": 1, "v": 3}, {"k": "a", "ts": 10, "v": 1}]).matches[0]["top"] == 3
    op.process([{"k": "a", "ts": 2, "v": -1}])
    got = op.finish().matches  # window [10, 20) on time (threshold 20), then [0, 10) final (10 + 20)
    assert got[1] == {"k": "a", "top": 3, "window_start": 0, "rule": "r", "correction": True, "retract": True}
    assert op.stats.retractions == 1


def test_an_unchanged_window_is_not_re_emitted():
    op = WindowOperator.from_rule(rule(
        "SELECT k, COUNT(DISTINCT u) AS d FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)", 20))
    op.process([{"k": "a", "ts": 1, "u": 1}, {"k": "a", "ts": 10, "u": 1}])
    op.process([{"k": "a", "ts": 3, "u": 1}])  # late, but the distinct count stays 1
    assert op.finish().matches == [{"k": "a", "d": 1, "rule": "r", "correction": False}]


def test_a_late_event_opening_a_passed_window_emits_it_at_once():
    op = WindowOperator.from_rule(rule("SELECT k, COUNT(*) AS n, window_start FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)", 30))
    op.process([{"k": "a", "ts": 25}])
    assert op.process([{"k": "b", "ts": 3}]).matches == [
        {"k": "b", "n": 1, "window_start": 0, "rule": "r", "correction": False}]


def test_sessions_bridged_by_a_late_event_retract_the_swallowed_session():
    sql = "SELECT k, COUNT(*) AS n, window_start, window_end FROM s GROUP BY k, SESSION(ts, INTERVAL '10' MILLISECOND)"
    op = WindowOperator.from_rule(rule(sql, 100))
    first = op.process([{"k": "a", "ts": 0}, {"k": "a", "ts": 15}, {"k": "a", "ts": 40}]).matches
    assert [(r["window_start"], r["n"]) for r in first] == [(0, 1), (15, 1)]
    op.process([{"k": "a", "ts": 8}])  # within 10 ms of both: one session [0, 25)
    rows = op.finish().matches
    assert {"k": "a", "n": 1, "window_start": 15, "window_end": 25, "rule": "r", "correction": True, "retract": True} in rows
    assert {"k": "a", "n": 3, "window_start": 0, "window_end": 25, "rule": "r", "correction": True} in rows
    assert final_view(first + rows) == {
        ("a", 0): {"k": "a", "n": 3, "window_start": 0, "window_end": 25, "rule": "r", "correction": None},
        ("a", 40): {"k": "a", "n": 1, "window_start": 40, "window_end": 50, "rule": "r", "correction": None},
    }


# ------------------------------------------------------------------ aggregates and sketches


def test_every_exact_aggregate_against_python():
    rnd = random.Random(3)
    ev = [{"k": rnd.choice("xy"), "ts": rnd.randrange(1000), "f": rnd.choice([1.5, -2.25, None, 7.0]),
           "i": rnd.choice([1, 2, None, 10**15]), "s": rnd.choice(["pear", "apple", None, "fig"])} for _ in range(400)]
    ev.sort(key=lambda e: e["ts"])
    sql = """SELECT k, COUNT(*) AS n, COUNT(f) AS nf, SUM(i) AS si, SUM(f) AS sf, AVG(i) AS ai, MIN(f) AS lf,
               MAX(i) AS hi, MIN(s) AS ls, MAX(s) AS hs, COUNT(DISTINCT s) AS ds, window_start
             FROM s GROUP BY k, TUMBLE(ts, INTERVAL '100' MILLISECOND)"""
    got, _l, _e, _eng = run(rule(sql), ev)
    assert len(got) == 20
    for row in got:
        rows = [e for e in ev if e["k"] == row["k"] and row["window_start"] <= e["ts"] < row["window_start"] + 100]
        fs = [e["f"] for e in rows if e["f"] is not None]
        is_ = [e["i"] for e in rows if e["i"] is not None]
        ss = [e["s"] for e in rows if e["s"] is not None]
        assert row["n"] == len(rows) and row["nf"] == len(fs)
        assert row["si"] == (sum(is_) if is_ else None) and type(row["si"]) is (int if is_ else type(None))
        assert row["sf"] == pytest.approx(sum(fs)) if fs else row["sf"] is None
        assert row["ai"] == pytest.approx(sum(is_) / len(is_))
        assert row["lf"] == (min(fs) if fs else None) and row["hi"] == max(is_)
        assert (row["ls"], row["hs"], row["ds"]) == (min(ss), max(ss), len(set(ss)))


def test_approx_count_distinct_is_the_hyperloglog_of_the_window():
    """Sparse and dense cells, hopping merges: bit-for-bit the sketch one HyperLogLog would hold."""
    rnd = random.Random(11)
    ev = [{"k": rnd.choice("ab"), "ts": t, "u": rnd.randrange(3000) if rnd.random() < 0.7 else f"h{rnd.randrange(500)}"}
          for t in sorted(rnd.randrange(4000) for _ in range(6000))]
    sql = """SELECT k, APPROX_COUNT_DISTINCT(u) AS est, COUNT(DISTINCT u) AS exact, window_start
             FROM s GROUP BY k, HOP(ts, INTERVAL '500' MILLISECOND, INTERVAL '1500' MILLISECOND)"""
    for p in (8, 12):
        r = rule(sql, sketches=f"    sketches: {{hll_precision: {p}}}\n")
        got, _l, _e, _eng = run(r, ev, chunks=[1000] * 6)
        dense = 0
        for row in got:
            vals = [e["u"] for e in ev if e["k"] == row["k"] and row["window_start"] <= e["ts"] < row["window_start"] + 1500]
            hll = HyperLogLog(p)
            hll.update(vals)
            dense += not hll.is_sparse
            assert row["est"] == round(hll.estimate())
            assert row["exact"] == len(set(vals))
            assert abs(row["est"] - row["exact"]) <= 3 * hll.standard_error * row["exact"] + 1
        assert (dense > 0) == (p == 8)


@pytest.mark.parametrize("window,lateness,disorder", [
    ("HOP(ts, INTERVAL '500' MILLISECOND, INTERVAL '1500' MILLISECOND)", 0, 0),
    ("TUMBLE(ts, INTERVAL '1' SECOND)", 300, 250),
    ("SESSION(ts, INTERVAL '3' MILLISECOND)", 0, 0),
])
def test_hll_sketch_is_the_datasketches_image_of_the_windows_hyperloglog(window, lateness, disorder):
    """LIST, SET and HLL images, sparse and dense cells, merged panes and sessions, corrections:
    each window's last row holds, byte for byte, HyperLogLog(p).to_datasketches() of its values."""
    rnd = random.Random(17)
    ev = []
    for t in sorted(rnd.randrange(4000) for _ in range(5000)):
        k = rnd.choices("abcd", (850, 140, 7, 3))[0]  # c and d: small windows (SET and LIST images)
        u = rnd.randrange(3000) if rnd.random() < 0.6 else rnd.choice([f"h{rnd.randrange(300)}", "", None])
        ev.append({"k": k, "ts": max(0, t - rnd.randrange(disorder + 1)), "u": u})
    sql = f"SELECT k, HLL_SKETCH(u) AS sk, APPROX_COUNT_DISTINCT(u) AS d, window_start, window_end FROM s GROUP BY k, {window}"
    modes = Counter()
    for p in (8, 12):
        r = rule(sql, lateness, sketches=f"    sketches: {{hll_precision: {p}}}\n")
        got, late, _e, _eng = run(r, ev, chunks=[700] * 7 + [100])
        assert not late
        if disorder:
            assert any(row["correction"] for row in got)
        for row in final_view(got).values():
            vals = [e.get("u") for e in ev if e["k"] == row["k"] and row["window_start"] <= e["ts"] < row["window_end"]]
            hll = HyperLogLog(p)
            hll.update(vals)
            assert row["sk"] == hll.to_datasketches()
            assert np.array_equal(HyperLogLog.from_datasketches(row["sk"]).registers(), hll.registers())
            assert row["d"] == round(hll.estimate())
            modes[row["sk"][7] & 3] += 1
    assert set(modes) == {0, 1, 2}  # DataSketches' LIST, SET and HLL modes


def test_hll_sketch_survives_snapshots_and_batching():
    sql = """SELECT k, HLL_SKETCH(u) AS sk, window_start FROM s
             GROUP BY k, HOP(ts, INTERVAL '20' MILLISECOND, INTERVAL '60' MILLISECOND)"""
    r = rule(sql, 30, sketches="    sketches: {hll_precision: 6}\n")
    ev = stream(4, n=400, disorder=40)
    want, _l, _e, _whole = run(r, ev, chunks=[400])
    assert run(r, ev, chunks=[1] * 400)[0] == want
    a = Engine(RuleSet((r,)))
    got = a.process(ev[:150]).matches
    b = Engine(RuleSet((r,)))
    b.restore(a.snapshot())
    assert got + b.process(ev[150:]).matches + b.finish().matches == want


def test_cep_run_writes_sketches_as_base64_in_json_and_csv_and_binary_in_parquet(tmp_path, capsys):
    import base64
    import csv
    import json

    import pyarrow.parquet as pq

    from cep.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n  - name: users\n    kind: analytics\n    sql: |\n"
        "      SELECT k, HLL_SKETCH(u) AS users, window_start FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)\n")
    ev = [{"k": k, "ts": t, "u": f"u{t % 7}"} for t in range(30) for k in "ab"]
    events = tmp_path / "ev.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in ev))
    want = {}
    for k in "ab":
        for w in (0, 10, 20):
            hll = HyperLogLog(12)
            hll.update([e["u"] for e in ev if e["k"] == k and w <= e["ts"] < w + 10])
            want[(k, w)] = hll.to_datasketches()
    assert main(["run", str(rules), "--input", str(events), "-o", str(tmp_path / "o.jsonl"), "-q"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert {(r["k"], r["window_start"]): base64.b64decode(r["users"]) for r in rows} == want
    assert main(["run", str(rules), "--input", str(events), "-o", str(tmp_path / "o.csv"), "-q"]) == 0
    with open(tmp_path / "o.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["k"], int(r["window_start"])): base64.b64decode(r["users"]) for r in rows} == want
    assert main(["run", str(rules), "--input", str(events), "-o", str(tmp_path / "o.parquet"), "-q"]) == 0
    table = pq.read_table(tmp_path / "o.parquet")
    assert str(table.schema.field("users").type) == "binary"
    assert {(r["k"], r["window_start"]): r["users"] for r in table.to_pylist()} == want


def test_approx_top_k_within_the_misra_gries_bound():
    rnd = random.Random(5)
    urls = [f"/p{int(rnd.paretovariate(1.2))}" for _ in range(5000)]
    ev = [{"ts": i, "url": u} for i, u in enumerate(urls)]
    sql = "SELECT APPROX_TOP_K(url, 5) AS top, COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '1' SECOND)"
    got, _l, _e, _eng = run(rule(sql, sketches="    sketches: {topk_capacity: 8}\n"), ev, chunks=[700] * 7 + [100])
    assert [r["n"] for r in got] == [1000] * 5
    for w, row in enumerate(got):
        exact = Counter(urls[w * 1000 : (w + 1) * 1000])
        bound = 1000 / (max(8, 4 * 5) + 1)
        assert len(row["top"]) == 5
        for value, count in row["top"]:
            assert exact[value] - bound <= count <= exact[value]
        assert row["top"][0][0] == exact.most_common(1)[0][0]


def test_approx_count_never_under_counts_and_stays_within_epsilon():
    rnd = random.Random(8)
    ev = [{"k": rnd.choice(["GET", "POST", "HEAD"]), "ts": i, "ip": f"10.0.0.{rnd.randrange(40)}"} for i in range(3000)]
    sql = """SELECT k, APPROX_COUNT(ip, '10.0.0.7') AS hits, window_start FROM s
             GROUP BY k, HOP(ts, INTERVAL '250' MILLISECOND, INTERVAL '1' SECOND)"""
    got, _l, _e, _eng = run(rule(sql, sketches="    sketches: {cms_width: 64, cms_depth: 4}\n"), ev, chunks=[333] * 9 + [3])
    for row in got:
        window = [e for e in ev if row["window_start"] <= e["ts"] < row["window_start"] + 1000]
        true = sum(1 for e in window if e["k"] == row["k"] and e["ip"] == "10.0.0.7")
        assert true <= row["hits"] <= true + np.e / 64 * len(window)


def test_first_seen_counts_values_new_for_the_key():
    rnd = random.Random(2)
    ev = [{"user": rnd.choice("abc"), "ts": i * 10, "ip": rnd.randrange(30)} for i in range(600)]
    sql = """SELECT user, FIRST_SEEN(ip) AS new_ips, COUNT(DISTINCT ip) AS ips, window_start FROM s
             GROUP BY user, TUMBLE(ts, INTERVAL '1' SECOND)"""
    got, _l, _e, _eng = run(rule(sql), ev, chunks=[50] * 12)
    seen: dict[str, set] = {}
    want = Counter()
    for e in ev:
        if e["ip"] not in seen.setdefault(e["user"], set()):
            seen[e["user"]].add(e["ip"])
            want[(e["user"], e["ts"] // 1000 * 1000)] += 1
    assert {(r["user"], r["window_start"]): r["new_ips"] for r in got} == {k: want.get(k, 0) for k in
                                                                        {(r["user"], r["window_start"]) for r in got}}
    assert sum(r["new_ips"] for r in got) == 90


def test_prev_window_compares_with_the_previous_window_of_the_key():
    ev = [{"url": "/a", "ts": t, "host": h} for t, h in [(0, 1), (5, 2), (10, 1), (12, 2), (14, 3), (15, 4), (17, 5), (18, 6)]]
    ev += [{"url": "/b", "ts": 19, "host": 1}, {"url": "/a", "ts": 25, "host": 9}]
    sql = """SELECT url, APPROX_COUNT_DISTINCT(host) AS visitors, PREV_WINDOW(APPROX_COUNT_DISTINCT(host)) AS before,
                    PREV_WINDOW(SUM(host)) AS before_sum, window_start
             FROM hits GROUP BY url, TUMBLE(ts, INTERVAL '10' MILLISECOND)
             HAVING visitors >= 3 * before"""
    got, _l, _e, _eng = run(rule(sql), ev)
    assert got == [
        {"url": "/a", "visitors": 2, "before": 0, "before_sum": None, "window_start": 0, "rule": "r", "correction": False},
        {"url": "/a", "visitors": 6, "before": 2, "before_sum": 3, "window_start": 10, "rule": "r", "correction": False},
        {"url": "/b", "visitors": 1, "before": 0, "before_sum": None, "window_start": 10, "rule": "r", "correction": False},
    ]


def test_where_filters_events_and_expressions_evaluate():
    ev = [{"host": "h", "ts": i, "status": s, "bytes": b} for i, (s, b) in enumerate([(404, 10), (200, 5), (404, None), (404, 7)])]
    sql = """SELECT host, COUNT(*) AS misses, COALESCE(SUM(bytes), 0) / COUNT(*) AS per_miss, window_end - window_start AS width
             FROM s WHERE status = 404 AND host LIKE 'h%' GROUP BY host, TUMBLE(ts, INTERVAL '1' MINUTE) HAVING misses >= 3"""
    got, _l, _e, eng = run(rule(sql), ev)
    assert got == [{"host": "h", "misses": 3, "per_miss": 17 / 3, "width": 60000, "rule": "r", "correction": False}]
    assert eng.operators["r"].stats.filtered == 1 and eng.counts()["r"].processed == 4


def test_no_group_keys_and_multiple_keys():
    ev = [{"a": a, "b": b, "ts": i} for i, (a, b) in enumerate([(1, "x"), (1, "y"), (2, "x"), (1, "x")])]
    got, *_ = run(rule("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '1' SECOND)"), ev)
    assert got == [{"n": 4, "rule": "r", "correction": False}]
    got, *_ = run(rule("SELECT a, b, COUNT(*) AS n FROM s GROUP BY a, b, TUMBLE(ts, INTERVAL '1' SECOND)"), ev)
    assert [(r["a"], r["b"], r["n"]) for r in got] == [(1, "x", 2), (1, "y", 1), (2, "x", 1)]


def test_slide_rows_can_read_the_current_event():
    ev = [{"host": "h", "ts": t, "url": u} for t, u in [(0, "/a"), (1, "/a"), (2, "/b"), (3, "/a"), (50, "/a")]]
    sql = """SELECT host, url, APPROX_COUNT(url, url) AS same_url, COUNT(*) AS n, window_end
             FROM s GROUP BY host, SLIDE(ts, INTERVAL '10' MILLISECOND) HAVING APPROX_COUNT(url, url) >= 2"""
    got, *_ = run(rule(sql), ev)
    assert got == [
        {"host": "h", "url": "/a", "same_url": 2, "n": 2, "window_end": 1, "rule": "r", "correction": False},
        {"host": "h", "url": "/a", "same_url": 3, "n": 4, "window_end": 3, "rule": "r", "correction": False},
    ]


# ------------------------------------------------------------------ bad events, inputs, state


def test_bad_events_go_to_errors_with_line_and_reason():
    ev = [{"k": "a", "ts": 1, "v": 1}, {"k": None, "ts": 2, "v": 1}, {"k": "a", "ts": "soon", "v": 1},
          {"k": "a", "ts": 3, "v": "many"}, {"k": ["x"], "ts": 4, "v": 1}, {"k": "a", "ts": 5, "v": True}]
    got, _late, errors, eng = run(rule("SELECT k, SUM(v) AS s FROM s GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)"), ev)
    assert got == [{"k": "a", "s": 1, "rule": "r", "correction": False}]
    assert [(e["line"], e["reason"]) for e in errors] == [
        (2, "group key field 'k' is missing (null)"),
        (3, "event-time field 'ts': 'soon' is neither epoch milliseconds nor an ISO-8601 time"),
        (4, "SUM(v): 'many' is a str, expected a number"),
        (5, "group key field 'k' holds a list; expected a string or a number"),
        (6, "SUM(v): True is a boolean, expected a number"),
    ]
    c = eng.counts()["r"]
    assert (c.read, c.processed, c.errors) == (6, 1, 5)


def test_min_max_keep_the_kind_of_their_first_values():
    op = WindowOperator.from_rule(rule("SELECT k, MIN(v) AS lo FROM s GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)"))
    op.process([{"k": "a", "ts": 1, "v": "b"}])
    out = op.process([{"k": "a", "ts": 2, "v": 3}, {"k": "a", "ts": 3, "v": "a"}])
    assert out.errors[0]["reason"] == "MIN(v): 3 is a int; earlier values were strings"
    assert op.finish().matches == [{"k": "a", "lo": "a", "rule": "r", "correction": False}]


def test_unhashable_values_are_bad_events():
    out = WindowOperator.from_rule(rule("SELECT COUNT(DISTINCT v) AS d FROM s GROUP BY TUMBLE(ts, INTERVAL '1' SECOND)")).process(
        [{"ts": 1, "v": {"a": 1}}, {"ts": 2, "v": 2}])
    assert out.errors[0]["reason"].startswith("COUNT(DISTINCT v): {'a': 1} is a dict; expected a string, number or bytes")


def test_arrow_pandas_and_iso_times_give_the_same_rows():
    ev = stream(1, n=100)
    r = rule(SELECT.format(window=window_sql("TUMBLE", 100), min_n=1))
    want, *_ = run(r, ev)
    table = pa.Table.from_pylist(ev)
    eng = Engine(RuleSet((r,)))
    assert eng.process(table).matches + eng.finish().matches == want
    eng = Engine(RuleSet((r,)))
    assert eng.process(table.to_pandas()).matches + eng.finish().matches == want
    iso = [{**e, "ts": np.datetime64(e["ts"], "ms").astype(str) + "Z"} for e in ev]
    got, *_ = run(r, iso)
    assert got == want


@pytest.mark.parametrize("kind,size,step", [("TUMBLE", 50, 50), ("HOP", 60, 20), ("SESSION", 8, 0), ("SLIDE", 30, 0)])
def test_snapshot_and_restore_mid_stream_change_nothing(kind, size, step):
    sql = """SELECT k, COUNT(*) AS n, APPROX_COUNT_DISTINCT(u) AS au, FIRST_SEEN(u) AS fu, APPROX_TOP_K(u, 2) AS top,
                    APPROX_COUNT(u, 3) AS c3, MIN(v) AS lo, window_start FROM s GROUP BY k, {w}"""
    r = rule(sql.format(w=window_sql(kind, size, step)), 30)
    ev = stream(4, n=160, disorder=40)
    want, _l, _e, whole = run(r, ev, chunks=[80, 80])
    for cut in (1, 97):
        a = Engine(RuleSet((r,)))
        got = a.process(ev[:cut]).matches
        b = Engine(RuleSet((r,)))
        b.restore(a.snapshot())
        got += b.process(ev[cut:]).matches + b.finish().matches
        assert got == want
        assert b.counts() == whole.counts()


def test_restore_refuses_another_rule_or_version():
    a = WindowOperator.from_rule(rule("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '1' SECOND)"))
    b = WindowOperator.from_rule(rule("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '2' SECOND)"))
    with pytest.raises(StateVersionError, match="the snapshot was taken for a different analytics rule"):
        b.restore(a.snapshot())
    with pytest.raises(StateVersionError, match="snapshot has state version 9, this engine reads version 2"):
        a.restore(b"\x09")


def test_state_is_bounded_by_open_windows():
    r = rule("SELECT k, APPROX_COUNT_DISTINCT(u) AS d FROM s GROUP BY k, HOP(ts, INTERVAL '10' MILLISECOND, INTERVAL '30' MILLISECOND)", 5)
    op = WindowOperator.from_rule(r)
    for i in range(50):
        op.process([{"k": f"key{j}", "ts": i * 10 + j, "u": j} for j in range(5)])
    assert len(op.engine.panes) <= 5 and len(op.engine.wins) <= 5
    with_prev = WindowOperator.from_rule(rule(
        "SELECT k, PREV_WINDOW(COUNT(*)) AS p FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)"))
    for i in range(50):
        with_prev.process([{"k": "a", "ts": i * 10}])
    assert sorted(with_prev.engine.panes) == [48, 49]


def test_forgotten_keys_are_released():
    op = WindowOperator.from_rule(rule("SELECT k, COUNT(*) AS n FROM s GROUP BY k, TUMBLE(ts, INTERVAL '10' MILLISECOND)"))
    for i in range(20):
        op.process(pa.table({"k": [f"{i}-{j}" for j in range(4000)], "ts": [i * 10] * 4000}))
    assert op.stats.matches == 76_000  # the last window is still open
    assert len(op._key_ids) < 30_000  # 80,000 keys seen, the dead ones forgotten


@pytest.mark.parametrize("window", ["SESSION(ts, INTERVAL '4' MILLISECOND)", "TUMBLE(ts, INTERVAL '4' MILLISECOND)"])
def test_min_max_of_nulls_before_the_first_string_stay_null_in_any_batching(window):
    """Events whose value is NULL arrive before the first value fixes MIN/MAX's kind (strings): a
    window of them alone is NULL whatever the batching, never the numbers' sentinel."""
    from cep.analytics import WindowOperator
    from patterns.analytics import compile_analytics

    spec = compile_analytics("SELECT k, MAX(x) AS top, MIN(x) AS lo FROM t GROUP BY k, " + window)
    ev = [{"k": 3, "ts": 37, "x": None}, {"k": 0, "ts": 50, "x": None}, {"k": 4, "ts": 58, "x": None},
          {"k": 5, "ts": 59, "x": "t4"}]
    got = []
    for batches in ([[e] for e in ev], [ev]):
        op = WindowOperator(spec, name="r")
        rows = [r for b in batches for r in op.process(b).matches] + op.finish().matches
        got.append([(r["k"], r["top"], r["lo"]) for r in rows])
    assert got[0] == got[1] == [(3, None, None), (0, None, None), (4, None, None), (5, "t4", "t4")]
