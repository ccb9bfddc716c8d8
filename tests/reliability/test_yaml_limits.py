"""Rule files that would explode once read: alias bombs, endless nesting, files too large.

Aliases may stand for at most MAX_ALIAS_EXPANSION characters of YAML in a rule file (enough
for honest anchors and ``<<: *defaults``); a recursive alias, nesting past MAX_YAML_DEPTH and a
file past MAX_RULE_FILE_BYTES are refused with the file, line, column and what to do, through
``parse_rules``, ``load_rules``, ``cep check`` and ``cep run``, in well under a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from patterns.errors import RuleErrors
from patterns.rules import (
    MAX_ALIAS_EXPANSION,
    MAX_RULE_FILE_BYTES,
    MAX_YAML_DEPTH,
    load_rules,
    parse_rules,
)
from tests.reliability.fuzzing import time_bound

REPO = Path(__file__).resolve().parents[2]
SQL = "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.ts AS t0 PATTERN (A) DEFINE A AS A.v > 1)"
BUDGET_MESSAGE = f"past the limit of {MAX_ALIAS_EXPANSION:,} (aliases inside aliases multiply"


def laughs(indent: str, levels: int = 9) -> str:
    """The 'billion laughs' shape: each level a list of nine aliases of the level before."""
    lines = [f"{indent}l0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"{indent}l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


# Where the bomb sits, and what used to expand it: an error message printing the value, the
# rule's description made text, a query's metadata copied into every output row.
BOMBS = {
    "lateness": f"rules:\n  - name: r\n    sql: {SQL}\n    lateness:\n{laughs('      ')}",
    "description": f"rules:\n  - name: r\n    sql: {SQL}\n    description:\n{laughs('      ')}",
    "metadata": ("rules:\n  - name: s\n    kind: search\n    from: news\n    queries:\n"
                 f"      - id: q\n        query: apple\n        metadata:\n{laughs('          ')}"),
}


def _the_error(text: str, file: str | None = None) -> str:
    with time_bound(5.0), pytest.raises(RuleErrors) as exc:
        parse_rules(text, file)
    (err,) = exc.value.errors
    return err.format()


@pytest.mark.parametrize("where", BOMBS)
def test_an_alias_bomb_is_refused_at_the_alias_that_crosses_the_budget(where):
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        shown = _the_error(BOMBS[where], "bomb.yaml")
        took = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    first, source, caret = shown.splitlines()
    # levels weigh 20, 182, 1,640, 14,762 and 132,860 characters; the aliases of the four first levels
    # stand for 149,436, and the seventh alias of the sixth level crosses 1,000,000
    line = {"lateness": 10, "description": 10, "metadata": 14}[where]
    col = {"lateness": 46, "description": 46, "metadata": 50}[where]
    assert first.startswith(f"bomb.yaml:{line}:{col}: alias *a4 stands for 132,860 characters of YAML, which brings "
                            "what the aliases of this file stand for to 1,079,456, ")
    assert BUDGET_MESSAGE in first and first.endswith("write the repeated values out, or use fewer or smaller anchors")
    assert source.endswith("l5: &a5 [*a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4, *a4]")
    assert caret == " " * (col - 1) + "^^^"
    assert took < 1.0 and peak < 20 << 20  # was: minutes and gigabytes


@pytest.mark.parametrize("where", BOMBS)
def test_load_rules_and_the_command_line_refuse_an_alias_bomb(tmp_path, where):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMBS[where])
    with time_bound(5.0), pytest.raises(RuleErrors) as exc:
        load_rules(path)
    assert BUDGET_MESSAGE in str(exc.value) and str(exc.value).startswith(f"{path}:")
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"id": 1, "title": "apple", "k": 1, "ts": 1, "v": 2}) + "\n")
    for args in (["check", str(path)], ["run", str(path), "--input", str(events), "--output", str(tmp_path / "o.jsonl")],
                 ["run", str(path), "--input", str(events), "--output", str(tmp_path / "d.jsonl"),
                  "--state", str(tmp_path / "st")]):
        proc = subprocess.run([sys.executable, "-m", "cep.cli", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert f"{path}:" in proc.stderr and BUDGET_MESSAGE in proc.stderr
        assert len(proc.stderr) < 2_000  # the bomb is never printed
    assert not (tmp_path / "d.jsonl").exists() or (tmp_path / "d.jsonl").stat().st_size == 0


def test_honest_anchors_merge_keys_and_shared_lists_still_work():
    text = f"""rules:
  - &defaults
    name: r0
    lateness: 5 minutes
    max_partial_matches: 50
    sql: {SQL}
""" + "".join(f"""  - <<: *defaults
    name: r{i}
""" for i in range(1, 2000)) + """  - name: s
    kind: search
    from: news
    queries:
      - {id: a, query: apple, metadata: &meta {desk: food, tags: [fruit, red]}}
      - {id: b, query: banana, metadata: *meta}
