"""User transformations of a stage: a Python function (``transform = "module:function"``) or SQL (``sql = ...``).

Resolved on the driver when the pipeline is loaded, and checked against an empty frame of the stage's input schema
(:func:`check_transform`) before any query starts, so a missing module, a function that is not callable or takes
the wrong arguments, or SQL that does not analyse against the input fails with a
:class:`~sparkonce.errors.PipelineConfigError` naming the stage key, before any data moves.

A function takes the batch (``DataFrame -> DataFrame``) or the batch and its id (``(DataFrame, batch_id) ->
DataFrame``, for per-batch logic); SQL reads the batch as ``{input}``
(``spark.sql(text, input=batch)``). Modules are imported with the pipeline file's folder first on ``sys.path``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sparkonce.errors import PipelineConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class Transform:
    """A stage's user transformation as written in the pipeline file. Runs on the driver.

    Exactly one of ``function`` (``"module:name"``) and ``sql`` (the query text, read from the ``.sql`` file when
    one was named) is set.
    """

    key: str
    """The key path in the pipeline file (``stages.enriched.transform``), for messages."""
    function: str | None = None
    sql: str | None = None
    base_dir: str = "."
    """The pipeline file's folder: modules are looked up there first."""

    @property
    def label(self) -> str:
        return self.function if self.function is not None else "sql"

    def resolve(self) -> BoundTransform:
        """Import the function (or prepare the SQL) and check how it is called.

        Raises:
            PipelineConfigError: the module is not found or fails to import, the name is missing or not callable,
                or it does not take one or two positional arguments.
        """
        if self.sql is not None:
            if "{input}" not in self.sql:
                raise PipelineConfigError(f"{self.key}: the SQL must read the stage's input as {{input}}")
            return BoundTransform(self, None, "sql")
        assert self.function is not None
        module_name, _, attribute = self.function.partition(":")
        if not module_name or not attribute:
            raise PipelineConfigError(f"{self.key}: {self.function!r} is not 'module:function'")
        if self.base_dir not in sys.path:
            sys.path.insert(0, self.base_dir)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and module_name.startswith(err.name):
                raise PipelineConfigError(
                    f"{self.key}: module {module_name!r} not found (looked in {self.base_dir} and sys.path)"
                ) from err
            raise PipelineConfigError(f"{self.key}: importing module {module_name!r} failed: {err}") from err
        except Exception as err:
            raise PipelineConfigError(
                f"{self.key}: importing module {module_name!r} failed: {type(err).__name__}: {err}"
            ) from err
        _pickle_by_value(module, self.base_dir)
        target: Any = module
        for part in attribute.split("."):
            if not hasattr(target, part):
                raise PipelineConfigError(f"{self.key}: module {module_name!r} has no {attribute!r}")
            target = getattr(target, part)
        if not callable(target):
            raise PipelineConfigError(
                f"{self.key}: {self.function!r} is a {type(target).__name__}, not a callable "
                "(DataFrame -> DataFrame or (DataFrame, batch_id) -> DataFrame)"
            )
        return BoundTransform(self, target, _arity(self, target))


@dataclass(frozen=True)
class BoundTransform:
    """A resolved transformation, applied to each batch on the driver (the plan runs on executors)."""

    spec: Transform
    function: Callable[..., Any] | None
    style: Literal["batch", "batch_and_id", "sql"]

    def apply(self, frame: DataFrame, batch_id: int) -> DataFrame:
        """The stage's output for one batch (a lazy DataFrame: nothing runs here)."""
        from pyspark.sql import DataFrame

        if self.style == "sql":
            assert self.spec.sql is not None
            result: Any = frame.sparkSession.sql(self.spec.sql, input=frame)
        elif self.style == "batch_and_id":
            assert self.function is not None
            result = self.function(frame, batch_id)
        else:
            assert self.function is not None
            result = self.function(frame)
        if not isinstance(result, DataFrame):
            raise PipelineConfigError(
                f"{self.spec.key}: {self.spec.label} returned a {type(result).__name__}, not a DataFrame"
            )
        return result


def check_transform(bound: BoundTransform, spark: Any, input_schema: StructType) -> StructType:
    """Apply ``bound`` to an empty frame of ``input_schema`` and analyse the result; return its schema.

    Raises:
        PipelineConfigError: the function raises, or the SQL / the function's plan does not analyse (unknown
            column, bad syntax, type errors), naming the stage key and Spark's reason.
    """
    empty = spark.createDataFrame([], input_schema)
    try:
        schema = bound.apply(empty, 0).schema
    except PipelineConfigError:
        raise
    except Exception as err:
        raise PipelineConfigError(
            f"{bound.spec.key}: {bound.spec.label} does not apply to the input's schema "
            f"({input_schema.simpleString()[:300]}): {_first_line(err)}"
        ) from err
    assert schema is not None
    return schema


def read_sql(key: str, value: str, base_dir: Path) -> str:
    """The SQL text of a ``sql`` key: the value itself, or the file's text when it names a ``.sql`` file.

    Raises:
        PipelineConfigError: the ``.sql`` file is missing or unreadable, or the text is empty.
    """
    text = value.strip()
    if text.endswith(".sql") and len(text.split()) == 1:
        path = (base_dir / text).resolve()
        try:
            text = path.read_text(encoding="utf-8").strip().rstrip(";")
        except OSError as err:
            raise PipelineConfigError(f"{key}: cannot read the SQL file {path} ({err.strerror})") from err
    if not text:
        raise PipelineConfigError(f"{key}: empty SQL")
    return text


def _arity(spec: Transform, function: Callable[..., Any]) -> Literal["batch", "batch_and_id"]:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return "batch"
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values())
    keyword_only = [
        p
        for p in signature.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    ]
    if not keyword_only:
        if len(required) == 2:
            return "batch_and_id"
        if len(required) == 1 or (not required and (positional or variadic)):
            return "batch"
    raise PipelineConfigError(
        f"{spec.key}: {spec.function!r} has the signature {signature}; a transform takes (df) or (df, batch_id)"
    )


def _pickle_by_value(module: Any, base_dir: str) -> None:
    """Ship a module of the pipeline's folder to executors by value: their Python workers cannot import it (a UDF
    defined there would fail on executors otherwise)."""
    location = getattr(module, "__file__", None)
    if location is None or not str(Path(location).resolve()).startswith(str(Path(base_dir).resolve()) + "/"):
        return
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else type(err).__name__


__all__ = ["BoundTransform", "Transform", "check_transform", "read_sql"]
