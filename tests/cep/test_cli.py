"""The ``cep`` command: check, run (formats, outputs, several streams), exit codes, help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cep.cli import main

REPO = Path(__file__).resolve().parents[2]
RULE = """
rules:
  - name: rise
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY sym ORDER BY ts
        MEASURES A.ts AS t0, LAST(B.ts) AS t1
        PATTERN (A B+)
        DEFINE B AS B.px > PREV(B.px))
"""


@pytest.fixture
def files(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    events = tmp_path / "ticks.jsonl"
    lines = [
        {"sym": "X", "ts": 0, "px": 1},
        {"sym": "X", "ts": 1, "px": 2},
        "not json",
        {"sym": "X", "ts": 2, "px": 3},
        {"sym": "X", "ts": 0, "px": 9},
        {"sym": "X", "ts": 3, "px": 1},
    ]
    events.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return tmp_path, rules, events


def test_check_ok_and_errors(files, capsys, tmp_path):
    _, rules, _ = files
    assert main(["check", str(rules)]) == 0
    assert "ok, 1 rule (rise)" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    sql: SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A*) DEFINE Q AS TRUE)\n")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "^" in err
    assert "2 errors" in err


def test_run_writes_matches_late_and_errors(files, capsys):
    tmp, rules, events = files
    out, late, errs = tmp / "out.jsonl", tmp / "late.jsonl", tmp / "errors.jsonl"
    code = main(["run", str(rules), "--input", str(events), "--output", str(out), "--late", str(late),
                 "--errors", str(errs)])
    assert code == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == [{"sym": "X", "t0": 0, "t1": 2, "rule": "rise"}]
    late_rows = [json.loads(x) for x in late.read_text().splitlines()]
    assert [r["line"] for r in late_rows] == [5]
    err_rows = [json.loads(x) for x in errs.read_text().splitlines()]
    assert err_rows[0]["line"] == 3 and "malformed JSON" in err_rows[0]["reason"]
    summary = capsys.readouterr().err
    assert "1 complex event, 1 late, 1 error" in summary


def test_run_to_stdout_csv_and_parquet(files, capsys):
    tmp, rules, events = files
    assert main(["run", str(rules), "--input", str(events), "-q"]) == 0
    assert json.loads(capsys.readouterr().out.strip())["t1"] == 2
    csv_out = tmp / "o.csv"
    assert main(["run", str(rules), "--input", str(events), "-o", str(csv_out), "-q"]) == 0
    assert csv_out.read_text().splitlines() == ["sym,t0,t1,rule", "X,0,2,rise"]
    pq_out = tmp / "o.parquet"
    assert main(["run", str(rules), "--input", str(events), "-o", str(pq_out), "-q"]) == 0
    assert pq.read_table(pq_out).to_pylist() == [{"sym": "X", "t0": 0, "t1": 2, "rule": "rise"}]


def test_csv_and_parquet_inputs(files, tmp_path):
    tmp, rules, _ = files
    csv_in = tmp / "ticks.csv"
    csv_in.write_text("sym,ts,px\nX,0,1\nX,1,2\nX,2,3\nX,3,1\n")
    out = tmp / "o.jsonl"
    assert main(["run", str(rules), "--input", str(csv_in), "-o", str(out), "-q"]) == 0
    assert json.loads(out.read_text())["t1"] == 2
    import pyarrow as pa

    pq_in = tmp / "ticks.parquet"
    pq.write_table(pa.Table.from_pylist([{"sym": "X", "ts": t, "px": p} for t, p in enumerate([1, 2, 3, 1])]), pq_in)
    assert main(["run", str(rules), "--input", str(pq_in), "-o", str(out), "-q"]) == 0
    assert json.loads(out.read_text())["t1"] == 2


def test_fail_on_match_and_usage_errors(files, capsys):
    _, rules, events = files
    assert main(["run", str(rules), "--input", str(events), "--fail-on-match", "-q"]) == 1
    assert main(["run", str(rules), "--input", "missing.jsonl"]) == 2
    assert "input file not found: missing.jsonl" in capsys.readouterr().err
    for size in ("0", "-5"):  # (a batch of no rows: an internal error before)
        assert main(["run", str(rules), "--input", str(events), "--batch-size", size]) == 2
        assert f"cep run: --batch-size must be at least 1, got {size}" in capsys.readouterr().err
        assert main(["bench", str(rules), "--input", str(events), "--batch-size", size]) == 2
        assert f"cep bench: --batch-size must be at least 1, got {size}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        main(["run"])
    assert ei.value.code == 2
    assert main([]) == 2


def test_several_named_inputs_are_merged_in_event_time(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text(
        """
