"""The layering of docs/architecture.md, checked on the source: every module under src/ is parsed with ``ast``.

Rules:

1. the library (``sparkonce``) never imports the local tooling layer (``sparkonce_local``), anywhere in a module
   (top level, ``TYPE_CHECKING`` block or function);
2. the library imports the modules of its extras (confluent-kafka, psycopg, tenacity, prometheus-client) only
   inside functions,
   so ``import sparkonce`` works without them;
3. no cycle between modules through their module-level imports (top level and ``TYPE_CHECKING`` blocks: a
   cycle of type-only imports still makes two modules one unit), except the known ones listed below;
4. no cycle between packages (``sparkonce.delta``, ``sparkonce.pipeline``, ``sparkonce_local.chaos``, ...; a
   top-level module such as ``sparkonce.spark`` is its own node) through any import, function-level ones included,
   except the known ones listed below with their reason. The package root ``sparkonce`` is the public facade: a
   module may import it inside a function (to call ``sparkonce.register``), never at its top level;
5. every package belongs to one layer of :data:`LAYERS` (the table of docs/architecture.md) and imports only its
   own layer and the ones below (the root facade again excepted inside functions).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SRC = Path(__file__).resolve().parents[2] / "src"
CORE = "sparkonce"
LOCAL = "sparkonce_local"
EXTRA_MODULES = {
    "confluent_kafka": "kafka",
    "psycopg": "postgres",
    "tenacity": "kafka, postgres",
    "prometheus_client": "metrics",
}

# The layers of docs/architecture.md, bottom up: a package imports its own layer and the ones below only.
LAYERS: list[tuple[str, frozenset[str]]] = [
    (
        "foundation",
        frozenset(
            {
                "sparkonce._types",
                "sparkonce._version",
                "sparkonce.crash",
                "sparkonce.errors",
                "sparkonce.extras",
                "sparkonce.jars",
                "sparkonce.options",
                "sparkonce.retries",
                "sparkonce.sqltext",
                "sparkonce.storage",
            }
        ),
    ),
    ("runtime", frozenset({"sparkonce.spark", "sparkonce.checkpoint"})),
    ("tables and sources", frozenset({"sparkonce.delta", "sparkonce.sql", "sparkonce.kafka"})),
    ("sinks", frozenset({"sparkonce.sinks"})),
    ("engine and operations", frozenset({"sparkonce.pipeline", "sparkonce.ops"})),
    ("entry points", frozenset({"sparkonce", "sparkonce.cli"})),
    ("local services", frozenset({"sparkonce_local", "sparkonce_local.services", "sparkonce_local.workdir"})),
    ("local harness", frozenset({"sparkonce_local.demo_pipeline", "sparkonce_local.chaos"})),
    ("local commands", frozenset({"sparkonce_local.quickstart", "sparkonce_local.demo", "sparkonce_local.cli"})),
]

# Module cycles through module-level imports that exist today, each with its reason.
KNOWN_MODULE_CYCLES: dict[frozenset[str], str] = {
    frozenset({"sparkonce.delta.builder", "sparkonce.delta.tables"}): (
        "delta-spark's API is mutually recursive: DeltaTable.create() returns a DeltaTableBuilder whose execute() "
        "returns a DeltaTable; both references are type-only (TYPE_CHECKING), the runtime imports are in functions"
    ),
}

# Package cycles that exist today, each with the reason it is not broken yet. The test fails when one of them
# disappears too, so the list only shrinks.
KNOWN_PACKAGE_CYCLES: dict[frozenset[str], str] = {}

Where = Literal["top", "type", "function"]


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the imported module (the longest prefix of the imported name that is a module under src/)
    line: int
    where: Where


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ``name`` (``pkg.mod.attr`` -> ``pkg.mod``), or None when it is not under src/."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _raw_imports(module: str, path: Path) -> Iterator[tuple[str, int, Where]]:
    """(imported name, line, where) of every import statement of the module, relative ones made absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, where: Where) -> Iterator[tuple[str, int, Where]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, where
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in child.names:
                    yield f"{base}.{alias.name}", child.lineno, where
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, "function")
            elif isinstance(child, ast.If) and where == "top" and _is_type_checking(child):
                for stmt in child.body:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), "type")
                for stmt in child.orelse:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), "top")
            else:
                yield from visit(child, where)

    yield from visit(ast.parse(path.read_text(), str(path)), "top")