"""
    rs = parse_rules(text)
    assert len(rs) == 2001
    assert {(r.lateness_ms, r.max_partial_matches, r.source) for r in rs.rules[:-1]} == {(300_000, 50, SQL)}
    assert rs.rules[7].name == "r7"
    spec = rs.rules[-1].spec
    assert [q.metadata for q in spec.queries] == [{"desk": "food", "tags": ["fruit", "red"]}] * 2


def test_the_budget_counts_every_alias_of_the_file():
    # each alias alone is small; together they pass the budget: the error is at the one that crosses it
    big = "y" * 999
    n = MAX_ALIAS_EXPANSION // 1000 + 1
    text = (f"rules:\n  - name: r\n    sql: {SQL}\n    description:\n      a: &big {big}\n      b: ["
            + ", ".join(["*big"] * n) + "]\n")
    shown = _the_error(text)
    assert f"alias *big stands for 1,000 characters of YAML, which brings what the aliases of this file stand " \
           f"for to {n * 1000:,}, " in shown
    ok = text.replace(", ".join(["*big"] * n), ", ".join(["*big"] * (n - 1)))
    assert len(parse_rules(ok)) == 1


def test_a_recursive_alias_is_refused():
    text = f"rules:\n  - name: r\n    sql: {SQL}\n    description: &loop\n      again: *loop\n"
    shown = _the_error(text, "loop.yaml")
    assert shown.splitlines()[0] == (
        "loop.yaml:5:14: alias *loop is used inside the node it names (a structure that contains itself), which a "
        "rule file cannot hold; write the value out")


def test_nesting_past_the_depth_limit_is_refused_not_a_recursion_error():
    for depth in (MAX_YAML_DEPTH + 1, 5_000, 100_000):
        text = "rules: " + "[" * depth + "]" * depth + "\n"
        shown = _the_error(text, "deep.yaml")
        first = shown.splitlines()[0]
        assert first == f"deep.yaml:1:{8 + MAX_YAML_DEPTH - 1}: YAML nested deeper than {MAX_YAML_DEPTH} levels; " \
                        "a rule file needs far fewer"
        assert len(shown) < 500  # the line is shown as a window around the caret
    # at the limit it is only a wrong shape
    text = "rules: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1) + "\n"
    assert "nested deeper" not in _the_error(text)


def test_python_tags_stay_refused_by_the_counting_loader():
    shown = _the_error("rules:\n  - name: a\n    description: &x !!python/object/apply:os.system ['true']\n"
                       f"    sql: {SQL}\n    lateness: *x\n")
    assert "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system'" in shown


# ------------------------------------------------------------------ size


def test_a_rule_file_past_the_size_limit_is_refused_naming_file_size_and_limit(tmp_path):
    path = tmp_path / "huge.yaml"
    filler = "# " + "x" * 98 + "\n"
    with open(path, "w") as f:
        f.write("rules:\n")
        f.write(filler * (MAX_RULE_FILE_BYTES // len(filler) + 1))
    size = path.stat().st_size
    with time_bound(5.0), pytest.raises(RuleErrors) as exc:
        load_rules(path)
    assert str(exc.value) == (
        f"{path}:1:1: rule file {path} holds {size:,} bytes, past the limit of "
        f"{MAX_RULE_FILE_BYTES:,} bytes (4 MiB); split the rules over several files")
    proc = subprocess.run([sys.executable, "-m", "cep.cli", "check", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == f"{exc.value}\n{path}: 1 error\n"
    assert size > MAX_RULE_FILE_BYTES
    events = tmp_path / "events.jsonl"
    events.write_text('{"k": 1, "ts": 1, "v": 2}\n')
    proc = subprocess.run([sys.executable, "-m", "cep.cli", "run", str(path), "--input", str(events), "--state",
                           str(tmp_path / "st"), "--output", str(tmp_path / "o.jsonl")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == f"cep run: rule file {path} holds {size:,} bytes, past the " \
        f"limit of {MAX_RULE_FILE_BYTES:,} bytes (4 MiB); split the rules over several files\n"
    # text given to the API is measured in characters
    with pytest.raises(RuleErrors) as exc:
        parse_rules(path.read_text(), "given.yaml")
    assert str(exc.value).startswith(f"given.yaml:1:1: rule text of {size:,} characters is longer than the limit "
                                     f"of {MAX_RULE_FILE_BYTES:,} (4 MiB); split the rules over several files")


def test_an_endless_rule_file_is_read_up_to_the_limit_only():
    with time_bound(5.0), pytest.raises(RuleErrors) as exc:
        load_rules("/dev/zero")
    assert f"rule file /dev/zero holds more than {MAX_RULE_FILE_BYTES:,} bytes" in str(exc.value)


def test_a_rule_file_from_a_pipe_is_still_read(tmp_path):
    # `cep check <(generate-rules)`: a pipe holding a small rule file is fine
    r, w = os.pipe()
    os.write(w, f"rules:\n  - name: r\n    sql: {SQL}\n".encode())
    os.close(w)
    try:
        assert load_rules(f"/dev/fd/{r}").names() == ["r"]
    finally:
        os.close(r)


def test_a_long_source_line_is_shown_as_a_window_around_the_caret():
    pad = " AND ".join(f"A.v{i} > 1" for i in range(700))
    sql = f"SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A) DEFINE A AS {pad} AND nosuch(A.v) AND {pad})"
    assert len(sql) > 10_000
    shown = _the_error(f"rules:\n  - name: r\n    sql: {sql}\n", "long.yaml")
    first, source, caret = shown.splitlines()
    col = 9 + sql.index("nosuch") + 1
    assert first.startswith(f"long.yaml:3:{col}: unknown function 'nosuch'")
    assert source.startswith("...") and source.endswith("...") and len(source) == 160 + 6
    assert source[caret.index("^"):].startswith("nosuch")
