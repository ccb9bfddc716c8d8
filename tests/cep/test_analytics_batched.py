"""Panes built and windows read many at once (cep.analytics.panes.BATCHED) against one at a time, and pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cep.analytics import panes
from cep.engine import Engine
from patterns.rules import RuleSet
from tests.cep.test_analytics_reference import rule, window_sql

SETTINGS = settings(max_examples=5, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# every aggregate whose state a pane can be cut from (and, the first four, read many windows at once)
CELLWISE = """SELECT k, COUNT(*) AS n, COUNT(u) AS nu, COUNT(DISTINCT u) AS d, APPROX_COUNT_DISTINCT(u) AS ad,
    FIRST_SEEN(u) AS fresh, window_start, window_end
  FROM s GROUP BY k, {window} HAVING COUNT(*) >= {min_n}"""
SLICED = """SELECT k, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi, APPROX_TOP_K(u, 2) AS top,
    HLL_SKETCH(u) AS sk, window_start
  FROM s GROUP BY k, {window}"""
WINDOWS = {"TUMBLE": window_sql("TUMBLE", 50), "HOP": window_sql("HOP", 60, 20)}


def stream(seed: int, n: int, keys: int, disorder: int) -> list[dict]:
    """Events over a few keys (hundreds of rows each), times nearly sorted, URLs as strings."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, n // 2, n)) + rng.integers(0, disorder + 1, n)
    out = []
    for t in ts.tolist():
        u = rng.integers(0, 40)
        out.append({"k": f"k{rng.integers(0, keys)}", "ts": t, "v": int(rng.integers(-5, 50)),
                    "u": None if u == 0 else f"/u{u}"})
    return out


def run(r, ev: list[dict], sizes: list[int], batched: bool, snapshot_at: int | None = None) -> list[dict]:
    old = panes.BATCHED
    panes.BATCHED = batched
    try:
        eng = Engine(RuleSet((r,)))
        rows: list[dict] = []
        i = 0
        for size in sizes:
            if snapshot_at is not None and i >= snapshot_at:  # restart from a snapshot, once
                fresh = Engine(RuleSet((r,)))
                fresh.restore(eng.snapshot())
                eng, snapshot_at = fresh, None
            rows += eng.process(ev[i:i + size]).matches
            i += size
        rows += eng.finish().matches
        c = eng.counts()["r"]
        assert c.read == c.processed + c.late + c.errors + c.buffered
        return rows
    finally:
        panes.BATCHED = old


def sizes_of(draw_cuts: list[int], n: int) -> list[int]:
    out, left = [], n
    for x in draw_cuts:
        if left <= 0:
            break
        out.append(min(x, left))
        left -= out[-1]
    if left > 0:
        out.append(left)
    return out


@SETTINGS
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(sorted(WINDOWS)), lateness=st.sampled_from([0, 30]),
       sql=st.sampled_from([CELLWISE, SLICED]), cut=st.lists(st.integers(1, 700), min_size=1, max_size=6),
       snap=st.integers(0, 700))
def test_batched_panes_and_windows_give_the_rows_of_one_at_a_time(seed, kind, lateness, sql, cut, snap):
    ev = stream(seed, 700, 3, 25)
    r = rule(sql.format(window=WINDOWS[kind], min_n=3), lateness)
    sizes = sizes_of(cut, len(ev))
    want = run(r, ev, sizes, batched=False)
    assert run(r, ev, sizes, batched=True) == want
    assert run(r, ev, sizes, batched=True, snapshot_at=snap) == want
    assert run(r, ev, [len(ev)], batched=True) == run(r, ev, [len(ev)], batched=False)


def test_batched_path_is_taken_and_matches_pandas():
    """In-order events in big batches: each batch spans many panes and fires many windows at once,
    and the rows are pandas' group-by of (key, window)."""
    ev = stream(7, 6_000, 30, 0)
    r = rule(CELLWISE.format(window=window_sql("TUMBLE", 40), min_n=1), 0)
    calls = {"parts": 0, "many": 0}
    real_many = panes._PaneWindows.emit_many

    def counting_many(self, ks):
        calls["many"] += 1
        return real_many(self, ks)

    panes._PaneWindows.emit_many = counting_many
    try:
        rows = run(r, ev, [2_000] * 3, batched=True)
    finally:
        panes._PaneWindows.emit_many = real_many
    assert calls["many"] >= 3
    df = pd.DataFrame(ev)
    df["window_start"] = df["ts"] // 40 * 40
    g = df.groupby(["k", "window_start"])
    want = pd.DataFrame({"n": g.size(), "nu": g["u"].count(), "d": g["u"].nunique()}).reset_index()
    got = pd.DataFrame(rows)[["k", "window_start", "n", "nu", "d", "ad"]]
    merged = got.merge(want, on=["k", "window_start"], suffixes=("", "_pd"), how="outer", indicator=True)
    assert (merged["_merge"] == "both").all()
    assert (merged["n"] == merged["n_pd"]).all() and (merged["nu"] == merged["nu_pd"]).all()
    assert (merged["d"] == merged["d_pd"]).all()
    assert ((merged["ad"] - merged["d"]).abs() <= 1).all()  # HyperLogLog: within 1 below 2**p / 4 values
    assert len(rows) == len(want)


@pytest.mark.parametrize("kind", sorted(WINDOWS))
def test_late_events_and_corrections_are_the_same_batched(kind):
    # disorder of up to 80 ms with lateness 30: some events are late, others correct windows already emitted
    ev = stream(11, 1_500, 4, 80)
    r = rule(CELLWISE.format(window=WINDOWS[kind], min_n=1), 30)
    want = run(r, ev, [500] * 3, batched=False)
    got = run(r, ev, [500] * 3, batched=True)
    assert got == want
    assert any(x["correction"] for x in got)


def test_string_hashes_kept_per_operator_are_the_sketches_hashes(monkeypatch):
    from cep.analytics import kernels
    from sketches import hash128

    monkeypatch.setattr(kernels, "_CACHE_LIMIT", 1_500)  # past it the cache starts afresh
    cache = kernels._StringHashes()
    rng = np.random.default_rng(5)
    for _ in range(6):
        uniq = [f"/u{x}\u00e9" for x in rng.integers(0, 2_000, 700).tolist()] + ["", "/u1\u00e9"]
        h0, h1 = cache.get(np.array(uniq, dtype=object))
        want = hash128(np.array(uniq, dtype=object))
        assert (h0 == want.h0).all() and (h1 == want.h1).all()
        assert len(cache) <= 1_500
