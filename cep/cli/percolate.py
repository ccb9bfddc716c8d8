"""The ``cep percolate`` subcommand: match JSON-lines documents against JSON-lines queries."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import orjson

from cep.json_exact import dumps_exact, loads_exact
from cep.percolator import DocumentMatches, Percolator, PercolatorConfig, saved_config
from patterns.errors import CepError, CepSyntaxError, caret_line, short_repr
from patterns.files import MAX_QUERIES_FILE_BYTES, FileRefused, check_regular_file, strip_bom
from patterns.lucene import QueryConfig

__all__ = ["add_arguments", "run", "sort_ids", "MAX_INDEX_FILE_BYTES"]

#: The largest saved index ``--queries`` reads (plain or saved queries: patterns.files.MAX_QUERIES_FILE_BYTES).
MAX_INDEX_FILE_BYTES = 2 << 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``percolate`` options to ``parser``.

    Example:
        >>> p = argparse.ArgumentParser(prog="cep percolate"); add_arguments(p)
        >>> a = p.parse_args(["--queries", "q.jsonl", "--input", "d.jsonl", "--default-field",
        ...                   "title", "body", "--default-field", "tags", "--default-operator",
        ...                   "and"])
        >>> a.default_fields, a.default_operator, a.output
        (['title', 'body', 'tags'], 'AND', '-')
    """
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--queries", metavar="QUERIES.jsonl",
                        help='query lines: {"id": ..., "query": "...", "metadata": {...}}; or '
                        "a file written by Percolator.save, which brings its own settings")
    source.add_argument("--index", metavar="INDEX",
                        help="a built index written by --save-index (Percolator.save_index): starts "
                        "without parsing or building; read only from a file you made (it holds "
                        "Python objects, loaded admitting the percolator's own classes only)")
    parser.add_argument("--input", "-i", required=True, metavar="DOCS.jsonl",
                        help="document lines: JSON objects with an 'id' ('-' reads stdin)")
    parser.add_argument("--output", "-o", default="-", metavar="OUT",
                        help="where to write one result line per document ('-': stdout)")
    parser.add_argument("--default-field", nargs="+", action="extend", dest="default_fields",
                        metavar="F", help="fields searched by unqualified terms (one or more; "
                        "default: every string field except 'id')")
    parser.add_argument("--default-operator", type=str.upper, choices=["OR", "AND"],
                        default=None, help="operator between clauses without one (default OR)")
    parser.add_argument("--highlight", action="store_true",
                        help='add "spans": {query id: [[field, start, end], ...]} to each line')
    parser.add_argument("--batch-size", type=int, default=1000, metavar="N",
                        help="documents percolated together (default 1000)")
    parser.add_argument("--save-index", metavar="INDEX", default=None,
                        help="also write the built query index to INDEX; --queries INDEX then "
                        "starts without parsing or building (Percolator.save_index)")


def sort_ids(ids: list[Any]) -> list[Any]:
    """Query ids sorted: numbers first (by value), then strings, then anything else.

    Example:
        >>> sort_ids(["b", 10, "a", 2])
        [2, 10, 'a', 'b']
    """
    def key(x: Any) -> tuple[int, Any]:
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return (0, x)
        if isinstance(x, str):
            return (1, x)
        return (2, repr(x))

    return sorted(ids, key=key)


