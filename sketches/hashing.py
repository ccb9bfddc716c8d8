"""Vectorised, stable 128-bit hashing of value batches: MurmurHash3_x64_128, seed 9001.

Every sketch in this package hashes through this module, so one value always gets one hash,
in every process, on every machine. The rules (spelled out in ``docs/sketches.md``) follow the
Apache DataSketches convention, which is what Spark's ``hll_sketch_agg`` uses:

* integers (any width, signed or unsigned, and bools as 0/1) are hashed as their 8-byte
  little-endian two's-complement image;
* floats equal to an integer in the signed 64-bit range are hashed as that integer (so ``1``,
  ``1.0`` and ``True`` are the same item, as in a Python ``set``); other floats (``2.5``,
  ``inf``) are hashed as the 8 bytes of their IEEE-754 double;
* ``str`` is hashed as its UTF-8 bytes, ``bytes`` as is (so ``"a"`` and ``b"a"`` are the same
  item);
* ``None``, nulls of Arrow/pandas and float NaN are *missing*: they are skipped, never hashed.

The hash of a byte string is ``MurmurHash3_x64_128(bytes, seed=9001)``; its two 64-bit halves
are returned as ``h0`` and ``h1`` (the first and second little-endian words of the digest).

Batches are hashed with numpy uint64 arithmetic in chunks that fit in cache; byte strings are
hashed with a loop over 16-byte block positions (the longest string's length / 16), never over
items.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sketches.errors import SketchTypeError

__all__ = ["SEED", "HashedBatch", "hash128"]

SEED = 9001
"""Seed of MurmurHash3_x64_128, the DataSketches default update seed."""

CHUNK = 32768
"""Items hashed per numpy pass: small enough that the temporaries stay in the L2 cache."""

_U64 = np.uint64
_C1 = _U64(0x87C37B91114253D5)
_C2 = _U64(0x4CF5AD432745937F)
_F1 = _U64(0xFF51AFD7ED558CCD)
_F2 = _U64(0xC4CEB9FE1A85EC53)
_M1 = _U64(0x52DCE729)
_M2 = _U64(0x38495AB5)
_FIVE = _U64(5)
_SEED = _U64(SEED)
# For an 8-byte key the second lane never sees data: h2 = seed ^ 8 before finalisation.
_SEED_LEN8 = _U64(SEED ^ 8)
_SHIFTS = {r: _U64(r) for r in range(65)}
# _TAIL_MASK[r] keeps the low r bytes of a little-endian word.
_TAIL_MASK = np.array([(1 << (8 * r)) - 1 for r in range(9)], dtype=np.uint64)
_TWO63 = float(2**63)


@dataclass(frozen=True)
class HashedBatch:
    """The hashes of one batch, aligned to the batch's non-missing items.

    Attributes:
        h0: First 64-bit half of each non-missing item's MurmurHash3_x64_128, in input order.
        h1: Second 64-bit half, same order.
        valid: Boolean mask over the input marking the items that were hashed, or ``None``
            when every item was.
        size: Number of items in the input, missing ones included.
        scalar: True when the input was a single value rather than a batch.

    Example:
        >>> from sketches import hash128
        >>> batch = hash128(["a", None, "b"])
        >>> batch.size, len(batch.h0), batch.valid.tolist()
        (3, 2, [True, False, True])
        >>> int(hash128(1).h0[0]) == int(hash128(1.0).h0[0])
        True
    """

    h0: np.ndarray
    h1: np.ndarray
    valid: np.ndarray | None
    size: int
    scalar: bool


def hash128(values: Any, *, skip_empty: bool = False) -> HashedBatch:
    """Hash a scalar or a batch with MurmurHash3_x64_128 (seed 9001), vectorised.

    Args:
        values: A scalar (str, bytes, int, float, bool, None) or a batch: list, tuple, range,
            numpy array, pandas Series/Index, pyarrow Array or ChunkedArray.
        skip_empty: Treat empty strings and empty bytes as missing (the DataSketches and Spark
            ``hll_sketch_agg`` convention, used by :class:`~sketches.HyperLogLog`).

    Returns:
        The hashes of the non-missing items, see :class:`HashedBatch`.

    Raises:
        SketchTypeError: A value is of a type that cannot be hashed, or an integer does not fit
            in 64 bits.

    Example:
        >>> from sketches import hash128
        >>> hex(int(hash128(0).h0[0]))  # MurmurHash3_x64_128 of 8 zero bytes, seed 9001
        '0x40890191dcc2d7cb'
    """
    batch = _normalize(values, skip_empty)
    n_valid = batch.count
    h0 = np.empty(n_valid, dtype=np.uint64)
    h1 = np.empty(n_valid, dtype=np.uint64)
    done = 0
    for c0, c1 in _iter_chunks(batch):
        h0[done : done + len(c0)] = c0
        h1[done : done + len(c1)] = c1
        done += len(c0)
    return HashedBatch(h0, h1, batch.valid, batch.size, batch.scalar)


# ---------------------------------------------------------------------------------------------
# Normalisation: any accepted input -> "parts" of canonical 8-byte words or byte strings.


@dataclass
class _Words:
    """Items whose canonical form is one 8-byte little-endian word."""

    words: np.ndarray  # uint64


@dataclass
class _Strings:
    """Items whose canonical form is a byte string inside one shared buffer."""

    buffer: np.ndarray  # uint64, the bytes zero-padded by at least 16 bytes
    starts: np.ndarray  # int64 byte offsets into buffer
    lengths: np.ndarray  # int64


@dataclass
class _Hashed:
    """Items already hashed (mixed-type lists are hashed group by group, then reordered)."""

    h0: np.ndarray
    h1: np.ndarray


_Part = _Words | _Strings | _Hashed


@dataclass
class _Batch:
    """A normalised input: parts in input order, the missing-value mask and an item fetcher."""

    size: int
    scalar: bool
    parts: list[_Part]
    valid: np.ndarray | None
    fetch: Callable[[np.ndarray], list[Any]]

    @property
    def count(self) -> int:
        """Number of items to hash (the non-missing ones)."""
        return sum(
            len(p.starts)
            if isinstance(p, _Strings)
            else len(p.h0 if isinstance(p, _Hashed) else p.words)
            for p in self.parts
        )

    def positions(self) -> np.ndarray:
        """Input positions of the hashed items, in hashing order."""
        if self.valid is None:
            return np.arange(self.size, dtype=np.intp)
        return np.flatnonzero(self.valid)


_SCALAR_TYPES = (str, bytes, bytearray, memoryview, int, float, bool, np.generic)
_MISSING_TYPES = ("NAType", "NaTType")  # pandas.NA and pandas.NaT inside object lists


def _normalize(values: Any, skip_empty: bool) -> _Batch:
    """Turn any accepted input into a :class:`_Batch` (the input is never modified)."""
    if values is None:
        return _Batch(1, True, [], np.zeros(1, dtype=bool), lambda idx: [])
    if isinstance(values, _SCALAR_TYPES):
        batch = _from_scalar(values, skip_empty)
        return batch
    if isinstance(values, np.ndarray):
        return _from_numpy(values, skip_empty)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return _from_arrow(values, skip_empty)
    if _is_pandas(values):
        return _from_pandas(values, skip_empty)
    if isinstance(values, range):
        return _from_numpy(np.arange(values.start, values.stop, values.step), skip_empty)
    if isinstance(values, (dict, set, frozenset)) or not isinstance(values, Iterable):
        if isinstance(values, (set, frozenset)):
            return _from_list(list(values), skip_empty)
        raise SketchTypeError(
            f"cannot hash {type(values).__name__} value {values!r:.80}: expected a scalar "
            "(str, bytes, int, float, bool, None) or a batch (list, numpy array, pandas "
            "Series, pyarrow Array)"
        )
    return _from_list(values if isinstance(values, Sequence) else list(values), skip_empty)


def _is_pandas(values: Any) -> bool:
    module = type(values).__module__
    return module.startswith("pandas") and hasattr(values, "to_numpy")


def _from_scalar(value: Any, skip_empty: bool) -> _Batch:
    if isinstance(value, np.generic):
        return _from_numpy(np.asarray([value]), skip_empty, scalar=True)
    if isinstance(value, (bool, int)):
        try:
            word = np.array([value], dtype=np.int64).view(np.uint64)
        except OverflowError:
            word = _big_ints([value])
        return _Batch(1, True, [_Words(word)], None, lambda idx: [value])
    if isinstance(value, float):
        return _from_numpy(np.array([value], dtype=np.float64), skip_empty, scalar=True)
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if skip_empty and not raw:
        return _Batch(1, True, [], np.zeros(1, dtype=bool), lambda idx: [])
    return _Batch(1, True, [_strings_from_bytes([raw])], None, lambda idx: [value])


def _from_numpy(arr: np.ndarray, skip_empty: bool, scalar: bool = False) -> _Batch:
    if arr.ndim != 1:
        if arr.ndim == 0:
            return _from_numpy(arr.reshape(1), skip_empty, scalar=True)
        raise SketchTypeError(
            f"cannot hash a {arr.ndim}-D array of shape {arr.shape}: pass a 1-D batch "
            "(flatten it with .ravel() if every cell is an item)"
        )
    kind = arr.dtype.kind
    n = len(arr)
    if kind in "iub":
        words = _int_words(arr)
        return _Batch(n, scalar, [_Words(words)], None, _numpy_fetch(arr))
    if kind == "f":
        return _from_floats(arr.astype(np.float64, copy=False), scalar, _numpy_fetch(arr))
    if kind in "mM":
        ints = arr.view(np.int64)
        valid = ~np.isnat(arr)
        fetch = _numpy_fetch(ints)
        if valid.all():
            return _Batch(n, scalar, [_Words(ints.view(np.uint64))], None, fetch)
        return _Batch(n, scalar, [_Words(ints[valid].view(np.uint64))], valid, fetch)
    if kind in "US":
        batch = _from_arrow(pa.array(arr), skip_empty)
        batch.scalar = scalar
        return batch
    if kind == "O":
        batch = _from_list(arr.tolist(), skip_empty)
        batch.scalar = scalar
        return batch
    raise SketchTypeError(
        f"cannot hash numpy dtype {arr.dtype}: expected integers, floats, bools, strings, "
        "bytes, datetimes or objects of those"
    )


def _numpy_fetch(arr: np.ndarray) -> Callable[[np.ndarray], list[Any]]:
    return lambda idx: arr[idx].tolist()


def _int_words(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype == np.int64:
        return arr.view(np.uint64)
    return arr.astype(np.int64).view(np.uint64)


def _from_floats(x: np.ndarray, scalar: bool, fetch: Callable[[np.ndarray], list[Any]]) -> _Batch:
    n = len(x)
    nan = np.isnan(x)
    valid: np.ndarray | None = None
    if nan.any():
        valid = ~nan
        x = x[valid]
    return _Batch(n, scalar, [_Words(_float_words(x))], valid, fetch)


def _float_words(x: np.ndarray) -> np.ndarray:
    """Canonical words of non-NaN floats: integral values as int64, others as IEEE bits."""
    with np.errstate(invalid="ignore"):
        integral = (x == np.trunc(x)) & (np.abs(x) < _TWO63)
        as_int = np.where(integral, x, 0.0).astype(np.int64)
    return np.where(integral, as_int, x.view(np.int64)).view(np.uint64)


def _big_ints(ints: Sequence[int]) -> np.ndarray:
    """64-bit images of Python ints when some exceed int64 (a rare path, item by item)."""
    bad = next((v for v in ints if not -(2**63) <= v < 2**64), None)
    if bad is not None:
        raise SketchTypeError(
            f"cannot hash integer {bad!r}: it does not fit in 64 bits; hash str(value) "
            "instead if such large integers are identifiers"
        )
    return np.array([v & 0xFFFFFFFFFFFFFFFF for v in ints], dtype=np.uint64)


def _from_pandas(values: Any, skip_empty: bool) -> _Batch:
    dtype = values.dtype
    if getattr(dtype, "kind", "O") in "iufbmM" and isinstance(dtype, np.dtype):
        return _from_numpy(values.to_numpy(), skip_empty)
    try:
        arr = pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return _from_list(values.tolist(), skip_empty)
    return _from_arrow(arr, skip_empty)


def _from_list(values: Sequence[Any], skip_empty: bool) -> _Batch:
    n = len(values)
    if n == 0:
        return _Batch(0, False, [], None, lambda idx: [])
    try:
        arr = pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, pa.ArrowNotImplementedError):
        return _from_mixed(values, skip_empty)
    batch = _from_arrow(arr, skip_empty)
    batch.fetch = lambda idx: [values[i] for i in idx.tolist()]
    return batch


def _from_mixed(values: Sequence[Any], skip_empty: bool) -> _Batch:
    """A list of mixed types: group the items by type, hash each group vectorised."""
    groups: dict[str, list[int]] = {"int": [], "float": [], "bytes": []}
    for i, v in enumerate(values):
        if v is None or type(v).__name__ in _MISSING_TYPES:
            continue
        if isinstance(v, (bool, int, np.integer)):
            groups["int"].append(i)
        elif isinstance(v, (float, np.floating)):
            groups["float"].append(i)
        elif isinstance(v, (str, bytes, bytearray, memoryview)):
            groups["bytes"].append(i)
        else:
            raise SketchTypeError(
                f"cannot hash {type(v).__name__} value {v!r:.80} at position {i}: sketches "
                "accept str, bytes, int, float, bool and None (ignored)"
            )
    order: list[int] = []
    parts: list[_Part] = []
    if groups["int"]:
        ints = [int(values[i]) for i in groups["int"]]
        try:
            words = np.array(ints, dtype=np.int64).view(np.uint64)
        except OverflowError:
            words = _big_ints(ints)
        parts.append(_Words(words))
        order += groups["int"]
    if groups["float"]:
        floats = np.array([float(values[i]) for i in groups["float"]], dtype=np.float64)
        keep = ~np.isnan(floats)
        parts.append(_Words(_float_words(floats[keep])))
        order += [i for i, k in zip(groups["float"], keep.tolist()) if k]
    if groups["bytes"]:
        raws = [
            v.encode("utf-8") if isinstance(v, str) else bytes(v)
            for v in (values[i] for i in groups["bytes"])
        ]
        idx = groups["bytes"]
        if skip_empty:
            kept = [(i, r) for i, r in zip(idx, raws) if r]
            idx = [i for i, _ in kept]
            raws = [r for _, r in kept]
        if raws:
            parts.append(_strings_from_bytes(raws))
        order += idx
    # Re-establish input order so that hashes align with ``valid``.
    positions = np.array(order, dtype=np.intp)
    valid = np.zeros(len(values), dtype=bool)
    valid[positions] = True
    batch = _Batch(len(values), False, parts, valid, lambda idx: [values[i] for i in idx.tolist()])
    batch.parts = _reorder(batch, positions)
    return batch


def _reorder(batch: _Batch, positions: np.ndarray) -> list[_Part]:
    """Hash the grouped parts now and return them as one part in input order.

    Mixed-type lists are rare and small, so they are hashed eagerly.
    """
    h0 = np.empty(len(positions), dtype=np.uint64)
    h1 = np.empty(len(positions), dtype=np.uint64)
    done = 0
    for c0, c1 in _iter_chunks(batch):
        h0[done : done + len(c0)] = c0
        h1[done : done + len(c1)] = c1
        done += len(c0)
    order = np.argsort(positions, kind="stable")
    return [_Hashed(h0[order], h1[order])]


def _strings_from_bytes(raws: list[bytes]) -> _Strings:
    lengths = np.fromiter((len(r) for r in raws), dtype=np.int64, count=len(raws))
    starts = np.zeros(len(raws), dtype=np.int64)
    if len(raws) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    return _Strings(_padded(np.frombuffer(b"".join(raws), dtype=np.uint8)), starts, lengths)


def _padded(data: np.ndarray) -> np.ndarray:
    """Copy bytes into a zeroed uint64 buffer with at least 16 bytes of slack at the end."""
    words = np.zeros((len(data) + 24) // 8 + 1, dtype=np.uint64)
    words.view(np.uint8)[: len(data)] = data
    return words


_STRING_TYPES = (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


def _from_arrow(arr: pa.Array | pa.ChunkedArray, skip_empty: bool) -> _Batch:
    if isinstance(arr, pa.ChunkedArray):
        chunks = [_from_arrow(c, skip_empty) for c in arr.chunks]
        return _concat(chunks, arr)
    typ = arr.type
    n = len(arr)
    if pa.types.is_dictionary(typ):
        return _from_arrow(arr.dictionary_decode(), skip_empty)
    if pa.types.is_null(typ):
        return _Batch(n, False, [], np.zeros(n, dtype=bool), lambda idx: [])
    if pa.types.is_string_view(typ) or pa.types.is_binary_view(typ):
        return _from_arrow(arr.cast(pa.large_binary()), skip_empty)
    valid = None
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    fetch = _arrow_fetch(arr)
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        filled = arr.fill_null(0) if valid is not None else arr
        ints = filled.to_numpy(zero_copy_only=False)
        words = _int_words(ints)
        return _Batch(n, False, [_Words(words if valid is None else words[valid])], valid, fetch)
    if pa.types.is_floating(typ):
        x = arr.cast(pa.float64()).fill_null(math.nan).to_numpy(zero_copy_only=False)
        return _from_floats(x, False, fetch)
    if pa.types.is_temporal(typ):
        ints = arr.cast(pa.int64()) if typ.bit_width == 64 else arr.cast(pa.int32())
        return _from_arrow(ints.cast(pa.int64()), skip_empty)
    if typ in _STRING_TYPES or pa.types.is_fixed_size_binary(typ):
        return _from_arrow_strings(arr, valid, skip_empty, fetch)
    raise SketchTypeError(
        f"cannot hash Arrow type {typ}: expected integers, floats, bools, strings, binary, "
        "temporal values or a dictionary of those"
    )


def _arrow_fetch(arr: pa.Array) -> Callable[[np.ndarray], list[Any]]:
    return lambda idx: arr.take(pa.array(idx, type=pa.int64())).to_pylist()


def _from_arrow_strings(
    arr: pa.Array, valid: np.ndarray | None, skip_empty: bool, fetch: Callable[..., list[Any]]
) -> _Batch:
    n = len(arr)
    bufs = arr.buffers()
    if pa.types.is_fixed_size_binary(arr.type):
        width = arr.type.byte_width
        data = np.frombuffer(bufs[1], dtype=np.uint8)[arr.offset * width : (arr.offset + n) * width]
        starts = np.arange(n, dtype=np.int64) * width
        lengths = np.full(n, width, dtype=np.int64)
    else:
        off_type = np.int64 if arr.type in (pa.large_string(), pa.large_binary()) else np.int32
        offsets = np.frombuffer(bufs[1], dtype=off_type)[arr.offset : arr.offset + n + 1]
        offsets = offsets.astype(np.int64)
        base = int(offsets[0])
        data_buf = bufs[2]
        raw = (
            np.frombuffer(data_buf, dtype=np.uint8)
            if data_buf is not None
            else np.empty(0, np.uint8)
        )
        data = raw[base : int(offsets[-1])]
        starts = offsets[:-1] - base
        lengths = np.diff(offsets)
    keep = valid
    if skip_empty:
        nonempty = lengths > 0
        if not nonempty.all():
            keep = nonempty if keep is None else keep & nonempty
    if keep is not None:
        starts = starts[keep]
        lengths = lengths[keep]
    return _Batch(n, False, [_Strings(_padded(data), starts, lengths)], keep, fetch)


def _concat(batches: list[_Batch], arr: pa.ChunkedArray) -> _Batch:
    size = sum(b.size for b in batches)
    parts = [p for b in batches for p in b.parts]
    valid: np.ndarray | None = None
    if any(b.valid is not None for b in batches):
        valid = (
            np.concatenate(
                [b.valid if b.valid is not None else np.ones(b.size, dtype=bool) for b in batches]
            )
            if batches
            else np.zeros(0, dtype=bool)
        )
    return _Batch(
        size, False, parts, valid, lambda idx: arr.take(pa.array(idx, type=pa.int64())).to_pylist()
    )


# ---------------------------------------------------------------------------------------------
# The hash itself.


def _iter_chunks(batch: _Batch) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (h0, h1) for consecutive runs of the batch's hashed items, in order.

    The arrays yielded are reused between iterations: consume or copy before advancing.
    """
    longest = max((len(p.words) for p in batch.parts if isinstance(p, _Words)), default=0)
    size = min(CHUNK, longest)
    t0 = np.empty(size, dtype=np.uint64)
    t1 = np.empty(size, dtype=np.uint64)
    tmp = np.empty(size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for part in batch.parts:
            if isinstance(part, _Hashed):
                for s in range(0, len(part.h0), CHUNK):
                    yield part.h0[s : s + CHUNK], part.h1[s : s + CHUNK]
            elif isinstance(part, _Words):
                words = part.words
                for s in range(0, len(words), CHUNK):
                    x = words[s : s + CHUNK]
                    k = len(x)
                    _hash_words(x, t0[:k], t1[:k], tmp[:k])
                    yield t0[:k], t1[:k]
            else:
                for s in range(0, len(part.starts), CHUNK):
                    e = s + CHUNK
                    yield _hash_strings_split(part.buffer, part.starts[s:e], part.lengths[s:e])


def _fmix(k: np.ndarray, t: np.ndarray) -> None:
    """MurmurHash3's 64-bit finaliser, in place (t is scratch of the same length)."""
    s33 = _SHIFTS[33]
    np.right_shift(k, s33, out=t)
    np.bitwise_xor(k, t, out=k)
    np.multiply(k, _F1, out=k)
    np.right_shift(k, s33, out=t)
    np.bitwise_xor(k, t, out=k)
    np.multiply(k, _F2, out=k)
    np.right_shift(k, s33, out=t)
    np.bitwise_xor(k, t, out=k)


def _rotl(k: np.ndarray, r: int, t: np.ndarray) -> None:
    """Rotate left by r bits, in place."""
    np.left_shift(k, _SHIFTS[r], out=t)
    np.right_shift(k, _SHIFTS[64 - r], out=k)
    np.bitwise_or(k, t, out=k)


def _mix_k1(k1: np.ndarray, t: np.ndarray) -> None:
    np.multiply(k1, _C1, out=k1)
    _rotl(k1, 31, t)
    np.multiply(k1, _C2, out=k1)


def _mix_k2(k2: np.ndarray, t: np.ndarray) -> None:
    np.multiply(k2, _C2, out=k2)
    _rotl(k2, 33, t)
    np.multiply(k2, _C1, out=k2)


def _hash_words(x: np.ndarray, h0: np.ndarray, h1: np.ndarray, t: np.ndarray) -> None:
    """MurmurHash3_x64_128 of 8-byte keys (x as little-endian words) into h0, h1."""
    np.multiply(x, _C1, out=h0)
    _rotl(h0, 31, t)
    np.multiply(h0, _C2, out=h0)
    # h1 = seed ^ k1, then h1 ^= len; h2 = seed ^ len; h1 += h2; h2 += h1.
    np.bitwise_xor(h0, _SEED_LEN8, out=h0)
    np.add(h0, _SEED_LEN8, out=h0)
    np.add(h0, _SEED_LEN8, out=h1)
    _fmix(h0, t)
    _fmix(h1, t)
    np.add(h0, h1, out=h0)
    np.add(h1, h0, out=h1)


def _load(buffer: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The little-endian 8-byte words starting at byte offsets pos of a uint64 buffer."""
    q = pos >> 3
    shift = ((pos & 7) << 3).astype(np.uint64)
    word = buffer[q] >> shift
    # A left shift by 64 gives 0 in numpy, which is what an aligned load needs.
    word |= buffer[q + 1] << (_SHIFTS[64] - shift)
    return word


_LONG = 1024
"""Strings longer than this are hashed one by one with mmh3 when it is installed: the block
loop costs ~20 numpy calls per 16 bytes of the longest string, whatever the batch size."""


def _hash_strings_split(
    buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Hash byte strings: vectorised for the short ones, one by one for rare long ones."""
    if _mmh3 is None or not np.any(lengths > _LONG):
        return _hash_strings(buffer, starts, lengths)
    long = np.flatnonzero(lengths > _LONG)
    short = np.flatnonzero(lengths <= _LONG)
    h1 = np.empty(len(starts), dtype=np.uint64)
    h2 = np.empty(len(starts), dtype=np.uint64)
    if len(short):
        h1[short], h2[short] = _hash_strings(buffer, starts[short], lengths[short])
    raw = buffer.view(np.uint8)
    for i in long.tolist():
        start = int(starts[i])
        h1[i], h2[i] = _mmh3.hash64(
            raw[start : start + int(lengths[i])].tobytes(), SEED, signed=False
        )
    return h1, h2


def _hash_strings(
    buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """MurmurHash3_x64_128 of byte strings, looping over 16-byte block positions."""
    n = len(starts)
    h1 = np.full(n, _SEED, dtype=np.uint64)
    h2 = np.full(n, _SEED, dtype=np.uint64)
    nblocks = lengths >> 4
    most = int(nblocks.max()) if n else 0
    active = np.flatnonzero(nblocks > 0) if most else np.empty(0, dtype=np.intp)
    for j in range(most):
        if j:
            active = active[nblocks[active] > j]
        pos = starts[active] + 16 * j
        k1 = _load(buffer, pos)
        k2 = _load(buffer, pos + 8)
        a = h1[active]
        b = h2[active]
        t = np.empty_like(a)
        _mix_k1(k1, t)
        a ^= k1
        _rotl(a, 27, t)
        a += b
        a *= _FIVE
        a += _M1
        _mix_k2(k2, t)
        b ^= k2
        _rotl(b, 31, t)
        b += a
        b *= _FIVE
        b += _M2
        h1[active] = a
        h2[active] = b
    # Tail: the last len % 16 bytes, zero-padded; mixing a zero word is a no-op, exactly as
    # MurmurHash3 skipping an absent tail.
    tail = starts + (nblocks << 4)
    rem = lengths & 15
    t = np.empty(n, dtype=np.uint64)
    k1 = _load(buffer, tail)
    k1 &= _TAIL_MASK[np.minimum(rem, 8)]
    _mix_k1(k1, t)
    h1 ^= k1
    long_tail = np.flatnonzero(rem > 8)
    if len(long_tail):
        k2 = _load(buffer, tail[long_tail] + 8)
        k2 &= _TAIL_MASK[rem[long_tail] - 8]
        t2 = np.empty_like(k2)
        _mix_k2(k2, t2)
        h2[long_tail] ^= k2
    ln = lengths.astype(np.uint64)
    h1 ^= ln
    h2 ^= ln
    h1 += h2
    h2 += h1
    _fmix(h1, t)
    _fmix(h2, t)
    h1 += h2
    h2 += h1
    return h1, h2


def iter_hashes(
    values: Any, *, skip_empty: bool = False
) -> tuple[_Batch, Iterator[tuple[np.ndarray, np.ndarray]]]:
    """Normalise values and return the batch with a chunked iterator over its hashes.

    Sketch updates use this to hash and fold one cache-sized chunk at a time.
    """
    batch = _normalize(values, skip_empty)
    return batch, _iter_chunks(batch)


# ---------------------------------------------------------------------------------------------
# One value at a time, in plain Python: per-event callers skip some 40 numpy calls.

_MASK64 = (1 << 64) - 1
_PY_C1 = 0x87C37B91114253D5
_PY_C2 = 0x4CF5AD432745937F


def is_scalar(value: Any) -> bool:
    """True for the inputs that :func:`hash_scalar` handles (a single value or None)."""
    return value is None or isinstance(value, _SCALAR_TYPES)


def hash_scalar(value: Any, *, skip_empty: bool = False) -> tuple[int, int] | None:
    """MurmurHash3_x64_128 (seed 9001) of one value as (h0, h1), or None when it is missing.

    Gives exactly what :func:`hash128` gives for a one-item batch.

    Example:
        >>> from sketches.hashing import hash_scalar, hash128
        >>> hash_scalar(1.0) == hash_scalar(1) == (int(hash128(1).h0[0]), int(hash128(1).h1[0]))
        True
        >>> hash_scalar(None) is None and hash_scalar(float("nan")) is None
        True
    """
    data = _canonical_bytes(value)
    if data is None or (skip_empty and not data and isinstance(value, _BYTES_LIKE)):
        return None
    if _mmh3 is not None:
        return _mmh3.hash64(data, SEED, signed=False)  # type: ignore[no-any-return]
    return _murmur3_py(data)


_BYTES_LIKE = (str, bytes, bytearray, memoryview, np.str_, np.bytes_)


def _canonical_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, np.generic):
        if isinstance(value, (np.datetime64, np.timedelta64)):
            return None if np.isnat(value) else _int_bytes(int(value.astype(np.int64)))
        value = value.item()
        if isinstance(value, (int, float, str, bytes)) or value is None:
            return _canonical_bytes(value)
        raise SketchTypeError(f"cannot hash numpy scalar {value!r:.80}")
    if isinstance(value, int):  # bool included
        return _int_bytes(int(value))
    if isinstance(value, float):
        if value != value:
            return None
        if abs(value) < _TWO63 and value == math.trunc(value):
            return _int_bytes(int(value))
        return np.float64(value).tobytes()
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _int_bytes(v: int) -> bytes:
    if not -(2**63) <= v < 2**64:
        raise SketchTypeError(
            f"cannot hash integer {v!r}: it does not fit in 64 bits; hash str(value) "
            "instead if such large integers are identifiers"
        )
    return (v & _MASK64).to_bytes(8, "little")


def _rotl_py(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK64


def _fmix_py(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK64
    return k ^ (k >> 33)


def _murmur3_py(data: bytes) -> tuple[int, int]:
    """Reference MurmurHash3_x64_128 in Python, for single values."""
    n = len(data)
    h1 = h2 = SEED
    nblocks = n // 16
    for i in range(nblocks):
        k1 = int.from_bytes(data[16 * i : 16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8 : 16 * i + 16], "little")
        h1 ^= _rotl_py((k1 * _PY_C1) & _MASK64, 31) * _PY_C2 & _MASK64
        h1 = (_rotl_py(h1, 27) + h2) & _MASK64
        h1 = (h1 * 5 + 0x52DCE729) & _MASK64
        h2 ^= _rotl_py((k2 * _PY_C2) & _MASK64, 33) * _PY_C1 & _MASK64
        h2 = (_rotl_py(h2, 31) + h1) & _MASK64
        h2 = (h2 * 5 + 0x38495AB5) & _MASK64
    tail = data[16 * nblocks :]
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= _rotl_py((k2 * _PY_C2) & _MASK64, 33) * _PY_C1 & _MASK64
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        h1 ^= _rotl_py((k1 * _PY_C1) & _MASK64, 31) * _PY_C2 & _MASK64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    h1 = _fmix_py(h1)
    h2 = _fmix_py(h2)
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    return h1, h2


_mmh3: Any
try:  # the C implementation, when installed, is ~10x faster for single values
    import mmh3 as _mmh3
except ImportError:  # pragma: no cover - depends on the environment
    _mmh3 = None
