"""Adapters that run the engine's operators inside Apache Spark (the only package importing pyspark).

``apply_rules(frame, rules)`` runs a rule file over a streaming or static DataFrame. The
Spark-free core (:mod:`spark_udf.core`, :mod:`spark_udf.keyed`, :mod:`spark_udf.kinds`,
:mod:`spark_udf.state`, :mod:`spark_udf.schema`) is what the Python workers import; the names
below load pyspark only when first used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["apply_rules", "SparkRunConfig", "CepResult", "ProgressCounts", "local_session", "register_kind"]

_LAZY = {
    "apply_rules": "spark_udf.api",
    "SparkRunConfig": "spark_udf.api",
    "CepResult": "spark_udf.api",
    "ProgressCounts": "spark_udf.api",
    "local_session": "spark_udf.session",
    "register_kind": "spark_udf.kinds",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'spark_udf' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)
