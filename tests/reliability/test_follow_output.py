"""Following runs write rows after every batch: cut log, replay at the same boundaries, stdout.

A following run processes what is there when it looks (no wait for a full batch) and flushes the
rows at once, ahead of the checkpoint. Exactly-once then needs the rows a reader may already have
seen to come back byte for byte after a kill: the run records every batch's cut before writing its
rows, and a restart replays those cuts (docs/reliability.md, "Rows before the checkpoint").
"""

from __future__ import annotations

import io
import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cep.durable import DurableConfig, LogSource, _CutLog, read_checkpoint, run_durable
from tests.reliability.workload import RULES, tick_lines

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "rules.yaml").write_text(RULES)
    logs = tmp_path / "logs"
    logs.mkdir()
    return tmp_path, logs


def follow_cmd(tmp: Path, logs: Path, output: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cep.cli", "run", str(tmp / "rules.yaml"), "--input", str(logs), "--state",
            str(tmp / "st"), "--output", output, "--errors", str(tmp / "err.jsonl"), "--follow", "--poll", "0.02",
            "--batch-size", "100", "-q", *extra]


def wait_for(pred, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout  # against a hang, not a speed target
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        assert proc is None or proc.poll() is None, "the run ended"
        time.sleep(0.01)


def reference_lines(tmp: Path, logs: Path) -> list[bytes]:
    """The rows of one uninterrupted run over the files as they are now (without --finish)."""
    code = run_durable(DurableConfig(rules=str(tmp / "rules.yaml"), input=str(logs), state=str(tmp / "ref_st"),
                                     output=str(tmp / "ref.jsonl"), batch_lines=100, quiet=True))
    assert code == 0
    return (tmp / "ref.jsonl").read_bytes().splitlines()


PAIR = """
rules:
  - name: pair
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0, B.ts AS t1
        PATTERN (A B) DEFINE A AS A.v = 1, B AS B.v = 2)
"""


def test_a_complex_event_is_written_before_any_checkpoint(setup):
    tmp, logs = setup
    (tmp / "rules.yaml").write_text(PAIR)  # complete at B: nothing waits for a later event
    data = logs / "a.jsonl"
    data.write_text("")
    out = tmp / "out.jsonl"
    # checkpoints only every 1,000 s and batches of 8,192 lines: neither may hold the row back
    proc = subprocess.Popen(follow_cmd(tmp, logs, str(out), "--checkpoint-seconds", "1000", "--batch-size", "8192"),
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp / "st" / "checkpoint").exists(), proc=proc)  # the fresh run's first checkpoint
        with open(data, "a") as f:
            f.write('{"k": "x", "ts": 5, "v": 1}\n{"k": "x", "ts": 7, "v": 2}\n')
        wait_for(lambda: out.stat().st_size > 0, proc=proc)
        row = json.loads(out.read_text().splitlines()[0])
        assert (row["rule"], row["t0"], row["t1"]) == ("pair", 5, 7)
        ck = read_checkpoint(str(tmp / "st"))
        assert ck.meta["lines"] == 0 and ck.meta["outputs"]["output"][1] == 0  # the row is ahead of it
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


class _Writer(threading.Thread):
    """Appends ``lines`` to a log directory in small random chunks, starting a new file now and then."""

    def __init__(self, logs: Path, lines: list[str], seed: int):
        super().__init__(daemon=True)
        self.logs, self.lines, self.rng = logs, lines, random.Random(seed)
        self.done = threading.Event()

    def run(self) -> None:
        i, part = 0, 0
        while i < len(self.lines):
            if self.rng.random() < 0.01:
                part += 1
            n = self.rng.randint(1, 20)
            with open(self.logs / f"part-{part:03d}.jsonl", "a") as f:
                f.write("".join(x + "\n" for x in self.lines[i : i + n]))
            i += n
            time.sleep(self.rng.uniform(0.0, 0.04))
        self.done.set()


