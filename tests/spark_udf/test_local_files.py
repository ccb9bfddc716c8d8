"""JSON lines files read by a backfill's map tasks themselves (spark_udf/local_files.py).

Without Spark: the splits of :func:`read_split` hold every line of the file once, in order, cut
as Hadoop's line reader cuts them (``\\n``, ``\\r\\n``, a lone ``\\r``; a leading byte order mark
skipped), whatever the split points and block size; :func:`plan_splits` cuts files as Spark's
file source does. With Spark: a key-set backfill over files read directly gives the rows of the
same backfill fed by Spark's text source (``spark.cep.backfill.localFiles=false``) and by Spark's
JSON reader, on files with every kind of line end, blank lines, a byte order mark, a path with a
space, several splits per file; a compressed file is left to Spark's text source.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_udf.local_files import (
    FileSplit,
    byte_size,
    line_ends,
    local_path,
    plan_splits,
    read_split,
)

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")


def _hadoop_lines(data: bytes) -> list[bytes]:
    """The lines Spark's text source reads from a whole file: terminators \\r\\n, \\r, \\n; a leading BOM skipped."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = re.split(rb"\r\n|\r|\n", data)
    if lines and lines[-1] == b"":
        lines.pop()  # a final terminator ends the last line, it starts none
    return lines


def _split_lines(path: Path, splits: list[tuple[int, int]], block: int) -> list[list[bytes]]:
    out = []
    for start, end in splits:
        got = b"".join(read_split(str(path), start, end, block))
        assert got == b"" or got.endswith(b"\n")
        assert all(part.endswith(b"\n") for part in read_split(str(path), start, end, block))
        out.append(got.split(b"\n")[:-1] if got else [])
    return out


_PIECES = [b'{"a":1}', b'{"b":"x y"}', b"", b"  ", b"\xc3\xa9\xe2\x82\xac", b"{", b'"\\r\\n"', b"z" * 40]
_ENDS = [b"\n", b"\r\n", b"\r", b"\n\n", b"\r\r\n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PIECES), st.sampled_from(_ENDS)), max_size=30), st.booleans(),
       st.booleans(), st.lists(st.integers(1, 400), max_size=6), st.integers(1, 64))
def test_splits_hold_every_line_once_in_order(tmp_path_factory: Any, lines: list[tuple[bytes, bytes]], bom: bool,
                                              last_end: bool, cuts: list[int], block: int) -> None:
    data = (b"\xef\xbb\xbf" if bom else b"") + b"".join(p + e for p, e in lines)
    if not last_end and data.endswith(b"\n"):
        data = data[:-1]
    path = tmp_path_factory.mktemp("split") / "f.json"
    path.write_bytes(data)
    points = sorted({c for c in cuts if c < len(data)} | {0})
    splits = list(zip(points, points[1:] + [len(data)])) if data else [(0, 0)]
    got = _split_lines(path, splits, block)
    # blank lines give no row: a cut inside \r\n may add one, never lose or move a line
    nonblank = [ln for part in got for ln in part if ln.strip()]
    assert nonblank == [ln for ln in _hadoop_lines(data) if ln.strip()]
    # and a split's lines are those Hadoop's reader gives it: the lines starting after its start, up to its end
    if b"\r" not in data:
        first = 3 if bom else 0
        starts = [first] * (first < len(data)) + [m.end() for m in re.finditer(b"\n", data) if m.end() < len(data)]
        for (s, e), part in zip(splits, got):
            mine = [p for p in starts if (s == 0 if p == first else s < p <= e)]  # the first line: the first split
            expect = [data[p:data.find(b"\n", p) if data.find(b"\n", p) >= 0 else len(data)] for p in mine]
            assert part == expect


def test_a_split_inside_one_long_line_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b'{"a":"' + b"x" * 1000 + b'"}\n{"a":2}\n')
    assert _split_lines(path, [(0, 100), (100, 200), (200, 1013)], 16) == [
        [b'{"a":"' + b"x" * 1000 + b'"}'], [], [b'{"a":2}']]
    assert line_ends(b"a\nbc\n\n").tolist() == [2, 5, 6]


