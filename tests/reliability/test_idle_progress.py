"""Idle progress in live runs: durable ``--follow`` (cut log, restarts) and ``--input -``.

A durable run that moves its watermarks by the wall clock records each such *idle advance* in
``STATE/cuts``, numbered with the batches, before writing its rows; a restart from any earlier
checkpoint replays it at the same place and writes the same bytes. The durable tests drive the
run with a fake clock and a fake wait for input (no sleeping); two tests run the command itself,
killed with SIGKILL and fed through a pipe.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cep.durable import DurableConfig, _Run, read_checkpoint, run_durable

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000  # 2023-11-14, epoch ms

RULES = """
rules:
  - name: unshipped
    description: an order and its updates, ended 10 minutes after the order (the best match so far)
    sql: |
      SELECT * FROM orders MATCH_RECOGNIZE (PARTITION BY order_id ORDER BY ts
        MEASURES O.ts AS placed, COUNT(U.*) AS updates, LAST(U.ts) AS last_update
        PATTERN (O U*) WITHIN INTERVAL '10' MINUTE
        DEFINE O AS O.kind = 'placed', U AS U.kind = 'update')
  - name: per_minute
    kind: analytics
    sql: SELECT order_id, COUNT(*) AS n FROM orders GROUP BY order_id, TUMBLE(ts, INTERVAL '1' MINUTE)
"""


def ev(order: str, dt_ms: int, kind: str) -> str:
    return json.dumps({"order_id": order, "ts": T0 + dt_ms, "kind": kind}) + "\n"


class Clock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


class Killed(Exception):
    """Stands for SIGKILL: the run ends where it is, without a last checkpoint."""


class Waiter:
    """The wait for input: ``hook(run, now)``, then the fake clock moves on by the time asked, unless
    the hook wrote input (it returns True), which wakes the run at once as inotify does."""

    def __init__(self, clock: Clock, hook):
        self.clock, self.hook, self.run = clock, hook, None
        self.waits = 0

    def wait(self, seconds: float) -> None:
        self.waits += 1
        assert self.waits < 10_000, "the run never came to the end of the script"
        if not self.hook(self.run, self.clock.now):  # what the run did up to now is written
            self.clock.now += seconds

    def close(self) -> None:
        pass


def config(tmp: Path, **kw) -> DurableConfig:
    base = dict(rules=str(tmp / "rules.yaml"), input=str(tmp / "logs"), state=str(tmp / "st"),
                output=str(tmp / "out.jsonl"), late=str(tmp / "late.jsonl"), follow=True, idle_progress=60.0,
                poll_seconds=3600.0, checkpoint_seconds=1e9, checkpoint_every=10**9, quiet=True)
    base.update(kw)
    return DurableConfig(**base)


def drive(cfg: DurableConfig, clock: Clock, hook) -> tuple[_Run, bool]:
    """Run ``cfg`` on the fake clock until the hook stops it (or kills it: then True)."""
    waiter = Waiter(clock, hook)
    run = _Run(cfg, io.StringIO(), clock=clock, waiter=waiter)
    waiter.run = run
    killed = False
    try:
        assert run.start() is None
        run.loop()
    except Killed:
        killed = True
    finally:
        run.close()
    return run, killed


@pytest.fixture
def tmp(tmp_path):
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "logs").mkdir()
    return tmp_path


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


def test_an_order_that_sends_nothing_more_is_ended_by_the_wall_clock(tmp):
    (tmp / "logs" / "a.jsonl").write_text(ev("o1", 0, "placed") + ev("o1", 30_000, "update") + ev("o2", 45_000, "placed"))
    clock = Clock()
    start = clock.now
    seen: list[tuple[float, int]] = []  # (fake time, rows written by then)

    def hook(run, now):
        seen.append((now - start, len(rows(tmp / "out.jsonl"))))
        if now - start > 3600:
            run.flags.stop = True
        return False

    run, _ = drive(config(tmp), clock, hook)
    got = rows(tmp / "out.jsonl")
    # T0 is 20 s into a minute: o2's event closes the window of o1's two, o2's own window needs the
    # watermark at T0 + 100 s, 55 s past the last event: it closes once 60 s of quiet have passed
    assert [(r["rule"], r.get("order_id"), r.get("n")) for r in got[:2]] == [
        ("per_minute", "o1", 2), ("per_minute", "o2", 1)]
    ended = [r for r in got if r["rule"] == "unshipped"]
    assert ended == [
        {"order_id": "o1", "placed": T0, "updates": 1, "last_update": T0 + 30_000, "rule": "unshipped",
         "_id": ended[0]["_id"]},
        {"order_id": "o2", "placed": T0 + 45_000, "updates": 0, "last_update": None, "rule": "unshipped",
         "_id": ended[1]["_id"]},
    ]
    # the input went quiet at event time T0 + 45 s; o1's deadline (T0 + 10 min) is 555 s of wall time
    # later, o2's 600 s: each comes out at the first look after that (the run waits just so long)
    first = {n: t for t, n in reversed(seen)}
    assert first[1] == 0 and [first[n] for n in (2, 3, 4)] == pytest.approx([60, 555, 600], abs=0.002)
    assert run.n_idle == 3 and run.meta["batches"] == 4  # one batch, three idle advances


def test_an_order_placed_and_not_shipped_within_2_days_comes_out_on_a_quiet_input(tmp):
    (tmp / "rules.yaml").write_text("""
