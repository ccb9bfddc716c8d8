"""Only spark_udf imports pyspark, and its Spark-free core loads without it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _imports_pyspark_at_module_level(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:  # module level only: functions may import it when called
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "pyspark" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyspark":
            return True
    return False


def test_no_package_but_spark_udf_imports_pyspark_at_module_level() -> None:
    for pkg in ("cep", "patterns", "sketches"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            assert not _imports_pyspark_at_module_level(path), path


def test_cep_cli_and_the_worker_core_load_no_pyspark() -> None:
    code = (
        "import sys, cep.cli.spark, spark_udf, spark_udf.core, spark_udf.state; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