rules:
  - name: search_click
    sql: |
      SELECT * FROM events MATCH_RECOGNIZE (
        PARTITION BY session ORDER BY ts
        MEASURES S.q AS q, C.url AS url
        PATTERN (S C) WITHIN INTERVAL '1' HOUR
        DEFINE S AS stream = 'searches', C AS stream = 'clicks')
"""
    )
    s = tmp_path / "s.jsonl"
    c = tmp_path / "c.jsonl"
    s.write_text('{"session": 1, "ts": 10, "q": "a"}\n{"session": 2, "ts": 30, "q": "b"}\n')
    c.write_text('{"session": 1, "ts": 20, "url": "/x"}\n{"session": 2, "ts": 40, "url": "/y"}\n')
    out = tmp_path / "o.jsonl"
    assert main(["run", str(rules), "--input", f"searches={s}", "--input", f"clicks={c}", "-o", str(out), "-q"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((r["session"], r["q"], r["url"]) for r in rows) == [(1, "a", "/x"), (2, "b", "/y")]


def test_help_is_complete():
    proc = subprocess.run([sys.executable, "-m", "cep.cli", "run", "--help"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0
    for flag in ("--input", "--output", "--late", "--errors", "--fail-on-match", "--output-format"):
        assert flag in proc.stdout


def test_bundled_quickstart_runs(capsys):
    code = main(["run", str(REPO / "rules/trading.yaml"), "--input",
                 str(REPO / "rules/data/sp500_daily_2017_sample.jsonl"), "-q"])
    assert code == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {r["rule"] for r in rows} == {"v_shape", "three_up_then_drop"}
    for r in rows:
        if r["rule"] == "v_shape":
            assert r["bottom_close"] < r["start_close"] <= r["end_close"]
        else:
            assert r["drop_pct"] < -2


def test_bundled_two_stream_example_runs(capsys):
    code = main(["run", str(REPO / "rules/sessions.yaml"),
                 "--input", f"searches={REPO / 'rules/data/searches.jsonl'}",
                 "--input", f"clicks={REPO / 'rules/data/clicks.jsonl'}", "-q"])
    assert code == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    clicked = [r for r in rows if r["rule"] == "search_then_click"]
    assert len(clicked) >= 3
    assert all(0 <= r["seconds_later"] < 3600 and r["query"] for r in clicked)
    assert {r["rule"] for r in rows} == {"search_then_click", "search_without_click"}


def test_merging_inputs_needs_one_time_field(tmp_path, capsys):
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "rules:\n"
        "  - name: a\n    sql: SELECT * FROM x MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))\n"
        "  - name: b\n    sql: SELECT * FROM y MATCH_RECOGNIZE (ORDER BY time PATTERN (A))\n"
    )
    f = tmp_path / "e.jsonl"
    f.write_text('{"ts": 1, "time": 1}\n')
    assert main(["run", str(rules), "--input", f"x={f}", "--input", f"y={f}"]) == 2
    assert "the rules order by different fields (time, ts); pass --time-field" in capsys.readouterr().err
    assert main(["run", str(rules), "--input", f"x={f}", "--input", f"y={f}", "--time-field", "ts", "-q"]) == 0


def test_parquet_output_needs_a_file(files, capsys):
    _, rules, events = files
    assert main(["run", str(rules), "--input", str(events), "--output-format", "parquet"]) == 2  # a usage error
    assert "Parquet output needs a file: pass --output FILE.parquet" in capsys.readouterr().err


@pytest.mark.parametrize("option, name", [("--output", "m.jsonl"), ("--output", "m.csv"), ("--output", "m.parquet"),
                                          ("--late", "late.jsonl"), ("--errors", "errors.jsonl")])
def test_an_unwritable_output_is_a_usage_error_before_any_event(files, capsys, option, name):
    """A missing folder: exit 2 with the option and the path, not a traceback (CSV and Parquet too,
    though they are written at the end)."""
    tmp, rules, events = files
    target = str(tmp / "no-such-dir" / name)
    args = ["run", str(rules), "--input", str(events), "-q", option, target]
    if option != "--output":
        args += ["--output", str(tmp / "out.jsonl")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"cep run: cannot write {option} {target!r}: No such file or directory" in err
    assert "Traceback" not in err


def test_a_write_failing_mid_run_is_a_runtime_failure(files, capsys, monkeypatch):
    """A disk that fills during the run: exit 3 and the reason, not a traceback."""
    import errno

    from cep import cli

    tmp, rules, events = files

    def full(self, rows):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli.OutputWriter, "write", full)
    assert main(["run", str(rules), "--input", str(events), "-q", "--output", str(tmp / "o.jsonl")]) == 3
    assert "cep run: [Errno 28] No space left on device" in capsys.readouterr().err


def test_run_summary_counts_partial_matches_open_at_the_end(capsys):
    """The summary's count, per pattern rule, of the partial matches the end of input flushed."""
    import numpy as np

    from cep.engine import Engine
    from cep.events import read_events
    from patterns.rules import load_rules

    rules = load_rules(str(REPO / "rules/trading.yaml"))
    eng = Engine(rules)
    for b in read_events(REPO / "rules/data/sp500_daily_2017_sample.jsonl"):
        eng.process(b)
    expected = {}
    for name, op in eng.operators.items():  # counted by hand from each key's attempts
        expected[name] = sum(
            (len(a.threads) if isinstance(a.threads, list) else int(bool(a.threads)))
            for st in op.states.values() for a in st.attempts
        )
    assert expected["v_shape"] > 0 and isinstance(expected["v_shape"], (int, np.integer))
    assert main(["run", str(REPO / "rules/trading.yaml"), "--input",
                 str(REPO / "rules/data/sp500_daily_2017_sample.jsonl"), "-o", "-"]) == 0
    err = capsys.readouterr().err
    for name, k in expected.items():
        assert f"  {name}: read 1,255, " in err and f"partial matches open at the end {k:,}" in err


