"""Coverage-guided fuzzing of the parsers with atheris (by hand, not in CI).

    pip install atheris
    python tests/reliability/fuzz_parsers.py sql    -atheris_runs=200000 [corpus_dir]
    python tests/reliability/fuzz_parsers.py rules  -max_total_time=600
    python tests/reliability/fuzz_parsers.py lucene -max_total_time=600

Each input must give a result or our own positioned error (tests/reliability/fuzzing.py:
check_contract); anything else, a hang (-timeout, default 2 s here) or a crash stops the run and
libFuzzer writes the input to crash-*/timeout-*. Add such inputs to REGRESSIONS in
tests/reliability/test_fuzz_parsers.py once fixed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SEED_SQL = (
    "SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES FIRST(A.px) AS a, "
    "MATCH_NUMBER() AS m ONE ROW PER MATCH AFTER MATCH SKIP TO LAST B PATTERN (A B+? (C | D){1,3} PERMUTE(E, F)) "
    "SUBSET U = (A, B) WITHIN INTERVAL '10' SECOND DEFINE B AS B.px > PREV(B.px) AND COUNT(U.*) < 5)"
)


def target(which: str):
    """The parser under test, imported under atheris's coverage instrumentation."""
    import atheris

    with atheris.instrument_imports():
        from patterns import lucene, match_recognize, rules, sql_lexer  # noqa: F401
    if which == "sql":
        from patterns.rules import parse_rule_text

        return parse_rule_text
    if which == "rules":
        return rules.parse_rules
    if which == "lucene":
        return lucene.compile_query
    sys.exit(f"unknown target {which!r}: expected sql, rules or lucene")


def main() -> None:
    import atheris

    which = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "sql"
    fn = target(which)  # first: the parsers must be imported under instrumentation
    from tests.reliability.fuzzing import check_contract

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        text = fdp.ConsumeUnicodeNoSurrogates(len(data))
        if which == "sql" and data and data[0] & 1:
            text = SEED_SQL[: len(text) % len(SEED_SQL)] + text  # start inside a valid statement
        check_contract(fn, text)

    if not any(a.startswith("-timeout") for a in sys.argv):
        sys.argv.append("-timeout=2")
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
