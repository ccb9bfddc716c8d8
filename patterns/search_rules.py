"""Search rules: parse and check a rule file's ``kind: search`` rule (Lucene queries over a document stream) into a spec.

A search rule percolates the documents of one input stream against standing Lucene queries and
emits one row per (document, matching query)::

    rules:
      - name: company_mentions
        kind: search
        from: news                         # the input stream
        time_field: date                   # optional: late documents go to the late output
        default_fields: [title]            # fields bare terms search
        highlight: true                    # add the matched spans to each row
        fields: [id, date, title]          # event fields copied into each row
        queries:
          - {id: qantas, query: 'qantas OR "qantas airways"', metadata: {ticker: QAN}}
        queries_file: data/more.jsonl      # JSON lines {"id", "query", "metadata"}

Every query is parsed and analysed here (``patterns.lucene``), so ``cep check`` reports every bad
query with its file, line, column and caret, in the rule file or in the queries file. The output
is :class:`SearchSpec`, plain frozen data; the runtime is ``cep.search_rules.SearchOperator``.
docs/search.md describes the rule and its rows.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from patterns.analysis import ENGLISH_STOPWORDS, STEMMERS, AnalysisConfig
from patterns.errors import EXCERPT, CepSyntaxError, SourceError, short_repr
from patterns.files import MAX_QUERIES_FILE_BYTES, FileRefused, confine, read_limited, strip_bom
from patterns.lucene import Node, QueryConfig, compile_query
from patterns.rules import construct

__all__ = [
    "KEYS",
    "QUERY_KEYS",
    "ANALYSIS_KEYS",
    "ROW_FIELDS",
    "STREAM_FIELD",
    "SearchQuery",
    "SearchSpec",
    "parse",
    "load_queries_file",
    "reload_queries",
]

KEYS = {
    "from": "the input stream the documents come from",
    "query": "one Lucene query; its id is the rule's name",
    "queries": "a list of queries, each {id, query, metadata}",
    "queries_file": "JSON lines of {\"id\", \"query\", \"metadata\"}; a relative path starts at the rule file's folder",
    "default_fields": "fields that bare terms search (default: every string field but the id field and 'stream')",
    "default_operator": "OR (the default, as in Lucene) or AND",
    "analysis": "text analysis of queries and documents: lowercase, stopwords (english or a list), stemmer",
    "allow_leading_wildcard": "true allows *foo and ?oo (default false)",
    "auto_phrase": "true makes a term that analyses to several tokens (wi-fi) a phrase (default false)",
    "id_field": "the documents' id field (default id); never searched by bare terms",
    "time_field": "event-time field (optional): documents behind the watermark go to the late output",
    "fields": "event fields copied into every row, or '*' for all (default: the id and time fields)",
    "highlight": "true adds the matched spans [[field, start, end], ...] to every row",
    "join": "a table read as of each document's time: {table, on, kind}; its columns are searched and may be copied",
}

QUERY_KEYS = {"id": "the query's id (a string or an integer)", "query": "Lucene query text",
              "metadata": "a mapping copied into every row of the query"}

ANALYSIS_KEYS = {
    "lowercase": "true (default) or false",
    "stopwords": "english, or a list of words (default none)",
    "stemmer": f"null (default) or one of: {', '.join(sorted(STEMMERS))}",
}

#: Fields every row of a search rule has; an event field of the same name is not copied.
ROW_FIELDS = ("query_id", "metadata", "spans", "rule", "_id")

#: The field the engine tags events with when it reads several named streams.
STREAM_FIELD = "stream"

#: At most this many errors are listed per queries file (a broken file can hold thousands).
MAX_FILE_ERRORS = 50

#: What to do with a queries file past the size limit (patterns.files.MAX_QUERIES_FILE_BYTES).
QUERIES_FILE_HINT = "split the queries over several files and rules"

_SAVED_FORMAT = "cep-percolator-queries"  # the header line of Percolator.save's files


@dataclass(frozen=True)
class SearchQuery:
    """One checked query of a search rule; ``node`` is its analysed tree (``patterns.lucene``)."""

    id: str | int
    query: str
    metadata: dict[str, Any] = field(default_factory=dict)
    node: Node | None = field(default=None, compare=False, repr=False)
    from_file: bool = field(default=False, compare=False, repr=False)
    """Read from the rule's ``queries_file`` (what :func:`reload_queries` replaces)."""


