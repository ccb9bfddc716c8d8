"""``cep state``: a durable run's checkpoint shown per rule and key, for every rule kind, and its error messages."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from cep import Engine
from cep.cli.command import main
from cep.durable.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from patterns import load_rules

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
DATA = RULES / "data"


def durable_run(tmp: Path, rules: str, data: str, lines: int, name: str = "st") -> Path:
    """``cep run RULES --state`` over the first ``lines`` lines of a bundled data file; the state directory."""
    src = tmp / f"{name}-in.jsonl"
    src.write_text("".join((DATA / data).read_text().splitlines(keepends=True)[:lines]))
    state = tmp / name
    assert main(["run", str(RULES / rules), "--input", str(src), "--state", str(state),
                 "--output", str(tmp / f"{name}-out.jsonl"), "-q"]) == 0
    return state


def state_json(capsys, *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["state", *args, "--json", "--limit", "0"]) == 0
    return json.loads(capsys.readouterr().out)


def rule_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in doc["rules"] if r["name"] == name)


def key_of(rule: dict[str, Any], **key: Any) -> dict[str, Any]:
    return next(k for k in rule["keys"] if k["key"] == key)


@pytest.fixture(scope="module")
def trading(tmp_path_factory) -> Path:
    # 100 lines: 20 trading days of five symbols, through 2017-01-31
    return durable_run(tmp_path_factory.mktemp("trading"), "trading.yaml", "sp500_daily_2017_sample.jsonl", 100)


def test_pattern_partial_matches_with_their_rows(trading: Path, capsys) -> None:
    doc = state_json(capsys, str(trading))
    v = rule_of(doc, "v_shape")
    # by hand: AMZN closed 839.15 on 01-26, then 835.77, 830.38, 823.48: a start row and three falls,
    # which a fourth fall or a rise may continue (START_ROW DOWN{2,} UP+)
    amzn = key_of(v, symbol="AMZN")
    first = amzn["partial_matches"][0]
    assert [(r["variable"], r["values"]["date"], r["values"]["close"]) for r in first["rows"]] == [
        ("START_ROW", "2017-01-26", 839.15), ("DOWN", "2017-01-27", 835.77),
        ("DOWN", "2017-01-30", 830.38), ("DOWN", "2017-01-31", 823.48)]
    assert first["waiting_for"] == ["DOWN", "UP"]
    assert first["variables"] == {"START_ROW": [16], "DOWN": [17, 18, 19]}  # row 16: the 17th trading day
    assert first["deadline"] is None  # no WITHIN
    # three_up_then_drop: PATTERN (R{3} D) WITHIN INTERVAL '7' DAY; deadlines are start + 7 days
    t = rule_of(doc, "three_up_then_drop")
    for k in t["keys"]:
        for pm in k["partial_matches"]:
            assert pm["deadline"] == pm["start_time"] + 7 * 86_400_000
            assert set(pm["variables"]) == {"R"} and pm["waiting_for"] in (["R"], ["D"])
            closes = [r["values"]["close"] for r in pm["rows"]]
            assert closes == sorted(closes) and len(set(closes)) == len(closes)  # rising closes
    # the totals are the engine's own count of live partial matches, over the same events
    eng = Engine(load_rules(str(RULES / "trading.yaml")))
    eng.process([json.loads(x) for x in (trading.parent / "st-in.jsonl").read_text().splitlines()])
    for name in ("v_shape", "three_up_then_drop"):
        assert rule_of(doc, name)["totals"]["partial_matches"] == eng.operators[name].live_partial_matches()
        assert rule_of(doc, name)["watermark"] == eng.operators[name].watermark
    assert v["watermark_time"] == "2017-01-31T00:00:00.000Z"


def test_offsets_outputs_and_json_shape(trading: Path, capsys) -> None:
    doc = state_json(capsys, str(trading))
    assert set(doc) == {"state", "kind", "checkpoint", "finished", "rules_path", "input", "lines", "batches",
                        "offsets", "outputs", "time_unit", "rules", "notes"}
    src = trading.parent / "st-in.jsonl"
    assert doc["kind"] == "durable" and doc["lines"] == 100 and doc["finished"] is False
    assert doc["offsets"] == {"st-in.jsonl": {"bytes": src.stat().st_size, "lines": 100}}
    out = trading.parent / "st-out.jsonl"
    assert doc["outputs"] == {"output": {"path": str(out), "bytes": out.stat().st_size}}
    assert doc["rules_path"] == str(RULES / "trading.yaml")
    r = doc["rules"][0]
    assert set(r) == {"name", "kind", "watermark", "watermark_time", "counts", "totals", "keys", "sketches", "notes"}
    assert r["counts"]["read"] == 100 and r["counts"]["matches"] == len(
        [x for x in out.read_text().splitlines() if '"rule":"v_shape"' in x])
    k = r["keys"][0]
    assert {"key", "partial_matches", "buffered", "matches_so_far", "rows_retained", "deadline"} <= set(k)
    pm = k["partial_matches"][0]
    assert {"start_row", "start_time", "deadline", "runs", "waiting_for", "rows", "variables"} <= set(pm)


def test_text_output_and_filters(trading: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["state", str(trading), "--rule", "v_shape", "--key", "AMZN"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"state {trading}: checkpoint ")
    assert "    st-in.jsonl: byte " in out and "(line 100)" in out
    assert "rule v_shape (pattern): watermark 2017-01-31T00:00:00.000Z" in out
    assert "rule three_up_then_drop" not in out
    assert "  key AMZN: " in out and "key AAPL" not in out
    assert "waiting for DOWN or UP" in out
    assert '      DOWN       row 19  {"symbol":"AMZN","date":"2017-01-31","close":823.48}' in out
    assert main(["state", str(trading), "--rule", "v_shape", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("  key ") == 1 and "4 more keys with state not shown (--limit 1)" in out
    assert main(["state", str(trading), "--key", "NOPE"]) == 0
    assert "no state for key 'NOPE'" in capsys.readouterr().out


def test_analytics_windows_aggregates_and_sketch_sizes(tmp_path: Path, capsys) -> None:
    state = durable_run(tmp_path, "weblogs.yaml", "nasa_http_sample.jsonl", 1500)
    doc = state_json(capsys, str(state))
    events = [json.loads(x) for x in (tmp_path / "st-in.jsonl").read_text().splitlines()]
    # distinct_urls_per_host: TUMBLE 10 minutes per host; every open window against a count by hand
    r = rule_of(doc, "distinct_urls_per_host")
    assert r["totals"]["open_windows"] == sum(len(k["windows"]) for k in r["keys"]) > 0
    per: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        per[(e["host"], e["time"] // 600_000 * 600_000)].append(e)
    for k in r["keys"]:
        for w in k["windows"]:
            rows = per[(k["key"]["host"], w["window_start"])]
            assert w["window_end"] == w["window_start"] + 600_000 and w["status"] == "open"
            got = {a["name"]: a for a in w["aggregates"]}
            assert w["events"] == got["requests"]["value"] == len(rows)
            assert got["bytes"]["value"] == sum(x["bytes"] or 0 for x in rows)
            distinct = len({x["url"] for x in rows})
            assert got["urls"]["value"] == distinct  # HyperLogLog is exact this small
            assert got["urls"]["sketch"] == {"kind": "hyperloglog", "precision": 12, "form": "sparse",
                                             "registers": distinct, "bytes": 4 * distinct}
    # a SESSION rule (long_visits) and a rule without keys holding a Bloom filter (first_seen_clients)
    long_visits = rule_of(doc, "long_visits")
    assert long_visits["keys"] and all(w["window_end"] > w["window_start"] for k in long_visits["keys"]
                                       for w in k["windows"])
    fs = rule_of(doc, "first_seen_clients")
    assert fs["sketches"][0]["kind"] == "scalable bloom filter" and fs["sketches"][0]["bytes"] > 0
    assert [k["key"] for k in fs["keys"]] == [{}]
    top = rule_of(doc, "top_urls_per_hour")["keys"][0]["windows"][0]
    hour = [e for e in events if e["time"] // 3_600_000 * 3_600_000 == top["window_start"]]
    agg = {a["name"]: a for a in top["aggregates"]}
    url, n = Counter(e["url"] for e in hour).most_common(1)[0]
    assert top["events"] == agg["requests"]["value"] == len(hour)
    # heavy hitters (Misra-Gries, 64 counters) undercount by at most events / counters
    assert agg["top_urls"]["value"][0][0] == url and n - len(hour) // 64 <= agg["top_urls"]["value"][0][1] <= n
    assert agg["top_urls"]["sketch"]["kind"] == "top-k"
    # SLIDE (host_burst) keeps rows, not windows
    burst = rule_of(doc, "host_burst")
    assert all("rows_kept" in k and "pending_events" in k for k in burst["keys"])
    capsys.readouterr()
    assert main(["state", str(state), "--rule", "distinct_urls_per_host", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert " open, " in out and "[hyperloglog: form sparse, registers " in out


def test_search_rules_hold_counters_only(tmp_path: Path, capsys) -> None:
    state = durable_run(tmp_path, "media.yaml", "headlines_sample.jsonl", 500)
    doc = state_json(capsys, str(state))
    out = [json.loads(x) for x in (tmp_path / "st-out.jsonl").read_text().splitlines()]
    for name in ("company_mentions", "desk_alerts"):
        r = rule_of(doc, name)
        assert r["kind"] == "search" and r["keys"] == [] and r["counts"]["read"] == 500
        assert r["counts"]["matches"] == sum(1 for x in out if x["rule"] == name)
        assert r["notes"] == ["a search rule keeps no per-key state: each document is matched on its own"]
    assert rule_of(doc, "busy_news_days")["kind"] == "analytics"


def test_absence_partial_matches_wait_for_their_deadline(tmp_path: Path, capsys) -> None:
    state = durable_run(tmp_path, "orders.yaml", "orders.jsonl", 200)
    doc = state_json(capsys, str(state))
    r = rule_of(doc, "not_shipped_within_2_days")
    assert r["totals"]["partial_matches"] > 0
    for k in r["keys"]:
        for pm in k["partial_matches"]:
            assert pm["waiting_for"] == ["NOT S|C"]
            assert pm["deadline"] == pm["start_time"] + 2 * 86_400_000 > r["watermark"]
            assert pm["rows"][0]["values"]["type"] == "placed"
            assert pm["rows"][0]["values"]["order_id"] == k["key"]["order_id"]


# ---------------------------------------------------------------------------------- errors


def run_state(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["state", *args])
    return code, capsys.readouterr().err


def test_not_a_state_directory(tmp_path: Path, capsys) -> None:
    code, err = run_state(capsys, str(tmp_path / "nowhere"))
    assert code == 2
    assert err == (f"cep state: {tmp_path / 'nowhere'} does not exist; give the --state directory of a durable "
                   "run (cep run ... --state DIR)\n")
    (tmp_path / "empty").mkdir()
    code, err = run_state(capsys, str(tmp_path / "empty"))
    assert code == 2
    assert err == (f"cep state: {tmp_path / 'empty'} holds no checkpoint file: it is not the state directory of a "
                   "durable run (cep run ... --state DIR writes DIR/checkpoint when it starts)\n")
    (tmp_path / "file").write_text("x")
    code, err = run_state(capsys, str(tmp_path / "file"))
    assert code == 2 and "is not a directory" in err


def copy_state(src: Path, dst: Path) -> Path:
    dst.mkdir()
    (dst / "checkpoint").write_bytes((src / "checkpoint").read_bytes())
    return dst


def test_damaged_and_foreign_checkpoints(trading: Path, tmp_path: Path, capsys) -> None:
    bad = copy_state(trading, tmp_path / "damaged")
    data = bytearray((bad / "checkpoint").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / "checkpoint").write_bytes(bytes(data))
    code, err = run_state(capsys, str(bad))
    assert code == 3
    assert err == f"cep state: {bad / 'checkpoint'} is damaged (checksum mismatch); use a new --state directory\n"

    other = copy_state(trading, tmp_path / "format")
    data = bytearray((other / "checkpoint").read_bytes())
    data[8] = 9  # the checkpoint format byte after the magic
    (other / "checkpoint").write_bytes(bytes(data))
    code, err = run_state(capsys, str(other))
    assert code == 3 and "was written by checkpoint format 9, this engine reads format 1" in err

    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "checkpoint").write_bytes(b"not a checkpoint at all, but long enough to look at" * 2)
    code, err = run_state(capsys, str(tmp_path / "junk"))
    assert code == 3 and err.endswith("is not a cep checkpoint; use another --state directory\n")


def rewrite_snapshot(src: Path, dst: Path, snapshot: bytes) -> Path:
    dst.mkdir()
    ck = read_checkpoint(str(src))
    assert ck is not None
    write_checkpoint(str(dst), Checkpoint(ck.meta, snapshot))
    return dst


def test_a_snapshot_of_another_engine_version_or_crafted(trading: Path, tmp_path: Path, capsys) -> None:
    ck = read_checkpoint(str(trading))
    assert ck is not None
    newer = rewrite_snapshot(trading, tmp_path / "newer", ck.snapshot[:6] + bytes([2]) + ck.snapshot[7:])
    code, err = run_state(capsys, str(newer))
    assert code == 3
    assert err == ("cep state: the engine snapshot cannot be read: not an engine snapshot of this version (expected "
                   "magic CEPENG and version 1); start from an empty state or use the engine that wrote it\n")

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    import pickle

    crafted = rewrite_snapshot(trading, tmp_path / "crafted", b"CEPENG\x01" + pickle.dumps(Evil()))
    code, err = run_state(capsys, str(crafted))
    assert code == 3 and "refused to load posix.system" in err and "pwned" not in err


def test_rules_that_do_not_fit_the_state(trading: Path, tmp_path: Path, capsys) -> None:
    changed = tmp_path / "trading.yaml"
    changed.write_text((RULES / "trading.yaml").read_text().replace("PATTERN (R{3} D)", "PATTERN (R{4} D)"))
    code, err = run_state(capsys, str(trading), "--rules", str(changed))
    assert code == 2
    assert err == (f"cep state: {changed} does not fit the state in {trading}: rule 'three_up_then_drop' changed "
                   "(statement or options). A restart with this file would start those rules empty; leave out "
                   "--rules to see the state with the rules that wrote it\n")
    # the same text with another description fits: the state is read with it
    same = tmp_path / "same.yaml"
    same.write_text((RULES / "trading.yaml").read_text().replace("description: a fall", "description: A fall"))
    code, err = run_state(capsys, str(trading), "--rules", str(same))
    assert code == 0 and err == ""


def test_rule_file_changed_since_the_checkpoint_is_a_note(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text((RULES / "trading.yaml").read_text())
    src = tmp_path / "in.jsonl"
    src.write_text("".join((DATA / "sp500_daily_2017_sample.jsonl").read_text().splitlines(keepends=True)[:50]))
    assert main(["run", str(rules), "--input", str(src), "--state", str(tmp_path / "st"),
                 "--output", str(tmp_path / "o.jsonl"), "-q"]) == 0
    rules.write_text(rules.read_text().replace("PATTERN (R{3} D)", "PATTERN (R{4} D)"))
    capsys.readouterr()
    assert main(["state", str(tmp_path / "st"), "--rule", "three_up_then_drop"]) == 0
    out = capsys.readouterr().out
    assert (f"note: {rules} changed since the checkpoint (rule 'three_up_then_drop' changed (statement or "
            "options)); shown with the rules recorded in the checkpoint, which a restart reloads from the file") in out


def test_unknown_rule_and_bad_limit(trading: Path, capsys) -> None:
    code, err = run_state(capsys, str(trading), "--rule", "nope")
    assert code == 2
    assert err == "cep state: no rule 'nope' in the state; its rules are: v_shape, three_up_then_drop\n"
    code, err = run_state(capsys, str(trading), "--limit", "-1")
    assert code == 2 and err == "cep state: --limit must not be negative (0 shows everything)\n"


def test_history_free_partial_matches_and_buffered_events(tmp_path: Path, capsys) -> None:
    """A pattern without look-back runs on the lazy DFA (rows mapped to variables by replay); events
    within the lateness wait in the buffer."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("""rules:
  - name: abc
    lateness: 10 seconds
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES FIRST(A.ts) AS t0 PATTERN (A B+ C)
        DEFINE A AS v = 0, B AS v = 1, C AS v = 2)
