"""One error tree for everything sparkonce raises.

Every error is a :class:`SparkonceError`. Subclasses name the domain that failed, and every message names the
file, option, table version or record that is wrong, so a user can act on it without a traceback.

A Delta commit fails in one of two ways. :class:`CommitConflictError` and its subclasses: a concurrent commit
conflicts with what this transaction read or writes (Delta's ``DeltaConcurrentModificationException`` and its
subclasses; each is also importable under delta-spark's name, see :mod:`sparkonce.delta.exceptions`).
:class:`CommitRetriesExceededError`: no concurrent commit conflicted, but the commit lost the race for the next
table version too many times in a row and gave up (Delta's ``DELTA_MAX_COMMIT_RETRIES_EXCEEDED``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DELTA_EXCEPTION_NAMES",
    "BrokerError",
    "CheckpointError",
    "ClusterError",
    "CommitConflictError",
    "CommitRetriesExceededError",
    "ConcurrentAppendError",
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadError",
    "ConcurrentDeleteReadException",
    "ConcurrentTransactionError",
    "ConcurrentTransactionException",
    "ConcurrentWriteError",
    "ConcurrentWriteException",
    "ConstraintViolationError",
    "CrashPointError",
    "DataFileMissingError",
    "DdlError",
    "DeltaConcurrentModificationException",
    "DeltaLogError",
    "DriverError",
    "ExpressionError",
    "JarsError",
    "MetadataChangedError",
    "MetadataChangedException",
    "MissingExtraError",
    "OptionError",
    "PipelineConfigError",
    "ProtocolChangedError",
    "ProtocolChangedException",
    "SchemaMismatchError",
    "SchemaTrackingError",
    "SinkError",
    "SourceOffsetError",
    "SparkonceError",
    "SqlError",
    "StorageError",
    "TableNotFoundError",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
    "analysis_error",
    "unsupported_operation_error",
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
    """A concurrent Delta commit conflicts with this transaction: it changed what this transaction read or removes
    (nothing of this transaction was committed; read the table again and retry). Delta's
    ``DeltaConcurrentModificationException``; the subclasses below are its subclasses."""


class CommitRetriesExceededError(SparkonceError):
    """A Delta commit lost the race for the next table version ``attempts`` times in a row and gave up, each time
    to a commit that did not conflict with it (Delta's ``DELTA_MAX_COMMIT_RETRIES_EXCEEDED``). Not a conflict:
    nothing of this transaction was committed, and running it again may succeed once the table is less busy."""

    def __init__(self, table: str, attempts: int, detail: str) -> None:
        self.table = table
        self.attempts = attempts
        super().__init__(
            f"[DELTA_MAX_COMMIT_RETRIES_EXCEEDED] gave up committing to {table} after {attempts} attempts, each of "
            f"which lost the race for the next table version to a concurrent writer ({detail})"
        )


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


class ConcurrentWriteError(_DeltaConflict):
    """Delta's ``ConcurrentWriteException``: a concurrent commit wrote to the table after this transaction read a
    state that the commit cannot be checked against file by file (a table version, an identity column's
    high-water mark)."""

    error_class = "DELTA_CONCURRENT_WRITE"


class ConcurrentTransactionError(_DeltaConflict):
    """Delta's ``ConcurrentTransactionException``: a concurrent commit carries the same ``txn`` ``appId``."""

    error_class = "DELTA_CONCURRENT_TRANSACTION"


class DdlError(SparkonceError, ValueError):
    """A field list that is not ``name TYPE, ...`` (the message says what; the caller names the key)."""


class CrashPointError(SparkonceError, RuntimeError):
    """A crash point (:mod:`sparkonce.crash`) is armed but cannot kill what it is asked to (a harness set-up error,
    never data's fault)."""


# delta-spark's names (its ``delta.exceptions`` module, and ``io.delta.exceptions`` in Scala) for the same classes:
# an ``except ConcurrentAppendException`` ported from delta-spark catches sparkonce's conflict. As in Delta's Scala
# hierarchy, every conflict is a DeltaConcurrentModificationException.
DeltaConcurrentModificationException = CommitConflictError
ConcurrentWriteException = ConcurrentWriteError
MetadataChangedException = MetadataChangedError
ProtocolChangedException = ProtocolChangedError
ConcurrentAppendException = ConcurrentAppendError
ConcurrentDeleteReadException = ConcurrentDeleteReadError
ConcurrentDeleteDeleteException = ConcurrentDeleteDeleteError
ConcurrentTransactionException = ConcurrentTransactionError
DELTA_EXCEPTION_NAMES = (
    "DeltaConcurrentModificationException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
)
"""delta-spark's exception names, in its ``delta.exceptions.__all__`` order."""


class CheckpointError(SparkonceError):
    """A Spark checkpoint directory is missing, unreadable or inconsistent."""


class DriverError(SparkonceError):
    """A driver process that sparkonce started (demo, quickstart) failed; the message holds its exit code and log."""


class SourceOffsetError(SparkonceError):
    """Source offsets are malformed or point at data that no longer exists (data loss)."""


class SchemaTrackingError(SourceOffsetError):
    """A Delta stream with a ``schemaTrackingLocation`` stops: its source's schema changed and the schema log took
    the new schema (restart the query), a non-additive change awaits the user's unblocking, or the log is unusable.
    The message starts with Delta's error class."""


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


_SPARK_FLAVOURED: dict[tuple[type[SparkonceError], str], type[SparkonceError]] = {}


def _spark_flavoured(
    base: type[SparkonceError], pyspark_class: str, error_class: str, message: str, factory: Any
) -> SparkonceError:
    """An instance of ``base`` that is also PySpark's ``pyspark.errors.<pyspark_class>``, carrying Delta's error
    class. PySpark is imported on first use only (``import sparkonce`` stays free of it), so the class is made
    then, once per pair; it pickles as a call of ``factory`` (the public function that makes it)."""
    key = (base, pyspark_class)
    flavoured = _SPARK_FLAVOURED.get(key)
    if flavoured is None:
        import pyspark.errors

        spark_base = getattr(pyspark.errors, pyspark_class)

        def init(self: Any, error_class: str, message: str) -> None:
            Exception.__init__(self, f"[{error_class}] {message}")
            spark_base.__init__(self, message=message, errorClass=error_class, messageParameters={})
            self.delta_error = (error_class, message)

        def reduce(self: Any) -> tuple[Any, tuple[str, str]]:
            return factory, self.delta_error

        namespace = {"__init__": init, "__reduce__": reduce, "__module__": __name__}
        flavoured = type(base.__name__, (base, spark_base), namespace)
        _SPARK_FLAVOURED[key] = flavoured
    return flavoured(error_class, message)


def analysis_error(error_class: str, message: str) -> SqlError:
    """A :class:`SqlError` that is also PySpark's ``AnalysisException`` (what Delta raises as
    ``DeltaAnalysisException``, and Spark for a missing or existing table): ``except AnalysisException`` in code
    written for Delta catches it. ``str()`` is ``[error_class] message``."""
    error = _spark_flavoured(SqlError, "AnalysisException", error_class, message, analysis_error)
    assert isinstance(error, SqlError)
    return error


def unsupported_operation_error(error_class: str, message: str) -> UnsupportedFeatureError:
    """An :class:`UnsupportedFeatureError` that is also PySpark's ``UnsupportedOperationException`` (Delta's
    ``DeltaUnsupportedOperationException``). ``str()`` is ``[error_class] message``."""
    error = _spark_flavoured(
        UnsupportedFeatureError, "UnsupportedOperationException", error_class, message, unsupported_operation_error
    )
    assert isinstance(error, UnsupportedFeatureError)
    return error
