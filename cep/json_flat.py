"""Flat JSON lines (one object of strings, numbers, booleans and nulls per line) scanned by compiled code.

Most event files are flat: every line names the same fields in the same order, and every value is
a string, a number, ``true``/``false`` or ``null``. For such a block of lines a scanner compiled
with numba reads every line in one pass over the bytes (the scan itself runs at about 400 MB per
CPU second here, several times Arrow's JSON reader on one core), and each string column is
dictionary-encoded on the way, so that a distinct host or URL becomes one Python string however
often it repeats, and its codes serve group keys and distinct counts downstream.

The scanner is a fast path only: it accepts a block when every line has exactly the first line's
fields in the first line's order, and each column holds one kind of value (NULL aside: integers,
decimals, strings or booleans); anything else (nested values, another field order, a byte it does
not expect, a decimal it cannot read exactly) makes it give the block back (``None``) to Arrow's
reader and the per-line decoder (:mod:`cep.json_blocks`), which decide every other case. A
decimal is read when its digits make at most 2**53 and its power of ten lies within 10**22 either
way (prices, measurements: nearly every decimal written by people or by a shortest-form printer):
then one multiplication or division of two exact doubles gives the correctly rounded value, the
one the per-line decoder's parser gives. What it returns is what the per-line decoder builds (tested against it).

Numba costs about a second of CPU once per process (its import, and loading the compiled code
from its cache), which a file pays back from about 100 MB on (the scanner saves some 10 ms of CPU
per MB against Arrow). Once numba is imported (the rules' compiled paths import it at their first
batch), loading the scanner costs about 60 ms (measured 56-59 ms after the batch DFA's kernels),
paid back after some 50,000 lines (1.2 us a line saved on market bars: 74,129 S&P 500 bars
decoded in 0.116 CPU s by Arrow and 0.020-0.026 s by the scanner). So by default
(``CEP_FLAT_JSON=auto``) a file takes the scanner when it has at least :data:`FLAT_MIN_BYTES`
bytes, or :data:`FLAT_WITH_NUMBA_BYTES` with numba imported (decided again at every block: a
file's first block goes to Arrow, the rest to the scanner once the rules loaded numba), or the
scanner is already loaded in the process; ``on`` takes it for every file, ``off`` for none;
without numba every block goes to Arrow.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import numpy as np
import orjson

from cep.compiled import numba_allowed

__all__ = ["FLAT_ENV", "FLAT_MIN_BYTES", "FLAT_WITH_NUMBA_BYTES", "DICT_MAX_BYTES", "DICT_MAX_CODES", "StringDictionary", "flat_enabled", "flat_for",
           "decode_flat", "newlines"]

FLAT_ENV = "CEP_FLAT_JSON"
"""Environment variable: ``auto`` (default), ``on`` or ``off`` (see the module docstring)."""
FLAT_MIN_BYTES = 64 << 20
"""Under ``auto``, files from this size on load the scanner (smaller ones use it once it is loaded)."""
FLAT_WITH_NUMBA_BYTES = 4 << 20
"""Under ``auto``, files from this size on load the scanner once numba is imported in the process."""

_NULL, _STR, _INT, _BOOL, _FLOAT = 0, 1, 2, 3, 4
_POW10 = np.array([float(10**k) for k in range(23)])  # each exact as a double: 5**22 < 2**53
_MAX_FIELDS = 256

_HAVE_NUMBA = importlib.util.find_spec("numba") is not None  # imported when first needed: it is slow to import


def _mode() -> str:
    got = os.environ.get(FLAT_ENV, "auto").strip().lower() or "auto"
    if got not in ("auto", "on", "off"):
        raise ValueError(f"{FLAT_ENV}={got!r}: expected 'auto' (the default), 'on' or 'off'")
    return got


def flat_enabled() -> bool:
    """Whether the compiled scanner can be used (numba installed and the scanner not turned off).

    Example:
        >>> flat_enabled() in (True, False)
        True
    """
    return _HAVE_NUMBA and _mode() != "off" and numba_allowed()


def flat_for(size: int | None) -> bool:
    """Whether a file of ``size`` bytes (None: unknown) is read with the scanner.

    Example:
        >>> flat_for(None) in (True, False)
        True
    """
    if not flat_enabled():
        return False
    if _mode() == "on" or bool(_compiled) or (size is not None and size >= FLAT_MIN_BYTES):
        return True
    # numba already imported (the rules' compiled paths load it at their first batch): loading the
    # scanner then costs ~60 ms of CPU, paid back by ~50,000 lines
    return size is not None and size >= FLAT_WITH_NUMBA_BYTES and "numba" in sys.modules


def _scan_py(buf, starts, ends, keys, key_off, kinds, vstart, vend, ivals, fvals, pow10):  # pragma: no cover - compiled
    """Scan every line; 0 when each is ``{"k1":v1,...}`` with the expected keys, else 1 + the bad line
    (``pow10``: the exact powers of ten 10**0 to 10**22 as doubles)."""
    nf = len(key_off) - 1
    n = len(starts)
    for i in range(n):
        p = starts[i]
        e = ends[i]
        while e > p and (buf[e - 1] == 10 or buf[e - 1] == 13 or buf[e - 1] == 32 or buf[e - 1] == 9):
            e -= 1
        while p < e and (buf[p] == 32 or buf[p] == 9):
            p += 1
        if p >= e or buf[p] != 123:  # '{'
            return i + 1
        p += 1
        for f in range(nf):
            while p < e and (buf[p] == 32 or buf[p] == 9):
                p += 1
            if p >= e or buf[p] != 34:
                return i + 1
            p += 1
            k0 = key_off[f]
            k1 = key_off[f + 1]
            klen = k1 - k0
            if p + klen >= e:
                return i + 1
            for j in range(klen):
                if buf[p + j] != keys[k0 + j]:
                    return i + 1
            p += klen
            if buf[p] != 34:
                return i + 1
            p += 1
            while p < e and (buf[p] == 32 or buf[p] == 9):
                p += 1
            if p >= e or buf[p] != 58:  # ':'
                return i + 1
            p += 1
            while p < e and (buf[p] == 32 or buf[p] == 9):
                p += 1
            if p >= e:
                return i + 1
            c = buf[p]
            if c == 34:  # a string without control characters; escapes are decoded by orjson later
                p += 1
                s = p
                esc = 0
                while p < e:
                    b = buf[p]
                    if b <= 92:  # letters and most URL bytes are above: one test for them
                        if b == 34:
                            break
                        if b < 32:
                            return i + 1
                        if b == 92:
                            esc = 1
                            p += 1
                    p += 1
                if p >= e:
                    return i + 1
                kinds[f, i] = 1
                vstart[f, i] = s
                vend[f, i] = p
                ivals[f, i] = esc
                p += 1
            elif c == 45 or (c >= 48 and c <= 57):  # a number (JSON grammar)
                neg = False
                if c == 45:
                    neg = True
                    p += 1
                    if p >= e:
                        return i + 1
                d0 = p
                v = 0
                while p < e and buf[p] >= 48 and buf[p] <= 57:
                    v = v * 10 + (buf[p] - 48)
                    p += 1
                nd = p - d0
                if nd == 0 or nd > 18 or (nd > 1 and buf[d0] == 48):
                    return i + 1
                if p < e and (buf[p] == 46 or buf[p] == 101 or buf[p] == 69):  # '.', 'e', 'E': a decimal
                    nfrac = 0
                    if buf[p] == 46:
                        p += 1
                        f0 = p
                        while p < e and buf[p] >= 48 and buf[p] <= 57:
                            v = v * 10 + (buf[p] - 48)
                            p += 1
                        nfrac = p - f0
                        if nfrac == 0 or nd + nfrac > 18:  # (v has not wrapped within 18 digits)
                            return i + 1
                    ex = 0
                    if p < e and (buf[p] == 101 or buf[p] == 69):
                        p += 1
                        eneg = False
                        if p < e and (buf[p] == 43 or buf[p] == 45):
                            eneg = buf[p] == 45
                            p += 1
                        x0 = p
                        while p < e and buf[p] >= 48 and buf[p] <= 57 and p - x0 < 4:
                            ex = ex * 10 + (buf[p] - 48)
                            p += 1
                        if p == x0 or (p < e and buf[p] >= 48 and buf[p] <= 57):
                            return i + 1
                        if eneg:
                            ex = -ex
                    # exact only where one IEEE operation on two exact doubles gives it (correctly
                    # rounded, as orjson's parse is): digits within 2**53 and a power of ten within
                    # 10**22; anything else goes to the other decoders
                    k10 = ex - nfrac
                    if v > 9007199254740992 or k10 > 22 or k10 < -22:
                        return i + 1
                    x = np.float64(v) * pow10[k10] if k10 >= 0 else np.float64(v) / pow10[-k10]
                    kinds[f, i] = 4
                    fvals[f, i] = -x if neg else x
                else:
                    kinds[f, i] = 2
                    ivals[f, i] = -v if neg else v
            elif c == 116:  # true
                if p + 4 > e or buf[p + 1] != 114 or buf[p + 2] != 117 or buf[p + 3] != 101:
                    return i + 1
                kinds[f, i] = 3
                ivals[f, i] = 1
                p += 4
            elif c == 102:  # false
                if p + 5 > e or buf[p + 1] != 97 or buf[p + 2] != 108 or buf[p + 3] != 115 or buf[p + 4] != 101:
                    return i + 1
                kinds[f, i] = 3
                ivals[f, i] = 0
                p += 5
            elif c == 110:  # null
                if p + 4 > e or buf[p + 1] != 117 or buf[p + 2] != 108 or buf[p + 3] != 108:
                    return i + 1
                kinds[f, i] = 0
                p += 4
            else:
                return i + 1
            while p < e and (buf[p] == 32 or buf[p] == 9):
                p += 1
            if p >= e:
                return i + 1
            if f < nf - 1:
                if buf[p] != 44:  # ','
                    return i + 1
            elif buf[p] != 125:  # '}'
                return i + 1
            p += 1
        if p != e:
            return i + 1
    return 0


def _block_codes_py(buf, vstart, vend, valid):  # pragma: no cover - compiled
    """Codes per row of the byte strings ``buf[vstart:vend]`` (-1 where not valid) in a table of
    this call's own, and the row of each code's first occurrence: one open-addressing table over
    FNV-1a hashes. A fresh table sized for the rows is faster per row than the file's dictionary
    (measured: about a fifth), so a block's rows are coded here and only its distinct strings
    are looked up in the dictionary."""
    n = len(vstart)
    size = 16
    while size < 2 * n:
        size *= 2
    mask = size - 1
    table = np.full(size, -1, np.int64)  # code at each slot
    first = np.empty(n, np.int64)  # row of each code's first occurrence
    codes = np.full(n, -1, np.int64)
    ncodes = 0
    for i in range(n):
        if not valid[i]:
            continue
        s = vstart[i]
        e = vend[i]
        # four bytes a step (one multiply per word, not per byte: hosts and URLs are long); the
        # codes do not depend on the hash, only where the table probes
        h = np.uint64(14695981039346656037) ^ np.uint64(e - s)
        p = s
        while p + 4 <= e:
            w = (np.uint64(buf[p]) | (np.uint64(buf[p + 1]) << np.uint64(8)) | (np.uint64(buf[p + 2]) << np.uint64(16))
                 | (np.uint64(buf[p + 3]) << np.uint64(24)))
            h = (h ^ w) * np.uint64(0x9E3779B97F4A7C15)
            p += 4
        while p < e:
            h = (h ^ np.uint64(buf[p])) * np.uint64(1099511628211)
            p += 1
        h ^= h >> np.uint64(29)
        slot = np.int64(h & np.uint64(mask))
        while True:
            c = table[slot]
            if c < 0:
                table[slot] = ncodes
                first[ncodes] = i
                codes[i] = ncodes
                ncodes += 1
                break
            r = first[c]
            rs = vstart[r]
            if vend[r] - rs == e - s:
                same = True
                for j in range(e - s):
                    if buf[rs + j] != buf[s + j]:
                        same = False
                        break
                if same:
                    codes[i] = c
                    break
            slot = (slot + 1) & mask
    return codes, first[:ncodes]


def _dict_encode_py(buf, vstart, vend, valid, codes, added, table, hashes, offs, lens, arena, state):  # pragma: no cover - compiled
    """Code each row of the byte strings ``buf[vstart:vend]`` (-1 where not valid) in a dictionary
    kept across calls, noting the rows that add a code (in code order) in ``added``.

    The dictionary: ``table`` (open addressing, a code per slot, -1 empty), each code's 64-bit
    hash, its bytes at ``arena[offs:offs + lens]``. ``state``: (codes, arena bytes used, the next
    row to code, rows noted in ``added``). Stops early, at a row that might not fit the per-code
    arrays (the table has four slots for each of their places) or the arena; the caller makes room
    and calls again."""
    n = len(vstart)
    mask = len(table) - 1
    ncodes = state[0]
    used = state[1]
    nadded = state[3]
    i = state[2]
    while i < n:
        if not valid[i]:
            codes[i] = -1
            i += 1
            continue
        s = vstart[i]
        e = vend[i]
        if ncodes + 1 > len(hashes) or used + (e - s) > len(arena):
            break
        # four bytes a step (one multiply per word, not per byte: hosts and URLs are long); the
        # codes do not depend on the hash, only where the table probes
        h = np.uint64(14695981039346656037) ^ np.uint64(e - s)
        p = s
        while p + 4 <= e:
            w = (np.uint64(buf[p]) | (np.uint64(buf[p + 1]) << np.uint64(8)) | (np.uint64(buf[p + 2]) << np.uint64(16))
                 | (np.uint64(buf[p + 3]) << np.uint64(24)))
            h = (h ^ w) * np.uint64(0x9E3779B97F4A7C15)
            p += 4
        while p < e:
            h = (h ^ np.uint64(buf[p])) * np.uint64(1099511628211)
            p += 1
        h ^= h >> np.uint64(29)
        slot = np.int64(h & np.uint64(mask))
        while True:
            c = table[slot]
            if c < 0:
                table[slot] = ncodes
                hashes[ncodes] = h
                offs[ncodes] = used
                lens[ncodes] = e - s
                for j in range(e - s):
                    arena[used + j] = buf[s + j]
                used += e - s
                added[nadded] = i
                nadded += 1
                codes[i] = ncodes
                ncodes += 1
                break
            if hashes[c] == h and lens[c] == e - s:  # the bytes compared only when the hashes agree
                rs = offs[c]
                same = True
                for j in range(e - s):
                    if arena[rs + j] != buf[s + j]:
                        same = False
                        break
                if same:
                    codes[i] = c
                    break
            slot = (slot + 1) & mask
        i += 1
    state[0] = ncodes
    state[1] = used
    state[2] = i
    state[3] = nadded


def _rehash_py(table, hashes, ncodes):  # pragma: no cover - compiled
    """Every code back into an emptied, larger ``table`` by its stored hash."""
    mask = len(table) - 1
    for c in range(ncodes):
        slot = np.int64(hashes[c] & np.uint64(mask))
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = c


DICT_MAX_CODES = 1 << 18
"""Distinct strings a column's dictionary holds before it starts afresh (bounds its memory on a
column of ids, where nearly every string is new)."""
DICT_MAX_BYTES = 1 << 26
"""Bytes of strings a column's dictionary holds before it starts afresh."""


