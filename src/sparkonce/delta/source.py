"""The Delta Lake data source for PySpark: ``format("delta")`` and ``format("sparkonce.delta")``.

Created by Spark on the driver for every read or write; it parses options once and hands out the batch reader,
batch writer, streaming sink and streaming source. Options: see ``docs/delta.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from sparkonce.delta.table.options import ReadOptions, StreamReadOptions, WriteOptions


class DeltaDataSource(DataSource):
    """Delta Lake tables through delta-rs; exactly-once streaming commits with Delta ``txn`` actions.

    Spark creates it in a Python worker (driver machine) for every read or write. ``session_storage_options``
    are the ``spark.sparkonce.storage.*`` entries ``sparkonce.register`` found: register ships them inside the
    class itself (see :func:`with_session_storage`), because these workers do not see the session's conf.
    """

    session_storage_options: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        from sparkonce.storage import STORAGE_OPTION_PREFIX

        for name, value in self.session_storage_options:  # an explicit .option("storage.<NAME>") wins
            key = STORAGE_OPTION_PREFIX + name
            if key not in self.options:
                self.options[key] = value

    @classmethod
    def name(cls) -> str:
        return "delta"

    def schema(self) -> StructType:  # driver, for reads
        from sparkonce.delta.read.changes import change_feed_table_schema, is_change_feed_read
        from sparkonce.delta.read.reader import check_reader_features, scan_schema
        from sparkonce.delta.table.options import table_path
        from sparkonce.delta.table.schema import spark_schema
        from sparkonce.delta.txn.commit import load_table

        if not _is_batch_read(self.options):
            from sparkonce.delta.read.changes import change_feed_schema
            from sparkonce.delta.read.stream import tracked_schema
            from sparkonce.delta.table.schema_log import tracking_root

            tracked = tracked_schema(self.options) if tracking_root(self.options) is not None else None
            if tracked is not None:  # schema tracking: the schema log's newest entry (Delta's sourceSchema)
                return change_feed_schema(tracked) if is_change_feed_read(self.options) else tracked
        if is_change_feed_read(self.options):
            return change_feed_table_schema(self.options)
        path = table_path(self.options)
        options = ReadOptions.parse(self.options) if _is_batch_read(self.options) else None
        if options is not None:
            from sparkonce.delta.read.reader import open_snapshot

            table = open_snapshot(options)
        else:
            from sparkonce.storage import storage_options_from, table_location

            table = load_table(table_location(path, storage_options=storage_options_from(self.options)))
            check_reader_features(table, path)
        return spark_schema(scan_schema(table, metadata_column=options is not None and options.metadata_column).output)

    def reader(self, schema: StructType) -> DataSourceReader:
        from sparkonce.delta.read.changes import ChangeFeedOptions, ChangeFeedReader, is_change_feed_read
        from sparkonce.delta.read.reader import DeltaBatchReader

        if is_change_feed_read(self.options):
            return ChangeFeedReader(ChangeFeedOptions.parse(self.options), schema)
        return DeltaBatchReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sparkonce.delta.writer import DeltaBatchWriter

        return DeltaBatchWriter(WriteOptions.parse(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sparkonce.delta.sink import DeltaStreamWriter

        return DeltaStreamWriter(WriteOptions.parse(self.options), schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from sparkonce.delta.read.changes import is_change_feed_read
        from sparkonce.delta.read.stream import DeltaStreamReader
        from sparkonce.delta.table.options import METADATA_COLUMN_OPTION
        from sparkonce.errors import OptionError
        from sparkonce.options import lookup

        if lookup(self.options, METADATA_COLUMN_OPTION) is not None:
            raise OptionError(
                METADATA_COLUMN_OPTION, lookup(self.options, METADATA_COLUMN_OPTION), "is for batch reads"
            )

        if is_change_feed_read(self.options):
            from sparkonce.delta.read.change_stream import ChangeFeedStreamReader

            return ChangeFeedStreamReader(StreamReadOptions.parse(self.options), schema)
        return DeltaStreamReader(StreamReadOptions.parse(self.options), schema)


class SparkonceDeltaDataSource(DeltaDataSource):
    """The same source under a name that never collides with the Delta JVM connector."""

    @classmethod
    def name(cls) -> str:
        return "sparkonce.delta"


def with_session_storage(source: type[DeltaDataSource], options: Mapping[str, str]) -> type[DeltaDataSource]:
    """``source``, or a subclass of it carrying ``options`` as its session storage options. Runs on the driver.

    The subclass is made here, not importable by name, so cloudpickle ships it by value, with the options,
    to the Python workers where Spark plans reads and writes (classic PySpark and Spark Connect alike).
    """
    if not options:
        return source
    carried = tuple(sorted((str(k), str(v)) for k, v in options.items()))
    attributes = {
        "__module__": source.__module__,
        "__qualname__": f"{source.__qualname__}_with_session_storage",
        "__doc__": source.__doc__,
        "session_storage_options": carried,
    }
    return type(source.__name__, (source,), attributes)


def _is_batch_read(options: Mapping[str, str]) -> bool:
    """True when the options ask for what only batch reads take (time travel, the ``_metadata`` column)."""
    from sparkonce.delta.table.options import METADATA_COLUMN_OPTION
    from sparkonce.options import lookup

    return any(lookup(options, key) is not None for key in ("versionAsOf", "timestampAsOf", METADATA_COLUMN_OPTION))


__all__ = ["DeltaDataSource", "SparkonceDeltaDataSource"]
