"""Row hashes of an aggregate's argument: hashing each distinct string once changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from cep.analytics.kernels import _aligned_hashes, _hash


def direct(vals: np.ndarray, skip_empty: bool):
    hb, bad = _hash(vals, "x", skip_empty)
    n = len(vals)
    h0, h1, valid = np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, bool)
    pos = np.flatnonzero(hb.valid) if hb.valid is not None else np.arange(n)
    h0[pos], h1[pos], valid[pos] = hb.h0, hb.h1, True
    return h0, h1, valid, bad


@pytest.mark.parametrize("skip_empty", [False, True])
@pytest.mark.parametrize("extra", [[], [None, ""], [1, 1.0, True], [float("nan"), b"x"], [[1]]])
def test_hashes_of_repeated_strings_equal_hashing_every_row(skip_empty, extra):
    rng = np.random.default_rng(3)
    vals = np.empty(1000, dtype=object)
    vals[:] = [f"/u{i}" for i in rng.integers(0, 40, 1000)]
    vals[rng.integers(0, 1000, len(extra))] = extra if extra else vals[:0]
    got, want = _aligned_hashes(vals, "x", skip_empty), direct(vals, skip_empty)
    assert got[3] == want[3]
    for g, w in zip(got[:3], want[:3]):
        assert np.array_equal(g, w)
    assert np.array_equal(_aligned_hashes(vals, "x", skip_empty)[0], want[0])  # remembered factorization
