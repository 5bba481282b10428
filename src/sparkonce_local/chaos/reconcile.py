"""Independent reconciliation of every table of a chaos run. Runs on the driver (no Spark, no sparkonce readers).

Independent of the code under test: the topic is read with ``confluent-kafka``, Delta tables with ``deltalake``
(delta-rs), the file sink's folder with ``pyarrow.parquet`` (and its ``_spark_metadata`` log parsed here),
PostgreSQL with ``psycopg``. Every record is identified by where it came from in Kafka, ``(partition, offset)``;
a table is checked against the multiset of those keys it should hold.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from sparkonce.errors import BrokerError, SinkError

Key = tuple[int, int]
"""A Kafka record's ``(partition, offset)``."""


@dataclass(frozen=True)
class TableCheck:
    """One table against what it must hold."""

    table: str
    against: str
    """What it was checked against (``topic``, ``raw``, ``latest bronze row per key``, ...)."""
    path: str
    rows: int
    expected_rows: int
    duplicates: int
    """Rows beyond the first for a key that must appear once."""
    lost: int
    """Expected keys that are missing."""
    extra: int
    """Keys that are not expected at all."""
    mismatched: int = 0
    """Keys present with a wrong value."""

    @property
    def ok(self) -> bool:
        return self.duplicates == 0 and self.lost == 0 and self.extra == 0 and self.mismatched == 0


def read_topic(bootstrap: str, topic: str, *, timeout: float = 120.0) -> dict[Key, bytes | None]:
    """Every record of ``topic``, each partition read from its beginning to the end of partition: key -> value.

    The end is the fetch's end-of-partition, not ``ListOffsets``: the embedded tansu broker was seen answering
    ``ListOffsets(latest)`` (``get_watermark_offsets``) with a smaller end than its fetches reach (222 of 300
    acknowledged records right after producing, 297 of 300 half an hour later), so a reconciliation bounded by
    the watermark would miss records.

    Raises:
        BrokerError: the broker does not answer, or the partitions' ends do not arrive before ``timeout``.
    """
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sparkonce-chaos-reconcile",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=10)
        except KafkaException as err:
            raise BrokerError(f"broker {bootstrap}: cannot list topic {topic!r}: {err}") from err
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            raise BrokerError(f"broker {bootstrap}: topic {topic!r} not found")
        pending = set(info.partitions)
        records: dict[Key, bytes | None] = {}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise BrokerError(f"broker {bootstrap}: topic {topic!r} not read to its end in {timeout:.0f}s")
            for message in consumer.consume(500, timeout=1.0):
                error = message.error()
                partition, offset = message.partition(), message.offset()
                if partition is None or offset is None:
                    continue
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise BrokerError(f"broker {bootstrap}: reading {topic!r}: {error.str()}")
                    pending.discard(partition)
                    continue
                records[(partition, offset)] = message.value()
        return records
    finally:
        consumer.close()


def check_keys(
    table: str,
    path: str,
    against: str,
    found: Iterable[Key],
    expected: Iterable[Key],
    *,
    values: Mapping[Key, Any] | None = None,
    expected_values: Mapping[Key, Any] | None = None,
) -> TableCheck:
    """Compare the keys (with repeats) a table holds to the set of keys it must hold once each."""
    counts = Counter(found)
    wanted = set(expected)
    mismatched = 0
    if values is not None and expected_values is not None:
        mismatched = sum(1 for k, v in values.items() if k in expected_values and expected_values[k] != v)
    return TableCheck(
        table=table,
        against=against,
        path=path,
        rows=sum(counts.values()),
        expected_rows=len(wanted),
        duplicates=sum(c - 1 for c in counts.values() if c > 1),
        lost=len(wanted - counts.keys()),
        extra=len(counts.keys() - wanted),
        mismatched=mismatched,
    )


def delta_rows(
    path: str, columns: list[str] | None = None, *, storage_options: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Rows of the current Delta table at ``path`` (delta-rs; a local path or an object-store URI read with
    ``storage_options``); ``[]`` when there is no table yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path, storage_options=dict(storage_options) if storage_options else None)
    except TableNotFoundError:
        return []
    return list(table.to_pyarrow_table(columns=columns).to_pylist())


def check_topic(topic_records: Mapping[Key, bytes | None], produced: int) -> TableCheck:
    """The topic against what the harness's producer had acknowledged: the broker kept every record once.

    Counted, not keyed (a record has no identity before it has an offset): more records than acknowledged are
    duplicates (a retried produce written twice), fewer are losses (acknowledged records the broker lost, e.g.
    across a broker or object store restart).
    """
    found = len(topic_records)
    return TableCheck(
        table="topic",
        against="acknowledged produces",
        path="",
        rows=found,
        expected_rows=produced,
        duplicates=max(0, found - produced),
        lost=max(0, produced - found),
        extra=0,
    )


