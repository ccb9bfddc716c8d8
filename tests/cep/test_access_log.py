"""Apache/NGINX access logs as input: the line parser, and the web-log rules over the Apache log.

Expected values are recomputed in plain Python from the parsed events (sets, Counter);
approximate aggregates are checked within their error bounds.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from cep.cli import main
from cep.engine import Engine
from cep.events import parse_access_log_line, read_events
from patterns.rules import load_rules

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "rules" / "data" / "apache_access_sample.log"
FULL = REPO.parent / "shared" / "data" / "apache_access_combined_2015-05.log"
HOUR, MIN = 3_600_000, 60_000


def test_common_and_combined_lines():
    e = parse_access_log_line(b'::1 - bob [01/Aug/1995:00:00:01 -0400] "GET /x?a=1 HTTP/1.0" 200 -\n')
    assert e == {"host": "::1", "ident": None, "user": "bob", "time": 807249601000, "method": "GET",
                 "url": "/x?a=1", "protocol": "HTTP/1.0", "status": 200, "bytes": None}
    e = parse_access_log_line(b'h - - [17/May/2015:10:05:03 +0000] "GET /a\\"b HTTP/1.1" 301 5 "http://r/" "UA \\"q\\""')
    assert (e["url"], e["referrer"], e["agent"]) == ('/a\\"b', "http://r/", 'UA \\"q\\"')
    # a request line that is not three words (garbage sent by scanners) keeps its text in url
    e = parse_access_log_line(b'h - - [17/May/2015:10:05:03 +0000] "-" 400 0 "-" "-"')
    assert (e["method"], e["url"], e["referrer"], e["agent"]) == ("-", None, None, None)


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"hello", "not an access-log line"),
        (b'h - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5 "-" "cut off', "not an access-log line"),
        (b'h - - [17/Mai/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5', "unknown month 'Mai'"),
        (b'h - - [31/Feb/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5', "bad time in the time field"),
    ],
)
def test_bad_lines_say_why(line, reason):
    got = parse_access_log_line(line)
    assert isinstance(got, str) and reason in got


def events(path: Path) -> list[dict]:
    out = []
    for b in read_events(path):
        out += [b.record(i) for i in range(b.n)]
    return out


@pytest.fixture(scope="module")
def sample_rows() -> tuple[list[dict], dict[str, list[dict]]]:
    evs = events(SAMPLE)
    eng = Engine(load_rules(REPO / "rules" / "weblogs.yaml"))
    rows = []
    for b in read_events(SAMPLE, batch_size=300):
        rows += eng.process(b).matches
    rows += eng.finish().matches
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[r["rule"]].append(r)
    counts = eng.counts()
    assert all(c.read == len(evs) == c.processed for c in counts.values())  # lines out of order by < 1 minute
    return evs, by


def test_first_seen_clients_per_hour(sample_rows):
    evs, by = sample_rows
    seen: set[str] = set()
    new: Counter = Counter()
    hosts: dict[int, set] = defaultdict(set)
    requests: Counter = Counter()
    for e in sorted(evs, key=lambda e: e["time"]):
        hour = e["time"] // HOUR * HOUR
        if e["host"] not in seen:
            seen.add(e["host"])
            new[hour] += 1
        hosts[hour].add(e["host"])
        requests[hour] += 1
    rows = {r["window_start"]: r for r in by["first_seen_clients"]}
    assert set(rows) == set(requests)
    for hour, r in rows.items():
        assert r["requests"] == requests[hour] and r["new_clients"] == new[hour]
        assert abs(r["clients"] - len(hosts[hour])) <= 3 * 1.04 / math.sqrt(2**12) * len(hosts[hour]) + 1


def test_distinct_urls_and_bursts_per_host(sample_rows):
    evs, by = sample_rows
    cells: dict[tuple, list] = defaultdict(list)
    for e in evs:
        cells[(e["host"], e["time"] // (10 * MIN) * 10 * MIN)].append(e)
    for r in by["distinct_urls_per_host"]:
        cell = cells[(r["host"], r["window_start"])]
        exact = len({e["url"] for e in cell})
        assert r["requests"] == len(cell) and r["bytes"] == sum(e["bytes"] or 0 for e in cell)
        assert abs(r["urls"] - exact) <= 3 * 1.04 / math.sqrt(2**12) * exact + 1
    # every cell with clearly more than 20 distinct URLs is reported
    clear = {k for k, c in cells.items() if len({e["url"] for e in c}) > 25}
    assert clear and clear <= {(r["host"], r["window_start"]) for r in by["distinct_urls_per_host"]}
    # host_burst: more than 15 requests in the minute ending at each request (SLIDE), exactly
    per_host: dict[str, list[int]] = defaultdict(list)
    for e in evs:
        per_host[e["host"]].append(e["time"])
    want = set()
    for h, ts in per_host.items():
        ts.sort()
        for t in ts:
            if sum(1 for u in ts if t - MIN < u <= t) > 15:
                want.add((h, t))
    assert want and {(r["host"], r["at"]) for r in by["host_burst"]} == want


def test_cep_run_reads_access_logs(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert main(["run", str(REPO / "rules" / "weblogs.yaml"), "--input", str(SAMPLE), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1,500 events" in err and "0 late, 0 errors" in err
    assert len(out.read_text().splitlines()) > 100


@pytest.mark.skipif(not FULL.exists(), reason="needs ../shared/data (the full Apache log)")
def test_the_whole_apache_log_with_its_one_truncated_line(tmp_path, capsys):
    bad = [x for b in read_events(FULL) for x in b.bad]
    assert [(x.line, x.reason.split(":")[0]) for x in bad] == [(8899, "not an access-log line")]
    errors = tmp_path / "errors.jsonl"
    assert main(["run", str(REPO / "rules" / "weblogs.yaml"), "--input", str(FULL), "--output",
                 str(tmp_path / "o.jsonl"), "--errors", str(errors)]) == 0
    err = capsys.readouterr().err
    assert "10,000 events" in err or "9,999 events" in err
    assert '"line":8899' in errors.read_text().replace(" ", "")
