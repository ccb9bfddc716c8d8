"""The session of ``cep spark``: the workers' Python, the shipped engine, private temporary files."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cep.cli import main as cep_main
from spark_udf.shipping import ENGINE_PACKAGES, engine_zip
from spark_udf.sink_log import read_rows
from tests.spark_udf.cluster import REPO, java_or_skip, python_without_engine
from tests.spark_udf.conftest import match_key

RULES = REPO / "rules" / "trading.yaml"
BARS = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"


def test_the_engine_zip_alone_gives_a_python_without_the_engine_every_package(tmp_path: Path) -> None:
    z = engine_zip(tmp_path / "a")
    names = zipfile.ZipFile(z).namelist()
    for pkg in ENGINE_PACKAGES:
        on_disk = {p.relative_to(REPO).as_posix() for p in (REPO / pkg).rglob("*.py") if "__pycache__" not in p.parts}
        assert {n for n in names if n.startswith(f"{pkg}/")} == on_disk
    assert engine_zip(tmp_path / "b").read_bytes() == z.read_bytes()  # same code, same bytes
    python = python_without_engine(tmp_path / "py")
    code = ("import sys; sys.path.insert(1, sys.argv[1]); import spark_udf.core, spark_udf.kinds, cep.engine, "
            "patterns.rules, sketches; print(spark_udf.core.__file__)")
    bare = subprocess.run([str(python), "-c", code, str(tmp_path / "nothing")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert "No module named 'spark_udf'" in bare.stderr
    shipped = subprocess.run([str(python), "-c", code, str(z)], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.strip() == str(z / "spark_udf" / "core.py")


def test_a_package_that_cannot_be_found_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match=r"cannot ship the engine to Spark: package 'no_such_pkg' is not "
                       r"importable here"):
        engine_zip(tmp_path, ("no_such_pkg",))


def test_private_files_are_private_and_removed_at_exit(tmp_path: Path) -> None:
    """The log configuration lives in a fresh 0700 folder, not a fixed name in the shared temp folder."""
    temp = tmp_path / "tmp"
    (temp / "cep-spark-log4j2.properties").mkdir(parents=True)  # the fixed name earlier versions used
    code = ("import os, stat; from spark_udf.session import _log4j_file; p = _log4j_file(); "
            "print(p); print(oct(stat.S_IMODE(os.stat(os.path.dirname(p)).st_mode))); print(open(p).read())")
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    path, mode, *text = out.stdout.splitlines()
    assert Path(path).parent.parent == temp and Path(path).parent.name.startswith("cep-spark-")
    assert mode == oct(stat.S_IRWXU)
    assert "rootLogger.level = error" in text
    assert sorted(os.listdir(temp)) == ["cep-spark-log4j2.properties"]  # removed when the process ended


@pytest.mark.spark
def test_a_command_run_without_activation_starts_its_own_python_for_the_workers(tmp_path: Path) -> None:
    """``.venv/bin/cep spark ...`` from cron: PATH has another python3 (here one that only fails).

    The workers run the command's interpreter in local mode; a directory named like the log file
    of earlier versions in the temporary folder does not matter; nothing is left there.
    """
    java_or_skip()
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text("#!/bin/sh\necho 'the python3 on PATH was started' >&2\nexit 1\n")
    (shim / "python3").chmod(0o755)
    temp = tmp_path / "tmp"
    (temp / "cep-spark-log4j2.properties").mkdir(parents=True)
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": f"{shim}:/usr/bin:/bin", "TMPDIR": str(temp),
           "PYTHONPATH": str(REPO)}
    java = shutil.which("java")
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    elif java:  # a java found on PATH only: keep it without the rest of PATH
        env["JAVA_HOME"] = str(Path(java).resolve().parents[1])
    out = tmp_path / "bf"
    done = subprocess.run([sys.executable, "-m", "cep.cli", "spark", "backfill", str(RULES), "--input", str(BARS),
                           "--output", str(out), "--master", "local[1]", "--shuffle-partitions", "2",
                           "--buckets", "4"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr
    plain = tmp_path / "plain.jsonl"
    assert cep_main(["run", str(RULES), "--input", str(BARS), "--output", str(plain), "--quiet"]) == 0
    expected = Counter(match_key(json.loads(x)) for x in plain.read_text().splitlines())
    assert Counter(match_key(json.loads(x)) for x in read_rows(out, ["match"])) == expected
    assert sorted(os.listdir(temp)) == ["cep-spark-log4j2.properties"]


def test_a_jvm_that_does_not_start_is_one_line_and_exit_3(tmp_path: Path) -> None:
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "cep.cli", "spark", "backfill", str(RULES), "--input", str(BARS),
                           "--output", str(tmp_path / "bf"), "--master", "local[1]"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    ours = [x for x in done.stderr.splitlines() if x.startswith("cep spark")]
    assert ours == ["cep spark backfill: starting Spark failed: [JAVA_GATEWAY_EXITED] Java gateway process exited "
                    "before sending its port number.; Spark's JVM did not start: Spark needs Java 17 (java on PATH, "
                    "or JAVA_HOME); the lines above are the JVM's own"], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("cmd,batch", [("backfill", True), ("run", False)])
def test_a_backfill_starts_its_jvm_with_the_batch_options_a_stream_with_javas(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cmd: str, batch: bool) -> None:
    """`cep spark backfill` asks for the batch JVM options (docs/spark.md), `cep spark run` does not;
    a user's own spark.driver.extraJavaOptions reaches the session and replaces them."""
    import spark_udf.session as session

    seen: list[dict] = []

    def fake(*args, **kwargs):  # record what the command asks for, then fail as a JVM that does not start
        seen.append(kwargs)
        raise RuntimeError("no JVM in this test")

    monkeypatch.setattr(session, "local_session", fake)
    (tmp_path / "in.jsonl").write_text('{"symbol": "A", "date": "2017-01-02", "close": 1.0}\n')
    extra = ["--checkpoint", str(tmp_path / "ck")] if cmd == "run" else []
    code = cep_main(["spark", cmd, str(REPO / "rules" / "trading.yaml"), "--input", str(tmp_path / "in.jsonl"),
                     "--output", str(tmp_path / "out"), *extra, "--conf", "spark.driver.extraJavaOptions=-XX:+UseG1GC"])
    assert code == 3 and "no JVM in this test" in capsys.readouterr().err
    assert seen[0]["batch"] is batch
    assert seen[0]["conf"] == {"spark.driver.extraJavaOptions": "-XX:+UseG1GC"}
    opts = session.driver_java_options("/l.properties", batch=batch)
    assert ("-XX:+UseSerialGC" in opts and "-XX:Tier4InvocationThreshold=50000" in opts) is batch


