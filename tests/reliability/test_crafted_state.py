"""Crafted checkpoints, snapshots and saved indexes run nothing (issue 13, item 11).

Before: a checkpoint whose snapshot was replaced by a pickle calling ``os.system`` (checksum
recomputed) ran the command, and a "stealth" variant then resumed with exit 0 and the right
output; the same held for a saved percolator index, whose header (not covered by its checksum)
could be edited to change the answers (133 matches became 13); and ``cep percolate --queries``
took a pickled index for a query file by its content.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import orjson
import pytest

from cep.cli import main
from cep.durable import Checkpoint, read_checkpoint, write_checkpoint
from cep.engine import SNAPSHOT_MAGIC, SNAPSHOT_VERSION, Engine
from cep.percolator import Percolator
from cep.percolator.saved import _index_digest
from cep.safe_pickle import UnsafeState, loads
from patterns.errors import CepError
from patterns.rules import load_rules

REPO = Path(__file__).resolve().parents[2]
TRADING = REPO / "rules" / "trading.yaml"
BARS = REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl"


class Evil:
    """Pickles as a call of ``os.system`` that leaves a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class EvilEval:
    def __reduce__(self):
        return (eval, ("__import__('os').getcwd()",))


class Walk:
    """getattr from an admitted class towards its module's globals (a gadget chain)."""

    def __reduce__(self):
        return (getattr, (Percolator, "__init__"))


def durable_state(tmp_path: Path) -> tuple[Path, list[str]]:
    state = tmp_path / "state"
    args = ["run", str(TRADING), "--input", str(BARS), "--state", str(state),
            "--output", str(tmp_path / "out.jsonl"), "-q"]
    assert main(args) == 0
    return state, args


def test_a_checkpoint_with_a_crafted_snapshot_is_refused_and_runs_nothing(tmp_path: Path, capsys) -> None:
    state, args = durable_state(tmp_path)
    ck = read_checkpoint(str(state))
    assert ck is not None
    marker = tmp_path / "pwned"
    crafted = SNAPSHOT_MAGIC + bytes([SNAPSHOT_VERSION]) + pickle.dumps(Evil(marker))
    write_checkpoint(str(state), Checkpoint(ck.meta, crafted))  # checksum recomputed, as an attacker would
    capsys.readouterr()
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "refused to load posix.system" in err and "engine snapshot" in err
    assert not marker.exists()


def test_a_stealth_snapshot_inside_a_rule_state_is_refused_too(tmp_path: Path, capsys) -> None:
    """The real state with one extra entry that calls a command: a plain pickle would run it and
    resume with the right output; the restricted unpickler refuses the whole snapshot."""
    state, args = durable_state(tmp_path)
    ck = read_checkpoint(str(state))
    assert ck is not None
    body = pickle.loads(ck.snapshot[7:])  # our own, just written: the test's reference reading
    name = next(iter(body["rules"]))
    blob = body["rules"][name]
    rule_state = pickle.loads(blob[1:])
    marker = tmp_path / "pwned"
    rule_state["stealth"] = Evil(marker)
    body["rules"][name] = blob[:1] + pickle.dumps(rule_state, protocol=5)
    write_checkpoint(str(state), Checkpoint(ck.meta, ck.snapshot[:7] + pickle.dumps(body, protocol=5)))
    capsys.readouterr()
    assert main(args) == 3
    assert "refused to load posix.system" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("payload", [EvilEval(), Walk()], ids=["eval", "getattr-gadget"])
def test_operator_and_engine_snapshots_refuse_foreign_callables(payload: object) -> None:
    engine = Engine(load_rules(str(TRADING)))
    with pytest.raises(UnsafeState):
        engine.restore(SNAPSHOT_MAGIC + bytes([SNAPSHOT_VERSION]) + pickle.dumps(payload))
    op = next(iter(engine.operators.values()))
    version = op.snapshot()[:1]
    with pytest.raises(UnsafeState):
        op.restore(version + pickle.dumps({"x": payload}))


def test_real_snapshots_still_round_trip() -> None:
    engine = Engine(load_rules(str(TRADING)))
    rows = [json.loads(x) for x in BARS.read_text().splitlines()]
    first = engine.process(rows[:600]).matches
    again = Engine(load_rules(str(TRADING)))
    again.restore(engine.snapshot())
    rest = rows[600:]
    assert again.process(rest).matches + again.finish().matches == \
        engine.process(rest).matches + engine.finish().matches
    assert first  # the snapshot held live partial matches and emitted rows before


def crafted_index(tmp_path: Path, payload: bytes) -> Path:
    p = Percolator()
    p.register("a", "apple")
    path = tmp_path / "index.bin"
    p.save_index(path)
    header = orjson.loads(path.read_bytes().split(b"\n", 1)[0])
    header["bytes"] = len(payload)
    header["sha256"] = _index_digest(header, payload)  # a consistent forgery
    path.write_bytes(orjson.dumps(header) + b"\n" + payload)
    return path


def test_a_crafted_index_is_refused_and_runs_nothing(tmp_path: Path, capsys) -> None:
    marker = tmp_path / "pwned"
    path = crafted_index(tmp_path, pickle.dumps(Evil(marker)))
    with pytest.raises(CepError, match="refused to load posix.system.*nothing in it was run"):
        Percolator.load_index(path)
    docs = tmp_path / "d.jsonl"
    docs.write_text('{"id": 1, "text": "apple"}\n')
    assert main(["percolate", "--index", str(path), "--input", str(docs)]) == 2
    assert "refused to load posix.system" in capsys.readouterr().err
    assert not marker.exists()


def test_an_edited_index_header_is_caught_by_the_checksum(tmp_path: Path) -> None:
    p = Percolator()
    p.register("a", "apple pie")
    path = tmp_path / "index.bin"
    p.save_index(path)
    head, payload = path.read_bytes().split(b"\n", 1)
    header = orjson.loads(head)
    assert header["config"]["query"]["default_operator"] == "OR"
    header["config"]["query"]["default_operator"] = "AND"  # changes every answer
    path.write_bytes(orjson.dumps(header) + b"\n" + payload)
    with pytest.raises(CepError, match="damaged or cut short"):
        Percolator.load_index(path)


def test_a_saved_index_is_never_read_as_queries(tmp_path: Path, capsys) -> None:
    marker = tmp_path / "pwned"
    path = crafted_index(tmp_path, pickle.dumps(Evil(marker)))
    with pytest.raises(CepError, match="this is a saved index.*Percolator.load_index"):
        Percolator.load(path)
    docs = tmp_path / "d.jsonl"
    docs.write_text('{"id": 1, "text": "apple"}\n')
    assert main(["percolate", "--queries", str(path), "--input", str(docs)]) == 2
    assert "is a saved index (--save-index), not queries: pass it with --index" in capsys.readouterr().err
    assert not marker.exists()


def test_the_restricted_unpickler_admits_plain_values_and_numpy() -> None:
    import numpy as np

    value = {"a": [1, 2.5, None, True], "b": (b"x", frozenset({1})), "c": np.arange(5, dtype=np.int64),
             "d": np.array(["x", None], dtype=object), "e": np.float64(1.5)}
    got = loads(pickle.dumps(value, protocol=5))
    assert got["a"] == value["a"] and got["b"] == value["b"] and got["e"] == 1.5
    assert got["c"].tolist() == [0, 1, 2, 3, 4] and got["d"].tolist() == ["x", None]
