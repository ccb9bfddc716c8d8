"""Tests for the ``cep percolate`` subcommand (cep.cli.percolate)."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import cep.percolator as perc_mod
import cep.percolator.verify as verify_mod
from cep.cli.percolate import add_arguments, run


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n"
                             for r in rows))
    return path


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="cep percolate")
    add_arguments(parser)
    return run(parser.parse_args(list(argv)))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    queries = write_lines(tmp_path / "q.jsonl", [
        {"id": "apple", "query": "apple", "metadata": {"owner": "ann"}},
        {"id": 2, "query": '"big apple"'},
        {"id": "title-pear", "query": "title:pear OR body:fig*"},
        {"id": 1, "query": "apple AND pie"},
    ])
    docs = write_lines(tmp_path / "d.jsonl", [
        {"id": "d1", "title": "The Big Apple", "body": "apple pie"},
        {"id": 2, "title": "pear", "body": "figs"},
        {"id": "d3", "title": "nothing"},
    ])
    return queries, docs


def out_lines(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in text.splitlines()]


def test_one_line_per_document_in_input_order(files: tuple[Path, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    q, d = files
    assert cli("--queries", str(q), "--input", str(d)) == 0
    captured = capsys.readouterr()
    assert out_lines(captured.out) == [
        {"id": "d1", "matches": [1, 2, "apple"]},
        {"id": 2, "matches": ["title-pear"]},
        {"id": "d3", "matches": []},
    ]
    assert captured.err.strip() == ("cep percolate: 4 queries loaded, 0 rejected; 3 documents, "
                                    "0 skipped; 4 matches, 0 query errors")


def test_highlight_and_output_file(files: tuple[Path, Path], tmp_path: Path) -> None:
    q, d = files
    out = tmp_path / "out.jsonl"
    assert cli("--queries", str(q), "--input", str(d), "--output", str(out), "--highlight",
               "--batch-size", "2") == 0
    rows = out_lines(out.read_text())
    assert rows[0] == {"id": "d1", "matches": [1, 2, "apple"], "spans": {
        "1": [["body", 0, 5], ["body", 6, 9], ["title", 8, 13]],
        "2": [["title", 4, 13]],
        "apple": [["body", 0, 5], ["title", 8, 13]],
    }}
    assert rows[1]["spans"] == {"title-pear": [["body", 0, 4], ["title", 0, 4]]}
    assert rows[2] == {"id": "d3", "matches": [], "spans": {}}


def test_default_field_and_operator(files: tuple[Path, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    q, d = files
    assert cli("--queries", str(q), "--input", str(d), "--default-field", "title",
               "--default-operator", "AND") == 0
    rows = out_lines(capsys.readouterr().out)
    assert rows[0]["matches"] == [2, "apple"]  # "apple AND pie" needs pie in the title


def test_bad_query_lines_are_reported_and_skipped(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    q = write_lines(tmp_path / "q.jsonl", [
        {"id": "ok", "query": "apple"},
        b"{not json",
        [1, 2],
        {"query": "x"},
        {"id": True, "query": "x"},
        {"id": "noquery"},
        {"id": "m", "query": "x", "metadata": [1]},
        {"id": "ok", "query": "pear"},
        {"id": "syntax", "query": "apple AND"},
        b"",
        {"id": "neg", "query": "-apple"},
    ])
    d = write_lines(tmp_path / "d.jsonl", [{"id": 1, "t": "apple pear"}])
    assert cli("--queries", str(q), "--input", str(d)) == 0
    captured = capsys.readouterr()
    assert out_lines(captured.out) == [{"id": 1, "matches": ["ok"]}]
    err = captured.err.splitlines()
    assert err[0].startswith(f"{q}:2: skipped query line: invalid JSON (")
    assert err[1:6] == [
        f"{q}:3: skipped query line: expected a JSON object, got list",
        f"{q}:4: skipped query line: needs an 'id' (a string or an integer)",
        f"{q}:5: skipped query line: needs an 'id' (a string or an integer)",
        f"{q}:6: skipped query line: needs a 'query' string",
        f"{q}:7: skipped query line: 'metadata' must be a JSON object",
    ]
    assert err[6] == (f"{q}:8: skipped query line: duplicate query id 'ok' (first on line 1); "
                      "this line is ignored")
    assert err[7:10] == [
        f"{q}:9: skipped query 'syntax': query column 10: expected a term, phrase, range or '(' "
        "after 'AND', but the query ends here",
        "apple AND",
        "         ^",
    ]
    assert err[10].startswith(f"{q}:11: skipped query 'neg': query column 1: the query only excludes")
    assert err[-1] == ("cep percolate: 1 query loaded, 9 rejected; 1 document, 0 skipped; "
                       "1 match, 0 query errors")


def test_no_query_loaded_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = write_lines(tmp_path / "q.jsonl", [{"id": 1, "query": "AND"}])
    d = write_lines(tmp_path / "d.jsonl", [{"id": 1, "t": "x"}])
    assert cli("--queries", str(q), "--input", str(d)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == (f"{q}: no query could be loaded (1 rejected); "
                                             "nothing to do")


def test_malformed_documents_are_reported_and_skipped(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    q, _ = files
    d = write_lines(tmp_path / "bad.jsonl", [
        {"id": "a", "title": "pear"},
        b"{oops",
        b'"just a string"',
        {"title": "apple"},
        b"   ",
        {"id": "b", "body": "apple"},
    ])
    assert cli("--queries", str(q), "--input", str(d)) == 0
    captured = capsys.readouterr()
    assert out_lines(captured.out) == [{"id": "a", "matches": ["title-pear"]},
                                       {"id": "b", "matches": ["apple"]}]
    err = captured.err.splitlines()
    assert err[0].startswith(f"{d}:2: skipped document: invalid JSON (")
    assert err[1] == f"{d}:3: skipped document: expected a JSON object, got str"
    assert err[2] == f"{d}:4: skipped document: it has no 'id'"
    assert "2 documents, 3 skipped" in err[3]


def test_stdin_input(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    q, d = files
    fake = io.TextIOWrapper(io.BytesIO(d.read_bytes()))
    monkeypatch.setattr(sys, "stdin", fake)
    assert cli("--queries", str(q), "--input", "-") == 0
    assert len(out_lines(capsys.readouterr().out)) == 3


def test_query_errors_are_reported_per_document(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    q, d = files

    def broken(node: Any, view: Any) -> bool:
        raise RuntimeError("boom")

    monkeypatch.setattr(verify_mod, "_evaluate", broken)
    write_lines(q, [{"id": "p", "query": '"apple pie"~3'}, {"id": "t", "query": "apple"}])
    assert cli("--queries", str(q), "--input", str(d)) == 0
    captured = capsys.readouterr()
    assert out_lines(captured.out)[0] == {"id": "d1", "matches": ["t"]}
    assert f"{d}:1: query 'p' could not be evaluated (RuntimeError: boom); counted as no " \
           "match" in captured.err
    assert "1 query error\n" in captured.err


def test_unreadable_files_and_bad_batch_size(files: tuple[Path, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    q, d = files
    assert cli("--queries", str(tmp_path / "none.jsonl"), "--input", str(d)) == 2
    assert capsys.readouterr().err.startswith("cep percolate: cannot read queries: ")
    assert cli("--queries", str(q), "--input", str(tmp_path / "none.jsonl")) == 2
    assert "cannot read documents or write results: " in capsys.readouterr().err
    assert cli("--queries", str(q), "--input", str(d), "--batch-size", "0") == 2
    assert capsys.readouterr().err.strip() == "cep percolate: --batch-size must be at least 1, got 0"


def test_bad_default_operator_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli("--queries", "q", "--input", "d", "--default-operator", "XOR")
    assert "invalid choice: 'XOR'" in capsys.readouterr().err


def test_default_field_takes_several_fields(files: tuple[Path, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    q, d = files
    assert cli("--queries", str(q), "--input", str(d), "--default-field", "title", "body") == 0
    two = out_lines(capsys.readouterr().out)
    assert cli("--queries", str(q), "--input", str(d), "--default-field", "title",
               "--default-field", "body") == 0
    assert out_lines(capsys.readouterr().out) == two
    assert two[0]["matches"] == [1, 2, "apple"]


def test_saved_index_starts_the_same_run(files: tuple[Path, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """--save-index writes the built index; --index INDEX gives the same lines, with the
    index's own settings (options that would change them are refused)."""
    q, d = files
    index = tmp_path / "queries.index"
    assert cli("--queries", str(q), "--input", str(d), "--default-field", "title",
               "--save-index", str(index)) == 0
    first = capsys.readouterr()
    assert cli("--index", str(index), "--input", str(d)) == 0
    again = capsys.readouterr()
    assert out_lines(again.out) == out_lines(first.out)
    assert out_lines(again.out)[0]["matches"] == [2, "apple"]  # default field title, kept
    assert again.err.strip() == ("cep percolate: 4 queries loaded, 0 rejected; 3 documents, "
                                 "0 skipped; 3 matches, 0 query errors")
    assert cli("--index", str(index), "--input", str(d), "--default-operator", "AND") == 2
    assert capsys.readouterr().err.strip() == (
        f"{index} was written by Percolator.save or save_index and brings its own settings: "
        "drop --default-field / --default-operator (or give the queries as plain JSON lines)")
    assert cli("--queries", str(index), "--input", str(d)) == 2  # never unpickled as queries
    assert capsys.readouterr().err.strip() == (
        f"{index} is a saved index (--save-index), not queries: pass it with --index")
    index.write_bytes(index.read_bytes()[:-5])
    assert cli("--index", str(index), "--input", str(d)) == 2
    assert capsys.readouterr().err.strip() == (
        f"cep percolate: cannot load the queries: {index}: the saved index is damaged or cut short (its "
        "checksum does not match); write it again with save_index()")
    assert cli("--queries", str(q), "--input", str(d), "--save-index",
               str(tmp_path / "no" / "dir" / "x")) == 2
    assert capsys.readouterr().err.startswith("cep percolate: cannot write the index: ")