""")
    events = [{"k": "x", "ts": 1000 * i, "v": v} for i, v in enumerate([0, 1, 1, 1])]
    events += [{"k": "y", "ts": 30_000, "v": 0}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert main(["run", str(rules), "--input", str(src), "--state", str(tmp_path / "st"),
                 "--output", str(tmp_path / "o.jsonl"), "-q"]) == 0
    eng = Engine(load_rules(str(rules)))
    assert eng.operators["abc"].automaton.dfa  # the lazy-DFA path
    doc = state_json(capsys, str(tmp_path / "st"))
    r = rule_of(doc, "abc")
    assert r["watermark"] == 20_000  # 30 s minus 10 s of lateness
    x = key_of(r, k="x")
    [pm] = x["partial_matches"]
    assert [(row["variable"], row["row"], row["values"]["v"]) for row in pm["rows"]] == [
        ("A", 0, 0), ("B", 1, 1), ("B", 2, 1), ("B", 3, 1)]
    assert pm["waiting_for"] == ["B", "C"] and pm["runs"] == 1
    assert x["buffered"] == []
    y = key_of(r, k="y")
    assert y["partial_matches"] == [] and y["buffered"] == [{"time": 30_000, "values": {"k": "y", "ts": 30_000, "v": 0}}]
    assert r["totals"]["buffered_events"] == 1 and r["counts"]["buffered"] == 1


TABLE_RULES = """\
tables:
  - name: customers
    from: customer_changes
    primary_key: id
    columns: [tier]
    time_field: updated_at
    snapshot: snap.csv
