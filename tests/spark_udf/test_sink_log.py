"""Reading a Spark file sink's committed rows from its ``_spark_metadata`` log, without Spark."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cep.cli import main
from spark_udf.sink_log import NotASinkError, SinkLogError, committed_files, read_rows


def _part(root: Path, partition: str, name: str, rows: list[dict]) -> Path:
    path = root / partition / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
    return path


def _log(root: Path, name: str, files: list[Path], action: str = "add") -> None:
    meta = root / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    lines = ["v1"] + [json.dumps({"path": f.as_uri(), "size": 1, "isDir": False, "modificationTime": 0,
                                  "blockReplication": 1, "blockSize": 1, "action": action}) for f in files]
    (meta / name).write_text("\n".join(lines))


def _sink(tmp_path: Path) -> tuple[Path, list[Path]]:
    """Batches 0-1 compacted into 1.compact (0 and 1 still there), batch 2 after, and an uncommitted file."""
    root = tmp_path / "out"
    a = _part(root, "output=match/rule=r1", "part-00000-a.c000.json", [{"k": 1}, {"k": 2}])
    b = _part(root, "output=late/rule=r1", "part-00000-b.c000.json", [{"k": 3}])
    c = _part(root, "output=match/rule=r%3D2", "part-00000-c.c000.json", [{"k": 4}])
    _part(root, "output=match/rule=r1", "part-00000-uncommitted.c000.json", [{"k": 1}, {"k": 2}])
    _log(root, "0", [a])
    (root / "_spark_metadata" / ".0.crc").write_bytes(b"\x00")
    _log(root, "1", [b])
    _log(root, "1.compact", [a, b])
    _log(root, "2", [c])
    return root, [a, b, c]


def test_committed_files_follow_the_log_and_leave_out_uncommitted_ones(tmp_path: Path) -> None:
    root, files = _sink(tmp_path)
    assert committed_files(root) == files
    rows = [json.loads(x) for x in read_rows(root)]
    assert rows == [{"k": 1, "output": "match", "rule": "r1"}, {"k": 2, "output": "match", "rule": "r1"},
                    {"k": 3, "output": "late", "rule": "r1"}, {"k": 4, "output": "match", "rule": "r=2"}]
    assert [json.loads(x)["k"] for x in read_rows(root, outputs=["match"], rules=["r=2"])] == [4]
    assert [json.loads(x)["k"] for x in read_rows(root, outputs=["late"])] == [3]


def test_a_compaction_stands_for_the_batch_files_spark_deleted(tmp_path: Path) -> None:
    root, files = _sink(tmp_path)
    (root / "_spark_metadata" / "0").unlink()
    (root / "_spark_metadata" / "1").unlink()
    assert committed_files(root) == files


def test_a_missing_batch_log_is_an_error_not_a_silent_gap(tmp_path: Path) -> None:
    root, _ = _sink(tmp_path)
    (root / "_spark_metadata" / "1.compact").unlink()
    (root / "_spark_metadata" / "1").unlink()
    with pytest.raises(SinkLogError, match=r"the log of batch 1 is missing \(batches up to 2 were committed"):
        committed_files(root)


def test_deleted_entries_and_a_moved_output_folder(tmp_path: Path) -> None:
    root, files = _sink(tmp_path)
    _log(root, "3", [files[1]], action="delete")
    moved = tmp_path / "elsewhere"
    root.rename(moved)  # the log still names the old folder: files are found by their partition path
    got = committed_files(moved)
    assert [p.name for p in got] == [files[0].name, files[2].name]
    assert all(p.is_relative_to(moved) for p in got)


def test_a_listed_file_that_is_gone_is_named(tmp_path: Path) -> None:
    root, files = _sink(tmp_path)
    files[2].unlink()
    with pytest.raises(SinkLogError, match=r"lists '.*part-00000-c.c000.json', which is missing"):
        committed_files(root)


def test_log_versions_and_malformed_lines(tmp_path: Path) -> None:
    root, _ = _sink(tmp_path)
    (root / "_spark_metadata" / "2").write_text("v2\n{}")
    with pytest.raises(SinkLogError, match=r"log version 'v2' is newer than the 'v1' this reads"):
        committed_files(root)
    (root / "_spark_metadata" / "2").write_text("v1\n{not json")
    with pytest.raises(SinkLogError, match=r"/2' line 2: not JSON"):
        committed_files(root)
    (root / "_spark_metadata" / "2").write_text("")
    with pytest.raises(SinkLogError, match=r"expected a version line such as 'v1' first, found ''"):
        committed_files(root)


def test_a_batch_output_counts_once_success_is_written(tmp_path: Path) -> None:
    root = tmp_path / "bf"
    a = _part(root, "output=match/rule=r", "part-00000-a.c000.json", [{"k": 1}])
    _part(root, "_temporary/0/output=match/rule=r", "part-00001-x.c000.json", [{"k": 9}])
    with pytest.raises(SinkLogError, match=r"has part files but neither a _spark_metadata log nor _SUCCESS"):
        committed_files(root)
    (root / "_SUCCESS").write_text("")
    (root / "output=match" / "rule=r" / ".part-00000-a.c000.json.crc").write_bytes(b"")
    assert committed_files(root) == [a]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotASinkError, match=r"is not the output of 'cep spark run' or 'cep spark backfill'"):
        committed_files(empty)
    with pytest.raises(NotASinkError, match=r"is not a folder"):
        committed_files(tmp_path / "absent")
    with pytest.raises(NotASinkError, match=r"is not a local folder; read it with Spark"):
        committed_files("s3a://bucket/out")


def test_parquet_and_gzip_parts_become_json_lines(tmp_path: Path) -> None:
    root = tmp_path / "pq"
    (root / "output=match" / "rule=r").mkdir(parents=True)
    table = pa.table({"k": [1, None], "t": [dt.datetime(2017, 1, 2, 3, 4, 5), dt.datetime(2017, 1, 3)],
                      "d": [dt.date(2017, 1, 2), None]})
    pq.write_table(table, root / "output=match" / "rule=r" / "part-00000-a.c000.snappy.parquet")
    with gzip.open(root / "output=match" / "rule=r" / "part-00001-b.c000.json.gz", "wt") as f:
        f.write('{"k":3}\n{}\n')
    (root / "_SUCCESS").write_text("")
    rows = [json.loads(x) for x in read_rows(root)]
    assert rows == [
        {"k": 1, "t": "2017-01-02T03:04:05", "d": "2017-01-02", "output": "match", "rule": "r"},
        {"t": "2017-01-03T00:00:00", "output": "match", "rule": "r"},
        {"k": 3, "output": "match", "rule": "r"},
        {"output": "match", "rule": "r"},
    ]


def test_cep_spark_cat_prints_json_lines_and_says_what_is_wrong(tmp_path: Path, capsys) -> None:
    root, _ = _sink(tmp_path)
    assert main(["spark", "cat", str(root), "--output", "match", "--rule", "r1"]) == 0
    out = capsys.readouterr().out
    assert out == '{"k":1,"output":"match","rule":"r1"}\n{"k":2,"output":"match","rule":"r1"}\n'
    assert main(["spark", "cat", str(tmp_path / "absent")]) == 2
    assert f"cep spark cat: {str(tmp_path / 'absent')!r} is not a folder" in capsys.readouterr().err
    (root / "_spark_metadata" / "2").write_text("v1\n{not json")
    assert main(["spark", "cat", str(root)]) == 3
    assert "cep spark cat: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["spark", "cat", str(root), "--output", "matches"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'matches'" in capsys.readouterr().err
