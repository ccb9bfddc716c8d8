"""Tables and temporal joins: the versioned store against a pandas merge_asof reference, changelog
formats, rule-file errors, and pattern rules joined to a table."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from cep.safe_pickle import loads as safe_loads
from cep.tables import MIN_TIME, VersionedTable

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"


# ---------------------------------------------------------------- the reference


def asof_reference(changes: pd.DataFrame, events: pd.DataFrame) -> list:
    """The value each event sees: the last change of its key at or before its time (ties: the later
    change), None when there is none or it is a delete. pandas merge_asof per key, backward.

    ``changes``: key, time, seq (arrival order), deleted, value. ``events``: key, t.
    """
    ev = events.reset_index(drop=True).assign(_i=lambda d: np.arange(len(d)))
    if changes.empty:
        return [None] * len(ev)
    ch = changes.sort_values(["time", "seq"], kind="stable").rename(columns={"time": "t"})
    ch = ch[["key", "t", "deleted", "value"]]
    left = ev.sort_values("t", kind="stable")
    merged = pd.merge_asof(left, ch, on="t", by="key", direction="backward", allow_exact_matches=True)
    merged = merged.sort_values("_i")
    out = []
    for deleted, value in zip(merged["deleted"].tolist(), merged["value"].tolist()):
        missing = deleted is None or (isinstance(deleted, float) and np.isnan(deleted)) or bool(deleted)
        out.append(None if missing else value)
    return out


def test_reference_by_hand():
    changes = pd.DataFrame({"key": [1, 1, 1, 2], "time": [10, 20, 20, 10], "seq": [0, 1, 2, 3],
                            "deleted": [False, False, True, False], "value": ["a", "b", None, "c"]})
    events = pd.DataFrame({"key": [1, 1, 1, 2, 3], "t": [9, 10, 20, 5, 50]})
    assert asof_reference(changes, events) == [None, "a", None, None, None]


# ---------------------------------------------------------------- the store


def _store_values(table: VersionedTable, keys, times) -> list:
    rows = table.lookup(np.asarray(keys), np.asarray(times, dtype=np.int64))
    return table.gather(rows)["value"].tolist()


def _norm(vals: list) -> list:
    return [None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in vals]


change_st = st.tuples(st.integers(0, 5), st.integers(0, 40), st.booleans(), st.integers(0, 99))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(changes=st.lists(change_st, max_size=60), events=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 45)),
                                                                  min_size=1, max_size=40),
       cuts=st.lists(st.integers(0, 60), max_size=5), restore_at=st.integers(0, 6), horizon=st.integers(0, 45))
def test_store_matches_merge_asof(changes, events, cuts, restore_at, horizon):
    """Any batching of the changes, a snapshot/restore between batches, and compaction at a horizon
    below every lookup give the reference's values."""
    ref = asof_reference(
        pd.DataFrame({"key": [c[0] for c in changes], "time": [c[1] for c in changes],
                      "seq": range(len(changes)), "deleted": [c[2] for c in changes],
                      "value": [c[3] for c in changes]}),
        pd.DataFrame({"key": [e[0] for e in events], "t": [e[1] for e in events]}))
    table = VersionedTable(("key",), ("value",))
    bounds = sorted({0, len(changes), *[min(c, len(changes)) for c in cuts]})
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        part = changes[lo:hi]
        table.apply(np.array([c[0] for c in part]), np.array([c[1] for c in part]), np.array([c[2] for c in part]),
                    {"value": np.array([c[3] for c in part])})
        if b == restore_at:
            table = VersionedTable.from_state(safe_loads(pickle.dumps(table.state())))
        if b % 2:  # lookups between batches (the merge of a delta into sorted versions)
            table.lookup(np.array([0]), np.array([0]))
    assert _norm(_store_values(table, [e[0] for e in events], [e[1] for e in events])) == ref
    lo_t = min(e[1] for e in events)
    table.compact(min(horizon, lo_t))
    assert _norm(_store_values(table, [e[0] for e in events], [e[1] for e in events])) == ref


def test_store_string_and_composite_keys():
    t = VersionedTable(("a", "b"), ("v",))
    keys = np.empty(3, dtype=object)
    keys[:] = [("x", 1), ("x", 2), ("x", 1)]
    t.apply(keys, np.array([1, 1, 5]), np.array([False, False, False]), {"v": np.array([10, 20, 30])})
    q = np.empty(4, dtype=object)
    q[:] = [("x", 1), ("x", 1), ("x", 2), ("y", 1)]
    rows = t.lookup(q, np.array([1, 5, 9, 9]))
    assert _norm(t.gather(rows)["v"].tolist()) == [10, 30, 20, None]


def test_store_snapshot_rows_valid_from_the_beginning():
    t = VersionedTable(("k",), ("v",))
    t.apply(np.array(["a"], dtype=object), np.array([MIN_TIME]), np.array([False]), {"v": np.array(["s"], dtype=object)})
    t.apply(np.array(["a"], dtype=object), np.array([100]), np.array([False]), {"v": np.array(["n"], dtype=object)})
    assert t.gather(t.lookup(np.array(["a", "a"], dtype=object), np.array([-10**12, 100])))["v"].tolist() == ["s", "n"]


def test_store_stats_and_compaction():
    t = VersionedTable(("k",), ("v",))
    n = 5000
    for step in range(3):
        t.apply(np.arange(n), np.full(n, step * 10), np.zeros(n, dtype=bool), {"v": np.arange(n) + step})
    s = t.stats()
    assert (s.keys, s.live_keys, s.versions, s.rows) == (n, n, 3 * n, 3 * n)
    assert s.bytes_per_row > 0
    assert t.compact(25) == 2 * n
    assert t.stats().versions == n
    assert t.gather(t.lookup(np.array([7]), np.array([30])))["v"].tolist() == [9]