rules:
  - name: not_shipped
    sql: |
      SELECT * FROM orders MATCH_RECOGNIZE (PARTITION BY order_id ORDER BY ts
        MEASURES P.ts AS placed PATTERN (P NOT S) WITHIN INTERVAL '2' DAY
        DEFINE P AS P.kind = 'placed', S AS S.kind = 'shipped')
""")
    day = 86_400_000
    (tmp / "logs" / "a.jsonl").write_text(
        ev("o1", 0, "placed") + ev("o2", 3_600_000, "placed") + ev("o2", day, "shipped") + ev("o3", day + 1, "placed"))
    clock = Clock()
    start = clock.now
    seen: list[tuple[float, int]] = []

    def hook(run, now):
        seen.append((now - start, len(rows(tmp / "out.jsonl"))))
        if now - start > 3 * 86_400:
            run.flags.stop = True
        return False

    run, _ = drive(config(tmp, late=None, idle_progress=300.0), clock, hook)
    assert [(r["order_id"], r["placed"]) for r in rows(tmp / "out.jsonl")] == [("o1", T0), ("o3", T0 + day + 1)]
    # quiet from event time T0 + 1 day + 1 ms: o1's 2 days end 1 day less 1 ms of wall time later,
    # o3's 2 days after it (o2 was shipped)
    first = {n: t for t, n in reversed(seen)}
    assert first[1] == pytest.approx(86_399.999, abs=0.002) and first[2] == pytest.approx(172_800, abs=0.002)
    assert run.n_idle == 2


@pytest.mark.parametrize("checkpoint_after", [0, 1, 2, 3, 4])
def test_a_restart_replays_the_idle_advances_and_writes_the_same_bytes(tmp, checkpoint_after):
    log = tmp / "logs" / "a.jsonl"
    log.write_text(ev("o1", 0, "placed") + ev("o1", 20_000, "update"))
    clock = Clock()
    start = clock.now
    fed = []

    def hook(run, now):
        quiet = now - start
        if run.meta["batches"] == checkpoint_after and run.ck_taken != checkpoint_after:
            run.checkpoint()
        if quiet >= 1000 and not fed:
            # new input after the idle advances: o1 again behind the moved watermark (late), o3 anew
            with open(log, "a") as f:
                f.write(ev("o1", 400_000, "update") + ev("o3", 1_200_000, "placed"))
            fed.append(now)
            return True
        elif fed and now - fed[0] >= 2000:
            raise Killed()
        return False

    run, killed = drive(config(tmp), clock, hook)
    assert killed
    steps = [json.loads(x) for x in (tmp / "st" / "cuts").read_bytes().splitlines()]
    kinds = [("idle" if isinstance(s[1], dict) else "batch") for s in steps]
    assert kinds == ["batch", "idle", "idle", "batch", "idle", "idle"][checkpoint_after:]
    assert read_checkpoint(str(tmp / "st")).meta["batches"] == checkpoint_after
    out, late = (tmp / "out.jsonl").read_bytes(), (tmp / "late.jsonl").read_bytes()
    # the window rule had moved only to T0 + 80 s, so o1's update at T0 + 400 s is on time there
    assert [(r["rule"], r["order_id"]) for r in rows(tmp / "out.jsonl")] == [
        ("per_minute", "o1"), ("unshipped", "o1"), ("per_minute", "o1"), ("per_minute", "o3"), ("unshipped", "o3")]
    assert [json.loads(x)["event"]["ts"] for x in late.splitlines()] == [T0 + 400_000]
    # a restart without --follow: it replays the recorded batches and idle advances, then stops
    assert run_durable(config(tmp, follow=False, idle_progress=None)) == 0
    assert (tmp / "out.jsonl").read_bytes() == out
    assert (tmp / "late.jsonl").read_bytes() == late
    assert (tmp / "st" / "cuts").read_bytes() == b""


def test_the_cut_log_refuses_a_malformed_idle_line(tmp):
    from cep.durable import _CutLog

    cuts = _CutLog(str(tmp))
    cuts.append(1, ["a.jsonl", 0, 0, 10, 1])
    cuts.append(2, {"idle": {"r": 5}})
    with open(tmp / "cuts", "ab") as f:
        f.write(b'[3, {"idle": {"r": "soon"}}]\n[4, ["a.jsonl", 10, 1, 20, 2]]\n')
    assert cuts.load(0) == [["a.jsonl", 0, 0, 10, 1], {"idle": {"r": 5}}]
    assert cuts.keep(1) == [{"idle": {"r": 5}}]
    assert (tmp / "cuts").read_bytes() == b'[2, {"idle": {"r": 5}}]\n'
    cuts.close()


# ------------------------------------------------------------------ the command itself

FAST = """
rules:
  - name: open
    sql: |
      SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0, COUNT(B.*) AS nb
        PATTERN (A B*) WITHIN INTERVAL '300' MILLISECOND DEFINE A AS A.v = 1, B AS B.v = 2)
