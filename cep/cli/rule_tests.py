"""``cep test``: run the tests written next to a rule file and show what each expected and got.

A rule file's tests are a top-level ``tests:`` list in the rule file itself and/or a file
``NAME.test.yaml`` beside ``NAME.yaml`` (``NAME.sql``) holding a mapping with a ``tests:`` list.
Each test feeds a few events through the embedded engine as ``cep run`` does and compares the
rows that come out with the expected ones (docs/cli.md, "cep test")::

    tests:
      - name: a fall then a recovery
        rules: [v_shape]                  # default: every rule of the file
        events:
          - {symbol: X, date: "2017-01-02", close: 10}
          - ...
        expect:                           # or contains: (a subset)
          - {symbol: X, start_date: "2017-01-02", end_close: 14}
        late: 0                           # a count, or rows
        errors: 0
        timeouts: []

A test file is read like a rule file: the same safe YAML loader and limits, and a file it names
(``events_file``, an input of ``inputs:``) must lie in the test file's folder or below (or in a
folder allowed with ``--queries-root``), as a search rule's ``queries_file`` must.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from cep.cli.exit_codes import EXIT_OK, EXIT_TESTS_FAILED, EXIT_USAGE
from patterns.errors import RuleErrors, SourceError

__all__ = ["cmd_test", "RuleTest", "RuleTestRun", "load_tests", "run_test", "match_rows", "sibling_test_file",
           "TEST_KEYS"]

TEST_KEYS = {
    "name": "the test's name, unique in its file (PASS file::name)",
    "description": "free text",
    "rules": "names of the rules to run (default: every rule of the file)",
    "events": "the input: a list of events (mappings)",
    "events_file": "the input: an event file (JSON lines, CSV, Parquet, .log), relative to the test file",
    "inputs": "named inputs for rules whose FROM names a stream: NAME: a list of events or a file",
    "expect": "the complex events, exactly: as many rows, each equal on the keys it names",
    "contains": "complex events that must be among those emitted (others may be too)",
    "late": "late events: a count, or rows (exactly, as expect)",
    "errors": "bad events: a count, or rows (exactly, as expect)",
    "timeouts": "timed-out partial matches (WITH TIMEOUT ROWS): rows (exactly, as expect), or a count",
}

ROW_EXPECTATIONS = ("expect", "contains", "timeouts")  # rows of a rule: 'rule' may be left out with one rule
OTHER_EXPECTATIONS = ("late", "errors")


@dataclass
class RuleTest:
    """One test as written: where it is, its input and what it expects."""

    name: str
    file: str  # the file the test is written in
    line: int
    rules: list[str] | None
    inputs: list[tuple[str | None, list[dict] | Path, list[int]]]  # (stream, events or file, lines)
    expectations: dict[str, int | list[dict]] = field(default_factory=dict)


@dataclass
class RuleTestRun:
    """What one test got, and how it differs from what it expected (empty lists: it passed)."""

    test: RuleTest
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def sibling_test_file(rule_file: str | os.PathLike[str]) -> Path | None:
    """The ``NAME.test.yaml`` (or ``.test.yml``) beside a rule file, if there is one.

    Example:
        >>> sibling_test_file("rules/trading.yaml").name
        'trading.test.yaml'
    """
    p = Path(rule_file)
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    for ext in (".test.yaml", ".test.yml"):
        cand = p.with_name(stem + ext)
        if cand.is_file():
            return cand
    return None


def rule_file_for(test_file: Path) -> Path | None:
    """The rule file a ``NAME.test.yaml`` names by its own name (``NAME.yaml``, ``.yml`` or ``.sql``)."""
    stem = test_file.name.rsplit(".test.", 1)[0]
    for ext in (".yaml", ".yml", ".sql"):
        cand = test_file.with_name(stem + ext)
        if cand.is_file():
            return cand
    return None


# ------------------------------------------------------------------ reading tests


class _Reader:
    """Reads the ``tests:`` list of one file, collecting every error with its place."""

    def __init__(self, text: str, file: str, roots: tuple[str, ...]):
        self.text, self.file, self.roots = text, file, roots
        self.errors: list[SourceError] = []

    def err(self, message: str, node: Any) -> None:
        from patterns.rules import node_error

        self.errors.append(node_error(message, self.text, node, self.file))

    def value(self, node: Any) -> Any:
        from patterns.rules import construct

        return construct(node)

    def tests(self, node: Any) -> list[RuleTest]:
        if not isinstance(node, yaml.SequenceNode):
            self.err("'tests:' must hold a list of tests (mappings with name, events and expect)", node)
            return []
        out: list[RuleTest] = []
        seen: dict[str, int] = {}
        for item in node.value:
            t = self.test(item, seen)
            if t is not None:
                out.append(t)
        return out

    def test(self, item: Any, seen: dict[str, int]) -> RuleTest | None:
        if not isinstance(item, yaml.MappingNode):
            self.err("each test must be a mapping with name, events (or events_file, inputs) and expect "
                     "(or contains)", item)
            return None
        fields = {k.value: (k, v) for k, v in item.value}
        n_errors = len(self.errors)
        for key, (knode, _) in fields.items():
            if key not in TEST_KEYS:
                self.err(f"unknown key {key!r} in a test; known keys: {', '.join(TEST_KEYS)}", knode)
        name_node = fields.get("name", (None, None))[1]
        if not isinstance(name_node, yaml.ScalarNode) or not name_node.value:
            self.err("test has no 'name'", item)
            return None
        name = str(name_node.value)
        if name in seen:
            self.err(f"duplicate test name {name!r} (first on line {seen[name]})", name_node)
        seen.setdefault(name, name_node.start_mark.line + 1)
        t = RuleTest(name, self.file, item.start_mark.line + 1, None, [])
        if "rules" in fields:
            rules = self.value(fields["rules"][1])
            if isinstance(rules, str):
                rules = [rules]
            if not isinstance(rules, list) or not rules or not all(isinstance(r, str) for r in rules):
                self.err(f"test {name!r}: 'rules' must be a list of rule names, found {rules!r}", fields["rules"][1])
            else:
                t.rules = rules
        given = [k for k in ("events", "events_file", "inputs") if k in fields]
        if len(given) != 1:
            where = fields[given[1]][0] if len(given) > 1 else item
            self.err(f"test {name!r} needs one input: 'events' (a list of events), 'events_file' (a file) or "
                     f"'inputs' (named streams); found {', '.join(given) if given else 'none'}", where)
        elif given[0] == "inputs":
            inode = fields["inputs"][1]
            if not isinstance(inode, yaml.MappingNode) or not inode.value:
                self.err(f"test {name!r}: 'inputs' must map stream names to a list of events or a file", inode)
            else:
                for k, v in inode.value:
                    got = self.input(name, v, str(k.value))
                    if got is not None:
                        t.inputs.append(got)
        else:
            got = self.input(name, fields[given[0]][1], None, given[0] == "events_file")
            if got is not None:
                t.inputs.append(got)
        for key in (*ROW_EXPECTATIONS, *OTHER_EXPECTATIONS):
            if key in fields:
                want = self.expectation(name, key, fields[key][1])
                if want is not None:
                    t.expectations[key] = want
        if "expect" in fields and "contains" in fields:
            self.err(f"test {name!r}: give 'expect' (the rows, exactly) or 'contains' (a subset), not both",
                     fields["contains"][0])
        if not any(k in fields for k in (*ROW_EXPECTATIONS, *OTHER_EXPECTATIONS)):
            self.err(f"test {name!r} expects nothing: add 'expect' (the rows, exactly), 'contains' (a subset), "
                     "'late', 'errors' or 'timeouts'", item)
        return t if len(self.errors) == n_errors else None

    def input(self, test: str, node: Any, stream: str | None,
              is_file: bool | None = None) -> tuple[str | None, list[dict] | Path, list[int]] | None:
        if is_file is None:
            is_file = isinstance(node, yaml.ScalarNode)
        if is_file:
            return self.events_file(test, node, stream)
        if not isinstance(node, yaml.SequenceNode):
            self.err(f"test {test!r}: events must be a list of mappings (one per event), or a file name", node)
            return None
        events: list[dict] = []
        lines: list[int] = []
        for ev in node.value:
            value = self.value(ev)
            if not isinstance(value, dict):
                self.err(f"test {test!r}: each event must be a mapping of fields, found {value!r}", ev)
                continue
            events.append(value)
            lines.append(ev.start_mark.line + 1)
        return stream, events, lines

    def events_file(self, test: str, node: Any, stream: str | None) -> tuple[str | None, Path, list[int]] | None:
        from patterns.files import FileRefused, confine

        if not isinstance(node, yaml.ScalarNode) or not node.value:
            self.err(f"test {test!r}: an events file must be a path, relative to the test file", node)
            return None
        folder = Path(self.file).parent
        written = str(node.value)
        try:
            path = confine(folder / written, folder, self.roots, what="events file", written=written)
        except FileRefused as e:
            self.err(f"test {test!r}: {e}".replace("the rule file's folder", "the test file's folder"), node)
            return None
        if not path.is_file():
            self.err(f"test {test!r}: events file not found: {written} (looked for {path})", node)
            return None
        return stream, path, []

    def expectation(self, test: str, key: str, node: Any) -> int | list[dict] | None:
        value = self.value(node)
        if value is None:
            value = []
        counts = key in OTHER_EXPECTATIONS or key == "timeouts"
        if counts and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, list) and all(isinstance(r, dict) for r in value):
            return value
        what = "a count or a list of rows (mappings)" if counts else "a list of rows (mappings)"
        self.err(f"test {test!r}: {key!r} must be {what}, found {value!r}", node)
        return None


def load_tests(rule_file: str | os.PathLike[str], rule_text: str | None,
               roots: Iterable[str] = ()) -> list[RuleTest]:
    """The tests of a rule file: its ``tests:`` list, then those of its ``NAME.test.yaml``.

    Raises RuleErrors with every problem (file, line, column and a caret).
    """
    from patterns.rules import compose_yaml, read_rule_file

    roots = tuple(roots)
    tests: list[RuleTest] = []
    errors: list[SourceError] = []
    if rule_text is not None and not str(rule_file).endswith(".sql") and rule_text.lstrip()[:6].upper() != "SELECT":
        root = compose_yaml(rule_text, str(rule_file))
        node = _key(root, "tests")
        if node is not None:
            r = _Reader(rule_text, str(rule_file), roots)
            tests.extend(r.tests(node))
            errors.extend(r.errors)
    sibling = sibling_test_file(rule_file)
    if sibling is not None:
        text = read_rule_file(sibling)
        root = compose_yaml(text, str(sibling), "test file")
        r = _Reader(text, str(sibling), roots)
        if not isinstance(root, yaml.MappingNode):
            r.err("a test file holds a mapping with a 'tests:' list", root)
        else:
            for k, _ in root.value:
                if k.value != "tests":
                    r.err(f"unknown top-level key {k.value!r} in a test file; expected 'tests'", k)
            node = _key(root, "tests")
            if node is None:
                r.err("a test file holds a mapping with a 'tests:' list", root)
            else:
                tests.extend(r.tests(node))
        errors.extend(r.errors)
    if errors:
        raise RuleErrors(errors)
    return tests


def _key(root: Any, key: str) -> Any:
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if k.value == key:
                return v
    return None


# ------------------------------------------------------------------ comparing rows


def _norm(v: Any) -> Any:
    """A value as JSON would hold it: dates as ISO text, numpy scalars as Python, tuples as lists."""
    if isinstance(v, dict):
        return {str(k): _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_norm(x) for x in v]
    if isinstance(v, (_dt.date, _dt.datetime, _dt.time)):
        return v.isoformat()
    item = getattr(v, "item", None)
    if item is not None and type(v).__module__ == "numpy":
        return _norm(item())
    return v


def _fits(expected: dict, got: dict) -> bool:
    """``got`` equals ``expected`` on every key ``expected`` names."""
    return all(k in got and _norm(got[k]) == _norm(v) for k, v in expected.items())


def match_rows(expected: list[dict], got: list[dict]) -> tuple[list[dict], list[dict]]:
    """(expected rows no output row answers, output rows no expected row took), pairing rows one to one.

    A row fits when it is equal on every key the expected row names; the pairing is a maximum
    bipartite matching, so a general expected row does not take the row a specific one needs.

    Example:
        >>> match_rows([{"a": 1}, {"a": 1, "b": 2}], [{"a": 1, "b": 2}, {"a": 1, "b": 3}])
        ([], [])
        >>> match_rows([{"a": 1}], [{"a": 2}])
        ([{'a': 1}], [{'a': 2}])
    """
    fits = [[j for j, g in enumerate(got) if _fits(e, g)] for e in expected]
    owner: dict[int, int] = {}  # output row -> expected row

    def augment(i: int, seen: set[int]) -> bool:
        for j in fits[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    paired = {i for i in range(len(expected)) if augment(i, set())}
    missing = [e for i, e in enumerate(expected) if i not in paired]
    unexpected = [g for j, g in enumerate(got) if j not in owner]
    return missing, unexpected


def _json(row: dict) -> str:
    return json.dumps(_norm(row), ensure_ascii=False, default=str)


# ------------------------------------------------------------------ running


def _batches(test: RuleTest, rules: list[Any], batch_size: int | None = None) -> list[tuple[Any, str | None]]:
    """The test's input as (batch, stream) pairs, converted, cut and merged as ``cep run`` does
    (``batch_size`` None: ``cep run``'s default, :data:`cep.events.DEFAULT_BATCH_SIZE`)."""
    from cep.cli.inputs import merge_sources, merge_time_field, merge_unit
    from cep.events import DEFAULT_BATCH_SIZE, batch_from_records, read_events

    if batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE

    sources: list[tuple[str | None, list[Any]]] = []
    for stream, events, lines in test.inputs:
        if isinstance(events, Path):
            sources.append((stream, list(read_events(events, batch_size))))
        else:
            sources.append((stream, [batch_from_records(events, lines, test.file)]))
    if len(sources) == 1:
        stream, batches = sources[0]
        return [(b, stream) for b in batches]
    tf = merge_time_field(rules)
    return list(merge_sources(sources, tf, batch_size, merge_unit(rules, tf)))


def why_missing(row: dict, rules: list[Any], test: RuleTest) -> str | None:
    """``cep explain``'s verdict on an expected complex event that did not come: for a pattern rule,
    the nearest miss of the key the row names (its PARTITION BY columns); None for other kinds."""
    import numpy as np

    from cep.cli.explain import concat_batches, rule_events
    from cep.explain.model import ExplainError
    from cep.explain.pattern import explain_pattern

    rule = next((r for r in rules if r.name == row.get("rule")), None)
    if rule is None or rule.kind != "pattern":
        return None
    from cep.explain.rows import joined_table

    if joined_table(rule) is not None:
        return f"(cep explain does not yet explain rules with a temporal join: {rule.name!r} joins {joined_table(rule)!r})"
    cols = list(rule.compiled.statement.partition_by)
    absent = [c for c in cols if c not in row]
    if absent:
        return (f"name the rule's PARTITION BY column{'s' if len(absent) > 1 else ''} "
                f"({', '.join(absent)}) in the expected row to be told why it was not emitted")
    batches = []
    for batch, stream in _batches(test, rules):
        if stream is not None and "stream" not in batch.columns:
            batch.columns["stream"] = np.full(batch.n, stream, dtype=object)
        batches.append(batch)
    events = rule_events(rule, concat_batches(batches), {s for s, _, _ in test.inputs if s})
    try:
        ex = explain_pattern(rule, events, {c: row[c] for c in cols}, None, None)
    except ExplainError as e:
        return str(e)
    matches = [v for v in ex.outcome if v.kind == "match" and not v.data.get("unmatched")]
    if matches:
        n = len(matches)
        return (f"the key matched {n} time{'s' if n != 1 else ''}, but with other values than the expected row "
                "(cep explain shows each match)")
    miss = next((v for v in ex.outcome if v.kind == "nearest_miss"), None)
    return miss.text if miss is not None else None


def run_test(test: RuleTest, rule_set: Any) -> RuleTestRun:
    """Run one test through the embedded engine (as ``cep run`` does) and compare what came out.

    Raises ValueError when the test cannot run as written (a rule name the file does not have,
    rows that do not say their rule when several rules run).
    """
    from cep.engine import Engine
    from patterns.rules import RuleSet

    names = rule_set.names()
    if test.rules is not None:
        unknown = [r for r in test.rules if r not in names]
        if unknown:
            raise ValueError(f"{test.file}:{test.line}: test {test.name!r} names rules the file does not have: "
                             f"{', '.join(unknown)}; its rules: {', '.join(names)}")
    chosen = [r for r in rule_set if test.rules is None or r.name in test.rules]
    expectations = dict(test.expectations)
    for key in ROW_EXPECTATIONS:
        rows = expectations.get(key)
        if not isinstance(rows, list):
            continue
        filled = []
        for row in rows:
            if "rule" not in row:
                if len(chosen) != 1:
                    raise ValueError(
                        f"{test.file}:{test.line}: test {test.name!r}: the {key!r} row {_json(row)} names no "
                        f"'rule', and the test runs {len(chosen)} rules ({', '.join(r.name for r in chosen)}); "
                        "add rule: NAME to the row, or rules: [NAME] to the test")
                row = {"rule": chosen[0].name, **row}
            filled.append(row)
        expectations[key] = filled
    # the file's tables and views come along: a joined rule needs its table
    engine = Engine(RuleSet(tuple(chosen), getattr(rule_set, "path", None), tables=getattr(rule_set, "tables", {}) or {},
                            views=getattr(rule_set, "views", {}) or {}),
                    streams=[s for s, _, _ in test.inputs if s])
    # a view's changelog rows are expected only by a test that names them (rows with "view")
    want_views = any("view" in row for rows in expectations.values() if isinstance(rows, list) for row in rows)
    if any("_id" in row for rows in expectations.values() if isinstance(rows, list) for row in rows):
        engine.set_row_ids(True)
    got: dict[str, list[dict]] = {"expect": [], "late": [], "errors": [], "timeouts": []}

    def take(res: Any) -> None:
        got["expect"].extend(res.matches if want_views else [r for r in res.matches if "view" not in r])
        got["late"].extend(res.late)
        got["errors"].extend(res.errors)
        got["timeouts"].extend(res.timeouts)

    for batch, stream in _batches(test, chosen):
        take(engine.process(batch, stream))
    take(engine.finish())
    got["contains"] = got["expect"]
    run = RuleTestRun(test)
    for key, want in expectations.items():
        rows = got[key]
        what = {"expect": "complex events", "contains": "complex events", "late": "late events",
                "errors": "bad events", "timeouts": "timeout rows"}[key]
        if isinstance(want, int):
            if len(rows) != want:
                run.problems.append(f"{key}: expected {want} {what}, got {len(rows)}"
                                    + "".join(f"\n    got {_json(r)}" for r in rows[:10]))
            continue
        missing, unexpected = match_rows(want, rows)
        if key == "contains":
            unexpected = []
        if missing or unexpected:
            head = (f"{key}: {len(missing)} of {len(want)} expected {what} missing"
                    + (f", {len(unexpected)} unexpected" if unexpected else "")
                    + (f" (expected {len(want)}, got {len(rows)})" if key != "contains" else f" (got {len(rows)})"))
            lines = [head]
            lines += [f"    missing    {_json(r)}" for r in missing]
            if key in ("expect", "contains") and missing:
                why = why_missing(missing[0], chosen, test)
                if why:
                    lines.append(f"    why        {why}")
            lines += [f"    unexpected {_json(r)}" for r in unexpected]
            if key == "contains" and missing:
                lines += [f"    got        {_json(r)}" for r in rows[:10]]
            run.problems.append("\n".join(lines))
    return run


def cmd_test(args: Any) -> int:
    """Run the tests of each rule file named; PASS/FAIL per test, a diff per failure, a summary."""
    from cep.gc_pause import StartupCollector

    # (the collector off until the first test has run, in a process of the command's own)
    start = StartupCollector(getattr(args, "own_process", False))
    try:
        return _cmd_test(args, start)
    finally:
        start.done()


def _cmd_test(args: Any, start: Any) -> int:
    from patterns.files import command_line_roots
    from patterns.rules import parse_rules, read_rule_file

    roots = command_line_roots(getattr(args, "queries_root", None))
    passed = failed = 0
    status = EXIT_OK
    for given in args.rules:
        path = Path(given)
        if ".test." in path.name:  # a test file named instead of its rule file
            rule_file = rule_file_for(path)
            if rule_file is None:
                print(f"cep test: {given}: no rule file beside it (NAME.yaml, .yml or .sql for NAME.test.yaml)",
                      file=sys.stderr)
                status = EXIT_USAGE
                continue
            path = rule_file
        try:
            text = read_rule_file(path)
            rule_set = parse_rules(text, str(path), queries_roots=roots)
            tests = load_tests(path, text, roots)
        except RuleErrors as e:
            print(str(e), file=sys.stderr)
            n = len(e.errors)
            print(f"{path}: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
            status = EXIT_USAGE
            continue
        if not tests:
            print(f"cep test: {path}: no tests (a 'tests:' list in the file, or {path.stem}.test.yaml beside it)",
                  file=sys.stderr)
            status = EXIT_USAGE
            continue
        for test in tests:
            try:
                run = run_test(test, rule_set)
                start.done()
            except ValueError as e:
                print(f"cep test: {e}", file=sys.stderr)
                status = EXIT_USAGE
                continue
            label = f"{test.file}::{test.name}"
            if run.passed:
                passed += 1
                print(f"PASS {label}")
            else:
                failed += 1
                print(f"FAIL {label}")
                for p in run.problems:
                    print("  " + p.replace("\n", "\n  "))
            sys.stdout.flush()
    print(f"{passed} passed, {failed} failed")
    if status == EXIT_USAGE:
        return EXIT_USAGE
    return EXIT_TESTS_FAILED if failed else EXIT_OK
