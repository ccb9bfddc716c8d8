"""Durable runs: offsets and state checkpointed together, resuming, log-directory rules, refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cep.cli import main
from cep.durable import DurableConfig, LogSource, dumps_row, read_checkpoint, run_durable
from cep.engine import StateLimits
from cep.events import DEFAULT_BATCH_SIZE
from tests.reliability.workload import RULES, tick_lines

REPO = Path(__file__).resolve().parents[2]


def cfg(tmp: Path, logs: Path, state: str = "st", out: str = "out", **kw) -> DurableConfig:
    base = dict(rules=str(tmp / "rules.yaml"), input=str(logs), state=str(tmp / state),
                output=str(tmp / f"{out}.jsonl"), errors=str(tmp / f"{out}.err.jsonl"), batch_lines=50,
                checkpoint_every=200, quiet=True)
    base.update(kw)
    return DurableConfig(**base)


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "rules.yaml").write_text(RULES)
    logs = tmp_path / "logs"
    logs.mkdir()
    return tmp_path, logs


def write(path: Path, lines: list[str], mode: str = "w") -> None:
    with open(path, mode) as f:
        f.write("".join(x + "\n" for x in lines))


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_second_run_continues_where_the_first_stopped(setup):
    tmp, logs = setup
    lines = tick_lines(1500, seed=1)
    write(logs / "a.jsonl", lines[:500])
    assert run_durable(cfg(tmp, logs)) == 0
    first = (tmp / "out.jsonl").read_bytes()
    write(logs / "a.jsonl", lines[500:1000], "a")
    write(logs / "b.jsonl", lines[1000:])
    assert run_durable(cfg(tmp, logs, finish=True)) == 0
    out = (tmp / "out.jsonl").read_bytes()
    assert out.startswith(first)  # nothing rewritten, nothing repeated
    # one uninterrupted run over the same files finds the same rows (same ids, same bytes per row)
    assert run_durable(cfg(tmp, logs, state="st2", out="ref", finish=True)) == 0
    ref = (tmp / "ref.jsonl").read_bytes()
    assert sorted(out.splitlines()) == sorted(ref.splitlines())
    ids = [r["_id"] for r in rows(tmp / "out.jsonl")]
    assert len(ids) == len(set(ids))
    ck = read_checkpoint(str(tmp / "st"))
    assert ck.meta["lines"] == 1500 and ck.meta["finished"]
    assert ck.meta["files"] == {"a.jsonl": [(logs / "a.jsonl").stat().st_size, 1000],
                                "b.jsonl": [(logs / "b.jsonl").stat().st_size, 500]}


def test_row_ids_are_deterministic_and_name_rule_key_start_and_match_number(setup):
    tmp, logs = setup
    write(logs / "a.jsonl", tick_lines(2000, seed=2))
    assert run_durable(cfg(tmp, logs, finish=True)) == 0
    assert run_durable(cfg(tmp, logs, state="st2", out="again", finish=True)) == 0
    assert (tmp / "out.jsonl").read_bytes() == (tmp / "again.jsonl").read_bytes()
    r = next(x for x in rows(tmp / "out.jsonl") if x["rule"] == "rise")
    assert r["_id"] == f'rise:["{r["sym"]}"]:{r["t0"]}:{r["m"]}'
    d = [x for x in rows(tmp / "out.jsonl") if x["rule"] == "dip"]
    assert d and all(x["_id"].startswith(f'dip:["{x["sym"]}"]:') for x in d)
    assert {x["_id"].rsplit(":", 1)[1] for x in d} >= {"0", "1"}  # ALL ROWS PER MATCH: row number


def test_dot_files_are_ignored_and_files_read_in_name_order(setup):
    tmp, logs = setup
    lines = tick_lines(600, seed=3)
    write(logs / "b.jsonl", lines[300:])
    write(logs / "a.jsonl", lines[:300])
    write(logs / ".c.jsonl.tmp", ['{"sym": "S0", "ts": 1, "px": 1}'] * 5)
    src = LogSource(str(logs), {}, 1000, follow=False)
    assert src.names() == ["a.jsonl", "b.jsonl"]
    b1, n1 = src.next_batch()
    b2, n2 = src.next_batch()
    assert (n1, n2, src.next_batch()) == (300, 300, None)
    assert b1.source.endswith("a.jsonl") and b2.source.endswith("b.jsonl")
    assert int(b2.lines[0]) == 1  # line numbers are per file


def test_batches_are_fixed_line_counts_and_an_unterminated_line_waits(setup):
    tmp, logs = setup
    f = logs / "a.jsonl"
    f.write_text("".join(x + "\n" for x in tick_lines(120, seed=4)) + '{"sym": "S1", "ts": 99')
    src = LogSource(str(logs), {}, 50, follow=True)
    assert [src.next_batch()[1], src.next_batch()[1]] == [50, 50]
    assert src.next_batch() is None  # 20 lines: the newest file may still grow
    assert src.next_batch(force=True)[1] == 20  # a poll found nothing more: take what is there
    assert src.next_batch(force=True) is None  # the unterminated line is not a line yet
    with open(f, "a") as fh:
        fh.write('999, "px": 5}\n')
    b, n = src.next_batch(force=True)
    assert n == 1 and b.n == 1 and b.column("ts")[0] == 99999
    # a line cut short in a file that is closed (a later file exists) is taken, as a bad line
    with open(f, "a") as fh:
        fh.write('{"sym": "S1", "ts": 1')
    write(logs / "b.jsonl", tick_lines(3, seed=5))
    b, n = src.next_batch()
    assert n == 1 and b.n == 0 and "unterminated last line" in b.bad[0].reason
    assert src.next_batch() is None and src.next_batch(force=True)[1] == 3  # b is the newest file


def test_finish_takes_the_unterminated_last_line_and_closes_the_state(setup, capsys):
    tmp, logs = setup
    (logs / "a.jsonl").write_text('{"sym": "S1", "ts": 1, "px": 1}\n{"sym": "S1", "ts": 2, "px": 2}')
    assert run_durable(cfg(tmp, logs, quiet=False)) == 0
    assert "bytes wait for a newline" in capsys.readouterr().err
    assert read_checkpoint(str(tmp / "st")).meta["lines"] == 1
    assert run_durable(cfg(tmp, logs, finish=True)) == 0
    ck = read_checkpoint(str(tmp / "st"))
    assert ck.meta["lines"] == 2 and ck.meta["finished"]
    assert run_durable(cfg(tmp, logs, finish=True, quiet=False)) == 0  # idempotent
    assert "is finished (end of input); nothing to do" in capsys.readouterr().err
    with open(logs / "a.jsonl", "a") as fh:
        fh.write('\n{"sym": "S1", "ts": 3, "px": 3}\n')
    assert run_durable(cfg(tmp, logs, quiet=False)) == 2
    assert "was closed by --finish (end of input) but the input has grown" in capsys.readouterr().err


def test_output_written_after_the_checkpoint_is_replaced_not_duplicated(setup):
    tmp, logs = setup
    write(logs / "a.jsonl", tick_lines(1500, seed=6))
    assert run_durable(cfg(tmp, logs, checkpoint_every=10**9, checkpoint_seconds=10**9)) == 0
    ck = read_checkpoint(str(tmp / "st"))
    good = (tmp / "out.jsonl").read_bytes()
    assert len(good) == ck.meta["outputs"]["output"][1]
    with open(tmp / "out.jsonl", "ab") as fh:  # what a killed run might have left behind
        fh.write(b'{"half a row": ')
    assert run_durable(cfg(tmp, logs)) == 0
    assert (tmp / "out.jsonl").read_bytes() == good


@pytest.mark.parametrize("change,message", [
    ({"batch_lines": 51}, "was written with --batch-size 50"),
    ({"out": "other"}, "this run asks for"),
    ({"errors": None}, "Pass the same outputs"),
    ({"stream": "ticks"}, "names its stream None"),
    ({"limits": StateLimits(idle_state_ttl_ms=5)}, "was written with state limits"),
])
def test_a_run_that_disagrees_with_its_state_is_refused(setup, capsys, change, message):
    tmp, logs = setup
    write(logs / "a.jsonl", tick_lines(100, seed=7))
    assert run_durable(cfg(tmp, logs)) == 0
    assert run_durable(cfg(tmp, logs, **change)) == 2
    assert message in capsys.readouterr().err


def test_a_run_without_a_batch_size_keeps_its_states(setup):
    """The batch size is part of a state: a run that names none resumes with the state's (here 50,
    not the default), so its rows are those of one run at 50 lines a batch; a new state takes
    the default."""
    tmp, logs = setup
    lines = tick_lines(1200, seed=12)
    write(logs / "a.jsonl", lines[:600])
    assert run_durable(cfg(tmp, logs)) == 0
    write(logs / "a.jsonl", lines[600:], "a")
    assert run_durable(cfg(tmp, logs, batch_lines=None, finish=True)) == 0
    assert read_checkpoint(str(tmp / "st")).meta["batch_lines"] == 50
    assert run_durable(cfg(tmp, logs, state="ref", out="ref", finish=True)) == 0
    assert (tmp / "out.jsonl").read_bytes() == (tmp / "ref.jsonl").read_bytes()
    assert run_durable(cfg(tmp, logs, state="new", out="new", batch_lines=None, finish=True)) == 0
    assert read_checkpoint(str(tmp / "new")).meta["batch_lines"] == DEFAULT_BATCH_SIZE


def test_a_damaged_or_foreign_checkpoint_is_refused(setup, capsys):
    tmp, logs = setup
    write(logs / "a.jsonl", tick_lines(100, seed=8))
    assert run_durable(cfg(tmp, logs)) == 0
    ck = tmp / "st" / "checkpoint"
    data = bytearray(ck.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ck.write_bytes(bytes(data))
    assert run_durable(cfg(tmp, logs)) == 3
    assert "is damaged (checksum mismatch)" in capsys.readouterr().err
    ck.write_bytes(b"hello")
    assert run_durable(cfg(tmp, logs)) == 3
    assert "is not a cep checkpoint" in capsys.readouterr().err


def test_one_state_directory_one_run(setup, capsys):
    tmp, logs = setup
    write(logs / "a.jsonl", tick_lines(100, seed=9))
    os.makedirs(tmp / "st")
    import fcntl

    with open(tmp / "st" / "lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert run_durable(cfg(tmp, logs)) == 3
    assert "another cep run is using the state directory" in capsys.readouterr().err
    assert run_durable(cfg(tmp, logs)) == 0


@pytest.mark.parametrize("argv,message", [
    (["--follow"], "--follow needs --state DIR"),
    (["--state", "S", "-o", "x.jsonl", "--late", "-"], "--late cannot be standard output with --state"),
    (["--state", "S", "-o", "x.jsonl", "--errors", "-"], "--errors cannot be standard output with --state"),
    (["--state", "S", "-o", "x.jsonl", "--timeouts", "-"], "--timeouts cannot be standard output with --state"),
    (["--state", "S", "-o", "x.csv"], "--state reads and writes JSON lines only"),
    (["--state", "S", "-o", "x.jsonl", "--idle-state-ttl", "soonish"], "--idle-state-ttl: cannot read 'soonish'"),
    (["--state", "S", "-o", "x.jsonl", "--max-buffered-events", "-1"], "--max-buffered-events must not be negative"),
])
def test_cli_usage_errors(setup, capsys, argv, message):
    tmp, logs = setup
    assert main(["run", str(tmp / "rules.yaml"), "-i", str(logs), *argv]) == 2
    assert message in capsys.readouterr().err


def test_plain_run_refuses_a_directory_with_a_pointer_to_state(setup, capsys):
    tmp, logs = setup
    assert main(["run", str(tmp / "rules.yaml"), "-i", str(logs)]) == 2
    assert "is a directory; read a log directory with --state DIR" in capsys.readouterr().err


def test_rows_nested_too_deep_for_json_are_written_shortened():
    deep: dict = {}
    d = deep
    for _ in range(400):
        d["a"] = {}
        d = d["a"]
    line = dumps_row({"rule": "r", "event": {"x": deep}})
    row = json.loads(line)
    assert row["rule"] == "r" and row["event"].startswith("{'x': {'a': {'a'") and len(row["event"]) <= 1000


def test_follow_picks_up_growing_and_new_files_exactly_once(setup):
    tmp, logs = setup
    lines = tick_lines(3000, seed=10)
    write(logs / "a.jsonl", lines[:700])
    out = tmp / "out.jsonl"
    cmd = [sys.executable, "-m", "cep.cli", "run", str(tmp / "rules.yaml"), "--input", str(logs), "--state",
           str(tmp / "st"), "--output", str(out), "--errors", str(tmp / "out.err.jsonl"), "--follow", "--poll", "0.05",
           "--batch-size", "50", "--checkpoint-every", "200", "--checkpoint-seconds", "0.2"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def consumed() -> int:
            ck = read_checkpoint(str(tmp / "st")) if (tmp / "st" / "checkpoint").exists() else None
            return ck.meta["lines"] if ck else 0

        deadline = time.monotonic() + 60
        while consumed() < 700:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        write(logs / "a.jsonl", lines[700:1500], "a")  # the file grows
        tmpfile = logs / ".b.jsonl.part"
        write(tmpfile, lines[1500:])
        os.rename(tmpfile, logs / "b.jsonl")  # a new file appears whole
        while consumed() < 3000:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    # finishing later gives the rows of one run over the final files (order may differ: see docs)
    assert run_durable(cfg(tmp, logs, finish=True)) == 0
    assert run_durable(cfg(tmp, logs, state="ref_st", out="ref", finish=True)) == 0
    got, want = out.read_bytes().splitlines(), (tmp / "ref.jsonl").read_bytes().splitlines()
    assert sorted(got) == sorted(want) and len(got) == len({json.loads(x)["_id"] for x in got})


SQL2016_RULES = """
rules:
  - name: peaks
    lateness: 1000
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts
        MEASURES P.ts AS t, NEXT(P.px) AS px_after, PREV(LAST(P.px), 1) AS px_before
        ALL ROWS PER MATCH WITH UNMATCHED ROWS
        PATTERN (P) DEFINE P AS P.px > PREV(P.px) AND P.px > NEXT(P.px, 2))
  - name: last_rise
    lateness: 200
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts
        MEASURES FIRST(A.ts) AS t0 PATTERN (A+ $) DEFINE A AS A.px > PREV(A.px))
