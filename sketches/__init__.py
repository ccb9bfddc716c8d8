"""Mergeable probabilistic sketches: HyperLogLog, Bloom filters, Count-Min and heavy hitters."""
