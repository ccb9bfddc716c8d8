"""A table's key codes (int64 arrays for integer keys, a dict for others) against a plain dict, and the
shared strings of a category column."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cep.safe_pickle import loads as safe_loads
from cep.tables import VersionedTable
from cep.tables.keys import KeyCodes

key_st = st.one_of(st.integers(-3, 3000), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(batches=st.lists(st.lists(key_st, max_size=700), max_size=6), objects_at=st.integers(0, 8),
       restore_at=st.integers(0, 8), as_array=st.booleans())
def test_key_codes_match_a_dict(batches, objects_at, restore_at, as_array):
    """Codes in order of first appearance, lookups of known and unknown keys, index rebuilds past
    1,024 keys, a string key turning the codes to objects, and a restore (of the array or of the list
    form older snapshots hold) anywhere: always the dict's answers."""
    ref: dict = {}
    k = KeyCodes()
    for i, batch in enumerate(batches + [[f"s{j}" for j in range(3)]] * (objects_at < len(batches))):
        if i == objects_at and batch and isinstance(batch[0], int):
            batch = batch + ["x"]
        keys = np.asarray(batch, dtype=np.int64) if as_array and all(isinstance(v, int) for v in batch) else \
            np.array(batch + [None], dtype=object)[:-1]
        want = [ref.setdefault(v, len(ref)) for v in batch]
        assert k.codes_for(keys).tolist() == want
        probe = np.array(list(ref)[:50] + [10**6, "nope"], dtype=object)
        assert k.lookup(probe).tolist() == [ref.get(v, -1) for v in probe.tolist()]
        assert k.keys_of(np.arange(len(ref))).tolist() == list(ref)
        assert k.ints == all(isinstance(v, int) for v in ref)
        if i == restore_at:
            state = safe_loads(pickle.dumps(k.state()), "keys")
            k = KeyCodes.from_state(state if i % 2 else list(np.asarray(state, dtype=object).tolist()))
    assert len(k) == len(ref)


def test_integer_keys_hold_no_python_objects_per_key():
    """A million integer keys: the codes cost the int64 array and the index, not a dict entry each."""
    t = VersionedTable(("id",), ("v",))
    n = 1_000_000
    t.apply(np.arange(n, dtype=np.int64) * 7, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool),
            {"v": np.ones(n)})
    assert t.lookup(np.array([7 * 999_999, 3]), np.array([0, 0])).tolist() == [999_999, -1]
    assert t._keys.ints and len(t._keys._dict) == 0
    assert t._keys.nbytes() < 40 * n  # the array (8) and the index's hash table, not ~100 bytes per key


def test_category_strings_are_shared_and_values_kept():
    t = VersionedTable(("id",), ("tier", "mixed"))
    n = 5000
    tiers = np.array(["".join(["go", "ld"]) if i % 3 else "".join(["sil", "ver"]) for i in range(n)], dtype=object)
    tiers[7] = None
    tiers[8] = float("nan")
    mixed = np.array([1, 1.0, True, "1"] * (n // 4), dtype=object)  # 1 == 1.0 == True: never merged
    t.apply(np.arange(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), {"tier": tiers, "mixed": mixed})
    got = t.gather(t.lookup(np.arange(n), np.zeros(n, dtype=np.int64)))
    want = [None if v is None or v != v else v for v in tiers.tolist()]
    assert got["tier"].tolist() == want
    assert len({id(v) for v in got["tier"].tolist()}) == 3  # "gold", "silver", None
    assert [type(v) for v in got["mixed"][:4].tolist()] == [int, float, bool, str]
    # a column of distinct strings is kept as it is (nothing to share), and the estimate counts each
    names = np.array([f"name-{i}" for i in range(n)], dtype=object)
    u = VersionedTable(("id",), ("name",))
    u.apply(np.arange(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool), {"name": names})
    assert u.stats().bytes > t.stats().bytes
