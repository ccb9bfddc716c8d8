"""Analytics rules: the parser, the checker, the compiled spec, and every error message with its place."""

from __future__ import annotations

import pytest

from patterns import ast as A
from patterns.analytics import AggRef, PrevRef, SketchConfig, Window, compile_analytics
from patterns.errors import RuleErrors
from patterns.rules import parse_rules

W = "TUMBLE(ts, INTERVAL '1' MINUTE)"


def errors_of(text: str, file: str = "r.yaml") -> list:
    with pytest.raises(RuleErrors) as ei:
        parse_rules(text, file)
    return ei.value.errors


def one_line(sql: str, extra: str = "") -> str:
    """A rule file whose SQL is the single line 6 of a block scalar, indented 6 columns."""
    return f"rules:\n  - name: a\n    kind: analytics\n{extra}    sql: |\n      {sql}\n"


# ---------------------------------------------------------------- compiled form


def test_the_issue_example_compiles():
    spec = compile_analytics("""
        SELECT user, COUNT(*) AS logins, APPROX_COUNT_DISTINCT(ip) AS ips, window_end
        FROM logins
        GROUP BY user, HOP(ts, INTERVAL '1' MINUTE, INTERVAL '10' MINUTE)
        HAVING APPROX_COUNT_DISTINCT(ip) > 5""")
    assert spec.stream == "logins" and spec.keys == ("user",) and spec.time_column == "ts"
    assert spec.window == Window("HOP", "ts", 600_000, 60_000)
    assert spec.window.pane_ms == 60_000 and spec.window.step_ms == 60_000
    assert [a.text for a in spec.aggregates] == ["COUNT(*)", "APPROX_COUNT_DISTINCT(ip)"]
    assert [(c.name, c.expr) for c in spec.select] == [
        ("user", A.Column(None, "user")), ("logins", AggRef(0)), ("ips", AggRef(1)), ("window_end", A.Column(None, "window_end"))]
    assert spec.having == A.Compare(">", AggRef(1), A.Literal(5))
    assert spec.columns == ("ip",)


def test_having_reads_select_names_and_aggregates_are_shared():
    spec = compile_analytics(f"SELECT k, COUNT(*) AS n FROM s GROUP BY k, {W} HAVING n > 2 AND COUNT(*) < 9")
    assert len(spec.aggregates) == 1
    assert spec.having == A.Logical("AND", (A.Compare(">", AggRef(0), A.Literal(2)), A.Compare("<", AggRef(0), A.Literal(9))))


def test_prev_window_reads_a_slot_over_the_previous_window():
    spec = compile_analytics(
        f"SELECT url, COUNT(DISTINCT host) AS d FROM s GROUP BY url, {W} HAVING d > 10 * PREV_WINDOW(COUNT(DISTINCT host))")
    assert spec.prev == (0,) and spec.aggregates[0].func == "COUNT_DISTINCT"
    assert spec.having.right == A.Binary("*", A.Literal(10), PrevRef(0))


@pytest.mark.parametrize("window,expected", [
    ("TUMBLE(ts, INTERVAL '10' SECOND)", Window("TUMBLE", "ts", 10_000)),
    ("HOP(t, INTERVAL '4' SECOND, INTERVAL '10' SECOND)", Window("HOP", "t", 10_000, 4_000)),
    ("SESSION(ts, INTERVAL '30' MINUTE)", Window("SESSION", "ts", 1_800_000)),
    ("SLIDE(ts, INTERVAL '1' HOUR)", Window("SLIDE", "ts", 3_600_000)),
])
def test_windows(window, expected):
    spec = compile_analytics(f"SELECT COUNT(*) AS n FROM s GROUP BY {window}")
    assert spec.window == expected and spec.keys == ()
    if expected.kind == "HOP":
        assert expected.pane_ms == 2_000


