"""Rules in one engine (times parsed once, lateness judged once per watermark) give what each gives alone."""

from __future__ import annotations

import datetime as dt
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.engine import Engine
from patterns.rules import parse_rules

_SQL = """SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts
        MEASURES A.ts AS t0, LAST(B.ts) AS t1, COUNT(B.*) AS nb
        AFTER MATCH SKIP PAST LAST ROW
        PATTERN (A B{{2,}}) {within}DEFINE B AS x {op} PREV(x))"""


def _rules(lat: list[int], only: int | None = None) -> str:
    """Five rules (lateness ``lat[i]``), or rule ``only`` alone."""
    out = ["rules:"]
    for i, (late, op, within) in enumerate(zip(lat, ("<", ">", "<=", ">=", "<"),
                                              ("", "WITHIN INTERVAL '9' MILLISECOND ", "", "", ""))):
        if only is not None and i != only:
            continue
        sql = _SQL.format(op=op, within=within).replace("\n", "\n      ")
        out += [f"  - name: r{i}", f"    lateness: {late}", "    sql: |", f"      {sql}"]
    return "\n".join(out) + "\n"


# texts that are not times (and words pandas would read as the clock)
BAD = ["now", "today", "", "not a time", "2013-13-40", None, True]
T0 = dt.datetime(2013, 2, 8, tzinfo=dt.timezone.utc)


def _events(rnd: random.Random, n: int, keys: int, text: bool) -> list[dict]:
    """Times mostly rising with jitter (some late), as ms or ISO text, a few bad ones and bad keys."""
    out = []
    for i in range(n):
        t = 10 * i + rnd.randrange(-40, 10)
        tv: object = (T0 + dt.timedelta(milliseconds=t)).isoformat().replace("+00:00", "Z") if text else \
            1360281600000 + t
        if rnd.random() < 0.03:
            tv = rnd.choice(BAD)
        k: object = rnd.randrange(keys) if rnd.random() > 0.02 else [1]
        out.append({"k": k, "ts": tv, "x": rnd.randrange(6)})
    return out


def _by_rule(out_rows: list[dict], key: str = "rule") -> dict:
    got: dict = {}
    for r in out_rows:
        got.setdefault(r[key], []).append(repr(sorted(r.items())))
    return got


def _run(rules: str, batches: list[list[dict]]) -> tuple[dict, dict, dict, dict]:
    eng = Engine(parse_rules(rules))
    m: list = []
    late: list = []
    err: list = []
    for b in batches:
        o = eng.process(b)
        m += o.matches
        late += o.late
        err += o.errors
    o = eng.finish()
    m += o.matches
    late += o.late
    err += o.errors
    counts = {name: (c.late, c.errors, c.processed) for name, c in eng.counts().items()}
    return _by_rule(m), _by_rule(late), _by_rule(err), counts


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), keys=st.integers(1, 3), n=st.integers(100, 400), ncuts=st.integers(0, 6),
       text=st.booleans(), lat=st.lists(st.sampled_from([0, 0, 5, 20]), min_size=5, max_size=5))
def test_rules_together_give_what_each_gives_alone(seed, keys, n, ncuts, text, lat):
    rnd = random.Random(seed)
    events = _events(rnd, n, keys, text)
    bounds = [0] + sorted({rnd.randrange(1, n) for _ in range(ncuts)}) + [n]
    batches = [events[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    rules = _rules(lat)
    together = _run(rules, batches)
    for r in parse_rules(rules):
        alone = _run(_rules(lat, int(r.name[1:])), batches)
        for part in range(3):
            assert together[part].get(r.name, []) == alone[part].get(r.name, []), (r.name, part)
        assert together[3][r.name] == alone[3][r.name]