def test_splits_are_cut_as_sparks_file_source_cuts_them() -> None:
    mb = 1 << 20
    files = [(f"file:/d/{i}.json", f"/d/{i}.json", size) for i, size in enumerate([300 * mb, 5 * mb, 0, 1 * mb])]
    tasks = plan_splits(files, 128 * mb, 4 * mb, 2)
    flat = [s for t in tasks for s in t]
    # each non-empty file covered once, in splits of at most maxPartitionBytes, starting where Spark's do
    for name, _, size in files:
        mine = sorted((s.start, s.end) for s in flat if s.path == name)
        assert [a for a, _ in mine] == list(range(0, size, 128 * mb))
        assert all(b - a <= 128 * mb for a, b in mine) and (not mine or mine[-1][1] == size)
    # 128 and 128 MB alone; the last 44 MB, 5 MB and 1 MB share a task (each plus the open cost, under 128 MB)
    assert [[(s.path, s.start) for s in t] for t in tasks] == [
        [("file:/d/0.json", 0)], [("file:/d/0.json", 128 * mb)],
        [("file:/d/0.json", 256 * mb), ("file:/d/1.json", 0), ("file:/d/3.json", 0)]]
    # a small input on many cores: splits of (bytes + open costs) / cores, not below openCostInBytes
    small = plan_splits([("file:/a", "/a", 40 * mb)], 128 * mb, 4 * mb, 4)
    assert [(s.start, s.end) for t in small for s in t] == [(0, 11 * mb), (11 * mb, 22 * mb), (22 * mb, 33 * mb),
                                                             (33 * mb, 40 * mb)]
    assert plan_splits([("file:/e", "/e", 0)], 128 * mb, 4 * mb, 2) == []
    assert byte_size("64k") == 65536 and byte_size("12x") is None and byte_size("") is None


def test_only_uncompressed_local_files_are_read_directly() -> None:
    assert local_path("file:/tmp/a%20b%25.json") == "/tmp/a b%.json"
    assert local_path("file://localhost/tmp/x.jsonl") == "/tmp/x.jsonl"
    for uri in ("file:/tmp/x.json.gz", "file:/tmp/x.JSON.BZ2", "file:/tmp/x.zst", "hdfs://nn/x.json",
                "s3a://b/x.json", "file://otherhost/x.json"):
        assert local_path(uri) is None, uri
    assert FileSplit("file:/a", "/a", 0, 1) == FileSplit("file:/a", "/a", 0, 1)


# ------------------------------------------------------------------ with Spark

SCHEMA = "k string, ts long, px long, _corrupt_record string"
RULES = """
rules:
  - name: up_down
    lateness: 500
    sql: |
      SELECT * FROM ticks MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts
        MEASURES A.ts AS ta, LAST(B.ts) AS tb, C.px AS cpx
        PATTERN (A B+ C)
        DEFINE B AS B.px > PREV(B.px), C AS C.px < PREV(C.px))
"""


