"""The command line on careless input: unsorted files, existing outputs, crashes, standard input,
byte-order marks, damaged Parquet, and consistent options and messages (issue 13, items 4-6, 13-15)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cep.cli import main
from patterns.errors import RuleErrors
from patterns.rules import parse_rules

REPO = Path(__file__).resolve().parents[2]
TRADING = REPO / "rules" / "trading.yaml"
BARS = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"

PAIR = """
rules:
  - name: pair
    sql: |
      SELECT * FROM s MATCH_RECOGNIZE (
        PARTITION BY k ORDER BY ts MEASURES A.ts AS a, B.ts AS b
        PATTERN (A B) DEFINE A AS A.v = 1, B AS B.v = 2)
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- item 4: unsorted input


def test_an_input_sorted_by_symbol_is_called_out_with_both_fixes(tmp_path: Path, capsys) -> None:
    rows = [json.loads(x) for x in BARS.read_text().splitlines()]
    by_symbol = tmp_path / "by_symbol.jsonl"
    by_symbol.write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["symbol"])))
    assert main(["run", str(TRADING), "--input", str(by_symbol), "-o", str(tmp_path / "o.jsonl"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning: rule 'v_shape' found" in err and "late" in err
    assert "sorted by event time" in err and "Sort it" in err and "lateness:" in err
    late = int(err.split("found ")[1].split(" of")[0].replace(",", ""))
    assert late > len(rows) / 10


def test_a_durable_finish_over_an_input_sorted_by_symbol_is_called_out(tmp_path: Path, capsys) -> None:
    rows = [json.loads(x) for x in BARS.read_text().splitlines()]
    by_symbol = tmp_path / "by_symbol.jsonl"
    by_symbol.write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["symbol"])))
    assert main(["run", str(TRADING), "--input", str(by_symbol), "--state", str(tmp_path / "state"),
                 "-o", str(tmp_path / "o.jsonl"), "--finish", "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning: rule 'v_shape' found" in err
    assert "sorted by event time? Sort it by the rules' ORDER BY field, or give the rule a 'lateness:'" in err
    late, read = (int(x.replace(",", "")) for x in err.split("found ")[1].split(" events")[0].split(" of "))
    assert read == len(rows) and late > read / 10


def test_a_durable_run_without_finish_is_not_warned_yet(tmp_path: Path, capsys) -> None:
    rows = [json.loads(x) for x in BARS.read_text().splitlines()]
    by_symbol = tmp_path / "by_symbol.jsonl"
    by_symbol.write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["symbol"])))
    assert main(["run", str(TRADING), "--input", str(by_symbol), "--state", str(tmp_path / "state"),
                 "-o", str(tmp_path / "o.jsonl"), "-q"]) == 0
    assert "warning" not in capsys.readouterr().err  # the input may still grow: late is not yet a verdict


def test_a_sorted_input_gets_no_warning(capsys) -> None:
    assert main(["run", str(TRADING), "--input", str(BARS), "-o", os.devnull]) == 0
    assert "warning" not in capsys.readouterr().err


# ---------------------------------------------------------------- item 5: existing outputs


