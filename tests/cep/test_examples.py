"""The curated example rule files of ``rules/``: each checks, runs on its bundled data, and finds
exactly what a brute-force recomputation over the same data finds.

The README's table of examples is the list: every rule file in ``rules/`` has a row there, and the
row's command runs (through ``cep.cli.main``) with every rule of the file emitting at least one
complex event. Facts per file, each recomputed here from the raw events with plain Python loops or
pandas, never with the engine: ``fraud.yaml`` (its joined rules against a pandas ``merge_asof``),
``ops.yaml``, ``trends.yaml`` and ``sessions.yaml`` below; ``trading.yaml`` in ``test_real_data.py``
(the brute-force matcher), ``sp500.yaml`` in ``test_sp500_membership.py``, ``weblogs.yaml`` in
``test_analytics_data.py``, ``media.yaml`` in ``test_search_rules.py`` (every query on every
document), and the absence rules of ``fraud.yaml``, ``ops.yaml``, ``sessions.yaml`` and
``orders.yaml`` in ``test_absence_examples.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from cep.cli import main
from patterns.rules import load_rules

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
DATA = RULES / "data"
MINUTE, HOUR = 60_000, 3_600_000


def readme_commands() -> dict[str, list[str]]:
    """Rule file name -> the arguments of its ``cep run`` command in the README's example table."""
    text = (REPO / "README.md").read_text()
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("| [`rules/"):
            continue
        m = re.search(r"`(cep run rules/[^`]+)`", line)
        assert m, f"README example row without a `cep run` command: {line}"
        args = shlex.split(m.group(1))[1:]
        out[Path(args[1]).name] = args
    return out


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def absolute(arg: str) -> str:
    """A README argument with its ``rules/...`` path (alone or after ``NAME=``) made absolute."""
    name, sep, path = arg.rpartition("=")
    return f"{name}{sep}{REPO / path}" if path.startswith("rules/") else arg


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, dict[str, list[dict]]]:
    """Each example's rows by rule, from its README command (run in-process, output to a file)."""
    tmp = tmp_path_factory.mktemp("examples")
    res: dict[str, dict[str, list[dict]]] = {}
    for name, args in readme_commands().items():
        out = tmp / f"{name}.jsonl"
        assert main([absolute(a) for a in args] + ["--output", str(out), "--quiet"]) == 0, name
        by: dict[str, list[dict]] = defaultdict(list)
        for r in read_jsonl(out):
            by[r["rule"]].append(r)
        res[name] = dict(by)
    return res


# ------------------------------------------------------------------ the curated set


def test_every_rule_file_is_a_curated_example_in_the_readme():
    assert set(readme_commands()) == {p.name for p in RULE_FILES}


RULE_FILES = [p for p in sorted(RULES.glob("*.yaml")) if not p.name.endswith(".test.yaml")]  # not their tests


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_every_example_checks(path: Path, capsys):
    assert main(["check", str(path)]) == 0
    assert f"{path}: ok" in capsys.readouterr().out


def test_every_rule_of_every_example_emits_on_its_bundled_data(outputs):
    for name, by_rule in outputs.items():
        names = set(load_rules(RULES / name).names())  # disabled rules are not loaded
        assert set(by_rule) == names, name


