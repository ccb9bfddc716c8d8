"""The README's five-minute tour, run as written, with the output it shows.

Each ```bash block of the tour runs in bash (with ``pipefail``) from a scratch folder that sees
this repository's ``rules/`` (so ``matches.jsonl`` and ``bench.png`` land there), with ``cep`` the
command of this checkout. A ```text block right after a ```bash block is output that block prints:
every shown line is a line of its stdout or stderr. The ```python block runs too. The ``cep spark``
blocks are left to ``tests/spark_udf/test_cli.py``: each starts a JVM, minutes for the three.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)


def tour_blocks() -> list[tuple[str, str, str | None]]:
    """(language, code, the ```text block right after it or None) for each block of the tour."""
    text = (REPO / "README.md").read_text()
    start = text.index("\n## A five-minute tour")
    tour = text[start:text.index("\n## ", start + 1)]
    found = list(FENCE.finditer(tour))
    out = []
    for i, m in enumerate(found):
        if m.group(1) == "text":
            continue
        nxt = found[i + 1] if i + 1 < len(found) else None
        shown = nxt.group(2) if nxt and nxt.group(1) == "text" and not tour[m.end():nxt.start()].strip() else None
        out.append((m.group(1), m.group(2), shown))
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A working folder with ``rules/`` and an environment whose ``cep`` is this checkout's."""
    tmp = tmp_path_factory.mktemp("tour")
    (tmp / "rules").symlink_to(REPO / "rules")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    cep = bin_dir / "cep"
    cep.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cep.cli "$@"\n')
    cep.chmod(cep.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    return tmp, env


SHELL_BLOCKS = [(code, shown) for lang, code, shown in tour_blocks() if lang == "bash" and "cep spark" not in code]


def test_the_tour_has_its_steps():
    """check, run, percolate, spark run, bench: each step of the tour is there."""
    code = "\n".join(c for _, c, _ in tour_blocks())
    for step in ("cep check ", "cep run ", "cep percolate ", "cep spark run ", "cep spark backfill ", "cep bench "):
        assert step in code, step
    assert len(SHELL_BLOCKS) >= 8


@pytest.mark.parametrize("code, shown", SHELL_BLOCKS, ids=[c.split("\n")[0][:60] for c, _ in SHELL_BLOCKS])
def test_tour_command_runs_and_prints_what_the_readme_shows(scratch, code, shown):
    tmp, env = scratch
    if re.search(r"\|\s*jq\b", code) and shutil.which("jq") is None:
        pytest.skip("jq is not installed here (the README names it as an example consumer)")
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", code], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=120)
    # 141: a command writing into `head` that stopped reading (grep in `... | grep | head -2`)
    assert proc.returncode in (0, 141), (code, proc.stderr)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    printed = set((proc.stdout + proc.stderr).splitlines())
    missing = [line for line in (shown or "").splitlines() if line.strip() and line not in printed]
    assert missing == [], f"the README shows lines this command does not print:\n{code}\n" + "\n".join(missing)


def test_tour_python_block_runs(scratch, monkeypatch, capsys):
    tmp, _ = scratch
    (block,) = [c for lang, c, _ in tour_blocks() if lang == "python"]
    monkeypatch.chdir(tmp)
    exec(compile(block, "README.md (tour)", "exec"), {})
    assert capsys.readouterr().out.split() == ["48", "0", "0"]  # every match of trading.yaml, nothing late


def test_tour_rule_excerpts_are_taken_from_the_rule_files():
    """The V-shape rule is shown whole, the company_mentions rule as a part of its file."""
    import yaml

    first, second = [yaml.safe_load(c) for lang, c, _ in tour_blocks() if lang == "yaml"]
    assert first["rules"] == yaml.safe_load((REPO / "rules/trading.yaml").read_text())["rules"][:1]
    (shown,) = second
    media = {r["name"]: r for r in yaml.safe_load((REPO / "rules/media.yaml").read_text())["rules"]}
    rule = media[shown["name"]]
    assert {k: v for k, v in shown.items() if k != "queries"} == {k: rule[k] for k in shown if k != "queries"}
    assert [q for q in shown["queries"] if q not in rule["queries"]] == []
