"""delta-spark's table builders: ``DeltaTable.create / createIfNotExists / replace / createOrReplace(spark)``
return a :class:`DeltaTableBuilder`; ``.tableName``, ``.location``, ``.addColumn(s)``, ``.partitionedBy``,
``.clusterBy``, ``.property``, ``.comment`` then ``.execute()`` make the table
(:func:`sparkonce.delta.create.create_table`, the same as ``CREATE TABLE ... USING delta``) and return its
:class:`~sparkonce.delta.tables.DeltaTable`.

Arguments are checked as delta-spark checks them (a ``TypeError`` with delta-spark's message, before anything is
written). ``addColumn(..., generatedAlwaysAs=expr)`` makes a generated column
(:mod:`sparkonce.delta.generated`); a generation expression sparkonce cannot evaluate is refused at ``execute()``
with ``UnsupportedFeatureError``.

Runs on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from sparkonce.delta.create import CreateMode, CreateRequest, create_table
from sparkonce.delta.identity import IdentityGenerator, column_metadata
from sparkonce.errors import OptionError, UnsupportedFeatureError, unsupported_operation_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

    from sparkonce.delta.tables import DeltaTable


class DeltaTableBuilder:
    """How to create or replace a Delta table (delta-spark's ``DeltaTableBuilder``). Runs on the driver."""

    def __init__(self, spark: SparkSession, mode: CreateMode) -> None:
        self._spark = spark
        self._mode = mode
        self._name: str | None = None
        self._location: str | None = None
        self._fields: list[StructField] = []
        self._partitioned_by: tuple[str, ...] = ()
        self._properties: dict[str, str] = {}
        self._unsupported: list[str] = []
        self._comment: str | None = None
        self._cluster_by: tuple[str, ...] = ()

    @staticmethod
    def _raise_type_error(message: str, objects: Iterable[Any]) -> NoReturn:
        raise TypeError(message + "".join(f" Found {obj} with type {type(obj)}" for obj in objects))

    def tableName(self, identifier: str) -> DeltaTableBuilder:
        """The table's name, ``[database.]table``."""
        if type(identifier) is not str:
            self._raise_type_error("Identifier must be str.", [identifier])
        self._name = identifier
        return self

    def location(self, location: str) -> DeltaTableBuilder:
        """Where the table's files are (a path or an object-store URI)."""
        if type(location) is not str:
            self._raise_type_error("Location must be str.", [location])
        self._location = location
        return self

    def comment(self, comment: str) -> DeltaTableBuilder:
        """The table's comment (``metaData.description``, ``DESCRIBE DETAIL``'s ``description``)."""
        if type(comment) is not str:
            self._raise_type_error("Table comment must be str.", [comment])
        self._comment = comment
        return self

    def addColumn(
        self,
        colName: str,
        dataType: str | DataType,
        nullable: bool = True,
        generatedAlwaysAs: str | IdentityGenerator | None = None,
        generatedByDefaultAs: IdentityGenerator | None = None,
        comment: str | None = None,
    ) -> DeltaTableBuilder:
        """One column: its name, a type (DDL text such as ``"INT"`` or a ``DataType``), nullability, an identity
        (``generatedAlwaysAs`` / ``generatedByDefaultAs`` an :class:`~sparkonce.delta.identity.IdentityGenerator`),
        comment. Checked as delta-spark checks it, in its order.

        Raises:
            TypeError: an argument of the wrong type. ValueError: both generations, or an identity step of 0.
            ParseException: a type Spark cannot parse (PySpark's, from Spark's parser).
            UnsupportedFeatureError: an identity column that is not BIGINT (also PySpark's
                ``UnsupportedOperationException``, as delta-spark raises it).
        """
        from pyspark.sql.types import DataType, LongType, StructField, _parse_datatype_string

        if type(colName) is not str:
            self._raise_type_error("Column name must be str.", [colName])
        if type(dataType) is not str and not isinstance(dataType, DataType):
            self._raise_type_error("Column data type must be str or DataType.", [dataType])
        if type(nullable) is not bool:
            self._raise_type_error("Column nullable must be bool.", [nullable])
        identity: dict[str, Any] = {}
        generation: str | None = None
        if generatedAlwaysAs is not None and generatedByDefaultAs is not None:
            raise ValueError(
                "generatedByDefaultAs and generatedAlwaysAs cannot both be set.",
                [generatedByDefaultAs, generatedAlwaysAs],
            )
        if isinstance(generatedAlwaysAs, IdentityGenerator):
            identity = column_metadata(generatedAlwaysAs.start, generatedAlwaysAs.step, allow_explicit_insert=False)
        elif generatedAlwaysAs is not None:
            if type(generatedAlwaysAs) is not str:
                self._raise_type_error(
                    "Generated always as expression must be str or IdentityGenerator.", [generatedAlwaysAs]
                )
            generation = generatedAlwaysAs
        elif generatedByDefaultAs is not None:
            if not isinstance(generatedByDefaultAs, IdentityGenerator):
                self._raise_type_error(
                    "Generated by default expression must be IdentityGenerator.", [generatedByDefaultAs]
                )
            identity = column_metadata(
                generatedByDefaultAs.start, generatedByDefaultAs.step, allow_explicit_insert=True
            )
        if comment is not None and type(comment) is not str:
            self._raise_type_error("Column comment must be str.", [comment])
        parsed = _parse_datatype_string(dataType) if isinstance(dataType, str) else dataType
        if identity and not isinstance(parsed, LongType):  # delta-spark's column builder refuses it at once
            raise unsupported_operation_error(
                "DELTA_IDENTITY_COLUMNS_UNSUPPORTED_DATA_TYPE",
                f"DataType {parsed.typeName()} is not supported for IDENTITY columns.",
            )
        metadata: dict[str, Any] = {**identity, **({"comment": comment} if comment else {})}
        if generation is not None:
            metadata["delta.generationExpression"] = generation
        self._fields.append(StructField(colName, parsed, nullable, metadata))
        return self

    def addColumns(self, cols: StructType | list[StructField]) -> DeltaTableBuilder:
        """Columns from an existing schema (a ``StructType`` or a list of ``StructField``)."""
        from pyspark.sql.types import StructField, StructType

        if isinstance(cols, list):
            for col in cols:
                if type(col) is not StructField:
                    self._raise_type_error("Column in existing schema must be StructField.", [col])
            cols = StructType(cols)
        if type(cols) is not StructType:
            self._raise_type_error("Schema must be StructType or a list of StructField.", [cols])
        self._fields.extend(cols.fields)
        return self

    def partitionedBy(self, *cols: str | list[str] | tuple[str, ...]) -> DeltaTableBuilder:
        """The partition columns."""
        names: Iterable[Any] = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
        for c in names:
            if type(c) is not str:
                self._raise_type_error("Partitioning column must be str.", [c])
        self._partitioned_by = tuple(names)
        return self

    def clusterBy(self, *cols: str | list[str] | tuple[str, ...]) -> DeltaTableBuilder:
        """The clustering columns (liquid clustering, :mod:`sparkonce.delta.clustering`)."""
        names: Iterable[Any] = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
        for c in names:
            if type(c) is not str:
                self._raise_type_error("Clustering column must be str.", [c])
        self._cluster_by = tuple(names)
        return self

    def property(self, key: str, value: str) -> DeltaTableBuilder:
        """A table property (``delta.*`` properties are checked at :meth:`execute`)."""
        if type(key) is not str or type(value) is not str:
            self._raise_type_error("Key and value of property must be string.", [key, value])
        self._properties[key] = value
        return self

    def execute(self) -> DeltaTable:
        """Create (or replace) the table; its :class:`~sparkonce.delta.tables.DeltaTable`.

        Raises:
            OptionError: neither a name nor a location was given; a bad ``delta.*`` property.
            UnsupportedFeatureError: a generation expression sparkonce cannot evaluate.
            SqlError: the name is taken, a table to replace is missing, or the location holds another table.
        """
        from pyspark.sql.types import StructType

        from sparkonce.delta.tables import DeltaTable
        from sparkonce.sqltext.grammar import parse_name

        if self._unsupported:
            raise UnsupportedFeatureError(
                f"DeltaTable.{self._mode}: {', '.join(self._unsupported)} is not supported by sparkonce; nothing was "
                "written"
            )
        if self._name is None and self._location is None:
            raise OptionError(
                "tableName", None, "Table name or location has to be specified (tableName(...) or location(...))"
            )
        import sparkonce

        sparkonce.register(self._spark)
        created = create_table(
            self._spark,
            CreateRequest(
                mode=self._mode,
                name=parse_name(self._name) if self._name is not None else None,
                location=self._location,
                schema=StructType(self._fields) if self._fields else None,
                partitioned_by=self._partitioned_by,
                properties=self._properties,
                comment=self._comment,
                shown=self._name or f"delta.`{self._location}`",
                cluster_by=self._cluster_by,
            ),
        )
        return DeltaTable(self._spark, created.location)


__all__ = ["DeltaTableBuilder"]
