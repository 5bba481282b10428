"""Delta CHECK constraints: ``ALTER TABLE ... ADD / DROP CONSTRAINT`` through ``spark.sql``, checked against the
table's rows when added, enforced by every writer (Delta's message, nothing committed); the log read back with
delta-rs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PythonException

from sparkonce.delta.tables import DeltaTable
from sparkonce.errors import SqlError, UnsupportedFeatureError

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, amount BIGINT"


def _rs(path: Path) -> Any:
    from deltalake import DeltaTable as RsTable

    return RsTable(str(path))


def _append(spark: Any, path: Path, rows: list[tuple]) -> None:
    spark.createDataFrame(rows, SCHEMA).write.format("delta").mode("append").save(str(path))


def _amounts(path: Path) -> list[tuple]:
    return sorted((r["id"], r["amount"]) for r in _rs(path).to_pyarrow_table().to_pylist())


def _commit_info(path: Path, table_version: int) -> dict:
    lines = (path / "_delta_log" / f"{table_version:020d}.json").read_text().splitlines()
    return next(json.loads(line)["commitInfo"] for line in lines if "commitInfo" in line)


def _table(spark: Any, tmp_path: Path) -> Path:
    path = tmp_path / "t"
    _append(spark, path, [(1, 5), (2, 0)])
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT Amount_NonNeg CHECK (amount >= 0)")
    return path


def test_add_constraint_commits_the_property_and_the_protocol(spark: Any, tmp_path: Path) -> None:
    path = _table(spark, tmp_path)
    table = _rs(path)
    assert table.metadata().configuration == {"delta.constraints.amount_nonneg": "amount >= 0"}
    assert table.protocol().min_writer_version == 3
    info = _commit_info(path, table.version())
    assert (info["operation"], info["operationParameters"]) == (
        "ADD CONSTRAINT",
        {"name": "amount_nonneg", "expr": "amount >= 0"},
    )


def test_rows_that_violate_a_constraint_fail_the_write(spark: Any, tmp_path: Path) -> None:
    path = _table(spark, tmp_path)
    before = _rs(path).version()
    with pytest.raises(
        PythonException,
        match=r"ConstraintViolationError: \[DELTA_VIOLATE_CONSTRAINT_WITH_VALUES\] CHECK constraint amount_nonneg "
        r"\(amount >= 0\) violated by row with values:\n - amount : -1",
    ):
        _append(spark, path, [(3, 1), (4, -1)])
    with pytest.raises(
        PythonException, match=r"amount_nonneg \(amount >= 0\) violated by row with values:\n - amount : null"
    ):
        _append(spark, path, [(5, None)])
    assert _rs(path).version() == before
    assert _amounts(path) == [(1, 5), (2, 0)]


def test_update_and_merge_are_checked(spark: Any, tmp_path: Path) -> None:
    path = _table(spark, tmp_path)
    before = _rs(path).version()
    table = DeltaTable.forPath(spark, str(path))
    with pytest.raises(PythonException, match="DELTA_VIOLATE_CONSTRAINT_WITH_VALUES"):
        table.update("id = 1", {"amount": "-10"})
    source = spark.createDataFrame([(9, -9)], SCHEMA)
    with pytest.raises(PythonException, match="DELTA_VIOLATE_CONSTRAINT_WITH_VALUES"):
        table.alias("t").merge(source.alias("s"), "t.id = s.id").whenNotMatchedInsertAll().execute()
    assert _rs(path).version() == before
    table.update("id = 1", {"amount": "amount + 1"})
    assert _amounts(path) == [(1, 6), (2, 0)]


def test_adding_a_constraint_that_rows_violate_fails(spark: Any, tmp_path: Path) -> None:
    path = _table(spark, tmp_path)
    before = _rs(path).version()
    with pytest.raises(
        SqlError,
        match=rf"\[DELTA_NEW_CHECK_CONSTRAINT_VIOLATION\] 1 rows in delta.`{path}` violate the new CHECK constraint "
        r"\(amount > 0\)",
    ):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT positive CHECK (amount > 0)")
    with pytest.raises(SqlError, match=r"\[DELTA_CONSTRAINT_ALREADY_EXISTS\] Constraint 'amount_nonneg' already"):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT amount_nonneg CHECK (amount < 100)")
    with pytest.raises(UnsupportedFeatureError, match=r"CHECK constraint h .*function MD5"):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT h CHECK (md5(CAST(id AS STRING)) <> '')")
    with pytest.raises(SqlError, match=r"\[DELTA_NON_BOOLEAN_CHECK_CONSTRAINT\] CHECK constraint 'n' \(amount \+ 1\)"):
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT n CHECK (amount + 1)")
    assert _rs(path).version() == before


def test_drop_constraint_lets_the_rows_in(spark: Any, tmp_path: Path) -> None:
    path = _table(spark, tmp_path)
    spark.sql(f"ALTER TABLE delta.`{path}` DROP CONSTRAINT amount_nonneg")
    table = _rs(path)
    assert table.metadata().configuration == {}
    info = _commit_info(path, table.version())
    assert (info["operation"], info["operationParameters"]) == (
        "DROP CONSTRAINT",
        {"name": "amount_nonneg", "expr": "amount >= 0"},
    )
    _append(spark, path, [(3, -1)])
    assert _amounts(path) == [(1, 5), (2, 0), (3, -1)]
    with pytest.raises(
        SqlError, match=r"\[DELTA_CONSTRAINT_DOES_NOT_EXIST\] Cannot drop nonexistent constraint amount"
    ):
        spark.sql(f"ALTER TABLE delta.`{path}` DROP CONSTRAINT amount_nonneg")
    version = _rs(path).version()
    spark.sql(f"ALTER TABLE delta.`{path}` DROP CONSTRAINT IF EXISTS amount_nonneg")
    assert _rs(path).version() == version


def test_delta_rs_honours_a_constraint_sparkonce_added(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake
    from deltalake.exceptions import DeltaError

    path = _table(spark, tmp_path)
    with pytest.raises(DeltaError, match="failed validation check"):
        write_deltalake(
            str(path), pa.table({"id": pa.array([9], pa.int64()), "amount": pa.array([-9], pa.int64())}), mode="append"
        )
    assert _amounts(path) == [(1, 5), (2, 0)]


def test_a_stream_batch_that_violates_a_constraint_fails_the_query(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    path = _table(spark, tmp_path)
    before = _rs(path).version()
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "0.json").write_text('{"id": 3, "amount": 1}\n{"id": 4, "amount": -4}\n')
    query = (
        spark.readStream.format("json")
        .schema(SCHEMA)
        .load(str(inputs))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(path))
    )
    with pytest.raises(StreamingQueryException, match=r"CHECK constraint amount_nonneg \(amount >= 0\) violated"):
        query.awaitTermination()
    assert _rs(path).version() == before
    assert _amounts(path) == [(1, 5), (2, 0)]


def test_a_write_between_the_check_and_the_commit_is_delta_sparks_concurrent_write(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADD CONSTRAINT checks the rows of the table version it read; a delta-rs append that commits after that check
    and before the constraint's commit (forced there by running it just before the commit step) makes the
    statement fail with Delta's ``ConcurrentWriteException``, caught under delta-spark's name, and nothing of it is
    committed."""
    import pyarrow as pa
    from deltalake import write_deltalake

    import sparkonce.delta.ops.alter as alter
    from sparkonce.delta.exceptions import ConcurrentWriteException, DeltaConcurrentModificationException

    path = tmp_path / "t"
    _append(spark, path, [(1, 5)])
    commit_configuration = alter.commit_configuration

    def after_a_concurrent_append(*args: Any, **kwargs: Any) -> Any:
        rows = pa.table({"id": pa.array([2], pa.int64()), "amount": pa.array([-1], pa.int64())})
        write_deltalake(str(path), rows, mode="append")  # a row the constraint's check never saw
        return commit_configuration(*args, **kwargs)

    monkeypatch.setattr(alter, "commit_configuration", after_a_concurrent_append)
    with pytest.raises(
        ConcurrentWriteException, match=r"^\[DELTA_CONCURRENT_WRITE\] ADD CONSTRAINT pos on .*table_version 1\) while"
    ) as conflict:
        spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT pos CHECK (amount >= 0)")
    assert isinstance(conflict.value, DeltaConcurrentModificationException)
    assert _rs(path).version() == 1 and _rs(path).metadata().configuration == {}