@dataclass(frozen=True)
class SearchSpec:
    """A checked search rule: its stream, queries, query parsing and analysis, and output shape.

    Example:
        >>> from patterns.rules import parse_rules
        >>> spec = parse_rules('''
        ... rules:
        ...   - name: fruit
        ...     kind: search
        ...     from: news
        ...     default_fields: [title]
        ...     queries:
        ...       - {id: apples, query: 'apple* AND NOT pie', metadata: {desk: food}}
        ... ''').rules[0].spec
        >>> spec.stream, [q.id for q in spec.queries], spec.fields, spec.query_config.default_fields
        ('news', ['apples'], ('id',), ('title',))
    """

    stream: str
    queries: tuple[SearchQuery, ...]
    query_config: QueryConfig = field(default_factory=QueryConfig)
    id_field: str | None = "id"
    time_field: str | None = None
    fields: tuple[str, ...] = ("id",)
    all_fields: bool = False
    highlight: bool = False
    queries_file: str | None = field(default=None, compare=False)
    """The ``queries_file`` as read at load, an absolute path with symbolic links resolved (None without one)."""
    queries_sha256: str | None = field(default=None, compare=False, repr=False)
    """The SHA-256 of the queries file's bytes as read at load: what a watcher compares to see a change."""
    join: Any = None
    """A temporal join with a table (``patterns.tables.JoinSpec``), or None."""

    @property
    def time_column(self) -> str | None:
        """The event-time field, or None when the rule has none (nothing is ever late)."""
        return self.time_field


# ---------------------------------------------------------------- options


class _Checker:
    """Reads one rule's options; every problem becomes a SourceError at its YAML node."""

    def __init__(self, src: Any):
        self.src = src
        self.name = src.name
        self.errors: list[SourceError] = []

    def err(self, message: str, key: str | None = None) -> None:
        self.errors.append(self.src.error(f"rule {self.name!r}: {message}", key))

    def err_at(self, message: str, node: Any) -> None:
        self.errors.append(self.src.error_at(f"rule {self.name!r}: {message}", node))

    def name_value(self, key: str, what: str) -> str | None:
        """A field or stream name: a non-empty string."""
        if key not in self.src.data:
            return None
        v = self.src.data[key]
        if not isinstance(v, str) or not v.strip():
            self.err(f"'{key}' must be {what}, found {short_repr(v)}", key)
            return None
        return v

    def flag(self, key: str) -> bool:
        v = self.src.data.get(key, False)
        if v is None:
            return False
        if not isinstance(v, bool):
            self.err(f"'{key}' must be true or false, found {short_repr(v)}", key)
            return False
        return v

    def names(self, key: str, what: str) -> tuple[str, ...] | None:
        v = self.src.data.get(key)
        if v is None:
            return None
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not v or not all(isinstance(x, str) and x.strip() for x in v):
            self.err(f"'{key}' must be {what}, found {short_repr(v)}", key)
            return None
        if len(set(v)) != len(v):
            twice = next(x for x in v if v.count(x) > 1)
            self.err(f"'{key}' lists {twice!r} twice", key)
            return None
        return tuple(v)

    def analysis(self) -> AnalysisConfig:
        v = self.src.data.get("analysis")
        if v is None:
            return AnalysisConfig()
        if not isinstance(v, dict):
            self.err(f"'analysis' must be a mapping such as {{stopwords: english, stemmer: english_minimal}}, found {short_repr(v)}",
                     "analysis")
            return AnalysisConfig()
        opts: dict[str, Any] = {}
        for k, x in v.items():
            if k not in ANALYSIS_KEYS:
                self.err(f"unknown analysis setting {k!r}; known settings: {', '.join(ANALYSIS_KEYS)}", "analysis")
            elif k == "lowercase":
                if not isinstance(x, bool):
                    self.err(f"analysis.lowercase must be true or false, found {short_repr(x)}", "analysis")
                else:
                    opts[k] = x
            elif k == "stopwords":
                if x is None:
                    continue
                if isinstance(x, str) and x.lower() == "english":
                    opts[k] = ENGLISH_STOPWORDS
                elif isinstance(x, list) and all(isinstance(w, str) for w in x):
                    opts[k] = frozenset(w.lower() for w in x)
                else:
                    self.err(f"analysis.stopwords must be 'english' or a list of words, found {short_repr(x)}", "analysis")
            elif x is not None:
                if not isinstance(x, str) or x not in STEMMERS:
                    self.err(f"unknown stemmer {x!r}; known stemmers: {', '.join(sorted(STEMMERS))} (or null)",
                             "analysis")
                else:
                    opts[k] = x
        return AnalysisConfig(**opts)

    def query_config(self) -> QueryConfig:
        op = self.src.data.get("default_operator", "OR")
        if not isinstance(op, str) or op.upper() not in ("OR", "AND"):
            self.err(f"'default_operator' must be OR or AND, found {short_repr(op)}", "default_operator")
            op = "OR"
        return QueryConfig(
            default_operator=op.upper(),  # type: ignore[arg-type]
            default_fields=self.names("default_fields", "a field name or a list of field names"),
            allow_leading_wildcard=self.flag("allow_leading_wildcard"),
            auto_phrase=self.flag("auto_phrase"),
            analysis=self.analysis(),
        )


