"""Tokenizer for the SQL subset that MATCH_RECOGNIZE statements use."""

from __future__ import annotations

from dataclasses import dataclass

from patterns.errors import CepSyntaxError, SourceError

__all__ = ["Token", "tokenize"]

# Token kinds: IDENT (bare identifier or keyword; ``upper`` holds the keyword form), QIDENT (quoted
# identifier), STRING, NUMBER, OP (punctuation and operators), EOF.
_OPERATORS = (
    "<>", "!=", "<=", ">=", "||", "=", "<", ">", "(", ")", ",", ".", "*", "+", "-", "/", "%",
    "?", "{", "}", "|", "^", "$", ";",
)


@dataclass(frozen=True)
class Token:
    """One token of the source text with its character offset."""

    kind: str
    value: str
    offset: int

    @property
    def upper(self) -> str:
        return self.value.upper() if self.kind == "IDENT" else ""

    @property
    def width(self) -> int:
        return max(len(self.value), 1)


def tokenize(text: str, file: str | None = None) -> list[Token]:
    """Split ``text`` into tokens; the last token is always ``EOF``.

    Example:
        >>> [t.value for t in tokenize("A.price > PREV(price, 1)")]
        ['A', '.', 'price', '>', 'PREV', '(', 'price', ',', '1', ')', '']
    """
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise CepSyntaxError(SourceError("unterminated comment: expected '*/'", text, i, 2, file))
            i = j + 2
            continue
        if c.isalpha() or c == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            tokens.append(Token("IDENT", text[i:j], i))
            i = j
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i
            while j < n and text[j].isdigit():
                j += 1
            if j < n and text[j] == "." and j + 1 < n and text[j + 1].isdigit():
                j += 1
                while j < n and text[j].isdigit():
                    j += 1
            if j < n and text[j] in "eE":
                k = j + 1
                if k < n and text[k] in "+-":
                    k += 1
                if k < n and text[k].isdigit():
                    j = k
                    while j < n and text[j].isdigit():
                        j += 1
            tokens.append(Token("NUMBER", text[i:j], i))
            i = j
            continue
        if c in "'\"`":
            j = i + 1
            buf = []
            while True:
                if j >= n:
                    what = "string literal" if c == "'" else "quoted identifier"
                    raise CepSyntaxError(
                        SourceError(f"unterminated {what}: expected a closing {c}", text, i, 1, file)
                    )
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:  # doubled quote escapes itself
                        buf.append(c)
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            tokens.append(Token("STRING" if c == "'" else "QIDENT", "".join(buf), i))
            i = j + 1
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                tokens.append(Token("OP", op, i))
                i += len(op)
                break
        else:
            raise CepSyntaxError(SourceError(f"unexpected character {c!r}", text, i, 1, file))
    tokens.append(Token("EOF", "", n))
    return tokens