"""


def wait_for(pred, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout  # against a hang, not a speed target
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        assert proc.poll() is None, "the run ended"
        time.sleep(0.01)


def test_sigkill_after_an_idle_advance_then_restart_gives_the_same_bytes(tmp):
    (tmp / "rules.yaml").write_text(FAST)
    (tmp / "logs" / "a.jsonl").write_text('{"k": "x", "ts": 1000, "v": 1}\n{"k": "y", "ts": 1100, "v": 0}\n')
    out = tmp / "out.jsonl"
    cmd = [sys.executable, "-m", "cep.cli", "run", str(tmp / "rules.yaml"), "--input", str(tmp / "logs"),
           "--state", str(tmp / "st"), "--output", str(out), "--follow", "--poll", "0.02", "--idle-progress", "0.1",
           "-q"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: out.exists() and out.stat().st_size > 0, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    written = out.read_bytes()
    assert [json.loads(x)["t0"] for x in written.splitlines()] == [1000]
    assert any(isinstance(json.loads(x)[1], dict) for x in (tmp / "st" / "cuts").read_bytes().splitlines())
    # the restart (no --follow) cuts the file back to the checkpoint and replays the advance
    again = subprocess.run(cmd[:-6] + ["-q"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert out.read_bytes() == written


def test_standard_input_that_goes_quiet_still_ends_the_partial_match(tmp):
    (tmp / "rules.yaml").write_text(FAST)
    out = tmp / "out.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "cep.cli", "run", str(tmp / "rules.yaml"), "--input", "-",
                             "--output", str(out), "--idle-progress", "0.1"],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(b'{"k": "x", "ts": 1000, "v": 1}\n')
        proc.stdin.flush()
        # the pipe stays open and says nothing more: the wall clock ends x's partial match
        wait_for(lambda: out.exists() and out.stat().st_size > 0, proc)
        # behind the moved watermark: late; then the pipe closes (communicate closes it)
        _, err = proc.communicate(b'{"k": "x", "ts": 1200, "v": 2}\n', timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert [(r["t0"], r["nb"]) for r in rows(out)] == [(1000, 0)]
    assert "1 complex event, 1 late, 0 errors, 1 idle advance" in err.decode()


@pytest.mark.parametrize("args, message", [
    (["--state", "{st}", "--idle-progress", "5"], "--idle-progress needs --follow"),
    (["--idle-progress", "5"], "--idle-progress needs a live input: --input - (standard input) alone"),
    (["--state", "{st}", "--follow", "--idle-progress", "-1"], "--idle-progress takes seconds of wall time, 0 or more; found -1.0"),
])
def test_idle_progress_where_it_cannot_work_is_a_usage_error(tmp, args, message, capsys):
    from cep.cli import main

    (tmp / "logs" / "a.jsonl").write_text(ev("o1", 0, "placed"))
    code = main(["run", str(tmp / "rules.yaml"), "--input", str(tmp / "logs" / "a.jsonl"), "--output",
                 str(tmp / "out.jsonl"), *[a.format(st=tmp / "st") for a in args]])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