def test_queries_saved_by_the_percolator(files: tuple[Path, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A file written by Percolator.save: its header line is its settings, not a bad line."""
    _, d = files
    p = perc_mod.Percolator(perc_mod.PercolatorConfig(
        query=perc_mod.QueryConfig(default_operator="AND")))
    p.register("both", "apple pie")
    p.register("one", "apple")
    saved = tmp_path / "saved.jsonl"
    p.save(saved)
    assert cli("--queries", str(saved), "--input", str(d)) == 0
    captured = capsys.readouterr()
    assert out_lines(captured.out)[0] == {"id": "d1", "matches": ["both", "one"]}
    assert out_lines(captured.out)[2] == {"id": "d3", "matches": []}
    assert captured.err.strip().startswith("cep percolate: 2 queries loaded, 0 rejected;")


def test_query_ids_past_64_bits_stay_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Query ids are read as exactly as document ids (cep/json_exact.py): neighbours past 2**64
    stay two queries, and the output names each by its own digits."""
    big = 2**64
    queries = tmp_path / "q.jsonl"
    queries.write_bytes(b"".join(
        b'{"id": %d, "query": "%s"}\n' % (i, q.encode())
        for i, q in [(big, "apple"), (big + 1, "pear"), (-(2**70) - 1, "apple AND pie"), (10**400, "fig")]))
    docs = tmp_path / "d.jsonl"
    docs.write_bytes(b'{"id": %d, "body": "apple pie with pear and fig"}\n' % (big + 3))
    assert cli("--queries", str(queries), "--input", str(docs)) == 0
    out, err = capsys.readouterr()
    assert "4 queries loaded, 0 rejected" in err and "4 matches" in err, err
    line = out.strip().encode()
    assert line.startswith(b'{"id":18446744073709551619,"matches":[')
    import json

    got = json.loads(line)
    assert sorted(got["matches"]) == sorted([big, big + 1, -(2**70) - 1, 10**400])
