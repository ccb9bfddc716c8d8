"""Rule files: YAML files of named rules, or a bare .sql file holding one MATCH_RECOGNIZE statement.

A YAML rule file::

    rules:
      - name: v_shape                # unique; names every output row
        description: free text
        lateness: 5 minutes          # allowed lateness (default 0)
        time_unit: s                 # numeric event times are epoch seconds (default ms)
        max_future_skew: 1 day       # later than the clock by more: an error (default; none: off)
        max_partial_matches: 10000   # per key and attempt; more are dropped and counted
        sql: |
          SELECT * FROM bars MATCH_RECOGNIZE ( ... )

Every error in a file is collected (file, line, column, a caret, what was expected) before one
:class:`~patterns.errors.RuleErrors` is raised.

A rule file is untrusted data: YAML is read with a safe loader (no Python tags), the file may hold
at most :data:`MAX_RULE_FILE_BYTES`, YAML nesting at most :data:`MAX_YAML_DEPTH` levels, and its
aliases may stand for at most :data:`MAX_ALIAS_EXPANSION` characters in all, so that a few
honest anchors (``<<: *defaults``) work and a "billion laughs" of nested aliases is refused
before anything expands it (docs/reliability.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from patterns.compiler import CompiledPattern, compile_statement
from patterns.errors import CepSyntaxError, RuleErrors, SourceError, SourceWarning, short_repr
from patterns.files import MAX_RULE_FILE_BYTES, FileRefused, read_limited
from patterns.files import queries_roots as _queries_roots
from patterns.growth import find_growth, growth_warning
from patterns.match_recognize import parse_interval_ms, parse_statement
from patterns.tables import TableSpec, YamlHelpers, bind_join, parse_tables
from patterns.views import ViewSpec, parse_views

__all__ = [
    "Rule", "RuleSet", "RuleSource", "load_rules", "parse_rules", "compose_yaml", "node_error", "parse_rule_text", "read_rule_file", "construct",
    "RULE_KEYS", "RULE_KINDS", "MAX_RULE_FILE_BYTES", "MAX_ALIAS_EXPANSION", "MAX_YAML_DEPTH",
    "TIME_UNITS", "DEFAULT_MAX_FUTURE_SKEW_MS",
]

#: What the aliases of one rule file may stand for in all, counted as characters of YAML: each
#: scalar its length plus one, each list or mapping two. ``<<: *defaults`` with a few options costs
#: about 60 per use, a whole rule with its statement a few hundred; a "billion laughs" of nine
#: levels would stand for 1.5 billion. As large as what a file of this size could hold written out.
MAX_ALIAS_EXPANSION = 1_000_000

#: How deeply YAML collections may nest in a rule file (a rule with nested metadata needs under 10).
MAX_YAML_DEPTH = 100

COMMON_KEYS = {
    "name": "unique rule name; tags every output row",
    "kind": "pattern (the default), analytics or search",
    "description": "free text",
    "lateness": "allowed lateness: milliseconds or text such as '5 minutes' (default 0)",
    "time_unit": "unit of numeric event times: s, ms (the default), us or ns",
    "max_future_skew": "how far an event time may be ahead of the wall clock (default 1 day; none: no limit)",
    "enabled": "false to keep a rule in the file without running it",
}
PATTERN_KEYS = {
    "sql": "the SELECT ... MATCH_RECOGNIZE (...) statement",
    "max_partial_matches": "cap on live partial matches per key, and per start row (default 10000)",
    "on_cap": "what happens at the cap: drop_oldest (default) or skip_key",
    "max_steps_per_event": "work budget: partial matches one event may advance on its key (default: none, "
                           "or 64 for a pattern cep check warns about); more are dropped and counted",
}
RULE_KEYS = {**COMMON_KEYS, **PATTERN_KEYS}

TIME_UNITS = ("s", "ms", "us", "ns")
"""Units of numeric event times (a rule's ``time_unit``): epoch seconds, milliseconds (the
default), microseconds or nanoseconds. ISO-8601 strings, dates and datetimes carry their own."""

DEFAULT_MAX_FUTURE_SKEW_MS = 86_400_000
"""How far (ms) an event time may run ahead of the wall clock before it is refused (one day)."""

# kind -> module that defines KEYS (dict of key -> description) and parse(src: RuleSource)
RULE_KINDS = {"pattern": "patterns.rules", "analytics": "patterns.analytics", "search": "patterns.search_rules"}


@dataclass
class RuleSource:
    """One rule's YAML mapping, handed to the parser of its kind, with helpers for errors."""

    name: str
    kind: str
    data: dict[str, Any]
    fields: dict[str, tuple[Any, Any]]  # key -> (key node, value node)
    node: Any
    text: str
    file: str | None
    queries_roots: tuple[str, ...] = ()  # folders besides the rule file's whose files the rule may read
    tables: dict[str, TableSpec] = field(default_factory=dict)  # the file's tables, which joins may name

    def error(self, message: str, key: str | None = None) -> SourceError:
        """An error at the value of ``key`` (or at the rule)."""
        node = self.fields[key][1] if key in self.fields else self.node
        return _node_err(message, self.text, node, self.file)

    def scalar(self, key: str) -> tuple[str, tuple[int, int, int]] | None:
        """The text of a scalar value and its position (line offset, column offset, indent)."""
        node = self.fields.get(key, (None, None))[1]
        if node is None or not isinstance(node, yaml.ScalarNode):
            return None
        return node.value, _scalar_position(self.text, node)

    def text_errors(self, key: str, exc: CepSyntaxError) -> list[SourceError]:
        """Errors found inside the scalar value of ``key``, placed at their line and column in the file."""
        got = self.scalar(key)
        if got is None:
            return [self.error(e.message, key) for e in exc.errors]
        value, (line_off, col_off, indent) = got
        return [SourceError(e.message, value, e.offset, e.width, self.file, line_off, col_off, indent) for e in exc.errors]

    def error_at(self, message: str, node: Any) -> SourceError:
        """An error at any node of this rule's YAML (an item of a list, a nested value)."""
        return _node_err(message, self.text, node if node is not None else self.node, self.file)

    def node_text_errors(self, node: Any, exc: CepSyntaxError) -> list[SourceError]:
        """Errors found inside a nested scalar's text, placed at their line and column in the file."""
        if not isinstance(node, yaml.ScalarNode):
            return [self.error_at(e.message, node) for e in exc.errors]
        line_off, col_off, indent = _scalar_position(self.text, node)
        return [SourceError(e.message, node.value, e.offset, e.width, self.file, line_off, col_off, indent)
                for e in exc.errors]


