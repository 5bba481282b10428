"""sparkonce's evaluator of Spark SQL expressions (generated columns) against Spark itself: each expression is
computed by Spark (``F.expr``) and by sparkonce's evaluator on executors (``mapInArrow``, the Arrow batches a Delta
writer gets) over the same rows, in a session time zone other than UTC, and the results must be equal."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from sparkonce.errors import UnsupportedFeatureError
from sparkonce.sqltext.expression import parse_expression

ROWS = [
    (1, 7, 2.5, "Hello World ", dt.datetime(2024, 1, 1, 3, 30, 15), dt.date(2024, 2, 29), True, "2024-03-05"),
    (2, -7, -0.5, "  abc", dt.datetime(2023, 12, 31, 23, 59, 59, 123400), dt.date(1969, 12, 31), False, "2024-1-5"),
    (3, 0, None, None, None, None, None, None),
    (4, 2147483000, 1e9, "2024-03-05", dt.datetime(1960, 6, 15), dt.date(2000, 1, 1), True, " 2024-02-29 10:00"),
    (5, None, 3.0, "x", dt.datetime(2024, 3, 10, 10, 0, 1, 500000), dt.date(2024, 12, 31), None, "2024"),
]
SCHEMA = "id INT, n INT, x DOUBLE, s STRING, ts TIMESTAMP, d DATE, b BOOLEAN, ds STRING"

EXPRESSIONS = [
    ("CAST(ts AS DATE)", "DATE"),
    ("to_date(ts)", "DATE"),
    ("CAST(ds AS DATE)", "DATE"),
    ("year(ds)", "INT"),
    ("year(ts)", "INT"),
    ("month(ts)", "INT"),
    ("day(ts)", "INT"),
    ("hour(ts)", "INT"),
    ("minute(ts)", "INT"),
    ("second(ts)", "INT"),
    ("year(d)", "INT"),
    ("dayofweek(d)", "INT"),
    ("quarter(d)", "INT"),
    ("date_format(ts, 'yyyy-MM-dd')", "STRING"),
    ("date_format(ts, 'yyyyMMdd HH:mm:ss')", "STRING"),
    ("date_format(d, 'yyyy-MM')", "STRING"),
    ("date_trunc('HOUR', ts)", "TIMESTAMP"),
    ("date_trunc('MONTH', ts)", "TIMESTAMP"),
    ("date_trunc('DAY', ts)", "TIMESTAMP"),
    ("date_trunc('WEEK', ts)", "TIMESTAMP"),
    ("trunc(d, 'MM')", "DATE"),
    ("CAST(ts AS STRING)", "STRING"),
    ("CAST(d AS STRING)", "STRING"),
    ("CAST(n AS STRING)", "STRING"),
    ("CAST(x AS INT)", "INT"),
    ("CAST(n AS BIGINT) * 1000", "BIGINT"),
    ("CAST(ts AS BIGINT)", "BIGINT"),
    ("n + 1", "INT"),
    ("n - id * 2", "INT"),
    ("n / 2", "DOUBLE"),
    ("n % 3", "INT"),
    ("n DIV 2", "BIGINT"),
    ("x * 2", "DOUBLE"),
    ("x % 2", "DOUBLE"),
    ("-n", "INT"),
    ("abs(n)", "INT"),
    ("floor(x)", "BIGINT"),
    ("ceil(x)", "BIGINT"),
    ("concat(s, '-', id)", "STRING"),
    ("s || '!'", "STRING"),
    ("concat_ws('/', s, CAST(d AS STRING))", "STRING"),
    ("substring(s, 2, 3)", "STRING"),
    ("substring(s, -3)", "STRING"),
    ("substring(s, 0, 2)", "STRING"),
    ("substr(s, -4, 2)", "STRING"),
    ("lower(s)", "STRING"),
    ("upper(trim(s))", "STRING"),
    ("ltrim(s)", "STRING"),
    ("length(s)", "INT"),
    ("coalesce(s, 'none')", "STRING"),
    ("coalesce(n, id)", "INT"),
    ("n > 0 AND b", "BOOLEAN"),
    ("n > 0 OR b", "BOOLEAN"),
    ("NOT b", "BOOLEAN"),
    ("n <=> 0", "BOOLEAN"),
    ("s IS NULL", "BOOLEAN"),
    ("x IS NOT NULL", "BOOLEAN"),
    ("id IN (1, 3, NULL)", "BOOLEAN"),
    ("n BETWEEN -10 AND 10", "BOOLEAN"),
    ("CASE WHEN n > 0 THEN 'pos' WHEN n < 0 THEN 'neg' ELSE 'zero' END", "STRING"),
    ("CASE id WHEN 1 THEN x WHEN 2 THEN n END", "DOUBLE"),
    ("if(b, id, -id)", "INT"),
    ("date_add(d, 1)", "DATE"),
    ("date_sub(d, id)", "DATE"),
    ("d + 1", "DATE"),
    ("datediff(d, CAST(ts AS DATE))", "INT"),
    ("d > '2000-01-01'", "BOOLEAN"),
]


@pytest.fixture
def los_angeles(spark: Any) -> Iterator[Any]:
    """The session time zone set to one with daylight saving time (the tests' session is UTC otherwise)."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def _evaluate_on_executors(spark: Any, expressions: list[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """Every expression evaluated by sparkonce's evaluator on executors, one column each, in one Spark job."""
    frame = spark.createDataFrame(ROWS, SCHEMA)
    trees = [parse_expression(expression) for expression, _ in expressions]
    names = ["id", *(f"c{i}" for i in range(len(expressions)))]

    def evaluate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from sparkonce.delta.table.expressions import Evaluator

        for batch in batches:
            evaluator = Evaluator(pa.Table.from_batches([batch]))
            values = [evaluator.evaluate(tree) for tree in trees]
            yield pa.RecordBatch.from_arrays([batch.column(0), *values], names=names)

    schema = ", ".join(["id INT", *(f"c{i} {t}" for i, (_, t) in enumerate(expressions))])
    return sorted(tuple(row) for row in frame.mapInArrow(evaluate, schema).collect())


def test_the_evaluator_computes_what_spark_computes(los_angeles: Any) -> None:
    """All expressions in one Spark job per side (Spark's ``F.expr`` / sparkonce's evaluator); every mismatch listed."""
    import pyspark.sql.functions as F

    spark = los_angeles
    expected_frame = spark.createDataFrame(ROWS, SCHEMA).select(
        "id", *(F.expr(expression).alias(f"c{i}") for i, (expression, _) in enumerate(EXPRESSIONS))
    )
    types = {f"c{i}": t.lower() for i, (_, t) in enumerate(EXPRESSIONS)}
    assert {f.name: f.dataType.simpleString() for f in expected_frame.schema.fields[1:]} == types
    expected = sorted(tuple(row) for row in expected_frame.collect())
    actual = _evaluate_on_executors(spark, EXPRESSIONS)
    assert [row[0] for row in actual] == [row[0] for row in expected]
    mismatches = [
        (
            expression,
            [(e[0], e[i + 1], a[i + 1]) for e, a in zip(expected, actual, strict=True) if e[i + 1] != a[i + 1]],
        )
        for i, (expression, _) in enumerate(EXPRESSIONS)
    ]
    assert [(expression, rows) for expression, rows in mismatches if rows] == []
    assert len(EXPRESSIONS) == len({expression for expression, _ in EXPRESSIONS}), "an expression listed twice"


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("md5(s)", "function MD5"),
        ("rand()", "function RAND"),
        ("x * 1.5", "decimal literal 1.5"),
        ("date_format(ts, 'EEE')", "pattern 'EEE'"),
        ("CAST(x AS STRING)", "CAST of a double value AS STRING"),
    ],
)
def test_an_expression_outside_the_subset_is_refused_on_zero_rows(expression: str, named: str) -> None:
    from sparkonce.delta.table.expressions import check_expression

    schema = pa.schema(
        [("id", pa.int32()), ("x", pa.float64()), ("s", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))]
    )
    with pytest.raises(UnsupportedFeatureError, match=named):
        check_expression(parse_expression(expression), schema)