def test_sigkill_while_following_a_live_writer_rewrites_the_same_bytes(setup):
    tmp, logs = setup
    lines = tick_lines(12_000, seed=41)
    writer = _Writer(logs, lines, seed=5)
    out = tmp / "out.jsonl"
    cmd = follow_cmd(tmp, logs, str(out), "--checkpoint-every", "4000", "--checkpoint-seconds", "3")
    rng = random.Random(14)

    def size() -> int:
        return out.stat().st_size if out.exists() else 0

    def past_checkpoint() -> int:
        ck = read_checkpoint(str(tmp / "st")) if (tmp / "st" / "checkpoint").exists() else None
        return out.read_bytes()[ck.meta["outputs"]["output"][1] :].count(b"\n") if ck is not None else 0

    writer.start()
    seen = b""  # what a reader of the file has seen before the last kill
    kills = replayed = 0
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            # the restart cuts the file back to the checkpoint, then writes the same bytes again
            wait_for(lambda: size() >= len(seen), proc=proc)
            assert (out.read_bytes() if seen else b"")[: len(seen)] == seen, (
                f"after kill {kills}: rows a reader saw were rewritten differently"
            )
            if kills == 8:
                break
            # then new rows: mostly until several lie past the checkpoint (the case to check), else anywhere
            wait_for(lambda: size() > len(seen) + 1000, proc=proc)
            if kills % 4:
                wait_for(lambda: past_checkpoint() >= 20, proc=proc)
            time.sleep(rng.uniform(0.0, 0.3))
            seen = out.read_bytes()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()
            kills += 1
            ck = read_checkpoint(str(tmp / "st"))
            assert ck is not None
            if len(seen) > ck.meta["outputs"]["output"][1]:
                replayed += 1
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        writer.join(timeout=120)
        assert writer.done.is_set()
        wait_for(lambda: read_checkpoint(str(tmp / "st")).meta["lines"] == len(lines), proc=proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        err = b""
        if proc.stderr is not None and not proc.stderr.closed:
            err = proc.communicate(timeout=30)[1]
        proc.wait(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert replayed >= 4, replayed  # kills that left rows after the checkpoint: the replay really ran
    got = out.read_bytes().splitlines()
    ids = [json.loads(x)["_id"] for x in got]
    assert len(ids) == len(set(ids))  # no row twice
    # the rows of one uninterrupted run over the final files (their order may differ: batches were
    # cut as the data came)
    assert sorted(got) == sorted(reference_lines(tmp, logs))


def _stdout_run(cmd: list[str]) -> tuple[subprocess.Popen, list[bytes], threading.Thread]:
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got: list[bytes] = []
    out = proc.stdout
    assert out is not None
    reader = threading.Thread(target=lambda: got.extend(iter(out.readline, b"")), daemon=True)
    reader.start()
    return proc, got, reader


def test_standard_output_is_at_least_once_with_the_same_bytes(setup):
    tmp, logs = setup
    lines = tick_lines(3000, seed=42)
    data = logs / "a.jsonl"
    data.write_text("".join(x + "\n" for x in lines[:1500]))
    cmd = follow_cmd(tmp, logs, "-", "--checkpoint-every", "1000000", "--checkpoint-seconds", "1000")
    proc, first, reader = _stdout_run(cmd)
    try:
        wait_for(lambda: len(first) > 10, proc=proc)  # rows stream out long before any checkpoint
        with open(data, "a") as f:
            f.write("".join(x + "\n" for x in lines[1500:]))
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(timeout=10)
    assert read_checkpoint(str(tmp / "st")).meta["lines"] == 0  # the fresh run's first checkpoint only
    if first and not first[-1].endswith(b"\n"):
        first.pop()  # a row cut short by the kill
    # a restart writes the rows since the checkpoint again, the same bytes first: deduplicate by _id
    want = reference_lines(tmp, logs)  # the rows of the whole input (no --finish on either side)
    proc, second, reader = _stdout_run(cmd)
    try:
        wait_for(lambda: len(second) >= len(want), proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=10)
    err = proc.stderr.read().decode()
    assert proc.returncode == 0, err
    assert "at-least-once, deduplicate by _id" in err
    assert len(first) > 10 and second[: len(first)] == first
    assert sorted(x.rstrip(b"\n") for x in second) == sorted(want)
    final = read_checkpoint(str(tmp / "st"))
    assert final.meta["lines"] == 3000 and final.meta["outputs"]["output"] == ["-", sum(map(len, second))]


def test_the_reader_of_standard_output_going_away_stops_without_a_checkpoint(setup):
    tmp, logs = setup
    (logs / "a.jsonl").write_text("".join(x + "\n" for x in tick_lines(3000, seed=43)))
    cmd = follow_cmd(tmp, logs, "-", "--checkpoint-seconds", "1000", "--checkpoint-every", "1000000")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline()  # one row, then the reader goes away
        proc.stdout.close()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    assert b"the reader of standard output went away; stopped without a checkpoint" in err
    assert read_checkpoint(str(tmp / "st")).meta["lines"] == 0


# ------------------------------------------------------------------ the pieces


def _config(tmp: Path, logs: Path) -> DurableConfig:
    return DurableConfig(rules=str(tmp / "rules.yaml"), input=str(logs), state=str(tmp / "st"),
                         output=str(tmp / "out.jsonl"), batch_lines=100, follow=True, quiet=True,
                         checkpoint_every=10**9, checkpoint_seconds=10**9)


def _started(config: DurableConfig, replay: bool = True):
    """A durable run set up as ``cep run`` would, stepped by hand; closing it without a checkpoint is a kill."""
    from cep.durable import _Run

    run = _Run(config, io.StringIO())
    assert run.start() is None
    if not replay:
        run.source.replay = []
    run.n_lines = run.n_matches = run.n_late = run.n_errors = 0
    return run


def _drain(run) -> None:
    while (got := run.source.next_batch(force=True)) is not None:
        run.step(got)


def _killed_run_on_a_growing_file(tmp: Path, logs: Path, seed: int) -> bytes:
    """A run that found the data in odd-sized pieces, wrote their rows, and was killed: its output."""
    data = logs / "a.jsonl"
    lines = [x + "\n" for x in tick_lines(2000, seed=seed)]
    data.write_text("".join(lines[:100]))
    run = _started(_config(tmp, logs))
    rng = random.Random(seed)
    at = 100
    while at < len(lines):
        got = run.source.next_batch(force=True)
        if got is not None:
            run.step(got)
        n = rng.randint(1, 60)
        with open(data, "a") as f:
            f.write("".join(lines[at : at + n]))
        at += n
    _drain(run)
    run.close()
    ck = read_checkpoint(str(tmp / "st"))
    assert ck is not None and ck.meta["lines"] == 0
    return (tmp / "out.jsonl").read_bytes()


def test_a_restart_replays_the_killed_runs_batches_byte_for_byte(setup):
    tmp, logs = setup
    seen = _killed_run_on_a_growing_file(tmp, logs, seed=48)
    assert seen.count(b"\n") > 500

    def rerun(replay: bool) -> bytes:
        again = _started(_config(tmp, logs), replay)
        _drain(again)
        again.close()
        return (tmp / "out.jsonl").read_bytes()

    # cut afresh (all the data is there now: full batches), the rows come in another order ...
    assert rerun(replay=False) != seen
    # ... so the restart replays the recorded cuts and writes the very bytes a reader may have seen
    assert rerun(replay=True) == seen


def test_when_the_input_no_longer_fits_the_cuts_the_new_cuts_follow_the_replayed_ones(setup):
    tmp, logs = setup
    _killed_run_on_a_growing_file(tmp, logs, seed=49)
    cuts = [json.loads(x) for x in (tmp / "st" / "cuts").read_bytes().splitlines()]
    # someone rewrote the file inside the third cut (one more line, same length)
    data = logs / "a.jsonl"
    raw = bytearray(data.read_bytes())
    i = raw.index(b",", cuts[2][2])
    raw[i : i + 1] = b"\n"
    data.write_bytes(bytes(raw))
    second = _started(_config(tmp, logs))
    _drain(second)
    assert "the batches recorded after the checkpoint do not fit the input" in second.err.getvalue()
    written = (tmp / "out.jsonl").read_bytes()
    second.close()  # killed too
    logged = [json.loads(x) for x in (tmp / "st" / "cuts").read_bytes().splitlines()]
    assert logged[:2] == cuts[:2] and [c[0] for c in logged] == list(range(1, len(logged) + 1))
    third = _started(_config(tmp, logs))
    assert len(third.source.replay) == len(logged)
    _drain(third)
    assert "do not fit" not in third.err.getvalue()
    assert (tmp / "out.jsonl").read_bytes() == written
    third.close()


def test_a_checkpoint_in_the_middle_of_a_replay_keeps_the_cuts_still_to_replay(setup):
    tmp, logs = setup
    seen = _killed_run_on_a_growing_file(tmp, logs, seed=50)
    second = _started(_config(tmp, logs))
    total = len(second.source.replay)
    for _ in range(5):
        second.step(second.source.next_batch(force=True))
    second.checkpoint()
    second.close()  # killed after the checkpoint, before the rest of the replay
    assert read_checkpoint(str(tmp / "st")).meta["batches"] == 5
    third = _started(_config(tmp, logs))
    assert len(third.source.replay) == total - 5
    _drain(third)
    third.close()
    assert (tmp / "out.jsonl").read_bytes() == seen


def test_a_following_source_takes_what_is_there_and_records_the_cut(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text("".join(x + "\n" for x in tick_lines(30, seed=44)))
    src = LogSource(str(tmp_path), {}, 100, follow=True)
    assert src.next_batch() is None  # without force a following source still waits for a full batch
    batch, n = src.next_batch(force=True)
    size = f.stat().st_size
    assert n == 30 and src.last_cut == ["a.jsonl", 0, 0, size, 30]
    with open(f, "a") as fh:
        fh.write("".join(x + "\n" for x in tick_lines(5, seed=45)))
    assert src.next_batch(force=True)[1] == 5 and src.last_cut[:3] == ["a.jsonl", size, 30]


def test_recorded_cuts_are_replayed_exactly_then_batches_are_cut_afresh(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text("".join(x + "\n" for x in tick_lines(300, seed=46)))
    first = LogSource(str(tmp_path), {}, 100, follow=True)
    first.batch_lines = 7  # the killed run found 7, then 7 lines ready: cut there
    cuts = [first.next_batch(force=True) and first.last_cut for _ in range(2)]
    again = LogSource(str(tmp_path), {}, 100, follow=True)
    again.replay = [list(c) for c in cuts]
    assert [again.next_batch(force=True)[1] for _ in range(3)] == [7, 7, 100]
    assert again.replay == [] and again.offsets["a.jsonl"][1] == 114


def test_cuts_that_no_longer_fit_the_input_are_dropped_with_a_warning(tmp_path):
    import io

    f = tmp_path / "a.jsonl"
    f.write_text("".join(x + "\n" for x in tick_lines(50, seed=47)))
    warn = io.StringIO()
    src = LogSource(str(tmp_path), {}, 100, follow=True, warn=warn)
    src.replay = [["a.jsonl", 0, 0, f.stat().st_size + 10, 51]]  # a cut past the end of the file
    assert src.next_batch(force=True)[1] == 50
    assert "the batches recorded after the checkpoint do not fit the input" in warn.getvalue()
    assert f"holds {f.stat().st_size} bytes, the cut ends at byte {f.stat().st_size + 10}" in warn.getvalue()


def test_the_cut_log_keeps_only_what_the_checkpoint_does_not_cover(tmp_path):
    log = _CutLog(str(tmp_path))
    for b in range(1, 6):
        log.append(b, ["a.jsonl", b * 10, b, b * 10 + 10, b + 1])
    assert [c[1] for c in log.load(after=3)] == [40, 50]
    assert [c[1] for c in log.keep(3)] == [40, 50]  # a checkpoint covering batches 1-3
    log.append(6, ["a.jsonl", 60, 6, 70, 7])
    with open(tmp_path / "cuts", "ab") as fh:
        fh.write(b'[7, "a.js')  # torn by a kill
    assert [c[1] for c in log.load(after=3)] == [40, 50, 60]
    assert log.load(after=6) == []
    log.drop(1, after=4)  # a checkpoint covering batch 4 (the log starts at batch 4)
    assert [c[1] for c in log.load(after=4)] == [50, 60]
    log.drop(1, after=4)  # not what the log holds: it is parsed instead
    assert [c[1] for c in log.load(after=4)] == [50, 60]
    assert [c[1] for c in log.keep(4, upto=5)] == [50]  # a replay dropped after batch 5
    assert (tmp_path / "cuts").read_bytes().count(b"\n") == 1
    log.close()


def test_a_checkpoint_written_in_the_background_reports_its_failure_to_the_run(tmp_path):
    from cep.durable import Checkpoint, _CheckpointWriter

    writer = _CheckpointWriter(str(tmp_path / "gone"))  # a state directory that no longer exists
    writer.start([], Checkpoint({"lines": 1}, b""), batches=3)
    with pytest.raises(FileNotFoundError):
        writer.wait()
    ok = _CheckpointWriter(str(tmp_path))
    ok.start([], Checkpoint({"lines": 1}, b"x"), batches=3)
    assert ok.wait() == 3 and read_checkpoint(str(tmp_path)).meta == {"lines": 1}
    assert ok.wait() is None  # nothing in flight


def test_periodic_checkpoints_of_a_following_run_empty_the_cut_log(setup):
    tmp, logs = setup
    data = logs / "a.jsonl"
    lines = [x + "\n" for x in tick_lines(600, seed=51)]
    data.write_text("".join(lines[:300]))
    proc = subprocess.Popen(follow_cmd(tmp, logs, str(tmp / "out.jsonl"), "--checkpoint-seconds", "0.2"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: read_checkpoint(str(tmp / "st")).meta["lines"] == 300 if (tmp / "st" / "checkpoint").exists()
                 else False, proc=proc)
        with open(data, "a") as f:
            f.write("".join(lines[300:]))
        wait_for(lambda: read_checkpoint(str(tmp / "st")).meta["lines"] == 600, proc=proc)
        # checkpointed in the background, then the cuts it covers are dropped from the log
        wait_for(lambda: (tmp / "st" / "cuts").read_bytes() == b"", proc=proc)
        assert (tmp / "out.jsonl").stat().st_size == read_checkpoint(str(tmp / "st")).meta["outputs"]["output"][1]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
