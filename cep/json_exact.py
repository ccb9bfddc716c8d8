"""JSON documents decoded with every integer exact: orjson, and the standard library where orjson rounds.

orjson keeps integers exactly from -2**63 to 2**64-1 and turns any integer literal outside that
range into a float (``18446744073709551616`` becomes ``1.8446744073709552e+19``), so two distinct
ids would compare equal in a rule and nothing would say so. The standard library's :mod:`json`
keeps every integer a Python ``int`` but decodes several times slower, so it re-reads only the
documents orjson may have rounded: those holding, at any depth, a float of magnitude 2**63 or
more (every float there is whole, and a rounded integer literal is one of them). Floats written as
floats (``1e19``, ``1.5e20``) stay floats, since :mod:`json` reads them as floats too.

Looking for such a float costs little but not nothing per line (a regular expression over the
bytes costs more than orjson's whole decoding; a walk over the values a third of it), so the
per-line decoder looks per batch, column by column (:func:`rounded_rows`: a float64 column in one
numpy comparison; an object column of strings, integers or booleans in one type inference), and
re-reads only the rows it names. :func:`loads_exact` decides one document on its own.

orjson refuses a number past a double's range (``1e400``, and an integer of some 310 digits or
more, "number is infinity when parsed as double"); such an integer is read by :mod:`json` too
(:func:`loads_fast`), up to Python's limit on the digits of an integer read from text (4,300 by
default), past which the document is refused with that reason. A decimal past a double's range
stays refused.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import numpy as np
import orjson

__all__ = ["loads_fast", "after_refusal", "loads_exact", "rounded_rows", "holds_rounded", "ROUNDED_FROM", "PLAIN_KINDS", "ORJSON_DEPTH",
           "dumps_exact", "wide_ints_exact", "hashable_exact", "WIDE_TAG"]

ROUNDED_FROM = 2.0 ** 63
"""Magnitude from which a float orjson produced may be a rounded integer literal (floats there are all whole)."""

# the digits an integer outside orjson's range needs; looked for only in a document orjson refused
_WIDE_DIGITS = re.compile(rb"[0-9]{20}|-9[0-9]{18}")


def loads_fast(raw: bytes) -> Any:
    """``raw`` (one JSON document, UTF-8) as orjson decodes it, integers past a double's range exact.

    Integers from 2**64 (or below -2**63) up to a double's range are floats here, as orjson makes
    them: a caller checks with :func:`holds_rounded` (or :func:`rounded_rows` for a batch) and
    decodes those again with :func:`loads_exact`. Raises :class:`orjson.JSONDecodeError` for a
    document orjson refuses, unless orjson refused it only for an integer past a double's range.

    Example:
        >>> loads_fast(b'{"a": 18446744073709551616, "b": 1' + b'0' * 400 + b'}') == {"a": 2.0**64, "b": 10**400}
        True
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return after_refusal(raw, e)


def after_refusal(raw: bytes, refused: orjson.JSONDecodeError) -> Any:
    """The document orjson refused with ``refused``, when the reason was an integer past a
    double's range (read exactly by the standard library); else ``refused`` raised again."""
    if "infinity" not in str(refused) or _WIDE_DIGITS.search(raw) is None:
        raise refused
    return _huge_ints(raw, refused)


def loads_exact(raw: bytes) -> Any:
    """``raw`` (one JSON document, UTF-8) decoded as orjson decodes it, but with exact integers.

    Raises :class:`orjson.JSONDecodeError` for a document orjson refuses, unless orjson refused
    it only for an integer past a double's range, which is then read exactly; and for a document
    with a rounded integer nested too deep for the standard library even with its recursion limit
    raised (never the rounded value).

    Example:
        >>> loads_exact(b'{"id": 18446744073709551616, "f": 1e19, "n": [-9223372036854775809]}')
        {'id': 18446744073709551616, 'f': 1e+19, 'n': [-9223372036854775809]}
    """
    obj = loads_fast(raw)
    if not holds_rounded(obj):
        return obj
    # orjson accepted the document, so it is valid UTF-8 JSON without NaN, Infinity, lone surrogates
    # or numbers past a double (which json would take): json reads the same values, integers exact
    text = raw.decode("utf-8")
    try:
        return _deep_loads(text)
    except RecursionError:
        raise orjson.JSONDecodeError(
            f"an integer past 64 bits nested too deep to be read exactly (orjson reads up to {ORJSON_DEPTH:,} "
            "levels; Python's json ran out of stack)", text, 0) from None


ORJSON_DEPTH = 1024
"""How deep orjson reads arrays and objects; the standard library's json counts its depth against
Python's recursion limit (1,000 by default, some of it used by the caller's stack)."""


def _deep_loads(text: str, **kw: Any) -> Any:
    """``json.loads(text)``; a document nested deeper than Python's recursion limit allows is read
    again with the limit raised by orjson's depth, for this call only (each level of the C decoder
    counts one against the limit and uses little stack). RecursionError if even that is not enough."""
    try:
        return json.loads(text, **kw)
    except RecursionError:
        pass
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(old + ORJSON_DEPTH + 64)
        return json.loads(text, **kw)
    finally:
        sys.setrecursionlimit(old)


PLAIN_KINDS = frozenset({"string", "integer", "boolean", "empty", "bytes"})
"""Kinds of pandas' ``infer_dtype`` whose columns hold no float and no container: nothing rounded."""


