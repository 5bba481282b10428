"""Change data feed, write side: the ``_change_data/`` files a commit that changes rows records as ``cdc`` actions.

With ``delta.enableChangeDataFeed = true`` in the table's ``metaData.configuration``, Delta (PROTOCOL.md, "Change
Data Files"; ``CDCReader``) reads the changes of one commit from its ``cdc`` files when it has any, else from its
``add`` files (``dataChange = true``) as ``insert`` rows and its ``remove`` files as ``delete`` rows. So:

* a plain append needs no change data (its ``add`` files are the inserts), and neither does an overwrite nor a
  DELETE that removes whole files without rewriting any (the ``remove`` files are the deletes), as with Delta;
* a commit that rewrites files (DELETE, UPDATE, MERGE) must record EVERY row it changes in change data files,
  because the copied rows of its new files are no change: ``delete`` rows for deleted rows, ``update_preimage`` +
  ``update_postimage`` for updated rows, ``insert`` for inserted rows.

Change data files hold the table's columns (partition columns in the folder names, physical names under column
mapping, as data files) plus :data:`CHANGE_TYPE_COLUMN`; executors write them next to the data files, under
``_change_data/``, and the driver commits them with the data files in ONE Delta commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from sparkonce.delta.log.log_entry import WrittenFile
from sparkonce.delta.table.properties import enabled
from sparkonce.delta.write.files import WRITTEN_FILES_DDL, FileWriterOptions, write_task, written_files

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from sparkonce.delta.table.column_mapping import ColumnMapping
    from sparkonce.storage import TableLocation

ChangeType = Literal["insert", "delete", "update_preimage", "update_postimage"]

CDF_PROPERTY = "delta.enableChangeDataFeed"
CHANGE_TYPE_COLUMN = "_change_type"
COMMIT_VERSION_COLUMN = "_commit_version"
COMMIT_TIMESTAMP_COLUMN = "_commit_timestamp"
CHANGE_DATA_DIR = "_change_data"
"""The folder under the table root that holds change data files, as Delta names it."""


def cdf_enabled(configuration: Mapping[str, str | None]) -> bool:
    """True when the table properties turn the change data feed on. Runs on the driver."""
    return enabled({k: v for k, v in configuration.items() if v is not None}, CDF_PROPERTY)


def with_change_type(rows: DataFrame, columns: Sequence[str], change_type: ChangeType | Column) -> DataFrame:
    """``rows`` as change rows: ``columns`` (the table's, in order) plus :data:`CHANGE_TYPE_COLUMN`. Runs on the
    driver (plans only)."""
    import pyspark.sql.functions as F

    kind = F.lit(change_type) if isinstance(change_type, str) else change_type
    return rows.select(*[F.col(f"`{c}`") for c in columns], kind.cast("string").alias(CHANGE_TYPE_COLUMN))


def write_change_data(
    changes: DataFrame,
    location: TableLocation,
    partition_by: Sequence[str],
    *,
    column_mapping: ColumnMapping | None = None,
) -> list[WrittenFile]:
    """Write change rows (table columns + :data:`CHANGE_TYPE_COLUMN`) into ``_change_data/`` files of the table
    (on executors); return them for the Delta commit's ``cdc`` actions. Nothing is visible before the commit.
    Runs on the driver; the rows never leave the executors."""
    options = FileWriterOptions(
        location=location,
        partition_by=tuple(partition_by),
        file_prefix="cdc",
        directory=CHANGE_DATA_DIR,
        column_mapping=column_mapping,
    )

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from write_task(batches, options)

    return written_files(changes.mapInArrow(write, WRITTEN_FILES_DDL).collect())


__all__ = [
    "CDF_PROPERTY",
    "CHANGE_DATA_DIR",
    "CHANGE_TYPE_COLUMN",
    "COMMIT_TIMESTAMP_COLUMN",
    "COMMIT_VERSION_COLUMN",
    "ChangeType",
    "cdf_enabled",
    "with_change_type",
    "write_change_data",
]