def test_a_fresh_state_refuses_an_output_that_holds_rows(tmp_path: Path, capsys) -> None:
    out = write(tmp_path / "out.jsonl", '{"old": 1}\n' * 22)
    state = tmp_path / "state"
    code = main(["run", str(TRADING), "--input", str(BARS), "--state", str(state), "--output", str(out), "-q"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--output {out} already holds 242 bytes" in err and "--overwrite" in err
    assert out.read_text() == '{"old": 1}\n' * 22  # nothing lost
    code = main(["run", str(TRADING), "--input", str(BARS), "--state", str(state), "--output", str(out),
                 "--overwrite", "--finish", "-q"])
    assert code == 0
    assert '"old"' not in out.read_text() and len(out.read_text().splitlines()) == 48


def test_a_resumed_state_keeps_appending_without_overwrite(tmp_path: Path) -> None:
    out, state = tmp_path / "out.jsonl", tmp_path / "state"
    args = ["run", str(TRADING), "--input", str(BARS), "--state", str(state), "--output", str(out), "-q"]
    assert main(args) == 0
    assert main(args) == 0  # the checkpoint names this output: not a fresh state


# ---------------------------------------------------------------- item 6: no crash exits 1


def test_an_internal_error_is_one_line_and_exit_3(monkeypatch, capsys) -> None:
    from cep.engine import Engine

    def boom(self, *a, **k):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(Engine, "process", boom)
    assert main(["run", str(TRADING), "--input", str(BARS), "--fail-on-match"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cep run: internal error: ZeroDivisionError: division by zero")
    assert "Traceback" not in err[0]


def test_a_truncated_parquet_file_is_a_clear_error(tmp_path: Path, capsys) -> None:
    rows = [json.loads(x) for x in BARS.read_text().splitlines()]
    whole = tmp_path / "bars.parquet"
    pq.write_table(pa.Table.from_pylist(rows), whole)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert main(["run", str(TRADING), "--input", str(cut), "-q"]) == 3
    err = capsys.readouterr().err
    assert f"{cut}: not a readable Parquet file" in err and "truncated" in err and "Traceback" not in err


def test_a_crash_in_a_subprocess_never_exits_1(tmp_path: Path) -> None:
    deep = write(tmp_path / "deep.yaml", PAIR.replace("A.v = 1", "(" * 400 + "A.v = 1" + ")" * 400))
    proc = subprocess.run([sys.executable, "-m", "cep.cli", "run", str(deep), "--input", str(BARS),
                           "--fail-on-match"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "levels deep" in proc.stderr


# ---------------------------------------------------------------- item 13: standard input


def test_standard_input_emits_each_complex_event_as_it_comes(tmp_path: Path) -> None:
    rules = write(tmp_path / "pair.yaml", PAIR)
    proc = subprocess.Popen([sys.executable, "-m", "cep.cli", "run", str(rules), "--input", "-", "-q"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        got = []
        for i in range(3):  # the stream stays open: each match must come out before the next event
            for v in (1, 2):
                proc.stdin.write((json.dumps({"k": "x", "ts": 10 * i + v, "v": v}) + "\n").encode())
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, "no complex event while standard input stays open"
            got.append(json.loads(proc.stdout.readline()))
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert [(r["a"], r["b"]) for r in got] == [(1, 2), (11, 12), (21, 22)]


def test_standard_input_as_csv_and_refused_with_state(tmp_path: Path) -> None:
    rules = write(tmp_path / "pair.yaml", PAIR)
    csv_text = "k,ts,v\nx,1,1\nx,2,2\n"
    proc = subprocess.run([sys.executable, "-m", "cep.cli", "run", str(rules), "--input", "-", "--input-format",
                           "csv", "-q"], input=csv_text, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(x)["b"] for x in proc.stdout.splitlines()] == [2]
    proc = subprocess.run([sys.executable, "-m", "cep.cli", "run", str(rules), "--input", "-", "--state",
                           str(tmp_path / "st"), "--output", str(tmp_path / "o.jsonl")],
                          input="", capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and "--state cannot read standard input" in proc.stderr


# ---------------------------------------------------------------- item 14: byte-order marks


@pytest.mark.parametrize("kind", ["jsonl", "csv", "tsv"])
def test_a_byte_order_mark_is_stripped(tmp_path: Path, kind: str, capsys) -> None:
    rules = write(tmp_path / "pair.yaml", PAIR)
    if kind == "jsonl":
        body = '{"k": "x", "ts": 1, "v": 1}\n{"k": "x", "ts": 2, "v": 2}\n'
    else:
        sep = "," if kind == "csv" else "\t"
        body = "\n".join(sep.join(r) for r in (("k", "ts", "v"), ("x", "1", "1"), ("x", "2", "2"))) + "\n"
    path = tmp_path / f"events.{kind}"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    out = tmp_path / "out.jsonl"
    assert main(["run", str(rules), "--input", str(path), "-o", str(out)]) == 0
    assert "0 errors" in capsys.readouterr().err
    assert [json.loads(x)["b"] for x in out.read_text().splitlines()] == [2]


def test_a_byte_order_mark_before_an_access_log(tmp_path: Path, capsys) -> None:
    from cep.events import read_events

    line = b'1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 "-" "x"\n'
    path = tmp_path / "access.log"
    path.write_bytes(b"\xef\xbb\xbf" + line + line)
    batches = list(read_events(path))
    assert sum(b.n for b in batches) == 2 and not any(b.bad for b in batches)


BOM = b"\xef\xbb\xbf"
QUERIES = b'{"id": "q1", "query": "apple"}\n{"id": "q2", "query": "pie"}\n'
DOCS = b'{"id": 1, "text": "Apple pie"}\n{"id": 2, "text": "cake"}\n'


@pytest.mark.parametrize("marked", ["queries", "documents", "both"])
def test_percolate_reads_files_that_start_with_a_byte_order_mark(tmp_path: Path, marked: str, capsys) -> None:
    # before: "skipped query line: invalid JSON (UTF-8 byte order mark (BOM) is not supported ...)"
    queries = tmp_path / "q.jsonl"
    queries.write_bytes((BOM if marked in ("queries", "both") else b"") + QUERIES)
    docs = tmp_path / "d.jsonl"
    docs.write_bytes((BOM if marked in ("documents", "both") else b"") + DOCS)
    out = tmp_path / "o.jsonl"
    assert main(["percolate", "--queries", str(queries), "-i", str(docs), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "BOM" not in err and "skipped query" not in err and "skipped document" not in err
    assert "2 queries loaded, 0 rejected; 2 documents, 0 skipped; 2 matches" in err
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        {"id": 1, "matches": ["q1", "q2"]}, {"id": 2, "matches": []}]


def test_percolate_reads_standard_input_that_starts_with_a_byte_order_mark(tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_bytes(QUERIES)
    proc = subprocess.run([sys.executable, "-m", "cep.cli", "percolate", "--queries", str(queries), "--input", "-"],
                          input=BOM + DOCS, capture_output=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert b"skipped document" not in proc.stderr and b"2 documents, 0 skipped" in proc.stderr
    assert proc.stdout.splitlines()[0] == b'{"id":1,"matches":["q1","q2"]}'


def test_percolate_reads_a_saved_query_set_that_gained_a_byte_order_mark(tmp_path: Path, capsys) -> None:
    from cep.percolator import Percolator, PercolatorConfig
    from patterns.lucene import QueryConfig

    saved = tmp_path / "saved.jsonl"
    p = Percolator(PercolatorConfig(query=QueryConfig(default_operator="AND")))
    p.register("both", "apple pie")
    p.save(saved)
    saved.write_bytes(BOM + saved.read_bytes())  # opened and saved again in Notepad
    assert len(Percolator.load(saved)) == 1
    docs = tmp_path / "d.jsonl"
    docs.write_bytes(DOCS)
    out = tmp_path / "o.jsonl"
    assert main(["percolate", "--queries", str(saved), "-i", str(docs), "-o", str(out)]) == 0
    assert [json.loads(x)["matches"] for x in out.read_text().splitlines()] == [["both"], []]


def test_a_search_rules_queries_file_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    from patterns.rules import load_rules

    # before: "q.jsonl:1:1: invalid JSON: UTF-8 byte order mark (BOM) is not supported"
    (tmp_path / "q.jsonl").write_bytes(BOM + QUERIES)
    rules = write(tmp_path / "r.yaml", "rules:\n  - name: s\n    kind: search\n    from: news\n"
                  "    queries_file: q.jsonl\n")
    spec = load_rules(rules).rules[0].spec
    assert [q.id for q in spec.queries] == ["q1", "q2"]


def test_an_error_in_a_queries_file_with_a_byte_order_mark_counts_columns_after_it(tmp_path: Path) -> None:
    from patterns.rules import load_rules

    (tmp_path / "q.jsonl").write_bytes(BOM + b'{"id": "q1", "query": "apple AND"}\n')
    rules = write(tmp_path / "r.yaml", "rules:\n  - name: s\n    kind: search\n    from: news\n"
                  "    queries_file: q.jsonl\n")
    with pytest.raises(RuleErrors) as exc:
        load_rules(rules)
    shown = exc.value.errors[0].format()
    assert shown.startswith(f"{tmp_path / 'q.jsonl'}:1:") and "\ufeff" not in shown
    line, caret = shown.splitlines()[1:3]
    assert line.startswith('{"id": "q1"') and caret.index("^") >= line.index("apple")


def test_reloaded_queries_may_start_with_a_byte_order_mark() -> None:
    from dataclasses import replace

    from patterns.search_rules import SearchQuery, SearchSpec, reload_queries

    spec = replace(SearchSpec("news", (SearchQuery("own", "pear"),)), queries_file="q.jsonl")
    new, errors = reload_queries(spec, "\ufeff" + QUERIES.decode())
    assert errors == [] and [q.id for q in new.queries] == ["own", "q1", "q2"]


# ---------------------------------------------------------------- item 15: consistent options and messages


def test_version_and_short_options(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["--version"])
    assert ex.value.code == 0 and capsys.readouterr().out.startswith("cep ")
    queries = write(tmp_path / "q.jsonl", '{"id": "a", "query": "apple"}\n')
    docs = write(tmp_path / "d.jsonl", '{"id": 1, "text": "apple pie"}\n')
    out = tmp_path / "o.jsonl"
    assert main(["percolate", "--queries", str(queries), "-i", str(docs), "-o", str(out),
                 "--default-field", "text"]) == 0
    assert json.loads(out.read_text())["matches"] == ["a"]


def test_counts_have_their_nouns(tmp_path: Path, capsys) -> None:
    rules = write(tmp_path / "pair.yaml", PAIR)
    events = write(tmp_path / "e.jsonl", '{"k": "x", "ts": 1, "v": 1}\n{"k": "x", "ts": 2, "v": 2}\nnot json\n')
    assert main(["run", str(rules), "--input", str(events), "-o", os.devnull]) == 0
    err = capsys.readouterr().err
    assert "cep run: 2 events, 1 complex event, 0 late, 1 error" in err


def test_bench_says_one_rule_not_all_1_rules(tmp_path: Path, capsys) -> None:
    rules = write(tmp_path / "pair.yaml", PAIR)
    events = write(tmp_path / "e.jsonl", '{"k": "x", "ts": 1, "v": 1}\n{"k": "x", "ts": 2, "v": 2}\n')
    assert main(["bench", str(rules), "--input", str(events), "--repeat", "1", "--progress", "off"]) == 0
    out = capsys.readouterr().out
    assert "2 events (0 bad lines)" in out and "all 1 rule together" in out and "all 1 rules" not in out


def test_the_progress_bar_counts_have_their_nouns() -> None:
    from cep.cli.progress import progress_line

    assert progress_line(0.0, 1, 1).endswith("0.0% 1 event 1 match")
    assert progress_line(1.0, 12_000, 0) == "[" + "#" * 30 + "] 100.0% 12,000 events 0 matches"


def test_max_partial_matches_must_be_a_whole_number() -> None:
    for bad in ("null", "1.5", "true", "'ten'"):
        text = PAIR.replace("  - name: pair\n", f"  - name: pair\n    max_partial_matches: {bad}\n")
        with pytest.raises(RuleErrors) as err:
            parse_rules(text)
        assert "max_partial_matches must be at least 1, a whole number such as 10000" in str(err.value), bad
        assert "int()" not in str(err.value)


def test_plural_interval_units_are_refused_as_flink_sql_does() -> None:
    text = PAIR.replace("PATTERN (A B)", "PATTERN (A B) WITHIN INTERVAL '10' MINUTES")
    with pytest.raises(RuleErrors) as err:
        parse_rules(text)
    assert "SQL interval units are singular" in str(err.value) and "write MINUTE, not MINUTES" in str(err.value)
    assert parse_rules(text.replace("MINUTES", "MINUTE")).rules[0].compiled.statement.within_ms == 600_000


def test_short_f_means_follow_only() -> None:
    from cep.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["run", "r.yaml", "-i", "x", "-f"]).follow is True
    with pytest.raises(SystemExit):  # `cep spark` spells --format out: -f is --follow in cep run
        parser.parse_args(["spark", "backfill", "r.yaml", "--input", "x", "--output", "o", "-f", "json"])
