"""The JVM options of ``cep spark backfill``: chosen before Spark starts by whether the engine will
read the input (spark_udf.local_files.engine_reads_input), which must answer as the planning decides.

Without Spark: each condition of the answer turns it. With Spark: for inputs read as ``cep spark
backfill`` reads them (its own ``_read``), the answer is True exactly when the planned backfill
reads no file through Spark (no file relation among the plan's leaves: the map tasks read the
splits themselves); the one deliberate difference, no ``--schema``, is pinned too.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from cep.cli import spark as spark_cli
from patterns.rules import parse_rules
from spark_udf.local_files import engine_reads_input, flat_ddl
from tests.spark_udf.test_backfill_groups import JOINED  # a rule joining a table
from tests.spark_udf.workload import RULES_YAML

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")

SCHEMA = "k string, ts long, px long, tag string"
ANALYTICS = """
  - name: per_key
    kind: analytics
    sql: |
      SELECT k, COUNT(*) AS n FROM ticks GROUP BY k, TUMBLE(ts, INTERVAL '5' SECOND)
"""
SEARCH = "  - {name: hot, kind: search, from: ticks, time_field: ts, query: hot}\n"


def _lines(n: int = 30) -> bytes:
    rows = [{"k": "ab"[i % 2], "ts": 1000 * i, "px": i % 7, "tag": "hot" if i % 5 == 0 else "cold"} for i in range(n)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _files(tmp: Path) -> dict[str, Path]:
    one = tmp / "one.jsonl"
    one.write_bytes(_lines())
    folder = tmp / "folder"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(_lines(20))
    (folder / "b.jsonl").write_bytes(_lines(10))
    (folder / "_SUCCESS").write_bytes(b"")  # hidden from Spark's listing, as from the answer
    zipped = tmp / "zipped.jsonl.gz"
    zipped.write_bytes(gzip.compress(_lines()))
    nested = tmp / "nested"
    (nested / "day=1").mkdir(parents=True)
    (nested / "day=1" / "a.jsonl").write_bytes(_lines())
    return {"one": one, "folder": folder, "zipped": zipped, "nested": nested}


def test_flat_ddl_reads_only_what_the_decoder_reads() -> None:
    assert flat_ddl(SCHEMA) == [("k", "string"), ("ts", "bigint"), ("px", "bigint"), ("tag", "string")]
    assert flat_ddl("a INT,b Boolean , c tinyint,d short, `x``y` double") == [
        ("a", "int"), ("b", "boolean"), ("c", "tinyint"), ("d", "smallint"), ("x`y", "double")]
    for ddl in ("a float", "a decimal(10,2)", "a timestamp", "a date", "a array<int>", "a string NOT NULL",
                "a string COMMENT 'x'", "a string,", "", "a", "a varchar(3)", "a:int", "a string b int"):
        assert flat_ddl(ddl) is None, ddl


def test_a_folder_that_cannot_be_listed_is_no_answer_but_false(tmp_path: Path, monkeypatch) -> None:
    """An OSError while listing (a folder without read permission, a file gone meanwhile) is not
    raised by the answer, which the command takes before Spark starts: Spark's reading says what is wrong."""
    import spark_udf.local_files as local_files

    files = _files(tmp_path)

    def refused(path: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(local_files.os, "scandir", refused)
    assert not engine_reads_input(parse_rules(RULES_YAML), [(None, str(files["folder"]))], "json", SCHEMA, {},
                                  "local[2]", {})


def test_each_condition_turns_the_answer(tmp_path: Path) -> None:
    files = _files(tmp_path)
    pattern = parse_rules(RULES_YAML)

    def reads(rules: Any = pattern, path: Any = files["one"], name: str | None = None, fmt: str = "json",
              schema: str | None = SCHEMA, options: dict | None = None, master: str = "local[2]",
              conf: dict | None = None) -> bool:
        return engine_reads_input(rules, [(name, str(path))], fmt, schema, options or {}, master, conf or {})

    assert reads()
    assert reads(path=files["folder"]) and reads(path=f"file://{files['one']}") and reads(path=tmp_path / "*.jsonl")
    assert reads(master="local") and reads(conf={"spark.sql.shuffle.partitions": "8"})
    assert not reads(path=files["zipped"])
    assert not reads(path=files["nested"])  # a subfolder may be a partition column
    assert not reads(path=tmp_path / "missing.jsonl")
    assert not reads(path="s3a://bucket/a.jsonl") and not reads(path="hdfs:///a.jsonl")
    assert not reads(path=str(tmp_path / "{one,two}.jsonl"))
    assert not reads(path=str(tmp_path / "on\\e*.jsonl"))  # Hadoop's glob escape: unsure
    assert not reads(name="ticks")
    assert not reads(fmt="csv") and not reads(fmt="parquet")
    assert not reads(schema=None)  # Spark's reader infers it from every row
    assert not reads(schema="k string, ts timestamp, px long, tag string")
    assert not reads(options={"multiLine": "true"})
    assert not reads(master="spark://host:7077") and not reads(master="yarn")
    for key, value in (("spark.cep.backfill.localFiles", "false"), ("spark.sql.caseSensitive", "false"),
                       ("spark.sql.legacy.json.allowEmptyString.enabled", "true"),
                       ("spark.sql.json.enableExactStringParsing", "false")):
        assert not reads(conf={key: value}), key
    assert not reads(rules=parse_rules(RULES_YAML + ANALYTICS))
    assert not reads(rules=parse_rules(RULES_YAML + SEARCH))
    assert not reads(rules=parse_rules(JOINED))
    assert not reads(rules=[])
    assert not engine_reads_input(pattern, [(None, str(files["one"])), (None, str(files["folder"]))], "json",
                                  SCHEMA, {}, "local[2]", {})


def _args(path: Path, rules: Path, *extra: str) -> Any:
    parser = argparse.ArgumentParser(prog="cep")
    spark_cli.add_arguments(parser.add_subparsers(dest="command"))
    return parser.parse_args(["spark", "backfill", str(rules), "--input", str(path), "--output", "out", *extra])


@pytest.mark.spark
def test_the_answer_is_the_plans(case_sensitive: Any, tmp_path: Path) -> None:
    """For each input and rule set, True exactly when the planned backfill reads no file through Spark."""
    from spark_udf.api import SparkRunConfig, apply_rules

    spark = case_sensitive
    files = _files(tmp_path)
    rule_files = {}
    for name, text in (("pattern", RULES_YAML), ("analytics", RULES_YAML + ANALYTICS),
                       ("search", RULES_YAML + SEARCH), ("joined", JOINED)):
        rule_files[name] = tmp_path / f"{name}.yaml"
        rule_files[name].write_text(text)

    def planned(path: Path, rules: str, *extra: str, conf: dict | None = None) -> tuple[bool, bool]:
        args = _args(path, rule_files[rules], "--schema", SCHEMA, *extra)
        for k, v in (conf or {}).items():
            spark.conf.set(k, v)
        try:
            frame, source = spark_cli._read(spark, args, streaming=False, path=str(path))
            result = apply_rules(frame, parse_rules(rule_files[rules].read_text()),
                                 SparkRunConfig(source_column=source, arrival_columns=(source, spark_cli.BLOCK)))
            leaves = result.envelope._jdf.queryExecution().optimizedPlan().collectLeaves()
            kinds = {leaves.apply(i).getClass().getSimpleName() for i in range(leaves.size())}
        finally:
            for k in conf or {}:
                spark.conf.unset(k)
        answer = engine_reads_input(parse_rules(rule_files[rules].read_text()), [(None, str(path))], args.format,
                                    args.schema, {}, "local[2]", conf or {})
        return answer, "LogicalRelation" not in kinds

    cases = [(files["one"], "pattern"), (files["folder"], "pattern"), (files["zipped"], "pattern"),
             (files["nested"], "pattern"), (files["one"], "analytics"), (files["one"], "search"),
             (files["one"], "joined")]
    got = {(p.name, r): planned(p, r) for p, r in cases}
    got[("one", "localFiles=false")] = planned(files["one"], "pattern", conf={"spark.cep.backfill.localFiles": "false"})
    for case, (answer, engine) in got.items():
        assert answer == engine, (case, answer, engine)
    assert got[("one.jsonl", "pattern")] == (True, True) and got[("folder", "pattern")] == (True, True)
    assert got[("zipped.jsonl.gz", "pattern")] == (False, False)

    # without --schema Spark's reader infers one from every row: the JVM reads them all even where
    # the backfill then decodes the lines with the engine, so the answer is False
    args = _args(files["one"], rule_files["pattern"])
    frame, source = spark_cli._read(spark, args, streaming=False, path=str(files["one"]))
    result = apply_rules(frame, parse_rules(RULES_YAML), SparkRunConfig(source_column=source))
    leaves = result.envelope._jdf.queryExecution().optimizedPlan().collectLeaves()
    assert "LogicalRelation" not in {leaves.apply(i).getClass().getSimpleName() for i in range(leaves.size())}
    assert not engine_reads_input(parse_rules(RULES_YAML), [(None, str(files["one"]))], "json", None, {}, "local[2]", {})


def test_cep_spark_backfill_starts_the_jvm_for_what_reads_the_input(tmp_path: Path, monkeypatch) -> None:
    import spark_udf.session

    files = _files(tmp_path)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_YAML)
    started: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def session(*args: Any, **kwargs: Any) -> Any:
        started.append(kwargs)
        raise Stop

    monkeypatch.setattr(spark_udf.session, "local_session", session)
    common = ["backfill", str(rules), "--output", str(tmp_path / "out"), "--master", "local[2]"]
    for given, engine in (([files["one"], "--schema", SCHEMA], True), ([files["one"]], False),
                          ([files["zipped"], "--schema", SCHEMA], False),
                          ([files["one"], "--schema", SCHEMA, "--conf", "spark.cep.backfill.localFiles=false"], False)):
        path, *extra = given
        assert spark_cli.main([*common, "--input", str(path), *extra]) != 0  # Spark "failed" to start
        assert (started[-1]["batch"], started[-1]["engine_reads"]) == (True, engine), given
    assert spark_cli.main(["run", str(rules), "--input", str(files["one"]), "--output", str(tmp_path / "o2"),
                           "--checkpoint", str(tmp_path / "ck"), "--schema", SCHEMA]) != 0
    assert (started[-1]["batch"], started[-1]["engine_reads"]) == (False, False)


