"""Rules that change while running: Engine.reload, and reloads of a durable run (file watch, SIGHUP)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cep.durable import read_checkpoint
from cep.engine import Engine, rule_fingerprint
from patterns.rules import parse_rules

REPO = Path(__file__).resolve().parents[2]


def rule(name: str, pattern: str = "A B C", define: str = "B AS B.v > A.v, C AS C.v > B.v", extra: str = "") -> str:
    return f"""
  - name: {name}{extra}
    sql: |
      SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, LAST(C.ts) AS t1, MATCH_NUMBER() AS m
        PATTERN ({pattern}) DEFINE {define})
"""


def rules(*parts: str) -> str:
    return "rules:" + "".join(parts)


def ev(ts: int, v: int, k: str = "x") -> dict:
    return {"k": k, "ts": ts, "v": v}


def test_unchanged_rules_keep_their_partial_matches_and_match_numbers():
    eng = Engine(parse_rules(rules(rule("up"), rule("gone"))))
    out = eng.process([ev(0, 1), ev(1, 2), ev(2, 3), ev(3, 1), ev(4, 2)]).matches
    assert [(r["rule"], r["m"]) for r in out] == [("up", 1), ("gone", 1)]
    # reformatted text, a new description: still the same rule
    same = rule("up", extra="\n    description: now documented").replace("PATTERN (A B C)", "PATTERN ( A  B  C ) /* same */")
    rep = eng.reload(parse_rules(rules(same, rule("new"))))
    assert rep.accepted and rep.kept == ["up"] and rep.added == ["new"] and rep.removed == ["gone"]
    assert rep.changed == []
    out = eng.process([ev(5, 3)]).matches  # completes the partial match begun before the reload
    assert [(r["rule"], r["t0"], r["m"]) for r in out] == [("up", 3, 2)]
    assert "gone" not in eng.operators and set(eng.counts()) == {"up", "new"}
    assert eng.counts()["new"].read == 1  # the added rule starts empty


def test_a_changed_rule_starts_afresh():
    eng = Engine(parse_rules(rules(rule("up"))))
    eng.process([ev(0, 1), ev(1, 2)])
    rep = eng.reload(parse_rules(rules(rule("up", define="B AS B.v > A.v, C AS C.v >= B.v"))))
    assert rep.changed == ["up"] and rep.kept == []
    assert eng.process([ev(2, 3)]).matches == []  # the old partial match is gone
    assert eng.counts()["up"].read == 1
    assert "changed (state reset) up" in rep.summary()


def test_options_are_part_of_a_rules_identity():
    a = parse_rules(rules(rule("up"))).rules[0]
    b = parse_rules(rules(rule("up", extra="\n    lateness: 5"))).rules[0]
    c = parse_rules(rules(rule("up", extra="\n    max_partial_matches: 7"))).rules[0]
    d = parse_rules(rules(rule("up", extra="\n    description: words"))).rules[0]
    assert len({rule_fingerprint(x) for x in (a, b, c)}) == 3
    assert rule_fingerprint(a) == rule_fingerprint(d)


def test_a_rule_file_with_errors_is_refused_whole_and_the_old_rules_keep_running(tmp_path):
    eng = Engine(parse_rules(rules(rule("up"))))
    eng.process([ev(0, 1), ev(1, 2)])
    bad = tmp_path / "bad.yaml"
    bad.write_text(rules(rule("up"), rule("broken", define="B AS nosuch(B.v)"), rule("fine")))
    rep = eng.reload(str(bad))
    assert not rep.accepted and list(eng.operators) == ["up"]
    assert any("nosuch" in e for e in rep.errors) and "bad.yaml:" in rep.errors[0]
    assert rep.summary().startswith("rules not reloaded, the old rules keep running")
    assert [r["rule"] for r in eng.process([ev(2, 3)]).matches] == ["up"]


def test_snapshot_after_reload_restores_into_the_new_rules():
    eng = Engine(parse_rules(rules(rule("up"))))
    eng.process([ev(0, 1), ev(1, 2)])
    new = parse_rules(rules(rule("up"), rule("other")))
    eng.reload(new)
    blob = eng.snapshot()
    eng2 = Engine(new)
    eng2.restore(blob)
    assert [r["rule"] for r in eng2.process([ev(2, 3)]).matches] == ["up"]


# ------------------------------------------------------------------ durable runs


def _wait(pred, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _append(path: Path, events: list[dict]) -> None:
    with open(path, "a") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


@pytest.mark.parametrize("trigger", ["watch", "sighup"])
def test_durable_run_reloads_between_batches(tmp_path, trigger):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(rules(rule("up")))
    logs = tmp_path / "logs"
    logs.mkdir()
    data = logs / "a.jsonl"
    _append(data, [ev(0, 1), ev(1, 2)])
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "cep.cli", "run", str(rules_file), "--input", str(logs), "--state", str(tmp_path / "st"),
           "--output", str(out), "--follow", "--poll", "0.05", "--batch-size", "1", "--checkpoint-every", "1"]
    if trigger == "watch":
        cmd.append("--watch-rules")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ck = tmp_path / "st" / "checkpoint"
        _wait(lambda: ck.exists() and read_checkpoint(str(tmp_path / "st")).meta["lines"] == 2)
        # a broken file first: refused, the old rule keeps its partial match
        rules_file.write_text(rules(rule("up"), rule("bad", define="B AS B.v >")))
        if trigger == "sighup":
            proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        rules_file.write_text(rules(rule("up"), rule("new")))
        if trigger == "sighup":
            time.sleep(0.1)
            proc.send_signal(signal.SIGHUP)
        _wait(lambda: "rule_text_new" if "name: new" in read_checkpoint(str(tmp_path / "st")).meta["rules_text"] else None)
        _append(data, [ev(2, 3), ev(3, 1), ev(4, 2), ev(5, 3)])
        _wait(lambda: read_checkpoint(str(tmp_path / "st")).meta["lines"] == 6)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "rules not reloaded, the old rules keep running" in err and "B AS B.v >" in err
    assert "rules reloaded: kept up; added new" in err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["rule"], r["t0"]) for r in rows] == [("up", 0), ("up", 3), ("new", 3)]
    # a restart uses the reloaded rules, which the checkpoint holds
    ck = read_checkpoint(str(tmp_path / "st"))
    assert "name: new" in ck.meta["rules_text"]


# ------------------------------------------------------------------ a search rule's queries file


def _search_rules() -> str:
    return ("rules:\n  - name: s\n    kind: search\n    from: news\n    default_fields: [title]\n"
            "    queries_file: q.jsonl\n")


def _queries(*pairs: tuple[str, str], bad: bool = False) -> str:
    lines = [json.dumps({"id": qid, "query": q}) for qid, q in pairs]
    if bad:
        lines.append('{"id": "broken", "query": "(pear"}')
    return "\n".join(lines) + "\n"


class _Lines:
    """Collects a process's stderr lines in a thread, so a test can wait for one without sleeping."""

    def __init__(self, stream) -> None:
        import threading

        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)