@pytest.mark.spark
def test_a_running_session_keeps_its_adaptive_execution(spark: Any) -> None:
    """Only a session that local_session starts for an engine-read backfill runs without adaptive
    execution; a running one (a notebook's, the tests') keeps its setting."""
    from spark_udf.session import local_session

    keys = ("spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions", "spark.sql.caseSensitive")
    before = {k: spark.conf.get(k) for k in keys}
    try:
        for value in ("true", "false"):
            spark.conf.set("spark.sql.adaptive.enabled", value)
            assert local_session("local[2]", batch=True, engine_reads=True) is spark
            assert spark.conf.get("spark.sql.adaptive.enabled") == value
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)


@pytest.mark.parametrize("engine_reads,conf,adaptive", [
    (True, {}, "false"), (False, {}, None), (True, {"spark.sql.adaptive.enabled": "true"}, None)])
def test_a_session_started_for_an_engine_read_backfill_runs_without_adaptive_execution(
        monkeypatch: pytest.MonkeyPatch, engine_reads: bool, conf: dict, adaptive: str | None) -> None:
    """A session local_session starts itself (no context running) for an engine-read backfill sets
    adaptive execution off unless the caller's conf sets it; for another backfill it does not touch it."""
    import pyspark
    from pyspark.sql import SparkSession

    from spark_udf import session

    settings: dict[str, str] = {}

    class Conf:
        def set(self, key: str, value: str) -> None:
            settings[key] = value

    class Context:
        master = "local[2]"
        _python_includes: list[str] = []

        def setLogLevel(self, level: str) -> None:
            pass

    class Session:
        conf = Conf()
        sparkContext = Context()

    class Builder:
        def master(self, _: str) -> "Builder":
            return self

        appName = master

        def config(self, key: str, value: str) -> "Builder":
            return self

        def getOrCreate(self) -> Session:
            return Session()

    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(SparkSession, "builder", Builder())
    session.local_session("local[2]", batch=True, engine_reads=engine_reads, conf=conf)
    assert settings.get("spark.sql.adaptive.enabled") == adaptive
