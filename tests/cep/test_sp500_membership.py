"""rules/sp500.yaml: S&P 500 bars joined with index membership as of each bar's date, against pandas.

The membership table's changelog is the constituents list read as additions (``Date added``).
Each rule's rows are recomputed without the engine: the bars a stock had while it was in the
index come from pandas ``merge_asof`` (backward, by symbol) over the changelog; V-shapes from the
brute-force matcher of ``tests/reference.py`` over those bars; the sector runs from a pandas
``groupby`` of the same bars by sector and day. The bundled sample always runs; the full lists and
five years of bars run when ``../shared/data`` is there.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from cep import Engine
from cep.cli import main
from patterns.match_recognize import parse_statement
from patterns.rules import load_rules
from tests.reference import reference_matches

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
DATA = RULES / "data"
BARS = DATA / "sp500_daily_2017_members_sample.jsonl"
CHANGES = DATA / "sp500_membership_sample.jsonl"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def load_script():
    spec = importlib.util.spec_from_file_location("make_sp500_membership", DATA / "make_sp500_membership.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def members_only(bars: pd.DataFrame, changes: pd.DataFrame) -> pd.DataFrame:
    """Each bar with its company's row as of the bar's date; bars with none (not yet added) dropped."""
    left = bars.assign(_t=pd.to_datetime(bars["date"]), _i=range(len(bars))).sort_values("_t", kind="stable")
    right = changes.assign(_t=pd.to_datetime(changes["date"])).drop(columns="date").sort_values("_t", kind="stable")
    joined = pd.merge_asof(left, right, on="_t", left_by="symbol", right_by="Symbol", direction="backward")
    joined = joined[joined["Symbol"].notna()].sort_values("_i")
    return joined.drop(columns=["_t", "_i"]).reset_index(drop=True)


# ------------------------------------------------------------------ the references


def v_shapes(bars: pd.DataFrame) -> list[tuple]:
    """``PATTERN (START_ROW DOWN{2,} UP+)``, SKIP PAST LAST ROW, per symbol by the brute-force matcher."""
    rule = {r.name: r for r in load_rules(RULES / "sp500.yaml")}["v_shape_in_index"]
    pattern = parse_statement(rule.source).pattern
    out = []
    for sym, g in bars.sort_values("date", kind="stable").groupby("symbol", sort=True):
        xs, dates = g["close"].tolist(), g["date"].tolist()
        conds = {
            "START_ROW": lambda i, asg: True,
            "DOWN": lambda i, asg: i > 0 and xs[i] < xs[i - 1],
            "UP": lambda i, asg: i > 0 and xs[i] > xs[i - 1] and xs[i] >= xs[asg[0][0]],
        }
        for m in reference_matches(len(xs), pattern, lambda var, i, asg: conds[var](i, asg), "PAST_LAST_ROW"):
            out.append((sym, dates[m[0][0]], dates[m[-1][0]], xs[m[0][0]], xs[m[-1][0]]))
    return sorted(out)


def sector_runs(bars: pd.DataFrame) -> list[tuple]:
    """Runs of three or more consecutive trading days of a sector (the days it has bars) on which
    every one of its bars closed below its open, each followed by a day of the sector (the day that
    shows the run's last day complete): (sector, first day, last day, days, bars, next day)."""
    per_day = (bars.assign(down=bars["close"] < bars["open"])
               .groupby(["GICS Sector", "date"])["down"].agg(["all", "size"]).reset_index())
    out = []
    for sector, g in per_day.sort_values("date").groupby("GICS Sector"):
        days, down, size = g["date"].tolist(), g["all"].tolist(), g["size"].tolist()
        i = 0
        while i < len(days):
            j = i
            while j < len(days) and down[j]:
                j += 1
            if j - i >= 3 and j < len(days):
                out.append((sector, days[i], days[j - 1], j - i, sum(size[i:j]), days[j]))
            i = max(j, i + 1)
    return sorted(out)


def run_engine(bars: list[dict] | pd.DataFrame, changes: list[dict], batch: int = 4096,
               rules: Path = RULES / "sp500.yaml") -> tuple[dict[str, list[dict]], Engine]:
    """The rule file over the bars and the changelog, merged in date order, in batches of ``batch``."""
    frame = bars if isinstance(bars, pd.DataFrame) else pd.DataFrame(bars)
    events = pd.concat([pd.DataFrame(changes).assign(stream="sp500_changes"), frame.assign(stream="bars")],
                       ignore_index=True).sort_values("date", kind="stable")  # a change before the day's bars
    engine = Engine(load_rules(rules), streams=["bars", "sp500_changes"])
    rows = []
    for lo in range(0, len(events), batch):
        chunk = events.iloc[lo:lo + batch]
        for stream, part in chunk.groupby("stream", sort=False):
            rows += engine.process(part.drop(columns="stream").dropna(axis=1, how="all"), stream=stream).matches
    rows += engine.finish().matches
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["rule"], []).append(r)
    return by, engine


