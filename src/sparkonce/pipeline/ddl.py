"""The one parser of DDL field lists (``name TYPE, ...``) in sparkonce: the pipeline file's ``schema`` keys, and the
schemas of the tables stages create. Top-level fields are parsed here, without Spark; nested types are checked for
balance and left to Spark, which parses them when a schema is built (:func:`ddl_schema`).

Runs on the driver.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sparkonce.errors import DdlError
from sparkonce.pipeline.model import SchemaField

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

_PRIMITIVE_TYPES = {
    "STRING",
    "VARCHAR",
    "CHAR",
    "BOOLEAN",
    "BYTE",
    "TINYINT",
    "SHORT",
    "SMALLINT",
    "INT",
    "INTEGER",
    "LONG",
    "BIGINT",
    "FLOAT",
    "REAL",
    "DOUBLE",
    "DECIMAL",
    "NUMERIC",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP_LTZ",
    "TIMESTAMP_NTZ",
    "BINARY",
}
_COMPLEX_TYPES = {"ARRAY", "MAP", "STRUCT"}
_FIELD = re.compile(r"^\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s+(.+?)\s*$", re.S)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_fields(text: str) -> tuple[SchemaField, ...]:
    """The top-level fields of ``name TYPE, ...`` (nested types checked for balance only).

    Raises:
        DdlError: not a field list, an unknown type, a complex type without its element types, a name declared
            twice or not made of letters, digits and underscores, or no field at all.
    """
    fields: list[SchemaField] = []
    for part in _split_top_level(text):
        match = _FIELD.match(part)
        if match is None:
            raise DdlError(f"{part.strip()!r} is not 'name TYPE'")
        name = match.group(1).strip("`")
        type_text = re.sub(r"\s+(NOT\s+NULL|COMMENT\s+'.*')\s*$", "", match.group(2), flags=re.I | re.S)
        base = re.match(r"^([A-Za-z_]+)", type_text)
        type_name = base.group(1).upper() if base else ""
        if type_name not in _PRIMITIVE_TYPES | _COMPLEX_TYPES:
            raise DdlError(f"field {name!r}: {type_text!r} is not a Spark SQL type")
        if type_name in _COMPLEX_TYPES and "<" not in type_text:
            raise DdlError(f"field {name!r}: {type_name} needs its element types, e.g. {type_name}<STRING>")
        if any(f.name == name for f in fields):
            raise DdlError(f"field {name!r} is declared twice")
        if not _NAME.match(name):
            raise DdlError(f"field {name!r}: use letters, digits and underscores")
        fields.append(SchemaField(name, type_text))
    if not fields:
        raise DdlError("declares no field")
    return tuple(fields)


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
            if depth < 0:
                raise DdlError(f"unbalanced {char!r} in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise DdlError(f"unbalanced brackets in {text!r}")
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def ddl_schema(spark: SparkSession, ddl: str) -> StructType:
    """The schema of a DDL field list. Lists of plain ``name TYPE`` fields (as the raw and quarantine tables'
    are) are built here; anything else is parsed by Spark. The first Spark parse of a driver costs seconds (the SQL
    parser's classes load): the raw stage starts without one."""
    import pyspark.sql.types as T

    simple = {
        "STRING": T.StringType,
        "INT": T.IntegerType,
        "BIGINT": T.LongType,
        "DOUBLE": T.DoubleType,
        "TIMESTAMP": T.TimestampType,
        "BOOLEAN": T.BooleanType,
    }
    try:
        matches = [_FIELD.match(part) for part in _split_top_level(ddl)]
    except DdlError:
        matches = []
    plain = [(m.group(1), m.group(2).upper()) for m in matches if m is not None and _NAME.match(m.group(1))]
    if (
        plain
        and len(plain) == len(matches)
        and all(kind in simple for _, kind in plain)  # no NOT NULL, COMMENT, nested or parameterised type
        and str(spark.conf.get("spark.sql.timestampType", "TIMESTAMP_LTZ")).upper() == "TIMESTAMP_LTZ"
    ):
        return T.StructType([T.StructField(name, simple[kind]()) for name, kind in plain])
    schema = spark.createDataFrame([], ddl).schema
    assert isinstance(schema, T.StructType)
    return schema


__all__ = ["DdlError", "ddl_schema", "parse_fields"]
