"""A batch's texts as one byte buffer of tokens, and their term ids looked up from the bytes.

Long documents are mostly words no query asks for: making a Python string of every token and a
dict lookup of each cost more than everything else a batch of articles does (profiled on
Reuters articles with 2,000 queries). Here the tokens stay bytes: ASCII text is lower-cased and
split by one ``bytes.translate`` into a buffer, the token boundaries come from a compiled loop
(numba, when installed) or numpy, and each token of up to 16 bytes is identified exactly by its
length and its bytes read as two 64-bit words, looked up in an open-addressing table of the
remembered terms. Only tokens the table does not hold (terms never seen, tokens longer than 16
bytes) become Python strings. With numba, one compiled pass (:func:`_scan_loop`) reads the
batch's untranslated bytes and gives each token's term id directly (no token arrays); the
token stream is then the path without numba.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from cep.compiled import numba_allowed

__all__ = ["_TokenStream", "_TokenTable", "_joined_bytes", "_kernels", "_scan_loop", "_stream_of",
           "_term_at"]


# ASCII: letters and digits stay (upper case lowered), NUL stays (it separates documents), any
# other ASCII byte separates tokens; bytes >= 128 stay (UTF-8 of terms analysed beforehand).
_BYTES = bytes(
    0 if b == 0 else
    (ord(chr(b).lower()) if chr(b).isalnum() else 0x20) if b < 128 else b
    for b in range(256)
)
_SHORT = 16  # tokens up to this many bytes are identified by (length, two words)
_PAD = b" " * (_SHORT + 1)
_TRANS = np.frombuffer(_BYTES, dtype=np.uint8)  # the same translation, inside the compiled pass
_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [2**64 - 1], dtype=np.uint64)
_M0, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(
    0x165667B19E3779F9)


class _TokenStream:
    """Every token of a batch of documents: byte offsets into one buffer, document, length,
    and the two 64-bit words that identify a short token."""

    __slots__ = ("body", "starts", "ends", "doc", "lens", "w0", "w1", "size")

    def __init__(self, body: bytes, n: int) -> None:
        self.body = body
        # a separator (NUL: document 0 starts) before the first byte, spaces after the last:
        # every token's two words can be read without running off the end
        arr = np.frombuffer(b"\x00" + body + _PAD, dtype=np.uint8)
        kernels = _kernels()
        if kernels is not None:
            starts, ends, doc, w0, w1 = kernels[0](arr)
        else:
            starts, ends, doc, w0, w1 = _tokenize_numpy(arr)
        self.starts, self.ends, self.doc, self.w0, self.w1 = starts, ends, doc, w0, w1
        self.size = ends - starts
        self.lens = np.bincount(doc, minlength=n).astype(np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    def term(self, i: int) -> str:
        """Token ``i`` as a string (offsets are into the padded buffer: one byte on)."""
        return self.body[int(self.starts[i]) - 1:int(self.ends[i]) - 1].decode("utf-8")


def _tokenize_numpy(arr: np.ndarray) -> tuple[np.ndarray, ...]:
    """Token starts, ends (exclusive), documents and words, with numpy (no numba)."""
    tok = (arr != 0x20) & (arr != 0)
    marks = np.flatnonzero(tok[1:] != tok[:-1])  # alternately a start and an end (minus one)
    starts = marks[0::2] + 1
    ends = marks[1::2] + 1
    seps = np.flatnonzero(arr == 0)
    doc = np.searchsorted(seps, starts, side="left").astype(np.int64) - 1
    size = ends - starts
    # every byte offset read as a little-endian 64-bit word (an overlapping view)
    w = np.ndarray(shape=(len(arr) - 7,), dtype="<u8", buffer=arr.data, strides=(1,))
    w0 = w[starts] & _MASKS[np.minimum(size, 8)]
    w1 = w[starts + 8] & _MASKS[np.clip(size - 8, 0, 8)]
    return starts, ends, doc, w0, w1


def _tokenize_loop(arr: np.ndarray) -> tuple[np.ndarray, ...]:
    """The same as :func:`_tokenize_numpy` in one pass after a counting one (compiled by
    numba; the counting pass keeps the arrays exact: fresh memory costs page faults)."""
    n = len(arr)
    m = 0
    prev = False
    for i in range(n):
        c = arr[i]
        tok = c != 0x20 and c != 0
        if tok and not prev:
            m += 1
        prev = tok
    starts = np.empty(m, dtype=np.int64)
    ends = np.empty(m, dtype=np.int64)
    doc = np.empty(m, dtype=np.int64)
    w0 = np.empty(m, dtype=np.uint64)
    w1 = np.empty(m, dtype=np.uint64)
    t = 0
    d = -1
    i = 0
    while i < n:
        c = arr[i]
        if c == 0:
            d += 1
            i += 1
            continue
        if c == 0x20:
            i += 1
            continue
        j = i
        while arr[j] != 0x20 and arr[j] != 0:  # the buffer ends in spaces
            j += 1
        size = j - i
        a = np.uint64(0)
        b = np.uint64(0)
        for k in range(min(size, 8)):
            a |= np.uint64(arr[i + k]) << np.uint64(8 * k)
        for k in range(8, min(size, 16)):
            b |= np.uint64(arr[i + k]) << np.uint64(8 * (k - 8))
        starts[t] = i
        ends[t] = j
        doc[t] = d
        w0[t] = a
        w1[t] = b
        t += 1
        i = j
    return starts, ends, doc, w0, w1


def _lookup_loop(size: np.ndarray, w0: np.ndarray, w1: np.ndarray, slots: np.ndarray,
                 bits: int) -> np.ndarray:
    """Term id per token (-1: not in the table), probing (compiled by numba)."""
    m = len(size)
    out = np.full(m, -1, dtype=np.int64)
    mask = len(slots) - 1
    for i in range(m):
        n = size[i]
        if n > _SHORT:
            continue
        a = w0[i]
        b = w1[i]
        un = np.uint64(n)
        h = a * _M0 + b * _M1 + un * _M2
        h ^= h >> np.uint64(29)
        s = np.int64(h >> np.uint64(64 - bits))
        while slots[s, 0] != 0:
            if slots[s, 0] == un and slots[s, 1] == a and slots[s, 2] == b:
                out[i] = np.int64(slots[s, 3])
                break
            s = (s + 1) & mask
    return out


def _insert_loop(size: np.ndarray, w0: np.ndarray, w1: np.ndarray, tid: np.ndarray,
                 slots: np.ndarray, bits: int) -> tuple[int, int]:
    """Insert entries not yet there: (how many were added, the longest probe)."""
    mask = len(slots) - 1
    added = 0
    longest = 1
    for i in range(len(size)):
        un = np.uint64(size[i])
        h = w0[i] * _M0 + w1[i] * _M1 + un * _M2
        h ^= h >> np.uint64(29)
        s = np.int64(h >> np.uint64(64 - bits))
        steps = 1
        found = False
        while slots[s, 0] != 0:
            if slots[s, 0] == un and slots[s, 1] == w0[i] and slots[s, 2] == w1[i]:
                found = True
                break
            s = (s + 1) & mask
            steps += 1
        if not found:
            slots[s, 0] = un
            slots[s, 1] = w0[i]
            slots[s, 2] = w1[i]
            slots[s, 3] = np.uint64(tid[i])
            added += 1
            if steps > longest:
                longest = steps
    return added, longest


def _scan_loop(arr: np.ndarray, words: np.ndarray, trans: np.ndarray, slots: np.ndarray,
               bits: int, n: int) -> tuple[np.ndarray, ...]:
    """One pass over a batch's bytes (``n`` documents joined by NUL, not yet translated):
    ``(term id per token (-1: not in the table), each document's first token (n + 1), and for
    the tokens without an id their index, first byte and end)`` (compiled by numba).

    Each byte is classified here (``trans``, the table of ``bytes.translate``); a short token's
    two words are read at once from ``words`` (every byte offset of ``arr`` as a little-endian
    64-bit word) and lower-cased by setting bit 5 of each byte (the translation of an ASCII
    letter or digit; a token holding bytes past ASCII is translated byte by byte), and its term
    id probed at once: no array per token but the ids (arrays of an upper bound: only the
    pages written are ever touched)."""
    size_ = len(arr)
    cap = size_ // 2 + 1
    tids = np.empty(cap, dtype=np.int32)
    first = np.zeros(n + 1, dtype=np.int64)
    unk = np.empty(cap, dtype=np.int64)
    u_start = np.empty(cap, dtype=np.int64)
    u_end = np.empty(cap, dtype=np.int64)
    mask = len(slots) - 1
    nwords = len(words)
    low = np.uint64(0x2020202020202020)
    high = np.uint64(0x8080808080808080)
    t = 0
    d = 0
    u = 0
    i = 0
    while i < size_:
        c = trans[arr[i]]
        if c == 0:
            d += 1
            if d <= n:
                first[d] = t
            i += 1
            continue
        if c == 0x20:
            i += 1
            continue
        j = i + 1
        while j < size_:
            c = trans[arr[j]]
            if c == 0x20 or c == 0:
                break
            j += 1
        length = j - i
        tid = -1
        if length <= _SHORT:
            a = np.uint64(0)
            b = np.uint64(0)
            fast = i + 8 < nwords
            if fast:
                a = words[i]
                b = words[i + 8]
                if length < 8:
                    a &= _MASKS[length]
                    b = np.uint64(0)
                else:
                    b &= _MASKS[min(length - 8, 8)]
                fast = ((a | b) & high) == 0
            if fast:
                a = (a | low) & _MASKS[min(length, 8)]
                if length > 8:
                    b = (b | low) & _MASKS[length - 8]
                else:
                    b = np.uint64(0)
            else:
                a = np.uint64(0)
                b = np.uint64(0)
                for k in range(length):
                    c = trans[arr[i + k]]
                    if k < 8:
                        a |= np.uint64(c) << np.uint64(8 * k)
                    else:
                        b |= np.uint64(c) << np.uint64(8 * (k - 8))
            un = np.uint64(length)
            h = a * _M0 + b * _M1 + un * _M2
            h ^= h >> np.uint64(29)
            s = np.int64(h >> np.uint64(64 - bits))
            while slots[s, 0] != 0:
                if slots[s, 0] == un and slots[s, 1] == a and slots[s, 2] == b:
                    tid = np.int64(slots[s, 3])  # type: ignore[assignment]
                    break
                s = (s + 1) & mask
        tids[t] = tid
        if tid < 0:
            unk[u] = t
            u_start[u] = i
            u_end[u] = j
            u += 1
        t += 1
        i = j
    for x in range(d + 1, n + 1):
        first[x] = t
    return tids[:t], first, unk[:u], u_start[:u], u_end[:u]


def _words(arr: np.ndarray) -> np.ndarray:
    """Every byte offset of ``arr`` read as a little-endian 64-bit word (an overlapping view)."""
    return np.ndarray(shape=(max(len(arr) - 7, 0),), dtype="<u8", buffer=arr.data, strides=(1,))


def _expand_loop(tids: np.ndarray, frozen: int, ptr: np.ndarray,
                 vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(token index, key id)`` for every key of every token whose term id is below
    ``frozen`` (its keys at ``vals[ptr[t]:ptr[t + 1]]``) (compiled by numba)."""
    total = 0
    for t in tids:
        if 0 <= t < frozen:
            total += ptr[t + 1] - ptr[t]
    at = np.empty(total, dtype=np.int64)
    kids = np.empty(total, dtype=np.int64)
    j = 0
    for i in range(len(tids)):
        t = tids[i]
        if 0 <= t < frozen:
            for x in range(ptr[t], ptr[t + 1]):
                at[j] = i
                kids[j] = vals[x]
                j += 1
    return at, kids


