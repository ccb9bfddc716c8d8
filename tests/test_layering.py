"""The import layers of DESIGN.md hold, and no two modules import each other round a circle.

A small AST pass over every ``.py`` file of the four packages (recursively; a file's module
name is its path, ``pkg/sub/__init__.py`` being ``pkg.sub``). How an import becomes an edge
of the module graph:

* **Every import statement counts**: at module level, inside functions and classes, under
  ``if``/``try``. A lazy ``from x import y`` inside a function ties the two modules as surely
  as one at the top; it only moves the failure to the first call. Imports by string
  (``importlib.import_module``) are not seen.
* **Imports under ``if TYPE_CHECKING:``** never run: they count for the layers (a type from a
  higher layer is still a dependency on it) but not for circles. The parts of an operator
  (its aggregate kernels and window kinds) take the operator as an argument and name its type
  in annotations only; the import-linter's ``exclude_type_checking_imports`` draws the same line.
* **Relative imports** resolve against the importing module's package (``__init__.py`` is its
  own package).
* ``import a.b.c`` and ``from a.b.c import x`` are an edge to the module ``a.b.c`` only.
  Python runs the parents' ``__init__`` first, but that is the parent package initialising
  itself, not a use of what its ``__init__`` re-exports.
* ``from a.b import x`` is an edge to ``a.b.x`` when that is one of our modules (importing a
  submodule), otherwise to ``a.b`` (the module, or the package's ``__init__``).

So a package's ``__init__`` re-exporting its submodules gives edges ``pkg -> pkg.sub``, and a
submodule importing a sibling through the package path (``from pkg.other import y``) gives
``pkg.sub -> pkg.other``: no circle. A submodule importing ``pkg`` itself (``import pkg``,
``from pkg import Name`` where ``Name`` is no submodule) is an edge ``pkg.sub -> pkg``, and with
the re-export a real circle: it works only while the ``__init__`` happens to bind ``Name``
before it imports ``pkg.sub``. It is reported. A module importing itself is no edge.

An import of ours that names no module of the tree fails too (it would fail when it runs, and
the graph would silently miss an edge).

Circles are reported as chains ``a -> b -> c -> a``: for every import that lies on a circle,
the shortest circle through it, each circle once, so every import one could cut is shown.

That ``cep``, ``patterns`` and ``sketches`` import no pyspark at module level, and that the
Spark-free worker core loads none, is checked in ``tests/spark_udf/test_layering.py``.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]

PACKAGES = ("sketches", "patterns", "cep", "spark_udf")
"""Our packages, lowest layer first."""

MAY_IMPORT: dict[str, frozenset[str]] = {
    "sketches": frozenset({"sketches"}),
    "patterns": frozenset({"patterns", "sketches"}),
    "cep": frozenset({"cep", "patterns", "sketches"}),
    "spark_udf": frozenset({"spark_udf", "cep", "patterns", "sketches"}),
}
"""Which of our packages each package may import (DESIGN.md, "Layers")."""

SPARK_SUBCOMMAND_MODULES = ("cep.cli.spark", "cep.cli.spark_failures")
"""The only ``cep`` modules that may import ``spark_udf`` (exact module names): the ``cep spark``
subcommands and their failure reporting (which names the engine's shipped packages), and only
inside the functions that run a job or report its failure, so that ``cep run`` never loads Spark."""


@dataclass(frozen=True)
class Import:
    """One import of one of our modules, as it appears in the source."""

    importer: str  # module name
    target: str  # the module it names (an unresolved name when ``resolved`` is false)
    path: Path
    line: int
    top_level: bool  # runs when the module loads (not inside a function)
    resolved: bool
    type_only: bool = False  # under ``if TYPE_CHECKING:``: never runs

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}"


def modules_of(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file under the packages."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, in_function: bool = False,
          type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import node below ``node``, whether it sits inside a function, and whether it sits
    under ``if TYPE_CHECKING:`` (its body, not its ``else``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function, type_only
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), in_function, type_only)
            continue
        yield from _walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
                         type_only)


def imports_of(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    """Every import of one of our modules made by one of our modules (see the module docstring)."""
    modules = modules_of(root, packages)
    out: list[Import] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        own_package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node, in_function, type_only in _walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] in packages]
            else:
                if node.level:
                    keep = len(own_package) - (node.level - 1)
                    if keep <= 0:
                        base = "." * node.level + (node.module or "")  # reaches above our packages
                        out.append(Import(name, base, path, node.lineno, not in_function, False, type_only))
                        continue
                    base = ".".join(own_package[:keep] + (node.module.split(".") if node.module else []))
                elif node.module is not None and node.module.split(".")[0] in packages:
                    base = node.module
                else:
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in dict.fromkeys(targets):
                out.append(Import(name, target, path, node.lineno, not in_function, target in modules, type_only))
    return out


def may_import_spark_udf(module: str) -> bool:
    return module in SPARK_SUBCOMMAND_MODULES


def layering_violations(imports: list[Import]) -> list[Import]:
    """Imports that break DESIGN.md's layers."""
    bad = []
    for imp in imports:
        if imp.target.startswith("."):
            continue  # a relative import reaching above our packages: reported as naming no module
        mine, theirs = imp.importer.split(".")[0], imp.target.split(".")[0]
        if theirs in MAY_IMPORT[mine]:
            continue
        if mine == "cep" and theirs == "spark_udf" and may_import_spark_udf(imp.importer) and not imp.top_level:
            continue
        bad.append(imp)
    return bad


def cycles(imports: list[Import]) -> list[list[str]]:
    """Every circle of the module graph as a chain ``[a, b, ..., a]``: the shortest one through
    each edge that lies on a circle, each circle once (starting at its smallest module name)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.resolved and imp.importer != imp.target and not imp.type_only:
            graph.setdefault(imp.importer, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    component = _components(graph)
    found: dict[tuple[str, ...], list[str]] = {}
    for u in sorted(graph):
        for v in sorted(graph[u]):
            if component[u] != component[v]:
                continue
            path = _shortest_path(graph, v, u, component)
            chain = [u] + path[:-1]  # u -> v -> ... (-> u)
            start = chain.index(min(chain))
            ring = tuple(chain[start:] + chain[:start])
            found.setdefault(ring, list(ring) + [ring[0]])
    return sorted(found.values())


def _components(graph: dict[str, set[str]]) -> dict[str, int]:
    """Strongly connected component of each node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comp: dict[str, int] = {}
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp[member] = index[node]
                        if member == node:
                            break
    return comp


def _shortest_path(graph: dict[str, set[str]], start: str, goal: str, component: dict[str, int]) -> list[str]:
    """Shortest path ``[start, ..., goal]`` inside one strongly connected component."""
    before: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for nxt in sorted(graph[node]):
            if nxt not in before and component[nxt] == component[start]:
                before[nxt] = node
                queue.append(nxt)
    path = [goal]
    while (prev := before[path[-1]]) is not None:
        path.append(prev)
    return path[::-1]


def describe_cycles(imports: list[Import], root: Path) -> str:
    """One line per circle: the chain, then where each of its imports is."""
    where: dict[tuple[str, str], str] = {}
    for imp in imports:
        where.setdefault((imp.importer, imp.target), imp.where(root))
    lines = []
    for chain in cycles(imports):
        spots = ", ".join(where[(a, b)] for a, b in zip(chain, chain[1:]))
        lines.append(f"{' -> '.join(chain)}    ({spots})")
    return "\n".join(lines)


# ------------------------------------------------------------------ the real tree


@cache
def real_imports() -> list[Import]:
    return imports_of(REPO)


def test_the_graph_sees_imports_inside_functions() -> None:
    lazy = {(i.importer, i.target) for i in real_imports() if not i.top_level}
    assert ("spark_udf.kinds", "spark_udf.search") in lazy  # SearchKind.build
    assert len(real_imports()) > 100


def test_every_import_of_ours_names_a_module_of_ours() -> None:
    bad = [f"{i.where(REPO)}: {i.importer} imports {i.target}, no module of the tree" for i in real_imports()
           if not i.resolved]
    assert not bad, "\n".join(bad)


def _rule_of(package: str) -> str:
    rule = f"{package} may import {', '.join(sorted(MAY_IMPORT[package]))}"
    if package == "cep":
        rule += f"; spark_udf only from {' or '.join(SPARK_SUBCOMMAND_MODULES)}, inside functions"
    return rule


def test_each_package_imports_only_the_layers_below_it() -> None:
    bad = [
        f"{i.where(REPO)}: {i.importer} imports {i.target}{' at module level' if i.top_level else ''}"
        f" ({_rule_of(i.importer.split('.')[0])})"
        for i in layering_violations(real_imports())
    ]
    assert not bad, "\n".join(bad)


def test_no_import_circle_between_modules() -> None:
    report = describe_cycles(real_imports(), REPO)
    assert not report, f"import circles (every import counts, inside functions too):\n{report}"


# ------------------------------------------------------------------ the checker itself


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for pkg in PACKAGES:
        (root / pkg).mkdir(exist_ok=True)
        (root / pkg / "__init__.py").touch()
    return root


def test_the_checker_finds_every_circle_and_none_through_re_exports(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "cep/events.py": "def parse(): pass\n",
        # re-exports, and a submodule importing a sibling through the package path: no circle
        "cep/cli/__init__.py": "from cep.cli.main import main\nfrom . import bench_cmd\n",
        "cep/cli/main.py": "from cep.cli.spark import run\nimport cep.events\n",
        "cep/cli/spark.py": "def run():\n    from ..events import parse\n",
        # cep.bench -> cep.cli -> cep.cli.bench_cmd -> cep.bench, one import inside a function
        "cep/bench.py": "from cep import cli\n",
        "cep/cli/bench_cmd.py": "class C:\n    def f(self):\n        from cep.bench import x\n",
        # a submodule importing its package's __init__, which re-exports it
        "cep/percolator/__init__.py": "from cep.percolator.index import Index\n",
        "cep/percolator/index.py": "from cep.percolator import Query\n",
        # two circles sharing a module
        "patterns/a.py": "from patterns import b, c\n",
        "patterns/b.py": "from patterns.a import x\n",
        "patterns/c.py": "if True:\n    import patterns.a\n",
        "patterns/selfish.py": "from patterns.selfish import x\n",
    })
    imports = imports_of(root)
    assert all(i.resolved for i in imports)
    assert {(i.importer, i.target) for i in imports if i.importer == "cep.cli.spark"} == {("cep.cli.spark", "cep.events")}
    assert [" -> ".join(c) for c in cycles(imports)] == [
        "cep.bench -> cep.cli -> cep.cli.bench_cmd -> cep.bench",
        "cep.percolator -> cep.percolator.index -> cep.percolator",
        "patterns.a -> patterns.b -> patterns.a",
        "patterns.a -> patterns.c -> patterns.a",
    ]
    report = describe_cycles(imports, root)
    assert "cep/cli/bench_cmd.py:3" in report and "cep/percolator/index.py:1" in report


