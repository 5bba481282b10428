"""Kafka -> Delta, exactly once, as a Spark Declarative Pipelines flow.

The flow reads the topic with sparkonce's Kafka source and appends to a *sink* (``dp.create_sink``) served by
sparkonce's Delta sink: every micro-batch is one Delta commit carrying ``txn(query id, batch id)``, so a batch that
SDP re-runs after a crash is skipped, and the checkpoint SDP keeps for the flow (under the spec's ``storage``)
continues from run to run. ``spark`` is injected by ``spark-pipelines`` into this module.
"""

from pyspark import pipelines as dp

import sparkonce

sparkonce.register(spark)  # type: ignore[name-defined]  # noqa: F821

conf = spark.conf  # type: ignore[name-defined]  # noqa: F821
BOOTSTRAP = conf.get("sparkonce.example.bootstrap")
TOPIC = conf.get("sparkonce.example.topic")
TABLE = conf.get("sparkonce.example.table")

# A sink, not a table: SDP passes no path to a Python data source's writer for its own tables and materialized
# views, so those cannot be sparkonce Delta tables. ``fullRefresh``: what a full refresh of the flow (a new
# checkpoint, under a new query id) does to this table: "fail" (the default) or "truncate".
dp.create_sink("raw_events", format="sparkonce.delta", options={"path": TABLE, "fullRefresh": "truncate"})


@dp.append_flow(target="raw_events")
def kafka_to_raw():  # type: ignore[no-untyped-def]
    return (
        spark.readStream.format("sparkonce.kafka")  # type: ignore[name-defined]  # noqa: F821
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS key",
            "CAST(value AS STRING) AS value",
            "topic",
            "partition",
            "offset",
            "timestamp",
        )
    )
