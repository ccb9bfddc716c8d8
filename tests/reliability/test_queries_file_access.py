"""A search rule's ``queries_file`` reads only what it should, and never echoes much of what it should not.

The file must lie in the rule file's folder (or below), symbolic links resolved, unless the
person running ``cep`` allowed more (``--queries-root DIR``, ``CEP_QUERIES_ROOTS``,
``queries_roots=``); it must be a regular file under MAX_QUERIES_FILE_BYTES. An error shows at
most EXCERPT characters of a queries-file line and a window of CARET_WINDOW around any caret.
``cep percolate --queries FILE`` gets the regular-file and size checks (a path typed on the
command line is not confined).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patterns.errors import CARET_WINDOW, EXCERPT, RuleErrors, caret_line
from patterns.files import MAX_QUERIES_FILE_BYTES, QUERIES_ROOTS_ENV
from patterns.rules import load_rules, parse_rules
from tests.reliability.fuzzing import time_bound

REPO = Path(__file__).resolve().parents[2]
SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
HINT = ("keep it in that folder (or below), or allow its folder with --queries-root DIR or the "
        "CEP_QUERIES_ROOTS environment variable")


@pytest.fixture(autouse=True)
def _no_roots_from_the_environment(monkeypatch):
    monkeypatch.delenv(QUERIES_ROOTS_ENV, raising=False)


def rule_file(folder: Path, queries_file: str, name: str = "r.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"rules:\n  - name: s\n    kind: search\n    from: news\n    queries_file: {queries_file}\n")
    return path


def the_error(path: Path, **kw) -> str:
    with time_bound(5.0), pytest.raises(RuleErrors) as exc:
        load_rules(path, **kw)
    (err,) = exc.value.errors
    return err.format()


def cep(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cep.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.fixture
def layout(tmp_path):
    """rules/ with a queries file, and a secret next to it, outside rules/."""
    rules = tmp_path / "rules"
    (rules / "sub").mkdir(parents=True)
    (rules / "sub" / "q.jsonl").write_text('{"id": "a", "query": "apple"}\n')
    (tmp_path / "secrets.env").write_text(SECRET + "\nDB_PASSWORD=hunter2\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "q.jsonl").write_text('{"id": "o", "query": "orange"}\n')
    return tmp_path


@pytest.mark.parametrize("value,resolved", [
    ("../secrets.env", "{tmp}/secrets.env"),
    ("sub/../../secrets.env", "{tmp}/secrets.env"),
    ("{tmp}/secrets.env", None),
    ("/etc/passwd", None),
    ("/proc/self/environ", "/proc/*/environ"),
    ("/dev/zero", None),
])
def test_a_queries_file_outside_the_rule_files_folder_is_refused_unread(layout, value, resolved):
    value = value.format(tmp=layout)
    path = rule_file(layout / "rules", value)
    shown = the_error(path)
    first = shown.splitlines()[0]
    head = f"{path}:5:19: rule 's': queries file {value} "
    assert first.startswith(head), first
    rest = first[len(head):]
    if resolved is None:
        assert rest.startswith("is outside")
    elif "*" in resolved:
        assert rest.startswith("(/proc/") and rest.split(")")[0].endswith("/environ")
    else:
        assert rest.startswith(f"({resolved.format(tmp=layout)}) is outside")
    assert rest.endswith(f"is outside {layout / 'rules'}, the rule file's folder; {HINT}")
    assert "wJalr" not in shown and "root:" not in shown and "PATH=" not in shown
    proc = cep("check", str(path))
    assert proc.returncode == 2 and "is outside" in proc.stderr and "wJalr" not in proc.stderr
    assert "root:x:" not in proc.stderr and "PATH=" not in proc.stderr


def test_a_symbolic_link_is_resolved_before_the_check(layout):
    rules = layout / "rules"
    (rules / "innocent.jsonl").symlink_to(layout / "secrets.env")
    (rules / "fine.jsonl").symlink_to(rules / "sub" / "q.jsonl")
    shown = the_error(rule_file(rules, "innocent.jsonl"))
    assert f"queries file innocent.jsonl ({layout / 'secrets.env'}) is outside {rules}" in shown
    assert "wJalr" not in shown
    spec = load_rules(rule_file(rules, "fine.jsonl")).rules[0].spec
    assert [q.id for q in spec.queries] == ["a"] and spec.queries_file == str(rules / "sub" / "q.jsonl")
    # the rule file's folder itself through a link: its own files are fine
    (layout / "link").symlink_to(rules)
    assert [q.id for q in load_rules(rule_file(layout / "link", "sub/q.jsonl")).rules[0].spec.queries] == ["a"]


def test_below_the_rule_files_folder_is_allowed(layout):
    spec = load_rules(rule_file(layout / "rules", "sub/q.jsonl")).rules[0].spec
    assert [q.id for q in spec.queries] == ["a"]


def test_other_folders_are_allowed_explicitly(layout, monkeypatch):
    path = rule_file(layout / "rules", "../other/q.jsonl")
    other = str(layout / "other")
    assert "is outside" in the_error(path)
    assert "and outside /nowhere" in the_error(path, queries_roots=["/nowhere"])
    # the Python API
    assert [q.id for q in load_rules(path, queries_roots=[other]).rules[0].spec.queries] == ["o"]
    assert [q.id for q in parse_rules(path.read_text(), str(path), queries_roots=[other]).rules[0].spec.queries] == ["o"]
    # the command line, and the environment (which Spark jobs and API callers inherit)
    assert cep("check", str(path)).returncode == 2
    proc = cep("check", "--queries-root", other, str(path))
    assert proc.returncode == 0 and "ok, 1 rule" in proc.stdout, proc.stderr
    assert cep("check", str(path), env={QUERIES_ROOTS_ENV: f"/nowhere{os.pathsep}{other}"}).returncode == 0
    monkeypatch.setenv(QUERIES_ROOTS_ENV, other)
    assert [q.id for q in load_rules(path).rules[0].spec.queries] == ["o"]
    assert "is outside" in the_error(path, queries_roots=[])  # an explicit list replaces the environment


def test_rule_text_without_a_file_reads_from_the_current_folder_only(layout, monkeypatch):
    monkeypatch.chdir(layout / "rules")
    text = "rules:\n  - name: s\n    kind: search\n    from: news\n    queries_file: {}\n"
    assert [q.id for q in parse_rules(text.format("sub/q.jsonl")).rules[0].spec.queries] == ["a"]
    with pytest.raises(RuleErrors) as exc:
        parse_rules(text.format("../secrets.env"))
    assert f"is outside {layout / 'rules'}, the rule file's folder" in str(exc.value)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_only_a_regular_file_is_read(tmp_path, kind):
    rules = tmp_path / "rules"
    rules.mkdir()
    if kind == "fifo":
        os.mkfifo(rules / "q.jsonl")  # nobody writes to it: opening it for reading would hang
        value, what = "q.jsonl", "a named pipe (FIFO)"
    elif kind == "device":
        value, what = "/dev/zero", "a character device"  # endless: would exhaust memory
    else:
        (rules / "q.jsonl").mkdir()
        value, what = "q.jsonl", "a directory"
    path = rule_file(rules, value)
    real = value if value.startswith("/") else str(rules / value)
    t0 = time.monotonic()
    shown = the_error(path, queries_roots=["/dev"])
    assert time.monotonic() - t0 < 1.0
    assert shown.splitlines()[0] == f"{path}:5:19: rule 's': queries file {real} is {what}, not a regular file"


def test_a_queries_file_past_the_size_limit_is_refused_before_reading(tmp_path):
    rules = tmp_path / "rules"
    path = rule_file(rules, "q.jsonl")
    with open(rules / "q.jsonl", "wb") as f:  # sparse: no disk, and never read
        f.truncate(MAX_QUERIES_FILE_BYTES + 1)
    shown = the_error(path)
    assert shown.splitlines()[0] == (
        f"{path}:5:19: rule 's': queries file {rules / 'q.jsonl'} holds {MAX_QUERIES_FILE_BYTES + 1:,} bytes, past "
        f"the limit of {MAX_QUERIES_FILE_BYTES:,} bytes (256 MiB); split the queries over several files and rules")


def test_a_line_that_is_not_a_query_is_shown_as_a_short_excerpt(tmp_path):
    rules = tmp_path / "rules"
    path = rule_file(rules, "q.jsonl")
    long_secret = "SECRET=" + "s3cr3t" * 2000
    (rules / "q.jsonl").write_text(f'{{"id": "a", "query": "apple"}}\n{long_secret}\n{SECRET}\n'
                                   f'{{"id": ["x" * 5000], "query": "y"}}\n'.replace('"x" * 5000', '"' + "x" * 5000 + '"'))
    with pytest.raises(RuleErrors) as exc:
        load_rules(path)
    errs = exc.value.errors
    assert [e.message for e in errs][:2] == ["invalid JSON: unexpected character, expected a JSON value"] * 2
    for e in errs:
        _, source, caret = e.format().splitlines()
        assert len(source) <= EXCERPT + 3 and caret.index("^") <= len(source)
    assert errs[0].format().splitlines()[1] == ("SECRET=" + "s3cr3t" * 20)[:EXCERPT] + "..."
    assert errs[2].message.startswith("a query needs an 'id' (a string or an integer), found ['xxxx")
    assert len(errs[2].message) < 150
    assert sum(len(e.format()) for e in errs) < 1_000


def test_a_query_with_a_syntax_error_on_a_long_line_is_shown_around_its_caret(tmp_path):
    rules = tmp_path / "rules"
    path = rule_file(rules, "q.jsonl")
    query = " OR ".join(f"word{i}" for i in range(2000)) + " AND (oops"
    (rules / "q.jsonl").write_text(json.dumps({"id": "long", "query": query}) + "\n")
    with pytest.raises(RuleErrors) as exc:
        load_rules(path)
    (err,) = exc.value.errors
    _, source, caret = err.format().splitlines()
    assert source.startswith("...") and len(source) <= EXCERPT + 6
    assert "(oops" in source[caret.index("^") - 10 :]


def test_caret_line_windows_any_long_line_and_keeps_short_ones():
    assert caret_line("short\nline two", 2, 6) == "line two\n     ^"
    text = "a\n" + "x" * 5_000 + "BAD" + "y" * 5_000 + "\nz"
    source, caret = caret_line(text, 2, 5_001, 3).split("\n")
    assert len(source) == CARET_WINDOW + 6 and source[caret.index("^"):][:3] == "BAD" and caret.count("^") == 3
    # at the very end of a long line, past its last character
    source, caret = caret_line("q" * 1_000, 1, 1_001).split("\n")
    assert source.startswith("...") and not source.endswith("...") and caret.index("^") == len(source)
    # \r\n files, and lines split where line_col counts them (\n only)
    assert caret_line("a\r\nbc\r\n", 2, 2) == "bc\n ^"
    assert caret_line("a\u2028b\nc", 2, 1) == "c\n^"


# ------------------------------------------------------------------ cep percolate --queries


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "too large"])
def test_percolate_reads_only_a_regular_queries_file_under_the_limit(tmp_path, kind):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": 1, "title": "apple"}\n')
    q = tmp_path / "q.jsonl"
    if kind == "fifo":
        os.mkfifo(q)
        what = "is a named pipe (FIFO), not a regular file"
    elif kind == "device":
        q = Path("/dev/zero")
        what = "is a character device, not a regular file"
    elif kind == "directory":
        q.mkdir()
        what = "is a directory, not a regular file"
    else:
        with open(q, "wb") as f:
            f.truncate(MAX_QUERIES_FILE_BYTES + 1)
        what = (f"holds {MAX_QUERIES_FILE_BYTES + 1:,} bytes, past the limit of {MAX_QUERIES_FILE_BYTES:,} bytes "
                "(256 MiB); split the queries over several files and runs")
    proc = cep("percolate", "--queries", str(q), "--input", str(docs))
    assert proc.returncode == 2
    assert proc.stderr == f"cep percolate: queries file {q} {what}\n"


def test_percolate_still_reads_a_queries_file_anywhere(tmp_path):
    # a path typed on the command line is the user's choice: no confinement
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": 1, "title": "apple"}\n')
    (tmp_path / "far").mkdir()
    q = tmp_path / "far" / "q.jsonl"
    q.write_text('{"id": "a", "query": "apple"}\n' + "not json " * 1000 + "\n")
    proc = cep("percolate", "--queries", str(q), "--input", str(docs))
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"id": 1, "matches": ["a"]}
    assert "not json" not in proc.stderr and f"{q}:2: skipped query line: invalid JSON" in proc.stderr


def test_percolate_allows_a_saved_index_more_room_than_query_lines(tmp_path):
    from cep.cli.percolate import MAX_INDEX_FILE_BYTES

    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": 1, "title": "apple"}\n')
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": "a", "query": "apple"}\n')
    index = tmp_path / "index"
    assert cep("percolate", "--queries", str(q), "--input", str(docs), "--save-index", str(index)).returncode == 0
    with open(index, "r+b") as f:  # the index's own header line, then a sparse tail past the limit
        f.truncate(MAX_INDEX_FILE_BYTES + 1)
    proc = cep("percolate", "--queries", str(index), "--input", str(docs))
    assert proc.returncode == 2
    assert proc.stderr == (f"cep percolate: saved index {index} holds {MAX_INDEX_FILE_BYTES + 1:,} bytes, past the "
                           f"limit of {MAX_INDEX_FILE_BYTES:,} bytes (2048 MiB); split the queries over several files "
                           "and runs\n")
