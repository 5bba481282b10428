"""The topics of a Kafka cluster, as its admin API lists them. Runs on the driver."""

from __future__ import annotations

from collections.abc import Mapping

from sparkonce.errors import BrokerError
from sparkonce.extras import require


def admin_config(bootstrap: str, config: Mapping[str, str] | None = None) -> dict[str, str | int | float | bool]:
    """The admin client's config: ``config`` plus the bootstrap servers, with librdkafka's own logging off."""
    return {**(config or {}), "bootstrap.servers": bootstrap, "log_level": "0"}


def list_topics(bootstrap: str, *, timeout: float = 5.0, config: Mapping[str, str] | None = None) -> dict[str, int]:
    """Return topic name -> partition count of the broker at ``bootstrap`` (internal topics excluded).

    Runs on the driver.

    Raises:
        BrokerError: the broker did not answer within ``timeout`` seconds.
        MissingExtraError: confluent-kafka is not installed (``pip install 'sparkonce[kafka]'``).
    """
    require("kafka")
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(admin_config(bootstrap, config))
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as err:
        raise BrokerError(f"broker at {bootstrap} is unreachable: {err.args[0].str()}") from err
    return {
        name: len(topic.partitions)
        for name, topic in sorted(metadata.topics.items())
        if not name.startswith("__") and topic.error is None
    }