@contextmanager
def _open_out(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        out: Any = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else _TextAsBytes(sys.stdout)
        yield out
        return
    with open(path, "wb") as fh:
        yield fh


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that flushing it at exit does not raise a second broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout without a descriptor
        pass


class _TextAsBytes:
    """Lets us write bytes to a text stream (pytest's capsys replaces stdout with one)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _count(n: int, word: str, plural: str | None = None) -> str:
    """``1 query``, ``2 queries``: a count with its noun."""
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def _load_queries(path: str, perc: Percolator, skip_header: bool) -> tuple[int, int]:
    loaded = rejected = 0
    first_line: dict[Any, int] = {}
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            raw = strip_bom(raw)  # on any line: a file cat'ed after another brings its own
            if not raw.strip() or (lineno == 1 and skip_header):
                continue
            where = f"{path}:{lineno}"
            try:
                row = loads_exact(raw)  # query ids past 64 bits exact, as document ids are
            except orjson.JSONDecodeError as exc:
                _warn(f"{where}: skipped query line: invalid JSON ({exc})")
                rejected += 1
                continue
            problem = None
            if not isinstance(row, dict):
                problem = f"expected a JSON object, got {type(row).__name__}"
            elif "id" not in row or not isinstance(row["id"], (str, int)) or isinstance(
                row["id"], bool
            ):
                problem = "needs an 'id' (a string or an integer)"
            elif not isinstance(row.get("query"), str):
                problem = "needs a 'query' string"
            elif not isinstance(row.get("metadata", {}), dict):
                problem = "'metadata' must be a JSON object"
            elif row["id"] in first_line:
                problem = (f"duplicate query id {short_repr(row['id'])} (first on line "
                           f"{first_line[row['id']]}); this line is ignored")
            if problem is not None:
                _warn(f"{where}: skipped query line: {problem}")
                rejected += 1
                continue
            try:
                perc.register(row["id"], row["query"], row.get("metadata") or {})
            except CepSyntaxError as exc:
                for e in exc.errors:
                    _warn(f"{where}: skipped query {short_repr(row['id'])}: query column {e.column}: "
                          f"{e.message}\n{caret_line(e.text, e.line, e.column, e.width)}")
                rejected += 1
                continue
            first_line[row["id"]] = lineno
            loaded += 1
    return loaded, rejected


def _documents(path: str, skipped: list[int]) -> Iterator[tuple[int, dict[str, Any]]]:
    fh = sys.stdin.buffer if path == "-" else open(path, "rb")
    name = "<stdin>" if path == "-" else path
    try:
        for lineno, raw in enumerate(fh, 1):
            raw = strip_bom(raw)
            if not raw.strip():
                continue
            try:
                doc = loads_exact(raw)  # integers past 64 bits exact, as cep run reads events
            except orjson.JSONDecodeError as exc:
                _warn(f"{name}:{lineno}: skipped document: invalid JSON ({exc})")
                skipped[0] += 1
                continue
            if not isinstance(doc, dict):
                _warn(f"{name}:{lineno}: skipped document: expected a JSON object, "
                      f"got {type(doc).__name__}")
                skipped[0] += 1
                continue
            if "id" not in doc:
                _warn(f"{name}:{lineno}: skipped document: it has no 'id'")
                skipped[0] += 1
                continue
            yield lineno, doc
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def _line(doc: dict[str, Any], res: DocumentMatches, highlight: bool) -> bytes:
    out: dict[str, Any] = {"id": doc["id"], "matches": sort_ids(list(res.ids))}
    if highlight:
        out["spans"] = {str(qid): [list(s) for s in res.spans.get(qid, ())]
                        for qid in out["matches"]}
    return dumps_exact(out) + b"\n"  # a document id past 64 bits: its exact digits


def run(args: argparse.Namespace) -> int:
    """Run ``cep percolate``; returns the exit code (2 when no query could be loaded).

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> q, i = os.path.join(d, "q.jsonl"), os.path.join(d, "d.jsonl")
        >>> _ = open(q, "w").write('{"id": "q1", "query": "apple"}\\n')
        >>> _ = open(i, "w").write('{"id": 1, "text": "Apple pie"}\\n')
        >>> p = argparse.ArgumentParser(); add_arguments(p)
        >>> run(p.parse_args(["--queries", q, "--input", i]))  # doctest: +NORMALIZE_WHITESPACE
        {"id":1,"matches":["q1"]}
        0
    """
    if args.batch_size < 1:
        _warn(f"cep percolate: --batch-size must be at least 1, got {args.batch_size}")
        return 2
    source = args.index or args.queries
    try:
        # a regular file before anything opens it (a FIFO would hang, a device never end) ...
        check_regular_file(source, sys.maxsize, "saved index" if args.index else "queries file", "")
        saved = saved_config(source)  # reads one line, at most 64 MiB
        # ... and under the limit of its kind: a saved index is about six times its queries
        index = saved is not None and saved[0] == "index"
        check_regular_file(source, MAX_INDEX_FILE_BYTES if index else MAX_QUERIES_FILE_BYTES,
                           "saved index" if index else "queries file",
                           "split the queries over several files and runs")
    except FileRefused as exc:
        _warn(f"cep percolate: {exc}")
        return 2
    except OSError as exc:
        _warn(f"cep percolate: cannot read queries: {exc}")
        return 2
    except CepError as exc:
        _warn(f"cep percolate: cannot load the queries: {exc}")
        return 2
    try:
        if saved is not None and (args.default_fields or args.default_operator):
            _warn(f"{source} was written by Percolator.save or save_index and brings its "
                  "own settings: drop --default-field / --default-operator (or give the "
                  "queries as plain JSON lines)")
            return 2
        if args.index:
            perc = Percolator.load_index(args.index)
            loaded, rejected = len(perc), 0
        elif saved is not None and saved[0] == "index":
            _warn(f"{args.queries} is a saved index (--save-index), not queries: pass it with --index")
            return 2
        else:
            config = saved[1] if saved is not None else PercolatorConfig(query=QueryConfig(
                default_operator=args.default_operator or "OR",
                default_fields=tuple(args.default_fields) if args.default_fields else None))
            perc = Percolator(config)
            loaded, rejected = _load_queries(args.queries, perc, saved is not None)
    except OSError as exc:
        _warn(f"cep percolate: cannot read queries: {exc}")
        return 2
    except CepError as exc:
        _warn(f"cep percolate: cannot load the queries: {exc}")
        return 2
    if loaded == 0:
        _warn(f"{source}: no query could be loaded ({rejected} rejected); nothing to do")
        return 2
    if args.save_index:
        try:
            perc.save_index(args.save_index)
        except (OSError, CepError) as exc:
            _warn(f"cep percolate: cannot write the index: {exc}")
            return 2
    skipped = [0]
    n_docs = n_matches = n_errors = 0
    try:
        docs_iter = _documents(args.input, skipped)
        with _open_out(args.output) as out:
            batch: list[tuple[int, dict[str, Any]]] = []

            def flush() -> None:
                nonlocal n_docs, n_matches, n_errors
                result = perc.percolate_batch([d for _, d in batch], highlight=args.highlight)
                for (lineno, doc), res in zip(batch, result.results):
                    for qid, reason in res.errors.items():
                        _warn(f"{args.input}:{lineno}: query {qid!r} could not be evaluated "
                              f"({reason}); counted as no match")
                    out.write(_line(doc, res, args.highlight))
                n_docs += len(batch)
                n_matches += result.stats.matches
                n_errors += result.stats.errors
                batch.clear()

            for item in docs_iter:
                batch.append(item)
                if len(batch) >= args.batch_size:
                    flush()
            if batch:
                flush()
            out.flush()
    except BrokenPipeError:  # the reader went away (cep percolate ... | head): stop, not an error
        _silence_stdout()
        return 0
    except OSError as exc:
        _warn(f"cep percolate: cannot read documents or write results: {exc}")
        return 2
    _warn(f"cep percolate: {_count(loaded, 'query', 'queries')} loaded, {rejected:,} rejected; "
          f"{_count(n_docs, 'document')}, {skipped[0]:,} skipped; {_count(n_matches, 'match', 'matches')}, "
          f"{_count(n_errors, 'query error')}")
    return 0