def got_v_shapes(rows: list[dict]) -> list[tuple]:
    return sorted((r["symbol"], r["start_date"], r["end_date"], r["start_close"], r["end_close"]) for r in rows)


def got_runs(rows: list[dict]) -> list[tuple]:
    return sorted((r["GICS Sector"], r["first_day"], r["last_day"], r["days"], r["bars"], r["next_day"])
                  for r in rows)


# ------------------------------------------------------------------ the bundled sample


@pytest.fixture(scope="module")
def sample() -> tuple[list[dict], list[dict]]:
    return read_jsonl(BARS), read_jsonl(CHANGES)


@pytest.fixture(scope="module")
def cli_rows(sample, tmp_path_factory) -> dict[str, list[dict]]:
    """The README's command (``cep run`` merges the two inputs on ``date``)."""
    out = tmp_path_factory.mktemp("sp500") / "out.jsonl"
    assert main(["run", str(RULES / "sp500.yaml"), "--input", f"bars={BARS}", "--input", f"sp500_changes={CHANGES}",
                 "--output", str(out), "--quiet"]) == 0
    by: dict[str, list[dict]] = {}
    for r in read_jsonl(out):
        by.setdefault(r["rule"], []).append(r)
    return by


def test_v_shape_in_index_equals_the_brute_force_matcher_over_the_members_bars(sample, cli_rows):
    bars, changes = sample
    frame = pd.DataFrame(bars)
    members = members_only(frame, pd.DataFrame(changes))
    want = v_shapes(members)
    assert got_v_shapes(cli_rows["v_shape_in_index"]) == want and len(want) >= 20
    # each row carries the company's row of the table
    names = {c["Symbol"]: (c["Security"], c["GICS Sector"]) for c in changes}
    assert all((r["company"], r["sector"]) == names[r["symbol"]] for r in cli_rows["v_shape_in_index"])
    # the join matters: over every bar, V-shapes before a stock joined the index come out too
    before = set(v_shapes(frame)) - set(want)
    added = {c["Symbol"]: c["date"] for c in changes}
    assert before and all(start < added[sym] for sym, start, *_ in before)


def test_sector_three_down_days_equals_a_pandas_groupby_of_the_members_bars(sample, cli_rows):
    bars, changes = sample
    members = members_only(pd.DataFrame(bars), pd.DataFrame(changes))
    want = sector_runs(members)
    assert got_runs(cli_rows["sector_three_down_days"]) == want
    assert {w[0] for w in want} == {"Health Care", "Real Estate", "Information Technology"}
    # the join matters: with every bar of the year tagged with its sector (a join that is not
    # temporal), stocks not yet in the index break Health Care's runs of May and June
    everyone = pd.DataFrame(bars).merge(pd.DataFrame(changes).drop(columns="date"), left_on="symbol",
                                        right_on="Symbol")
    health = [w for w in want if w[0] == "Health Care"]
    assert [w[1] for w in health] == ["2017-05-01", "2017-06-08"]
    assert [w for w in sector_runs(everyone) if w[0] == "Health Care"] == []


