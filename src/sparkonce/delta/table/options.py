"""Options of the Delta data source, parsed once into frozen dataclasses. Runs on the driver."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sparkonce.delta.log.interval import parse_interval_ms
from sparkonce.delta.table.clustering import parse_option as parse_clustering
from sparkonce.delta.table.properties import session_defaults, table_properties
from sparkonce.delta.table.schema_log import SOURCE_TRACKING_ID_OPTION, tracking_root
from sparkonce.errors import DeltaLogError, OptionError
from sparkonce.options import get_bool, get_bytes, get_choice, get_int, get_json, get_str, lookup
from sparkonce.storage import TableLocation, storage_options_from, table_location

SaveMode = Literal["append", "overwrite", "error", "ignore"]
FullRefresh = Literal["fail", "truncate"]
PartitionOverwriteMode = Literal["static", "dynamic"]
REPLACE_WHERE_OPTION = "replaceWhere"
PARTITION_OVERWRITE_MODE_OPTION = "partitionOverwriteMode"
SAVE_MODE_OPTION = "sparkonce.saveMode"
TABLE_DEFAULTS_OPTION = "__sparkonce_table_defaults"
"""Set by the writer shims (``patches``): the session's ``spark.databricks.delta.properties.defaults.*`` as JSON."""
SESSION_CONF_OPTION = "__sparkonce_session_conf"
"""Set by the writer shims (``patches``): the session's auto compaction / optimized write confs
(:data:`sparkonce.delta.ops.auto_compact.SESSION_CONFS`) as JSON."""
PARTITION_BY_OPTION = "partitionBy"
METADATA_COLUMN_OPTION = "metadataColumn"
COMPAT_PARTITION_OPTION = "__sparkonce_partition_by"
CHECKPOINT_QUERY_ID_OPTION = "__sparkonce_checkpoint_query_id"
"""Set by the ``start()`` shim (``patches``) for a non-local checkpoint: its query id, read (or written) by the
driver through Hadoop's file system, since the sink's commit runs in a Python worker that has no JVM."""
TABLE_PROPERTIES_OPTION = "__sparkonce_table_properties"
"""Set by :func:`sparkonce.delta.ops.create.create_table` (``CREATE``/``REPLACE TABLE``, delta-spark's builders): the
whole ``metaData.configuration`` of the table the write creates or replaces, as a JSON object: Delta's checked
``delta.*`` properties and the user's own keys (which a plain write option could not carry)."""
CHECKPOINT_PART_SIZE_CONF = "spark.databricks.delta.checkpoint.partSize"
CHECKPOINT_PART_SIZE_OPTION = "__sparkonce_checkpoint_part_size"
"""Set by the writer shims (``patches``): the session's ``spark.databricks.delta.checkpoint.partSize``."""


def table_path(options: Mapping[str, str]) -> str:
    path = get_str(options, "path")
    if path is None:
        raise OptionError("path", None, "is required: pass the table location to load()/save()/start()")
    return path


def partition_columns(options: Mapping[str, str]) -> tuple[str, ...]:
    """``partitionBy`` as a JSON list or comma-separated names (the DataFrameWriter.partitionBy shim sets it)."""
    for name in (COMPAT_PARTITION_OPTION, PARTITION_BY_OPTION):
        raw = lookup(options, name)
        if raw is None:
            continue
        text = raw.strip()
        if text.startswith("["):
            value = get_json(options, name)
            if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
                raise OptionError(name, raw, "must be a JSON list of column names")
            return tuple(value)
        columns = tuple(c.strip() for c in text.split(",") if c.strip())
        if not columns:
            raise OptionError(name, raw, "must name at least one column")
        return columns
    return ()


MAX_CATCH_UP_DELAY_OPTION = "maxCatchUpDelay"
"""The Delta stream option :attr:`StreamReadOptions.max_catch_up_delay_ms` is read from."""