def test_the_checker_reports_each_import_across_the_layers(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "sketches/hll.py": "def f():\n    from patterns import ast\n",  # inside a function still counts
        "patterns/ast.py": "from ..cep import events\n",  # relative import into another package
        "patterns/ok.py": "from sketches.hll import f\n",
        "cep/events.py": "",
        "cep/engine.py": "def f():\n    import spark_udf.api\n",  # not a Spark subcommand module
        "cep/cli/spark_failures.py": "def f():\n    from spark_udf.shipping import ENGINE_PACKAGES\n",
        "cep/cli/spark.py": "from spark_udf import api\n",  # at module level: would load Spark for `cep run`
        "spark_udf/api.py": "from cep.events import x\nfrom patterns import ok\nimport sketches\n",
    })
    imports = imports_of(root)
    assert {(i.importer, i.target) for i in layering_violations(imports)} == {
        ("sketches.hll", "patterns.ast"),
        ("cep.engine", "spark_udf.api"),
        ("cep.cli.spark", "spark_udf.api"),
    }
    # ``from ..cep`` in a top-level package reaches above our packages: reported as unresolved
    assert [(i.importer, i.target, i.resolved) for i in imports if i.importer == "patterns.ast"] == [
        ("patterns.ast", "..cep", False)
    ]


