"""The indexed percolator against every-query evaluation on real news (headlines, Reuters)."""

from __future__ import annotations

import csv
import random
import re
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

import orjson
import pytest

from cep.percolator import NoFiltering, Percolator, PercolatorConfig
from patterns.analysis import Analyzer
from patterns.errors import CepSyntaxError

pytestmark = pytest.mark.data

_SUFFIX = re.compile(
    r"[,.]?\s+(inc|incorporated|corp|corporation|co|company|ltd|plc|holdings?|group|the)\.?$",
    re.IGNORECASE,
)


def company_names(data: Path) -> list[str]:
    with open(data / "sp500_companies.csv", newline="", encoding="utf-8") as fh:
        return [row["Security"] for row in csv.DictReader(fh)]


def strip_suffix(name: str) -> str:
    prev = None
    while prev != name:
        prev, name = name, _SUFFIX.sub("", name).strip()
    return name


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_queries(names: list[str], words: list[str], n: int, seed: int,
                  fields: tuple[str, ...] = ()) -> list[str]:
    """Seeded queries: company names (whole and without suffix), words, booleans, wildcards."""
    rng = random.Random(seed)
    an = Analyzer()
    names = [x for x in names if an.terms(x)]
    out = []
    for _ in range(n):
        r = rng.random()
        name = rng.choice(names)
        w1, w2, w3 = rng.choice(words), rng.choice(words), rng.choice(words)
        if r < 0.15:
            out.append(quote(name))
        elif r < 0.30:
            out.append(quote(strip_suffix(name)))
        elif r < 0.40:
            out.append(f"{quote(strip_suffix(name))} OR {w1}")
        elif r < 0.50:
            out.append(f"{w1} AND {w2}")
        elif r < 0.57:
            out.append(f"{w1} AND NOT {w2}")
        elif r < 0.64:
            out.append(f"+{w1} +({w2} OR {w3}) -{quote(strip_suffix(name))}")
        elif r < 0.71:
            out.append(f'"{w1} {w2}"~{rng.randint(1, 4)}')
        elif r < 0.78:
            out.append(w1[: max(3, len(w1) - 2)] + "*")
        elif r < 0.84:
            k = rng.randint(1, max(1, len(w1) - 2))
            out.append(w1[:k] + "?" + w1[k + 1:] + ("*" if rng.random() < 0.5 else ""))
        elif r < 0.90 and fields:
            out.append(f"{rng.choice(fields)}:{w1} OR {rng.choice(fields)}:{quote(w2 + ' ' + w3)}")
        else:
            first = an.terms(name)[0]
            out.append(f"({first} OR {w1}) AND ({w2} OR {w3}*)")
    return out


def frequent_words(texts: list[str], top: int) -> list[str]:
    an = Analyzer()
    counts: Counter[str] = Counter()
    for t in texts:
        counts.update(set(an.terms(t)))
    return [w for w, _ in counts.most_common(top) if len(w) > 2]


def compare(queries: list[str], docs: list[dict[str, Any]], **options: Any) -> tuple[int, int]:
    index = Percolator(PercolatorConfig(**options))
    base = NoFiltering(PercolatorConfig(query=index.config.query))
    for i, q in enumerate(queries):
        try:
            index.register(i, q)
            base.register(i, q)
        except CepSyntaxError:  # pragma: no cover - the generator writes valid queries
            raise AssertionError(f"generated an invalid query {q!r}") from None
    want = base.percolate_batch(docs).results
    one = [index.percolate(d).ids for d in docs[:300]]
    assert one == [r.ids for r in want[:300]]
    got = index.percolate_batch(docs)
    mismatched = [(d.get("id"), a.ids, b.ids) for d, a, b in zip(docs, got.results, want)
                  if a.ids != b.ids]
    assert not mismatched[:3]
    assert got.stats.errors == 0
    return got.stats.matches, got.stats.candidates


def test_headlines_sp500(shared_data: Path) -> None:
    with open(shared_data / "abcnews_headlines_2003.csv", newline="", encoding="utf-8") as fh:
        rows = list(islice(csv.DictReader(fh), 5000))
    docs = [{"id": i, "publish_date": int(r["publish_date"]), "headline_text": r["headline_text"]}
            for i, r in enumerate(rows)]
    words = frequent_words([d["headline_text"] for d in docs], 400)
    queries = build_queries(company_names(shared_data), words, 500, seed=11,
                            fields=("headline_text",))
    queries += [f"headline_text:{w} AND publish_date:[20030220 TO 20030225]" for w in words[:20]]
    matches, candidates = compare(queries, docs)
    assert matches > 5000  # the workload really matches
    assert candidates < len(queries) * len(docs) / 20  # and the presearcher really filters
    matches_aho, _ = compare(queries[:200], docs[:1500], scanner="aho")
    assert matches_aho > 0


def test_reuters_sp500(shared_data: Path) -> None:
    docs = []
    with open(shared_data / "reuters21578.jsonl", "rb") as fh:
        for line in islice(fh, 400):
            row = orjson.loads(line)
            docs.append({k: row.get(k) for k in ("title", "body", "date", "topics")}
                        | {"id": row["newid"]})
    words = frequent_words([(d["title"] or "") + " " + (d["body"] or "") for d in docs], 600)
    names = company_names(shared_data)
    queries = build_queries(names, words, 400, seed=5, fields=("title", "body"))
    queries += [
        'title:"general motors" OR body:"general motors"~2',
        "date:[1987-03-01 TO 1987-03-05] AND (oil OR cocoa)",
        "topics:earn AND profit -loss",
        '"American Express"',
        "ibm OR exxon OR texaco",
        "dlr* AND yen",
    ]
    matches, _ = compare(queries, docs, term_frequencies={w: 0.1 for w in words[:50]})
    assert matches > 1000