class StringDictionary:
    """The distinct strings of one column of a file, in first-seen order, kept across its blocks.

    A block's strings are looked up here, so a host or URL seen in an earlier block keeps its code
    and its Python string: only strings new to the file are copied, decoded and (downstream)
    hashed. The strings only grow (``values()`` of a later block starts with those of an earlier
    one), so a consumer can keep what it derived per code (key ids, hashes) and extend it. A
    dictionary is replaced by a new, empty one past :data:`DICT_MAX_CODES` strings or
    :data:`DICT_MAX_BYTES` bytes (consumers tell them apart by identity).

    Example:
        >>> d = StringDictionary()
        >>> len(d), d.values().tolist()
        (0, [])
    """

    __slots__ = ("table", "hashes", "offs", "lens", "arena", "state", "strings", "__weakref__")  # (weak: consumers' caches)

    def __init__(self) -> None:
        self.table = np.full(1 << 11, -1, dtype=np.int64)  # four slots per code of room: short probes
        self.hashes = np.empty(1 << 9, dtype=np.uint64)
        self.offs = np.empty(1 << 9, dtype=np.int64)
        self.lens = np.empty(1 << 9, dtype=np.int64)
        self.arena = np.empty(1 << 16, dtype=np.uint8)
        self.state = np.zeros(4, dtype=np.int64)  # codes, arena bytes used; the encoder's row and new rows
        self.strings = np.empty(1 << 9, dtype=object)  # the decoded string of each code, then room

    def __len__(self) -> int:
        return int(self.state[0])

    def values(self) -> np.ndarray:
        """The distinct strings so far, by code (a view: later blocks add after its end)."""
        return self.strings[:len(self)]

    def full_for(self, rows: int, nbytes: int) -> bool:
        """Whether ``rows`` more strings of ``nbytes`` bytes could pass the limits."""
        return len(self) + rows > DICT_MAX_CODES or int(self.state[1]) + nbytes > DICT_MAX_BYTES

    def _grow(self, nbytes: int) -> None:
        """Twice the room for codes (and the table), and the arena for ``nbytes`` more bytes."""
        n, used = len(self), int(self.state[1])
        if n + 1 > len(self.hashes):
            size = 2 * len(self.hashes)
            for name in ("hashes", "offs", "lens"):
                old = getattr(self, name)
                new = np.empty(size, dtype=old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
            strings = np.empty(size, dtype=object)
            strings[:n] = self.strings[:n]
            self.strings = strings  # views handed out keep the old array: the same strings
            self.table = np.full(4 * size, -1, dtype=np.int64)  # at most a quarter full: short probes
            _compiled["rehash"](self.table, self.hashes, n)
        if used + nbytes > len(self.arena):
            arena = np.empty(max(2 * len(self.arena), used + nbytes), dtype=np.uint8)
            arena[:used] = self.arena[:used]
            self.arena = arena

    def encode(self, buf: np.ndarray, s: np.ndarray, e: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a code per row, -1 where not valid; the rows that brought new codes, in code order)."""
        local, first = _compiled["block"](buf, s, e, valid)  # the block's distinct strings, coded apart
        codes, added = self._encode(buf, s[first], e[first], np.ones(len(first), dtype=bool))
        return np.append(codes, -1)[local], first[added]  # -1 (not valid) takes the last entry

    def _encode(self, buf: np.ndarray, s: np.ndarray, e: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(s)
        codes = np.empty(n, dtype=np.int64)
        added = np.empty(n, dtype=np.int64)
        self.state[2:] = 0
        encode = _compiled["dict"]
        while True:
            encode(buf, s, e, valid, codes, added, self.table, self.hashes, self.offs, self.lens, self.arena, self.state)
            at = int(self.state[2])
            if at >= n:
                return codes, added[:int(self.state[3])]
            self._grow(int(e[at] - s[at]))

    def add_strings(self, start: int, strings: list[str]) -> None:
        """The decoded strings of the codes from ``start`` on (those :meth:`encode` just added)."""
        self.strings[start:start + len(strings)] = strings


def _newlines_py(buf):  # pragma: no cover - compiled
    """Positions of the newline bytes of ``buf``: one pass, no mask of the whole buffer."""
    count = 0
    for i in range(len(buf)):
        if buf[i] == 10:
            count += 1
    out = np.empty(count, np.int64)
    k = 0
    for i in range(len(buf)):
        if buf[i] == 10:
            out[k] = i
            k += 1
    return out


def _gather_py(buf, s, e):  # pragma: no cover - compiled
    """The bytes ``buf[s[j]:e[j]]`` of every j, each followed by a newline, in one array."""
    total = 0
    for j in range(len(s)):
        total += e[j] - s[j] + 1
    out = np.empty(total, np.uint8)
    k = 0
    for j in range(len(s)):
        for p in range(s[j], e[j]):
            out[k] = buf[p]
            k += 1
        out[k] = 10
        k += 1
    return out


def newlines(buf: np.ndarray) -> np.ndarray:
    """Where the newlines of ``buf`` (bytes as uint8) are: compiled once the scanner is loaded in
    the process (then files are read with it), else numpy's.

    Example:
        >>> newlines(np.frombuffer(b"a\\nbc\\n\\n", dtype=np.uint8)).tolist()
        [1, 4, 5]
    """
    got = _compiled.get("newlines")
    if got is None:
        return np.flatnonzero(buf == 10)
    return got(buf)


def _strings(block: bytes, buf: np.ndarray, s: np.ndarray, e: np.ndarray, esc: np.ndarray) -> list[str]:
    """The strings at ``block[s:e]`` (``esc``: holds an escape), decoded as the per-line decoder does."""
    if not len(s):
        return []
    if esc.any():  # escapes are decoded as JSON (the same escapes, the same refusals); the rest at once
        out = _plain(buf, s, e, esc == 0)
        for j in np.flatnonzero(esc).tolist():
            out[j] = orjson.loads(block[int(s[j]) - 1:int(e[j]) + 1])
        return out
    return _plain(buf, s, e, None)


def _plain(buf: np.ndarray, s: np.ndarray, e: np.ndarray, which: np.ndarray | None) -> list:
    """The strings without escapes at ``buf[s:e]`` (``which``: those only; None elsewhere)."""
    if which is not None:
        at = np.flatnonzero(which)
        got = _plain(buf, s[at], e[at], None) if len(at) else []
        out: list = [None] * len(s)
        for j, v in zip(at.tolist(), got):
            out[j] = v
        return out
    if not len(s):
        return []
    # one decode for them all: each string followed by a newline (no string holds a raw newline:
    # control characters were refused), then split
    gathered = _compiled["gather"](buf, s, e)  # loaded with the scanner that found the strings
    return gathered.tobytes().decode("utf-8").split("\n")[:-1]


_compiled: dict[str, Any] = {}


def _kernels() -> tuple[Any, Any]:
    if not _compiled:
        import numba

        jit = numba.njit(cache=True, nogil=True, boundscheck=False)
        _compiled["scan"] = jit(_scan_py)
        _compiled["dict"] = jit(_dict_encode_py)
        _compiled["newlines"] = jit(_newlines_py)
        _compiled["gather"] = jit(_gather_py)
        _compiled["rehash"] = jit(_rehash_py)
        _compiled["block"] = jit(_block_codes_py)
    return _compiled["scan"], _compiled["dict"]


def _first_keys(block: bytes, end: int) -> list[str] | None:
    """The first line's field names when it is a flat object, else None."""
    try:
        obj = orjson.loads(block[:end])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not obj or len(obj) > _MAX_FIELDS:
        return None
    for v in obj.values():
        if isinstance(v, (dict, list)):
            return None
    return list(obj)


def decode_flat(block: bytes, ends: np.ndarray,
                codes: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
                dicts: dict[str, StringDictionary] | None = None) -> dict[str, np.ndarray] | None:
    """The columns of a block of flat JSON lines as the per-line decoder builds them, or None.

    ``ends``: where each line ends in ``block`` (after its newline). None: the block is not
    uniformly flat (see the module docstring) and another decoder must decide. ``codes``, when
    given, receives each string column's dictionary encoding: (a code per row, -1 for NULL; the
    distinct strings in first-seen order), what ``pandas.factorize`` gives for the column when
    the dictionary is new. ``dicts``: the dictionaries of the file's blocks so far, by column
    (:class:`StringDictionary`), used and extended (a block's codes then index every string of
    the file's column so far, each string once, spelt with or without escapes apart); without
    it each block has its own.

    Example:
        >>> cols = decode_flat(b'{"a":"x","n":1}\\n{"a":"y","n":null}\\n{"a":"x","n":3}\\n', np.array([16, 35, 51]))
        >>> None if cols is None else (cols["a"].tolist(), cols["n"].tolist())  # None where numba is absent
        (['x', 'y', 'x'], [1, None, 3])
    """
    n = len(ends)
    if not n or not flat_enabled():
        return None
    keys = _first_keys(block, int(ends[0]))
    if keys is None:
        return None
    try:
        raw_keys = [k.encode("utf-8") for k in keys]
    except UnicodeEncodeError:  # a lone surrogate (an escape in the key): the other decoders decide
        return None
    scan, _encode = _kernels()
    buf = np.frombuffer(block, dtype=np.uint8)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1]
    key_off = np.zeros(len(keys) + 1, dtype=np.int64)
    key_off[1:] = np.cumsum([len(k) for k in raw_keys])
    key_bytes = np.frombuffer(b"".join(raw_keys) or b"\0", dtype=np.uint8)
    nf = len(keys)
    # left uninitialised: a scan that accepts the block has set each line's kind of every field,
    # and the bounds (strings) or value (integers, booleans, a string's escape flag) its kind reads
    kinds = np.empty((nf, n), dtype=np.int8)
    vstart = np.empty((nf, n), dtype=np.int64)
    vend = np.empty((nf, n), dtype=np.int64)
    ivals = np.empty((nf, n), dtype=np.int64)
    fvals = np.empty((nf, n), dtype=np.float64)
    if scan(buf, starts, np.asarray(ends, dtype=np.int64), key_bytes, key_off, kinds, vstart, vend, ivals, fvals, _POW10):
        return None
    cols: dict[str, np.ndarray] = {}
    enc: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for f, name in enumerate(keys):
        kf = kinds[f]
        per_kind = np.bincount(kf, minlength=5)
        present = np.flatnonzero(per_kind[1:]) + 1
        if len(present) > 1:  # a column of mixed kinds: the other decoders say what it becomes
            return None
        nonnull = kf != _NULL
        allvalid = per_kind[_NULL] == 0
        kind = int(present[0]) if len(present) else _NULL
        if kind == _NULL:
            cols[name] = np.full(n, None, dtype=object)
        elif kind == _STR:
            d = dicts.get(name) if dicts is not None else None
            if d is None or d.full_for(n, len(block)):
                d = StringDictionary()
                if dicts is not None:
                    dicts[name] = d
            before = len(d)
            vcodes, added = d.encode(buf, vstart[f], vend[f], nonnull)
            try:
                fresh = _strings(block, buf, vstart[f][added], vend[f][added], ivals[f][added])
            except (UnicodeDecodeError, orjson.JSONDecodeError):  # the per-line decoder reports the line
                if dicts is not None:  # codes without their strings: the next block starts afresh
                    dicts.pop(name, None)
                return None
            d.add_strings(before, fresh)
            uniq = d.values()
            if allvalid:
                cols[name] = uniq[vcodes]
            else:
                col = uniq[np.where(nonnull, vcodes, 0)] if len(uniq) else np.empty(n, dtype=object)
                col[~nonnull] = None
                cols[name] = col
            enc[name] = (vcodes, uniq)
        else:  # integers, decimals, booleans: a typed column, or Python values and None
            vals = ivals[f] if kind == _INT else fvals[f] if kind == _FLOAT else ivals[f] != 0
            if allvalid:
                cols[name] = vals.copy()  # (not a view that keeps the whole scan matrix alive)
            else:
                obj = vals.astype(object)
                obj[~nonnull] = None
                cols[name] = obj
    if codes is not None:
        codes.update(enc)
    return cols