def _phrases_loop(tids: np.ndarray, p: int, codes: np.ndarray, e_ptr: np.ndarray,
                  e_kid: np.ndarray, r_ptr: np.ndarray,
                  r_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every exact phrase in a run of term ids: ``(index of its first term, key id, length)``.
    A phrase starts with the pair ``codes[j]`` (``first * p + second``, both ids below ``p``)
    and is entry ``e`` of ``e_ptr[j]..e_ptr[j + 1]``: key ``e_kid[e]``, the ids of its further
    words ``r_ids[r_ptr[e]:r_ptr[e + 1]]`` (compiled by numba)."""
    cap = 16
    at = np.empty(cap, dtype=np.int64)
    kid = np.empty(cap, dtype=np.int64)
    size = np.empty(cap, dtype=np.int64)
    m = 0
    n = len(tids)
    for i in range(n - 1):
        a = tids[i]
        b = tids[i + 1]
        if a < 0 or a >= p or b < 0 or b >= p:
            continue
        code = a * p + b
        j = np.searchsorted(codes, code)
        if j == len(codes) or codes[j] != code:
            continue
        for e in range(e_ptr[j], e_ptr[j + 1]):
            lo = r_ptr[e]
            rest = r_ptr[e + 1] - lo
            if i + 2 + rest > n:
                continue
            same = True
            for x in range(rest):
                if tids[i + 2 + x] != r_ids[lo + x]:
                    same = False
                    break
            if not same:
                continue
            if m == cap:
                cap *= 2
                at2 = np.empty(cap, dtype=np.int64)
                kid2 = np.empty(cap, dtype=np.int64)
                size2 = np.empty(cap, dtype=np.int64)
                at2[:m] = at[:m]
                kid2[:m] = kid[:m]
                size2[:m] = size[:m]
                at, kid, size = at2, kid2, size2
            at[m] = i
            kid[m] = e_kid[e]
            size[m] = 2 + rest
            m += 1
    return at[:m], kid[:m], size[:m]


_COMPILED: list[tuple[Callable[..., Any], ...] | None] = []


def _kernels() -> tuple[Callable[..., Any], ...] | None:
    """The loops compiled by numba (cached on disk), or None when numba is not installed or
    ``CEP_NO_NUMBA`` is set: then numpy does the work, slower (tested both ways)."""
    if _COMPILED:
        return _COMPILED[0]
    got: tuple[Callable[..., Any], ...] | None = None
    if numba_allowed():
        try:
            import numba
        except ImportError:
            got = None
        else:
            jit = numba.njit(cache=True, nogil=True)
            got = (jit(_tokenize_loop), jit(_lookup_loop), jit(_insert_loop),
                   jit(_expand_loop), jit(_phrases_loop), jit(_scan_loop))
            # compiled (or read from numba's cache) now, not inside the first batch
            one = np.ones(1, dtype=np.int64)
            word = np.ones(1, dtype=np.uint64)
            got[0](np.frombuffer(b"\x00a ", dtype=np.uint8))  # read-only, as streams are
            slots = np.zeros((2, 4), dtype=np.uint64)
            got[2](one, word, word, one, slots, 1)
            got[1](one, word, word, slots, 1)
            buf = np.frombuffer(b"a\x00bcdefghijklmnopqrs", dtype=np.uint8)
            got[5](buf, _words(buf), _TRANS, slots, 1, 2)
            got[3](one, 1, np.array([0, 1, 1]), one)
            got[4](one, 1, one, np.array([0, 1]), one, np.array([0, 0]), one)
    _COMPILED.append(got)
    return got


def _joined_bytes(parts: list[str], raw: list[bool],
                  analyse: Callable[[str], list[str]]) -> bytes:
    """The texts of a batch's documents joined by NUL, as bytes not yet translated:
    ``parts[i]`` is document ``i``'s text, raw (``raw[i]``: ASCII is lower-cased and split by
    the translation, anything else goes through ``analyse`` first) or terms analysed beforehand
    joined by spaces (never analysed again: a lower-cased term may hold characters that are not
    letters, such as a combining dot)."""
    joined = "\x00".join(parts)
    if not (joined.isascii() and joined.count("\x00") == len(parts) - 1):
        parts = [" ".join(analyse(p)) if r and not (p.isascii() and "\x00" not in p) else p
                 for p, r in zip(parts, raw)]
        joined = "\x00".join(parts)
    return joined.encode("ascii") if joined.isascii() else joined.encode("utf-8")


def _stream_of(parts: list[str], raw: list[bool], n: int,
               analyse: Callable[[str], list[str]]) -> _TokenStream:
    """The token stream of ``n`` documents (their texts as :func:`_joined_bytes` takes them)."""
    return _TokenStream(_joined_bytes(parts, raw, analyse).translate(_BYTES), n)


def _term_at(buf: np.ndarray, start: int, end: int) -> str:
    """The term of bytes ``start:end`` of an untranslated buffer (see :func:`_scan_loop`)."""
    return bytes(buf[start:end]).translate(_BYTES).decode("utf-8")


def _identity(w0: np.ndarray, w1: np.ndarray, size: np.ndarray) -> np.ndarray:
    h = w0 * _M0 + w1 * _M1 + size.astype(np.uint64) * _M2
    return h ^ (h >> np.uint64(29))


class _TokenTable:
    """Remembered terms of up to 16 bytes -> term id, as an open-addressing numpy array.

    A slot is four 64-bit words side by side (length, the token's two words, term id), so a
    probe reads one cache line; a slot is empty when its length is 0 (a token has at least one
    byte). The table grows by doubling at half load.
    """

    __slots__ = ("bits", "slots", "count", "probe")

    def __init__(self, terms: Mapping[str, int]) -> None:
        bits = 10
        while (1 << bits) < 2 * len(terms) + 2:
            bits += 1
        self._alloc(bits)
        self.add_many(terms.items())

    def _alloc(self, bits: int) -> None:
        self.bits = bits
        self.slots = np.zeros((1 << bits, 4), dtype=np.uint64)
        self.count = 0
        self.probe = 1  # the longest probe sequence of any entry

    def add_many(self, items: Iterable[tuple[str, int]]) -> None:
        """Add ``(term, term id)`` pairs (terms longer than 16 bytes are left out)."""
        pairs = list(items)
        encoded = [t.encode("utf-8") for t, _ in pairs]
        sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        keep = np.flatnonzero((sizes > 0) & (sizes <= _SHORT)).tolist()
        if not keep:
            return
        words = np.frombuffer(b"".join([encoded[i].ljust(_SHORT, b"\x00") for i in keep]),
                              dtype="<u8").reshape(-1, 2)
        new_size = sizes[keep]
        new_w0, new_w1 = words[:, 0].copy(), words[:, 1].copy()
        new_tid = np.array([pairs[i][1] for i in keep], dtype=np.int64)
        self._insert(new_size, new_w0, new_w1, new_tid)

    def _insert(self, size: np.ndarray, w0: np.ndarray, w1: np.ndarray,
                tid: np.ndarray) -> None:
        if 2 * (self.count + len(size)) > len(self.slots):
            used = self.slots[self.slots[:, 0] != 0]
            size = np.concatenate([used[:, 0].astype(np.int64), size])
            w0 = np.concatenate([used[:, 1], w0])
            w1 = np.concatenate([used[:, 2], w1])
            tid = np.concatenate([used[:, 3].astype(np.int64), tid])
            bits = self.bits
            while (1 << bits) < 2 * len(size) + 2:
                bits += 1
            self._alloc(bits)
        kernels = _kernels()
        if kernels is not None:
            added, longest = kernels[2](size, w0, w1, tid, self.slots, self.bits)
        else:
            added, longest = self._insert_python(size, w0, w1, tid)
        self.count += added
        self.probe = max(self.probe, longest)

    def _insert_python(self, size: np.ndarray, w0: np.ndarray, w1: np.ndarray,
                       tid: np.ndarray) -> tuple[int, int]:
        starts = (_identity(w0, w1, size) >> np.uint64(64 - self.bits)).astype(np.int64)
        slots = self.slots
        mask = len(slots) - 1
        added, longest = 0, 1
        for n, a, b, t, s in zip(size.tolist(), w0.tolist(), w1.tolist(), tid.tolist(),
                                 starts.tolist()):
            steps = 1
            while slots[s, 0] != 0:
                if int(slots[s, 0]) == n and int(slots[s, 1]) == a and int(slots[s, 2]) == b:
                    break  # already there
                s = (s + 1) & mask
                steps += 1
            else:
                slots[s] = (n, a, b, t)
                added += 1
                longest = max(longest, steps)
        return added, longest

    def lookup(self, stream: _TokenStream) -> np.ndarray:
        """Term id of each token of ``stream``, -1 where the table has none (never seen, or
        longer than 16 bytes)."""
        kernels = _kernels()
        if kernels is not None:
            return kernels[1](stream.size, stream.w0, stream.w1, self.slots, self.bits)
        m = len(stream)
        out = np.full(m, -1, dtype=np.int64)
        short = np.flatnonzero(stream.size <= _SHORT)
        if not len(short) or not self.count:
            return out
        size, w0, w1 = stream.size[short], stream.w0[short], stream.w1[short]
        slot = (_identity(w0, w1, size) >> np.uint64(64 - self.bits)).astype(np.int64)
        mask = len(self.slots) - 1
        rows = np.arange(len(short))
        for _ in range(self.probe):
            s = slot[rows]
            entry = self.slots[s]
            ts = entry[:, 0]
            same = ((ts == size[rows].astype(np.uint64)) & (entry[:, 1] == w0[rows])
                    & (entry[:, 2] == w1[rows]))
            out[short[rows[same]]] = entry[same, 3].astype(np.int64)
            go = ~same & (ts != 0)
            rows = rows[go]
            if not len(rows):
                break
            slot[rows] = (s[go] + 1) & mask
        return out

    def scan(self, buf: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
        """:func:`_scan_loop` over ``buf`` with this table (numba only)."""
        kernels = _kernels()
        assert kernels is not None, "the compiled scan needs numba"
        return kernels[5](buf, _words(buf), _TRANS, self.slots,  # type: ignore[no-any-return]
                          self.bits, n)