def check_topic_values(
    topic_records: Mapping[Key, bytes | None], acknowledged: Counter[bytes], refused: Counter[bytes]
) -> TableCheck:
    """The topic against the producer's delivery reports, value by value (soak mode, where produces meet outages).

    Every acknowledged value must be in the topic as often as it was acknowledged (fewer: lost; values repeat
    rarely, so this is a multiset). A value whose produce was refused or never answered (the broker or its store
    down) may be in the topic at most once per such produce: the producer cannot know whether the broker wrote
    it. Anything beyond is a duplicate (a retried produce written twice); a value never produced is extra.
    """
    found = Counter(v for v in topic_records.values() if v is not None)
    duplicates = lost = extra = 0
    for value, count in found.items():
        allowed = acknowledged.get(value, 0) + refused.get(value, 0)
        if allowed == 0:
            extra += count
        else:
            duplicates += max(0, count - allowed)
    for value, count in acknowledged.items():
        lost += max(0, count - found.get(value, 0))
    return TableCheck(
        table="topic",
        against="acknowledged produces (refused ones at most once)",
        path="",
        rows=len(topic_records),
        expected_rows=sum(acknowledged.values()),
        duplicates=duplicates,
        lost=lost,
        extra=extra + sum(1 for v in topic_records.values() if v is None),
    )


def missing_values(topic_records: Mapping[Key, bytes | None], acknowledged: Counter[bytes]) -> Counter[bytes]:
    """The acknowledged values the topic lacks (as often as they are missing): what ``check_topic_values`` counts
    as lost, for a post-mortem."""
    found = Counter(v for v in topic_records.values() if v is not None)
    return Counter({value: count - found.get(value, 0) for value, count in acknowledged.items()}) - Counter()


def check_raw(
    path: str,
    topic_records: Mapping[Key, bytes | None],
    *,
    table: str = "raw",
    storage_options: Mapping[str, str] | None = None,
) -> TableCheck:
    """Raw Delta table against the topic: every offset once, with the record's value."""
    rows = delta_rows(path, ["partition", "offset", "value"], storage_options=storage_options)
    keys = [(int(r["partition"]), int(r["offset"])) for r in rows]
    values = {(int(r["partition"]), int(r["offset"])): r["value"] for r in rows}
    expected = {k: (v.decode("utf-8", errors="replace") if v is not None else None) for k, v in topic_records.items()}
    return check_keys(table, path, "topic", keys, expected, values=values, expected_values=expected)


def check_bronze(
    bronze: str, quarantine: str, raw_keys: Iterable[Key], *, storage_options: Mapping[str, str] | None = None
) -> TableCheck:
    """Bronze + quarantine against raw: every raw record in exactly one of them."""
    good = delta_rows(bronze, ["_partition", "_offset"], storage_options=storage_options)
    bad = delta_rows(quarantine, ["partition", "offset"], storage_options=storage_options)
    keys = [(int(r["_partition"]), int(r["_offset"])) for r in good]
    keys += [(int(r["partition"]), int(r["offset"])) for r in bad]
    return check_keys("bronze+quarantine", f"{bronze} + {quarantine}", "raw", keys, raw_keys)


def check_gold(
    gold: str,
    bronze: str,
    *,
    keys: tuple[str, ...],
    order_by: tuple[str, ...],
    storage_options: Mapping[str, str] | None = None,
    name: str = "gold",
) -> TableCheck:
    """Gold against the latest bronze row per key (by ``order_by``, then the Kafka offset)."""
    bronze_rows = delta_rows(bronze, storage_options=storage_options)
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in bronze_rows:
        key = tuple(row[k] for k in keys)
        rank = (*(row[c] for c in order_by), row["_offset"])
        current = latest.get(key)
        if current is None or rank > (*(current[c] for c in order_by), current["_offset"]):
            latest[key] = row
    gold_rows = delta_rows(gold, storage_options=storage_options)
    counts = Counter(tuple(r[k] for k in keys) for r in gold_rows)
    mismatched = 0
    for row in gold_rows:
        want = latest.get(tuple(row[k] for k in keys))
        if want is not None and any(want[c] != row.get(c) for c in want):
            mismatched += 1
    return TableCheck(
        table=name,
        against="latest bronze row per key",
        path=gold,
        rows=len(gold_rows),
        expected_rows=len(latest),
        duplicates=sum(c - 1 for c in counts.values() if c > 1),
        lost=len(latest.keys() - counts.keys()),
        extra=len(counts.keys() - latest.keys()),
        mismatched=mismatched,
    )