def test_bench_reports_every_rule_and_writes_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    code = main(["bench", str(REPO / "rules/trading.yaml"), "--input", str(REPO / "rules/data/sp500_daily_2017_sample.jsonl"),
                 "--repeat", "1", "--batch-size", "300", "--json", str(out_json), "--plot", str(out_png)])
    assert code == 0
    table = capsys.readouterr().out
    assert "v_shape" in table and "three_up_then_drop" in table and "events/s" in table
    res = json.loads(out_json.read_text())
    assert res["events"] == 1255
    by_rule = {r["rule"]: r for r in res["rules"]}
    assert by_rule["v_shape"]["matches"] > 10
    assert len(res["timeline"]) == 5 and res["timeline"][-1]["events"] == 1255
    assert out_png.stat().st_size > 1000
    assert main(["bench", str(REPO / "rules/trading.yaml"), "--input", "nope.jsonl"]) == 2


def test_bench_runs_the_first_batch_untimed_before_its_timed_runs(tmp_path, monkeypatch):
    """The first use of the compiled kernels loads them: an engine of every rule runs the first
    batch before the clock starts, and the timed runs are each over every batch, from a fresh engine."""
    import cep.engine
    from cep.cli.bench import bench

    calls: list[tuple[int, int]] = []
    real = cep.engine.Engine.process

    def spy(self, batch, *a, **k):
        calls.append((id(self), batch.n))
        return real(self, batch, *a, **k)

    monkeypatch.setattr(cep.engine.Engine, "process", spy)
    res = bench(str(REPO / "rules/trading.yaml"), [str(REPO / "rules/data/sp500_daily_2017_sample.jsonl")],
                repeat=2, batch_size=500)
    engines = list(dict.fromkeys(e for e, _ in calls))
    per = {e: [n for x, n in calls if x == e] for e in engines}
    assert per[engines[0]] == [500]  # the untimed pass: the first batch only
    assert per[engines[1]] == per[engines[2]] == [500, 500, 255]  # two timed runs over every batch
    assert res.events == 1255 and len(res.timeline) == 3