# ---------------------------------------------------------------- queries


class _Queries:
    """Collects a rule's queries from its three sources; ids are unique across them."""

    def __init__(self, chk: Any, config: QueryConfig):
        self.chk = chk
        self.config = config
        self.out: list[SearchQuery] = []
        self.where: dict[Any, str] = {}  # query id -> where it was first defined
        self.path: str | None = None  # the queries file, once read
        self.sha256: str | None = None  # the SHA-256 of its bytes
        self.reading_file = False

    def add(self, qid: Any, text: str, metadata: dict[str, Any], where: str,
            dup_error: Any, syntax_errors: Any) -> None:
        """Compile one query; ``dup_error(msg)`` / ``syntax_errors(exc)`` report problems at their place."""
        key = (type(qid) is int, qid)
        if key in self.where:
            dup_error(f"duplicate query id {short_repr(qid)} (first defined at {self.where[key]})")
            return
        self.where[key] = where
        text = text.rstrip()  # a block scalar's last newline: an error at the end points at the last line
        try:
            node = compile_query(text, self.config)
        except CepSyntaxError as e:
            syntax_errors(e)
            return
        self.out.append(SearchQuery(qid, text, metadata, node, from_file=self.reading_file))

    def inline(self) -> None:
        src = self.chk.src
        if "query" not in src.fields:
            return
        node = src.fields["query"][1]
        if not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:null":
            self.chk.err("'query' must be one Lucene query (text); write several under 'queries'", "query")
            return
        self.add(self.chk.name, node.value, {}, self._at(node),
                 lambda m: self.chk.err(m, "query"),
                 lambda e: self.chk.errors.extend(src.node_text_errors(node, e)))

    def listed(self) -> None:
        src, chk = self.chk.src, self.chk
        if "queries" not in src.fields:
            return
        seq = src.fields["queries"][1]
        if not isinstance(seq, yaml.SequenceNode):
            chk.err("'queries' must be a list of {id, query, metadata}", "queries")
            return
        for item in seq.value:
            if not isinstance(item, yaml.MappingNode):
                chk.err_at("each entry of 'queries' must be a mapping {id, query, metadata}", item)
                continue
            parts: dict[str, tuple[Any, Any]] = {}
            for k, v in item.value:
                if not isinstance(k, yaml.ScalarNode) or k.value not in QUERY_KEYS:
                    # (a non-scalar key never gets here: loading the rule already refused it)
                    chk.err_at(f"unknown key {k.value!r} in a query; known keys: {', '.join(QUERY_KEYS)}", k)
                    continue
                parts[k.value] = (k, v)
            try:
                py = construct(item) or {}
            except yaml.YAMLError as e:  # pragma: no cover - the rule itself loaded
                chk.err_at(f"{getattr(e, 'problem', None) or e}", item)
                continue
            qid = py.get("id")
            if "id" not in parts or not _valid_id(qid):
                chk.err_at(f"a query needs an 'id' (a string or an integer), found {short_repr(qid)}",
                           parts["id"][1] if "id" in parts else item)
                continue
            qnode = parts.get("query", (None, None))[1]
            if not isinstance(qnode, yaml.ScalarNode) or qnode.tag == "tag:yaml.org,2002:null":
                chk.err_at(f"query {short_repr(qid)} needs a 'query' (Lucene query text)", qnode if qnode is not None else item)
                continue
            meta = py.get("metadata")
            if meta is None:
                meta = {}
            if not isinstance(meta, dict):
                chk.err_at(f"query {short_repr(qid)}: 'metadata' must be a mapping, found {short_repr(meta)}", parts["metadata"][1])
                continue
            idnode = parts["id"][1]
            self.add(qid, qnode.value, meta, self._at(idnode),
                     lambda m, n=idnode: chk.err_at(m, n),
                     lambda e, n=qnode: chk.errors.extend(src.node_text_errors(n, e)))

    def from_file(self) -> None:
        src, chk = self.chk.src, self.chk
        if "queries_file" not in src.data:
            return
        value = src.data["queries_file"]
        if not isinstance(value, str) or not value.strip():
            chk.err(f"'queries_file' must be a path, found {short_repr(value)}", "queries_file")
            return
        base = Path(src.file).parent if src.file else Path.cwd()
        path = base / value  # an absolute value stays itself
        try:
            real = confine(path, base, getattr(src, "queries_roots", ()), written=value)
            data = read_limited(real, MAX_QUERIES_FILE_BYTES, "queries file", QUERIES_FILE_HINT)
            text = data.decode("utf-8")
        except FileNotFoundError:
            chk.err(f"queries file not found: {path} (a relative path starts at the rule file's folder)", "queries_file")
            return
        except FileRefused as e:
            chk.err(str(e), "queries_file")
            return
        except UnicodeDecodeError as e:
            chk.err(f"queries file {path} is not UTF-8 text: {e}", "queries_file")
            return
        except OSError as e:
            chk.err(f"cannot read queries file {path}: {e.strerror or e}", "queries_file")
            return
        before = len(self.out)
        n_errors = len(chk.errors)
        self.path, self.reading_file = str(real), True
        self.sha256 = hashlib.sha256(data).hexdigest()
        load_queries_file(text, str(path), self)
        self.reading_file = False
        if len(self.out) == before and len(chk.errors) == n_errors:
            chk.err(f"queries file {path} holds no queries", "queries_file")

    def _at(self, node: Any) -> str:
        return f"{self.chk.src.file or '<text>'}:{node.start_mark.line + 1}"