def _kind(kind: str):
    import importlib

    mod = importlib.import_module(RULE_KINDS[kind])
    if kind == "pattern":
        return _parse_pattern, PATTERN_KEYS
    return mod.parse, mod.KEYS


def _parse_pattern(src: RuleSource) -> tuple[tuple[Any, Any, dict] | None, list[SourceError]]:
    errors: list[SourceError] = []
    py, name = src.data, src.name
    got = src.scalar("sql")
    if got is None:
        return None, [src.error(f"rule {name!r} has no 'sql' statement")]
    extra: dict[str, Any] = {}
    if "max_partial_matches" in py:
        val = py["max_partial_matches"]
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            errors.append(src.error(f"rule {name!r}: max_partial_matches must be at least 1, a whole number "
                                    f"such as 10000; found {val!r}", "max_partial_matches"))
        else:
            extra["max_partial_matches"] = val
    if "max_steps_per_event" in py:
        val = py["max_steps_per_event"]
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            errors.append(src.error(f"rule {name!r}: max_steps_per_event must be at least 1, a whole number "
                                    f"such as 1000; found {val!r}", "max_steps_per_event"))
        else:
            extra["max_steps_per_event"] = val
    if "on_cap" in py:
        if py["on_cap"] not in ("drop_oldest", "skip_key"):
            errors.append(src.error(f"rule {name!r}: on_cap must be drop_oldest or skip_key, found {short_repr(py['on_cap'])}", "on_cap"))
        else:
            extra["on_cap"] = py["on_cap"]
    sql, (line_off, col_off, indent) = got
    try:
        mr = bind_join(parse_statement(sql, src.file), src.tables, src.file)
        compiled = compile_statement(mr, src.file, line_off, col_off, indent)
    except CepSyntaxError as e:
        return None, errors + src.text_errors("sql", e)
    growth = find_growth(compiled)
    if growth is not None:
        extra["warnings"] = (growth_warning(name, growth, sql, src.file, line_off, col_off, indent),)
    return (compiled, None, extra), errors


