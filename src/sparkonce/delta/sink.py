"""The streaming sink: ``df.writeStream.format("delta").option("checkpointLocation", ck).start(path)``.

Each micro-batch: executors write data files (``write``); the driver makes ONE Delta commit carrying all of them
and ``txn(appId = query id, version = batch id)`` (``commit``). The query id is read from the checkpoint's
``metadata`` file. A replayed batch (Spark re-runs batch N when ``offsets/N`` exists without ``commits/N``) whose
txn is already in the table is skipped, so a crash between the Delta commit and the checkpoint commit never
duplicates data. The commit also records the batch's ``offsets/N`` so a lost checkpoint can be rebuilt. With auto
compaction on (``delta.autoOptimize.autoCompact``), the commit is followed by an OPTIMIZE commit of the partitions
the batch wrote to when they hold enough small files (:mod:`sparkonce.delta.ops.auto_compact`); its failure never
fails the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sparkonce._types import BatchId
from sparkonce.checkpoint.fs import is_local_checkpoint
from sparkonce.checkpoint.query import read_offsets_text, read_query_id
from sparkonce.checkpoint.sdp import earlier_generations
from sparkonce.checkpoint.tables import RecordedTable, record_tables
from sparkonce.crash import crash_point
from sparkonce.delta.log.log_entry import commit_metadata
from sparkonce.delta.log.table_view import LogTable, current_table, existing_table
from sparkonce.delta.ops.auto_compact import (
    AUTO_COMPACT_PROPERTY,
    OPTIMIZE_WRITE_CONF,
    AutoCompactSettings,
    compact_after_commit,
    optimize_write_requested,
)
from sparkonce.delta.table.constraints import CheckConstraints
from sparkonce.delta.table.generated import GeneratedColumns
from sparkonce.delta.table.identity import IdentityPlan, plan_identity
from sparkonce.delta.table.options import WriteOptions
from sparkonce.delta.table.schema import arrow_schema_for_spark, delta_fields, table_fields
from sparkonce.delta.table.skipping import top_level_stats_columns
from sparkonce.delta.txn.commit import BatchTxn, CommitMode, commit_files, table_exists
from sparkonce.delta.write.files import FileWriterOptions
from sparkonce.delta.writer import (
    DeltaFilesMessage,
    abort_write,
    check_new_table,
    check_partition_columns,
    check_target,
    collect_files,
    files_schema,
    new_table_mapping,
    refuse_nested_geo,
    target_mapping,
    write_task,
    written_after,
)
from sparkonce.errors import OptionError, SinkError
from sparkonce.storage import checkpoint_path

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

_WARNED: set[str] = set()
"""Tables whose optimized-write warning this process has logged."""


class DeltaStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink: created on the driver, ``write`` on executors, ``commit``/``abort`` on the driver."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if options.checkpoint_location is None:
            raise OptionError(
                "checkpointLocation",
                None,
                "is required by the Delta streaming sink: the query id in <checkpointLocation>/metadata is the "
                "app id of the txn that makes each batch idempotent",
            )
        if options.txn_app_id is not None:
            raise OptionError("txnAppId", options.txn_app_id, "is for batch writes; a stream uses its query id")
        if is_local_checkpoint(options.checkpoint_location):
            checkpoint_path(options.checkpoint_location)  # a malformed file: URI fails here, before any data
        elif options.checkpoint_query_id is None:
            # The commit runs in a Python worker, which has no JVM to reach Hadoop's file systems: the query id of a
            # non-local checkpoint comes from the driver's start() (sparkonce's writeStream shim).
            raise OptionError(
                "checkpointLocation",
                options.checkpoint_location,
                "is not a local path, and the query was not started through writeStream...start() in a session "
                "where sparkonce is registered (sparkonce.register(spark)), which reads the query id of a "
                "Hadoop-file-system checkpoint (hdfs://, s3a://, abfss://, dbfs:, ...) for the sink; start it that "
                "way, or use a local or shared-mount checkpoint directory",
            )
        self.options = options
        self.arrow_schema = arrow_schema_for_spark(schema)
        self.mode: CommitMode = "overwrite" if overwrite else "append"
        self.output_mode = "Complete" if overwrite else "Append"
        self.file_options = FileWriterOptions(
            location=options.location,
            partition_by=options.partition_by,
            max_records_per_file=options.max_records_per_file,
            compression=options.compression,
        )
        self._snapshot: LogTable | None = None
        self.identity: IdentityPlan | None = None
        self.table_configuration: dict[str, str] = options.new_table_properties()
        """The table's properties (those of the table the first batch creates when there is none yet)."""
        self._check_table()
        self.compaction = AutoCompactSettings.from_conf(dict(options.session_conf))
        if optimize_write_requested(self.compaction, self.table_configuration) and options.path not in _WARNED:
            _WARNED.add(options.path)  # once per process: Spark builds the writer again for every batch
            log.warning(
                "%s: optimized writes (delta.autoOptimize.optimizeWrite / %s) are not done by sparkonce's sink: a "
                "Python data source cannot ask Spark to shuffle rows by partition before the write. Each task "
                "writes one file per partition value it holds; turn on auto compaction (%s) or repartition by "
                "the partition columns before writeStream for fewer files",
                options.path,
                OPTIMIZE_WRITE_CONF,
                AUTO_COMPACT_PROPERTY,
            )
        self.auto_compact = self.compaction.enabled_for(self.table_configuration)
        """Compact the small files of the partitions the batch wrote to after its commit
        (:mod:`sparkonce.delta.ops.auto_compact`): the session conf when the query started, else the table property."""

    def _check_table(self) -> None:
        """Fail before the first batch when the data cannot go into the existing table.

        Spark builds the writer on the driver when the query starts and again for every batch (in a planner process
        and in its commit process, which live as long as the query): the table read here is kept for that
        batch's commit (never pickled to executors). It comes from the snapshot the process keeps between batches,
        brought up to date by reading only the commits since (:func:`sparkonce.delta.log.table_view.current_table`).
        """
        check_partition_columns(self.options, self.arrow_schema)
        refuse_nested_geo(delta_fields(self.arrow_schema), self.options.path)
        self.options.location.check_commit_safety()
        new_table_stats = top_level_stats_columns(
            delta_fields(self.arrow_schema), self.options.partition_by, self.table_configuration
        )
        if not self.options.location.check_reachable(for_write=True):
            self.file_options.generated = check_new_table(self.options, self.arrow_schema)
            self.file_options.column_mapping = new_table_mapping(self.options, self.arrow_schema)
            self.file_options.stats_columns = new_table_stats
        else:
            table = current_table(self.options.location)
            if table is None:  # a _delta_log without commits yet: the first batch creates the table
                self.file_options.generated = check_new_table(self.options, self.arrow_schema)
                self.file_options.column_mapping = new_table_mapping(self.options, self.arrow_schema)
                self.file_options.stats_columns = new_table_stats
                return
            self.file_options.partition_by = check_target(table, self.options, self.arrow_schema, stream=True)
            files = files_schema(table, self.options, self.arrow_schema, stream=True)
            if files != self.arrow_schema:  # the table's types where Delta's sink casts the data to them
                self.file_options.cast_schema = files
                self.arrow_schema = files
            self.file_options.column_mapping = target_mapping(table, self.options, self.arrow_schema)
            self.identity = plan_identity(table_fields(table), self.arrow_schema, table=self.options.path)
            self.file_options.identity = self.identity.fills if self.identity is not None else ()
            self.file_options.generated = GeneratedColumns.of(table, shown=self.options.path)
            self.file_options.constraints = CheckConstraints.of(table, shown=self.options.path)
            self.file_options.written_after = table.version()
            self.table_configuration = {k: str(v) for k, v in table.metadata().configuration.items() if v is not None}
            self.file_options.stats_columns = top_level_stats_columns(
                table_fields(table), self.file_options.partition_by, self.table_configuration
            )
            self._snapshot = table

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_snapshot"] = None  # the table's snapshot stays in the driver process that read it
        return state

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaFilesMessage:  # executor
        return write_task(self.file_options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # driver
        assert self.options.checkpoint_location is not None
        batch_id = BatchId(batchId)
        location = self.options.checkpoint_location
        local = is_local_checkpoint(location)
        query_id = self.options.checkpoint_query_id or read_query_id(location)
        if local:  # a Hadoop-file-system checkpoint is recorded by the driver's start() (the shim)
            record_tables(location, [RecordedTable("sink", "delta", str(self.options.location))])
        files = collect_files(messages)
        metadata = streaming_update_metadata(
            location, query_id, batch_id, output_mode=self.output_mode, user_metadata=self.options.user_metadata
        )
        result = commit_files(
            self.options.location,
            files,
            data_schema=self.arrow_schema,
            partition_by=self.file_options.partition_by,
            mode=self._commit_mode(query_id, batch_id),
            txn=BatchTxn(query_id, batch_id),
            merge_schema=self.options.merge_schema,
            custom_metadata=metadata,
            snapshot=self._take_snapshot(),
            written_after=written_after(messages),
            new_table_properties=self.options.new_table_properties(),
            identity=self.identity,
            checkpoint_part_size=self.options.checkpoint_part_size,
        )
        if result.skipped:
            log.info("batch %s of query %s was already in %s: skipped", batch_id, query_id, self.options.path)
        crash_point("after_delta_commit", batch_id)
        if self.auto_compact and not result.skipped:
            compact_after_commit(self.options.location, files, self.compaction)

    def _take_snapshot(self) -> LogTable | None:
        """The table as :meth:`_check_table` loaded it, once (a writer commits one batch; a second commit loads)."""
        snapshot, self._snapshot = self._snapshot, None
        return snapshot

    def _commit_mode(self, query_id: str, batch_id: int) -> CommitMode:
        """The sink's mode, or ``overwrite`` for the first batch of an SDP full refresh with ``fullRefresh=truncate``.

        A full refresh restarts an SDP flow on a new checkpoint generation under a new query id: the table's txn
        cannot recognise the rows the earlier generation wrote, so appending would write them twice.

        Raises:
            SinkError: an earlier generation wrote the table and ``fullRefresh`` is ``fail`` (the default).
        """
        assert self.options.checkpoint_location is not None
        if not is_local_checkpoint(self.options.checkpoint_location):
            return self.mode  # SDP runs its flows without sparkonce's start(): such a sink refuses at its creation
        checkpoint_dir = Path(checkpoint_path(self.options.checkpoint_location))
        earlier = earlier_generations(checkpoint_dir)
        if not earlier or not table_exists(self.options.location):
            return self.mode
        table = existing_table(self.options.location)
        if table.transaction_version(query_id) is not None:
            return self.mode  # this generation already committed (its truncation included)
        writers = [g for g in earlier if g.query_id and table.transaction_version(g.query_id) is not None]
        if not writers:
            return self.mode
        previous = writers[-1]
        if self.options.full_refresh == "truncate":
            log.warning(
                "full refresh: batch %s of query %s (checkpoint generation %s) replaces the contents of %s "
                "written by generation %s (query %s) at table_version %s",
                batch_id,
                query_id,
                checkpoint_dir.name,
                self.options.path,
                previous.generation,
                previous.query_id,
                table.version(),
            )
            return "overwrite"
        raise SinkError(
            f"the Delta sink {self.options.path} was written by the Spark Declarative Pipelines flow checkpoint "
            f"{previous.checkpoint_dir} (query id {previous.query_id}), and {checkpoint_dir} is a new checkpoint "
            f"generation (a full refresh) under query id {query_id} that reads its sources from the start again: "
            "appending would write every row twice. Set the sink option fullRefresh to 'truncate' to replace the "
            "table's contents with the refreshed flow's output, or empty the table yourself; nothing was written"
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # driver
        """Spark aborts a batch whose tasks or commit failed: even a commit that failed after its Delta commit
        landed (the commit process died): only files no Delta commit names are deleted."""
        abort_write(self.file_options, messages, purpose=f"aborted batch {batchId} to {self.options.path}")


def streaming_update_metadata(
    checkpoint_dir: str, query_id: str, batch_id: BatchId, *, output_mode: str, user_metadata: str | None
) -> dict[str, Any]:
    """The ``commitInfo`` of a streaming batch's Delta commit: Delta's ``STREAMING UPDATE`` with the query and
    epoch, and sparkonce's batch id, checkpoint and ``offsets/N`` (what a checkpoint rebuild reads). Runs on the
    driver. ``offsets/N`` of a Hadoop-file-system checkpoint is out of a Python process's reach: not recorded (a
    rebuild from the table then says so); everything else about the commit is the same."""
    local = is_local_checkpoint(checkpoint_dir)
    return commit_metadata(
        "STREAMING UPDATE",
        {"outputMode": output_mode, "queryId": query_id, "epochId": str(batch_id)},
        user_metadata,
        batchId=batch_id,
        checkpointLocation=checkpoint_path(checkpoint_dir) if local else checkpoint_dir,
        offsetsLog=read_offsets_text(checkpoint_dir, batch_id) if local else None,
    )


__all__ = ["DeltaStreamWriter", "streaming_update_metadata"]