rules:
  - name: gold_spree
    sql: |
      SELECT * FROM payments AS p JOIN customers FOR SYSTEM_TIME AS OF p.ts AS c ON p.customer = c.id
      MATCH_RECOGNIZE (
        PARTITION BY customer ORDER BY ts
        MEASURES FIRST(A.ts) AS first_ts, COUNT(*) AS payments
        PATTERN (A{3}) WITHIN INTERVAL '1' HOUR
        DEFINE A AS c.tier = 'gold' AND A.amount > 1000)
"""


def test_a_state_whose_rules_join_a_table(tmp_path: Path, capsys) -> None:
    # the rule joins a table: the state is read by an engine that has it (it was refused before)
    (tmp_path / "rules.yaml").write_text(TABLE_RULES)
    (tmp_path / "snap.csv").write_text("id,tier\n7,gold\n8,silver\n")
    (tmp_path / "pay.jsonl").write_text("".join(
        json.dumps({"customer": c, "ts": t, "amount": 1500}) + "\n" for t in (2000, 62000) for c in (7, 8)))
    state = tmp_path / "st"
    assert main(["run", str(tmp_path / "rules.yaml"), "--input", str(tmp_path / "pay.jsonl"), "--state", str(state),
                 "--output", str(tmp_path / "out.jsonl"), "-q"]) == 0
    doc = state_json(capsys, str(state))
    rule = rule_of(doc, "gold_spree")
    assert sorted(k["key"]["customer"] for k in rule["keys"]) == [7, 8]
    assert sum(len(k.get("buffered", [])) + len(k.get("partial_matches", [])) for k in rule["keys"]) == 4
