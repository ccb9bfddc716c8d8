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
    "short_repr",
    "CARET_WINDOW",
    "EXCERPT",
]


class CepError(Exception):
    """Root of every error this project raises on purpose."""


#: The most characters of a source line an error shows: a longer line is shown as a window around
#: the caret (a rule file's 10,000-character line is not printed whole).
CARET_WINDOW = 160

#: The most characters shown of a line that should not have been read at all (a queries file's
#: line that is not a query): enough to recognise it, too few to leak a file that was named by mistake.
EXCERPT = 80


def caret_line(text: str, line: int, column: int, width: int = 1, window: int = CARET_WINDOW) -> str:
    """Return the source line ``line`` (1-based) of ``text`` with a caret line under ``column``.

    Lines are split at ``\\n`` only, as :func:`line_col` counts them. A line longer than
    ``window`` characters is shown as a window of that many around the caret, with ``...`` where
    it was cut.

    Example:
        >>> print(caret_line("SELECT x\\nFROM y", 2, 6))
        FROM y
             ^
        >>> shown, carets = caret_line("x" * 200 + " oops " + "y" * 200, 1, 202, 4, window=80).split("\\n")
        >>> len(shown), shown[:6], shown[carets.index("^"):][:4], carets.count("^")
        (86, '...xxx', 'oops', 4)
    """
    start = 0
    for _ in range(max(line - 1, 0)):  # no splitting: the text may be a whole queries file
        nl = text.find("\n", start)
        if nl < 0:
            start = -1
            break
        start = nl + 1
    col, width = max(column - 1, 0), max(width, 1)
    if line < 1 or start < 0:
        return f"\n{' ' * col}{'^' * width}"
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    if end > start and text[end - 1] == "\r":
        end -= 1
    head = tail = ""
    if end - start <= window:
        src = text[start:end]
    else:
        left = max(0, min(col - window // 3, end - start - window))
        src = text[start + left : start + left + window]
        head = "..." if left else ""
        tail = "..." if start + left + window < end else ""
        col += len(head) - left
        width = max(1, min(width, len(head) + len(src) - col))
    src = head + src.replace("\t", " ") + tail
    return f"{src}\n{' ' * col}{'^' * width}"


def short_repr(value: object, limit: int = EXCERPT) -> str:
    """``repr(value)``, cut to at most ``limit`` characters (ending ``...``) for an error message.

    Example:
        >>> short_repr("abc"), short_repr(list(range(100)), 20)
        ("'abc'", '[0, 1, 2, 3, 4, 5...')
    """
    try:
        text = repr(value)
    except RecursionError:
        return f"<{type(value).__name__} nested too deep to show>"
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


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
    window: int = CARET_WINDOW  # the most characters of the line shown under the message

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
        return f"{where}: {self.label}{self.message}\n{caret_line(self.text, ln, col, self.width, self.window)}"


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