@dataclass(frozen=True)
class Rule:
    """One checked, compiled rule."""

    name: str
    compiled: CompiledPattern | None
    source: str = ""
    lateness_ms: int = 0
    max_partial_matches: int = 10_000
    on_cap: str = "drop_oldest"
    max_steps_per_event: int | None = None  # None: the default budget (see cep.nfa.GROWING_PATTERN_STEPS)
    description: str = ""
    kind: str = "pattern"
    spec: Any = None  # the compiled form of a non-pattern rule (analytics, search)
    time_unit: str = "ms"  # unit of numeric event times (numbers and numeric strings)
    max_future_skew_ms: int | None = DEFAULT_MAX_FUTURE_SKEW_MS  # None: no future guard
    warnings: tuple[SourceWarning, ...] = field(default=(), compare=False)  # valid, but see cep check

    @property
    def stream(self) -> str:
        """The input stream the rule reads (FROM in SQL, 'from' in other kinds)."""
        if self.compiled is not None:
            return self.compiled.statement.source
        return getattr(self.spec, "stream", "") or ""


@dataclass(frozen=True)
class RuleSet:
    """The rules of one file, in file order."""

    rules: tuple[Rule, ...]
    path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    tables: dict[str, TableSpec] = field(default_factory=dict, compare=False)  # the file's tables:, by name
    views: dict[str, ViewSpec] = field(default_factory=dict, compare=False)  # the file's views:, in file order

    def __iter__(self):
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    @property
    def warnings(self) -> list[SourceWarning]:
        """What ``cep check`` warns about in these rules (they run all the same)."""
        return [w for r in self.rules for w in r.warnings]


def parse_rule_text(sql: str, name: str = "rule", file: str | None = None) -> Rule:
    """Parse and compile one MATCH_RECOGNIZE statement into a rule.

    Example:
        >>> r = parse_rule_text("SELECT * FROM s MATCH_RECOGNIZE (ORDER BY ts PATTERN (A+) DEFINE A AS x > 1)")
        >>> r.name, r.stream
        ('rule', 's')
    """
    mr = bind_join(parse_statement(sql, file), {}, file)
    compiled = compile_statement(mr, file)
    growth = find_growth(compiled)
    warnings = (growth_warning(name, growth, sql, file),) if growth is not None else ()
    return Rule(name, compiled, sql, warnings=warnings)