@pytest.mark.spark
def test_a_flat_ddl_read_without_spark_is_sparks_schema(spark: Any) -> None:

    keywords = ("from int, select string", "user string", "order string, a int", "date int, `from` string")
    for ddl in (SCHEMA, "date string, open double, volume bigint, symbol string", "A INT, b Boolean, c TINYINT",
                "`x y` short, `a``b` byte, n long, i integer", "ts timestamp, px decimal(10,2)", "a string, a int",
                "a\x1fstring", "a\x1cstring", "a\x85string", "a\u2029string", "a\u00a0string", "a\u3000string, b int",
                "a\tstring,\nb\r\nint\x0b", "a: string", "string string, int int", "`é` string", "é string",
                *keywords):
        _read_as_spark_reads(spark, ddl)
    # a session that refuses reserved words as names (ANSI mode's enforceReservedKeywords)
    settings = {"spark.sql.ansi.enabled": "true", "spark.sql.ansi.enforceReservedKeywords": "true"}
    before = {k: spark.conf.get(k) for k in settings}
    try:
        for k, v in settings.items():
            spark.conf.set(k, v)
        for ddl in (SCHEMA, *keywords):
            _read_as_spark_reads(spark, ddl)
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)


UNUSED_TABLES = """
tables:
  - {name: limits, from: limit_changes, primary_key: k, columns: [cap], time_field: ts}
"""