def check_changes_fed(
    table: str,
    input_table: str,
    *,
    name: str,
    keys: tuple[str, ...],
    order_by: tuple[str, ...],
    storage_options: Mapping[str, str] | None = None,
) -> TableCheck:
    """A merge stage fed by its input's change data feed (``input_mode = "changes"``) against the key-wise final
    state of that input: once every stage has drained, the input's current rows, one per key."""
    from sparkonce.pipeline.feed_state import latest_state, state_differences

    input_rows = delta_rows(input_table, storage_options=storage_options)
    rows = delta_rows(table, storage_options=storage_options)
    found = state_differences(rows, input_rows, keys=keys, order_by=order_by)
    return TableCheck(
        table=name,
        against="the final state of its input's change data feed",
        path=table,
        rows=len(rows),
        expected_rows=len(latest_state(input_rows, keys, order_by)),
        duplicates=found.duplicates,
        lost=found.lost,
        extra=found.extra,
        mismatched=found.mismatched,
    )


def check_postgres(
    dsn: str, table: str, bronze: str, *, storage_options: Mapping[str, str] | None = None
) -> TableCheck:
    """The PostgreSQL table against its source, the bronze table: every bronze row once.

    Raises:
        SinkError: the database does not answer.
    """
    import psycopg
    from psycopg import sql

    expected = [
        (int(r["_partition"]), int(r["_offset"]))
        for r in delta_rows(bronze, ["_partition", "_offset"], storage_options=storage_options)
    ]
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
            found: list[Key] = []
            if exists is not None and exists[0] is not None:
                query = sql.SQL('SELECT "_partition", "_offset" FROM {}').format(sql.Identifier(table))
                found = [(int(p), int(o)) for p, o in conn.execute(query).fetchall()]
    except psycopg.Error as err:
        raise SinkError(f"reconciling PostgreSQL table {table}: {err}") from err
    return check_keys("postgres", f"{table}", "bronze", found, expected)


def file_sink_files(folder: Path, *, through_metadata: bool) -> list[Path]:
    """The parquet files of a Spark file sink's folder: all of them (a glob), or those its ``_spark_metadata`` log
    lists (adds minus deletes, compact files included), as ``spark.read.parquet(folder)`` would read."""
    if not through_metadata:
        return sorted(
            p
            for p in folder.rglob("*.parquet")
            if not any(part.startswith(("_", ".")) for part in p.relative_to(folder).parts)
        )
    log_dir = folder / "_spark_metadata"
    if not log_dir.is_dir():
        return []
    entries = []
    for item in log_dir.iterdir():
        name = item.name.removesuffix(".compact")
        if name.isdigit():
            entries.append((int(name), item))
    if not entries:
        return []
    # The latest compact file holds everything before it; newer delta files add to it.
    entries.sort()
    compacts = [n for n, p in entries if p.name.endswith(".compact")]
    start = compacts[-1] if compacts else 0
    live: dict[str, bool] = {}
    for number, item in entries:
        if number < start:
            continue
        lines = item.read_text().splitlines()[1:]
        for line in lines:
            if not line.strip():
                continue
            entry = json.loads(line)
            path = unquote(urlparse(entry["path"]).path)
            live[path] = entry.get("action", "add") == "add"
    return sorted(Path(p) for p, alive in live.items() if alive)


def check_file_sink(folder: Path, topic_records: Mapping[Key, bytes | None], *, through_metadata: bool) -> TableCheck:
    """The file sink's output against the topic, read by a glob or through ``_spark_metadata``."""
    import pyarrow.parquet as pq

    keys: list[Key] = []
    for path in file_sink_files(folder, through_metadata=through_metadata):
        table = pq.read_table(path, columns=["partition", "offset"])
        keys.extend(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
    name = "raw_files (_spark_metadata)" if through_metadata else "raw_files (glob)"
    return check_keys(name, str(folder), "topic", keys, topic_records)


def checkpoint_batches(checkpoint: str) -> int:
    """Batches committed in a Spark checkpoint: the numbered files of ``commits/``."""
    folder = Path(checkpoint) / "commits"
    if not folder.is_dir():
        return 0
    return sum(1 for p in folder.iterdir() if p.name.isdigit())


__all__ = [
    "Key",
    "TableCheck",
    "check_bronze",
    "check_changes_fed",
    "check_file_sink",
    "check_gold",
    "check_keys",
    "check_postgres",
    "check_raw",
    "check_topic",
    "checkpoint_batches",
    "delta_rows",
    "file_sink_files",
    "read_topic",
]
