"""One JSON document decoded with every integer exact: orjson, and the standard library where orjson rounds.

orjson keeps integers exactly from -2**63 to 2**64-1 and turns any integer literal outside that
range into a float (``18446744073709551616`` becomes ``1.8446744073709552e+19``), so two distinct
ids would compare equal in a rule and nothing would say so. The standard library's :mod:`json`
keeps every integer a Python ``int`` but decodes several times slower, so it re-reads only the
documents orjson rounded: an integer literal outside orjson's range has at least 20 digits, or 19
after a minus sign starting with 9 (``-9223372036854775809``), and orjson then made a float of
magnitude at least 2**63 of it. A document without such a run of digits costs one regular
expression search; one with such a run (a long digit string, a long decimal) costs a walk over
its values too; only one whose values hold such a float is decoded again. Floats written as
floats (``1e19``, ``1.5e20``) stay floats, since :mod:`json` reads them as floats too.

orjson refuses a number past a double's range (``1e400``, and an integer of some 310 digits or
more, "number is infinity when parsed as double"); such an integer is read by :mod:`json` too, up
to Python's limit on the digits of an integer read from text (4,300 by default), past which the
document is refused with that reason. A decimal past a double's range stays refused.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import orjson

__all__ = ["loads_exact", "ROUNDED_FROM"]

ROUNDED_FROM = 2.0 ** 63
"""Magnitude from which a float orjson produced may be a rounded integer literal (floats there are all whole)."""

# digits that an integer outside [-2**63, 2**64) needs; inside a string or a decimal they only cost a walk
_WIDE_DIGITS = re.compile(rb"[0-9]{20}|-9[0-9]{18}")


def loads_exact(raw: bytes) -> Any:
    """``raw`` (one JSON document, UTF-8) decoded as orjson decodes it, but with exact integers.

    Raises :class:`orjson.JSONDecodeError` for a document orjson refuses, unless orjson refused
    it only for an integer past a double's range, which is then read exactly.

    Example:
        >>> loads_exact(b'{"id": 18446744073709551616, "f": 1e19, "n": [-9223372036854775809]}')
        {'id': 18446744073709551616, 'f': 1e+19, 'n': [-9223372036854775809]}
    """
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if "infinity" not in str(e) or _WIDE_DIGITS.search(raw) is None:
            raise
        return _huge_ints(raw, e)
    if _WIDE_DIGITS.search(raw) is None or not _holds_rounded(obj):
        return obj
    # orjson accepted the document, so it is valid UTF-8 JSON without NaN, Infinity, lone surrogates
    # or numbers past a double (which json would take): json reads the same values, integers exact
    return json.loads(raw.decode("utf-8"))


def _huge_ints(raw: bytes, refused: orjson.JSONDecodeError) -> Any:
    """The document orjson refused for a number past a double, when that number is an integer.

    The standard library accepts more than orjson (NaN, Infinity, decimals past a double, lone
    surrogates): each of those keeps the document refused with orjson's reason."""
    try:
        obj = json.loads(raw.decode("utf-8"), parse_float=_finite_float, parse_constant=_no_constant)
    except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError and the digit limit are ValueErrors
        if "digits" in str(e) and "integer" in str(e):
            limit = sys.get_int_max_str_digits()
            at = m.start() if (m := _WIDE_DIGITS.search(raw)) else 0
            raise orjson.JSONDecodeError(
                f"an integer of more than {limit:,} digits (Python's limit on reading an integer from text)",
                raw.decode("utf-8", "replace"), at) from None
        raise refused from None
    except RecursionError:
        raise refused from None
    if not _valid_text(obj):
        raise refused
    return obj


def _finite_float(text: str) -> float:
    v = float(text)
    if math.isinf(v):
        raise ValueError(f"{text!r} is past a double's range")
    return v


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not JSON")


def _valid_text(obj: Any) -> bool:
    """Whether every string (keys too) is valid Unicode text (no lone surrogate, as orjson requires)."""
    stack = [obj]
    while stack:
        v = stack.pop()
        try:
            if type(v) is str:
                v.encode("utf-8")
            elif type(v) is dict:
                for k in v:
                    k.encode("utf-8")
                stack.extend(v.values())
            elif type(v) is list:
                stack.extend(v)
        except UnicodeEncodeError:
            return False
    return True


def _holds_rounded(obj: Any) -> bool:
    """Whether ``obj`` holds, at any depth, a float that may stand for a rounded integer literal."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if type(v) is float:
            if v >= ROUNDED_FROM or v <= -ROUNDED_FROM:
                return True
        elif type(v) is dict:
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)
    return False
