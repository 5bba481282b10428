"""Sample data for demos and tests: sensor readings like the example pipelines consume.

Each record is a JSON object ``{"device_id": "sensor-007", "reading_time": "2026-05-14T09:00:00.123Z",
"value": 21.37}`` keyed by device id (optional). ``reading_time`` is the event time: it advances with the record
number and jitters backwards a little, so some readings arrive out of order. On request a share of the records is
malformed (not JSON, truncated JSON, a missing field, a value of the wrong type) to exercise a pipeline's
quarantine.

Runs in the process that calls it (CLI or test), never on Spark executors.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sparkonce.errors import BrokerError, OptionError
from sparkonce_local.services.broker import create_topic, list_topics

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "sensor_readings_raw"
_MALFORMED_KINDS = ("not_json", "truncated", "missing_field", "wrong_type")


@dataclass(frozen=True)
class ProduceResult:
    """What :func:`produce_sensor_readings` wrote."""

    topic: str
    records: int
    malformed: int
    partitions: int
    devices: int
    bytes: int
    seconds: float
    first_reading_time: str
    last_reading_time: str

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("inf")


def sensor_reading(device: int, reading_time: datetime, value: float) -> dict[str, Any]:
    """One well-formed reading."""
    return {
        "device_id": f"sensor-{device:03d}",
        "reading_time": reading_time.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "value": round(value, 2),
    }


def malformed_payload(reading: dict[str, Any], kind: str) -> bytes:
    """A broken variant of ``reading``: ``not_json``, ``truncated``, ``missing_field`` or ``wrong_type``."""
    text = json.dumps(reading)
    if kind == "not_json":
        return f"device={reading['device_id']} value={reading['value']}".encode()
    if kind == "truncated":
        return text[: len(text) // 2].encode()
    if kind == "missing_field":
        return json.dumps({k: v for k, v in reading.items() if k != "value"}).encode()
    if kind == "wrong_type":
        return json.dumps({**reading, "value": "n/a"}).encode()
    raise ValueError(f"unknown malformed kind {kind!r}")


def produce_sensor_readings(
    bootstrap: str,
    *,
    topic: str = DEFAULT_TOPIC,
    count: int = 1000,
    rate: float | None = None,
    devices: int = 10,
    keyed: bool = True,
    partitions: int | None = None,
    malformed_share: float = 0.0,
    seed: int | None = None,
    start_time: datetime | None = None,
    interval_ms: int = 100,
    max_lateness_ms: int = 2000,
    client_config: Mapping[str, str] | None = None,
    on_progress: Callable[[int], None] | None = None,
    timeout: float = 30.0,
    stop: threading.Event | None = None,
    on_delivery: Callable[[bytes, str | None], None] | None = None,
) -> ProduceResult:
    """Produce ``count`` sensor readings to ``topic`` and wait until every one is acknowledged.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: created (with ``partitions`` partitions, default 1) when missing.
        count: number of records.
        rate: records per second to pace at; as fast as possible when None.
        devices: number of distinct devices (``sensor-000`` ...).
        keyed: use the device id as the record key (so one device stays in one partition).
        partitions: partitions of the topic when it has to be created; without keys, records are spread over the
            topic's partitions round-robin.
        malformed_share: share of records (0..1) that are malformed.
        seed: seed of the random values, for reproducible data.
        start_time: event time of the first reading (default: now).
        interval_ms: event-time step between consecutive readings.
        max_lateness_ms: readings jitter back in event time by up to this much (out-of-order arrival).
        client_config: extra producer settings (they win over the defaults: ``linger.ms`` 5, ``acks`` ``all`` and
            ``enable.idempotence`` true, so a record counts as acknowledged only once every in-sync replica has it
            and a retried produce is not written twice).
        on_progress: called with the number of records acknowledged so far.
        timeout: seconds to wait for the final acknowledgements.
        stop: when set, stop producing (before ``count``); the records produced so far are awaited and counted
            (``ProduceResult.records``).
        on_delivery: called with each record's value and its delivery error (None: acknowledged), also for the
            records of a run that then raises.

    Raises:
        OptionError: an argument is out of range.
        BrokerError: the broker is unreachable or refused records.
    """
    from confluent_kafka import KafkaException, Producer

    if count < 0:
        raise OptionError("count", count, "must be >= 0")
    if devices < 1:
        raise OptionError("devices", devices, "must be >= 1")
    if not 0.0 <= malformed_share <= 1.0:
        raise OptionError("malformed_share", malformed_share, "must be between 0 and 1")
    if rate is not None and rate <= 0:
        raise OptionError("rate", rate, "must be > 0")
    if partitions is not None and partitions < 1:
        raise OptionError("partitions", partitions, "must be >= 1")

    topics = list_topics(bootstrap, config=client_config)
    if topic not in topics:
        create_topic(bootstrap, topic, partitions=partitions or 1, exist_ok=True, config=client_config)
        topics = list_topics(bootstrap, config=client_config)
    partition_count = topics[topic]

    rng = random.Random(seed)
    base = start_time or datetime.now(UTC)
    acknowledged = 0
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        nonlocal acknowledged
        if err is not None:
            failures.append(str(err))
        else:
            acknowledged += 1
        if on_delivery is not None:
            on_delivery(msg.value(), None if err is None else str(err))

    try:
        producer = Producer(
            {
                "linger.ms": 5,
                "acks": "all",
                "enable.idempotence": "true",
                **(client_config or {}),
                "bootstrap.servers": bootstrap,
                "logger": logging.getLogger("sparkonce.kafka.client"),
            }
        )
    except KafkaException as err:
        raise BrokerError(f"cannot create a producer for {bootstrap}: {err.args[0].str()}") from err

    malformed = 0
    written_bytes = 0
    first_time = last_time = ""
    started = time.monotonic()
    last_reported = 0
    produced = 0
    for index in range(count):
        if stop is not None and stop.is_set():
            break
        device = rng.randrange(devices)
        lateness = timedelta(milliseconds=rng.uniform(0, max_lateness_ms)) if max_lateness_ms else timedelta()
        reading_time = base + timedelta(milliseconds=index * interval_ms) - lateness
        reading = sensor_reading(device, reading_time, 20.0 + 5.0 * rng.gauss(0, 1))
        if malformed_share and rng.random() < malformed_share:
            payload = malformed_payload(reading, rng.choice(_MALFORMED_KINDS))
            malformed += 1
        else:
            payload = json.dumps(reading, separators=(",", ":")).encode()
        first_time = first_time or reading["reading_time"]
        last_time = reading["reading_time"]
        key = reading["device_id"].encode() if keyed else None
        kwargs: dict[str, Any] = {"key": key, "value": payload, "on_delivery": delivered}
        if not keyed:
            kwargs["partition"] = index % partition_count
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: let deliveries drain
        produced += 1
        written_bytes += len(payload) + (len(key) if key else 0)
        producer.poll(0)
        if rate is not None:
            due = started + (index + 1) / rate
            while (wait := due - time.monotonic()) > 0 and not (stop is not None and stop.is_set()):
                producer.poll(wait)  # serves deliveries; returns early when one arrives
        if on_progress is not None and acknowledged - last_reported >= max(1, count // 200):
            last_reported = acknowledged
            on_progress(acknowledged)
    remaining = producer.flush(timeout)
    seconds = time.monotonic() - started
    if on_progress is not None:
        on_progress(acknowledged)
    if failures:
        raise BrokerError(f"{len(failures)} records to {topic} on {bootstrap} failed: {failures[0]}")
    if remaining:
        raise BrokerError(f"{remaining} records to {topic} on {bootstrap} not acknowledged within {timeout:.0f}s")
    log.info("produced %d sensor readings (%d malformed) to %s", produced, malformed, topic)
    return ProduceResult(
        topic=topic,
        records=produced,
        malformed=malformed,
        partitions=partition_count,
        devices=devices,
        bytes=written_bytes,
        seconds=seconds,
        first_reading_time=first_time,
        last_reading_time=last_time,
    )


__all__ = ["DEFAULT_TOPIC", "ProduceResult", "malformed_payload", "produce_sensor_readings", "sensor_reading"]