def _ms(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be milliseconds or text such as '5 minutes', found {short_repr(value)}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{what} must not be negative, found {short_repr(value)}")
        return int(value)
    if isinstance(value, str):
        try:
            return parse_interval_ms(value)
        except CepSyntaxError:
            raise ValueError(
                f"{what}: cannot read {value!r} as an interval; write milliseconds or text such as '5 minutes'"
            ) from None
    raise ValueError(f"{what} must be milliseconds or text such as '5 minutes', found {short_repr(value)}")


def _event_time_options(src: RuleSource, opts: dict[str, Any]) -> list[SourceError]:
    """``time_unit`` and ``max_future_skew`` of one rule into ``opts``; the errors of bad values."""
    errors: list[SourceError] = []
    py, name = src.data, src.name
    if "time_unit" in py:
        unit = py["time_unit"]
        if unit in TIME_UNITS:
            opts["time_unit"] = unit
        else:
            errors.append(src.error(
                f"rule {name!r}: time_unit must be one of {', '.join(TIME_UNITS)} (the unit of numeric event "
                f"times: epoch seconds, milliseconds, microseconds, nanoseconds), found {unit!r}", "time_unit"))
    if "max_future_skew" in py:
        skew = py["max_future_skew"]
        if isinstance(skew, str) and skew.strip().lower() == "none":
            opts["max_future_skew_ms"] = None
        else:
            try:
                if skew is None:
                    raise ValueError(f"rule {name!r}: max_future_skew is empty; write an interval such as "
                                     "'1 day', or none to accept event times however far ahead of the clock")
                opts["max_future_skew_ms"] = _ms(skew, f"rule {name!r}: max_future_skew")
            except ValueError as e:
                errors.append(src.error(str(e), "max_future_skew"))
    return errors


class _Refused(yaml.YAMLError):
    """YAML this loader will not compose: an alias past the budget, a recursive alias, nesting too deep."""

    def __init__(self, message: str, mark: Any, width: int = 1):
        super().__init__(message)
        self.message, self.mark, self.width = message, mark, width


class _RuleLoader(yaml.SafeLoader):
    """SafeLoader that counts what aliases stand for while composing, and refuses past the budget.

    Composing shares an alias's node instead of copying it, so it stays cheap; what explodes is
    everything after (constructing, printing, writing rows). Each node's weight (the YAML
    characters it would take written out) is known when the node is done, so an alias costs its
    target's weight, and the sum over all aliases is checked as each alias is met.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self.weights: dict[int, int] = {}
        self.aliased = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                weight = self.weights.get(id(target))
                if weight is None:  # the target is still open: the alias is inside it
                    raise _Refused(
                        f"alias *{event.anchor} is used inside the node it names (a structure that contains "
                        "itself), which a rule file cannot hold; write the value out",
                        event.start_mark, len(event.anchor) + 1)
                self.aliased += weight
                if self.aliased > MAX_ALIAS_EXPANSION:
                    raise _Refused(
                        f"alias *{event.anchor} stands for {weight:,} characters of YAML, which brings what the "
                        f"aliases of this file stand for to {self.aliased:,}, past the limit of "
                        f"{MAX_ALIAS_EXPANSION:,} (aliases inside aliases multiply: the 'billion laughs' shape); "
                        "write the repeated values out, or use fewer or smaller anchors",
                        event.start_mark, len(event.anchor) + 1)
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_YAML_DEPTH:
            raise _Refused(f"YAML nested deeper than {MAX_YAML_DEPTH} levels; a rule file needs far fewer",
                           self.peek_event().start_mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if isinstance(node, yaml.ScalarNode):
            weight = len(node.value) + 1
        elif isinstance(node, yaml.SequenceNode):
            weight = 2 + sum(self.weights[id(x)] for x in node.value)
        else:
            weight = 2 + sum(self.weights[id(k)] + self.weights[id(v)] for k, v in node.value)
        self.weights[id(node)] = weight
        return node


def _merge_keys(root: Any) -> None:
    """Resolve YAML merge keys (``<<: *defaults``) in every mapping, in place, as PyYAML's constructor does.

    Rules and queries are read from the node graph (for positions), so merges are resolved there:
    a merged key comes first and a key written in the mapping itself wins.
    """
    flatten = yaml.SafeLoader("").flatten_mapping
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            flatten(node)
            for k, v in node.value:
                stack.extend((k, v))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def construct(node: Any) -> Any:
    """The Python value of a composed YAML node, by the safe constructor (no Python tags).

    Example:
        >>> construct(yaml.compose("a: [1, {b: true}]"))
        {'a': [1, {'b': True}]}
    """
    return yaml.constructor.SafeConstructor().construct_document(node)


def _compose(text: str) -> Any:
    """The YAML node graph of ``text`` (one document) through :class:`_RuleLoader`."""
    loader = _RuleLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def compose_yaml(text: str, file: str | None = None, what: str = "rule file") -> Any:
    """The YAML node graph of one document (merge keys resolved), read as a rule file is.

    The safe loader with the alias budget and depth limit of rule files; nodes keep their marks
    (line, column) for errors. None for an empty document. Raises RuleErrors at the problem's place.

    Example:
        >>> compose_yaml("tests: [{name: a}]").value[0][0].value
        'tests'
    """
    try:
        root = _compose(text)
    except _Refused as e:
        at = _offset(text, e.mark.line, e.mark.column)
        raise RuleErrors([SourceError(e.message, text, at, e.width, file)]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        msg = f"not a valid YAML {what}: {getattr(e, 'problem', None) or e}"
        if mark is not None:
            raise RuleErrors([SourceError(msg, text, _offset(text, mark.line, mark.column), 1, file)]) from None
        raise RuleErrors([SourceError(msg, text, 0, 1, file)]) from None
    if root is None:
        return None
    try:
        _merge_keys(root)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise RuleErrors([SourceError(f"{e.problem or e}", text, _offset(text, mark.line, mark.column), 1, file)]) from None
    return root


def node_error(message: str, text: str, node: Any, file: str | None) -> SourceError:
    """An error at a YAML node of ``text`` (its first character), for file:line:column and a caret."""
    return _node_err(message, text, node, file)


def parse_rules(text: str, file: str | None = None, *,
                queries_roots: Iterable[str | os.PathLike[str]] | None = None) -> RuleSet:
    """Parse rule-file text: YAML with a ``rules:`` list, or one bare SQL statement.

    ``queries_roots``: folders besides the rule file's own (the current folder for text without a
    file) whose files a search rule's ``queries_file`` may name; None reads ``$CEP_QUERIES_ROOTS``.

    Example:
        >>> rs = parse_rules('''
        ... rules:
        ...   - name: up
        ...     sql: SELECT * FROM t MATCH_RECOGNIZE (ORDER BY ts PATTERN (A B) DEFINE B AS B.x > A.x)
        ... ''')
        >>> rs.names()
        ['up']
    """
    stripped = text.lstrip()
    if stripped[:6].upper() == "SELECT" or (file or "").endswith(".sql"):
        name = Path(file).stem if file else "rule"
        try:
            return RuleSet((parse_rule_text(text, name, file),), file)
        except CepSyntaxError as e:
            raise RuleErrors(e.errors) from None
    if len(text) > MAX_RULE_FILE_BYTES:
        raise RuleErrors([SourceError(
            f"rule text of {len(text):,} characters is longer than the limit of {MAX_RULE_FILE_BYTES:,} "
            f"({MAX_RULE_FILE_BYTES >> 20} MiB); split the rules over several files",
            "", 0, 1, file)])
    roots = _queries_roots(queries_roots)
    errors: list[SourceError] = []
    root = compose_yaml(text, file)
    if root is None:
        raise RuleErrors([SourceError("empty rule file: expected 'rules:' with a list of rules", text, 0, 1, file)])
    rules_node = None
    views_node = None
    tables: dict[str, TableSpec] = {}
    views: dict[str, ViewSpec] = {}
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if k.value == "rules":
                rules_node = v
            elif k.value == "tables":
                tables, errs = parse_tables(v, text, file, roots, YamlHelpers(construct, _node_err, _ms, TIME_UNITS))
                errors.extend(errs)
            elif k.value == "views":
                views_node = v
            elif k.value != "tests":  # the file's own tests, which cep test reads and runs
                errors.append(_node_err(f"unknown top-level key {k.value!r}; expected 'rules' (and 'tables', the "
                                        "tables joins read, 'views', joins of two tables, and 'tests', the tests "
                                        "cep test runs)", text, k, file))
    if views_node is not None:  # after the tables, wherever the file puts them: a view names tables
        views, errs = parse_views(views_node, text, file, tables, construct, _node_err,
                                  lambda node, exc: _scalar_errors(text, file, node, exc))
        errors.extend(errs)
    joinable = {**tables, **{name: v.table_spec() for name, v in views.items()}}  # rules join views as tables
    if rules_node is None or not isinstance(rules_node, yaml.SequenceNode):
        errors.append(_node_err("expected a top-level 'rules:' holding a list of rules", text, rules_node or root, file))
        raise RuleErrors(errors)
    rules: list[Rule] = []
    seen: dict[str, Any] = {}
    for item in rules_node.value:
        if not isinstance(item, yaml.MappingNode):
            errors.append(_node_err("each rule must be a mapping with 'name' and 'sql'", text, item, file))
            continue
        fields = {k.value: (k, v) for k, v in item.value}
        name_node = fields.get("name", (None, None))[1]
        if name_node is None or not isinstance(name_node, yaml.ScalarNode) or not name_node.value:
            errors.append(_node_err("rule has no 'name'", text, item, file))
            continue
        name = str(name_node.value)
        if name in seen:
            first = seen[name].start_mark.line + 1
            errors.append(_node_err(f"duplicate rule name {name!r} (first defined on line {first})", text, name_node, file))
            continue
        seen[name] = name_node
        try:
            py = construct(item) or {}
        except yaml.YAMLError as e:
            errors.append(_node_err(f"rule {name!r}: {getattr(e, 'problem', None) or e}", text, item, file))
            continue
        if py.get("enabled", True) is False:
            continue
        kind = py.get("kind", "pattern")
        if not isinstance(kind, str) or kind not in RULE_KINDS:
            errors.append(
                _node_err(
                    f"rule {name!r}: unknown kind {short_repr(kind)}; expected one of: {', '.join(RULE_KINDS)}",
                    text,
                    fields["kind"][1],
                    file,
                )
            )
            continue
        src = RuleSource(name, kind, py, fields, item, text, file, roots, joinable)
        try:
            parse_kind, kind_keys = _kind(kind)
        except ImportError:
            errors.append(src.error(f"rule {name!r}: rules of kind {kind!r} are not available in this installation", "kind"))
            continue
        for key, (knode, _) in fields.items():
            if key not in COMMON_KEYS and key not in kind_keys:
                errors.append(
                    _node_err(
                        f"unknown key {key!r} for a {kind} rule; known keys: {', '.join([*COMMON_KEYS, *kind_keys])}",
                        text,
                        knode,
                        file,
                    )
                )
        opts: dict[str, Any] = {}
        if "lateness" in py:
            try:
                opts["lateness_ms"] = _ms(py["lateness"], f"rule {name!r}: lateness")
            except ValueError as e:
                errors.append(src.error(str(e), "lateness"))
        errors.extend(_event_time_options(src, opts))
        result, errs = parse_kind(src)
        errors.extend(errs)
        if result is None or errs:
            continue
        compiled, spec, extra = result
        rules.append(
            Rule(name, compiled, src.data.get("sql", ""), description=str(py.get("description", "")), kind=kind,
                 spec=spec, **opts, **extra)
        )
    if errors:
        raise RuleErrors(errors)
    return RuleSet(tuple(rules), file, tables=tables, views=views)


def _offset(text: str, line0: int, col0: int) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(x) for x in lines[:line0]) + col0


def _scalar_errors(text: str, file: str | None, node: Any, exc: CepSyntaxError) -> list[SourceError]:
    """Errors found inside a scalar's text (a view's ``sql``), placed at their line and column in the file."""
    if not isinstance(node, yaml.ScalarNode):
        return [_node_err(e.message, text, node, file) for e in exc.errors]
    line_off, col_off, indent = _scalar_position(text, node)
    return [SourceError(e.message, node.value, e.offset, e.width, file, line_off, col_off, indent) for e in exc.errors]


def _node_err(message: str, text: str, node: Any, file: str | None) -> SourceError:
    if node is None:
        return SourceError(message, text, 0, 1, file)
    m = node.start_mark
    return SourceError(message, text, _offset(text, m.line, m.column), 1, file)


def _scalar_position(text: str, node: yaml.ScalarNode) -> tuple[int, int, int]:
    """(line offset, first-line column offset, block indent) of a scalar's value in the file."""
    m = node.start_mark
    if node.style in ("|", ">"):
        lines = text.splitlines()
        first = m.line + 1
        while first < len(lines) and not lines[first].strip():
            first += 1
        indent = len(lines[first]) - len(lines[first].lstrip()) if first < len(lines) else 0
        return first, 0, indent
    quote = 1 if node.style in ("'", '"') else 0
    return m.line, m.column + quote, 0


