"""The layering of docs/architecture.md, checked on the source: every module under src/ is parsed with ``ast`` (no
import is executed), and every import statement counts wherever it stands: at the top, under ``if TYPE_CHECKING:``,
in a class, in a function (also ``importlib.import_module("a.literal.name")``).

Rules:

1. the library (``sparkonce``) never imports the local tooling layer (``sparkonce_local``), anywhere in a module;
2. the library imports the modules of its extras (confluent-kafka, psycopg, tenacity, prometheus-client) only
   inside functions, so ``import sparkonce`` works without them;
3. no cycle between modules, through any import: a function-level import is no way around a cycle, and a cycle of
   type-only (``TYPE_CHECKING``) imports still makes two modules one unit, as delta-rs keeps none at all. The one
   exception is the public facade: a module may import the package root ``sparkonce`` inside a function (to call
   ``sparkonce.register``), never at its top level; those imports are left out of the module graph;
4. no cycle between packages (``sparkonce.delta``, ``sparkonce.pipeline``, ``sparkonce_local.chaos``, ...; a
   top-level module such as ``sparkonce.spark`` is its own node), the facade again excepted;
5. every package belongs to one layer of :data:`LAYERS` (the table of docs/architecture.md) and imports only its
   own layer and the ones below (the root facade again excepted inside functions).

The checker itself is tested on tiny packages written to ``tmp_path``: a cycle closed by a function-level import,
a type-only one, one through ``importlib``, and a package without any.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

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
    ("runtime", frozenset({"sparkonce.spark", "sparkonce.class_archive", "sparkonce.checkpoint"})),
    ("tables and sources", frozenset({"sparkonce.delta", "sparkonce.sql", "sparkonce.kafka"})),
    ("sinks", frozenset({"sparkonce.sinks"})),
    ("engine and operations", frozenset({"sparkonce.pipeline", "sparkonce.ops"})),
    ("entry points", frozenset({"sparkonce", "sparkonce.cli"})),
    ("local services", frozenset({"sparkonce_local", "sparkonce_local.services", "sparkonce_local.workdir"})),
    ("local harness", frozenset({"sparkonce_local.demo_pipeline", "sparkonce_local.chaos"})),
    ("local commands", frozenset({"sparkonce_local.quickstart", "sparkonce_local.demo", "sparkonce_local.cli"})),
]

# The layers inside ``sparkonce.delta``, bottom up (docs/architecture.md, "Inside sparkonce.delta"): each is a
# sub-package (``delta/log/``, ...) but the face, which is the package's own flat modules. A module's layer is
# the sub-package it lives in; it imports its own layer and the ones below only.
DELTA_LAYERS: list[str] = ["log", "table", "txn", "write", "read", "ops", "face"]
# The face: what Spark and users see. A new flat module of sparkonce.delta must be listed here (and in the doc);
# anything else goes into the sub-package of its layer.
DELTA_FACE = frozenset(
    {"source", "writer", "overwrite", "sink", "reader_listener", "patches", "tables", "spark_catalog", "exceptions"}
)
DELTA = "sparkonce.delta"


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


def _modules(src: Path) -> dict[str, Path]:
    """Every module under ``src`` by dotted name (a package by its own name, for its ``__init__.py``)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module of ``name`` (``pkg.mod.attr`` -> ``pkg.mod``), or None when it is not under src/."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _dynamic_import(node: ast.Call) -> str | None:
    """The module a call ``importlib.import_module("x.y")`` / ``import_module("x.y")`` / ``__import__("x.y")``
    names, when it names it by a literal (a computed name cannot be followed: the root facade's lazy re-exports
    mirror theirs as ``TYPE_CHECKING`` imports, which count)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _raw_imports(module: str, path: Path) -> Iterator[tuple[str, int, Where]]:
    """(imported name, line, where) of every import of the module, relative ones made absolute."""
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
                if isinstance(child, ast.Call) and (name := _dynamic_import(child)) is not None:
                    yield name, child.lineno, where
                yield from visit(child, where)

    yield from visit(ast.parse(path.read_text(), str(path)), "top")


def _imports(modules: Mapping[str, Path]) -> list[Import]:
    found = []
    for module, path in modules.items():
        for name, line, where in _raw_imports(module, path):
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.append(Import(module, target, line, where))
    return found


MODULES = _modules(SRC)
IMPORTS = _imports(MODULES)


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


def _facade_call(imp: Import, root: str = CORE) -> bool:
    """A function-level import of the package root: the public facade, called for ``sparkonce.register``."""
    return imp.target == root and imp.where == "function"


def module_cycles(imports: list[Import], *, root: str = CORE) -> list[str]:
    """Each cycle between modules through ``imports`` (all of them: top level, ``TYPE_CHECKING``, function
    level), described with the imports that close it; the facade's function-level imports left out."""
    counted = [i for i in imports if not _facade_call(i, root)]
    edges: dict[str, set[str]] = {}
    for imp in counted:
        edges.setdefault(imp.importer, set()).add(imp.target)
    return [_describe(c, counted, lambda m: m) for c in _cycles(edges)]