def test_only_the_named_spark_modules_may_import_spark_udf(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "cep/cli/spark.py": "def f():\n    from spark_udf.api import apply_rules\n",
        "cep/cli/spark_failures.py": "def f():\n    from spark_udf.shipping import ENGINE_PACKAGES\n",
        # a name that looks like a Spark module is not enough, nor the removed cep.spark_cli
        "cep/cli/run_spark.py": "def f():\n    from spark_udf.api import apply_rules\n",
        "cep/cli/spark_extra.py": "def f():\n    from spark_udf.api import apply_rules\n",
        "cep/spark_cli.py": "def f():\n    from spark_udf.api import apply_rules\n",
    })
    assert sorted(i.importer for i in layering_violations(imports_of(root))) == [
        "cep.cli.run_spark", "cep.cli.spark_extra", "cep.spark_cli",
    ]


def test_the_checker_reports_imports_of_modules_that_do_not_exist(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "cep/x.py": "from cep.gone import y\ndef f():\n    from .also_gone import z\n    import cep.x\n",
    })
    assert sorted((i.target, i.resolved, i.top_level) for i in imports_of(root)) == [
        ("cep.also_gone", False, False), ("cep.gone", False, True), ("cep.x", True, False),
    ]


def test_type_checking_imports_count_for_layers_but_not_for_circles(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        # the operator imports its parts; the parts name the operator's type for annotations only
        "cep/win/operator.py": "from cep.win.panes import Panes\n",
        "cep/win/panes.py": ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
                             "if TYPE_CHECKING:\n    from cep.win.operator import Op\nelse:\n    import cep.events\n"),
        "cep/events.py": "",
        # a type from a higher layer is still a layer break
        "patterns/ast.py": "import typing\nif typing.TYPE_CHECKING:\n    from cep.events import Batch\n",
    })
    imports = imports_of(root)
    typed = {(i.importer, i.target, i.type_only) for i in imports}
    assert ("cep.win.panes", "cep.win.operator", True) in typed
    assert ("cep.win.panes", "cep.events", False) in typed  # the else branch runs
    assert cycles(imports) == []
    assert [(i.importer, i.target) for i in layering_violations(imports)] == [("patterns.ast", "cep.events")]
