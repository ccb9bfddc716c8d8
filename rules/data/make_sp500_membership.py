"""Writes the S&P 500 membership changelog and the 2017 bars of ten stocks, from the shared data sets.

``sp500_companies.csv`` (the constituents list, ODC-PDDL; ``../shared/data/SOURCES.md``) says
when each of today's members was added to the index (``Date added``). Read as a changelog, one
upsert per company valid from that day, it is a table of index membership over time: a stock is
in the table from the day it was added, and absent before. The list knows no removals (a company
that left the index is not in it at all) and no earlier sector: every row carries today's GICS
classification, from the day of its addition on.

Rows of the changelog: ``date`` (the ``Date added``, ISO; named as the bars' time field so that
``cep run`` merges the two inputs in event time on it), ``Symbol``, ``Security``, ``GICS Sector``
and ``GICS Sub-Industry``; sorted by ``date``, then ``Symbol``. No value is changed.

The bundled sample (``rules/sp500.yaml``) is 2017: the daily bars of four Health Care stocks
(IDXX, INCY, ALGN, RMD) and four Real Estate stocks (MAA, REG, ARE, SBAC), and of AAPL and AMD,
eight of them added to the index during 2017 (or, MAA, just before), with their ten changelog
rows. Bars as in ``sp500_daily_2017_sample.jsonl``: ``symbol``, ``date``, ``open``, ``high``,
``low``, ``close``, ``volume``, sorted by date, then symbol (rows with an empty price left out)::

    python3 rules/data/make_sp500_membership.py                      # rewrites the two sample files
    python3 rules/data/make_sp500_membership.py --full membership.jsonl  # the whole list's changelog

``tests/cep/test_sp500_membership.py`` checks the committed files against this script when
``../shared/data`` is there.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

__all__ = ["SAMPLE_SYMBOLS", "SAMPLE_YEAR", "membership_changelog", "daily_bars", "dumps", "main"]

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "data"  # ../shared/data from the repository's root
SAMPLE_SYMBOLS = ("AAPL", "AMD", "ALGN", "IDXX", "INCY", "RMD", "ARE", "MAA", "REG", "SBAC")
SAMPLE_YEAR = "2017"
COLUMNS = ("Security", "GICS Sector", "GICS Sub-Industry")


def membership_changelog(companies_csv: str | Path, symbols: tuple[str, ...] | None = None) -> list[dict]:
    """One upsert per company of the constituents list (or of ``symbols``), valid from its ``Date added``.

    Example:
        >>> import io, tempfile, os
        >>> text = "Symbol,Security,GICS Sector,GICS Sub-Industry,Headquarters Location,Date added,CIK,Founded\\n"
        >>> text += 'B,Bee,Energy,Oil,"X, Y",2017-03-20,1,1990\\nA,Ay,Utilities,Power,Z,1957-03-04,2,1900\\n'
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = os.path.join(d, "c.csv"); _ = open(p, "w").write(text)
        ...     [(r["date"], r["Symbol"]) for r in membership_changelog(p)]
        [('1957-03-04', 'A'), ('2017-03-20', 'B')]
    """
    with open(companies_csv, newline="") as f:
        rows = [r for r in csv.DictReader(f) if symbols is None or r["Symbol"] in symbols]
    out = [{"date": r["Date added"], "Symbol": r["Symbol"], **{c: r[c] for c in COLUMNS}} for r in rows]
    bad = [r["Symbol"] for r in out if len(r["date"]) != 10 or r["date"][4] != "-"]
    if bad:  # the join orders by these: a row without an ISO date would be an error row
        raise ValueError(f"{companies_csv}: 'Date added' is not an ISO date (YYYY-MM-DD) for {', '.join(bad)}")
    return sorted(out, key=lambda r: (r["date"], r["Symbol"]))


def daily_bars(ohlcv_csv: str | Path, symbols: tuple[str, ...], year: str) -> list[dict]:
    """The bars of ``symbols`` in ``year``, typed as the bundled samples are, by date then symbol."""
    out = []
    with open(ohlcv_csv, newline="") as f:
        for r in csv.DictReader(f):
            if r["Name"] in symbols and r["date"].startswith(year) and all(r[k] for k in ("open", "close")):
                out.append({"symbol": r["Name"], "date": r["date"], "open": float(r["open"]),
                            "high": float(r["high"]), "low": float(r["low"]), "close": float(r["close"]),
                            "volume": int(r["volume"])})
    return sorted(out, key=lambda r: (r["date"], r["symbol"]))


def dumps(rows: list[dict]) -> str:
    """The file's text: one JSON object per line, keys in a fixed order."""
    return "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    """Write the bundled samples (or, with ``--full``, the whole list's changelog)."""
    import argparse

    p = argparse.ArgumentParser(description="Derive the S&P 500 membership changelog from the constituents list.")
    p.add_argument("--data", default=str(SHARED), help=f"folder of the shared data sets (default {SHARED})")
    p.add_argument("--full", metavar="PATH", help="write the changelog of every company in the list to PATH instead")
    args = p.parse_args(argv)
    companies, ohlcv = Path(args.data) / "sp500_companies.csv", Path(args.data) / "sp500_daily_ohlcv_2013_2018.csv"
    if args.full:
        rows = membership_changelog(companies)
        Path(args.full).write_text(dumps(rows))
        print(f"{args.full}: {len(rows)} additions, {rows[0]['date']} to {rows[-1]['date']}", file=sys.stderr)
        return 0
    changes = membership_changelog(companies, SAMPLE_SYMBOLS)
    (HERE / "sp500_membership_sample.jsonl").write_text(dumps(changes))
    bars = daily_bars(ohlcv, SAMPLE_SYMBOLS, SAMPLE_YEAR)
    (HERE / "sp500_daily_2017_members_sample.jsonl").write_text(dumps(bars))
    print(f"{len(changes)} changelog rows, {len(bars)} bars", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