def test_no_cycle_between_modules_through_any_import() -> None:
    assert module_cycles(IMPORTS) == []


def _planted(tmp_path: Path, files: Mapping[str, str]) -> list[str]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_cycles(_imports(_modules(tmp_path)), root="planted")


PLANTED_CYCLES = {
    "function": {
        "planted/a.py": "from planted.b import helper\n",
        "planted/b.py": "def helper() -> None:\n    from planted.a import thing\n",
    },
    "relative, in a method": {
        "planted/a.py": "from .b import helper\n",
        "planted/b.py": "class B:\n    def m(self) -> None:\n        from . import a\n",
    },
    "type": {
        "planted/a.py": "from planted.b import helper\n",
        "planted/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted.a import A\n",
    },
    "dynamic": {
        "planted/a.py": "import planted.b\n",
        "planted/b.py": "import importlib\ndef f():\n    return importlib.import_module('planted.a')\n",
    },
}


@pytest.mark.parametrize("where", list(PLANTED_CYCLES))
def test_the_checker_finds_a_planted_cycle(tmp_path: Path, where: str) -> None:
    """A tiny package whose two modules import each other, one of the imports at top level and the other one
    ``where`` (inside a function, a method by a relative name, under ``TYPE_CHECKING``, through ``importlib``):
    the checker reports exactly that cycle, naming the line that closes it."""
    files = {"planted/__init__.py": "", **PLANTED_CYCLES[where]}
    found = _planted(tmp_path, files)
    assert len(found) == 1, found
    assert found[0].startswith("cycle between ['planted.a', 'planted.b']:")
    closing = "function" if where in ("relative, in a method", "dynamic") else where
    assert f"imports planted.a ({closing})" in found[0]


def test_the_checker_accepts_a_package_without_cycle(tmp_path: Path) -> None:
    """The same modules importing one way only (b at top level, a reaching b inside a function; the facade root
    imported inside a function): no cycle reported."""
    files = {
        "planted/__init__.py": "from planted.a import thing\n",
        "planted/a.py": "thing = 1\ndef f() -> None:\n    from planted.b import helper\n    import planted\n",
        "planted/b.py": "import os\nhelper = os.sep\n",
    }
    assert _planted(tmp_path, files) == []


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


def _delta_layer(module: str) -> int:
    """The layer of a module of ``sparkonce.delta``: its sub-package, or the face for a flat module listed there."""
    name = module.removeprefix(DELTA + ".")
    layer = name.split(".")[0]
    if layer in DELTA_LAYERS[:-1]:
        return DELTA_LAYERS.index(layer)
    if name in DELTA_FACE:
        return DELTA_LAYERS.index("face")
    raise AssertionError(
        f"{module} is in no layer of sparkonce.delta: move it into the sub-package of its layer (DELTA_LAYERS), or "
        "list it in DELTA_FACE, and name it in docs/architecture.md"
    )


def _delta_modules() -> dict[str, Path]:
    return {m: path for m, path in MODULES.items() if m.startswith(DELTA + ".")}


