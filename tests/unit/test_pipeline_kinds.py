"""The stage protocol: every stage kind is one module of ``sparkonce.pipeline.kinds`` registered in ``KINDS``, and
nothing outside that package switches on a concrete stage class (no Spark)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast, get_args

import pytest

import sparkonce.pipeline.model as model
from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.kinds import KINDS, Kind, kind_of
from sparkonce.pipeline.loader import parse_pipeline
from sparkonce.pipeline.model import SOURCE, Stage, StageKind, Trigger
from sparkonce.pipeline.reader import TomlReader

SRC = Path(__file__).resolve().parents[2] / "src"
KINDS_DIR = SRC / "sparkonce" / "pipeline" / "kinds"
STAGE_CLASSES = {cls.__name__ for cls in get_args(Stage)}

# isinstance checks on a concrete stage class allowed outside the kinds package, each with its reason.
ALLOWED_ISINSTANCE = {
    "sparkonce/pipeline/model.py": (
        "PipelineConfig.raw / .bronze / .gold / .merges: typed accessors of the built-in stages for the local tooling "
        "(quickstart, chaos); they narrow the Stage union to one model class, they do not dispatch behaviour"
    ),
}


def test_every_kind_name_maps_to_one_kind_module_and_model_class() -> None:
    assert list(KINDS) == list(get_args(StageKind))
    modules = set()
    for name, kind in KINDS.items():
        assert isinstance(kind, Kind)
        assert kind.name == name
        assert kind.stage_class.kind == name
        module = inspect.getmodule(type(kind))
        assert module is not None and module.__name__ == f"sparkonce.pipeline.kinds.{name}"
        modules.add(module.__name__)
    assert {cls.kind for cls in get_args(Stage)} == set(KINDS)
    assert len(modules) == len(KINDS)


def _isinstance_of_stage(node: ast.AST) -> list[str]:
    """The concrete stage classes an ``isinstance`` call's second argument names."""
    if isinstance(node, ast.Name):
        return [node.id] if node.id in STAGE_CLASSES else []
    if isinstance(node, ast.Attribute):
        return [node.attr] if node.attr in STAGE_CLASSES else []
    if isinstance(node, ast.BinOp):
        return _isinstance_of_stage(node.left) + _isinstance_of_stage(node.right)
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _isinstance_of_stage(element)]
    return []


def test_no_module_outside_the_kinds_package_switches_on_a_stage_class() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if path.is_relative_to(KINDS_DIR) or relative in ALLOWED_ISINSTANCE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
            ):
                named = _isinstance_of_stage(node.args[1])
                if named:
                    found.append(f"{relative}:{node.lineno} {node.func.id}(..., {named})")
    assert found == []


def test_the_allowed_isinstance_checks_are_still_there() -> None:
    for relative in ALLOWED_ISINSTANCE:
        text = (SRC / relative).read_text()
        assert any(f"isinstance(stage, {c})" in text or f"isinstance(s, {c})" in text for c in STAGE_CLASSES)


# -- a new kind: its model class and its module, registered; the loader and the dispatchers are unchanged ---------


@dataclass(frozen=True)
class EchoStage:
    """A stage kind defined outside the library, for this test."""

    kind: ClassVar[str] = "echo"

    name: str
    input: str
    checkpoint: str
    trigger: Trigger
    table: str

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.table,)


class EchoKind(Kind[Any]):
    name = cast(StageKind, "echo")
    stage_class = cast(type[Stage], EchoStage)
    unreadable = "writes nowhere a stage can read"

    def parse(self, reader: TomlReader, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> Any:
        key = f"stages.{name}"
        reader.known(data, key, {"input", "checkpoint", "table"})
        return EchoStage(
            name=name,
            input=reader.input(data, key, None),
            checkpoint=reader.path(data, "checkpoint", key),
            trigger=reader.trigger(data, key),
            table=reader.path(data, "table", key),
        )

    def start(self, spark: Any, config: Any, stage: Any, options: dict[str, str]) -> Any:
        raise NotImplementedError


ECHO = """
name = "echo"
[source]
bootstrap_servers = "127.0.0.1:9092"
topic = "t"
[stages.raw]
table = "tables/raw"
checkpoint = "checkpoints/raw"
[stages.echo]
kind = "echo"
input = "raw"
checkpoint = "checkpoints/echo"
table = "{table}"
"""


def test_a_registered_kind_is_loaded_checked_and_dispatched_without_touching_the_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(KINDS, "echo", EchoKind())
    config = parse_pipeline(ECHO.format(table="tables/echo"), tmp_path / "p.toml")
    echo = config.stage("echo")
    assert isinstance(echo, EchoStage)
    assert echo.table == str(tmp_path / "tables" / "echo") and echo.input == "raw" and config.raw.input == SOURCE
    assert isinstance(kind_of(echo), EchoKind)
    assert kind_of(echo).txn_records(echo, "q") == []  # the protocol's defaults apply
    # The loader's one-owner-per-path check goes through the kind's places (the default: its first table).
    with pytest.raises(PipelineConfigError, match=r"stages\.echo\.table: same path as stages\.raw\.table"):
        parse_pipeline(ECHO.format(table="tables/raw"), tmp_path / "p.toml")
    # ... and the input check through the kind's unreadable reason.
    with pytest.raises(PipelineConfigError, match=r"stage 'echo' writes nowhere a stage can read"):
        parse_pipeline(
            ECHO.format(table="tables/echo")
            + '[stages.again]\nkind = "echo"\ninput = "echo"\ncheckpoint = "checkpoints/again"\ntable = "tables/x"\n',
            tmp_path / "p.toml",
        )


def test_an_unregistered_kind_is_named_with_the_registered_ones(tmp_path: Path) -> None:
    with pytest.raises(
        PipelineConfigError, match=r"stages\.echo\.kind: 'echo' is not a stage kind \(raw, bronze, merge"
    ):
        parse_pipeline(ECHO.format(table="tables/echo"), tmp_path / "p.toml")


def test_every_stage_model_class_names_its_kind() -> None:
    for cls in get_args(model.Stage):
        assert cls.kind in KINDS and KINDS[cls.kind].stage_class is cls
