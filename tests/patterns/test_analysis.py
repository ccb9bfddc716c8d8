"""Tests for patterns.analysis: tokens, lower-casing, stop words, stemming, offsets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patterns.analysis import (
    ENGLISH_STOPWORDS,
    AnalysisConfig,
    Analyzer,
    Token,
    english_minimal_stem,
    is_token_text,
)


def test_unicode_word_tokens_lower_cased() -> None:
    a = Analyzer()
    assert a.terms("Müller-Lüdenscheidt AG, São Paulo 2003!") == [
        "müller", "lüdenscheidt", "ag", "são", "paulo", "2003"]
    assert a.terms("3.5% of AT&T's  under_score") == ["3", "5", "of", "at", "t", "s", "under",
                                                       "score"]
    assert a.terms("日本 東京") == ["日本", "東京"]
    assert a.terms("") == [] and a.terms("--- !!") == []


def test_offsets_point_into_original_text() -> None:
    text = "Big APPLE, big-apple"
    toks = Analyzer().tokens(text)
    assert [t.term for t in toks] == ["big", "apple", "big", "apple"]
    assert [text[t.start:t.end] for t in toks] == ["Big", "APPLE", "big", "apple"]
    assert [t.position for t in toks] == [0, 1, 2, 3]


def test_non_ascii_lowercase_keeps_offsets() -> None:
    text = "İstanbul ÖL"
    toks = Analyzer().tokens(text)
    assert [text[t.start:t.end] for t in toks] == ["İstanbul", "ÖL"]
    assert toks[1].term == "öl"


def test_stop_words_keep_positions() -> None:
    a = Analyzer(AnalysisConfig(stopwords=frozenset({"of", "the"})))
    assert a.terms("Bank of the West") == ["bank", "west"]
    assert a.positioned_terms("Bank of the West") == [("bank", 0), ("west", 3)]
    assert a.tokens("the end") == [Token("end", 1, 4, 7)]


def test_stemming_english_minimal() -> None:
    a = Analyzer(AnalysisConfig(stemmer="english_minimal"))
    assert a.terms("Companies Banks glass buses shoes") == ["company", "bank", "glass", "buse",
                                                            "shoes"]
    assert english_minimal_stem("is") == "is"
    assert english_minimal_stem("queries") == "query"
    assert english_minimal_stem("series") == "sery"  # Lucene's rule, crude as it is
    assert english_minimal_stem("toes") == "toes" and english_minimal_stem("plus") == "plus"


def test_english_preset_and_lowercase_off() -> None:
    assert "the" in ENGLISH_STOPWORDS
    assert Analyzer(AnalysisConfig.english()).terms("The Banks") == ["bank"]
    assert Analyzer(AnalysisConfig(lowercase=False)).terms("The Banks") == ["The", "Banks"]


def test_unknown_stemmer_message() -> None:
    with pytest.raises(ValueError, match=r"unknown stemmer 'porter'; known stemmers: .*english"):
        AnalysisConfig(stemmer="porter")


def test_config_accepts_any_iterable_of_stopwords() -> None:
    cfg = AnalysisConfig(stopwords={"a"})  # type: ignore[arg-type]
    assert cfg.stopwords == frozenset({"a"}) and not cfg.is_plain
    assert AnalysisConfig().is_plain


def test_normalize_and_token_text() -> None:
    assert Analyzer().normalize("TeSt*") == "test*"
    assert is_token_text("abc9") and not is_token_text("a b") and not is_token_text("a_b")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_fast_path_equals_token_path(text: str) -> None:
    a = Analyzer()
    assert a.terms(text) == [t.term for t in a.tokens(text)]
    assert a.positioned_terms(text) == [(t.term, t.position) for t in a.tokens(text)]
    for t in a.tokens(text):
        assert text[t.start:t.end].lower() == t.term
        assert is_token_text(text[t.start:t.end])


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_stop_and_stem_paths_agree(text: str) -> None:
    a = Analyzer(AnalysisConfig.english())
    assert a.terms(text) == [t.term for t in a.tokens(text)]
    assert [p for _, p in a.positioned_terms(text)] == [t.position for t in a.tokens(text)]
