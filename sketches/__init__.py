"""Mergeable probabilistic sketches: HyperLogLog, Bloom filters, Count-Min and heavy hitters."""

from __future__ import annotations

from sketches._base import sketch_from_bytes as from_bytes
from sketches.bloom import BloomFilter, ScalableBloomFilter
from sketches.countmin import CountMinSketch
from sketches.errors import (
    IncompatibleSketchError,
    SketchError,
    SketchFormatError,
    SketchTypeError,
)
from sketches.hashing import HashedBatch, hash128
from sketches.hyperloglog import HyperLogLog, hll_coupons
from sketches.topk import TopK

__all__ = [
    "BloomFilter",
    "CountMinSketch",
    "HashedBatch",
    "HyperLogLog",
    "IncompatibleSketchError",
    "ScalableBloomFilter",
    "SketchError",
    "SketchFormatError",
    "SketchTypeError",
    "TopK",
    "from_bytes",
    "hash128",
    "hll_coupons",
]
