"""The engine's own code as one zip for Spark's executors, and the Python their workers start.

A cluster's executors run our functions in their own Python workers, which must import
``spark_udf``, ``cep``, ``patterns`` and ``sketches``. :func:`engine_zip` packs the code the
driver is running (wherever it was installed from: a wheel, an editable checkout) into a zip
that ``SparkContext.addPyFile`` ships with every task, so a cluster needs only the engine's
third-party dependencies (:data:`EXECUTOR_DEPENDENCIES`). No pyspark import here: the zip
is built before the session and tested without Spark.
"""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "ENGINE_PACKAGES",
    "EXECUTOR_DEPENDENCIES",
    "ENGINE_ZIP_NAME",
    "engine_zip",
    "is_local_master",
    "worker_python",
]

ENGINE_PACKAGES = ("cep", "patterns", "sketches", "spark_udf")
"""The packages of this project that the executors' Python workers import."""

EXECUTOR_DEPENDENCIES = ("numpy", "pandas", "pyarrow", "orjson", "PyYAML", "pyahocorasick", "mmh3")
"""Third-party packages the workers import (pyproject.toml's dependencies that run in a task;
pyspark itself comes with Spark). mmh3 is optional there: a slower hash replaces it."""

ENGINE_ZIP_NAME = "cep-engine.zip"

_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed times: the same code gives the same bytes


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs executors inside this machine's driver JVM (``local``, ``local[N]``).

    Example:
        >>> [is_local_master(m) for m in ("local", "local[*]", "local[2, 3]", "spark://h:7077", "yarn")]
        [True, True, True, False, False]
    """
    m = master.strip()
    return m == "local" or m.startswith("local[")


def worker_python(master: str, environ: Mapping[str, str], conf: Mapping[str, str]) -> str | None:
    """The interpreter the Python workers should start, or None to leave Spark's choice alone.

    The user's choice wins (``spark.pyspark.python``, then ``PYSPARK_PYTHON``). Otherwise, in
    local mode, the interpreter running this driver: Spark would start ``python3`` from ``PATH``,
    which, for a command run from a virtualenv without activating it (pipx, cron), is another
    Python without the engine or pandas. A cluster's executors have their own interpreters.

    Example:
        >>> worker_python("local[*]", {}, {}) == sys.executable
        True
        >>> worker_python("local[*]", {"PYSPARK_PYTHON": "/opt/py"}, {})
        '/opt/py'
        >>> worker_python("spark://h:7077", {}, {"spark.pyspark.python": "./env/bin/python"})
        './env/bin/python'
        >>> worker_python("spark://h:7077", {}, {}) is None
        True
    """
    chosen = conf.get("spark.pyspark.python") or environ.get("PYSPARK_PYTHON")
    if chosen:
        return chosen
    return sys.executable if is_local_master(master) and sys.executable else None


def _package_dirs(name: str) -> list[Path]:
    mod = sys.modules.get(name)
    paths = list(getattr(mod, "__path__", []) or []) if mod is not None else []
    if not paths:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"cannot ship the engine to Spark: package {name!r} is not importable here")
        paths = list(spec.submodule_search_locations)
    return [Path(p) for p in paths]


def engine_zip(dest: Path, packages: tuple[str, ...] = ENGINE_PACKAGES) -> Path:
    """Write the packages' Python sources, as this driver imports them, into ``dest``/cep-engine.zip.

    Only ``.py`` files go in (no caches, no tests); entries are sorted and dated 1980, so the
    same code gives the same bytes.

    Example:
        >>> import tempfile, zipfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     names = zipfile.ZipFile(engine_zip(Path(d))).namelist()
        >>> "spark_udf/core.py" in names and "cep/__init__.py" in names and "cep/cli/spark.py" in names
        True
    """
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / ENGINE_ZIP_NAME
    tmp = dest / f".{ENGINE_ZIP_NAME}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in packages:
            for root in _package_dirs(name):
                for path in sorted(root.rglob("*.py")):
                    rel = path.relative_to(root)
                    if "__pycache__" in rel.parts:
                        continue
                    info = zipfile.ZipInfo(f"{name}/{rel.as_posix()}", _EPOCH)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    z.writestr(info, path.read_bytes())
    tmp.replace(out)
    return out