@pytest.mark.parametrize("trigger", ["watch", "sighup"])
def test_durable_run_reloads_a_changed_queries_file(tmp_path, trigger):
    import hashlib

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(_search_rules())
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(_queries(("apple", "apple")))
    logs = tmp_path / "logs"
    logs.mkdir()
    data = logs / "a.jsonl"
    _append(data, [{"id": 1, "title": "apple pie"}])
    out = tmp_path / "out.jsonl"
    state = str(tmp_path / "st")
    cmd = [sys.executable, "-m", "cep.cli", "run", str(rules_file), "--input", str(logs), "--state", state,
           "--output", str(out), "--follow", "--poll", "0.05", "--batch-size", "1", "--checkpoint-every", "1"]
    if trigger == "watch":
        cmd.append("--watch-rules")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = _Lines(proc.stderr)

    def lines_done() -> int:
        ck = read_checkpoint(state) if (tmp_path / "st" / "checkpoint").exists() else None
        return ck.meta["lines"] if ck else 0

    def edit(text: str) -> None:
        qfile.write_text(text)
        if trigger == "sighup":
            proc.send_signal(signal.SIGHUP)

    try:
        _wait(lambda: lines_done() == 1)
        # a queries file with a bad query: refused whole, the old queries keep running
        edit(_queries(("apple", "apple"), ("pear", "pear"), bad=True))
        _wait(lambda: "rules not reloaded, the old rules keep running" in err.text())
        _append(data, [{"id": 2, "title": "pear tart"}])
        _wait(lambda: lines_done() == 2)
        # fixed: the new query runs from the next batch on, and the reload is checkpointed at once
        good = _queries(("apple", "apple"), ("pear", "pear"))
        edit(good)
        sha = hashlib.sha256(good.encode()).hexdigest()
        _wait(lambda: read_checkpoint(state).meta["queries_files"] == {str(qfile.resolve()): sha})
        _append(data, [{"id": 3, "title": "pear cake"}])
        _wait(lambda: lines_done() == 3)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        err.thread.join(timeout=30)
    log = err.text()
    assert proc.returncode == 0, log
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["id"], r["query_id"]) for r in rows] == [(1, "apple"), (3, "pear")]
    why = f"the queries file {qfile.resolve()} changed"
    assert f"{why}: rules not reloaded, the old rules keep running:\n" in log
    assert f"{qfile}:3:" in log and "(pear" in log  # the refused line, with its place and a caret
    assert f"{why}: rules reloaded: changed (state reset) s" in log


