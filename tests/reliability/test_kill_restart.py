"""Durable runs the hard way: SIGKILL at random points, restart, and the output is still exact."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cep.durable import DurableConfig, read_checkpoint, run_durable
from cep.engine import StateLimits
from tests.reliability.workload import (
    RULES,
    SECTORS,
    TABLE_RULES,
    VIEW_RULES,
    write_log_dir,
    write_table_log_dir,
    write_view_log_dir,
)

REPO = Path(__file__).resolve().parents[2]
BATCH, EVERY = 100, 300
TTL_MS = 1500  # idle keys expire too: sessions end mid-run, and the state sweeps must replay exactly
KILLS = 16  # SIGKILLs in one run; then the last restart runs to the end (16: the suite's time budget)
TABLE_KILLS = 10
VIEW_KILLS = 6


def cep_cmd(rules: Path, logs: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "cep.cli", "run", str(rules), "--input", str(logs), "--state", str(out / "state"),
        "--output", str(out / "out.jsonl"), "--late", str(out / "late.jsonl"), "--errors", str(out / "errors.jsonl"),
        "--timeouts", str(out / "timeouts.jsonl"), "--batch-size", str(BATCH), "--checkpoint-every", str(EVERY), "--idle-state-ttl", str(TTL_MS), "-q", *extra,
    ]


def reference(rules: Path, logs: Path, out: Path, finish: bool = True) -> None:
    out.mkdir(exist_ok=True)
    code = run_durable(DurableConfig(
        rules=str(rules), input=str(logs), state=str(out / "state"), output=str(out / "out.jsonl"),
        late=str(out / "late.jsonl"), errors=str(out / "errors.jsonl"), timeouts=str(out / "timeouts.jsonl"),
        batch_lines=BATCH,
        checkpoint_every=EVERY, finish=finish, quiet=True, limits=StateLimits(idle_state_ttl_ms=TTL_MS)))
    assert code == 0


def _mtime(p: Path) -> int:
    try:
        return p.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def make_workload(tmp_path: Path, lines_per_file: int) -> tuple[Path, Path, Path]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    return tmp_path, rules, write_log_dir(tmp_path, files=2, lines_per_file=lines_per_file)


@pytest.fixture
def workload(tmp_path):
    return make_workload(tmp_path, 20_000)


@pytest.fixture
def small_workload(tmp_path):
    return make_workload(tmp_path, 4_000)


def kill_and_restart(cmd: list[str], run: Path, rng: random.Random, max_kills: int) -> dict[str, int]:
    """Run ``cmd`` again and again, SIGKILLed at random points ``max_kills`` times, then to its end."""
    ckpt = run / "state" / "checkpoint"
    kills = with_tail = during_startup = 0
    while True:
        before = _mtime(ckpt)
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if kills >= max_kills:
            proc.wait(timeout=120)
        else:
            ck0 = read_checkpoint(str(run / "state"))
            if rng.random() < 0.25:
                # anywhere in interpreter start-up, restore, output truncation or the first batches
                # (at most two checkpoints in: a quiet, fast machine must not finish the input early)
                target = (ck0.meta["lines"] if ck0 else 0) + EVERY * 2
                deadline = time.monotonic() + rng.uniform(0.0, 0.7)
            else:
                # after this run has checkpointed 1 or 2 more times: mid-batch, mid-write, mid-checkpoint
                target = (ck0.meta["lines"] if ck0 else 0) + EVERY * rng.choice((1, 2))
                deadline = time.monotonic() + 30
            seen = before
            while proc.poll() is None and time.monotonic() < deadline:
                m = _mtime(ckpt)
                if m != seen:
                    seen = m
                    ck = read_checkpoint(str(run / "state"))
                    if ck is not None and ck.meta["lines"] >= target:
                        break
                time.sleep(0.003)
            time.sleep(rng.uniform(0.0, 0.08))
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            assert proc.returncode == 0, err
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
        kills += 1
        ck = read_checkpoint(str(run / "state"))
        if ck is None:
            during_startup += 1
        elif (run / "out.jsonl").stat().st_size > ck.meta["outputs"]["output"][1]:
            with_tail += 1  # rows written after the checkpoint: the restart must replace them
        assert kills < 300, "the killed runs make no progress"
    return {"kills": kills, "kills_with_rows_after_the_checkpoint": with_tail, "kills_before_any_checkpoint": during_startup}


def test_sigkill_at_random_points_then_restart_gives_the_uninterrupted_output(workload):
    tmp, rules, logs = workload
    ref = tmp / "ref"
    reference(rules, logs, ref)
    run = tmp / "killed"
    run.mkdir()
    report = kill_and_restart(cep_cmd(rules, logs, run, "--finish"), run, random.Random(20240607), KILLS)
    kills, with_tail = report["kills"], report["kills_with_rows_after_the_checkpoint"]
    print("\nkill test:", json.dumps(report))
    assert kills == KILLS >= 16, report
    assert with_tail >= 3, report  # the truncation path really ran
    for name in ("out.jsonl", "late.jsonl", "errors.jsonl", "timeouts.jsonl"):
        got, want = (run / name).read_bytes(), (ref / name).read_bytes()
        assert got == want, f"{name} differs after {kills} kills"
    rows = [json.loads(x) for x in (run / "out.jsonl").read_text().splitlines()]
    ids = [r["_id"] for r in rows]
    assert len(ids) == len(set(ids)) > 1000  # no duplicate, and a real workload
    timeouts = [json.loads(x) for x in (run / "timeouts.jsonl").read_text().splitlines()]
    assert len({r["_id"] for r in timeouts}) == len(timeouts) > 100  # the time-outs too
    (tmp / "kill_report.json").write_text(json.dumps(report))


def test_sigkill_with_a_table_fed_by_a_changelog_input(tmp_path):
    """A table kept by a changelog in the same input (rows tagged with its stream), read by joined
    pattern, analytics and search rules: killed at random points and restarted, the outputs are
    byte for byte those of an uninterrupted run (the table, the rules' waiting events and the
    joins' queues all live in the checkpoint)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(TABLE_RULES)
    logs = write_table_log_dir(tmp_path, files=2, lines_per_file=6_000)
    ref = tmp_path / "ref"
    reference(rules, logs, ref)
    run = tmp_path / "killed"
    run.mkdir()
    report = kill_and_restart(cep_cmd(rules, logs, run, "--finish"), run, random.Random(20261127), TABLE_KILLS)
    print("\ntable kill test:", json.dumps(report))
    assert report["kills"] == TABLE_KILLS, report
    for name in ("out.jsonl", "late.jsonl", "errors.jsonl"):
        got, want = (run / name).read_bytes(), (ref / name).read_bytes()
        assert got == want, f"{name} differs after {report['kills']} kills"
    rows = [json.loads(x) for x in (run / "out.jsonl").read_text().splitlines()]
    by_rule = {name: sum(1 for r in rows if r["rule"] == name)
               for name in ("sector_rise", "sector_burst", "sector_second", "energy_ticks")}
    assert min(by_rule.values()) > 20, by_rule  # every joined rule has real output
    assert all(r.get("sector") in SECTORS for r in rows if r["rule"] != "sector_burst"), "joined columns"
    late = [json.loads(x) for x in (run / "late.jsonl").read_text().splitlines()]
    assert any(x.get("table") == "sectors" for x in late)  # late changes, reported exactly once each
    ids = [r["_id"] for r in rows]
    assert len(ids) == len(set(ids))


def test_sigkill_with_a_view_of_two_tables(tmp_path):
    """A view joining two tables fed by changelogs in the same input, read by a joined rule: killed at
    random points and restarted, the outputs (the view's changelog among them) are byte for byte those
    of an uninterrupted run (the view's rows and how far it has emitted live in the checkpoint; its
    reverse index is rebuilt from the tables)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(VIEW_RULES)
    logs = write_view_log_dir(tmp_path, files=2, lines_per_file=3_000)
    ref = tmp_path / "ref"
    reference(rules, logs, ref)
    run = tmp_path / "killed"
    run.mkdir()
    report = kill_and_restart(cep_cmd(rules, logs, run, "--finish"), run, random.Random(20261128), VIEW_KILLS)
    assert report["kills"] == VIEW_KILLS, report
    for name in ("out.jsonl", "late.jsonl", "errors.jsonl"):
        got, want = (run / name).read_bytes(), (ref / name).read_bytes()
        assert got == want, f"{name} differs after {report['kills']} kills"
    rows = [json.loads(x) for x in (run / "out.jsonl").read_text().splitlines()]
    changes = [r for r in rows if r.get("view") == "sym_labels"]
    assert {r["op"] for r in changes} == {"c", "u"} and len(changes) > 40  # label and sector changes
    labelled = [r for r in rows if r.get("rule") == "labelled_rise"]
    assert len(labelled) > 20 and any(r["label"] not in (None, *[s.upper() for s in SECTORS]) for r in labelled)
    late = [json.loads(x) for x in (run / "late.jsonl").read_text().splitlines()]
    assert any(x.get("table") == "sector_names" for x in late)
    ids = [r["_id"] for r in rows]
    assert len(ids) == len(set(ids))


def test_sigterm_finishes_the_batch_checkpoints_and_exits_0(small_workload):
    tmp, rules, logs = small_workload
    out = tmp / "term"
    out.mkdir()
    proc = subprocess.Popen(cep_cmd(rules, logs, out, "--follow", "--poll", "0.05"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt = out / "state" / "checkpoint"
    deadline = time.monotonic() + 30
    while _mtime(ckpt) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    ck = read_checkpoint(str(out / "state"))
    assert ck is not None and not ck.meta["finished"]
    # the checkpoint is the state at the stop: the output on disk is exactly what it recorded
    assert (out / "out.jsonl").stat().st_size == ck.meta["outputs"]["output"][1]
    consumed = sum(off for off, _ in ck.meta["files"].values())
    assert consumed > 0
    assert ck.meta["lines"] % BATCH == 0 or consumed == sum(f.stat().st_size for f in logs.glob("part-*"))
    # a restart continues to the end; the result is the uninterrupted run's, byte for byte
    res = subprocess.run(cep_cmd(rules, logs, out, "--finish"), cwd=REPO, capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    ref = tmp / "ref"
    reference(rules, logs, ref)
    for name in ("out.jsonl", "late.jsonl", "errors.jsonl", "timeouts.jsonl"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name


def test_sigint_in_the_middle_of_a_static_input_is_a_clean_stop(small_workload):
    tmp, rules, logs = small_workload
    out = tmp / "int"
    out.mkdir()
    proc = subprocess.Popen(cep_cmd(rules, logs, out), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt = out / "state" / "checkpoint"
    deadline = time.monotonic() + 30
    while _mtime(ckpt) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    ck = read_checkpoint(str(out / "state"))
    assert ck is not None and ck.meta["lines"] < 8_000
    assert os.path.getsize(out / "out.jsonl") == ck.meta["outputs"]["output"][1]
