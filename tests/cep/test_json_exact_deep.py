"""Integers past 64 bits nested as deep as orjson reads (1,024 levels): exact, or the line reported."""

from __future__ import annotations

from pathlib import Path

import pytest

import cep.json_exact as json_exact
from cep.durable.source import _decode
from cep.events import _jsonl_batches
from cep.json_exact import loads_exact

WIDE = 2**64 + 1


def _deep(depth: int) -> bytes:
    return b'{"a": ' + b"[" * depth + str(WIDE).encode() + b"]" * depth + b', "b": 3}'


def _unwrap(v: object, depth: int) -> object:
    for _ in range(depth):
        assert isinstance(v, list)
        v = v[0]
    return v


@pytest.mark.parametrize("depth", [1000, 1022])
def test_a_deep_wide_int_is_exact_on_every_path(tmp_path: Path, depth: int) -> None:
    # orjson reads 1,024 levels, the standard library's default recursion limit fewer: the
    # re-read must not raise RecursionError out of a batch (it stopped the whole run)
    line = _deep(depth)
    assert _unwrap(loads_exact(line)["a"], depth) == WIDE
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b'{"a": 1, "b": 1}\n' + line + b'\n{"a": 2, "b": 2}\n')
    for decoder in ("lines", "blocks"):
        got = [b for b in _jsonl_batches(path, 10, decoder=decoder)]
        assert [b.n for b in got] == [3] and not got[0].bad
        assert _unwrap(got[0].column("a")[1], depth) == WIDE
        assert got[0].column("b").tolist() == [1, 3, 2]
    b = _decode([(1, b'{"a": 1}\n', 9), (2, line + b"\n", len(line) + 1)], "src", 1 << 20)
    assert _unwrap(b.column("a")[1], depth) == WIDE


def test_a_line_the_exact_reader_cannot_take_is_reported_and_the_rest_flows(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """When even a raised limit is not enough (a deep stack): the line is a bad line with its
    reason, never its rounded value and never an exception out of the batch."""
    def refuse(*_a: object, **_k: object) -> object:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(json_exact.json, "loads", refuse)
    line = _deep(3)
    with pytest.raises(json_exact.orjson.JSONDecodeError, match="nested too deep"):
        loads_exact(line)
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b'{"a": 1, "b": 1}\n' + line + b'\nnope\n{"a": 2, "b": 2}\n')
    for decoder in ("lines", "blocks"):
        for size in (1, 2, 10):
            got = list(_jsonl_batches(path, size, decoder=decoder))
            assert [i for b in got for i in b.lines.tolist()] == [1, 4]
            assert sum((b.column("a").tolist() for b in got), []) == [1, 2]
            bad = [x for b in got for x in b.bad]
            assert [x.line for x in bad] == [2, 3]
            assert "nested too deep" in bad[0].reason and bad[0].source == str(path)
    b = _decode([(1, b'{"a": 1}\n', 9), (2, line + b"\n", len(line) + 1)], "src", 1 << 20)
    assert b.column("a").tolist() == [1] and [x.line for x in b.bad] == [2]