def test_every_aggregate_and_where():
    spec = compile_analytics(f"""SELECT k, COUNT(x) AS a, SUM(x) AS b, AVG(x) AS c, MIN(x) AS d, MAX(x) AS e,
        COUNT(DISTINCT x) AS f, APPROX_COUNT_DISTINCT(x) AS g, APPROX_TOP_K(x, 3) AS h, APPROX_COUNT(x, 'v') AS i,
        FIRST_SEEN(x) AS j, COUNT(*) + 1 AS l FROM s WHERE y > 0 GROUP BY k, {W}""")
    assert [a.func for a in spec.aggregates] == ["COUNT", "SUM", "AVG", "MIN", "MAX", "COUNT_DISTINCT",
                                                "APPROX_COUNT_DISTINCT", "APPROX_TOP_K", "APPROX_COUNT", "FIRST_SEEN", "COUNT"]
    assert spec.aggregates[7].extra == 3 and spec.aggregates[8].extra == A.Literal("v")
    assert spec.where == A.Compare(">", A.Column(None, "y"), A.Literal(0))
    assert spec.columns == ("y", "x")


def test_hll_sketch_is_a_select_item_with_its_own_slot():
    spec = compile_analytics(f"""SELECT k, HLL_SKETCH(u) AS sketch, APPROX_COUNT_DISTINCT(u) AS d FROM s
        GROUP BY k, {W} HAVING APPROX_COUNT_DISTINCT(u) > 3""")
    assert [(a.func, a.text) for a in spec.aggregates] == [("HLL_SKETCH", "HLL_SKETCH(u)"),
                                                           ("APPROX_COUNT_DISTINCT", "APPROX_COUNT_DISTINCT(u)")]
    assert [(c.name, c.expr) for c in spec.select][1:] == [("sketch", AggRef(0)), ("d", AggRef(1))]
    assert spec.having == A.Compare(">", AggRef(1), A.Literal(3))


def test_slide_windows_may_read_the_current_event():
    spec = compile_analytics("SELECT k, url, APPROX_COUNT(url, url) AS same FROM s GROUP BY k, SLIDE(ts, INTERVAL '1' MINUTE)")
    assert [c.name for c in spec.select] == ["k", "url", "same"]


def test_rule_file_with_sketch_settings():
    rs = parse_rules(one_line(f"SELECT COUNT(*) AS n FROM s GROUP BY {W}",
                              "    lateness: 5 seconds\n    sketches: {hll_precision: 14, bloom_error_rate: 0.01}\n"))
    (r,) = rs.rules
    assert (r.kind, r.stream, r.lateness_ms) == ("analytics", "s", 5000)
    assert r.spec.sketches == SketchConfig(hll_precision=14, bloom_error_rate=0.01)
    assert set(SketchConfig.describe()) == {f.name for f in SketchConfig.__dataclass_fields__.values()}


# ---------------------------------------------------------------- errors in the SQL, with their place


