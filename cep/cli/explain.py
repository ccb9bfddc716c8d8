"""``cep explain``: replay the input and tell, row by row, why a rule matched or did not for one key.

Pattern rules are explained by :mod:`cep.explain.pattern`; analytics and search rules by
``cep.explain.analytics`` and ``cep.explain.search``, imported only when such a rule is explained.
The input is read exactly as ``cep run`` reads it (:func:`cep.cli.inputs.input_batches`: several
``--input``s merged in event time, ``NAME=PATH`` streams, ``--time-unit``), and each rule gets the
events ``cep run`` would give it (its ``FROM`` stream).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable

import numpy as np

from cep.cli.exit_codes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from patterns.errors import CepError, RuleErrors

__all__ = ["add_arguments", "cmd_explain", "parse_key", "parse_time_bound", "concat_batches", "rule_events",
           "rule_key_columns"]

EPILOG = ("Exit codes: 0 explained (whether or not the rule matched); 2 usage or rule errors (a rule file with "
          "errors, an unknown --rule, a --key the rule has not or the input lacks, bad --key, --from after --to, "
          "a missing input file); 3 runtime failure.")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("rules", help="rule file (.yaml/.yml or .sql)")
    p.add_argument("--input", "-i", action="append", required=True, metavar="[NAME=]PATH",
                   help="event file, read as 'cep run' reads it (JSON lines, .csv/.tsv, .parquet, .log); repeat "
                   "for several, merged in event time; NAME=PATH names a stream")
    p.add_argument("--rule", "-r", action="append", metavar="NAME",
                   help="the rule to explain (repeat for several; default: every enabled rule the --key fits)")
    p.add_argument("--key", "-k", metavar="K", help="the key to explain: VALUE for a rule keyed by one column "
                   "(PARTITION BY symbol: --key AAPL), COLUMN=VALUE[,COLUMN=VALUE...] for several; "
                   "left out for a rule without a key")
    p.add_argument("--from", dest="t_from", metavar="TIME", help="show rows from this event time on (ISO-8601 "
                   "or epoch ms; every row is still replayed)")
    p.add_argument("--to", dest="t_to", metavar="TIME", help="show rows up to this event time (inclusive)")
    p.add_argument("--query", "-q", action="append", metavar="ID", dest="queries",
                   help="search rules: also explain this query on every document, though it neither matched "
                        "nor was a candidate (repeat for several)")
    p.add_argument("--json", action="store_true", help="one JSON line per explained rule (for tools)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colours in the table (auto: when stdout is a terminal and NO_COLOR is unset)")
    p.add_argument("--input-format", choices=("jsonl", "csv", "parquet", "log"), default=None,
                   help="input format (default: from each file's ending)")
    p.add_argument("--time-field", help="event-time field used to merge several inputs "
                   "(default: the rules' ORDER BY column)")
    p.add_argument("--time-unit", choices=("s", "ms", "us", "ns"), default=None,
                   help="unit of numeric event times for every rule (as cep run --time-unit)")
    p.add_argument("--queries-root", action="append", metavar="DIR",
                   help="a folder whose files a search rule's queries_file may name (as cep run)")


# ------------------------------------------------------------------ arguments


def parse_key(text: str | None) -> str | dict[str, str] | None:
    """``--key``: a bare value (str), ``COLUMN=VALUE,...`` (dict), or None when not given.

    Example:
        >>> parse_key("AAPL"), parse_key("sym=AAPL,venue=X")
        ('AAPL', {'sym': 'AAPL', 'venue': 'X'})

    Raises:
        ValueError: a list that mixes COLUMN=VALUE with bare parts, an empty column, a column twice.
    """
    if text is None:
        return None
    if "=" not in text:
        if not text:
            raise ValueError("bad --key '': expected VALUE or COLUMN=VALUE[,COLUMN=VALUE...]")
        return text
    out: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name):
            raise ValueError(f"bad --key {text!r}: {part!r} is not COLUMN=VALUE; expected VALUE (one key column) "
                             "or COLUMN=VALUE[,COLUMN=VALUE...]")
        if name in out:
            raise ValueError(f"bad --key {text!r}: column {name!r} is given twice")
        out[name] = value
    return out


def parse_time_bound(text: str | None, option: str) -> int | None:
    """``--from`` / ``--to``: epoch ms from ISO-8601 text or a number of milliseconds.

    Example:
        >>> parse_time_bound("2017-03-01", "--from"), parse_time_bound("1000", "--to")
        (1488326400000, 1000)
    """
    if text is None:
        return None
    from cep.events import parse_times

    raw: Any = text.strip()
    if re.fullmatch(r"-?\d+", raw):
        raw = int(raw)
    ms, ok, why = parse_times(np.array([raw], dtype=object), "ms")
    if not ok[0]:
        raise ValueError(f"{option} {text!r} is not a time ({why[0] or 'unreadable'}); give ISO-8601 "
                         "(2017-03-01 or 2017-03-01T09:30:00Z) or epoch milliseconds")
    return int(ms[0])


def rule_key_columns(rule: Any) -> list[str] | None:
    """The columns that key a rule (PARTITION BY, GROUP BY keys); a search rule's document id field;
    None when unknown."""
    if rule.kind == "pattern":
        return list(rule.compiled.statement.partition_by)
    spec = rule.spec
    if rule.kind == "analytics":
        keys = getattr(spec, "keys", None)
        return [str(k) for k in keys] if keys is not None else None
    if rule.kind == "search":
        return [spec.id_field] if getattr(spec, "id_field", None) else []
    return None


def _key_for(rule: Any, key: str | dict[str, str] | None) -> dict[str, Any] | None:
    """The --key as a mapping of this rule's key columns, or None when it does not fit the rule."""
    cols = rule_key_columns(rule)
    if cols is None:
        return None
    if key is None:
        return {} if not cols or rule.kind == "search" else None
    if isinstance(key, str):
        return {cols[0]: key} if len(cols) == 1 else None
    return dict(key) if set(key) == set(cols) else None


