"""``cep test``: the tests written next to rule files pass, fail with a readable diff, or are refused with a place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cep.cli import main
from cep.cli.rule_tests import RuleTest, load_tests, match_rows
from patterns.rules import parse_rules, read_rule_file

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
RULE_FILES = [p for p in sorted(RULES.glob("*.yaml")) if not p.name.endswith(".test.yaml")]  # not their tests

ORDER_EVENTS = """\
    events:
      - {order_id: o5, ts: 1711929600000, type: placed, customer: c5, warehouse: AMS, amount: 55.0}
      - {order_id: o6, ts: 1711933200000, type: placed, customer: c6, warehouse: LYS, amount: 60.0}
      - {order_id: o6, ts: 1711936800000, type: shipped}
"""


@pytest.fixture
def orders(tmp_path: Path) -> Path:
    """A copy of rules/orders.yaml in a folder of its own, for tests written here."""
    path = tmp_path / "orders.yaml"
    shutil.copy(RULES / "orders.yaml", path)
    return path


def write_tests(rule_file: Path, body: str) -> Path:
    path = rule_file.with_name(rule_file.stem + ".test.yaml")
    path.write_text("tests:\n" + body)
    return path


def test_the_bundled_rule_files_are_all_here():
    # a new rule file in rules/ is picked up by the tests below: this list only guards the glob
    assert {p.name for p in RULE_FILES} >= {"fraud.yaml", "media.yaml", "ops.yaml", "orders.yaml", "sessions.yaml",
                                             "trading.yaml", "trends.yaml", "weblogs.yaml"}


def _rows_of(test: RuleTest, key: str, rule: str, only: bool) -> list[dict]:
    """The rows of one rule that a test expects under key (rows without "rule" are the rule's when it runs alone)."""
    rows = test.expectations.get(key)
    if not isinstance(rows, list):
        return []
    return [r for r in rows if r.get("rule", rule if only else None) == rule]


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_every_rule_of_every_rule_file_has_tests(path: Path):
    """Issue 17: every rule in rules/ carries its tests, at least one of them expecting a row of it.

    That a test also holds near misses (events that must not match) cannot be told from its rows: an
    exact ``expect`` leaves no room for extra rows, so near misses sit beside the matches or in a
    test of their own (``expect: []``), and the tests' comments say which.
    """
    text = read_rule_file(path)
    names = parse_rules(text, str(path)).names()
    tests = load_tests(path, text)
    runs = {name: [t for t in tests if t.rules is None or name in t.rules] for name in names}
    assert [n for n in names if not runs[n]] == [], f"{path}: rules with no test"
    # a test that expects a row of the rule: one that only expects nothing passes for a rule that never emits
    matching = {n for n in names for t in runs[n]
                if _rows_of(t, "expect", n, len(t.rules or names) == 1)
                or _rows_of(t, "contains", n, len(t.rules or names) == 1)}
    assert [n for n in names if n not in matching] == [], f"{path}: rules no test expects a row of"


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_every_rule_files_tests_pass(path: Path, capsys):
    code = main(["test", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "FAIL" not in out
    assert out.splitlines()[-1].endswith(" passed, 0 failed")
    places = (f"PASS {path}::", f"PASS {path.with_name(path.stem + '.test.yaml')}::")  # inline, or beside it
    assert all(line.startswith(places) for line in out.splitlines()[:-1])


@pytest.fixture(scope="module")
def rules_without_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rules/ copied without its tests (the data beside it, which search rules read, included)."""
    folder = tmp_path_factory.mktemp("untested") / "rules"
    shutil.copytree(RULES, folder, ignore=shutil.ignore_patterns("*.test.yaml", "*.test.yml"))
    return folder


@pytest.mark.parametrize("name", [p.name for p in RULE_FILES])
def test_a_bundled_rule_file_without_its_tests_is_refused_with_the_fix(rules_without_tests: Path, name: str,
                                                                       capsys):
    path = rules_without_tests / name
    stem = name.rsplit(".", 1)[0]
    assert main(["test", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"cep test: {path}: no tests (a 'tests:' list in the file, or {stem}.test.yaml "
                            "beside it)\n")
    assert captured.out == "0 passed, 0 failed\n"


def test_a_rule_file_without_tests_among_others_fails_the_run(rules_without_tests: Path, capsys):
    # the files that have tests still run; the one without is named and the exit code says usage (2)
    assert main(["test", str(RULES / "trading.yaml"), str(rules_without_tests / "trends.yaml")]) == 2
    captured = capsys.readouterr()
    assert "no tests" in captured.err and str(rules_without_tests / "trends.yaml") in captured.err
    assert captured.out.splitlines()[-1] == "3 passed, 0 failed"


def test_several_rule_files_one_summary(capsys):
    assert main(["test", str(RULES / "trading.yaml"), str(RULES / "orders.yaml")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "5 passed, 0 failed"


def test_a_test_file_named_runs_its_rule_file(capsys):
    assert main(["test", str(RULES / "orders.test.yaml")]) == 0
    assert "PASS" in capsys.readouterr().out


def test_a_wrong_expectation_fails_with_the_missing_row(orders: Path, capsys):
    write_tests(orders, "  - name: wrong amount\n" + ORDER_EVENTS + """\
    rules: [not_shipped_within_2_days]
    expect:
      - {order_id: o5, amount: 56.0}
    timeouts: 0
""")
    code = main(["test", str(orders)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert f"FAIL {orders.with_name('orders.test.yaml')}::wrong amount" in out
    assert 'missing    {"rule": "not_shipped_within_2_days", "order_id": "o5", "amount": 56.0}' in out
    assert 'unexpected {"order_id": "o5", "customer": "c5", "warehouse": "AMS", "amount": 55.0' in out
    assert "expect: 1 of 1 expected complex events missing, 1 unexpected (expected 1, got 1)" in out
    assert out.splitlines()[-1] == "0 passed, 1 failed"


def test_counts_expected_and_got(orders: Path, capsys):
    write_tests(orders, "  - name: counts\n" + ORDER_EVENTS + "    late: 1\n    errors: 0\n")
    assert main(["test", str(orders)]) == 1
    assert "late: expected 1 late events, got 0" in capsys.readouterr().out


def test_contains_a_subset_passes(orders: Path, capsys):
    write_tests(orders, "  - name: subset\n" + ORDER_EVENTS + """\
    contains:
      - {rule: shipped_within_2_days, order_id: o6, hours_to_ship: 1.0}
    timeouts:
      - {rule: shipped_within_2_days, order_id: o5, _waiting_for: [S]}
""")
    assert main(["test", str(orders)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"PASS {orders.with_name('orders.test.yaml')}::subset",
                                                   "1 passed, 0 failed"]


def test_expect_is_exact_where_contains_is_not(orders: Path, capsys):
    write_tests(orders, "  - name: exact\n" + ORDER_EVENTS + """\
    expect:
      - {rule: shipped_within_2_days, order_id: o6, hours_to_ship: 1.0}
""")
    assert main(["test", str(orders)]) == 1
    out = capsys.readouterr().out
    assert 'unexpected {"order_id": "o5", "customer": "c5"' in out  # the absence of o5, not expected
    assert "missing    " not in out


def test_inline_tests_in_the_rule_file(orders: Path, capsys):
    orders.write_text(orders.read_text() + "\ntests:\n  - name: inline\n" + ORDER_EVENTS
                      + "    contains: [{rule: not_shipped_within_2_days, order_id: o5}]\n")
    assert main(["test", str(orders)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"PASS {orders}::inline"
    # the rules still check and run with the tests key there
    assert main(["check", str(orders)]) == 0
    events = orders.with_name("e.jsonl")
    events.write_text('{"order_id": "o1", "ts": 1711929600000, "type": "placed"}\n')
    out = orders.with_name("out.jsonl")
    assert main(["run", str(orders), "--input", str(events), "--output", str(out), "--quiet"]) == 0
    assert '"order_id":"o1"' in out.read_text().replace(" ", "")


def test_an_events_file_beside_the_test_file(orders: Path, capsys):
    (orders.parent / "data").mkdir()
    (orders.parent / "data" / "o.jsonl").write_text(
        '{"order_id": "o1", "ts": 1711929600000, "type": "placed"}\n{"order_id": "o1", "ts": 1711933200000, '
        '"type": "shipped"}\nnot json\n')
    write_tests(orders, """\
  - name: from a file
    events_file: data/o.jsonl
    expect: [{rule: shipped_within_2_days, order_id: o1, hours_to_ship: 1.0}]
    errors: 1
""")
    assert main(["test", str(orders)]) == 0, capsys.readouterr()


def test_rows_must_name_their_rule_when_several_run(orders: Path, capsys):
    write_tests(orders, "  - name: which rule\n" + ORDER_EVENTS + "    expect: [{order_id: o5}]\n")
    assert main(["test", str(orders)]) == 2
    err = capsys.readouterr().err
    assert "test 'which rule': the 'expect' row {\"order_id\": \"o5\"} names no 'rule'" in err
    assert "add rule: NAME to the row, or rules: [NAME] to the test" in err


@pytest.mark.parametrize("body, message, where", [
    ("  - name: typo\n    evnts: []\n    expect: []\n",
     "unknown key 'evnts' in a test; known keys: name, description, rules, events", ":2:5:"),
    ("  - name: missing\n    events_file: nowhere.jsonl\n    expect: []\n",
     "test 'missing': events file not found: nowhere.jsonl", ":3:18:"),
    ("  - name: outside\n    events_file: ../../etc/passwd\n    expect: []\n",
     "test 'outside': events file ../../etc/passwd", ":3:18:"),
    ("  - name: no input\n    expect: []\n",
     "test 'no input' needs one input: 'events' (a list of events), 'events_file' (a file) or 'inputs'", ":2:5:"),
    ("  - name: nothing expected\n" + ORDER_EVENTS,
     "test 'nothing expected' expects nothing: add 'expect'", ":2:5:"),
    ("  - name: both\n" + ORDER_EVENTS + "    expect: []\n    contains: []\n",
     "test 'both': give 'expect' (the rows, exactly) or 'contains' (a subset), not both", ":8:5:"),
    ("  - name: bad count\n" + ORDER_EVENTS + "    late: many\n",
     "test 'bad count': 'late' must be a count or a list of rows (mappings), found 'many'", ":7:11:"),
    ("  - name: [unclosed\n", "not a valid YAML test file", ":3:1:"),
])
def test_test_file_errors_exit_2_with_their_place(orders: Path, capsys, body: str, message: str, where: str):
    path = write_tests(orders, body)
    assert main(["test", str(orders)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert f"{path}{where}" in err


def test_outside_the_folder_is_refused_with_the_reason(orders: Path, capsys):
    write_tests(orders, "  - name: outside\n    events_file: ../../etc/passwd\n    expect: []\n")
    assert main(["test", str(orders)]) == 2
    assert "is outside " + str(orders.parent.resolve()) + ", the test file's folder" in capsys.readouterr().err


def test_unknown_top_level_key_of_a_test_file(orders: Path, capsys):
    path = orders.with_name("orders.test.yaml")
    path.write_text("test:\n  - name: x\n")
    assert main(["test", str(orders)]) == 2
    assert f"{path}:1:1: unknown top-level key 'test' in a test file; expected 'tests'" in capsys.readouterr().err


def test_a_rule_the_file_does_not_have(orders: Path, capsys):
    write_tests(orders, "  - name: r\n    rules: [nope]\n" + ORDER_EVENTS + "    expect: []\n")
    assert main(["test", str(orders)]) == 2
    assert "test 'r' names rules the file does not have: nope" in capsys.readouterr().err


def test_a_rule_file_with_errors(tmp_path: Path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    sql: SELECT\n")
    assert main(["test", str(bad)]) == 2
    assert f"{bad}: 1 error" in capsys.readouterr().err


def test_pairing_is_one_to_one_and_not_greedy():
    # the general row {a: 1} must not take the only row the specific one fits
    assert match_rows([{"a": 1}, {"a": 1, "b": 2}], [{"a": 1, "b": 2}, {"a": 1, "b": 3}]) == ([], [])
    assert match_rows([{"a": 1}, {"a": 1}], [{"a": 1}]) == ([{"a": 1}], [])
    assert match_rows([], [{"a": 1}]) == ([], [{"a": 1}])


TRADING_V = """\
  - name: a V-shape that does not recover
    rules: [v_shape]
    events:
      - {symbol: Y, date: "2017-01-02", close: 10}
      - {symbol: Y, date: "2017-01-03", close: 9}
      - {symbol: Y, date: "2017-01-04", close: 8}
      - {symbol: Y, date: "2017-01-05", close: 9.5}
    expect:
      - {symbol: Y, start_close: 10}
"""


@pytest.fixture
def trading(tmp_path: Path) -> Path:
    path = tmp_path / "trading.yaml"
    shutil.copy(RULES / "trading.yaml", path)
    return path


def test_a_missing_match_says_why_with_cep_explains_nearest_miss(trading: Path, capsys):
    # Y falls 10 -> 9 -> 8 and rises to 9.5: UP needs close >= START's 10, so the partial match of
    # three rows (START, DOWN, DOWN) ends on the fourth row
    write_tests(trading, TRADING_V)
    assert main(["test", str(trading)]) == 1
    out = capsys.readouterr().out
    why = next(line for line in out.splitlines() if line.strip().startswith("why"))
    assert "the longest partial match was" in why and "(3 rows)" in why, why
    assert "at row 3" in why and "9.5" in why, why


def test_a_missing_row_of_a_key_that_matched_otherwise_and_one_without_its_key(trading: Path, capsys):
    write_tests(trading, TRADING_V.replace("close: 9.5}", "close: 11}").replace(
        "start_close: 10}", "start_close: 99}") + TRADING_V.replace("name: a V-shape that does not recover",
                                                                    "name: no key named").replace("{symbol: Y, start_close", "{start_close"))
    assert main(["test", str(trading)]) == 1
    out = capsys.readouterr().out
    assert "why        the key matched 1 time, but with other values than the expected row" in out, out
    assert "why        name the rule's PARTITION BY column (symbol) in the expected row" in out, out


def test_a_rule_joined_with_a_table_runs_with_the_files_tables(tmp_path, capsys):
    """cep test runs a joined rule with the tables of its file; the changelog is one of the inputs."""
    (tmp_path / "rules.yaml").write_text("""
tables:
  - {name: accounts, from: account_changes, primary_key: id, columns: [tier], time_field: ts}
rules:
  - name: per_tier
    kind: analytics
    sql: |
      SELECT tier, COUNT(*) AS n, window_start FROM payments AS p JOIN accounts FOR SYSTEM_TIME AS OF p.ts AS a
        ON p.account = a.id GROUP BY tier, TUMBLE(ts, INTERVAL '10' MILLISECOND)
tests:
  - name: tier_counts
    inputs:
      account_changes:
        - {id: 1, ts: 0, tier: gold}
        - {id: 1, ts: 15, tier: silver}
      payments:
        - {account: 1, ts: 3}
        - {account: 1, ts: 5}
        - {account: 1, ts: 16}
    expect:
      - {tier: gold, n: 2, window_start: 0}
      - {tier: silver, n: 1, window_start: 10}
""")
    assert main(["test", str(tmp_path / "rules.yaml")]) == 0
    assert "PASS" in capsys.readouterr().out


def test_the_console_script_ends_its_start_after_the_first_test(capsys):
    """``cep test`` in a process of its own keeps the collector off until its first test has run,
    then freezes the start's objects and turns it on; its report is main([...])'s."""
    import gc
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    files = [str(repo / "rules/trading.test.yaml"), str(repo / "rules/ops.test.yaml")]
    script = ("import gc, sys; from cep.cli.command import main; import cep.cli.rule_tests as T; seen = []; "
              "run = T.run_test; T.run_test = lambda *a: (seen.append(gc.isenabled()), run(*a))[1]; "
              f"sys.argv = ['cep', 'test', *{files!r}]; rc = main(); "
              "print('@', rc, gc.isenabled(), gc.get_freeze_count() > 0, *seen[:2])")
    got = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, check=True)
    report, _, tail = got.stdout.rpartition("@ ")
    assert tail.split() == ["0", "True", "True", "False", "True"]
    frozen = gc.get_freeze_count()
    assert main(["test", *files]) == 0
    assert report == capsys.readouterr().out and "passed, 0 failed" in report
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_an_events_file_is_cut_into_cep_runs_batches(tmp_path: Path):
    """``cep test`` cuts an events file into ``cep run``'s default batches (16,384 events, not the
    8,192 it once shared with ``cep run``), so a test sees the batches a run of the file sees."""
    from cep.cli.inputs import input_batches
    from cep.cli.rule_tests import _batches
    from cep.events import DEFAULT_BATCH_SIZE

    path = tmp_path / "e.jsonl"
    n = DEFAULT_BATCH_SIZE + 1
    path.write_text("".join(f'{{"order_id": "o{i % 7}", "ts": {i}, "type": "placed"}}\n' for i in range(n)))
    rules = parse_rules((RULES / "orders.yaml").read_text(), str(RULES / "orders.yaml")).rules
    test = RuleTest("big", str(tmp_path / "t.yaml"), 1, None, [(None, path, [])])
    got = [b.n for b, _ in _batches(test, rules)]
    assert got == [DEFAULT_BATCH_SIZE, 1]
    assert got == [b.n for b, _ in input_batches(rules, [(None, str(path))], None, None, DEFAULT_BATCH_SIZE)]