@pytest.mark.parametrize("sql,at,message", [
    # grammar
    (f"SELECT * FROM s GROUP BY {W}", "*", "SELECT * is not available in an analytics rule"),
    ("SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts PATTERN (A))", "*", "SELECT * is not available"),
    ("SELECT k FROM s MATCH_RECOGNIZE (ORDER BY ts)", "MATCH_RECOGNIZE", "MATCH_RECOGNIZE belongs in a pattern rule"),
    ("SELECT COUNT(*) AS n FROM s", "", "expected GROUP BY [keys,] <window>, found end of input"),
    (f"SELECT COUNT(*) AS n FROM s GROUP BY {W} ORDER BY n", "ORDER", "ORDER is not supported in an analytics rule"),
    (f"SELECT COUNT(*) AS n FROM s GROUP BY {W} junk", "junk", "unexpected 'junk' after the end of the statement"),
    (f"SELECT COUNT(*) AS n FROM s GROUP BY ROLLUP(k), {W}", "ROLLUP", "ROLLUP is not supported"),
    (f"SELECT COUNT(*) AS n FROM s GROUP BY k + 1, {W}", "k + 1", "GROUP BY takes column names and one window function"),
    (f"SELECT COUNT(*) AS n FROM s GROUP BY t.k, {W}", "t.k", "qualified column t.k: an analytics rule reads one stream"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(1, INTERVAL '1' MINUTE)", "1,", "TUMBLE's first argument must be the event-time column, found '1'"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts)", "~)", "expected ',' then the window's size in TUMBLE(time, size)"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY HOP(ts, INTERVAL '1' MINUTE)", "~)", "expected ',' then the window's size in HOP(time, slide, size)"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE, INTERVAL '2' MINUTE)", ", INTERVAL '2'", "TUMBLE(time, size) takes 2 arguments; found more"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, 60000)", "60000", "expected the size of TUMBLE as an interval such as INTERVAL '10' MINUTE, found '60000'"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY SESSION(ts, INTERVAL '0' MINUTE)", "'0'", "bad interval '0' MINUTE: it must be positive (at least 1 millisecond)"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY SLIDE(ts, INTERVAL '-5' SECOND)", "'-5'", "bad interval '-5' SECOND: it must be positive"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '0.5' MILLISECOND)", "'0.5'", "must be positive (at least 1 millisecond)"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '1.0005' SECOND)", "'1.0005'", "it must be a whole number of milliseconds"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL 'ten' MINUTE)", "'ten'", "bad interval amount 'ten': expected a number such as '10'"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL '1' WEEK)", "WEEK", "expected an interval unit (MILLISECOND, SECOND, MINUTE, HOUR, DAY), found 'WEEK'"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY TUMBLE(ts, INTERVAL MINUTE)", "MINUTE", "expected the interval's amount as a quoted number, found 'MINUTE'"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY HOP(ts, INTERVAL '10' MINUTE, INTERVAL '1' MINUTE)", "HOP", "HOP slide 10 MINUTES is longer than its size 1 MINUTE"),
    (f"SELECT a.x AS y FROM s GROUP BY {W}", "a.x", "qualified column a.x: an analytics rule reads one stream; write x"),
    (f"SELECT TUMBLE(ts, INTERVAL '1' MINUTE) AS w FROM s GROUP BY {W}", "TUMBLE", "TUMBLE(...) is a window: it belongs in GROUP BY"),
    (f"SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) AS w FROM s GROUP BY {W}", "TUMBLE_START", "TUMBLE_START(...) is spelled window_start here"),
    (f"SELECT SUM(*) AS n FROM s GROUP BY {W}", "*", "SUM(*) is not allowed; only COUNT(*)"),
    (f"SELECT SUM(DISTINCT x) AS n FROM s GROUP BY {W}", "SUM", "SUM(DISTINCT ...) is not supported; only COUNT(DISTINCT x)"),
    (f"SELECT MAX(x, y) AS n FROM s GROUP BY {W}", ",", "MAX takes one argument; found a second one"),
    (f"SELECT APPROX_COUNT_DISTINCT(*) AS n FROM s GROUP BY {W}", "*", "APPROX_COUNT_DISTINCT takes one argument: the column whose values are counted"),
    (f"SELECT APPROX_COUNT_DISTINCT(ip, 14) AS n FROM s GROUP BY {W}", ",", "set the sketch size in the rule's 'sketches:'"),
    (f"SELECT FIRST_SEEN() AS n FROM s GROUP BY {W}", ")", "FIRST_SEEN takes one argument"),
    (f"SELECT APPROX_TOP_K(url) AS t FROM s GROUP BY {W}", ")", "expected ',' then k, how many values to report: APPROX_TOP_K(x, k)"),
    (f"SELECT APPROX_TOP_K(url, 0) AS t FROM s GROUP BY {W}", "0", "APPROX_TOP_K's k must be a whole number from 1 to 10000, found '0'"),
    (f"SELECT APPROX_TOP_K(url, k) AS t FROM s GROUP BY {W}", "k)", "APPROX_TOP_K's k must be a whole number from 1 to 10000, found 'k'"),
    (f"SELECT APPROX_COUNT(url) AS t FROM s GROUP BY {W}", ")", "expected ',' then the value to count: APPROX_COUNT(x, value)"),
    (f"SELECT PREV(x) AS p FROM s GROUP BY {W}", "PREV", "PREV(...) belongs to MATCH_RECOGNIZE; in an analytics rule use aggregates"),
    (f"SELECT MEDIAN(x) AS m FROM s GROUP BY {W}", "MEDIAN", "unknown function 'MEDIAN'; aggregates: APPROX_COUNT, APPROX_COUNT_DISTINCT"),
    # checks
    (f"SELECT COUNT(*) AS n FROM s GROUP BY {W}, SESSION(ts, INTERVAL '1' MINUTE)", "SESSION", "GROUP BY has a second window SESSION(...)"),
    (f"SELECT COUNT(*) AS n FROM s GROUP BY k, k, {W}", "k, T", "GROUP BY lists 'k' twice"),
    (f"SELECT COUNT(*) AS n FROM s GROUP BY window_start, {W}", "window_start", "window_start is the window's own column"),
    ("SELECT COUNT(*) AS n FROM s GROUP BY k", "k", "GROUP BY needs a window: TUMBLE(time, size), HOP(time, slide, size)"),
    (f"SELECT COUNT(*) AS n FROM s WHERE COUNT(*) > 1 GROUP BY {W}", "COUNT(*) >", "aggregates are not allowed in WHERE"),
    (f"SELECT COUNT(*) AS n FROM s WHERE window_end > 1 GROUP BY {W}", "window_end", "window_end is not known in WHERE"),
    (f"SELECT k, COUNT(*) + 1 FROM s GROUP BY k, {W}", "COUNT(*) + 1", "SELECT item 2 (COUNT(*) + 1) needs a name: add AS <name>"),
    (f"SELECT COUNT(*) AS n, SUM(x) AS n FROM s GROUP BY {W}", "SUM", "two SELECT items are named 'n'"),
    (f"SELECT COUNT(*) AS rule FROM s GROUP BY {W}", "COUNT", "'rule' is an output field the engine adds to every row"),
    (f"SELECT SUM(COUNT(*)) AS n FROM s GROUP BY {W}", "COUNT(*))", "aggregates cannot be nested: SUM(COUNT(*)) holds COUNT(*)"),
    (f"SELECT MAX(window_end) AS n FROM s GROUP BY {W}", "window_end", "window_end is not a field of the events; it cannot be aggregated"),
    (f"SELECT APPROX_TOP_K(u, 2) AS t FROM s GROUP BY {W} HAVING APPROX_TOP_K(u, 2) > 1", "APPROX_TOP_K(u, 2) >",
     "APPROX_TOP_K(u, 2) returns a list of [value, count] pairs: use it as a SELECT item of its own"),
    (f"SELECT APPROX_COUNT(u, COUNT(*)) AS t FROM s GROUP BY {W}", "COUNT(*))", "APPROX_COUNT's value cannot be an aggregate: COUNT(*)"),
    (f"SELECT APPROX_COUNT(u, v) AS t FROM s GROUP BY k, {W}", "v)", "APPROX_COUNT's value must be a constant or a GROUP BY key (or a field of the current event in a SLIDE window); 'v' is neither"),
    (f"SELECT PREV_WINDOW(PREV_WINDOW(COUNT(*))) AS p FROM s GROUP BY {W}", "PREV_WINDOW(COUNT", "PREV_WINDOW cannot be nested"),
    ("SELECT PREV_WINDOW(COUNT(*)) AS p FROM s GROUP BY SESSION(ts, INTERVAL '1' MINUTE)", "PREV_WINDOW",
     "PREV_WINDOW needs TUMBLE or HOP windows (the key's previous window); a SESSION window has no fixed previous window"),
    (f"SELECT PREV_WINDOW(x + 1) AS p FROM s GROUP BY {W}", "x + 1", "PREV_WINDOW takes one aggregate, e.g. PREV_WINDOW(APPROX_COUNT_DISTINCT(host)); found x + 1"),
    (f"SELECT PREV_WINDOW(APPROX_TOP_K(u, 2)) AS p FROM s GROUP BY {W}", "APPROX_TOP_K", "PREV_WINDOW(APPROX_TOP_K(...)) is not supported"),
    (f"SELECT HLL_SKETCH(u, 14) AS s FROM s GROUP BY {W}", ",",
     "HLL_SKETCH takes one argument; its lgConfigK (Spark's hll_sketch_agg(x, lgK)) is the rule's sketches: {hll_precision: ...}"),
    (f"SELECT HLL_SKETCH(u) AS s FROM s GROUP BY {W} HAVING HLL_SKETCH(u) IS NOT NULL", "~HLL_SKETCH(u) IS",
     "HLL_SKETCH(u) returns a sketch (Apache DataSketches HLL bytes), not a number: use it as a SELECT item of its "
     "own, not inside HAVING; for the count, use APPROX_COUNT_DISTINCT(u)"),
    (f"SELECT LENGTH(HLL_SKETCH(lower(u))) AS s FROM s GROUP BY {W}", "HLL_SKETCH",
     "HLL_SKETCH(lower(u)) returns a sketch (Apache DataSketches HLL bytes), not a number: use it as a SELECT item "
     "of its own, not inside an expression; for the count, use APPROX_COUNT_DISTINCT(lower(u))"),
    (f"SELECT PREV_WINDOW(HLL_SKETCH(u)) AS p FROM s GROUP BY {W}", "HLL_SKETCH",
     "PREV_WINDOW(HLL_SKETCH(...)) is not supported: select HLL_SKETCH(x) and union consecutive windows' sketches"),
    ("SELECT k, HLL_SKETCH(u) AS s FROM s GROUP BY k, SLIDE(ts, INTERVAL '1' MINUTE)", "HLL_SKETCH",
     "HLL_SKETCH needs TUMBLE, HOP or SESSION windows: a SLIDE window is evaluated exactly at every event"),
    (f"SELECT k, COUNT(*) AS n FROM s GROUP BY k, {W} HAVING bytes > 10", "bytes",
     "unknown column 'bytes' in HAVING: it is not a GROUP BY key nor a SELECT name; HAVING can use aggregates, keys and the names k, n, window_start, window_end"),
    (f"SELECT k, url FROM s GROUP BY k, {W}", "url",
     "column 'url' is neither a GROUP BY key nor inside an aggregate: add it to GROUP BY or aggregate it, e.g. MAX(url)"),
])
def test_sql_errors_point_at_the_file_line_and_column(sql, at, message):
    errs = errors_of(one_line(sql))
    assert any(message in e.message for e in errs), [e.message for e in errs]
    err = next(e for e in errs if message in e.message)
    assert err.line == 5
    where = sql.rindex(at[1:]) if at.startswith("~") else sql.index(at) if at else len(sql)
    col = where + 6 + 1
    assert err.column == col, (err.column, col, err.format())
    assert err.format().startswith(f"r.yaml:5:{col}: ")


