"""Driver program for the DeltaTable merge crash test: a JSON file stream (one file per batch) upserted into a
Delta table with ``DeltaTable.merge`` inside ``foreachBatch``, seed style.

Usage:
    python -m tests.integration.drivers.files_to_merge INPUT_DIR CHECKPOINT TABLE [--no-txn]

Each batch counts its rows per device (``id % 4``) and merges the counts into TABLE: matched devices get
``hits = t.hits + s.hits``, new ones are inserted. The merge is idempotent through Delta's session confs
``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` (app id fixed, version = batch id); ``--no-txn``
leaves them unset (the naive upsert, which double counts a replayed batch). The crash point
``after_delta_commit`` fires right after the merge's Delta commit. Runs with the availableNow trigger, prints
``DONE`` and exits 0.
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame

from sparkonce.crash import crash_point
from sparkonce.delta.tables import DeltaTable
from sparkonce.spark import local_session

APP_ID = "device-hits-upsert"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("input_dir")
    parser.add_argument("checkpoint")
    parser.add_argument("table")
    parser.add_argument("--no-txn", action="store_true")
    args = parser.parse_args()

    spark = local_session(app_name="files-to-merge")
    spark.createDataFrame([], "device string, hits long").write.format("delta").mode("ignore").save(args.table)
    stream = (
        spark.readStream.format("json")
        .schema("id long, device string, value double")
        .option("maxFilesPerTrigger", 1)
        .load(args.input_dir)
    )

    def upsert(batch: DataFrame, batch_id: int) -> None:
        counts = batch.groupBy("device").count().withColumnRenamed("count", "hits")
        if not args.no_txn:
            batch.sparkSession.conf.set("spark.databricks.delta.write.txnAppId", APP_ID)
            batch.sparkSession.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        (
            DeltaTable.forPath(batch.sparkSession, args.table)
            .alias("t")
            .merge(counts.alias("s"), "t.device = s.device")
            .whenMatchedUpdate(set={"hits": "t.hits + s.hits"})
            .whenNotMatchedInsertAll()
            .execute()
        )
        crash_point("after_delta_commit", batch_id)

    query = (
        stream.writeStream.foreachBatch(upsert)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