def _valid_id(qid: Any) -> bool:
    return isinstance(qid, (str, int)) and not isinstance(qid, bool) and qid != ""


_QUERY_KEY = re.compile(r'"query"\s*:\s*"')


def _raw_offsets(line: str, value: str) -> list[int] | None:
    """For each character of the JSON string ``value`` (the "query" member of ``line``), its offset
    in the raw line, plus one for its end; None when the member cannot be found."""
    for m in _QUERY_KEY.finditer(line):
        start = m.end()
        try:
            decoded, end = json.decoder.scanstring(line, start)  # type: ignore[attr-defined]
        except (ValueError, IndexError):
            continue
        if decoded != value:
            continue
        pos: list[int] = []
        i = start
        while i < end - 1:
            pos.append(i)
            if line[i] != "\\":
                i += 1
            elif line[i + 1] != "u":
                i += 2
            elif 0xD800 <= int(line[i + 2:i + 6], 16) < 0xDC00 and line[i + 6:i + 8] == "\\u":
                i += 12  # a surrogate pair is one character
            else:
                i += 6
        pos.append(end - 1)
        return pos if len(pos) == len(value) + 1 else None
    return None


def load_queries_file(text: str, path: str, into: Any) -> None:
    """Read JSON lines of ``{"id", "query", "metadata"}`` into a query collector.

    Errors are placed in the queries file (its line, the column inside the JSON line, a caret);
    a header line written by ``Percolator.save`` is skipped (the rule's options apply), and so is
    a leading byte-order mark (columns count from the first character after it).
    """
    text = strip_bom(text)
    chk = into.chk
    errors: list[SourceError] = []
    offset = 0
    found = 0

    def fail(message: str, at: int, width: int = 1) -> None:
        # the line may not be a query at all (a file named by mistake): show a short excerpt only
        errors.append(SourceError(message, text, at, width, path, window=EXCERPT))

    # split on newlines only: U+2028 and friends may stand unescaped inside JSON strings
    for lineno, line in enumerate(text.split("\n"), 1):
        start = offset
        offset += len(line) + 1
        body = line.rstrip("\r")
        if not body.strip():
            continue
        if len(errors) >= MAX_FILE_ERRORS:
            errors.append(SourceError(f"more errors in {path} are not listed (the first {MAX_FILE_ERRORS} are)",
                                      text, start, 1, path, window=EXCERPT))
            break
        try:
            row = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            fail(f"invalid JSON: {e.msg}", start + min(max(e.pos, 0), len(body)))
            continue
        if isinstance(row, dict) and row.get("format") == _SAVED_FORMAT and found == 0 and "query" not in row:
            continue
        found += 1
        if not isinstance(row, dict):
            fail(f'expected a JSON object {{"id", "query", "metadata"}} per line, found {type(row).__name__}', start)
            continue
        unknown = [k for k in row if k not in QUERY_KEYS]
        if unknown:
            fail(f"unknown key {short_repr(unknown[0])} in a query; known keys: {', '.join(QUERY_KEYS)}",
                 start + max(body.find(f'"{unknown[0]}"'), 0), len(unknown[0]) + 2)
            continue
        qid = row.get("id")
        if not _valid_id(qid):
            fail(f"a query needs an 'id' (a string or an integer), found {short_repr(qid)}", start)
            continue
        if not isinstance(row.get("query"), str):
            fail(f"query {short_repr(qid)} needs a 'query' string", start)
            continue
        meta = row.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            fail(f"query {short_repr(qid)}: 'metadata' must be a JSON object, found {type(meta).__name__}", start)
            continue
        query = row["query"]
        raw = _raw_offsets(body, query)

        def syntax(e: CepSyntaxError, start: int = start, raw: list[int] | None = raw, qid: Any = qid) -> None:
            for x in e.errors:
                if raw is None:
                    fail(f"query {short_repr(qid)}, column {x.column} of its text: {x.message}", start)
                    continue
                a = raw[min(x.offset, len(raw) - 1)]
                b = raw[min(x.offset + max(x.width, 1), len(raw) - 1)]
                fail(x.message, start + a, max(b - a, 1))

        into.add(qid, query, meta, f"{path}:{lineno}", lambda m, s=start: fail(m, s), syntax)
    chk.errors.extend(errors)