@dataclass(frozen=True)
class WriteOptions:
    """Options of batch and streaming writes."""

    path: str
    """The table location as the user gave it (for messages)."""
    location: TableLocation
    partition_by: tuple[str, ...]
    merge_schema: bool
    overwrite_schema: bool
    txn_app_id: str | None
    txn_version: int | None
    max_records_per_file: int | None
    compression: str
    user_metadata: str | None
    save_mode: SaveMode | None
    checkpoint_location: str | None
    full_refresh: FullRefresh = "fail"
    """Streaming sink under Spark Declarative Pipelines: what the first batch of a flow's new checkpoint
    generation does to a table an earlier generation wrote (``docs/sdp.md``)."""
    table_properties: tuple[tuple[str, str], ...] = ()
    """The writer's ``delta.*`` options (canonical keys): properties of a table the write creates; an existing
    table must already have them."""
    session_table_defaults: tuple[tuple[str, str], ...] = ()
    """The session's ``spark.databricks.delta.properties.defaults.*`` as ``delta.*`` keys: for new tables only."""
    declared_properties: tuple[tuple[str, str], ...] | None = None
    """:data:`TABLE_PROPERTIES_OPTION`: the configuration of the table a ``CREATE``/``REPLACE TABLE`` makes; with
    ``overwriteSchema`` it replaces the table's configuration, as Delta's ``REPLACE`` does. None for other writes."""
    description: str | None = None
    """The ``description`` option (delta-rs's name): the comment of a table this write creates or replaces
    (``overwriteSchema``)."""

    identity_tasks: int | None = None
    """The write's number of tasks, for Delta's identity value rule
    (:data:`sparkonce.delta.table.identity.TASKS_OPTION`)."""
    cluster_by: tuple[str, ...] = ()
    """The clustering columns of a table this write creates (:mod:`sparkonce.delta.table.clustering`)."""
    checkpoint_query_id: str | None = None
    """The query id of a non-local checkpoint, handed over by the driver (:data:`CHECKPOINT_QUERY_ID_OPTION`)."""
    checkpoint_part_size: int | None = None
    """The most actions per file of a Delta log checkpoint this write's commit makes (Delta's
    ``spark.databricks.delta.checkpoint.partSize``); None: single-file checkpoints."""
    session_conf: tuple[tuple[str, str], ...] = ()
    """The session's auto compaction / optimized write confs when the write started, as the writer shim passed
    them (:class:`sparkonce.delta.ops.auto_compact.AutoCompactSettings` checks them)."""
    replace_where: str | None = None
    """Delta's ``replaceWhere``: with mode overwrite, the rows it replaces (:mod:`sparkonce.delta.overwrite`)."""
    partition_overwrite_mode: PartitionOverwriteMode | None = None
    """Delta's ``partitionOverwriteMode`` option (None: not given; the session's
    ``spark.sql.sources.partitionOverwriteMode`` then decides, :mod:`sparkonce.delta.overwrite`)."""

    def new_table_properties(self) -> dict[str, str]:
        """The ``metaData.configuration`` of a table this write creates: session defaults, then the options."""
        declared = dict(self.declared_properties or ())
        return {**dict(self.session_table_defaults), **dict(self.table_properties), **declared}

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        app_id = get_str(options, "txnAppId")
        raw_version = lookup(options, "txnVersion")
        txn_version: int | None = None
        if raw_version is not None:
            try:
                txn_version = int(raw_version.strip())
            except ValueError:
                raise OptionError("txnVersion", raw_version, "must be a non-negative integer") from None
            if txn_version < 0:
                raise OptionError("txnVersion", raw_version, "must be a non-negative integer")
        if (app_id is None) != (txn_version is None):
            missing = "txnAppId" if app_id is None else "txnVersion"
            given = "txnVersion" if app_id is None else "txnAppId"
            raise OptionError(
                missing,
                None,
                f"both txnVersion and txnAppId must be specified for idempotent writes ({given} was)",
            )
        compression = get_choice(options, "compression", ("snappy", "zstd", "gzip", "lz4", "none"), "snappy")
        save_mode_raw = get_choice(options, SAVE_MODE_OPTION, ("append", "overwrite", "error", "ignore", ""), "")
        path = table_path(options)
        return cls(
            path=path,
            location=table_location(path, storage_options=storage_options_from(options)),
            partition_by=partition_columns(options),
            merge_schema=get_bool(options, "mergeSchema", False),
            overwrite_schema=get_bool(options, "overwriteSchema", False),
            txn_app_id=app_id,
            txn_version=txn_version,
            max_records_per_file=get_int(options, "maxRecordsPerFile", None, minimum=1),
            compression=compression,
            user_metadata=get_str(options, "userMetadata"),
            description=get_str(options, "description"),
            save_mode=save_mode_raw or None,  # type: ignore[arg-type]
            checkpoint_location=get_str(options, "checkpointLocation"),
            full_refresh=get_choice(options, "fullRefresh", ("fail", "truncate"), "fail"),
            table_properties=tuple(sorted(table_properties(options).items())),
            declared_properties=_declared_properties(options),
            session_table_defaults=tuple(sorted(_session_defaults(options).items())),
            cluster_by=parse_clustering(options),
            identity_tasks=get_int(options, "__identity_tasks", None, minimum=1),
            checkpoint_query_id=get_str(options, CHECKPOINT_QUERY_ID_OPTION),
            checkpoint_part_size=get_int(options, CHECKPOINT_PART_SIZE_OPTION, None, minimum=1),
            session_conf=tuple(sorted(_session_conf(options).items())),
            replace_where=_replace_where(options),
            partition_overwrite_mode=_partition_overwrite_mode(options),
        )


