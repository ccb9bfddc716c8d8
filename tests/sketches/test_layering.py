"""The sketches package stands alone: it imports nothing else from this repository."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sketches

PACKAGE = Path(sketches.__file__).resolve().parent
OURS = {"cep", "patterns", "spark_udf", "rules", "benchmarks", "tests"}


def test_no_module_imports_another_package_of_ours_or_pyspark() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert not roots & (OURS | {"pyspark"}), f"{path.name} imports {roots}"


def test_importing_sketches_loads_no_other_package_of_ours() -> None:
    code = (
        "import sys, sketches; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        f"set({sorted(OURS | {'pyspark'})!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent,
    )
    assert out.stdout.strip() == "[]"