@pytest.mark.parametrize("batch", [1, 97, 100_000])
def test_the_python_api_in_any_batches_gives_the_same_rows(sample, cli_rows, batch):
    bars, changes = sample
    if batch == 1:  # one event a batch is slow: January holds an addition (IDXX), a run and V-shapes
        bars = [b for b in bars if b["date"] < "2017-02-01"]
    by, engine = run_engine(bars, changes, batch)
    members = members_only(pd.DataFrame(bars), pd.DataFrame(changes))
    want_v, want_runs = v_shapes(members), sector_runs(members)
    assert got_v_shapes(by.get("v_shape_in_index", [])) == want_v and want_v
    assert got_runs(by.get("sector_three_down_days", [])) == want_runs and want_runs
    join = engine.operators["v_shape_in_index"].join.counts
    assert join["dropped"] == len(bars) - len(members) > 0


def test_the_scripts_docstring_example():
    import doctest

    result = doctest.testmod(load_script())
    assert result.attempted >= 2 and result.failed == 0


@pytest.mark.data
def test_the_sample_files_are_the_scripts_output(shared_data):
    script = load_script()
    companies = shared_data / "sp500_companies.csv"
    assert CHANGES.read_text() == script.dumps(script.membership_changelog(companies, script.SAMPLE_SYMBOLS))
    bars = script.daily_bars(shared_data / "sp500_daily_ohlcv_2013_2018.csv", script.SAMPLE_SYMBOLS,
                             script.SAMPLE_YEAR)
    assert BARS.read_text() == script.dumps(bars)


# ------------------------------------------------------------------ the full lists


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> tuple[pd.DataFrame, list[dict]]:
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (real data sets live beside the repo)")
    script = load_script()
    out = tmp_path_factory.mktemp("full") / "membership.jsonl"
    assert script.main(["--data", str(SHARED_DATA), "--full", str(out)]) == 0
    changes = read_jsonl(out)
    bars = pd.read_csv(SHARED_DATA / "sp500_daily_ohlcv_2013_2018.csv").rename(columns={"Name": "symbol"})
    bars = bars.dropna(subset=["open", "close"]).sort_values("date", kind="stable").reset_index(drop=True)
    return bars, changes


@pytest.mark.data
def test_full_changelog_is_every_company_of_the_list(full):
    from tests.conftest import SHARED_DATA

    _, changes = full
    companies = pd.read_csv(SHARED_DATA / "sp500_companies.csv")
    assert sorted(c["Symbol"] for c in changes) == sorted(companies["Symbol"])
    assert [c["date"] for c in changes] == sorted(c["date"] for c in changes)


@pytest.mark.data
def test_full_year_sector_runs_equal_pandas(full):
    """The 2015 bars of every stock against the whole list (the year of the August sell-off; all five
    years take 15 s): the runs are those pandas finds over the bars of each day's members."""
    bars, changes = full
    frame = bars.loc[bars["date"].str.startswith("2015"), ["symbol", "date", "open", "close"]]
    by, engine = run_engine(frame, changes, 65_536)
    members = members_only(frame, pd.DataFrame(changes))
    want = sector_runs(members)
    assert got_runs(by["sector_three_down_days"]) == want
    assert {w[:2] for w in want} == {("Energy", "2015-08-19"), ("Utilities", "2015-03-24"), ("Utilities", "2015-08-31")}
    # bars of stocks not in today's list, and of listed ones before they were added, are dropped
    assert engine.operators["sector_three_down_days"].join.counts["dropped"] == len(frame) - len(members)


@pytest.mark.data
def test_full_history_v_shapes_equal_the_brute_force_matcher(full):
    """The V-shapes of the stocks from A to AZ over five years, each while it was in the index."""
    bars, changes = full
    frame = bars.loc[bars["symbol"] < "B", ["symbol", "date", "open", "close"]]
    rules = RULES / "sp500.yaml"
    by, _ = run_engine(frame, changes, 65_536, rules)
    members = members_only(frame, pd.DataFrame(changes))
    want = v_shapes(members)
    assert got_v_shapes(by["v_shape_in_index"]) == want and len(want) > 500
    assert len(members) < len(frame)  # stocks added during the five years (ALLE, AME, AVGO, ...)
