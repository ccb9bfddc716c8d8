"""Integers past 64 bits (now read exactly) written out: row ids and ``cep percolate``'s lines."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

import cep.batch_dfa as batch_dfa
from cep.cli.percolate import add_arguments, run
from cep.operator import PatternOperator
from patterns.rules import parse_rule_text

SQL = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.x AS ax "
       "PATTERN (A B) DEFINE A AS x < 3, B AS x >= 3)")
KEYS = [2**64 + 1, 2**64, -2**63 - 1, 7]


@pytest.mark.parametrize("use", [True, False])
def test_row_ids_of_wide_int_keys_are_exact_and_distinct(use: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # a key's row id spells the key as JSON; orjson refuses ints past 64 bits (TypeError out of the run)
    monkeypatch.setattr(batch_dfa, "USE_BATCH_DFA", use)
    op = PatternOperator(parse_rule_text(SQL).compiled, name="r")
    op.row_ids = True
    events = [{"k": k, "ts": 2 * i + j, "x": 1 if j == 0 else 5} for i, k in enumerate(KEYS) for j in (0, 1)]
    rows = op.process(events).matches + op.finish().matches
    assert (op._keyed is not None) == use
    ids = {r["k"]: r["_id"] for r in rows}
    assert set(ids) == set(KEYS)
    for k, rid in ids.items():
        rule, key, *_ = rid.split(":")
        assert rule == "r" and json.loads(key) == [k] and type(json.loads(key)[0]) is int


def test_percolate_writes_a_wide_int_id_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": 1, "query": "apple"}\n{"id": "p", "query": "pie"}\n')
    d = tmp_path / "d.jsonl"
    d.write_text('{"id": 18446744073709551617, "body": "apple pie"}\n{"id": 18446744073709551616, "body": "pie"}\n')
    parser = argparse.ArgumentParser(prog="cep percolate")
    add_arguments(parser)
    assert run(parser.parse_args(["--queries", str(q), "--input", str(d)])) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["id"] for o in out] == [2**64 + 1, 2**64]
    assert [type(o["id"]) for o in out] == [int, int]


def test_first_seen_tells_wide_int_keys_and_values_apart() -> None:
    """FIRST_SEEN hashes keys and values; a sketch refuses ints past 64 bits (the run stopped on a
    wide key, a wide value was taken for NULL and never first seen)."""
    sql = ("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES A.v AS av, A.ts AS at "
           "PATTERN (A) DEFINE A AS FIRST_SEEN(A.v))")
    pairs = [(2**64 + 1, 1), (2**64, 1), (2**64 + 1, 1), ("18446744073709551617", 1), (1, 2**64 + 1), (1, 2**64),
             (1, 2**64 + 1), (1, "18446744073709551617"), (1, -2**63 - 1), (1, -2**63 - 1), (1, 2**64 + 1)]
    events = [{"k": k, "ts": i, "v": v} for i, (k, v) in enumerate(pairs)]
    op = PatternOperator(parse_rule_text(sql).compiled, name="r")
    got = sorted(r["at"] for r in op.process(events[:5]).matches + op.process(events[5:]).matches + op.finish().matches)
    seen: set = set()
    expect = []
    for i, (k, v) in enumerate(pairs):  # exact Python equality, the type kept (an int and its digits differ)
        if (type(k), k, type(v), v) not in seen:
            seen.add((type(k), k, type(v), v))
            expect.append(i)
    assert got == expect


def test_explain_shows_a_nested_wide_int_exactly() -> None:
    from cep.explain.render import _event

    assert _event({"tags": [2**64 + 1, "x"]}, set()) == 'tags=[18446744073709551617,"x"]'
    assert _event({"m": {"n": -2**63 - 1}}, set()) == 'm={"n":-9223372036854775809}'
