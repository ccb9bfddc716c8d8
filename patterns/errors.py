"""Error types shared by every layer: one root, CepError, and errors that point into source text."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CepError",
    "SourceError",
    "SourceWarning",
    "CepSyntaxError",
    "RuleError",
    "RuleErrors",
    "BadEventError",
    "caret_line",
]


class CepError(Exception):
    """Root of every error this project raises on purpose."""


def caret_line(text: str, line: int, column: int, width: int = 1) -> str:
    """Return the source line ``line`` (1-based) of ``text`` with a caret line under ``column``.

    Example:
        >>> print(caret_line("SELECT x\\nFROM y", 2, 6))
        FROM y
             ^
    """
    lines = text.splitlines() or [""]
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    src = src.replace("\t", " ")
    return f"{src}\n{' ' * max(column - 1, 0)}{'^' * max(width, 1)}"


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of character ``offset`` in ``text``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


@dataclass(frozen=True)
class SourceError:
    """One problem found in source text: where it is and what was expected."""

    message: str
    text: str = ""
    offset: int = 0
    width: int = 1
    file: str | None = None
    line_offset: int = 0  # lines before ``text`` in ``file`` (text embedded in a YAML file)
    col_offset: int = 0  # columns before ``text`` on its first line in ``file``
    block_indent: int = 0  # columns before every line of ``text`` (a YAML block scalar)

    @property
    def line(self) -> int:
        return line_col(self.text, self.offset)[0] + self.line_offset

    @property
    def column(self) -> int:
        ln, col = line_col(self.text, self.offset)
        return col + self.block_indent + (self.col_offset if ln == 1 else 0)

    label = ""  # put before the message (a class attribute, not a field)

    def format(self) -> str:
        ln, col = line_col(self.text, self.offset)
        where = f"{self.file or '<text>'}:{self.line}:{self.column}"
        if not self.text:
            return f"{where}: {self.label}{self.message}"
        return f"{where}: {self.label}{self.message}\n{caret_line(self.text, ln, col, self.width)}"


@dataclass(frozen=True)
class SourceWarning(SourceError):
    """A valid rule that will likely not behave as its author expects: reported, never refused.

    Example:
        >>> print(SourceWarning("this group can grow", "PATTERN ((A|B)* C)", 8, 7, "r.sql").format())
        r.sql:1:9: warning: this group can grow
        PATTERN ((A|B)* C)
                ^^^^^^^
    """

    label = "warning: "


class CepSyntaxError(CepError):
    """Source text (a pattern, a search query, a rule file) that could not be parsed or checked.

    Carries one or more :class:`SourceError` entries, each with line, column and a caret.
    """

    def __init__(self, errors: list[SourceError] | SourceError):
        self.errors = [errors] if isinstance(errors, SourceError) else list(errors)
        super().__init__("\n".join(e.format() for e in self.errors))

    @property
    def first(self) -> SourceError:
        return self.errors[0]

    @property
    def position(self) -> int:
        """Character offset of the first error in its text."""
        return self.first.offset


class RuleError(CepSyntaxError):
    """A rule that parses but is not valid (unknown variable, empty-matching pattern, ...)."""


class RuleErrors(CepError):
    """Every error found in a rule file, collected before raising."""

    def __init__(self, errors: list[SourceError]):
        self.errors = list(errors)
        super().__init__("\n".join(e.format() for e in self.errors))


class BadEventError(CepError):
    """An input event that cannot be processed (missing field, wrong type, malformed line)."""


def count_noun(n: int, word: str, plural: str | None = None) -> str:
    """A count with its noun: ``1 query``, ``2 queries``, ``1,255 events``.

    Example:
        >>> count_noun(1, "complex event"), count_noun(1255, "event"), count_noun(2, "query", "queries")
        ('1 complex event', '1,255 events', '2 queries')
    """
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"