def rounded_rows(columns: dict[str, np.ndarray]) -> list[int]:
    """The rows of a batch's columns (as :func:`cep.events.batch_from_records` builds them from
    :func:`loads_fast`'s documents) that may hold a rounded integer: decode them again.

    Example:
        >>> rounded_rows({"a": np.array([1.5, 2.0**64, -2.0**63]), "b": np.array(["x", {"c": [2.0**70]}, None], dtype=object)})
        [1, 2]
    """
    import pandas as pd

    rows: set[int] = set()
    for col in columns.values():
        if col.dtype == np.float64:
            with np.errstate(invalid="ignore"):
                rows.update(np.flatnonzero(np.abs(col) >= ROUNDED_FROM).tolist())
        elif col.dtype == object and len(col) and pd.api.types.infer_dtype(col, skipna=True) not in PLAIN_KINDS:
            rows.update(i for i, v in enumerate(col.tolist()) if holds_rounded(v))
    return sorted(rows)


def _huge_ints(raw: bytes, refused: orjson.JSONDecodeError) -> Any:
    """The document orjson refused for a number past a double, when that number is an integer.

    The standard library accepts more than orjson (NaN, Infinity, decimals past a double, lone
    surrogates): each of those keeps the document refused with orjson's reason."""
    try:
        obj = _deep_loads(raw.decode("utf-8"), parse_float=_finite_float, parse_constant=_no_constant)
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


def holds_rounded(obj: Any) -> bool:
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


_INT_LOW, _INT_HIGH = -(2**63), 2**64  # orjson writes the integers in [low, high)


def wide_ints_exact(v: Any) -> Any:
    """``v`` with every integer orjson cannot write (beyond -2**63..2**64-1) replaced by its exact
    decimal digits as a JSON number (an ``orjson.Fragment``), at any depth (tuples become lists,
    as orjson writes them)."""
    t = type(v)
    if t is int:
        return v if _INT_LOW <= v < _INT_HIGH else orjson.Fragment(str(v).encode())
    if t is dict:
        return {k: wide_ints_exact(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [wide_ints_exact(x) for x in v]
    return v


def dumps_exact(v: Any, default: Any = None, option: int | None = None) -> bytes:
    """``orjson.dumps(v, default, option)``, with integers past 64 bits written as their exact
    digits (orjson raises for them, before asking ``default``), so that text made of values read
    exactly (row ids, output lines) reads back as the same integers.

    Example:
        >>> dumps_exact([2**64 + 1, "k", 3])
        b'[18446744073709551617,"k",3]'
    """
    try:
        return orjson.dumps(v, default=default, option=option)
    except orjson.JSONEncodeError:
        return orjson.dumps(wide_ints_exact(v), default=default, option=option)


WIDE_TAG = "\0int:"
"""What :func:`hashable_exact` puts before the digits of an int no float equals (a text starts with
NUL only when the input spells ``\\u0000`` on purpose)."""


def hashable_exact(v: Any) -> Any:
    """``v`` in a form the sketches' hash (:func:`sketches.hash128`) takes, hashing alike exactly
    when Python finds the values equal: an integer outside the signed 64-bit range as the float it
    equals (floats that large hash by their bits, as the float itself does), else as its digits
    tagged with :data:`WIDE_TAG`, so that it never hashes like the same digits as text; any other
    value as is. For distinct counts, "seen before" and sketches over values read exactly.

    The sketches' hash takes an unsigned 64-bit integer as its 64-bit image (the DataSketches
    convention), which is also a negative int64's: ``2**64 - 1`` would be ``-1``. So the integers
    from 2**63 to 2**64-1 take this form too (see :func:`past_signed_64`).

    Example:
        >>> hashable_exact(2**64), hashable_exact("x"), hashable_exact(7), hashable_exact(2**63)
        (1.8446744073709552e+19, 'x', 7, 9.223372036854776e+18)
        >>> hashable_exact(2**64 + 1) == WIDE_TAG + "18446744073709551617"
        True
        >>> hashable_exact(2**64 - 1) == WIDE_TAG + "18446744073709551615"
        True
    """
    if type(v) is not int:
        if not isinstance(v, np.unsignedinteger) or v < _SIGNED_HIGH:
            return v
        v = int(v)
    elif _INT_LOW <= v < _SIGNED_HIGH:
        return v
    try:
        f = float(v)
    except OverflowError:  # (past a double's range: no float equals it)
        return f"{WIDE_TAG}{v}"
    return f if int(f) == v else f"{WIDE_TAG}{v}"


_SIGNED_HIGH = 2**63


def past_signed_64(values: np.ndarray | list) -> bool:
    """Whether a column holds an integer from 2**63 to 2**64-1 (an unsigned column, or Python or
    numpy ints among objects), which :func:`sketches.hash128` would hash as the negative int64 with
    the same bits: such a column is hashed value by value through :func:`hashable_exact`.

    Example:
        >>> past_signed_64(np.array([1, 2**64 - 1], dtype=np.uint64)), past_signed_64([-1, "a"])
        (True, False)
    """
    if isinstance(values, np.ndarray):
        kind = values.dtype.kind
        if kind == "u":
            return values.dtype.itemsize == 8 and bool(len(values)) and int(values.max()) >= _SIGNED_HIGH
        if kind != "O":
            return False
        values = values.tolist()
    return any(isinstance(v, (int, np.unsignedinteger)) and v >= _SIGNED_HIGH for v in values)
