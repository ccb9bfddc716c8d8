"""Analytics rules over real web logs: the bundled NASA sample (rules/weblogs.yaml) and the full day.

Each rule's rows are recomputed exactly in plain Python (sets, Counter) from the same events;
approximate aggregates are checked within their error bounds.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cep.cli import main
from cep.engine import Engine
from patterns.rules import load_rules
from tests.cep.test_analytics_reference import rule

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules" / "weblogs.yaml"
SAMPLE = REPO / "rules" / "data" / "nasa_http_sample.jsonl"
HOUR, MIN = 3_600_000, 60_000


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def weblog_rows(sample) -> dict[str, list[dict]]:
    eng = Engine(load_rules(RULES))
    out = []
    for i in range(0, len(sample), 500):  # batches, as the CLI reads them
        out += eng.process(sample[i : i + 500]).matches
    out += eng.finish().matches
    by: dict[str, list[dict]] = defaultdict(list)
    for r in out:
        assert r["correction"] is False  # the sample is in time order
        by[r["rule"]].append(r)
    return by


def test_every_example_rule_finds_something(weblog_rows):
    assert set(weblog_rows) == {r.name for r in load_rules(RULES)}


def test_host_burst(sample, weblog_rows):
    times: dict[str, list[int]] = defaultdict(list)
    want = []
    for e in sample:
        ts = times[e["host"]]
        ts.append(e["time"])
        n = sum(1 for t in ts if e["time"] - MIN < t <= e["time"])
        if n > 15:
            want.append((e["host"], e["time"], n))
    assert [(r["host"], r["at"], r["requests"]) for r in weblog_rows["host_burst"]] == want


def test_distinct_urls_per_host(sample, weblog_rows):
    urls: dict[tuple, set] = defaultdict(set)
    for e in sample:
        urls[(e["host"], e["time"] // (10 * MIN) * 10 * MIN)].add(e["url"])
    want = {k: len(v) for k, v in urls.items() if len(v) > 20}
    got = {(r["host"], r["window_start"]): r["urls"] for r in weblog_rows["distinct_urls_per_host"]}
    assert got == want  # small sets: the HyperLogLog is in its sparse, near-exact range


def test_first_seen_clients(sample, weblog_rows):
    seen: set[str] = set()
    new, clients = Counter(), defaultdict(set)
    for e in sample:
        hour = e["time"] // HOUR * HOUR
        clients[hour].add(e["host"])
        if e["host"] not in seen:
            seen.add(e["host"])
            new[hour] += 1
    got = {r["window_start"]: (r["new_clients"], r["clients"]) for r in weblog_rows["first_seen_clients"]}
    assert got == {h: (new[h], len(clients[h])) for h in clients}


def test_top_urls_per_hour(sample, weblog_rows):
    for row in weblog_rows["top_urls_per_hour"]:
        exact = Counter(e["url"] for e in sample if row["window_start"] <= e["time"] < row["window_start"] + HOUR)
        assert row["requests"] == sum(exact.values())
        bound = row["requests"] / 65
        assert [u for u, _ in row["top_urls"]][:2] == [u for u, _ in exact.most_common(2)]
        for url, count in row["top_urls"]:
            assert exact[url] - bound <= count <= exact[url]


def test_not_found_storm(sample, weblog_rows):
    starts = {e["time"] // (5 * MIN) * 5 * MIN - k * 5 * MIN for e in sample for k in (0, 1)}
    want = []
    for s in sorted(starts):
        hits = [e for e in sample if e["status"] == 404 and s <= e["time"] < s + 10 * MIN]
        if len(hits) >= 10:
            want.append((s, len(hits), len({e["host"] for e in hits}), Counter(e["url"] for e in hits).most_common(1)[0]))
    got = [(r["window_start"], r["not_found"], r["clients"], tuple(r["urls"][0])) for r in weblog_rows["not_found_storm"]]
    assert got == want


def test_url_visitor_jump(sample, weblog_rows):
    hosts: dict[tuple, set] = defaultdict(set)
    for e in sample:
        hosts[(e["url"], e["time"] // (30 * MIN))].add(e["host"])
    want = []
    for (url, w), hs in hosts.items():
        before = len(hosts.get((url, w - 1), ()))
        if len(hs) >= 10 and before > 0 and len(hs) >= 4 * before:
            want.append((url, w * 30 * MIN, len(hs), before))
    got = [(r["url"], r["window_start"], r["visitors"], r["visitors_before"]) for r in weblog_rows["url_visitor_jump"]]
    assert sorted(got) == sorted(want) and want


def test_long_visits(sample, weblog_rows):
    by: dict[str, list[dict]] = defaultdict(list)
    for e in sample:
        by[e["host"]].append(e)
    want = []
    for host, evs in by.items():
        cur: list[dict] = []
        for e in evs + [None]:
            if e is not None and (not cur or e["time"] - cur[-1]["time"] < 30 * MIN):
                cur.append(e)
                continue
            if len(cur) >= 40:
                want.append((host, cur[0]["time"], len(cur), len({x["url"] for x in cur}), max(x["bytes"] for x in cur)))
            cur = [e] if e is not None else []
    got = [(r["host"], r["window_start"], r["requests"], r["urls"], r["largest"]) for r in weblog_rows["long_visits"]]
    assert sorted(got) == sorted(want) and want


def test_cep_run_prints_the_rows(capsys):
    assert main(["run", str(RULES), "--input", str(SAMPLE)]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 58 and {"rule", "correction"} <= set(rows[0])
    assert "3,000 events, 58 complex events, 0 late, 0 errors" in err
    assert main(["check", str(RULES)]) == 0


# ------------------------------------------------------------------ the full day (../shared/data)


@pytest.fixture
def nasa_day(shared_data) -> pd.DataFrame:
    return _load_day(str(shared_data / "nasa_http_1995-08-01.tsv"))


@functools.lru_cache(maxsize=1)
def _load_day(path: str) -> pd.DataFrame:
    df = pd.read_csv(path, sep="\t", usecols=["host", "time", "url", "response", "bytes"],
                     dtype={"host": str, "url": str}, keep_default_na=False)
    df["time"] = df["time"].astype(np.int64) * 1000
    df["bytes"] = pd.to_numeric(df["bytes"], errors="coerce")  # '-' for no body: NULL
    return df


def _run(sql: str, df: pd.DataFrame, sketches: str = "") -> list[dict]:
    eng = Engine((rule(sql, sketches=sketches),))
    out = []
    for i in range(0, len(df), 8192):
        out += eng.process(df.iloc[i : i + 8192]).matches
    out += eng.finish().matches
    c = eng.counts()["r"]
    assert c.read == len(df) and c.errors == 0 and c.late == 0
    return out


def test_full_day_distinct_urls_per_host_within_the_hll_bound(nasa_day):
    rows = _run("""SELECT host, APPROX_COUNT_DISTINCT(url) AS urls, COUNT(DISTINCT url) AS exact, window_start
                   FROM r GROUP BY host, TUMBLE(time, INTERVAL '1' HOUR)""", nasa_day, "    sketches: {hll_precision: 6}\n")
    exact = nasa_day.assign(hour=nasa_day["time"] // HOUR * HOUR).groupby(["host", "hour"])["url"].nunique()
    assert len(rows) == len(exact)
    sigma = 1.04 / math.sqrt(2**6)
    dense = 0
    for r in rows:
        assert r["exact"] == exact[(r["host"], r["window_start"])]
        dense += r["exact"] > 2**6 / 4
        assert abs(r["urls"] - r["exact"]) <= 3 * sigma * r["exact"] + 1
    assert dense > 0  # some cells went past the sparse limit into dense registers


def test_full_day_top_urls_first_seen_and_404_storms(nasa_day):
    rows = _run("""SELECT APPROX_TOP_K(url, 3) AS top, FIRST_SEEN(host) AS new_hosts, COUNT(*) AS n,
                          COUNT(DISTINCT host) AS hosts, window_start
                   FROM r GROUP BY TUMBLE(time, INTERVAL '1' HOUR)""", nasa_day)
    seen: set[str] = set()
    new = Counter()
    for h, t in zip(nasa_day["host"], nasa_day["time"]):
        if h not in seen:
            seen.add(h)
            new[t // HOUR * HOUR] += 1
    assert len(rows) == (nasa_day["time"] // HOUR).nunique() == 13  # the file holds 13 hours
    for r in rows:
        hour = nasa_day[(nasa_day["time"] >= r["window_start"]) & (nasa_day["time"] < r["window_start"] + HOUR)]
        exact = Counter(hour["url"])
        assert r["n"] == len(hour) and r["hosts"] == hour["host"].nunique() and r["new_hosts"] == new[r["window_start"]]
        assert r["top"][0][0] == exact.most_common(1)[0][0]
        for url, c in r["top"]:
            assert exact[url] - r["n"] / 65 <= c <= exact[url]
    storms = _run("""SELECT COUNT(*) AS misses, window_start FROM r WHERE response = 404
                     GROUP BY TUMBLE(time, INTERVAL '10' MINUTE) HAVING COUNT(*) >= 20""", nasa_day)
    miss = nasa_day[nasa_day["response"] == 404]
    want = Counter(miss["time"] // (10 * MIN) * (10 * MIN))
    assert {r["window_start"]: r["misses"] for r in storms} == {k: v for k, v in want.items() if v >= 20}
    assert storms