def _imports() -> list[Import]:
    found = []
    for module, path in MODULES.items():
        for name, line, where in _raw_imports(module, path):
            target = _resolve(name)
            if target is not None and target != module:
                found.append(Import(module, target, line, where))
    return found


IMPORTS = _imports()


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _describe(cycle: frozenset[str], imports: list[Import], node: Callable[[str], str]) -> str:
    lines = [f"cycle between {sorted(cycle)}:"]
    for imp in imports:
        a, b = node(imp.importer), node(imp.target)
        line = f"  {imp.importer}:{imp.line} imports {imp.target} ({imp.where})"
        if a in cycle and b in cycle and a != b and line not in lines:
            lines.append(line)
    return "\n".join(lines)


def _check_cycles(cycles: list[frozenset[str]], known: dict[frozenset[str], str], describe: Callable[..., str]) -> None:
    unknown = [c for c in cycles if c not in known]
    assert unknown == [], "\n".join(describe(c) for c in unknown)
    gone = [sorted(c) for c in known if c not in cycles]
    assert gone == [], f"these cycles are gone, drop them from the known ones: {gone}"


def test_the_source_tree_has_both_layers() -> None:
    assert CORE in MODULES and LOCAL in MODULES
    assert "sparkonce.delta.sink" in MODULES and "sparkonce_local.services.broker" in MODULES
    assert len(IMPORTS) > 500


def test_the_library_never_imports_the_local_layer() -> None:
    bad = [
        f"{i.importer}:{i.line} imports {i.target} ({i.where})"
        for i in IMPORTS
        if _in(i.importer, CORE) and _in(i.target, LOCAL)
    ]
    assert bad == []


def test_the_library_imports_its_extras_only_inside_functions() -> None:
    bad = []
    for module, path in MODULES.items():
        if not _in(module, CORE):
            continue
        for name, line, where in _raw_imports(module, path):
            top = name.split(".")[0]
            if top in EXTRA_MODULES and where == "top":
                bad.append(f"{module}:{line} imports {name} at module level (extra {EXTRA_MODULES[top]!r})")
    assert bad == []


def test_no_cycle_between_modules_through_module_level_imports() -> None:
    edges: dict[str, set[str]] = {}
    module_level = [i for i in IMPORTS if i.where != "function"]
    for imp in module_level:
        edges.setdefault(imp.importer, set()).add(imp.target)
    _check_cycles(_cycles(edges), KNOWN_MODULE_CYCLES, lambda c: _describe(c, module_level, lambda m: m))


def test_no_module_imports_the_package_root_at_its_top_level() -> None:
    bad = [f"{i.importer}:{i.line}" for i in IMPORTS if i.target == CORE and i.where != "function"]
    assert bad == []


def test_no_cycle_between_packages_but_the_known_ones() -> None:
    counted = [i for i in IMPORTS if not (i.target == CORE and i.where == "function")]
    edges: dict[str, set[str]] = {}
    for imp in counted:
        a, b = _package(imp.importer), _package(imp.target)
        if a != b:
            edges.setdefault(a, set()).add(b)
    _check_cycles(_cycles(edges), KNOWN_PACKAGE_CYCLES, lambda c: _describe(c, counted, _package))


def _layer(package: str) -> int:
    for number, (_, members) in enumerate(LAYERS):
        if package in members:
            return number
    raise AssertionError(f"{package} is in no layer: add it to LAYERS and to docs/architecture.md")


def test_every_package_is_in_one_layer() -> None:
    packages = {_package(m) for m in MODULES}
    listed = [p for _, members in LAYERS for p in members]
    assert sorted(listed) == sorted(set(listed)), "a package is in two layers"
    assert packages - set(listed) == set(), "add these to LAYERS and docs/architecture.md"
    assert set(listed) - packages == set(), "these are gone: drop them from LAYERS and docs/architecture.md"


def test_imports_go_down_the_layers() -> None:
    bad = [
        f"{i.importer}:{i.line} ({LAYERS[_layer(_package(i.importer))][0]}) imports {i.target} "
        f"({LAYERS[_layer(_package(i.target))][0]}, {i.where})"
        for i in IMPORTS
        if _layer(_package(i.target)) > _layer(_package(i.importer))
        and not (i.target == CORE and i.where == "function")
    ]
    assert bad == []


def test_the_architecture_doc_names_every_package() -> None:
    doc = (SRC.parent / "docs" / "architecture.md").read_text()
    missing = [p for _, members in LAYERS for p in members if f"`{p}`" not in doc]
    assert missing == []