def test_readme_counts_the_complex_events_of_every_example(outputs):
    """The table's last column is what each command gives (its summary's 'N complex events')."""
    shown = {}
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("| [`rules/"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            shown[re.search(r"rules/(\w+\.yaml)", cells[0]).group(1)] = int(cells[-1].replace(",", ""))
    assert shown == {name: sum(len(rows) for rows in by_rule.values()) for name, by_rule in outputs.items()}


def test_bundled_inputs_live_in_rules_data():
    for name, args in readme_commands().items():
        inputs = [a.partition("=")[2] or a for i, a in enumerate(args) if i and args[i - 1] == "--input"]
        assert inputs, name
        for path in inputs:
            assert path.startswith("rules/data/") and (REPO / path).is_file(), (name, path)


def test_readme_documents_every_rule_key_window_aggregate_and_doc():
    from patterns import analytics, rules, search_rules

    text = (REPO / "README.md").read_text()
    keys = [*rules.COMMON_KEYS, *rules.PATTERN_KEYS, *analytics.KEYS, *analytics.SketchConfig.describe(),
            *search_rules.KEYS, *search_rules.QUERY_KEYS, *search_rules.ANALYSIS_KEYS]
    assert [k for k in keys if f"`{k}`" not in text and f"{{{k}" not in text and f" {k}:" not in text] == []
    assert [w for w in analytics.WINDOW_KINDS if f"`{w}(" not in text] == []
    assert [a for a in [*analytics.AGGREGATE_FUNCTIONS, "PREV_WINDOW"] if f"`{a}" not in text] == []
    for doc in ("semantics", "analytics", "search", "spark", "reliability", "sketches"):
        assert f"](docs/{doc}.md" in text, doc


# ------------------------------------------------------------------ fraud.yaml


def load_generator():
    spec = importlib.util.spec_from_file_location("make_transactions", DATA / "make_transactions.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def transactions() -> list[dict]:
    return read_jsonl(DATA / "transactions.jsonl")


def by_key(rows: list[dict], key: str, time: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r[time]):  # stable: ties keep file order, as the engine does
        out[r[key]].append(r)
    return out


def test_transactions_file_is_the_generators_output(transactions):
    gen = load_generator()
    assert (DATA / "transactions.jsonl").read_text() == gen.dumps(gen.generate(gen.SEED))
    assert 3000 <= len(transactions) <= 6000
    assert {r["label"] for r in transactions} == {None, "cloned_card", "card_testing"}


def test_two_countries_within_an_hour_equals_every_close_pair(transactions, outputs):
    want = []
    for card, txs in by_key(transactions, "card", "ts").items():
        for a, b in zip(txs, txs[1:]):  # SKIP TO NEXT ROW: every consecutive pair stands alone
            if a["country"] != b["country"] and b["ts"] - a["ts"] < HOUR:
                want.append((card, a["id"], b["id"], a["country"], b["country"], (b["ts"] - a["ts"]) / MINUTE))
    rows = outputs["fraud.yaml"]["two_countries_within_an_hour"]
    got = [(r["card"], r["first_id"], r["second_id"], r["first_country"], r["second_country"], r["minutes_apart"])
           for r in rows]
    assert sorted(g[:5] for g in got) == sorted(w[:5] for w in want)
    minutes = {g[1:3]: g[5] for g in got}
    assert all(abs(minutes[w[1:3]] - w[5]) <= 0.05 + 1e-9 for w in want)
    # every injected cloned-card payment is caught, next to the owner's payment at home
    flagged = {g[1] for g in got} | {g[2] for g in got}
    cloned = [t["id"] for t in transactions if t["label"] == "cloned_card"]
    assert len(cloned) == 12 and set(cloned) <= flagged


def test_new_country_merchant_burst_equals_exact_first_seen_sets(transactions, outputs):
    want = []
    for card, txs in by_key(transactions, "card", "ts").items():
        countries: set[str] = set()
        merchants: set[str] = set()
        new_country, new_merchant = [], []
        for t in txs:  # FIRST_SEEN: new for the card among all its earlier rows, matched or not
            new_country.append(t["country"] not in countries)
            new_merchant.append(t["merchant"] not in merchants)
            countries.add(t["country"])
            merchants.add(t["merchant"])
        i = 0
        while i < len(txs):  # PATTERN (C N{2,}) WITHIN 30 minutes, greedy, SKIP PAST LAST ROW
            j = i + 1
            if new_country[i] and new_merchant[i]:
                while j < len(txs) and new_merchant[j] and txs[j]["ts"] - txs[i]["ts"] < 30 * MINUTE:
                    j += 1
            if j - i - 1 >= 2:
                m = txs[i:j]
                want.append((card, m[0]["id"], m[-1]["id"], len(m), len({t["merchant"] for t in m[1:]}) + 1,
                             round(sum(t["amount"] for t in m), 2)))
                i = j
            else:
                i += 1
    rows = outputs["fraud.yaml"]["new_country_merchant_burst"]
    got = [(r["card"], r["first_id"], r["last_id"], r["payments"], r["merchants"], r["total"]) for r in rows]
    assert sorted(g[:5] for g in got) == sorted(w[:5] for w in want)
    assert sorted(g[5] for g in got) == pytest.approx(sorted(w[5] for w in want), abs=0.011)
    # every injected card-testing run is found, starting at its first payment
    firsts = {}
    for t in transactions:
        if t["label"] == "card_testing":
            firsts.setdefault(t["card"], t["id"])
    assert len(firsts) == 10 and set(firsts.items()) <= {(g[0], g[1]) for g in got}


# ------------------------------------------------------------------ fraud.yaml: payments joined with customers

PAYMENT_RULES = {"payment_outside_home_country": {"away_from_home", "old_home_after_move", "new_home_before_move"},
                 "payment_on_closed_account": {"closed_account"}}


@pytest.fixture(scope="module")
def payments() -> tuple[pd.DataFrame, pd.DataFrame]:
    return pd.DataFrame(read_jsonl(DATA / "payments.jsonl")), pd.DataFrame(read_jsonl(DATA / "customer_changes.jsonl"))


def test_payments_and_customer_changes_are_the_generators_output(payments):
    gen = load_generator()
    pays, changes = gen.generate_payments(gen.SEED)
    assert (DATA / "payments.jsonl").read_text() == gen.dumps(pays)
    assert (DATA / "customer_changes.jsonl").read_text() == gen.dumps(changes)
    # the other streams did not move when these were added
    assert (DATA / "transactions.jsonl").read_text() == gen.dumps(gen.generate(gen.SEED))
    ops = payments[1]["op"].value_counts().to_dict()
    assert ops["insert"] == gen.CUSTOMERS + 1 and ops["update"] == gen.MOVERS and ops["delete"] == gen.CLOSERS
    assert (DATA / "payments.jsonl").stat().st_size < 200_000


def as_of(pays: pd.DataFrame, changes: pd.DataFrame, pick: str = "as_of") -> pd.DataFrame:
    """Each payment with its customer's home country: as of its time (pandas ``merge_asof``,
    backward, a change at the payment's own time included; a delete gives no row), or, as a join
    that is not temporal would give it, the latest row or the first row of the changelog."""
    rows = changes.assign(home_country=changes["home_country"].where(changes["op"] != "delete"))
    if pick == "as_of":
        joined = pd.merge_asof(pays.sort_values("ts", kind="stable"), rows.sort_values("ts", kind="stable")
                               [["customer", "ts", "home_country"]], on="ts", by="customer", direction="backward")
    else:
        one = rows.sort_values("ts", kind="stable").groupby("customer").nth(-1 if pick == "latest" else 0)
        joined = pays.merge(one[["customer", "home_country"]], on="customer", how="left")
    return joined.set_index("id")


def flagged(joined: pd.DataFrame) -> dict[str, set[str]]:
    """What the two rules flag, with the rules' conditions written as pandas filters."""
    known = joined["home_country"].notna()
    outside = known & (joined["amount"] >= 500) & (joined["country"] != joined["home_country"])
    return {"payment_outside_home_country": set(joined.index[outside]),
            "payment_on_closed_account": set(joined.index[~known])}


def test_payment_rules_equal_the_generators_labels_and_a_pandas_as_of_join(payments, outputs):
    pays, changes = payments
    got = {rule: {r["id"] for r in outputs["fraud.yaml"][rule]} for rule in PAYMENT_RULES}
    labels = {rule: set(pays.loc[pays["label"].isin(kinds), "id"]) for rule, kinds in PAYMENT_RULES.items()}
    assert got == labels == flagged(as_of(pays, changes))
    assert len(got["payment_outside_home_country"]) == 26 and len(got["payment_on_closed_account"]) == 5
    # the rows carry the customer's row as of the payment: the home the payment was not made from
    home = as_of(pays, changes)["home_country"]
    for r in outputs["fraud.yaml"]["payment_outside_home_country"]:
        assert r["home_country"] == home[r["id"]] != r["country"] and r["amount"] >= 500
    # a join that is not temporal gets the cases around a change wrong, each in its own way
    by_label = pays.set_index("id")["label"]
    for pick, wrong in (("latest", {"new_home_before_move", "old_home_after_move", "closed_account"}),
                        ("first", {"new_home_before_move", "old_home_after_move", "closed_account"})):
        other = flagged(as_of(pays, changes, pick))
        missed = set().union(*labels.values()) - set().union(*other.values())
        extra = set().union(*other.values()) - set().union(*labels.values())
        assert missed and extra, pick
        assert {by_label[i] for i in missed} <= wrong, pick


def test_payment_rules_in_any_batches_through_the_python_api(payments, outputs):
    """The four streams merged by time and cut in batches of 7 (a change and the payments after it
    often in different batches), then one batch per stream in turn: the rows of ``cep run``."""
    pays, changes = payments
    events = sorted([{**e, "stream": "payments"} for e in pays.to_dict("records")]
                    + [{**e, "stream": "customer_changes"} for e in changes.to_dict("records")],
                    key=lambda e: e["ts"])
    want = {rule: sorted(r["id"] for r in outputs["fraud.yaml"][rule]) for rule in PAYMENT_RULES}
    from cep import Engine

    # the whole file (its tables: section declares the table); the other rules get no events
    engine = Engine(load_rules(RULES / "fraud.yaml"), streams=["payments", "customer_changes"])
    rows = []
    for lo in range(0, len(events), 7):
        chunk = events[lo:lo + 7]
        for stream in ("customer_changes", "payments"):
            part = [{k: v for k, v in e.items() if k != "stream"} for e in chunk if e["stream"] == stream]
            if part:
                rows += engine.process(part, stream=stream).matches
    rows += engine.finish().matches
    assert {rule: sorted(r["id"] for r in rows if r["rule"] == rule) for rule in PAYMENT_RULES} == want
    stats = engine.table_stats()["customers"]
    assert stats["applied"] == len(changes) and stats["late"] == 0


# ------------------------------------------------------------------ ops.yaml


@pytest.fixture(scope="module")
def requests() -> list[dict]:
    return read_jsonl(DATA / "nasa_http_sample.jsonl")


def greedy_runs(rows: list[dict], ok, same_run, within: int) -> list[list[dict]]:
    """Maximal runs of consecutive rows (``PATTERN (V{3,})``, greedy, SKIP PAST LAST ROW)."""
    out, i = [], 0
    while i < len(rows):
        j = i
        while j < len(rows) and ok(rows[j]) and same_run(rows[i], rows[j]) and rows[j]["time"] - rows[i]["time"] < within:
            j += 1
        if j - i >= 3:
            out.append(rows[i:j])
            i = j
        else:
            i += 1
    return out


def test_not_found_retry_loop_equals_runs_of_404s(requests, outputs):
    want = []
    for host, rs in by_key(requests, "host", "time").items():
        for run in greedy_runs(rs, lambda r: r["status"] == 404, lambda a, b: a["url"] == b["url"], 5 * MINUTE):
            want.append((host, run[0]["url"], len(run), run[0]["time"], run[-1]["time"]))
    got = [(r["host"], r["url"], r["attempts"], r["first_at"], r["last_at"])
           for r in outputs["ops.yaml"]["not_found_retry_loop"]]
    assert sorted(got) == sorted(want)
    assert max(w[2] for w in want) == 22  # one client asked 22 times in 81 s for the missing logo


def test_large_download_streak_equals_runs_of_large_answers(requests, outputs):
    want = []
    for host, rs in by_key(requests, "host", "time").items():
        for run in greedy_runs(rs, lambda r: r["bytes"] >= 100_000, lambda a, b: True, 10 * MINUTE):
            want.append((host, len(run), sum(r["bytes"] for r in run), run[0]["time"], run[-1]["time"], run[-1]["url"]))
    got = [(r["host"], r["downloads"], r["bytes"], r["first_at"], r["last_at"], r["last_url"])
           for r in outputs["ops.yaml"]["large_download_streak"]]
    assert sorted(got) == sorted(want)


def rolling(requests: list[dict], key: str, where, size: str) -> pd.DataFrame:
    """Per event (in time order), the count and byte sum of its key's events in (t - size, t]."""
    df = pd.DataFrame(requests)
    df = df[where(df)].sort_values("time", kind="stable")
    df.index = pd.to_datetime(df["time"], unit="ms")
    g = df.groupby(key, sort=False)
    out = pd.DataFrame({
        "count": g["status"].rolling(size).count(),
        "bytes": g["bytes"].rolling(size).sum(),
    }).reset_index()
    out["time"] = (out["time"] - pd.Timestamp(0)) // pd.Timedelta(milliseconds=1)
    return out


def test_missing_url_storm_equals_a_pandas_rolling_count(requests, outputs):
    roll = rolling(requests, "url", lambda d: d["status"] == 404, "5min")
    want = sorted((r.url, r.time, int(r.count)) for r in roll.itertuples() if r.count >= 10)
    rows = outputs["ops.yaml"]["missing_url_storm"]
    assert sorted((r["url"], r["at"], r["not_found"]) for r in rows) == want
    for r in rows:  # distinct clients of the same window, from a plain loop
        hosts = {e["host"] for e in requests if e["status"] == 404 and e["url"] == r["url"]
                 and r["at"] - 5 * MINUTE < e["time"] <= r["at"]}
        assert r["clients"] == len(hosts)


def test_bandwidth_burst_equals_a_pandas_rolling_sum(requests, outputs):
    roll = rolling(requests, "host", lambda d: d["status"] > 0, "60s")
    want = sorted((r.host, r.time, int(r.bytes), int(r.count)) for r in roll.itertuples()
                  if r.bytes > 1_000_000 and r.count >= 3)
    rows = outputs["ops.yaml"]["bandwidth_burst"]
    assert sorted((r["host"], r["at"], r["bytes"], r["requests"]) for r in rows) == want


# ------------------------------------------------------------------ trends.yaml


@pytest.fixture(scope="module")
def bars() -> dict[str, list[dict]]:
    return by_key(read_jsonl(DATA / "sp500_daily_2017_sample.jsonl"), "symbol", "date")


def test_rising_streak_equals_runs_of_higher_closes(bars, outputs):
    want = []
    for sym, bs in bars.items():
        i = 0
        while i < len(bs):  # PATTERN (S U{5,}), greedy, SKIP PAST LAST ROW
            j = i + 1
            while j < len(bs) and bs[j]["close"] > bs[j - 1]["close"]:
                j += 1
            if j - i - 1 >= 5:
                want.append((sym, bs[i]["date"], bs[j - 1]["date"], j - i - 1))
                i = j
            else:
                i += 1
    got = [(r["symbol"], r["start_date"], r["end_date"], r["up_days"]) for r in outputs["trends.yaml"]["rising_streak"]]
    assert sorted(got) == sorted(want)


def test_range_breakout_equals_a_scan_of_every_start_day(bars, outputs):
    want = []
    for sym, bs in bars.items():
        i = 0
        while i < len(bs):  # PATTERN (S R{9,} B): B lies above the band, so R's run cannot give way
            base = bs[i]["close"]
            j = i + 1
            while j < len(bs) and base * 0.97 <= bs[j]["close"] <= base * 1.03:
                j += 1
            rng = bs[i + 1 : j]
            if (len(rng) >= 9 and j < len(bs) and bs[j]["close"] > base * 1.03
                    and bs[j]["volume"] > 1.5 * (sum(b["volume"] for b in rng) / len(rng))):
                want.append((sym, bs[i]["date"], bs[j - 1]["date"], len(rng) + 1, bs[j]["date"]))
                i = j + 1
            else:
                i += 1
    got = [(r["symbol"], r["range_start"], r["range_end"], r["range_days"], r["breakout_date"])
           for r in outputs["trends.yaml"]["range_breakout"]]
    assert sorted(got) == sorted(want)


# ------------------------------------------------------------------ sessions.yaml


def test_search_then_click_equals_the_first_click_within_the_hour(outputs):
    events = [{**e, "stream": "searches"} for e in read_jsonl(DATA / "searches.jsonl")]
    events += [{**e, "stream": "clicks"} for e in read_jsonl(DATA / "clicks.jsonl")]
    want = []
    for session, es in by_key(events, "session", "ts").items():
        i = 0
        while i < len(es):  # PATTERN (S X*? C): the nearest click after the search, within an hour
            j = i + 1
            if es[i]["stream"] == "searches":
                while j < len(es) and es[j]["ts"] - es[i]["ts"] < HOUR and not (
                        es[j]["stream"] == "clicks" and es[j]["status"] < 400):
                    j += 1
            if es[i]["stream"] == "searches" and j < len(es) and es[j]["ts"] - es[i]["ts"] < HOUR:
                want.append((session, es[i]["q"], es[j]["url"], es[i]["ts"]))
                i = j + 1
            else:
                i += 1
    got = [(r["session"], r["query"], r["clicked"], r["searched_at"]) for r in outputs["sessions.yaml"]["search_then_click"]]
    assert sorted(got) == sorted(want) and len(want) >= 3
