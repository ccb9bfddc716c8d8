"""Adapters that run the engine's operators inside Apache Spark (the only package importing pyspark)."""