def _describe_key(rule: Any) -> str:
    """``is keyed by symbol (--key VALUE)``: what a rule's key is and how to give it."""
    cols = rule_key_columns(rule) or []
    if not cols:
        return "has no key (leave --key out)"
    if len(cols) == 1:
        return f"is keyed by {cols[0]} (--key VALUE)"
    return f"is keyed by {', '.join(cols)} (--key {','.join(c + '=...' for c in cols)})"


# ------------------------------------------------------------------ events


def concat_batches(batches: list[Any]) -> Any:
    """Several EventBatches as one (columns united, a field missing from a batch NULL there).

    Example:
        >>> from cep.events import batch_from_records
        >>> b = concat_batches([batch_from_records([{"a": 1}]), batch_from_records([{"a": 2, "b": "x"}])])
        >>> b.n, b.column("a").tolist(), b.column("b").tolist(), b.line_of(1)
        (2, [1, 2], [None, 'x'], 1)
    """
    from cep.events import EventBatch

    batches = [b for b in batches if b.n or b.bad]
    if len(batches) == 1:
        return batches[0]
    n = sum(b.n for b in batches)
    names: dict[str, None] = {}
    for b in batches:
        names.update(dict.fromkeys(b.columns))
    cols: dict[str, np.ndarray] = {}
    for name in names:
        parts = [b.columns[name] if name in b.columns else np.full(b.n, None, dtype=object) for b in batches]
        kinds = {p.dtype.kind for p in parts if len(p)}
        cols[name] = np.concatenate(parts) if len(kinds) <= 1 else np.concatenate([p.astype(object) for p in parts])
    lines = np.concatenate([np.asarray([b.line_of(i) for i in range(b.n)], dtype=np.int64) for b in batches]) if n \
        else np.zeros(0, dtype=np.int64)
    epoch: dict[str, Any] = {}
    for name in {k for b in batches for k in b.epoch_ms}:
        epoch[name] = np.concatenate([
            np.full(b.n, True) if b.epoch_ms.get(name) is True else
            (np.asarray(b.epoch_ms[name], dtype=bool) if name in b.epoch_ms else np.zeros(b.n, dtype=bool))
            for b in batches])
    sources = {b.source for b in batches}
    return EventBatch(cols, n, lines, sources.pop() if len(sources) == 1 else "merged input",
                      [x for b in batches for x in b.bad], epoch)


def rule_events(rule: Any, batch: Any, streams: set[str]) -> Any:
    """The events ``cep run`` gives ``rule``: its FROM stream's when the input names that stream."""
    tags = batch.columns.get("stream")
    if rule.stream in streams and tags is not None:
        return batch.take(np.flatnonzero(tags == rule.stream))
    return batch


def _explainer(kind: str) -> Callable[..., Any]:
    """The explain function of a rule kind, ``cep.explain.<kind>.explain_<kind>``, imported when a rule
    of that kind is explained; ImportError when its module is not there (by name, so that a build
    without it still runs the others)."""
    import importlib

    if kind not in ("pattern", "analytics", "search"):
        raise ImportError(kind)
    module = importlib.import_module(f"cep.explain.{kind}")
    fn: Callable[..., Any] = getattr(module, f"explain_{kind}")
    return fn