"""


def test_rows_held_for_next_and_unmatched_rows_resume_exactly(setup):
    """Held rows, unmatched rows and '$' across a stop and a resume: the uninterrupted run's rows."""
    tmp, logs = setup
    (tmp / "rules.yaml").write_text(SQL2016_RULES)
    lines = tick_lines(900, seed=4)
    write(logs / "a.jsonl", lines[:333])
    assert run_durable(cfg(tmp, logs)) == 0
    write(logs / "a.jsonl", lines[333:], "a")
    assert run_durable(cfg(tmp, logs, finish=True)) == 0
    assert run_durable(cfg(tmp, logs, state="st2", out="ref", finish=True)) == 0
    out, ref = rows(tmp / "out.jsonl"), rows(tmp / "ref.jsonl")
    assert sorted(map(dumps_row, out)) == sorted(map(dumps_row, ref))
    peaks = [r for r in out if r["rule"] == "peaks"]
    good = [x for x in lines if x.startswith('{"sym"') and '"yesterday"' not in x and x.endswith("}")]
    assert len(peaks) == len(good)  # WITH UNMATCHED ROWS, nothing late: every event once
    assert any(r["t"] is not None for r in peaks) and any(r["rule"] == "last_rise" for r in out)
    assert len({r["_id"] for r in out}) == len(out)