@pytest.mark.spark
def test_the_answer_is_the_plans_at_the_edges(case_sensitive: Any, tmp_path: Path) -> None:
    """The answer against the plan where the two readings could part: the malformed-record column or
    a reserved column in the DDL, names that differ only in case, empty files, symlinks, a ``file:``
    path with a space, hidden files and folders (``_``, ``.``) under a glob or named, a compressed
    hidden file, a plain subfolder (Spark reads none), a glob that matches folders or negates a
    class (``[^b]``: Hadoop's negation, a member in Python's glob), a table declared but unused, the
    format named in capitals. (A view over one unnamed input is refused before any plan: no
    changelog among the inputs. A ``file:`` path with ``%20`` names a file Spark does not find:
    Hadoop's Path takes the escape literally, where ``cep spark``'s check of the input, and the
    answer, decode it.)"""
    from spark_udf.api import SparkRunConfig, apply_rules

    spark = case_sensitive

    def planned(path: Any, rules_text: str = RULES_YAML, schema: str = SCHEMA, fmt: str = "json") -> tuple[bool, bool]:
        rules_file = tmp_path / "rules.yaml"
        rules_file.write_text(rules_text)
        args = _args(path, rules_file, "--schema", schema, "--format", fmt)
        rules = parse_rules(rules_text)
        answer = engine_reads_input(rules, [(None, str(path))], args.format, args.schema, {}, "local[2]", {})
        frame, source = spark_cli._read(spark, args, streaming=False, path=str(path))
        arrival = (source, spark_cli.BLOCK) if args.format in spark_cli.FILE_FORMATS else ()
        result = apply_rules(frame, rules, SparkRunConfig(source_column=source, arrival_columns=arrival))
        leaves = result.envelope._jdf.queryExecution().optimizedPlan().collectLeaves()
        kinds = {leaves.apply(i).getClass().getSimpleName() for i in range(leaves.size())}
        return answer, "LogicalRelation" not in kinds

    files = _files(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.jsonl").write_bytes(b"")
    some_empty = tmp_path / "some_empty"
    some_empty.mkdir()
    (some_empty / "a.jsonl").write_bytes(b"")
    (some_empty / "b.jsonl").write_bytes(_lines(10))
    linked = tmp_path / "linked.jsonl"
    linked.symlink_to(files["one"])
    links = tmp_path / "links"
    links.mkdir()
    (links / "a.jsonl").symlink_to(files["one"])
    spaced = tmp_path / "in put"
    spaced.mkdir()
    (spaced / "a.jsonl").write_bytes(_lines(12))
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for name in ("a.jsonl", ".b.jsonl", "_c.jsonl"):
        (hidden / name).write_bytes(_lines(8))
    (hidden / ".d.jsonl.gz").write_bytes(gzip.compress(_lines(8)))
    underscored = tmp_path / "underscored"
    underscored.mkdir()
    (underscored / "a.jsonl").write_bytes(_lines(8))
    (underscored / "_e.jsonl.gz").write_bytes(gzip.compress(_lines(8)))
    (tmp_path / "_staged").mkdir()
    (tmp_path / "_staged" / "a.jsonl").write_bytes(_lines(5))
    classes = tmp_path / "classes"
    classes.mkdir()
    (classes / "a.jsonl").write_bytes(_lines(7))
    (classes / "b.jsonl.gz").write_bytes(gzip.compress(_lines(7)))
    plain_sub = tmp_path / "plain_sub"
    (plain_sub / "sub").mkdir(parents=True)
    (plain_sub / "sub" / "a.jsonl").write_bytes(_lines(7))
    mixed_sub = tmp_path / "mixed_sub"
    (mixed_sub / "sub").mkdir(parents=True)
    (mixed_sub / "a.jsonl").write_bytes(_lines(7))
    (mixed_sub / "sub" / "b.jsonl").write_bytes(_lines(7))
    folders = tmp_path / "folders"
    for sub in ("x", "y"):
        (folders / sub).mkdir(parents=True)
        (folders / sub / "a.jsonl").write_bytes(_lines(6))

    cases = {
        "corrupt in ddl": planned(files["one"], schema=SCHEMA + ", _corrupt_record string"),
        "reserved in ddl": planned(files["one"], schema=SCHEMA + ", _cep_note string"),
        "source column in ddl": planned(files["one"], schema=SCHEMA + ", _cep_source string"),
        "case-only names": planned(files["one"], schema=SCHEMA + ", K string, TS long"),
        "empty file": planned(empty),
        "an empty file among others": planned(some_empty),
        "symlink": planned(linked),
        "folder of symlinks": planned(links),
        "file: and a space": planned(f"file://{spaced}"),
        "hidden files in a glob": planned(hidden / "*"),
        "a compressed _file under a glob": planned(underscored / "*"),
        "a _file named": planned(hidden / "_c.jsonl"),
        "a .file named": planned(hidden / ".b.jsonl"),
        "a _folder named": planned(tmp_path / "_staged"),
        "a glob matching a _folder": planned(tmp_path / "_stag*"),
        "a glob class negated with ^": planned(classes / "[^b]*"),
        "a glob class negated with !": planned(classes / "[!b]*"),
        "a plain subfolder": planned(plain_sub),
        "a plain subfolder beside files": planned(mixed_sub),
        "glob of folders": planned(folders / "*"),
        "unused table": planned(files["one"], UNUSED_TABLES + RULES_YAML.lstrip()),
        "JSON": planned(files["one"], fmt="JSON"),
    }
    for case, (answer, engine) in cases.items():
        assert answer == engine, (case, answer, engine)


@pytest.mark.spark
def test_the_file_columns_replace_a_column_as_with_column_does(spark: Any, tmp_path: Path) -> None:
    """read_json_lines' file and block columns (one projection) replace a column of either name as
    ``withColumn`` does, in a session that matches names with case and in one that does not."""
    from pyspark.sql import functions as F

    from spark_udf.api import _tagged

    path = tmp_path / "one.jsonl"
    path.write_bytes(_lines(4))
    key = "spark.sql.caseSensitive"
    before = spark.conf.get(key, "false")
    try:
        for sensitive in ("true", "false"):
            spark.conf.set(key, sensitive)
            for ddl in ("k string, _CEP_SOURCE string, ts long", "k string, _cep_Block bigint", "k string, ts long"):
                df = spark.read.schema(ddl).json(str(path))
                for source, block in (("_cep_source", "_cep_block"), ("_x", "_X")):
                    expected = (df.withColumn(source, F.col("_metadata.file_path"))
                                .withColumn(block, F.col("_metadata.file_block_start")))
                    got = _tagged(df, df.columns, source, block)
                    assert got.schema == expected.schema, (sensitive, ddl, source, block)
                    assert got.collect() == expected.collect(), (sensitive, ddl, source, block)
    finally:
        spark.conf.set(key, before)


def _read_as_spark_reads(spark: Any, ddl: str) -> None:
    """``_ddl_schema`` gives Spark's schema of ``ddl``, or refuses it as Spark does."""
    from spark_udf.api import _ddl_schema

    try:
        expected = spark.createDataFrame([], ddl).schema
    except Exception as e:  # noqa: BLE001 - Spark refuses it: so must the reading here
        with pytest.raises(type(e)):
            _ddl_schema(spark, ddl)
        return
    assert _ddl_schema(spark, ddl) == expected, ddl
