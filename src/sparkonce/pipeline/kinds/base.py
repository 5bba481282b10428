"""The stage protocol: what every stage kind implements, so adding a kind touches one module of this package (and
its entry in :data:`sparkonce.pipeline.kinds.KINDS`). Runs on the driver.

A kind parses its ``[stages.<name>]`` table (:meth:`Kind.parse`), names the paths it writes (:meth:`Kind.places`),
gives the schema and partitioning of the Delta tables it creates (what a downstream stage reads,
:meth:`Kind.output_schemas`, :meth:`Kind.partition_by`), checks what needs Spark before any data moves
(:meth:`Kind.check`), starts its streaming query (:meth:`Kind.start`), checks its exactly-once records against its
checkpoint (:meth:`Kind.verify`), describes where its outputs stand for ``sparkonce status``
(:meth:`Kind.describe`), and rebuilds its tables from its input when it can be replayed
(:meth:`Kind.replay_outputs`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from sparkonce.pipeline.model import PipelineConfig, Stage, StageKind
from sparkonce.pipeline.reader import TomlReader
from sparkonce.pipeline.records import TargetCheck, check_delta_target

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

S = TypeVar("S", bound=Stage)


@dataclass(frozen=True)
class OutputFacts:
    """Where one place a stage writes stands (``sparkonce status``), read without Spark."""

    target: str
    """A Delta table location, or ``postgresql:<table>``."""
    record_id: str
    """The txn app id (or ledger app id) the stage records its batches under."""
    table_version: int | None = None
    """A Delta table's latest table version (None when it does not exist yet or is not a Delta table)."""
    last_recorded_batch: int | None = None
    """The newest batch recorded under ``record_id`` (the ``txn`` version of the latest snapshot); None when
    none is, or when it is not read (a PostgreSQL ledger is not queried by ``status``)."""


class Kind(ABC, Generic[S]):
    """One stage kind's behaviour, over its frozen model class (:mod:`sparkonce.pipeline.model`). Stateless: one
    instance per kind, in the registry. Runs on the driver."""

    name: ClassVar[StageKind]
    """The ``kind`` key's value (also the model class's ``kind``)."""
    stage_class: ClassVar[type[Stage]]
    """The model class this kind parses into."""
    unreadable: ClassVar[str | None] = None
    """Why no stage can read this kind's output (it writes no Delta table), or None when stages can."""

    # -- loading (no Spark) ------------------------------------------------------------------------------------

    @abstractmethod
    def parse(self, reader: TomlReader, name: str, data: Mapping[str, Any], before: Mapping[str, Stage]) -> S:
        """The stage ``name`` from its table (without ``kind``); ``before``: the stages parsed so far.

        Raises:
            PipelineConfigError: a key is missing, unknown or invalid (naming the key path).
        """

    def places(self, stage: S) -> list[tuple[str, str]]:
        """(key path, location) of every table the stage writes, for the loader's one-owner-per-path check."""
        return [(f"stages.{stage.name}.table", table) for table in stage.tables[:1]]

    def check_input_columns(self, reader: TomlReader, stage: S, key: str, names: tuple[str, ...]) -> None:
        """Check, on load, columns a downstream stage's ``key`` names in this stage's output (none known without
        Spark by default: they are checked against the output's schema before the stage starts).

        Raises:
            PipelineConfigError: a column is not in the output, or cannot serve (naming ``key``).
        """

    # -- tables and checks (Spark) -----------------------------------------------------------------------------

    def output_schemas(
        self, spark: SparkSession, config: PipelineConfig, stage: S, *, downstream: bool = False
    ) -> dict[str, StructType]:
        """The schema of each Delta table the stage creates before it starts (``downstream``: a stage reading
        the first table needs it to exist)."""
        return {}

    def partition_by(self, stage: S) -> tuple[str, ...]:
        """The partition columns of the stage's tables when it creates them."""
        return ()

    def check(self, spark: SparkSession, config: PipelineConfig, stage: S) -> None:
        """Every load-time check that needs Spark (no data moves).

        Raises:
            PipelineConfigError: naming the key and the reason.
        """

    # -- running -----------------------------------------------------------------------------------------------

    @abstractmethod
    def start(self, spark: SparkSession, config: PipelineConfig, stage: S, options: dict[str, str]) -> StreamingQuery:
        """Start the stage's streaming query (its checkpoint claimed, its tables created); ``options``: the Delta
        source options the checkpoint's owner asks for (``startingVersion`` after a replay)."""

    # -- verify and replay -------------------------------------------------------------------------------------

    def txn_records(self, stage: S, query_id: str) -> list[tuple[str, str]]:
        """(Delta table, txn app id) of every table the stage records its batches in."""
        return []

    def verify(self, stage: S, query_id: str, committed: set[int]) -> list[TargetCheck]:
        """Every place the stage writes, checked against the batches its checkpoint ``committed``.

        Raises:
            DeltaLogError: a Delta log cannot be read.
        """
        return [
            check_delta_target(stage.name, t, record_id, committed)
            for t, record_id in self.txn_records(stage, query_id)
        ]

    def describe(self, stage: S, query_id: str, storage_options: Mapping[str, str]) -> list[OutputFacts]:
        """Where each place the stage writes stands: by default every table of :meth:`txn_records`, its latest
        table version and the newest batch recorded there (from its latest snapshot's ``txn`` actions).

        Raises:
            DeltaLogError: a Delta log cannot be read.
            StorageError: an object store is unreachable.
        """
        from sparkonce.delta.log.table_view import existing_table
        from sparkonce.errors import TableNotFoundError
        from sparkonce.storage import table_location

        facts: list[OutputFacts] = []
        for table, record_id in self.txn_records(stage, query_id):
            try:
                snapshot = existing_table(table_location(table, storage_options=dict(storage_options))).snapshot
            except TableNotFoundError:
                facts.append(OutputFacts(table, record_id))
                continue
            facts.append(OutputFacts(table, record_id, snapshot.table_version, snapshot.txn_version(record_id)))
        return facts

    def replayable(self, stage: S) -> bool:
        """Whether ``replay`` can rebuild the stage's tables from its input table."""
        return False

    def replay_outputs(
        self, spark: SparkSession, config: PipelineConfig, stage: S, source: DataFrame
    ) -> list[tuple[str, DataFrame]]:
        """Each table's rows rebuilt from ``source`` (the whole input as of a table version) by the stage's logic.

        Raises:
            PipelineConfigError: the kind cannot be replayed.
        """
        from sparkonce.errors import PipelineConfigError

        raise PipelineConfigError(f"stages.{stage.name}: a {self.name} stage cannot be replayed")


KINDS: dict[str, Kind[Any]] = {}
"""Every stage kind by its ``kind`` name, in the order error messages list them: filled by the package
(:mod:`sparkonce.pipeline.kinds`), which Python imports before this module."""


def kind_of(stage: Stage) -> Kind[Any]:
    """The behaviour of ``stage``'s kind."""
    return KINDS[stage.kind]


__all__ = ["KINDS", "Kind", "OutputFacts", "kind_of"]