# ------------------------------------------------------------------ the command


def _fail(message: str) -> int:
    print(f"cep explain: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_explain(args: argparse.Namespace) -> int:
    from cep.cli.inputs import _parse_inputs, input_batches
    from cep.engine import with_time_unit
    from cep.explain import render
    from cep.explain.model import ExplainError
    from cep.explain.rows import key_rows, refuse_joined
    from patterns.files import command_line_roots
    from patterns.rules import load_rules

    try:
        key = parse_key(args.key)
        t_from = parse_time_bound(args.t_from, "--from")
        t_to = parse_time_bound(args.t_to, "--to")
    except ValueError as e:
        return _fail(str(e))
    if t_from is not None and t_to is not None and t_from > t_to:
        return _fail(f"--from {args.t_from} is after --to {args.t_to}: nothing to show")
    try:
        rules = with_time_unit(load_rules(args.rules, queries_roots=command_line_roots(args.queries_root)),
                               args.time_unit)
    except RuleErrors as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    by_name = {r.name: r for r in rules}
    if args.rule:
        unknown = [n for n in args.rule if n not in by_name]
        if unknown:
            return _fail(f"no rule named {unknown[0]!r} in {args.rules}; its rules are {', '.join(by_name) or 'none'}")
        chosen = [by_name[n] for n in dict.fromkeys(args.rule)]
        for r in chosen:
            if _key_for(r, key) is None:
                given = "no --key" if key is None else f"--key {args.key}"
                return _fail(f"rule {r.name!r} {_describe_key(r)}; {given} does not fit it")
    else:
        chosen = [r for r in rules if r.kind != "search" and _key_for(r, key) is not None]
        if not chosen:
            listing = "; ".join(f"{r.name} {_describe_key(r)}" for r in rules)
            given = "no --key" if key is None else f"--key {args.key}"
            return _fail(f"no rule of {args.rules} fits {given} ({listing}); name one with --rule")
    try:
        for r in chosen:
            refuse_joined(r)
    except ExplainError as e:
        return _fail(str(e))
    inputs = _parse_inputs(args.input)
    for _, path in inputs:
        if path == "-":
            return _fail("explain replays a file: standard input ('-') cannot be read twice; save it to a file first")
        if not os.path.exists(path):
            return _fail(f"input file not found: {path}")
        if os.path.isdir(path):
            return _fail(f"{path} is a directory; give the event files")
    named = {n for n, _ in inputs if n}
    try:
        batches = []
        for b, stream in input_batches(rules, inputs, args.time_field, args.input_format, 8192):
            if stream is not None and "stream" not in b.columns:
                b.columns["stream"] = np.full(b.n, stream, dtype=object)
            batches.append(b)
    except ValueError as e:
        return _fail(str(e))
    batch = concat_batches(batches) if batches else None
    if batch is None or batch.n == 0:
        return _fail(f"no event in {', '.join(p for _, p in inputs)}")
    explanations = []
    for r in chosen:
        events = rule_events(r, batch, named)
        rule_key = _key_for(r, key)
        assert rule_key is not None
        if rule_key:
            try:
                key_rows(events, rule_key_columns(r) or [], rule_key, f"rule {r.name!r}")
            except ExplainError as e:  # implicit choice: a rule that never saw the key is left out
                if not args.rule and len(chosen) > 1:
                    print(f"cep explain: {e}; skipped", file=sys.stderr)
                    continue
                return _fail(str(e))
        try:
            explain = _explainer(r.kind)
        except ImportError:
            return _fail(f"rule {r.name!r} is an {r.kind} rule; explaining {r.kind} rules is not available in "
                         f"this build (cep.explain.{r.kind} is missing); pattern rules can be explained")
        try:
            extra = {"queries": args.queries} if r.kind == "search" and args.queries else {}
            explanations.append(explain(r, events, rule_key, t_from, t_to, **extra))
        except ExplainError as e:
            return _fail(str(e))
        except CepError as e:
            print(f"cep explain: rule {r.name!r}: {e}", file=sys.stderr)
            return EXIT_RUNTIME
    if not explanations:
        return _fail("no chosen rule saw the key in the input")
    times = {r.name: (r.compiled.statement.order_by if r.compiled is not None else getattr(r.spec, "time_column", None))
             for r in chosen}
    render.write(explanations, args.json, sys.stdout, args.color, times)
    return EXIT_OK
