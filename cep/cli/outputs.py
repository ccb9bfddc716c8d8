"""Where ``cep run`` writes rows: JSON lines as they come, CSV or Parquet at the end."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from patterns.errors import CepError

__all__ = ["OutputWriter"]


def _json_default(v: Any):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    return str(v)


class OutputWriter:
    """Writes rows as JSON lines (streaming), CSV or Parquet (written on close)."""

    def __init__(self, target: str, fmt: str | None = None):
        self.target = target
        if fmt is None:
            suffix = Path(target).suffix.lower() if target != "-" else ""
            fmt = {".csv": "csv", ".parquet": "parquet"}.get(suffix, "jsonl")
        self.fmt = fmt
        self.rows: list[dict] = []
        self.count = 0
        self.live = False  # a live input (standard input): JSON lines files are flushed after every write too
        if fmt == "jsonl":
            self.fh = sys.stdout.buffer if target == "-" else open(target, "wb")
        elif target == "-" and fmt == "parquet":
            raise CepError("Parquet output needs a file: pass --output FILE.parquet")
        elif target != "-":
            open(target, "wb").close()  # CSV and Parquet are written at the end: fail now, not then

    def write(self, rows: Iterable[dict]) -> None:
        from cep.durable import (  # survive events nested deeper than orjson writes
            dumps_row,
            dumps_rows,
        )

        if self.fmt == "jsonl":
            rows = list(rows)
            self.count += len(rows)
            self.fh.write(dumps_rows(rows) if len(rows) > 1 else b"".join(map(dumps_row, rows)))
        else:
            for row in rows:
                self.count += 1
                self.rows.append(row)
        if self.fmt == "jsonl" and (self.target == "-" or self.live):
            self.fh.flush()

    def close(self) -> None:
        if self.fmt == "jsonl":
            if self.target != "-":
                self.fh.close()
            return
        cols: dict[str, None] = {}
        for r in self.rows:
            for k in r:
                cols.setdefault(k, None)
        if self.fmt == "csv":
            import csv

            fh = sys.stdout if self.target == "-" else open(self.target, "w", newline="")
            w = csv.DictWriter(fh, fieldnames=list(cols))
            w.writeheader()
            for r in self.rows:
                # sketches (HLL_SKETCH) as base64 text, as in JSON lines; Parquet keeps them binary
                w.writerow({k: base64.b64encode(v).decode("ascii") if isinstance(v, (bytes, bytearray)) else v
                            for k, v in r.items()})
            if fh is not sys.stdout:
                fh.close()
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in self.rows])
            pq.write_table(table, self.target)



def _open_outputs(args) -> tuple[OutputWriter, OutputWriter | None, OutputWriter | None, OutputWriter | None] | str:
    """The --output, --late, --errors and --timeouts writers, or what is wrong with one of them."""
    opened: list[OutputWriter | None] = []
    for option, target, fmt in (("--output", args.output, args.output_format),
                                ("--late", args.late, "jsonl"), ("--errors", args.errors, "jsonl"),
                                ("--timeouts", getattr(args, "timeouts", None), "jsonl")):
        try:
            opened.append(OutputWriter(target, fmt) if target is not None else None)
        except OSError as e:
            return (f"cannot write {option} {target!r}: {e.strerror or e}; expected a file in an existing, "
                    "writable folder, or '-' for stdout")
        except CepError as e:
            return str(e)
    out, late, errs, timeouts = opened
    assert out is not None
    return out, late, errs, timeouts

