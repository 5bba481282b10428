"""One error tree for everything sparkonce raises.

Every error is a :class:`SparkonceError`. Subclasses name the domain that failed, and every message names the
file, option, table version or record that is wrong, so a user can act on it without a traceback.
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "CheckpointError",
    "ClusterError",
    "CommitConflictError",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentTransactionError",
    "ConstraintViolationError",
    "DataFileMissingError",
    "DeltaLogError",
    "DriverError",
    "ExpressionError",
    "JarsError",
    "MetadataChangedError",
    "MissingExtraError",
    "OptionError",
    "PipelineConfigError",
    "ProtocolChangedError",
    "SchemaMismatchError",
    "SinkError",
    "SourceOffsetError",
    "SparkonceError",
    "SqlError",
    "StorageError",
    "TableNotFoundError",
    "UnsupportedFeatureError",
]


class SparkonceError(Exception):
    """Base class of every error raised by sparkonce."""


class OptionError(SparkonceError, ValueError):
    """An option (data source option, CLI flag, config key) has a missing, unknown or invalid value."""

    def __init__(self, option: str, value: object, problem: str) -> None:
        self.option = option
        self.value = value
        self.problem = problem
        shown = "<missing>" if value is None else repr(value)
        super().__init__(f"option {option!r} = {shown}: {problem}")


class MissingExtraError(SparkonceError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the extra to install
    (``pip install 'sparkonce[kafka]'``, ``'sparkonce[postgres]'``, ``'sparkonce[local]'``)."""

    def __init__(self, extra: str, feature: str, missing: str) -> None:
        self.extra = extra
        self.feature = feature
        self.missing = missing
        super().__init__(f"{feature} needs {missing}: pip install 'sparkonce[{extra}]'", name=missing)


class SqlError(SparkonceError, ValueError):
    """A SQL statement that sparkonce runs is malformed, names an unknown table, or has a clause sparkonce cannot
    honour; the message names the statement and the clause."""


class TableNotFoundError(SparkonceError):
    """A path that should hold a Delta table does not."""


class DeltaLogError(SparkonceError):
    """A Delta transaction log could not be read: a corrupted or missing file, or an impossible state."""


class DataFileMissingError(DeltaLogError, FileNotFoundError):
    """A data file (or deletion vector) the Delta log references is gone: deleted outside Delta."""


class VersionNotFoundError(DeltaLogError):
    """A table version that is not in the Delta log (beyond the latest, or removed by log cleanup):
    Delta's ``DELTA_VERSION_NOT_FOUND``."""


class UnsupportedFeatureError(DeltaLogError):
    """A Delta table uses a protocol feature that sparkonce cannot honour; reading it would give wrong rows."""


class SchemaMismatchError(SparkonceError):
    """The data written does not match the table schema and no schema option allows the change."""


class CommitConflictError(SparkonceError):
    """A Delta commit lost to concurrent writers more times than the retry budget allows."""


class _DeltaConflict(CommitConflictError):
    """A concurrent Delta commit conflicts with this transaction under Delta's rules (``ConflictChecker``,
    WriteSerializable); the message starts with Delta's error class in brackets."""

    error_class = ""


class ProtocolChangedError(_DeltaConflict):
    """Delta's ``ProtocolChangedException``: a concurrent commit changed the table's protocol."""

    error_class = "DELTA_PROTOCOL_CHANGED"


class MetadataChangedError(_DeltaConflict):
    """Delta's ``MetadataChangedException``: a concurrent commit changed the table's metadata."""

    error_class = "DELTA_METADATA_CHANGED"


class ConcurrentAppendError(_DeltaConflict):
    """Delta's ``ConcurrentAppendException``: a concurrent non-blind commit added files this transaction should
    have read."""

    error_class = "DELTA_CONCURRENT_APPEND"


class ConcurrentDeleteReadError(_DeltaConflict):
    """Delta's ``ConcurrentDeleteReadException``: a concurrent commit removed a file this transaction read."""

    error_class = "DELTA_CONCURRENT_DELETE_READ"


class ConcurrentDeleteDeleteError(_DeltaConflict):
    """Delta's ``ConcurrentDeleteDeleteException``: a concurrent commit removed a file this transaction removes."""

    error_class = "DELTA_CONCURRENT_DELETE_DELETE"


class ConcurrentTransactionError(_DeltaConflict):
    """Delta's ``ConcurrentTransactionException``: a concurrent commit carries the same ``txn`` ``appId``."""

    error_class = "DELTA_CONCURRENT_TRANSACTION"


class CheckpointError(SparkonceError):
    """A Spark checkpoint directory is missing, unreadable or inconsistent."""


class DriverError(SparkonceError):
    """A driver process that sparkonce started (demo, quickstart) failed; the message holds its exit code and log."""


class SourceOffsetError(SparkonceError):
    """Source offsets are malformed or point at data that no longer exists (data loss)."""


class JarsError(SparkonceError):
    """A set of Maven jars sparkonce needs (Apache Kafka's broker, the S3A file system) is not resolved, or Maven
    failed to resolve it; the message names the command that fetches it."""


class BrokerError(SparkonceError):
    """The Kafka broker is unreachable or refused a request."""


class StorageError(SparkonceError):
    """A table or checkpoint location is malformed, or the object store is unreachable, refused a request, or
    its embedded server could not be managed."""


class ClusterError(SparkonceError):
    """The Spark cluster could not be started or reached, or its executors cannot run sparkonce."""


class SinkError(SparkonceError):
    """An external sink (PostgreSQL, fan-out) failed to commit a batch."""


class PipelineConfigError(SparkonceError):
    """A pipeline definition file is invalid; the message names the key and the problem."""


class ConstraintViolationError(SparkonceError, ValueError):
    """A row written to a Delta table breaks one of its rules (a generated column's value differs from its
    generation expression); the message is Delta's ``DELTA_VIOLATE_CONSTRAINT_WITH_VALUES``, and nothing of the
    write is committed."""


class ExpressionError(SparkonceError, ValueError):
    """A SQL expression that sparkonce evaluates itself (a generated column's) failed on a row, as Spark's ANSI
    mode fails it (an overflow, a division by zero, a string that does not cast)."""