# ---------------------------------------------------------------- the rule


def parse(src: Any) -> tuple[tuple[None, SearchSpec, dict] | None, list[SourceError]]:
    """The rule-file hook (``patterns.rules``): one YAML rule of kind ``search`` into its spec."""
    chk = _Checker(src)
    data = src.data
    stream = chk.name_value("from", "the name of the input stream")
    if "from" not in data:
        chk.err("a search rule needs 'from: <stream>', the input stream its documents come from")
    id_field = data.get("id_field", "id")
    if id_field is not None and (not isinstance(id_field, str) or not id_field.strip()):
        chk.err(f"'id_field' must be a field name (or null for none), found {short_repr(id_field)}", "id_field")
        id_field = "id"
    time_field = chk.name_value("time_field", "the name of the event-time field")
    if "lateness" in data and time_field is None and "time_field" not in data:
        chk.err("'lateness' needs a 'time_field': without event time no document is late", "lateness")
    config = chk.query_config()
    highlight = chk.flag("highlight")

    all_fields = False
    fields: tuple[str, ...] = tuple(f for f in (id_field, time_field) if f)
    if data.get("fields") == "*":
        all_fields, fields = True, ()
    elif "fields" in data:
        got = chk.names("fields", "a list of event field names, or '*' for every field")
        if got is not None:
            clash = [f for f in got if f in ROW_FIELDS]
            if clash:
                chk.err(f"'fields' names {clash[0]!r}, a field every row of a search rule has "
                        f"({', '.join(ROW_FIELDS)}); leave it out", "fields")
            fields = got

    join = None
    if "join" in data:
        from patterns.tables import parse_search_join

        join, msgs = parse_search_join(data["join"], getattr(src, "tables", {}) or {}, time_field)
        for m in msgs:
            chk.err(m, "join")
    queries = _Queries(chk, config)
    queries.inline()
    queries.listed()
    queries.from_file()
    if not queries.out and not chk.errors:
        if data.get("queries") == []:
            chk.err("'queries' is an empty list; add at least one {id, query}", "queries")
        else:
            chk.err("a search rule needs queries: add 'query', 'queries' or 'queries_file'")
    if chk.errors or stream is None:
        return None, chk.errors
    spec = SearchSpec(
        stream=stream,
        queries=tuple(queries.out),
        query_config=config,
        id_field=id_field,
        time_field=time_field,
        fields=fields,
        all_fields=all_fields,
        highlight=highlight,
        queries_file=queries.path,
        queries_sha256=queries.sha256,
        join=join,
    )
    return (None, spec, {}), []