def test_a_durable_console_run_ends_its_start_after_its_first_batch(setup):
    """``cep run --state`` in a process of its own ends its start (the collector frozen and on) once
    its first batch is through; its rows are those of run_durable called in this process, which
    freezes nothing."""
    import gc

    tmp, logs = setup
    write(logs / "a.jsonl", tick_lines(400, seed=13))
    # (the collector's state as each of the first two batches starts: off during the first)
    script = ("import gc, sys; from cep.cli.command import main; import cep.durable.run as R; seen = []; "
              "step = R._Run.step; R._Run.step = lambda self, got: (seen.append(gc.isenabled()), step(self, got))[1]; "
              f"sys.argv = ['cep', 'run', {str(tmp / 'rules.yaml')!r}, '--input', {str(logs)!r}, '--state', "
              f"{str(tmp / 'own')!r}, '--output', {str(tmp / 'own.jsonl')!r}, '--batch-size', '50', '-q']; "
              "rc = main(); print(rc, gc.isenabled(), gc.get_freeze_count() > 0, *seen[:2])")
    got = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert got.stdout.split() == ["0", "True", "True", "False", "True"]
    frozen = gc.get_freeze_count()
    assert run_durable(cfg(tmp, logs, state="in", out="in", errors=None)) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    own = (tmp / "own.jsonl").read_bytes()
    assert own == (tmp / "in.jsonl").read_bytes() and own.count(b"\n") > 0
