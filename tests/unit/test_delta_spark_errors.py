"""What delta-spark's Python tests check without a Spark session: Delta's errors that are PySpark exceptions too
(``AnalysisException``, ``UnsupportedOperationException``), Hadoop settings given to ``DeltaTable.forPath``, and
predicates as Delta records them for ``OPTIMIZE ... WHERE`` (Catalyst's unresolved ``toString``)."""

from __future__ import annotations

import pickle

import pytest
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.base import UnsupportedOperationException

from sparkonce.errors import SqlError, UnsupportedFeatureError, analysis_error, unsupported_operation_error
from sparkonce.sqltext.expression import catalyst_string, column_references, parse_expression
from sparkonce.storage import hadoop_storage_options


def test_analysis_error_is_a_sql_error_and_pysparks_analysis_exception() -> None:
    error = analysis_error("TABLE_OR_VIEW_NOT_FOUND", "The table or view `default`.`t` cannot be found.")
    assert isinstance(error, SqlError) and isinstance(error, AnalysisException)
    assert str(error) == "[TABLE_OR_VIEW_NOT_FOUND] The table or view `default`.`t` cannot be found."
    assert error.getCondition() == "TABLE_OR_VIEW_NOT_FOUND"
    with pytest.raises(AnalysisException, match="cannot be found"):
        raise error
    assert type(analysis_error("A", "x")) is type(error)  # one class, made once
    copy = pickle.loads(pickle.dumps(error))  # crosses processes as any error does
    assert type(copy) is type(error) and str(copy) == str(error)


def test_unsupported_operation_error_is_both() -> None:
    error = unsupported_operation_error("DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE", "DataType integer ...")
    assert isinstance(error, UnsupportedFeatureError) and isinstance(error, UnsupportedOperationException)
    assert str(error).startswith("[DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE] DataType integer")


def test_hadoop_settings_split_into_storage_options_and_ignored() -> None:
    mapped, ignored = hadoop_storage_options(
        {
            "fs.fake.impl": "org.apache.spark.sql.delta.FakeFileSystem",
            "fs.fake.impl.disable.cache": "true",
            "fs.s3a.access.key": "k",
            "FS.S3A.ENDPOINT": "http://localhost:8333",
            "fs.azure.account.key.acct.dfs.core.windows.net": "secret",
        }
    )
    assert mapped == {
        "fs.s3a.access.key": "AWS_ACCESS_KEY_ID",
        "FS.S3A.ENDPOINT": "AWS_ENDPOINT_URL",
        "fs.azure.account.key.acct.dfs.core.windows.net": "AZURE_STORAGE_ACCOUNT_KEY",
    }
    assert ignored == ["fs.fake.impl", "fs.fake.impl.disable.cache"]


@pytest.mark.parametrize(
    ("predicate", "recorded", "columns"),
    [
        ("key = 'a'", "('key = a)", ["key"]),  # delta-spark's test_optimize_w_partition_filter
        ("p IN (1, 2)", "'p IN (1,2)", ["p"]),
        ("p NOT IN ('x')", "NOT 'p IN (x)", ["p"]),
        ("d IS NULL", "isnull('d)", ["d"]),
        ("d IS NOT NULL AND p >= 3", "(isnotnull('d) AND ('p >= 3))", ["d", "p"]),
        ("a <> 1 OR b = TRUE", "(NOT ('a = 1) OR ('b = true))", ["a", "b"]),
        ("CAST(p AS INTEGER) = 2", "(cast('p as int) = 2)", ["p"]),
    ],
)
def test_predicates_as_delta_records_them(predicate: str, recorded: str, columns: list[str]) -> None:
    expr = parse_expression(predicate)
    assert catalyst_string(expr) == recorded
    assert column_references(expr) == columns