def _write_inputs(folder: Path, seed: int) -> None:
    """Four files of JSON lines with every line end, blank lines, a BOM, a malformed line, late rows."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    t = 1_000
    for f, name in enumerate(["a.json", "b with space.json", "c.jsonl", "d.json"]):
        parts = [b"\xef\xbb\xbf"] if f == 1 else []
        for i in range(rng.randint(150, 250)):
            t += rng.randint(0, 40)
            row = {"k": f"k{rng.randint(0, 6)}", "ts": t - (rng.randint(0, 2000) if rng.random() < 0.05 else 0),
                   "px": rng.randint(0, 20)}
            line = json.dumps(row).encode() if i != 17 or f != 2 else b'{"k": "k1", "ts": '
            parts.append(line + rng.choice([b"\n", b"\r\n", b"\r", b"\n\n", b"\n  \n"]))
        data = b"".join(parts)
        (folder / name).write_bytes(data.rstrip(b"\r\n") if f == 3 else data)


def _run(spark: Any, folder: Path | list[Path], local: str, where: str | None = None) -> tuple[Counter, str]:
    from patterns.rules import parse_rules
    from spark_udf.api import SparkRunConfig, apply_rules, read_json_lines

    spark.conf.set("spark.cep.backfill.localFiles", local)
    try:
        frame = read_json_lines(spark, str(folder) if isinstance(folder, Path) else [str(p) for p in folder], SCHEMA)
        if where is not None:
            frame = frame.where(where)
        result = apply_rules(frame, parse_rules(RULES), SparkRunConfig(
            buckets=5, source_column="_cep_source", arrival_columns=("_cep_source", "_cep_block"),
            key_set_groups=True))
        plan = result.envelope._jdf.queryExecution().executedPlan().toString()
        rows = Counter(json.dumps(r.asDict(), sort_keys=True, default=str) for r in result.envelope.collect())
    finally:
        spark.conf.unset("spark.cep.backfill.localFiles")
    return rows, plan


@pytest.mark.spark
def test_files_read_directly_give_the_rows_of_sparks_text_source_and_reader(case_sensitive: Any, tmp_path: Path) -> None:
    spark = case_sensitive
    folder = tmp_path / "in put"
    _write_inputs(folder, 5)
    key = "spark.sql.files.maxPartitionBytes"
    before = spark.conf.get(key)
    spark.conf.set(key, "1500")  # several splits per file, cut inside lines
    try:
        direct, plan = _run(spark, folder, "true")
        assert "FileScan" not in plan and "Range" in plan, plan
        text, plan = _run(spark, folder, "false")
        assert "FileScan text" in plan, plan
        reader, plan = _run(spark, folder, "true", where="true")
        assert "FileScan json" in plan, plan
    finally:
        spark.conf.set(key, before)
    assert direct == text == reader
    outputs = Counter(json.loads(r)["output"] for r in direct.elements())
    assert outputs["match"] > 5 and outputs["late"] > 0 and outputs["error"] == 1, outputs
    # the rows name their files as Spark's file source does (compared above), a space escaped
    assert any("b%20with%20space.json" in json.loads(r)["source"] for r in direct.elements()
               if json.loads(r)["output"] == "late"), direct


@pytest.mark.spark
def test_a_file_named_twice_is_read_twice_as_sparks_reader_reads_it(case_sensitive: Any, tmp_path: Path) -> None:
    """A folder and a file in it: Spark's scan reads the file twice, ``inputFiles()`` lists it once, so
    the backfill leaves the files to Spark's text source and gets the reader's rows (the file's rows
    twice), not those of each file read once."""
    folder = tmp_path / "in"
    _write_inputs(folder, 7)
    paths = [folder, folder / "a.json"]
    direct, plan = _run(case_sensitive, paths, "true")
    reader, _ = _run(case_sensitive, paths, "true", where="true")
    assert direct == reader
    assert "FileScan text" in plan, plan
    once, _ = _run(case_sensitive, folder, "true")
    assert direct != once  # (the repeated rows are late behind the file's first reading)


@pytest.mark.spark
def test_a_compressed_file_is_read_by_sparks_text_source(case_sensitive: Any, tmp_path: Path) -> None:
    spark = case_sensitive
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    _write_inputs(plain, 9)
    packed.mkdir()
    for p in sorted(plain.iterdir()):
        (packed / (p.name + ".gz")).write_bytes(gzip.compress(p.read_bytes().replace(b"\r", b"\n")))
        p.write_bytes(p.read_bytes().replace(b"\r", b"\n"))
    rows, plan = _run(spark, packed, "true")
    assert "FileScan text" in plan, plan
    direct, plan = _run(spark, plain, "true")
    assert "FileScan" not in plan, plan

    def without_source(c: Counter) -> Counter:
        return Counter(json.dumps({k: v for k, v in json.loads(r).items() if k != "source"}, sort_keys=True)
                       for r in c.elements())

    assert without_source(rows) == without_source(direct) and sum(rows.values()) > 5


@pytest.mark.spark
def test_a_reader_frame_passed_as_a_temporary_is_read_directly(case_sensitive: Any, tmp_path: Path) -> None:
    """``apply_rules(read_json_lines(...), ...)``: the reader's frame has no reference but the call's
    once the planning derives others from it; the map tasks still read the files themselves."""
    from patterns.rules import parse_rules
    from spark_udf.api import SparkRunConfig, apply_rules, read_json_lines

    spark = case_sensitive
    folder = tmp_path / "in"
    _write_inputs(folder, 3)
    cfg = SparkRunConfig(buckets=5, source_column="_cep_source", arrival_columns=("_cep_source", "_cep_block"))
    result = apply_rules(read_json_lines(spark, str(folder), SCHEMA), parse_rules(RULES), cfg)
    plan = result.envelope._jdf.queryExecution().executedPlan().toString()
    assert "FileScan" not in plan and "Range" in plan, plan
    held, _ = _run(spark, folder, "true")
    assert Counter(json.dumps(r.asDict(), sort_keys=True, default=str) for r in result.envelope.collect()) == held


@pytest.mark.spark
def test_counts_of_a_rule_whose_name_needs_quoting_in_sql(case_sensitive: Any, tmp_path: Path) -> None:
    """The observed counts are SQL expressions for plain rule names and columns for others: a name
    with a quote and a backslash counts its matches and late rows as a plain name does."""
    from patterns.rules import parse_rules
    from spark_udf.api import SparkRunConfig, apply_rules, read_json_lines

    spark = case_sensitive
    folder = tmp_path / "in"
    _write_inputs(folder, 3)
    got = []
    for name in ("up_down", "it's a \\ rule"):
        rules = parse_rules(RULES.replace("name: up_down", f"name: {json.dumps(name)}"))
        result = apply_rules(read_json_lines(spark, str(folder), SCHEMA), rules, SparkRunConfig(
            buckets=5, source_column="_cep_source", arrival_columns=("_cep_source", "_cep_block")))
        rows = [r.asDict() for r in result.envelope.collect()]
        assert {r["rule"] for r in rows if r["output"] == "match"} == {name}
        counts = result.counts()
        assert counts["matches"] == counts["matches_0"] == sum(r["output"] == "match" for r in rows) > 5
        assert counts["late"] == counts["late_0"] == sum(r["output"] == "late" for r in rows) > 0
        got.append(counts)
    assert got[0] == got[1]