def test_a_queries_file_touched_without_a_change_does_not_reload(tmp_path):
    import io
    import os

    from cep.durable import DurableConfig, run_durable

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(_search_rules())
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(_queries(("apple", "apple")))
    data = tmp_path / "a.jsonl"
    _append(data, [{"id": 1, "title": "apple pie"}])
    cfg = DurableConfig(rules=str(rules_file), input=str(data), state=str(tmp_path / "st"),
                        output=str(tmp_path / "out.jsonl"), watch_rules=True)
    err = io.StringIO()
    assert run_durable(cfg, err) == 0
    os.utime(qfile, ns=(1, 1))  # touched: a new modification time, the same content
    _append(data, [{"id": 2, "title": "apple crumble"}])
    assert run_durable(cfg, err) == 0
    assert "changed" not in err.getvalue(), err.getvalue()
    # changed while the run was stopped: the restart says so and runs the new content
    qfile.write_text(_queries(("crumble", "crumble")))
    _append(data, [{"id": 3, "title": "apple crumble"}])
    assert run_durable(cfg, err) == 0
    assert f"the queries file {qfile.resolve()} changed since the checkpoint; its new content runs" in err.getvalue()
    rows = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(r["id"], r["query_id"]) for r in rows] == [(1, "apple"), (2, "apple"), (3, "crumble")]


def test_a_refused_rule_file_does_not_hold_back_a_changed_queries_file(tmp_path):
    import io

    from cep.durable import DurableConfig, _Run

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(_search_rules())
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(_queries(("apple", "apple")))
    data = tmp_path / "a.jsonl"
    _append(data, [{"id": 1, "title": "apple pie"}])
    err = io.StringIO()
    run = _Run(DurableConfig(rules=str(rules_file), input=str(data), state=str(tmp_path / "st"),
                             output=str(tmp_path / "out.jsonl")), err)
    try:
        assert run.start() is None
        rules_file.write_text(_search_rules() + "    nosuch: 1\n")
        run.reload(None, "SIGHUP")
        assert "SIGHUP: rules not reloaded, the old rules keep running:" in err.getvalue()
        qfile.write_text(_queries(("apple", "apple"), ("pear", "pear")))
        run.reload(None, "SIGHUP")  # the broken rule file as it was: the queries reload with the rules in force
        assert err.getvalue().endswith(
            f"cep run: SIGHUP: the queries file {qfile.resolve()} changed: rules reloaded: changed (state reset) s\n")
        assert [q.id for q in run.engine.rules[0].spec.queries] == ["apple", "pear"]
        before = err.getvalue()
        run.reload(None, "SIGHUP")  # nothing new: nothing said
        assert err.getvalue() == before
    finally:
        run.close()
