"""The compiled batch path (tokens._scan_loop, cep/percolator/loops.py) against the numpy path
and against running every query: same matches, candidates, verified counts and errors, on long
generated documents with generated queries, metadata filters, delta segments and parts."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.percolator import NoFiltering, Percolator, PercolatorConfig
from cep.percolator import loops as lp
from cep.percolator import percolator as perc
from cep.percolator import tokens as tok
from cep.percolator.term_keys import _TermKeys
from patterns.analysis import Analyzer
from patterns.errors import CepSyntaxError

# few words, so that long documents repeat them (sloppy pairs of one term twice, phrases)
WORDS = ["a", "ab", "of", "the", "stock", "5", "3", "eightchr", "sixteencharacter",
         "seventeencharacte", "averyveryverylongwordindeed", "müller", "rose", "fell"]
SEPARATORS = [" ", " ", " ", ", ", ". ", "\n", "-", "'s ", "\t"]


def _compiled(on: bool) -> Any:
    """A context that runs the batch path with the compiled loops or with numpy alone."""
    class _Switch:
        def __enter__(self) -> None:
            tok._kernels()
            self.saved = list(tok._COMPILED)
            if not on:
                tok._COMPILED[:] = [None]
            elif tok._kernels() is None:
                pytest.skip("numba is not installed")

        def __exit__(self, *exc: Any) -> None:
            tok._COMPILED[:] = self.saved
    return _Switch()


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    tok._kernels()
    saved = list(tok._COMPILED)
    yield
    tok._COMPILED[:] = saved


def _text(rng: random.Random, size: int) -> str:
    n = rng.choice([0, 1, rng.randrange(8), rng.randrange(size + 1), size])
    words = WORDS + [w.upper() for w in WORDS[:5]]
    # short texts and rare words too: a term's first, last and only occurrences
    filler = ["w%d" % rng.randrange(40) for _ in range(len(words) * rng.choice([0, 1, 4]))]
    return "".join(rng.choice(words + filler) + rng.choice(SEPARATORS) for _ in range(n))


term = st.sampled_from([w for w in WORDS if w.isascii()] + ["müller", "zz"])
leaf = st.one_of(
    term,
    # phrases, exact and sloppy, the same term twice among them ("5 5"~2)
    st.builds(lambda ws, slop: '"' + " ".join(ws) + '"' + (f"~{slop}" if slop else ""),
              st.lists(term, min_size=2, max_size=3), st.sampled_from([0, 0, 1, 2, 4])),
    st.builds(lambda t, slop: f'"{t} {t}"~{slop}', term, st.sampled_from([0, 1, 2, 3])),
    st.builds(lambda t, k: t[: max(1, k)] + "*", term, st.integers(1, 5)),
    st.builds(lambda t, k: t[:k] + "?" + t[k + 1:], term.filter(lambda w: len(w) > 2),
              st.integers(1, 2)),
    st.builds(lambda f, t: f"{f}:{t}", st.sampled_from(["title", "body"]), term),
    st.builds(lambda f, ws: f'{f}:"{" ".join(ws)}"~1', st.sampled_from(["title", "body"]),
              st.lists(term, min_size=2, max_size=2)),
    st.builds(lambda a, b: f"n:[{a} TO {b}]", st.integers(0, 5), st.integers(3, 9)),
)
query = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"({a}) {op} ({b})", inner,
                  st.sampled_from(["AND", "OR", "AND NOT"]), inner),
        st.builds(lambda a, b: f"+({a}) +({b}) -zz", inner, inner),
    ),
    max_leaves=4,
)


@st.composite
def documents(draw: Any) -> list[dict[str, Any]]:
    rng = random.Random(draw(st.integers(0, 2**32)))
    one_field = draw(st.booleans())  # every document one text field: the merged dictionary
    docs = []
    for i in range(draw(st.integers(16, 24))):
        doc: dict[str, Any] = {"id": i, "body": _text(rng, 300), "n": rng.randrange(10)}
        if not one_field:
            if rng.random() < 0.5:
                doc["title"] = _text(rng, 12)
            if rng.random() < 0.2:  # a list field: read through its view, several values
                doc["tags"] = [_text(rng, 6), _text(rng, 6)]
            if rng.random() < 0.1:
                doc["n"] = [rng.randrange(10), rng.randrange(10)]
        docs.append(doc)
    return docs


def _run(index: Percolator, docs: list[dict[str, Any]], on: bool,
         **kw: Any) -> tuple[list[list[Any]], tuple[int, ...], list[int], list[int]]:
    with _compiled(on):
        got = index.percolate_batch(docs, **kw)
    s = got.stats
    return ([r.ids for r in got.results], (s.candidates, s.verified, s.matches, s.errors),
            [r.candidates for r in got.results], [r.verified for r in got.results])


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(queries=st.lists(query, min_size=1, max_size=14), docs=documents(),
       tf=st.booleans(), delta=st.booleans(), owners=st.booleans())
def test_compiled_batches_equal_numpy_and_every_query(
        queries: list[str], docs: list[dict[str, Any]], tf: bool, delta: bool,
        owners: bool) -> None:
    # with frequencies the vocabulary is known beforehand (its terms' keys in the arrays);
    # without, every term is learnt in the batch (its keys come as extra pairs)
    freq = {**{w.lower(): 0.1 for w in WORDS}, "the": 0.9, "müller": 0.01} if tf else None
    base = NoFiltering(PercolatorConfig())
    index = Percolator(PercolatorConfig(term_frequencies=freq))
    ok = []
    for i, q in enumerate(queries):
        try:
            base.register(i, q, {"owner": i % 2})
        except CepSyntaxError:
            continue
        ok.append((i, q))
    half = len(ok) // 2 if delta else len(ok)
    for i, q in ok[:half]:
        index.register(i, q, {"owner": i % 2})
    if delta:  # the rest in a delta segment of its own
        index.snapshot()
        for i, q in ok[half:]:
            index.register(i, q, {"owner": i % 2})
    kw: dict[str, Any] = {"metadata_filter": {"owner": 1}} if owners else {}
    want = [r.ids for r in base.percolate_batch(docs, **kw).results]
    compiled = _run(index, docs, True, **kw)
    numpy_ = _run(index, docs, False, **kw)
    assert compiled[0] == want
    assert compiled == numpy_  # candidates and verified per document too
    assert compiled[1][3] == 0


def test_compiled_batches_cut_into_parts_give_the_same_answers() -> None:
    rng = random.Random(5)
    docs = [{"body": _text(rng, 300), "n": rng.randrange(10)} for _ in range(40)]
    queries = ["stock AND rose", '"5 5"~2', '"of the"', "sto*", "n:[2 TO 4] AND fell",
               "müller AND NOT 3"]
    index = Percolator()
    base = NoFiltering()
    for i, q in enumerate(queries):
        index.register(i, q)
        base.register(i, q)
    whole = _run(index, docs, True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(perc, "_COMPILED_PART_CHARS", 3000)
        mp.setattr(perc, "_COMPILED_PART_DOCS", 7)
        assert len(perc._parts(docs, compiled=True)) > 3
        parts = _run(index, docs, True)
    assert parts == whole
    assert whole[0] == [r.ids for r in base.percolate_batch(docs).results]


@pytest.mark.parametrize("on", [True, False])
@pytest.mark.parametrize("known", [False, True])
def test_a_sloppy_phrase_of_one_term_twice_needs_two_occurrences(on: bool, known: bool) -> None:
    # "5 5"~2: two occurrences of 5 at most 3 positions apart, either order (Lucene's
    # sloppy distance), one occurrence is not enough; the batch decides it from positions.
    # known: the terms are in the dictionary's arrays before the batch (a vocabulary given
    # beforehand), else learnt in it (their keys then come as extra pairs)
    texts = ["5 a b c", "5 a b 5", "5 a b c 5", "x 5 5", "5 a 5 b", "a b c d"]
    docs = [{"t": t} for t in texts] * 3
    index = Percolator(PercolatorConfig(term_frequencies={"5": 0.2, "a": 0.5} if known
                                        else None))
    index.register("q", '"5 5"~2')
    base = NoFiltering()
    base.register("q", '"5 5"~2')
    want = [r.ids for r in base.percolate_batch(docs).results]
    assert want[:6] == [[], ["q"], [], ["q"], ["q"], []]
    got = _run(index, docs, on)
    assert got[0] == want
    assert got[3][:6] == [1, 1, 1, 1, 1, 0]  # decided from positions wherever 5 is there


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), known=st.integers(0, 14), pre=st.booleans())
def test_scan_gives_the_streams_term_ids(seed: int, known: int, pre: bool) -> None:
    # the one-pass scan (translation, tokens, probes) against the token stream and lookup
    with _compiled(True):
        rng = random.Random(seed)
        an = Analyzer()
        parts = [_text(rng, 200) for _ in range(rng.randrange(1, 6))]
        raw = [not (pre and i % 2) for i in range(len(parts))]
        parts = [p if r else " ".join(an.terms(p)) for p, r in zip(parts, raw)]
        ids = {w: i for i, w in enumerate(dict.fromkeys(an.terms(" ".join(WORDS))))}
        table = tok._TokenTable(dict(list(ids.items())[:known]))
        body = tok._joined_bytes(parts, raw, an.terms)
        stream = tok._TokenStream(body.translate(tok._BYTES), len(parts))
        tids, first, unk, u_start, u_end = table.scan(np.frombuffer(body, dtype=np.uint8),
                                                      len(parts))
        assert tids.tolist() == table.lookup(stream).tolist()
        assert np.diff(first).tolist() == stream.lens.tolist()
        buf = np.frombuffer(body, dtype=np.uint8)
        assert unk.tolist() == np.flatnonzero(tids < 0).tolist()
        assert [tok._term_at(buf, a, b) for a, b in zip(u_start.tolist(), u_end.tolist())] == [
            stream.term(i) for i in unk.tolist()]


def test_key_codes_equal_key_hits_past_the_limit_and_before_freezing() -> None:
    # terms resolved at each sighting (past the limit), terms remembered but not yet in the
    # arrays, long terms, phrases and positional keys: the same codes as the numpy path
    with _compiled(True):
        loops = lp._loops()
        assert loops is not None
        an = Analyzer()
        docs = ["Stock of the Müller eightchr", "averyveryverylongwordindeed sixteencharacter "
                "stoc of the stock", "", "of the of the stock", "ab ab ab ba"]
        for limit in (3, 1000):
            def make(limit: int = limit) -> _TermKeys:
                return _TermKeys({"stock": [0], "müller": [1], "ab": [10],
                                  "averyveryverylongwordindeed": [2]},
                                 {"st": [3], "sixteen": [4]}, [("e?ght*", 5), ("*ndeed", 6)],
                                 [("of the", 7), ("of the stock", 8), ("the stock", 9)], limit)
            tk, ref = make(), make()
            positional = np.zeros(11, dtype=bool)
            positional[[0, 10]] = True
            single = np.array([True, True, True, False, True])
            for _ in range(2):  # the second time the table knows what the first learnt
                buf = np.frombuffer(tok._joined_bytes(docs, [True] * 5, an.terms), np.uint8)
                codes, oc, op = tk.key_codes(buf, 5, 11, positional, single, loops)
                want: set[int] = set()
                occ = []
                for d, text in enumerate(docs):
                    terms = an.terms(text)
                    for i, ks in enumerate(ref.keys_of(terms)):
                        want.update(d * 11 + k for k in ks)
                        occ += [(d * 11 + k, i) for k in ks if positional[k]]
                    if single[d]:
                        want.update(d * 11 + k for k in ref.phrase_keys(terms))
                # by document (a document's keys in any order), each distinct
                assert sorted(codes.tolist()) == sorted(want) == sorted(set(codes.tolist()))
                assert (np.diff(codes // 11) >= 0).all()
                # occurrences by document, in the order of the terms
                assert sorted(zip(oc.tolist(), op.tolist())) == sorted(occ)
                assert sorted(zip(oc // 11, op), key=lambda x: x[0]) == list(zip(oc // 11, op))
                assert all(np.diff(op[oc == c]).min(initial=1) > 0 for c in set(oc.tolist()))
