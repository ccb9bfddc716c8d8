"""``cep --help`` and every subcommand's help: complete, with the exit codes each command returns.

The codes in the help text are checked against what the commands do: 0 ok, 1 complex events with
``--fail-on-match``, 2 usage or rule errors, 3 runtime failure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cep.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
TRADING = str(REPO / "rules" / "trading.yaml")
BARS = str(REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl")


def help_text(*command: str) -> str:
    parser = build_parser()
    for name in command:  # walk down to the subcommand's own parser
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = sub.choices[name]
    return parser.format_help()


def test_top_level_help_lists_every_command_examples_and_exit_codes():
    text = help_text()
    for word in ("check", "run", "bench", "spark", "percolate", "MATCH_RECOGNIZE", "analytics", "search"):
        assert word in text
    assert "cep run rules/trading.yaml --input rules/data/sp500_daily_2017_sample.jsonl" in text
    for code in ("0  ok", "1  complex events", "2  usage or rule errors", "3  runtime failure"):
        assert code in text


def test_the_run_example_of_the_help_runs_without_error_rows(tmp_path, capsys, monkeypatch):
    """The help's `cep run` example, run from the repository root, reads every event without an error row."""
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    runs = [line.split()[1:] for line in help_text().splitlines() if line.strip().startswith("cep run ")]
    assert runs
    for argv in runs:
        capsys.readouterr()
        assert main([*argv, "-o", str(tmp_path / "out.jsonl")]) == 0
        summary = capsys.readouterr().err.splitlines()[0]
        assert summary.startswith("cep run: ") and summary.endswith(" 0 errors") and " 0 complex events" not in summary


@pytest.mark.parametrize("command, codes", [
    (("check",), ["0 every file is valid", "2 a file has errors"]),
    (("run",), ["0 ok", "1 complex events", "2 usage or rule errors", "3 runtime failure"]),
    (("bench",), ["0 ok", "2 usage or rule errors", "3 runtime failure"]),
    (("percolate",), ["0 ok", "2 usage errors", "3 runtime failure"]),
    (("spark",), ["0 ok", "2 usage or rule errors", "3 the Spark job failed"]),
    (("spark", "run"), ["0 ok", "2 usage or rule errors", "3 the Spark job failed"]),
    (("spark", "backfill"), ["0 ok", "2 usage or rule errors", "3 the Spark job failed"]),
])
def test_every_subcommand_help_ends_with_its_exit_codes(command, codes):
    text = " ".join(help_text(*command).split())  # argparse wraps lines
    assert "Exit codes:" in text
    for code in codes:
        assert code in text, (command, code)


def test_the_documented_exit_codes_are_the_ones_returned(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    sql: SELECT * FROM t MATCH_RECOGNIZE (PATTERN (A)\n")
    assert main(["check", TRADING]) == 0
    assert main(["check", str(bad)]) == 2
    assert main(["run", TRADING, "--input", BARS, "-q", "-o", str(tmp_path / "o.jsonl")]) == 0
    assert main(["run", TRADING, "--input", BARS, "-q", "-o", str(tmp_path / "o.jsonl"), "--fail-on-match"]) == 1
    assert main(["run", str(bad), "--input", BARS]) == 2
    assert main(["run", TRADING, "--input", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["bench", TRADING, "--input", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["run", TRADING, "--input", BARS, "--output-format", "parquet"]) == 2  # needs a file
    with pytest.raises(SystemExit) as e:
        main(["run", TRADING])  # --input missing: a usage error
    assert e.value.code == 2
    capsys.readouterr()


def test_percolate_into_a_closed_pipe_stops_quietly():
    """``cep percolate ... | head -3`` (the README tour): exit 0, no broken-pipe message."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cep.cli", "percolate", "--queries", "rules/data/news_queries.jsonl",
         "--input", "rules/data/headlines_sample.jsonl", "--highlight", "--batch-size", "50"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert first.startswith(b'{"id":"abc-0"')
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception ignored" not in err