def read_rule_file(path: str | Path) -> str:
    """The text of a rule file, read up to :data:`MAX_RULE_FILE_BYTES`; RuleErrors naming the file otherwise.

    Example:
        >>> read_rule_file("/dev/zero")
        Traceback (most recent call last):
        ...
        patterns.errors.RuleErrors: /dev/zero:1:1: rule file /dev/zero holds more than 4,194,304 bytes, past the limit of 4,194,304 bytes (4 MiB); split the rules over several files
    """
    p = Path(path)

    def fail(message: str) -> RuleErrors:
        return RuleErrors([SourceError(message, "", 0, 1, str(p))])

    try:
        data = read_limited(p, MAX_RULE_FILE_BYTES, "rule file", "split the rules over several files", regular=False)
        return data.decode("utf-8")
    except FileNotFoundError:
        raise fail(f"rule file not found: {p}") from None
    except UnicodeDecodeError as e:
        raise fail(f"rule file is not UTF-8 text: {e}") from None
    except FileRefused as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot read the rule file {p}: {e.strerror or e}") from None


def load_rules(path: str | Path, *, queries_roots: Iterable[str | os.PathLike[str]] | None = None) -> RuleSet:
    """Load and check a rule file (YAML or .sql); raise RuleErrors listing every problem.

    ``queries_roots``: folders besides the rule file's own whose files a search rule's
    ``queries_file`` may name (default: ``$CEP_QUERIES_ROOTS``; see :mod:`patterns.files`).
    """
    p = Path(path)
    return parse_rules(read_rule_file(p), str(p), queries_roots=queries_roots)
