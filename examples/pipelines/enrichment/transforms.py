"""The enrichment example's transform: nested JSON events joined with the ``dimensions/devices`` Delta table."""

from __future__ import annotations

from pathlib import Path

import pyspark.sql.functions as F
from pyspark.sql import DataFrame

DEVICES = str(Path(__file__).parent / "dimensions" / "devices")
"""The dimension table: ``device_id STRING, site STRING, model STRING`` (small: broadcast to every task)."""

EVENT = (
    "device STRUCT<id: STRING, firmware: STRING>, "
    "reading STRUCT<time: TIMESTAMP, value: DOUBLE, unit: STRING>, "
    "tags ARRAY<STRING>"
)


def parse_and_enrich(raw: DataFrame) -> DataFrame:
    """Flatten the nested event, drop records without a device id, and add the device's site and model."""
    events = raw.select(F.from_json("value", EVENT).alias("e"), "partition", "offset")
    flat = events.where(F.col("e.device.id").isNotNull()).select(
        F.col("e.device.id").alias("device_id"),
        F.col("e.device.firmware").alias("firmware"),
        F.col("e.reading.time").alias("reading_time"),
        F.col("e.reading.value").alias("value"),
        F.col("e.reading.unit").alias("unit"),
        F.coalesce(F.size("e.tags"), F.lit(0)).alias("tag_count"),
        "partition",
        "offset",
    )
    devices = raw.sparkSession.read.format("delta").load(DEVICES).select("device_id", "site", "model")
    return flat.join(F.broadcast(devices), "device_id", "left")