def test_every_delta_module_is_in_one_delta_layer() -> None:
    """``ls src/sparkonce/delta`` shows the layers: a folder per layer but the face, and the face's modules."""
    modules = _delta_modules()
    layers = [_delta_layer(m) for m in modules]
    assert set(layers) == set(range(len(DELTA_LAYERS))), "a layer without modules: drop it from DELTA_LAYERS"
    flat = {m.removeprefix(DELTA + ".") for m in modules if "." not in m.removeprefix(DELTA + ".")}
    assert flat == DELTA_FACE | set(DELTA_LAYERS[:-1]), "the flat modules of sparkonce.delta are the face's only"
    folders = {p.name for p in (SRC / "sparkonce" / "delta").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(DELTA_LAYERS[:-1])


def test_the_delta_layer_packages_hold_no_code_of_their_own() -> None:
    """A layer's ``__init__.py`` is its docstring (the layer and what it may import): no re-exports, so a module is
    imported by one name only."""
    bad = []
    for layer in DELTA_LAYERS[:-1]:
        body = ast.parse(MODULES[f"{DELTA}.{layer}"].read_text()).body
        docstring = (
            len(body) == 1
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        )
        if not docstring:
            bad.append(layer)
    assert bad == []


def test_delta_modules_import_down_the_delta_layers() -> None:
    """Inside ``sparkonce.delta`` (the package's ``__init__`` aside: it is the face), every import, function-level
    and type-only ones included, goes to the module's own layer or one below: a module in ``delta/read/`` imports
    from read, write, txn, table and log, never from ops or the face."""
    inside = [i for i in IMPORTS if i.importer.startswith(DELTA + ".") and i.target.startswith(DELTA + ".")]
    bad = [
        f"{i.importer}:{i.line} ({DELTA_LAYERS[_delta_layer(i.importer)]}) imports {i.target} "
        f"({DELTA_LAYERS[_delta_layer(i.target)]}, {i.where})"
        for i in inside
        if _delta_layer(i.target) > _delta_layer(i.importer)
    ]
    assert len(inside) > 200
    assert bad == []


def test_the_architecture_doc_names_every_delta_module() -> None:
    doc = (SRC.parent / "docs" / "architecture.md").read_text()
    missing = [f"delta/{layer}/" for layer in DELTA_LAYERS[:-1] if f"`delta/{layer}/`" not in doc]
    names = {m.rpartition(".")[2] for m in _delta_modules()} - set(DELTA_LAYERS)
    missing += sorted(n for n in names if f"`{n}`" not in doc)
    assert missing == []


DELTA_RS_WRITERS = frozenset(
    {"write_deltalake", "CommitProperties", "PostCommitHookProperties", "convert_to_deltalake", "transaction"}
)
"""delta-rs's names that write Delta commits when used (its writer, commit properties, conversion, transactions)."""
DELTA_RS_COMMIT_METHODS = frozenset(
    {"restore", "vacuum", "create_checkpoint", "cleanup_metadata", "create_write_transaction", "repair"}
)
"""Methods of delta-rs's ``DeltaTable`` that write to the log (``create`` is checked on the name ``DeltaTable``)."""
DELTA_RS_COMMITS_KEPT = {
    ("sparkonce.delta.ops.create", "convert_to_deltalake"): "CONVERT TO DELTA (docs/architecture.md)",
    ("sparkonce.delta.ops.vacuum", "vacuum"): "VACUUM START / END (docs/architecture.md)",
}


def _delta_rs_commits(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(name, line) of each use of a delta-rs API that writes the log."""
    imported = {name for name, _, _ in _raw_imports(module, path) if name.split(".")[0] == "deltalake"}
    for name in imported:
        if set(name.split(".")[1:]) & DELTA_RS_WRITERS:
            yield name.rpartition(".")[2], 0
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        if func.attr in DELTA_RS_COMMIT_METHODS:
            yield func.attr, node.lineno
        elif func.attr == "create" and isinstance(func.value, ast.Name) and func.value.id == "DeltaTable":
            yield "DeltaTable.create", node.lineno


def test_delta_commits_go_through_the_commit_engine() -> None:
    """No library module commits to a Delta log through delta-rs (its writer, ``restore``, ``DeltaTable.create``,
    ...) but the two kept, each named with its reason: every other commit is made by
    :class:`sparkonce.delta.txn.commit.Transaction`."""
    found = {
        (module, name): line
        for module, path in MODULES.items()
        if module.split(".")[0] == CORE
        for name, line in _delta_rs_commits(module, path)
    }
    assert sorted(set(found) - set(DELTA_RS_COMMITS_KEPT)) == []
    assert sorted(set(DELTA_RS_COMMITS_KEPT) - set(found)) == []  # a kept one that went away leaves the list


def test_no_module_imports_a_private_name_of_another_module() -> None:
    """A name that starts with ``_`` (a private function, class or module) is its module's own: no other module
    imports it, at any level (``from sparkonce.x import _y``)."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] not in (CORE, LOCAL):
                continue
            found += [
                f"{name}:{node.lineno} imports {node.module}.{alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    assert found == []