def test_errors_are_collected_across_clauses():
    errs = errors_of(one_line(f"SELECT k, x, SUM(COUNT(*)) AS s FROM s GROUP BY k, {W} HAVING y > 1"))
    assert len(errs) == 3
    assert [e.message.split(":")[0] for e in errs] == [
        "column 'x' is neither a GROUP BY key nor inside an aggregate", "aggregates cannot be nested",
        "unknown column 'y' in HAVING"]


def test_an_error_in_a_multi_line_statement_has_its_own_line():
    text = "rules:\n  - name: a\n    kind: analytics\n    sql: |\n      SELECT k, COUNT(*) AS n\n      FROM s\n      GROUP BY k, TUMBLE(ts, INTERVAL '0' SECOND)\n"
    (err,) = errors_of(text)
    assert (err.line, err.column) == (7, 39)
    # the caret sits under the statement's own line (without the YAML indentation)
    assert err.format().endswith("GROUP BY k, TUMBLE(ts, INTERVAL '0' SECOND)\n" + " " * 32 + "^")


# ---------------------------------------------------------------- errors in the rule's YAML


@pytest.mark.parametrize("extra,message", [
    ("    sketches: 14\n", "rule 'a': 'sketches' must be a mapping such as {hll_precision: 14}, found 14"),
    ("    sketches: {hll_bits: 3}\n", "rule 'a': unknown sketch setting 'hll_bits'; known settings: bloom_capacity, bloom_error_rate, cms_depth"),
    ("    sketches: {hll_precision: 30}\n", "rule 'a': sketches.hll_precision must be an integer from 4 to 21, found 30"),
    ("    sketches: {cms_width: true}\n", "rule 'a': sketches.cms_width must be an integer from 1 to 16777216, found True"),
    ("    sketches: {bloom_error_rate: 2}\n", "rule 'a': sketches.bloom_error_rate must be a number between 0 and 1, found 2"),
    ("    max_partial_matches: 5\n", "unknown key 'max_partial_matches' for a analytics rule; known keys: name, kind, description, lateness, time_unit, max_future_skew, enabled, sql, sketches"),
])
def test_rule_file_errors(extra, message):
    errs = errors_of(one_line(f"SELECT COUNT(*) AS n FROM s GROUP BY {W}", extra))
    assert any(message in e.message for e in errs), [e.message for e in errs]
    err = next(e for e in errs if message in e.message)
    assert err.line == 4


def test_a_rule_without_sql():
    (err,) = errors_of("rules:\n  - name: a\n    kind: analytics\n")
    assert err.message == "rule 'a' has no 'sql' statement (SELECT ... GROUP BY <window>)"
    assert err.line == 2
