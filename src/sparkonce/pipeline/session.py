"""What a pipeline gives the Spark session and this process before its stages run: its tables' storage options
(``[storage]``, ``[storage_env]``) and its catalog tables (``table_name`` keys).

Runs on the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkonce.errors import PipelineConfigError
from sparkonce.pipeline.model import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def use_storage(config: PipelineConfig, spark: SparkSession | None = None) -> None:
    """Give the pipeline's storage options (``[storage]``, ``[storage_env]``) to its tables. Runs on the driver.

    With ``spark``: as the session's ``spark.sparkonce.storage.*`` conf, registered again so the Delta sources
    and this process's table locations get them (``docs/storage.md``). Without: to this process's table locations
    only (commands that read the tables without Spark). Over the Spark conf; under explicit ``storage.*`` options.

    Raises:
        PipelineConfigError: a ``[storage_env]`` variable is not set.
    """
    options = config.storage_options()
    if not options:
        return
    from sparkonce.storage import SESSION_CONF_PREFIX, session_storage_options, set_session_storage_options

    if spark is None:
        set_session_storage_options({**session_storage_options(), **options})
        return
    import sparkonce

    for name, value in options.items():
        spark.conf.set(SESSION_CONF_PREFIX + name, value)
    sparkonce.register(spark)


def use_catalog(config: PipelineConfig, spark: SparkSession) -> None:
    """Register the tables the pipeline names (``table_name`` keys) that the catalog does not hold yet, as managed
    tables where the parse placed them, and point the session's catalog at the pipeline's warehouse (so
    ``spark.table("db.t")`` in a transform finds them). Runs on the driver, before any stage starts.

    Raises:
        PipelineConfigError: a name was registered meanwhile at another location.
    """
    if config.warehouse is None:
        return
    from sparkonce.delta.table.catalog import WAREHOUSE_CONF, DeltaCatalog
    from sparkonce.errors import SqlError

    spark.conf.set(WAREHOUSE_CONF, config.warehouse)
    catalog = DeltaCatalog(config.warehouse)
    for table in config.named_tables:
        try:
            catalog.add(table.database, table.name, table.location, managed=table.managed)
        except SqlError:  # registered already (by an earlier run, or meanwhile)
            found = catalog.get(table.database, table.name)
            if found is None or found.location.rstrip("/") != table.location.rstrip("/"):
                where = found.location if found is not None else "nowhere"
                raise PipelineConfigError(
                    f"{config.path}: table {table.database}.{table.name} is registered at {where}, not at "
                    f"{table.location} where the pipeline file resolved it; load the file again"
                ) from None


__all__ = ["use_catalog", "use_storage"]
