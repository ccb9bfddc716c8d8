"""Documents as the matcher sees them: one document's view (each field analysed lazily, at most
once) and a batch's (each field analysed for every document at once)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import chain, islice
from typing import Any

import numpy as np

from cep.percolator.config import PercolatorConfig
from cep.percolator.tokens import _BYTES, _joined_bytes, _TokenStream
from patterns.analysis import Analyzer, Token
from patterns.lucene import parse_date_ms, parse_number

__all__ = ["Span", "_MISSING", "_Batch", "_Context", "_DocView", "_as_date_ms", "_as_number",
           "_lookup"]


Span = tuple[str, int, int]
"""``(field, start, end)``: character offsets into the original field text; a list element's
field is written ``name[i]``."""


_MISSING = object()


def _lookup(doc: Mapping[str, Any], name: str) -> Any:
    if name in doc:
        return doc[name]
    if "." in name:
        cur: Any = doc
        for part in name.split("."):
            if not isinstance(cur, Mapping) or part not in cur:
                return _MISSING
            cur = cur[part]
        return cur
    return _MISSING


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return None


class _Context:
    """What a document view needs from the configuration (shared, immutable)."""

    __slots__ = ("analyzer", "default_fields", "id_field", "skip", "plain")

    def __init__(self, config: PercolatorConfig) -> None:
        self.analyzer = Analyzer(config.query.analysis)
        self.default_fields = config.query.default_fields
        self.id_field = config.id_field
        # fields that are never default fields: the id and the configured exclusions
        self.skip = frozenset(f for f in (config.id_field, *config.exclude_fields) if f is not None)
        self.plain = config.query.analysis.is_plain


class _DocView:
    """One document, analysed lazily and at most once per field."""

    __slots__ = ("doc", "ctx", "_c", "_t", "_n")

    def __init__(self, doc: Mapping[str, Any], ctx: _Context) -> None:
        self.doc = doc
        self.ctx = ctx
        # one cache for everything derived, keyed by (what, field): few objects per document;
        # terms and value counts, read most, by field alone (no key tuple made per reading)
        self._c: dict[tuple[str, str | None], Any] = {}
        self._t: dict[str | None, list[str]] = {}
        self._n: dict[str | None, int] = {}

    def numbers(self, fld: str | None, kind: str) -> list[float | int]:
        """Values of ``fld`` as numbers (``kind`` number) or epoch ms (``kind`` date)."""
        got = self._c.get((kind, fld))
        if got is None:
            convert = _as_number if kind == "number" else _as_date_ms
            got = [x for x in map(convert, self.raw_values(fld)) if x is not None]
            self._c[(kind, fld)] = got
        return got

    def default_fields(self) -> list[str]:
        if self.ctx.default_fields is not None:
            return list(self.ctx.default_fields)
        skip = self.ctx.skip
        out = []
        for k, v in self.doc.items():
            if k in skip:
                continue
            if isinstance(v, str) or (isinstance(v, list) and any(isinstance(x, str) for x in v)):
                out.append(k)
        return out

    def values(self, fld: str | None) -> list[tuple[str, str]]:
        """``(label, text)`` for every text value of ``fld`` (None: the default fields)."""
        got = self._c.get(("v", fld))
        if got is not None:
            return got
        out: list[tuple[str, str]] = []
        if fld is None:
            implicit = self.ctx.default_fields is None
            for name in self.default_fields():
                if implicit:
                    v = self.doc[name]
                    if isinstance(v, str):
                        out.append((name, v))
                    else:
                        out.extend((f"{name}[{i}]", x) for i, x in enumerate(v)
                                   if isinstance(x, str))
                else:
                    out.extend(self.values(name))
        else:
            v = _lookup(self.doc, fld)
            if isinstance(v, list):
                for i, x in enumerate(v):
                    t = _scalar_text(x)
                    if t is not None:
                        out.append((f"{fld}[{i}]", t))
            elif v is not _MISSING:
                t = _scalar_text(v)
                if t is not None:
                    out.append((fld, t))
        self._c[("v", fld)] = out
        return out

    def raw_values(self, fld: str | None) -> list[Any]:
        """Scalar values of ``fld`` (list elements flattened), for ranges."""
        if fld is None:
            out: list[Any] = []
            for name in self.default_fields():
                out.extend(self.raw_values(name))
            return out
        v = _lookup(self.doc, fld)
        if v is _MISSING or v is None:
            return []
        if isinstance(v, list):
            return [x for x in v if x is not None and not isinstance(x, (list, dict))]
        return [] if isinstance(v, dict) else [v]

    def exists(self, fld: str | None) -> bool:
        if fld is None:
            return any(self.exists(name) for name in self.default_fields())
        v = _lookup(self.doc, fld)
        return v is not _MISSING and v is not None and v != []

    def terms(self, fld: str | None) -> list[str]:
        got = self._t.get(fld)
        if got is None:
            ctx = self.ctx
            if fld is None and ctx.default_fields is None and ctx.plain:
                # the common case, without building (label, text) pairs
                skip = ctx.skip
                terms = ctx.analyzer.terms
                fast: list[str] | None = None
                cache = self._t
                n = 0
                for k, v in self.doc.items():
                    if type(v) is str:
                        if k not in skip:
                            # cached per field too: a field both default and named is
                            # analysed once (and then the same list: see _Segment.scan)
                            mine = cache.get(k)
                            if mine is None:
                                mine = cache[k] = terms(v)
                            fast = mine if fast is None else fast + mine
                            n += 1
                    elif isinstance(v, (str, list)):
                        fast = None
                        break
                else:
                    self._n[fld] = n
                    got = cache[fld] = fast if fast is not None else []
                    return got
            vals = self.values(fld)
            an = self.ctx.analyzer
            if len(vals) == 1:
                got = an.terms(vals[0][1])
            else:
                got = []
                for _, text in vals:
                    got.extend(an.terms(text))
            self._t[fld] = got
        return got

    def single_terms(self, fld: str | None) -> list[str] | None:
        """The terms of ``fld`` when it holds exactly one text value and analysis is plain
        (a term's position is then its index in this list), else None."""
        if not self.ctx.plain:
            return None
        terms = self.terms(fld)
        n = self._n.get(fld)
        if n is None:
            n = self._n[fld] = len(self.values(fld))
        return terms if n == 1 else None

    def termset(self, fld: str | None) -> set[str]:
        got = self._c.get(("s", fld))
        if got is None:
            got = self._c[("s", fld)] = set(self.terms(fld))
        return got

    def joined(self, fld: str | None) -> str:
        """``" t1 t2 ... "``: adjacent terms are adjacent positions; values are separated (and
        removed stop words marked) by ``\x01`` so no phrase key matches across them."""
        got = self._c.get(("j", fld))
        if got is None:
            vals = self.values(fld)
            if self.ctx.plain:
                if len(vals) == 1:
                    body = " ".join(self.terms(fld))
                else:
                    an = self.ctx.analyzer
                    body = " \x01 ".join(" ".join(an.terms(text)) for _, text in vals)
            else:
                parts = []
                for _, text in vals:
                    words: list[str] = []
                    last = -1
                    for term, p in self.ctx.analyzer.positioned_terms(text):
                        if p != last + 1:
                            words.append("\x01")
                        words.append(term)
                        last = p
                    parts.append(" ".join(words))
                body = " \x01 ".join(parts)
            got = self._c[("j", fld)] = f" {body} "
        return got

    def positions(self, fld: str | None) -> list[dict[str, list[int]]]:
        """Per text value: term -> sorted positions."""
        got = self._c.get(("p", fld))
        if got is None:
            got = []
            an = self.ctx.analyzer
            vals = self.values(fld)
            for _, text in vals:
                d: dict[str, list[int]] = {}
                pairs = (enumerate(self.terms(fld)) if len(vals) == 1 and self.ctx.plain
                         else ((p, t) for t, p in an.positioned_terms(text)))
                for p, term in pairs:
                    got_list = d.get(term)
                    if got_list is None:
                        d[term] = [p]
                    else:
                        got_list.append(p)
                got.append(d)
            self._c[("p", fld)] = got
        return got

    def tokens(self, fld: str | None) -> list[tuple[str, list[Token]]]:
        got = self._c.get(("k", fld))
        if got is None:
            an = self.ctx.analyzer
            got = self._c[("k", fld)] = [(label, an.tokens(text)) for label, text in self.values(fld)]
        return got


class _Batch:
    """A batch of documents as the vectorised path reads them: each field's terms analysed for
    every document at once (:meth:`Analyzer.terms_many`), and a :class:`_DocView` made only for
    the few documents something must look at one by one (verification, highlighting, values
    that are not plain strings). Terms come out the same as ``_DocView.terms`` (tested)."""

    __slots__ = ("docs", "ctx", "n", "_views", "_terms", "_src", "_streams", "_buffers")

    def __init__(self, docs: list[Mapping[str, Any]], ctx: _Context) -> None:
        self.docs = docs
        self.ctx = ctx
        self.n = len(docs)
        self._views: list[_DocView | None] = [None] * self.n
        self._terms: dict[str | None, tuple[list[list[str]], np.ndarray, list[Any]]] = {}
        self._src: dict[str | None, tuple[list[str], list[int], list[Any]]] = {}
        self._streams: dict[str | None, tuple[_TokenStream, np.ndarray]] = {}
        self._buffers: dict[str | None, tuple[bytes, np.ndarray]] = {}

    def view(self, i: int) -> _DocView:
        v = self._views[i]
        if v is None:
            v = self._views[i] = _DocView(self.docs[i], self.ctx)
        return v

    def terms(self, fld: str | None) -> tuple[list[list[str]], np.ndarray]:
        """Per document, the terms of ``fld`` (None: the default fields), and whether the field
        holds exactly one value under plain analysis (a term's position is then its index)."""
        got = self._terms.get(fld)
        if got is None:
            got = self._terms[fld] = self._analyse(fld)
        return got[0], got[1]

    def single(self, fld: str | None) -> np.ndarray:
        """Per document, whether ``fld`` holds exactly one value under plain analysis."""
        return self._joined(fld)[1] if self.ctx.plain else self.terms(fld)[1]

    def sole_field(self) -> str | None:
        """The field every document's default fields consist of, when that is one plain string
        field in each (then its terms are the default fields' terms), else None."""
        sole = self._texts(None)[2]
        first = sole[0] if sole else None
        if first is None or any(k != first for k in sole):
            return None
        return first

    def _texts(self, fld: str | None) -> tuple[list[str], list[int], list[Any]]:
        """The plain string texts of ``fld`` (None: the default fields) of every document, how
        many each document holds (-1: read through its view) and, for the default fields, the
        one field holding a document's text (None: not one)."""
        got = self._src.get(fld)
        if got is not None:
            return got
        ctx = self.ctx
        docs = self.docs
        texts: list[str] = []
        counts: list[int] = []  # texts per document; -1: read through its view
        sole: list[Any] = []  # the one field holding a document's default text (None: not one)
        if fld is None and ctx.default_fields is None:
            skip = ctx.skip
            for doc in docs:
                c = 0
                key = None
                for k, v in doc.items():
                    if type(v) is str:
                        if k not in skip:
                            texts.append(v)
                            c += 1
                            key = k
                    elif isinstance(v, (str, list)):  # lists, str subclasses: the view's way
                        if c:
                            del texts[-c:]
                        c = -1
                        break
                counts.append(c)
                sole.append(key if c == 1 else None)
        elif fld is not None:
            for doc in docs:
                v = doc.get(fld, _MISSING) if isinstance(doc, dict) else _MISSING
                if type(v) is str:
                    texts.append(v)
                    counts.append(1)
                else:
                    counts.append(-1)
        else:
            counts = [-1] * self.n
        got = self._src[fld] = (texts, counts, sole)
        return got

    def stream(self, fld: str | None) -> tuple[_TokenStream, np.ndarray]:
        """Every document's terms of ``fld`` as one token stream (:mod:`tokens`), under plain
        analysis only, and whether the field holds exactly one value (as :meth:`terms`)."""
        got = self._streams.get(fld)
        if got is None:
            body, single = self._joined(fld)
            got = self._streams[fld] = (_TokenStream(body.translate(_BYTES), self.n), single)
        return got

    def buffer(self, fld: str | None) -> tuple[np.ndarray, np.ndarray]:
        """Every document's text of ``fld`` as bytes joined by NUL, not yet lower-cased or split
        (:func:`tokens._joined_bytes`; the compiled scan translates as it reads), under plain
        analysis only, and whether the field holds exactly one value (as :meth:`terms`)."""
        body, single = self._joined(fld)
        return np.frombuffer(body, dtype=np.uint8), single

    def _joined(self, fld: str | None) -> tuple[bytes, np.ndarray]:
        got = self._buffers.get(fld)
        if got is None:
            texts, counts, _ = self._texts(fld)
            analyse = self.ctx.analyzer.terms
            if len(texts) == self.n and counts.count(1) == self.n:  # one text each
                got = (_joined_bytes(texts, [True] * self.n, analyse),
                       np.ones(self.n, dtype=bool))
                self._buffers[fld] = got
                return got
            parts: list[str] = []
            raw: list[bool] = []
            single = np.zeros(self.n, dtype=bool)
            at = 0
            for i, c in enumerate(counts):
                if c == 1:
                    parts.append(texts[at])
                    raw.append(True)
                    single[i] = True
                elif c == 0:
                    parts.append("")
                    raw.append(False)
                elif c > 1:
                    # a space between values: the terms of each, one after the other
                    parts.append(" ".join(texts[at:at + c]))
                    raw.append(True)
                else:
                    v = self.view(i)
                    parts.append(" ".join(v.terms(fld)))
                    raw.append(False)
                    single[i] = v.single_terms(fld) is not None
                at += max(c, 0)
            got = self._buffers[fld] = (_joined_bytes(parts, raw, analyse), single)
        return got

    def _analyse(self, fld: str | None) -> tuple[list[list[str]], np.ndarray, list[Any]]:
        ctx = self.ctx
        texts, counts, sole = self._texts(fld)
        analysed = iter(ctx.analyzer.terms_many(texts))
        per_doc: list[list[str]] = []
        single = np.zeros(self.n, dtype=bool)
        plain = ctx.plain
        for i, c in enumerate(counts):
            if c == 1:
                per_doc.append(next(analysed))
                single[i] = plain
            elif c == 0:
                per_doc.append([])
            elif c > 1:
                per_doc.append(list(chain.from_iterable(islice(analysed, c))))
            else:
                v = self.view(i)
                per_doc.append(v.terms(fld))
                single[i] = v.single_terms(fld) is not None
        return per_doc, single, sole


def _as_number(v: Any) -> float | int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and math.isnan(v) else v
    if isinstance(v, str):
        return parse_number(v)
    return None


def _as_date_ms(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and math.isnan(v) else float(v)
    if isinstance(v, str):
        try:
            got = parse_date_ms(v)
        except ValueError:
            return None
        return None if got is None else got[0]
    return None