class _FileChecker:
    """Where :func:`reload_queries` collects a queries file's errors (no rule file around it)."""

    def __init__(self) -> None:
        self.errors: list[SourceError] = []


def reload_queries(spec: SearchSpec, text: str) -> tuple[SearchSpec, list[SourceError]]:
    """``spec`` with the queries of its ``queries_file`` replaced by those of ``text`` (the file's new content).

    The queries written in the rule file itself stay. A query of ``text`` that does not load is
    left out and reported: returns the new spec and the problems (placed in the file, with a
    caret), so the result depends on the content alone and one bad line never stops the others.

    Example:
        >>> from dataclasses import replace
        >>> spec = replace(SearchSpec("news", (SearchQuery("a", "apple"),)), queries_file="q.jsonl")
        >>> new, problems = reload_queries(spec, '{"id": "p", "query": "pear"}\\n{"id": "a", "query": "x"}')
        >>> [(q.id, q.from_file) for q in new.queries]
        [('a', False), ('p', True)]
        >>> print(problems[0].format())
        q.jsonl:2:1: duplicate query id 'a' (first defined at the rule file)
        {"id": "a", "query": "x"}
        ^
    """
    from dataclasses import replace

    if spec.queries_file is None:
        raise ValueError("this search rule has no queries_file to reload")
    into = _Queries(_FileChecker(), spec.query_config)
    kept = [q for q in spec.queries if not q.from_file]
    for q in kept:
        into.where[(type(q.id) is int, q.id)] = "the rule file"
    into.reading_file = True
    load_queries_file(text, spec.queries_file, into)
    return replace(spec, queries=tuple(kept + into.out)), list(into.chk.errors)
