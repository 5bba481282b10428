"""The executor consumer's config: exactly-once settings forced, the prefetch sized to the range it reads."""

from __future__ import annotations

import pytest

from sparkonce.kafka.reader import BATCH_ROWS, PREFETCH_MAX, ReadSettings, consumer_config


def test_the_checkpoint_stays_the_only_record_of_progress() -> None:
    config = consumer_config(ReadSettings(client_config={"bootstrap.servers": "b:9092", "enable.auto.commit": "true"}))
    assert config["enable.auto.commit"] is False and config["enable.auto.offset.store"] is False
    assert config["auto.offset.reset"] == "error" and config["bootstrap.servers"] == "b:9092"
    assert "queued.min.messages" not in config  # a consumer that reads no range prefetches nothing of its own


@pytest.mark.parametrize(
    ("records", "queued"),
    [(1, BATCH_ROWS), (BATCH_ROWS + 1, BATCH_ROWS + 1), (300_000, 300_000), (10**9, PREFETCH_MAX)],
)
def test_the_range_is_fetched_ahead_whole_within_librdkafka_bounds(records: int, queued: int) -> None:
    assert consumer_config(ReadSettings(), prefetch=records)["queued.min.messages"] == queued


def test_a_kafka_option_sets_the_prefetch_itself() -> None:
    settings = ReadSettings(client_config={"queued.min.messages": "5000"})
    assert consumer_config(settings, prefetch=300_000)["queued.min.messages"] == "5000"