def test_bench_reports_table_size(tmp_path, capsys):
    """A rule file with a table: every joined rule runs alone with its table, and each table's size
    at the end of the input is reported (changes, keys, versions, rows, memory)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text("""
tables:
  - {name: sectors, from: sector_changes, primary_key: sym, columns: [sector], time_field: ts}
rules:
  - name: per_sector
    kind: analytics
    sql: |
      SELECT sector, COUNT(*) AS n FROM ticks AS t JOIN sectors FOR SYSTEM_TIME AS OF t.ts AS s ON t.sym = s.sym
      GROUP BY sector, TUMBLE(ts, INTERVAL '10' MILLISECOND)
  - name: rise
    sql: |
      SELECT * FROM ticks AS t LEFT JOIN sectors FOR SYSTEM_TIME AS OF t.ts AS s ON t.sym = s.sym
      MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES A.ts AS t0, s.sector AS sector
                       PATTERN (A B) DEFINE B AS B.px > A.px)
""")
    changes, ticks = tmp_path / "changes.jsonl", tmp_path / "ticks.jsonl"
    changes.write_text("".join(json.dumps({"sym": f"S{k % 7}", "sector": f"x{k % 3}", "ts": k * 10}) + "\n"
                               for k in range(30)))
    ticks.write_text("".join(json.dumps({"sym": f"S{k % 5}", "px": k % 11, "ts": k}) + "\n" for k in range(300)))
    out_json = tmp_path / "b.json"
    assert main(["bench", str(rules), "--input", f"sector_changes={changes}", "--input", f"ticks={ticks}",
                 "--repeat", "1", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "table sectors: 30 changes applied (0 late, 0 errors, 0 snapshot rows); 7 live keys of 7, 30 versions" in text
    res = json.loads(out_json.read_text())
    t = res["tables"]["sectors"]
    assert (t["applied"], t["keys"], t["versions"]) == (30, 7, 30) and t["bytes"] > 0
    assert {r["rule"]: r["matches"] for r in res["rules"]}["per_sector"] > 0


def test_bench_partial_matches_are_counted_over_every_key_after_each_batch(tmp_path, capsys):
    """Peak and end-of-input partial matches agree with the timeline and with a hand count."""
    from cep.engine import Engine
    from cep.events import read_events
    from patterns.rules import load_rules

    rules_path, events = REPO / "rules/trading.yaml", REPO / "rules/data/sp500_daily_2017_sample.jsonl"
    out_json = tmp_path / "b.json"
    assert main(["bench", str(rules_path), "--input", str(events), "--repeat", "1", "--batch-size", "100",
                 "--json", str(out_json)]) == 0
    res = json.loads(out_json.read_text())
    eng = Engine(load_rules(str(rules_path)))
    per_batch = []
    for b in read_events(events, 100):
        eng.process(b)
        # a rule on the batch DFA (cep/batch_dfa.py) keeps its keys in arrays: read back as key states;
        # a start row on the lane path (cep/lanes.LaneRun) counts the runs the general path would hold
        per_batch.append({name: sum((int(bool(a.threads)) if isinstance(a.threads, int) else len(a.threads))
                                    for st in (op._keyed.key_states() if op._keyed is not None
                                               else op.states).values() for a in st.attempts)
                          for name, op in eng.operators.items()})
    assert [t["partial_matches"] for t in res["timeline"]] == [sum(c.values()) for c in per_batch]
    for r in res["rules"]:
        assert r["partial_matches_peak"] == max(c[r["rule"]] for c in per_batch)
        assert r["partial_matches_end"] == per_batch[-1][r["rule"]]
    assert res["rules"][0]["partial_matches_peak"] > res["rules"][0]["partial_matches_end"] > 0
    capsys.readouterr()


def test_bench_merges_several_inputs_in_event_time_as_run_does(tmp_path, capsys):
    """Named streams (NAME=PATH) and plain files: the same matches and no late events, as cep run."""
    sessions = str(REPO / "rules/sessions.yaml")
    named = ["--input", f"searches={REPO / 'rules/data/searches.jsonl'}",
             "--input", f"clicks={REPO / 'rules/data/clicks.jsonl'}"]
    run_rows = tmp_path / "run.jsonl"
    assert main(["run", sessions, *named, "-q", "-o", str(run_rows)]) == 0
    expected: dict[str, int] = {}
    for line in run_rows.read_text().splitlines():
        name = json.loads(line)["rule"]
        expected[name] = expected.get(name, 0) + 1
    assert len(expected) == 2
    out_json = tmp_path / "b.json"
    assert main(["bench", sessions, *named, "--repeat", "1", "--json", str(out_json)]) == 0
    rules_out = json.loads(out_json.read_text())["rules"]
    assert {r["rule"]: (r["matches"], r["late"], r["errors"]) for r in rules_out} == {
        name: (n, 0, 0) for name, n in expected.items()}
    capsys.readouterr()
    # two plain files of one stream, out of order between them: merged, not read one after the other
    early, late = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    early.write_text("".join(json.dumps({"sym": "X", "ts": t, "px": t}) + "\n" for t in (0, 2, 4)))
    late.write_text("".join(json.dumps({"sym": "X", "ts": t, "px": t}) + "\n" for t in (1, 3, 5)))
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    assert main(["bench", str(rules), "--input", str(late), "--input", str(early), "--repeat", "1",
                 "--json", str(out_json)]) == 0
    (rule,) = json.loads(out_json.read_text())["rules"]
    assert (rule["matches"], rule["late"]) == (1, 0)  # one rise over ts 0..5
    capsys.readouterr()


def test_bench_usage_errors_and_the_one_point_plot_note(tmp_path, capsys):
    rules, events = str(REPO / "rules/trading.yaml"), str(REPO / "rules/data/sp500_daily_2017_sample.jsonl")
    missing = str(tmp_path / "no-such-dir" / "b.json")
    assert main(["bench", rules, "--input", events, "--json", missing]) == 2
    assert f"cep bench: cannot write --json {missing!r}: its folder does not exist" in capsys.readouterr().err
    assert main(["bench", rules, "--input", events, "--repeat", "1", "--plot", str(tmp_path / "p.png")]) == 0
    err = capsys.readouterr().err
    assert "the plot has 1 point, one per batch of 16,384 events; pass a smaller --batch-size for a curve" in err


def test_bench_reports_search_and_analytics_figures(tmp_path, capsys):
    out_json = tmp_path / "b.json"
    assert main(["bench", str(REPO / "rules/media.yaml"), "--input", str(REPO / "rules/data/headlines_sample.jsonl"),
                 "--repeat", "1", "--json", str(out_json)]) == 0
    table = capsys.readouterr().out
    res = json.loads(out_json.read_text())
    by_rule = {r["rule"]: r for r in res["rules"]}
    search = by_rule["desk_alerts"]
    assert search["extra"]["documents"] == 2000
    per_doc = f"{search['extra']['candidates'] / 2000:.1f} candidates/doc, {search['matches'] / 2000:.2f} matches/doc"
    assert per_doc in table
    # the same matches as a plain run of the rule file
    eng_rows = [json.loads(x) for x in _run_rows(tmp_path, "rules/media.yaml", "rules/data/headlines_sample.jsonl")]
    assert search["matches"] == sum(1 for r in eng_rows if r["rule"] == "desk_alerts")
    windows = by_rule["busy_news_days"]["extra"]["windows"]
    assert f"{windows:,} windows, 0 corrections" in table


def _run_rows(tmp_path, rules: str, events: str) -> list[str]:
    out = tmp_path / "run.jsonl"
    assert main(["run", str(REPO / rules), "--input", str(REPO / events), "--output", str(out), "--quiet"]) == 0
    return out.read_text().splitlines()


def test_spark_backfill_into_an_existing_output_is_refused_before_spark_starts(tmp_path, capsys, monkeypatch):
    """The default --mode error: exit 2 in the command's own words, without starting a JVM."""
    import spark_udf.session

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(spark_udf.session, "local_session", no_spark)
    out = tmp_path / "backfill"
    out.mkdir()
    bars = str(REPO / "rules/data/sp500_daily_2017_sample.jsonl")
    assert main(["spark", "backfill", str(REPO / "rules/trading.yaml"), "--input", bars, "--output", str(out)]) == 2
    assert (f"cep spark backfill: --output {str(out)!r} already exists; pass --mode overwrite to replace it "
            "or --mode append to add to it") in capsys.readouterr().err


