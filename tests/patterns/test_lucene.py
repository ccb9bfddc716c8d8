"""Tests for patterns.lucene: syntax, Lucene's clause semantics, analysis, every error message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patterns.analysis import AnalysisConfig
from patterns.errors import CepSyntaxError
from patterns.lucene import (
    BooleanQuery,
    BoolNode,
    ExistsNode,
    MatchAllNode,
    MatchNoneNode,
    Occur,
    PhraseNode,
    PhraseQuery,
    PrefixNode,
    QueryConfig,
    RangeNode,
    TermNode,
    TermQuery,
    WildcardNode,
    WildcardQuery,
    compile_query,
    iter_nodes,
    parse,
    parse_date_ms,
    parse_number,
)

AND = QueryConfig(default_operator="AND")


def p(text: str, config: QueryConfig | None = None) -> str:
    return str(parse(text, config))


def c(text: str, config: QueryConfig | None = None) -> str:
    return str(compile_query(text, config))


def syntax_error(text: str, config: QueryConfig | None = None) -> CepSyntaxError:
    with pytest.raises(CepSyntaxError) as info:
        compile_query(text, config)
    return info.value


# --- Lucene's clause semantics (QueryParserBase.addClause), shown as Query.toString ----------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a", "a"),
        ("a b", "a b"),
        ("a AND b", "+a +b"),
        ("a && b", "+a +b"),
        ("a OR b", "a b"),
        ("a || b", "a b"),
        ("a AND b OR c", "+a +b c"),  # no precedence: OR leaves c optional
        ("a OR b AND c", "a +b +c"),  # AND makes the preceding clause required
        ("a AND b NOT c", "+a +b -c"),
        ("NOT a AND b", "-a +b"),  # AND does not un-prohibit the preceding clause
        ("a NOT b", "a -b"),
        ("a OR NOT b", "a -b"),
        ("a AND NOT b", "+a -b"),
        ("a AND -b", "+a -b"),
        ("!a b", "-a b"),
        ("+a -b c", "+a -b c"),
        ("+a", "+a"),
        ("(a OR b) AND c", "+(a b) +c"),
        ("a AND (b OR (c AND d))", "+a +(b (+c +d))"),
        ("((a))", "a"),
        ("a and b or not c", "a and b or not c"),  # operators are upper-case only
        ("a TO b", "a TO b"),  # TO is only special inside a range
    ],
)
def test_default_or_semantics(text: str, expected: str) -> None:
    assert p(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a b", "+a +b"),
        ("a OR b", "a b"),
        ("a b OR c", "+a b c"),  # Lucene: OR makes the preceding clause optional again
        ("a OR b c", "a b +c"),
        ("a -b", "+a -b"),
        ("a NOT b OR c", "+a -b c"),
    ],
)
def test_default_and_semantics(text: str, expected: str) -> None:
    assert p(text, AND) == expected


def test_occur_values_and_tree_shape() -> None:
    tree = parse("+a -b c")
    assert isinstance(tree, BooleanQuery)
    assert [cl.occur for cl in tree.clauses] == [Occur.MUST, Occur.MUST_NOT, Occur.SHOULD]
    assert isinstance(parse("a"), TermQuery)  # a single plain clause is not wrapped


# --- syntax features ------------------------------------------------------------------------


def test_fields_phrases_and_groups() -> None:
    assert p('title:"big apple"') == 'title:"big apple"'
    assert p("title:(a OR b) c") == "(title:a title:b) c"
    assert p("title:(a body:b)") == "title:a body:b"  # an inner field wins
    assert p("user.name:bob") == "user.name:bob"
    assert c("title:(a OR \"b c\")") == 'title:a title:"b c"'


def test_phrase_slop_and_boosts_ignored() -> None:
    q = parse('"a b"~3')
    assert isinstance(q, PhraseQuery) and q.slop == 3
    assert p('"a b"~3^2') == '"a b"~3'
    assert p('"a b"^2~3') == '"a b"~3'
    assert p("a^2 (b c)^0.5") == "a (b c)"
    assert parse("a^2.5").boost == 2.5  # type: ignore[union-attr]
    assert c("a^2 b") == compile_query("a b").__str__()


def test_prefix_wildcard_star() -> None:
    assert isinstance(compile_query("appl*"), PrefixNode)
    w = compile_query("te?m*")
    assert isinstance(w, WildcardNode) and w.pattern == "te?m*"
    assert isinstance(compile_query("TE**"), PrefixNode)  # runs of * collapse, lower-cased
    assert str(compile_query("ab*cd")) == "ab*cd"
    assert isinstance(compile_query("*"), MatchAllNode)
    assert isinstance(compile_query("*:*"), MatchAllNode)
    assert compile_query("title:*") == ExistsNode("title")
    assert compile_query("title:[* TO *]") == ExistsNode("title")


def test_wildcards_that_can_never_match() -> None:
    assert isinstance(compile_query("a-b*"), MatchNoneNode)  # '-' never inside a token
    assert isinstance(compile_query("te\\*st*"), MatchNoneNode)  # an escaped '*' is literal
    assert isinstance(compile_query("t?e\\?st"), MatchNoneNode)


def test_leading_wildcard_allowed_when_configured() -> None:
    cfg = QueryConfig(allow_leading_wildcard=True)
    assert compile_query("*ing", cfg) == WildcardNode(None, "*ing")
    assert compile_query("?pple", cfg) == WildcardNode(None, "?pple")


def test_escapes() -> None:
    assert parse("a\\:b") == TermQuery(None, "a:b", 0, 4)
    assert c("a\\:b") == "a b"  # analysed into two tokens, OR-ed like Lucene
    assert p("\\(x\\)") == "(x)"
    assert c('"say \\"hi\\""') == '"say hi"'
    assert p("foo\\ bar") == "foo bar"
    assert isinstance(parse("te\\*st"), TermQuery)
    assert isinstance(parse("te\\*st*"), type(parse("ab*")))


def test_terms_with_inner_operators_characters() -> None:
    assert p("foo-bar") == "foo-bar"  # '-' inside a term is a term character
    assert p("a+b") == "a+b"
    assert p("a&&b") == "a&&b"  # the longer term wins over '&&'
    assert p("foo -bar") == "foo -bar"


def test_multi_token_terms_follow_default_operator() -> None:
    assert c("Wi-Fi") == "wi fi"
    assert c("Wi-Fi", AND) == "+wi +fi"
    assert compile_query("Wi-Fi", QueryConfig(auto_phrase=True)) == PhraseNode(
        None, ("wi", "fi"), (0, 1), 0)


def test_phrase_analysis_and_single_token_phrase() -> None:
    assert compile_query('"The  Apple"') == PhraseNode(None, ("the", "apple"), (0, 1), 0)
    assert compile_query('"APPLE!"') == TermNode(None, "apple")
    english = QueryConfig(analysis=AnalysisConfig.english())
    assert compile_query('"Bank of America"', english) == PhraseNode(
        None, ("bank", "america"), (0, 2), 0)
    assert compile_query('"the banks"', english) == TermNode(None, "bank")


def test_dropped_clauses_like_lucene() -> None:
    assert c("a AND &") == "a"  # '&' analyses to nothing: the clause disappears
    assert c("a OR (& OR %)") == "a"


def test_ranges() -> None:
    assert compile_query("n:[1 TO 5]") == RangeNode("n", "number", 1, 5, True, True)
    assert compile_query("n:{1 TO 5.5]") == RangeNode("n", "number", 1, 5.5, False, True)
    assert compile_query("n:[-1e3 TO *}") == RangeNode("n", "number", -1000.0, None, True, False)
    assert compile_query("n:[* TO 5]") == RangeNode("n", "number", None, 5, True, True)
    day = 86_400_000.0
    jan1 = 1_041_379_200_000.0  # 2003-01-01T00:00:00Z
    assert compile_query("d:[2003-01-01 TO 2003-01-02]") == RangeNode(
        "d", "date", jan1, jan1 + 2 * day, True, False)  # an inclusive date-only end: its day
    assert compile_query("d:{2003-01-01 TO 2003-01-02}") == RangeNode(
        "d", "date", jan1 + day, jan1 + day, True, False)  # empty: nothing strictly between
    assert compile_query("d:[2003-01-01T12:00:00Z TO *]") == RangeNode(
        "d", "date", jan1 + day / 2, None, True, True)
    assert compile_query("d:[2003-01-01T00:00:00+01:00 TO *]").lower == jan1 - 3_600_000.0
    assert compile_query("t:[Apple TO Mango]") == RangeNode("t", "term", "apple", "mango")
    assert compile_query('t:["a b" TO c]') == RangeNode("t", "term", "a b", "c")
    assert compile_query("t:[10 TO abc]").kind == "term"  # mixed kinds: a term range
    assert compile_query("[1 TO 2]").field is None  # the default fields
    assert p("n:[1 TO 5}^2") == "n:[1 TO 5}"


def test_one_sided_ranges_as_elasticsearch_writes_them() -> None:
    # age:>10 is {10 TO *] (Elasticsearch's query string); classic Lucene would search the term 10
    assert compile_query("n:>4") == compile_query("n:{4 TO *]") == RangeNode("n", "number", 4, None, False, True)
    assert compile_query("n:>=4") == compile_query("n:[4 TO *]")
    assert compile_query("n:<4.5") == compile_query("n:[* TO 4.5}")
    assert compile_query("n:<=-1e3") == compile_query("n:[* TO -1e3]")
    assert c("n:(>=4 AND <10)") == c("+n:[4 TO *] +n:[* TO 10}")
    assert compile_query('d:>"2003-01-01"') == compile_query("d:{2003-01-01 TO *]")  # from the 2nd
    assert compile_query("t:>=mango") == RangeNode("t", "term", "mango", None, True, True)
    assert compile_query(r"\<html") == compile_query("html")  # escaped: a term
    assert p("a>b") == "a>b"  # only at a term's start
    for bad, at in (("n:>", 2), ("n:>= x", 2), ("n:(< )", 3)):
        with pytest.raises(CepSyntaxError, match="expected a value right after") as e:
            compile_query(bad)
        assert e.value.position == at


def test_number_and_date_helpers() -> None:
    assert parse_number(" 7 ") == 7 and parse_number("1.") == 1.0 and parse_number(".5") == 0.5
    assert parse_number("nan") is None and parse_number("inf") is None and parse_number("") is None
    assert parse_date_ms("2003-02-19") == (1_045_612_800_000.0, True)
    assert parse_date_ms("20030219") is None
    with pytest.raises(ValueError):
        parse_date_ms("2003-13-45")


def test_analysed_tree_simplification() -> None:
    assert c("+a") == "a"
    assert c("a OR (b OR c)") == "a b c"
    assert c("+a +(+b +c)") == "+a +b +c"
    assert c("a -(b OR c)") == "a -b -c"
    assert c("+a (b OR c)") == "+a b c"
    assert compile_query("+a -b") == BoolNode(must=(TermNode(None, "a"),),
                                              must_not=(TermNode(None, "b"),))


def test_iter_nodes_marks_negation() -> None:
    leaves = [(str(n), neg) for n, neg in iter_nodes(compile_query("a -(b -c)"))]
    assert leaves == [("a", False), ("b", True), ("c", False)]


def test_config_validation() -> None:
    assert QueryConfig(default_operator="and").default_operator == "AND"  # type: ignore[arg-type]
    assert QueryConfig(default_fields=["t"]).default_fields == ("t",)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="default_operator must be 'OR' or 'AND', got 'XOR'"):
        QueryConfig(default_operator="XOR")  # type: ignore[arg-type]


# --- error messages, positions and carets ---------------------------------------------------


@pytest.mark.parametrize(
    "text, offset, message",
    [
        ("", 0, "empty query: write at least one term"),
        ("   ", 0, "empty query: write at least one term"),
        ("a^", 1, "expected a number after '^' (a boost, e.g. 'apple^2')"),
        ("/ab/", 0, "regular-expression queries (/.../) are not supported; use a wildcard "
                    "such as 'te?m*' instead"),
        ("a ]", 2, "unexpected ']': a range is written '[lower TO upper]'"),
        ("a }", 2, "unexpected '}': a range is written '[lower TO upper]'"),
        ('a "b c', 2, "unterminated phrase: this '\"' has no closing '\"'"),
        ("n:[1 TO", 2, "unterminated range: expected '[lower TO upper]' closed by ']' or '}'"),
        ("n:[1 TO 5", 2, "unterminated range: expected ']' or '}' to close this range"),
        ("n:[1 5]", 5, "malformed range: write '[lower TO upper]' or '{lower TO upper}' "
                       "('TO' in capitals, '*' for an open end)"),
        ("n:[1 to 5]", 5, "malformed range"),
        ("n:[]", 3, "malformed range"),
        ("n:[1 TO ]", 8, "malformed range"),
        ("a\\", 1, "the query ends with the escape character '\\'; escape it as '\\\\' to "
                   "search for a backslash"),
        ("a)", 1, "unbalanced ')': there is no '(' before it"),
        ("ti*:x", 0, "a field name cannot contain wildcards: 'ti'"),
        ("t?:x", 0, "a field name cannot contain wildcards: 't?'"),
        ("*:x", 0, "'*:' is only supported as '*:*' (every document); name a field or leave "
                   "the field out to search the default fields"),
        ("a ()", 2, "empty group '()': put at least one term inside"),
        ("(a OR b", 0, "missing ')': this '(' is never closed"),
        ("a AND", 5, "expected a term, phrase, range or '(' after 'AND', but the query ends "
                     "here"),
        ("title:", 6, "expected a term, phrase, range or '(' after 'title:', but the query "
                      "ends here"),
        ("(a AND )", 7, "expected a term, phrase, range or '(' after 'AND', found ')'"),
        ("AND a", 0, "expected a term, phrase, range or '(', found 'AND'"),
        ("a OR OR b", 5, "expected a term, phrase, range or '(', found 'OR'"),
        ("NOT NOT a", 4, "expected a term, phrase, range or '(', found 'NOT'"),
        ("a:b:c", 3, "expected a term, phrase, range or '(', found ':'"),
        ("*ing", 0, "leading wildcard in '*ing' is not allowed (it has to test every term); "
                    "set allow_leading_wildcard=True to allow it"),
        ("?ing", 0, "leading wildcard in '?ing' is not allowed"),
        ('"a b"~', 5, "a phrase's proximity must be a whole number of positions, e.g. "
                      "'\"apple pie\"~2'"),
        ('"a b"~1.5', 5, "a phrase's proximity must be a whole number of positions"),
        ("roam~", 4, "fuzzy queries ('roam~') are not supported; for proximity quote the words: "
                     "'\"a b\"~2'"),
        ("roam~2", 4, "fuzzy queries ('roam~') are not supported"),
        ("(a b)~2", 5, "'~' (proximity) may only follow a phrase: '\"a b\"~2'"),
        ("n:[1 TO 2]~2", 10, "'~' (proximity) may only follow a phrase"),
        ("d:[2003-13-45 TO *]", 2, "'2003-13-45' looks like a date but is not a valid "
                                   "ISO-8601 date or time (YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS, "
                                   "optional zone)"),
        ("-a", 0, "the query only excludes (NOT / -), so it matches nothing; add a term that "
                  "documents must or should contain, e.g. 'a AND NOT b'"),
        ("NOT a", 0, "the query only excludes (NOT / -)"),
        ("-a -b", 0, "the query only excludes (NOT / -)"),
        ("(NOT a)", 0, "the query only excludes (NOT / -)"),
        ("a AND (NOT b)", 6, "this group only excludes (NOT / -), so it matches nothing; add a "
                             "term it must or should contain, or move the NOT out: "
                             "'a AND NOT b'"),
        ("&", 0, "the query has no searchable terms: every term analyses to nothing "
                 "(punctuation only, or stop words)"),
        ('"!!" OR %', 0, "the query has no searchable terms"),
        ("& -b", 0, "the query only excludes (NOT / -)"),
    ],
)
def test_error_messages(text: str, offset: int, message: str) -> None:
    err = syntax_error(text)
    assert err.first.message.startswith(message)
    assert err.position == offset
    assert str(err).startswith(f"<text>:1:{offset + 1}: {message}")


def test_error_caret_and_width() -> None:
    err = syntax_error("a AND (NOT b)")
    assert str(err).splitlines()[1:] == ["a AND (NOT b)", "      ^^^^^^^"]
    err = syntax_error("x OR fuzzy~2")
    assert str(err).splitlines()[1:] == ["x OR fuzzy~2", "          ^^"]
    err = syntax_error("a\nAND")
    assert err.first.line == 2 and err.first.column == 4


def test_several_errors_are_collected() -> None:
    err = syntax_error("(-a) OR (-b) OR d:[2003-02-30 TO *]")
    assert [e.offset for e in err.errors] == [0, 8, 18]
    assert len(str(err).splitlines()) == 9


def test_stop_word_only_query_is_an_error() -> None:
    english = QueryConfig(analysis=AnalysisConfig.english())
    assert syntax_error("the OR a", english).first.message.startswith(
        "the query has no searchable terms")


def test_leading_wildcard_error_also_in_field_and_group() -> None:
    assert syntax_error("t:(x OR *y)").position == 8


# --- robustness -----------------------------------------------------------------------------

_ALPHABET = st.sampled_from(list('ab AND OR NOT+-!()":^~*?[]{}\\/ TO 12 t: & |'))


@settings(max_examples=300, deadline=None)
@given(st.lists(_ALPHABET, max_size=14).map("".join))
def test_parser_never_crashes(text: str) -> None:
    """Any input either compiles or raises CepSyntaxError with an offset inside the text."""
    try:
        compile_query(text)
    except CepSyntaxError as err:
        assert all(0 <= e.offset <= len(text) for e in err.errors)
        assert str(err)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "AND", "OR", "NOT", "+", "-"]), min_size=1,
                max_size=7))
def test_reparse_of_tostring_is_stable(tokens: list[str]) -> None:
    """Lucene's toString form (+/-) parses back to the same clause structure."""
    text = " ".join(tokens)
    try:
        once = parse(text)
    except CepSyntaxError:
        return
    assert str(parse(str(once))) == str(once)


def test_wildcard_query_keeps_escaped_literals() -> None:
    q = parse("a\\?b*c")
    assert isinstance(q, WildcardQuery) and q.pattern == "a\\?b*c"
