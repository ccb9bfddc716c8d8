"""CEP_NO_NUMBA turns every compiled path off, and the runs give the same rows without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from cep import batch_dfa, json_flat
from cep.compiled import numba_allowed
from cep.percolator import tokens

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value, allowed", [("1", False), ("yes", False), ("0", True), ("", True)])
def test_one_switch_turns_every_compiled_path_off(monkeypatch, value, allowed):
    monkeypatch.setenv("CEP_NO_NUMBA", value)
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    assert numba_allowed() is allowed
    assert json_flat.flat_enabled() is allowed
    assert batch_dfa._numba_ok() is allowed
    monkeypatch.setattr(tokens, "_COMPILED", [])  # the percolator decides once per process
    assert (tokens._kernels() is not None) is allowed


def test_cep_run_gives_the_same_rows_with_and_without_compiled_paths(monkeypatch, tmp_path):
    from cep.cli import main

    rules, bars = str(REPO / "rules" / "trading.yaml"), str(REPO / "rules" / "data" / "sp500_daily_2017_sample.jsonl")
    monkeypatch.setenv("CEP_FLAT_JSON", "on")
    outputs = []
    for value in ("", "1"):
        monkeypatch.setenv("CEP_NO_NUMBA", value)
        out = tmp_path / f"out{value}.jsonl"
        assert main(["run", rules, "--input", bars, "-q", "-o", str(out)]) == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and outputs[0].count(b"\n") == 48
