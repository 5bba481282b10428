"""A pipeline whose tables are on the embedded S3 store, the store reached through the file's ``[storage]`` table.

Real broker, real SeaweedFS, real Spark. The session has no storage conf and the process no ``AWS_*`` variables:
the endpoint and keys come from the pipeline file only (the secret key through ``[storage_env]``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkonce.delta.txn.commit import load_table
from sparkonce.pipeline.loader import load_pipeline
from sparkonce.pipeline.replay import plan_replay, replay_stage
from sparkonce.pipeline.run import run_pipeline
from sparkonce.pipeline.verify import verify_pipeline
from sparkonce.storage import SESSION_CONF_PREFIX, set_session_storage_options, table_location
from sparkonce_local.demo_pipeline import quickstart_pipeline
from sparkonce_local.services.producer import produce_sensor_readings
from tests.fixtures_storage import EmbeddedStore

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.s3]


@pytest.fixture
def clean_session_storage(spark: Any) -> Iterator[None]:
    """The pipeline sets session storage conf on the shared test session: take it away again afterwards."""
    import sparkonce

    yield
    for key in [k for k in spark.conf.getAll if k.startswith(SESSION_CONF_PREFIX)]:
        spark.conf.unset(key)
    sparkonce.register(spark)
    set_session_storage_options({})


def test_pipeline_tables_on_s3_through_the_storage_table(  # type: ignore[no-untyped-def]
    spark: Any,
    broker,
    object_store: EmbeddedStore,
    clean_session_storage: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not [k for k in spark.conf.getAll if k.startswith(SESSION_CONF_PREFIX)]
    topic = broker.unique_topic("s3")
    produced = 300
    produce_sensor_readings(broker.bootstrap, topic=topic, count=produced, partitions=2, malformed_share=0.1, seed=9)
    options = object_store.storage_options
    secret = options.pop("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("SPARKONCE_TEST_S3_SECRET", secret)
    lake = object_store.unique_uri("pipeline")
    storage = "\n[storage]\n" + "".join(f'{name} = "{value}"\n' for name, value in options.items())
    storage += '\n[storage_env]\nAWS_SECRET_ACCESS_KEY = "SPARKONCE_TEST_S3_SECRET"\n'
    text = quickstart_pipeline(broker.bootstrap, topic=topic, max_offsets_per_trigger=120)
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(text.replace('"tables/', f'"{lake}/') + storage)
    config = load_pipeline(pipeline)
    assert config.raw.table == f"{lake}/raw"

    run_pipeline(config, spark=spark, poll_seconds=0.2)

    def rows(table: str, columns: list[str]) -> list[tuple[Any, ...]]:
        read = load_table(table_location(table, storage_options=object_store.storage_options))
        return [tuple(r.values()) for r in read.to_pyarrow_table(columns=columns).to_pylist()]

    raw = rows(config.raw.table, ["partition", "offset"])
    assert len(raw) == produced and len(set(raw)) == produced  # every Kafka record once
    assert config.bronze is not None and config.gold is not None
    bronze = rows(config.bronze.table, ["_partition", "_offset", "device_id"])
    quarantine = rows(config.bronze.quarantine, ["partition", "offset"])
    assert sorted([b[:2] for b in bronze] + quarantine) == sorted(raw)  # each raw row in exactly one of them
    assert quarantine  # the malformed share landed there
    gold = rows(config.gold.table, ["device_id"])
    assert sorted(g[0] for g in gold) == sorted({b[2] for b in bronze})  # one row per device
    report = verify_pipeline(config)
    assert report.ok and len(report.targets) == 4 and not report.skipped

    # replay gold from bronze's latest table version, the store again known from the file only
    for key in [k for k in spark.conf.getAll if k.startswith(SESSION_CONF_PREFIX)]:
        spark.conf.unset(key)
    set_session_storage_options({})
    bronze_version = load_table(table_location(config.bronze.table, storage_options=object_store.storage_options))
    plan = plan_replay(config, "gold", str(bronze_version.version()))
    assert plan.targets == (config.gold.table,)
    replayed = replay_stage(spark, config, plan)
    assert replayed.rows == {config.gold.table: len(gold)}
    assert sorted(rows(config.gold.table, ["device_id"])) == sorted(gold)