def _replace_where(options: Mapping[str, str]) -> str | None:
    """``replaceWhere``: a predicate's text (a blank one is refused)."""
    raw = lookup(options, REPLACE_WHERE_OPTION)
    if raw is None:
        return None
    if not raw.strip():
        raise OptionError(REPLACE_WHERE_OPTION, raw, "must be a predicate over the table's columns, e.g. day >= 3")
    return raw


def _partition_overwrite_mode(options: Mapping[str, str]) -> PartitionOverwriteMode | None:
    """``partitionOverwriteMode``: ``static`` or ``dynamic`` (any case), as Delta takes it."""
    if lookup(options, PARTITION_OVERWRITE_MODE_OPTION) is None:
        return None
    mode: PartitionOverwriteMode = get_choice(options, PARTITION_OVERWRITE_MODE_OPTION, ("static", "dynamic"), "static")
    return mode


def _session_defaults(options: Mapping[str, str]) -> dict[str, str]:
    """The session settings the writer shim passed (``TABLE_DEFAULTS_OPTION``) as table properties."""
    raw = get_json(options, TABLE_DEFAULTS_OPTION) if lookup(options, TABLE_DEFAULTS_OPTION) is not None else {}
    if not isinstance(raw, dict):
        raise OptionError(TABLE_DEFAULTS_OPTION, str(raw), "must be a JSON object")
    return session_defaults((str(k), str(v)) for k, v in raw.items())


