"""``cep spark run`` and ``cep spark backfill``: arguments, exit codes, counts on stderr."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from cep.engine import Engine
from cep.events import read_events
from patterns.rules import parse_rules
from tests.spark_udf.conftest import counted, match_key, sink_rows, write_events
from tests.spark_udf.workload import RULES_YAML, stream

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")


def _rules(tmp: Path) -> Path:
    p = tmp / "rules.yaml"
    p.write_text(RULES_YAML)
    return p


def test_add_arguments_builds_run_and_backfill() -> None:
    parser = argparse.ArgumentParser(prog="cep")
    spark_cli.add_arguments(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["spark", "run", "r.yaml", "--input", "in", "--output", "out", "--checkpoint", "ck",
                              "--trigger", "processing-time=10s", "--source-option", "maxFilesPerTrigger=2"])
    assert (args.command, args.spark_command, args.buckets, args.master) == ("spark", "run", 64, "local[*]")
    assert spark_cli._trigger(args.trigger) == "processing-time=10 seconds"
    args = parser.parse_args(["spark", "backfill", "r.yaml", "--input", "in", "--output", "out", "--format", "parquet"])
    assert (args.spark_command, args.format, args.mode) == ("backfill", "parquet", "error")


def test_usage_errors_exit_2_before_spark_starts(tmp_path: Path, capsys, monkeypatch) -> None:
    import spark_udf.session

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(spark_udf.session, "local_session", no_spark)
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    sql: SELECT nothing\n")
    assert spark_cli.main(["run", str(bad), "--input", "in", "--output", "o", "--checkpoint", "c"]) == 2
    rules = _rules(tmp_path)
    assert spark_cli.main(["run", str(rules), "--input", "in", "--output", "o", "--checkpoint", "c",
                           "--trigger", "sometimes"]) == 2
    assert "expected available-now, once or processing-time=10s" in capsys.readouterr().err
    assert spark_cli.main(["backfill", str(rules), "--input", "in", "--output", "o", "--source-option", "x"]) == 2
    assert "--source-option 'x': expected KEY=VALUE" in capsys.readouterr().err
    missing = tmp_path / "no-such-folder"
    for given in (str(missing), missing.as_uri()):
        assert spark_cli.main(["backfill", str(rules), "--input", given, "--output", str(tmp_path / "o")]) == 2
        assert f"cep spark backfill: --input {given!r} does not exist" in capsys.readouterr().err
    assert spark_cli.main(["run", str(rules), "--input", str(tmp_path), "--output", "o", "--checkpoint", "c",
                           "--master", "spark:/host:7077"]) == 2
    assert ("cep spark run: --master 'spark:/host:7077': expected local, local[N], local[*], spark://HOST:PORT, "
            "yarn or k8s://https://HOST:PORT") in capsys.readouterr().err


@pytest.mark.spark
def test_schema_inference_needs_files(spark: Any, tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    code = spark_cli.main(["run", str(_rules(tmp_path)), "--input", str(tmp_path / "empty"), "--output",
                           str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c"), "--shuffle-partitions", "2"])
    assert code == 2
    assert "pass --schema" in capsys.readouterr().err


@pytest.mark.spark
def test_a_path_spark_cannot_find_is_one_line_and_exit_3(spark: Any, tmp_path: Path, capsys) -> None:
    glob = str(tmp_path / "nothing" / "*.json")  # a glob is Spark's to resolve, not checked before
    assert spark_cli.main(["backfill", str(_rules(tmp_path)), "--input", glob, "--output", str(tmp_path / "o"),
                           "--shuffle-partitions", "2"]) == 3
    err = capsys.readouterr().err
    assert err.splitlines() == [f"cep spark backfill: reading the input failed: [PATH_NOT_FOUND] Path does not "
                                f"exist: file:{glob}.; check --input (a folder, a file or a glob)"]


def _timed(argv: list[str], capsys) -> tuple[float, str]:
    started = time.monotonic()
    assert spark_cli.main(argv) == 0
    return time.monotonic() - started, capsys.readouterr().err


def _check_times(err: str, wall: float, phases: tuple[str, ...]) -> None:
    """The summary's time is the command's whole wall time, and its phases add up to it."""
    names = ", ".join(rf"{p} ([\d.]+) s" for p in phases)
    m = re.search(rf" in ([\d.]+) s \({names}\) -> ", err)
    assert m, err
    total, parts = float(m.group(1)), [float(x) for x in m.groups()[1:]]
    assert wall - 0.5 <= total <= wall + 0.05, (total, wall)
    assert abs(sum(parts) - total) <= 0.25, (parts, total)


@pytest.mark.spark
def test_run_and_backfill_print_the_counts_and_agree(spark: Any, tmp_path: Path, capsys) -> None:
    paths = [write_events(tmp_path / "in", i, rows) for i, rows in enumerate(stream(41, files=3))]
    rules = _rules(tmp_path)
    common = ["--input", str(tmp_path / "in"), "--shuffle-partitions", "2", "--buckets", "4"]
    compact = "spark.sql.streaming.fileSink.log.compactInterval"
    try:  # a compaction file every second micro-batch, for 'cep spark cat' to read
        wall, err = _timed(["run", str(rules), *common, "--output", str(tmp_path / "out"),
                            "--checkpoint", str(tmp_path / "ck"), "--max-files-per-trigger", "1",
                            "--conf", f"{compact}=2"], capsys)
    finally:
        spark.conf.unset(compact)
    _check_times(err, wall, ("Spark start", "planning", "streaming"))
    rows = sink_rows(spark, tmp_path / "out")
    m = re.search(r"(\d+) micro-batches, ([\d,]+) input rows, ([\d,]+) complex events, (\d+) late, (\d+) errors", err)
    assert m, err
    assert int(m.group(1)) == 4  # three files and the batch that moves the watermark
    assert int(m.group(2).replace(",", "")) == sum(len(p.read_text().splitlines()) for p in paths)
    assert int(m.group(3).replace(",", "")) == sum(1 for r in rows if r["output"] == "match")
    assert int(m.group(4)) == 3 and int(m.group(5)) == sum(1 for r in rows if r["output"] == "error")
    for name in ("within", "all_rows", "global"):
        n = sum(1 for r in rows if r["output"] == "match" and r["rule"] == name)
        assert f"  {name}: {n:,} complex events" in err

    wall, err = _timed(["backfill", str(rules), *common, "--output", str(tmp_path / "bf")], capsys)
    # pattern rules: key-set groups, whose one job finds arrival order too (planning runs no job)
    _check_times(err, wall, ("Spark start", "planning", "job"))
    back = sink_rows(spark, tmp_path / "bf")
    eng = Engine(parse_rules(RULES_YAML))
    exp = eng.run(b for p in paths for b in read_events(p))
    assert counted(back, "match") == Counter(match_key(x) for x in exp.matches)
    assert f"cep spark backfill: {len(exp.matches):,} complex events, {len(exp.late)} late" in err
    # the stream stops at the final watermark; the backfill also flushes what the end of input decides
    assert counted(rows, "match") <= counted(back, "match")


    # 'cep spark cat' reads what Spark reads: committed files only, with output and rule
    meta = sorted(p.name for p in (tmp_path / "out" / "_spark_metadata").iterdir() if not p.name.startswith("."))
    assert meta == ["0", "1.compact", "2", "3.compact"]
    committed = next((tmp_path / "out" / "output=match").rglob("part-*.json"))
    leftover = committed.with_name("part-00000-00000000-dead-beef-0000-000000000000.c000.json")
    leftover.write_bytes(committed.read_bytes())  # as a micro-batch that died before its commit leaves it
    for folder, expected in (("out", rows), ("bf", back)):
        assert spark_cli.main(["cat", str(tmp_path / folder)]) == 0
        printed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert Counter(match_key(r) for r in printed) == Counter(match_key(r) for r in expected)
        assert Counter(r["output"] for r in printed) == Counter(r["output"] for r in expected)
    naive = [x for p in (tmp_path / "out").rglob("part-*.json") for x in p.read_text().splitlines()]
    assert len(naive) == len(rows) + len(leftover.read_text().splitlines())  # plain cat shows the leftover too
    assert spark_cli.main(["cat", str(tmp_path / "out"), "--output", "late", "--rule", "within"]) == 0
    late = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert late and {(r["output"], r["rule"]) for r in late} == {("late", "within")}
    assert len(late) == sum(1 for r in rows if r["output"] == "late" and r["rule"] == "within")


@pytest.mark.spark
def test_a_json_backfill_decoded_by_the_engine_gives_the_rows_of_sparks_reader_and_cep_run(
        spark: Any, tmp_path: Path, capsys, monkeypatch) -> None:
    from spark_udf import api
    from spark_udf.json_lines import JsonLinesDecoder
    from tests.spark_udf.workload import SCHEMA, events

    files = stream(23, files=3)  # file 1 holds a malformed line, a row without a key and one without a time
    # values that do not fit the schema: malformed records under Spark's reader and the engine's
    # decoder alike, whose other values stay (Spark's partial result): the first one's time, 3 s
    # ahead, moves the arrival watermark, so that rows after it are late, as cep run has them (a malformed
    # record is never late itself: the second is not behind the first)
    ahead = max(r["ts"] for r in files[1][:12] if isinstance(r, dict) and r["ts"] is not None) + 3000
    misfits = {f'{{"k": "zz", "ts": {ahead}, "px": "high", "tag": "warm"}}': {"k": "zz", "ts": ahead, "tag": "warm"},
               f'{{"k": "yy", "ts": {ahead + 1}, "px": 5.5, "tag": "warm"}}': {"k": "yy", "ts": ahead + 1, "tag": "warm"},
               '{"k": "xx", "ts": "soon", "px": 1, "tag": "warm"}': None}
    for at, line in zip((12, 16, 20), misfits):
        files[1].insert(at, line)
    for i, rows in enumerate(files):
        write_events(tmp_path / "in", i, rows)
    rules = _rules(tmp_path)
    decoders: list[Any] = []
    planned = api._engine_decoder
    monkeypatch.setattr(api, "_engine_decoder", lambda *a: decoders.append(planned(*a)) or decoders[-1])
    common = ["backfill", str(rules), "--input", str(tmp_path / "in"), "--schema", SCHEMA, "--shuffle-partitions", "2",
              "--buckets", "4"]
    counts = re.compile(r"cep spark backfill: [\d,]+ complex events, \d+ late, \d+ errors")
    assert spark_cli.main([*common, "--output", str(tmp_path / "engine")]) == 0
    engine_counts = counts.findall(capsys.readouterr().err)
    assert len(decoders) == 1 and isinstance(decoders[0], JsonLinesDecoder)
    # a source option keeps Spark's JSON reader (it would not see the option otherwise)
    assert spark_cli.main([*common, "--output", str(tmp_path / "spark"), "--source-option", "mode=PERMISSIVE"]) == 0
    assert counts.findall(capsys.readouterr().err) == engine_counts and len(engine_counts) == 1
    assert len(decoders) == 1

    def outputs(folder: str) -> Counter:
        return Counter((r["output"], r["rule"], r.get("reason"), r.get("event"), match_key(r)) for r in
                       sink_rows(spark, tmp_path / folder))

    got = outputs("engine")
    assert got == outputs("spark")
    # cep run has no schema: it reads a misfit as an event (of a key of its own, a tag that no rule
    # waits for), which moves the watermark as the malformed record's time moves the backfill's
    def as_cep_run_reads(rows: list[Any]) -> list[dict[str, Any]]:
        got = [misfits[r] if isinstance(r, str) and r in misfits else r for r in rows]
        return events([r for r in got if r is not None])  # (and no malformed line: cep run reports it alike)

    eng = Engine(parse_rules(RULES_YAML))
    exp = eng.run([as_cep_run_reads(rows) for rows in files])
    rows = sink_rows(spark, tmp_path / "engine")
    assert counted(rows, "match") == Counter(match_key(m) for m in exp.matches) and exp.matches
    late = Counter((r["rule"], json.dumps(json.loads(r["event"]), sort_keys=True)) for r in rows if r["output"] == "late")
    assert late == Counter((e["rule"], json.dumps({k: v for k, v in e["event"].items() if v is not None}, sort_keys=True))
                           for e in exp.late)
    assert len(exp.late) > 6  # the rows behind the misfit's time, and the stream's late rows
    malformed = sorted(r["event"] for r in rows if r["output"] == "error" and r["rule"] is None)
    assert malformed == sorted([*misfits, '{"k": "a", "ts": 12, '])
    assert (Counter(r["reason"] for r in rows if r["output"] == "error" and r["rule"] is not None)
            == Counter(e["reason"] for e in exp.errors if e.get("rule") is not None))


@pytest.mark.spark
def test_a_json_backfill_with_an_inferred_schema_is_decoded_by_the_engine(spark: Any, tmp_path: Path, capsys,
                                                                           monkeypatch) -> None:
    # without --schema: the schema inferred from the files (names in sorted order, the malformed
    # line's column among them) plans the frame, and the engine's decoder gives Spark's reader's rows
    from spark_udf import api
    from spark_udf.json_lines import JsonLinesDecoder

    for i, rows in enumerate(stream(5, files=2)):
        write_events(tmp_path / "in", i, rows)
    decoders: list[Any] = []
    planned = api._engine_decoder
    monkeypatch.setattr(api, "_engine_decoder", lambda *a: decoders.append(planned(*a)) or decoders[-1])
    common = ["backfill", str(_rules(tmp_path)), "--input", str(tmp_path / "in"), "--shuffle-partitions", "2",
              "--buckets", "4"]
    assert spark_cli.main([*common, "--output", str(tmp_path / "engine")]) == 0
    assert spark_cli.main([*common, "--output", str(tmp_path / "spark"), "--source-option", "mode=PERMISSIVE"]) == 0
    capsys.readouterr()
    assert len(decoders) == 1 and isinstance(decoders[0], JsonLinesDecoder)

    def outputs(folder: str) -> Counter:
        return Counter(json.dumps(r, sort_keys=True, default=str) for r in sink_rows(spark, tmp_path / folder))

    got = outputs("engine")
    assert got == outputs("spark")
    assert any('"output": "match"' in r for r in got) and any('"output": "error"' in r for r in got)
