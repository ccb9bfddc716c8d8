"""Output rows of analytics rules built from columns: the same dicts, keys in the same order, as dict(zip())."""

from __future__ import annotations

import random

from cep.analytics.operator import _row_maker


def test_rows_equal_dict_of_zip_for_every_width_and_repeated_names() -> None:
    rng = random.Random(15)
    for width in range(1, 16):  # past the widths written out as displays too
        for _ in range(5):
            names = tuple(rng.choice("abcdefghijklmnopqrstuvwxyz"[: width + 2]) for _ in range(width))
            cols = [[rng.choice([None, 1, "x", 2.5, False, (1, 2)]) for _ in range(7)] for _ in range(width)]
            want = [dict(zip(names, vals)) for vals in zip(*cols)]
            got = _row_maker(names)(cols)
            assert got == want
            assert [list(r) for r in got] == [list(r) for r in want]  # key order: the JSON lines' bytes


def test_no_rows_from_empty_columns() -> None:
    assert _row_maker(("a", "b"))([[], []]) == []