def _declared_properties(options: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    """:data:`TABLE_PROPERTIES_OPTION`: Delta's ``delta.*`` keys checked (canonical spelling), the user's as given.

    Raises:
        OptionError: not a JSON object, or a bad ``delta.*`` property (naming it).
    """
    if lookup(options, TABLE_PROPERTIES_OPTION) is None:
        return None
    raw = get_json(options, TABLE_PROPERTIES_OPTION)
    if not isinstance(raw, dict):
        raise OptionError(TABLE_PROPERTIES_OPTION, str(raw), "must be a JSON object")
    given = {str(k): str(v) for k, v in raw.items()}
    found = table_properties(given)
    found.update({k: v for k, v in given.items() if not k.lower().startswith("delta.")})
    return tuple(sorted(found.items()))


def _session_conf(options: Mapping[str, str]) -> dict[str, str]:
    """The session confs the writer shim passed (``SESSION_CONF_OPTION``)."""
    raw = get_json(options, SESSION_CONF_OPTION) if lookup(options, SESSION_CONF_OPTION) is not None else {}
    if not isinstance(raw, dict):
        raise OptionError(SESSION_CONF_OPTION, str(raw), "must be a JSON object")
    return {str(k): str(v) for k, v in raw.items()}


@dataclass(frozen=True)
class ReadOptions:
    """Options of batch reads (time travel)."""

    path: str
    location: TableLocation
    version_as_of: int | None
    timestamp_as_of: dt.datetime | None
    metadata_column: bool = False
    """``metadataColumn``: add Spark's file ``_metadata`` struct as a column (Python data sources cannot have
    hidden columns; sparkonce's SQL sets it when a statement names ``_metadata``)."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        version = get_int(options, "versionAsOf", None, minimum=0)
        raw_ts = get_str(options, "timestampAsOf")
        if version is not None and raw_ts is not None:
            raise OptionError("timestampAsOf", raw_ts, "cannot be combined with versionAsOf; give one of the two")
        path = table_path(options)
        timestamp = parse_timestamp("timestampAsOf", raw_ts) if raw_ts else None
        location = table_location(path, storage_options=storage_options_from(options))
        return cls(path, location, version, timestamp, get_bool(options, METADATA_COLUMN_OPTION, False))


def parse_timestamp(option: str, raw: str) -> dt.datetime:
    """Parse a timestamp option (``2019-05-14 09:00:00``, ISO 8601, or a date); naive means UTC."""
    text = raw.strip().replace("Z", "+00:00")
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(option, raw, "must be a timestamp such as '2019-05-14 09:00:00' or a date") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class StreamReadOptions:
    """Options of the Delta streaming source."""

    path: str
    location: TableLocation
    starting_version: int | Literal["latest"] | None
    starting_timestamp: dt.datetime | None
    max_files_per_trigger: int | None
    max_bytes_per_trigger: int | None
    skip_change_commits: bool
    ignore_deletes: bool
    schema_tracking_location: str | None = None
    """``schemaTrackingLocation`` (or ``schemaLocation``): where the stream's schema log lives
    (:mod:`sparkonce.delta.table.schema_log`); None: no schema tracking."""
    source_tracking_id: str | None = None
    """``streamingSourceTrackingId``: tells two sources of one table apart in one schema tracking location."""
    max_catch_up_delay_ms: int = 0
    """``maxCatchUpDelay`` (an interval, e.g. ``"10 seconds"``; sparkonce's, native path only): while a writer of the
    table in this process is catching up on its own source (:mod:`sparkonce.delta.read.pacing`), hold new data back
    for at most this long since the stream last planned a batch or found nothing new, so one batch takes in several
    of its commits. 0: never hold."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamReadOptions:
        raw_start = get_str(options, "startingVersion")
        starting_version: int | Literal["latest"] | None = None
        if raw_start is not None:
            if raw_start.strip().lower() == "latest":
                starting_version = "latest"
            else:
                starting_version = get_int(options, "startingVersion", None, minimum=0)
        raw_ts = get_str(options, "startingTimestamp")
        if raw_start is not None and raw_ts is not None:
            raise OptionError("startingTimestamp", raw_ts, "cannot be combined with startingVersion")
        max_files = get_int(options, "maxFilesPerTrigger", None, minimum=1)
        path = table_path(options)
        return cls(
            path=path,
            location=table_location(path, storage_options=storage_options_from(options)),
            starting_version=starting_version,
            starting_timestamp=parse_timestamp("startingTimestamp", raw_ts) if raw_ts else None,
            max_files_per_trigger=max_files,
            max_bytes_per_trigger=get_bytes(options, "maxBytesPerTrigger"),
            skip_change_commits=get_bool(options, "skipChangeCommits", False),
            ignore_deletes=get_bool(options, "ignoreDeletes", False),
            schema_tracking_location=tracking_root(options),
            source_tracking_id=get_str(options, SOURCE_TRACKING_ID_OPTION),
            max_catch_up_delay_ms=_interval_ms(options, MAX_CATCH_UP_DELAY_OPTION),
        )


def _interval_ms(options: Mapping[str, str], name: str) -> int:
    """An interval option in milliseconds (0 when absent).

    Raises:
        OptionError: not an interval such as ``"10 seconds"``.
    """
    text = get_str(options, name)
    if text is None:
        return 0
    try:
        return parse_interval_ms(text, name=name)
    except DeltaLogError as err:
        raise OptionError(name, text, "is not an interval such as '10 seconds'") from err


__all__ = [
    "CHECKPOINT_QUERY_ID_OPTION",
    "COMPAT_PARTITION_OPTION",
    "MAX_CATCH_UP_DELAY_OPTION",
    "METADATA_COLUMN_OPTION",
    "PARTITION_BY_OPTION",
    "PARTITION_OVERWRITE_MODE_OPTION",
    "PartitionOverwriteMode",
    "REPLACE_WHERE_OPTION",
    "SAVE_MODE_OPTION",
    "SESSION_CONF_OPTION",
    "ReadOptions",
    "SaveMode",
    "StreamReadOptions",
    "WriteOptions",
    "parse_timestamp",
]