@pytest.mark.parametrize("spark_says", [
    "[STREAM_FAILED] Query terminated with exception: assertion failed: There are [2] sources in the "
    "checkpoint offsets and now there are [1] sources requested by the query. Cannot continue.\n"
    "JVM stacktrace:\njava.lang.AssertionError: assertion failed: There are [2] sources in the checkpoint "
    "offsets and now there are [1] sources requested by the query. Cannot continue.",
    "[STREAM_FAILED] Query terminated with exception: [STATE_STORE_PROVIDER_DOES_NOT_SUPPORT] ... This "
    "typically occurs when state files have been deleted or the streaming query was previously run without "
    "stateful operators but restarted with stateful operators.",
])
def test_spark_run_says_what_to_do_when_the_query_no_longer_fits_its_checkpoint(spark_says):
    """A checkpoint written before search rules joined a stream's stateful stage (they ran in a
    second branch reading the source again, or with no stateful stage at all), or one whose
    named inputs changed, is refused by Spark in its own terms: the line says why and what to do."""
    from cep.cli.spark import _error_text

    line = _error_text(RuntimeError(spark_says))
    assert "\n" not in line
    assert "checkpoint" in line and "new checkpoint" in line
    assert "search rules" in line and "--input" in line


def test_the_console_script_freezes_its_start_and_gives_the_same_rows(tmp_path):
    """``cep run`` in a process of its own (no argv: the console script) keeps the collector off
    until its first batch is through, then freezes what the start made and turns it back on; a
    call of ``main([...])`` from Python freezes nothing. The rows are the same either way."""
    rules, events = str(REPO / "rules/trading.yaml"), str(REPO / "rules/data/sp500_daily_2017_sample.jsonl")
    own, called = tmp_path / "own.jsonl", tmp_path / "called.jsonl"
    script = ("import gc, sys; from cep.cli.command import main; "
              f"sys.argv = ['cep', 'run', {rules!r}, '--input', {events!r}, '--output', {str(own)!r}, '-q']; "
              "frozen = gc.get_freeze_count(); rc = main(); "
              "print(rc, gc.isenabled(), frozen == 0 and gc.get_freeze_count() > 0)")
    got = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert got.stdout.split() == ["0", "True", "True"]
    import gc

    frozen = gc.get_freeze_count()
    assert main(["run", rules, "--input", events, "--output", str(called), "-q"]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    assert own.read_bytes() == called.read_bytes() and own.read_bytes().count(b"\n") == 48
